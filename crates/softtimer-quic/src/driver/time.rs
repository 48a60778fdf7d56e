//! The driver's time: its clock mapped onto quinn-proto's `std::time::Instant`s, timers
//! rounded to a granularity, and when to wake next.

use std::sync::OnceLock;

use softtimer::{Instant, Span};

/// Maps the driver's clock onto the `std::time::Instant`s quinn-proto works in: a fixed
/// base plus the clock's time since the driver started. Only differences reach quinn-proto,
/// so a run on a simulated clock is reproducible whatever the base.
#[derive(Clone, Copy)]
pub(crate) struct TimeMap {
    pub(super) std: std::time::Instant,
    pub(super) soft: Instant,
    pub(super) hz: u64,
}

/// The furthest after its start the driver schedules anything: 2^62 ticks, 56 years at
/// 2.6 GHz, a quarter of the clock's circle.
pub(crate) const MAX_AHEAD: Span = Span::from_ticks(1 << 62);

/// The base of every driver's `std::time::Instant`s, read once per process.
pub(super) fn std_base() -> std::time::Instant {
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    *BASE.get_or_init(std::time::Instant::now)
}

impl TimeMap {
    pub(crate) fn to_std(self, t: Instant) -> std::time::Instant {
        self.std + t.saturating_since(self.soft).to_duration(self.hz)
    }
    /// At most [`MAX_AHEAD`] after the driver's start: a later time (quinn arms its idle
    /// timer at the peer's `max_idle_timeout` when ours is zero, up to 2^62 ms away) would
    /// pass half the clock's circle and read as one already past, and the driver would fire
    /// it and arm it again at once, for ever. Capped, it fires decades early, and quinn,
    /// finding nothing expired, asks again.
    pub(crate) fn to_soft(self, t: std::time::Instant) -> Instant {
        let since = Span::from_duration(t.saturating_duration_since(self.std), self.hz);
        self.soft + since.min(MAX_AHEAD)
    }
    /// `t` rounded up to `granularity` from the driver's start (tokio's wheel rounds so).
    pub(super) fn round_up(self, granularity: Option<Span>, t: Instant) -> Instant {
        let Some(g) = granularity else {
            return t;
        };
        let since = t.saturating_since(self.soft).ticks();
        self.soft + Span::from_ticks(since.div_ceil(g.ticks()) * g.ticks())
    }
}

/// When the driver wakes next, and whether the loop may spin before it: at the earlier of the
/// next paced departure and the next event that needs precision (one of quinn's timers, an
/// application wake-up). A departure may run a wake-up late (later departures keep their
/// times, so the spacing holds), so the loop blocks until it instead of spinning, unless a
/// precise event is due within `window` (a wake-up's lateness) after it.
pub(super) fn wake_plan(
    departure: Option<Instant>,
    precise: Option<Instant>,
    window: Span,
) -> (Option<Instant>, bool) {
    match (departure, precise) {
        (Some(d), Some(p)) if p.is_after(d + window) => (Some(d), false),
        (Some(d), Some(p)) => (Some(if p.is_after(d) { d } else { p }), true),
        (Some(d), None) => (Some(d), false),
        (None, p) => (p, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ticks: u64) -> Instant {
        Instant::from_ticks(ticks)
    }

    #[test]
    fn a_departure_alone_is_waited_for_without_spinning() {
        assert_eq!(
            wake_plan(Some(at(100)), None, Span::from_ticks(20)),
            (Some(at(100)), false)
        );
    }

    #[test]
    fn a_timer_well_after_the_departure_leaves_the_departure_unspun() {
        assert_eq!(
            wake_plan(Some(at(100)), Some(at(121)), Span::from_ticks(20)),
            (Some(at(100)), false)
        );
    }

    #[test]
    fn a_timer_within_a_window_after_the_departure_keeps_the_spin_and_the_departure_time() {
        for p in [101, 110, 120] {
            assert_eq!(
                wake_plan(Some(at(100)), Some(at(p)), Span::from_ticks(20)),
                (Some(at(100)), true),
                "timer at {p}"
            );
        }
    }

    #[test]
    fn a_timer_first_is_woken_for_with_the_spin() {
        assert_eq!(
            wake_plan(Some(at(100)), Some(at(80)), Span::from_ticks(20)),
            (Some(at(80)), true)
        );
        assert_eq!(
            wake_plan(None, Some(at(80)), Span::from_ticks(20)),
            (Some(at(80)), true)
        );
    }

    #[test]
    fn nothing_pending_wakes_for_nothing() {
        assert_eq!(wake_plan(None, None, Span::from_ticks(20)), (None, true));
    }

    #[test]
    fn times_round_up_to_the_granularity_from_the_start() {
        let map = TimeMap {
            std: std_base(),
            soft: at(1000),
            hz: 1_000_000_000,
        };
        let g = Some(Span::from_ticks(100));
        assert_eq!(map.round_up(g, at(1001)), at(1100));
        assert_eq!(map.round_up(g, at(1100)), at(1100));
        assert_eq!(map.round_up(None, at(1001)), at(1001));
        let t = at(123_456);
        assert_eq!(map.to_soft(map.to_std(t)), t);
    }

    #[test]
    fn a_time_past_the_clocks_range_is_capped_ahead_not_wrapped_into_the_past() {
        let map = TimeMap {
            std: std_base(),
            soft: at(1000),
            hz: 2_600_000_000,
        };
        // A peer's idle timeout of 2^62 ms, which quinn arms when ours is zero.
        let far = map.std + std::time::Duration::from_millis(1 << 62);
        let soft = map.to_soft(far);
        assert!(soft.is_after(map.soft), "{soft:?}");
        assert_eq!(soft, map.soft + MAX_AHEAD);
        let year = map.std + std::time::Duration::from_secs(365 * 24 * 3600);
        assert!(
            map.to_soft(year)
                .is_after(map.soft + Span::from_ticks(1 << 50))
        );
    }
}
