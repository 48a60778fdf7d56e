//! Named precision: the cheapest way for an idle loop to send on time within a stated error.
//!
//! A program that waits for its events (a pacer between datagrams) pays for precision in two
//! ways: a *spin window* (wake that much before the due time and spin the rest, which
//! removes the wake-up's lateness at the cost of the spin) and *batching* (send `n` datagrams
//! back to back per wake-up, every `n` intervals, which divides the wake-ups by `n` at the
//! cost of sending the last of them `(n − 1)` intervals early). [`plan_precision`] takes the
//! error a program can live with, the 99th percentile of how far a datagram leaves from its
//! scheduled time (late or early), and this machine's measured wake-up lateness
//! ([`wakeup_probe`](crate::wakeup_probe)), and picks the cheapest pair that meets it:
//!
//! * the **spin window** is just what brings the machine's p99 wake-up lateness within the
//!   precision, `max(0, p99 lateness − precision)`: none at all when a plain wake-up is precise
//!   enough, which is the cheapest setting there is;
//! * the **batch** is as many datagrams per wake-up as the precision leaves room for: the last
//!   of `n` leaves `(n − 1)` intervals early, so `n = 1 + ⌊precision / interval⌋`.
//!
//! A datagram's error is then at most the larger of the lateness left after spinning and the
//! batch's earliness, so the two choices do not constrain each other, and each is the
//! cheapest on its own: the spin's CPU grows with the window, and the CPU per datagram of the
//! wake-ups shrinks with the batch. The pure function is what a program calls with a probe
//! (`pace --precision` does); a soft loop given
//! [`SpinWindow::Precision`](crate::SpinWindow::Precision) instead learns its windows
//! towards the precision from its own wake-ups (no batch: the loop does not know the
//! application's interval), since a short probe's 99th percentile is one preemption away
//! from anything.

use std::time::Duration;

use crate::calibrate::WakeupCost;

/// What [`plan_precision`] picked, and why: the expected error and CPU under this machine's
/// measured wake-up lateness.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PrecisionPlan {
    /// The precision asked for: the p99 of |departure − scheduled time|, µs.
    pub precision_us: f64,
    /// The idle loop's spin window.
    pub spin_window: Duration,
    /// Datagrams (events' worth of work) sent back to back per wake-up.
    pub per_wakeup: u32,
    /// The p99 lateness expected after spinning: the probe's p99 minus the window, µs.
    pub expected_late_p99_us: f64,
    /// How early the last datagram of a batch leaves: `(per_wakeup − 1)` intervals, µs.
    pub batch_early_us: f64,
    /// The CPU expected per datagram for waiting (a wake-up and its spin, shared by the
    /// batch), µs: what the plan minimises; the sends themselves are not counted.
    pub expected_wait_cpu_us: f64,
}

/// The cheapest spin window and batch that keep the p99 departure error within `precision`,
/// for datagrams `interval` apart (`None`: the interval is not known, so no batching), given
/// this machine's wake-up cost at the loop's priority (the probe's `normal`). The batch is
/// at most `max_per_wakeup` (at least 1).
///
/// ```
/// use std::time::Duration;
/// use softtimer_rt::{WakeupCost, plan_precision};
///
/// // A machine whose precise sleeps wake 20 µs late at the 99th percentile.
/// let probe = WakeupCost {
///     wakeup_late_p50_us: 8.0,
///     wakeup_late_p90_us: 14.0,
///     wakeup_late_p99_us: 20.0,
///     wakeup_late_max_us: 60.0,
///     wakeup_cpu_us: 20.0,
/// };
/// let interval = Some(Duration::from_micros(120));
/// // 50 µs: a plain wake-up is precise enough; no spin, no batch.
/// let p = plan_precision(&probe, Duration::from_micros(50), interval, 8);
/// assert_eq!((p.spin_window, p.per_wakeup), (Duration::ZERO, 1));
/// // 5 µs: spin the last 15 µs.
/// let p = plan_precision(&probe, Duration::from_micros(5), interval, 8);
/// assert_eq!((p.spin_window, p.per_wakeup), (Duration::from_micros(15), 1));
/// // 500 µs: five datagrams per wake-up (the last leaves 480 µs early).
/// let p = plan_precision(&probe, Duration::from_micros(500), interval, 8);
/// assert_eq!((p.spin_window, p.per_wakeup), (Duration::ZERO, 5));
/// ```
pub fn plan_precision(
    wakeup: &WakeupCost,
    precision: Duration,
    interval: Option<Duration>,
    max_per_wakeup: u32,
) -> PrecisionPlan {
    let precision_us = precision.as_secs_f64() * 1e6;
    let late_p99 = wakeup.wakeup_late_p99_us.max(0.0);
    // Whole microseconds, rounded up, so that the window is never a hair short.
    let window_us = (late_p99 - precision_us).max(0.0).ceil();
    let per_wakeup = match interval.filter(|i| !i.is_zero()) {
        Some(interval) => {
            let room = precision.as_nanos() / interval.as_nanos();
            u32::try_from(room.saturating_add(1))
                .unwrap_or(u32::MAX)
                .clamp(1, max_per_wakeup.max(1))
        }
        None => 1,
    };
    let interval_us = interval.map_or(0.0, |i| i.as_secs_f64() * 1e6);
    PrecisionPlan {
        precision_us,
        spin_window: Duration::from_micros(window_us as u64),
        per_wakeup,
        expected_late_p99_us: (late_p99 - window_us).max(0.0),
        batch_early_us: f64::from(per_wakeup - 1) * interval_us,
        expected_wait_cpu_us: (wakeup.wakeup_cpu_us + expected_spin_us(wakeup, window_us))
            / f64::from(per_wakeup),
    }
}

/// The spin a wake-up `window_us` early costs on average, µs: the window less the lateness
/// that eats into it, over the probe's lateness taken as four atoms (half at its median, 40 %
/// at its 90th percentile, 9 % at its 99th, 1 % at its largest).
fn expected_spin_us(wakeup: &WakeupCost, window_us: f64) -> f64 {
    [
        (0.5, wakeup.wakeup_late_p50_us),
        (0.4, wakeup.wakeup_late_p90_us),
        (0.09, wakeup.wakeup_late_p99_us),
        (0.01, wakeup.wakeup_late_max_us),
    ]
    .iter()
    .map(|&(weight, late)| weight * (window_us - late.max(0.0)).max(0.0))
    .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(p50: f64, p90: f64, p99: f64, max: f64, cpu: f64) -> WakeupCost {
        WakeupCost {
            wakeup_late_p50_us: p50,
            wakeup_late_p90_us: p90,
            wakeup_late_p99_us: p99,
            wakeup_late_max_us: max,
            wakeup_cpu_us: cpu,
        }
    }

    const US: fn(u64) -> Duration = Duration::from_micros;

    #[test]
    fn a_precision_the_plain_wake_up_meets_costs_no_spin() {
        let p = plan_precision(&probe(5.0, 9.0, 30.0, 80.0, 20.0), US(30), None, 8);
        assert_eq!(p.spin_window, Duration::ZERO);
        assert_eq!(p.per_wakeup, 1);
        assert_eq!(p.expected_late_p99_us, 30.0);
        assert_eq!(p.expected_wait_cpu_us, 20.0);
    }

    #[test]
    fn a_finer_precision_spins_what_the_wake_up_misses_by() {
        let machine = probe(5.0, 9.0, 30.0, 80.0, 20.0);
        let p = plan_precision(&machine, US(10), None, 8);
        assert_eq!(p.spin_window, US(20));
        assert_eq!(p.expected_late_p99_us, 10.0);
        // A fractional miss is rounded up to a whole microsecond of spin.
        let p = plan_precision(&probe(5.0, 9.0, 30.4, 80.0, 20.0), US(10), None, 8);
        assert_eq!(p.spin_window, US(21));
        // Zero error asked: spin the whole p99.
        let p = plan_precision(&machine, Duration::ZERO, None, 8);
        assert_eq!(p.spin_window, US(30));
        assert_eq!(p.expected_late_p99_us, 0.0);
    }

    #[test]
    fn the_spin_costs_the_window_less_the_lateness_that_eats_into_it() {
        let machine = probe(5.0, 9.0, 30.0, 80.0, 20.0);
        // A 20 µs window: 0.5 × 15 + 0.4 × 11 = 11.9 µs of spin per wake-up.
        let p = plan_precision(&machine, US(10), None, 8);
        assert!(
            (p.expected_wait_cpu_us - (20.0 + 11.9)).abs() < 1e-9,
            "{p:?}"
        );
        // Finer precision is never cheaper.
        let mut last = 0.0;
        for us in (0..=40).rev() {
            let cpu = plan_precision(&machine, US(us), None, 8).expected_wait_cpu_us;
            assert!(cpu >= last, "{us} µs: {cpu} < {last}");
            last = cpu;
        }
    }

    #[test]
    fn a_coarse_precision_batches_as_many_as_it_leaves_room_for() {
        let machine = probe(5.0, 9.0, 30.0, 80.0, 20.0);
        let interval = Some(US(100));
        for (precision, n) in [(99, 1), (100, 2), (250, 3), (700, 8), (5_000, 8)] {
            let p = plan_precision(&machine, US(precision), interval, 8);
            assert_eq!(p.per_wakeup, n, "{precision} µs");
            assert!(p.batch_early_us <= precision as f64, "{p:?}");
            assert_eq!(p.spin_window, Duration::ZERO);
            assert!((p.expected_wait_cpu_us - 20.0 / f64::from(n)).abs() < 1e-9);
        }
        // Batching and spinning do not trade: a precision below the wake-up's lateness still
        // spins, and batches if the interval is short enough.
        let p = plan_precision(&machine, US(12), Some(US(5)), 8);
        assert_eq!((p.spin_window, p.per_wakeup), (US(18), 3));
        // A batch limit of 0 still sends one; an unknown or zero interval never batches.
        assert_eq!(plan_precision(&machine, US(900), interval, 0).per_wakeup, 1);
        assert_eq!(plan_precision(&machine, US(900), None, 8).per_wakeup, 1);
        assert_eq!(
            plan_precision(&machine, US(900), Some(Duration::ZERO), 8).per_wakeup,
            1
        );
    }

    #[test]
    fn a_plan_round_trips_through_json() {
        let p = plan_precision(&probe(5.0, 9.0, 30.0, 80.0, 20.0), US(7), Some(US(3)), 4);
        let json = serde_json::to_string(&p).unwrap();
        let back: PrecisionPlan = serde_json::from_str(&json).unwrap();
        // JSON's decimal floats may move the last bit.
        assert!((back.expected_wait_cpu_us - p.expected_wait_cpu_us).abs() < 1e-9);
        let exact = |p: PrecisionPlan| PrecisionPlan {
            expected_wait_cpu_us: 0.0,
            ..p
        };
        assert_eq!(exact(back), exact(p));
    }
}
