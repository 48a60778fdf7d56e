//! The runtime's clocks: the facility's measurement clock (the TSC, or a simulated clock in
//! tests) and the `std::time::Instant` its users speak, mapped onto each other.
//!
//! The public API takes and returns `std::time::Instant` (what quinn and hyper hand a
//! runtime), and `std::time::Instant` is the authority: a timer is complete when
//! `Instant::now()` has reached its deadline, whatever the TSC says. A deadline becomes a
//! soft event `deadline − now` ahead on the measurement clock, measured from two readings
//! taken together, so the only error of the mapping is the TSC's rate against
//! `CLOCK_MONOTONIC` over the wait (its calibration, and NTP's slewing of
//! `CLOCK_MONOTONIC`: parts per million). An event that fires that little early finds its
//! deadline not yet reached and is scheduled again for the rest; the runtime counts those
//! re-arms ([`crate::RuntimeStats::early_fires`]).
//!
//! On a [`SimClock`] the mapping is exact: simulated `std` time is a fixed origin plus the
//! simulated ticks.

use std::time::Instant as StdInstant;

use softtimer::{Clock, Instant, SimClock, Span, SystemClock};

/// A clock a runtime's loops read: the system's measurement clock, or a simulated one.
#[derive(Clone, Debug)]
pub(crate) enum RuntimeClock {
    System(SystemClock),
    Sim(SimClock),
}

impl Clock for RuntimeClock {
    #[inline(always)]
    fn now(&self) -> Instant {
        match self {
            RuntimeClock::System(c) => c.now(),
            RuntimeClock::Sim(c) => c.now(),
        }
    }

    #[inline(always)]
    fn now_unordered(&self) -> Instant {
        match self {
            RuntimeClock::System(c) => c.now_unordered(),
            RuntimeClock::Sim(c) => c.now(),
        }
    }

    #[inline(always)]
    fn resolution_hz(&self) -> u64 {
        match self {
            RuntimeClock::System(c) => c.resolution_hz(),
            RuntimeClock::Sim(c) => c.resolution_hz(),
        }
    }
}

/// The longest span one soft event is scheduled ahead (2^62 ticks, 56 years at 2.6 GHz): a
/// later deadline is checked then and scheduled again, so no deadline overflows the wheel.
const MAX_AHEAD: Span = Span::from_ticks(1 << 62);

/// `std::time::Instant` ↔ measurement clock, for one loop.
#[derive(Clone, Debug)]
pub(crate) struct TimeBase {
    clock: RuntimeClock,
    /// Simulated time only: `std` time at the clock's `origin_ticks`.
    origin: StdInstant,
    origin_ticks: Instant,
}

impl TimeBase {
    pub(crate) fn new(clock: RuntimeClock) -> Self {
        let origin_ticks = clock.now();
        TimeBase {
            clock,
            origin: StdInstant::now(),
            origin_ticks,
        }
    }

    pub(crate) fn clock(&self) -> &RuntimeClock {
        &self.clock
    }

    /// The time now, as `std::time::Instant`: `CLOCK_MONOTONIC` (one vDSO read, the same
    /// `rdtsc` a trigger state makes, never stale), or the simulated time.
    #[inline]
    pub(crate) fn now(&self) -> StdInstant {
        match &self.clock {
            RuntimeClock::System(_) => StdInstant::now(),
            RuntimeClock::Sim(c) => {
                self.origin + c.duration(c.now().saturating_since(self.origin_ticks))
            }
        }
    }

    /// `std` time and measurement-clock time, read together: the `std` time first, so that
    /// a deadline mapped from the pair is due no earlier than the deadline (by the read's
    /// few nanoseconds at most later).
    #[inline]
    pub(crate) fn pair(&self) -> (StdInstant, Instant) {
        let now = self.now();
        (now, self.clock.now())
    }

    /// [`due_time`](Self::due_time) from a [`pair`](Self::pair) read earlier (no clock
    /// read): exact as far as the two clocks keep the same rate since the pair was read.
    #[inline]
    pub(crate) fn due_time_at(
        &self,
        deadline: StdInstant,
        (now, ticks): (StdInstant, Instant),
    ) -> Instant {
        match &self.clock {
            RuntimeClock::System(c) => {
                ticks
                    + c.span(deadline.saturating_duration_since(now))
                        .min(MAX_AHEAD)
            }
            RuntimeClock::Sim(c) => {
                // From the origin (two readings of one simulated clock cannot drift apart),
                // at most `MAX_AHEAD` past now: a capped event that fired is armed again
                // further on, not at the same time, now past, for ever.
                let ahead = deadline.saturating_duration_since(self.origin);
                let limit = ticks.saturating_since(self.origin_ticks) + MAX_AHEAD;
                self.origin_ticks + c.span(ahead).min(limit)
            }
        }
    }

    /// The measurement-clock time at which a soft event for `deadline` should fire: never
    /// before it as far as the clocks agree; see the module documentation for what happens
    /// when they do not.
    #[inline]
    pub(crate) fn due_time(&self, deadline: StdInstant) -> Instant {
        self.due_time_at(deadline, self.pair())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn simulated_time_maps_both_ways_without_early_deadlines() {
        let sim = SimClock::new(1_000_000); // 1 tick = 1 µs
        let base = TimeBase::new(RuntimeClock::Sim(sim.clone()));
        let t0 = base.now();
        // 1.5 µs ahead is due at the second tick: rounded up, never early.
        let deadline = t0 + Duration::from_nanos(1_500);
        let due = base.due_time(deadline);
        assert_eq!(due.ticks(), 2);
        sim.set(due.ticks());
        assert!(base.now() >= deadline);
        sim.set(1);
        assert!(base.now() < deadline);
        // A deadline before the origin is due at once.
        let past = t0.checked_sub(Duration::from_secs(1)).unwrap_or(t0);
        assert_eq!(base.due_time(past).ticks(), 0);
    }

    #[test]
    fn far_deadlines_are_capped_not_overflowed() {
        let sim = SimClock::new(1_000_000_000);
        let base = TimeBase::new(RuntimeClock::Sim(sim.clone()));
        let far = base.now() + Duration::from_secs(1 << 40);
        assert_eq!(base.due_time(far).ticks(), MAX_AHEAD.ticks());
        // Fired there and armed again: further on, not at the time just passed.
        sim.set(MAX_AHEAD.ticks());
        assert_eq!(base.due_time(far).ticks(), 2 * MAX_AHEAD.ticks());
        // A deadline within reach keeps its exact tick.
        let near = base.now() + Duration::from_secs(1);
        assert_eq!(
            base.due_time(near).ticks(),
            MAX_AHEAD.ticks() + 1_000_000_000
        );
    }

    #[test]
    fn system_deadlines_map_ahead_of_now() {
        let base = TimeBase::new(RuntimeClock::System(SystemClock::new()));
        let before = base.clock().now();
        let due = base.due_time(StdInstant::now() + Duration::from_millis(1));
        let hz = base.clock().resolution_hz();
        // At least about 1 ms ahead of a reading taken before (less a part in a thousand
        // for the TSC's calibration).
        assert!(due.saturating_since(before).ticks() >= hz / 1000 * 999 / 1000);
    }
}
