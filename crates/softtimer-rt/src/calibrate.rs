//! This machine's wake-up cost: how late a thread sleeping with a precise timeout runs again
//! after it, and how much CPU each wake-up costs the thread, at normal priority and under
//! `SCHED_FIFO`. It is the floor every idle figure is read against (a loop that blocks until an
//! event is at least this late), where the calibrated idle policy's spin windows start (wake
//! that much early and spin the rest; the loop then follows its own wake-ups), and how early
//! the backstop's watch wakes before its late line.
//!
//! One probe serves both: [`wakeup_probe`] measures once per process, on a thread of its own
//! (the caller's CPU affinity, the minimal timer slack the loop uses), and
//! [`wakeup_lateness`] is the spin window it implies.
//!
//! A longer sleep wakes later: an idle CPU sinks deeper the longer it idles (on a VM, its
//! virtual CPU stops halt-polling and is descheduled), so a thread that slept 1 ms runs again
//! several times as late as one that slept 100 µs. The probe therefore measures a second
//! wait, [`LONG_WAIT`], and [`long_wait_window`] gives the idle policy the window for it. The
//! loop starts from these and keeps a window per wait length current from its own wake-ups
//! ([`WakeupWindows`](crate::WakeupWindows)).

use std::sync::OnceLock;
use std::time::Duration;

use softtimer::{Clock, SystemClock};

use crate::sys;

/// Sleeps per priority.
const SAMPLES: usize = 128;
/// Each sleep's timeout: long enough to go idle, short enough that the probe takes ~20 ms.
const WAIT: Duration = Duration::from_micros(100);
/// The probe's short sleep. The calibrated idle policy's floor is the window the loop has
/// learnt for a wait this long ([`IdlePolicy::learn`](crate::IdlePolicy::learn)).
pub const SHORT_WAIT: Duration = WAIT;
/// The long wait the probe also measures (fewer samples: it takes longer).
pub const LONG_WAIT: Duration = Duration::from_millis(1);
/// Sleeps of [`LONG_WAIT`] the probe takes.
pub const LONG_WAIT_SAMPLES: usize = 48;
/// The smallest and largest spin window the calibration returns.
const MIN_WINDOW: Duration = Duration::from_micros(2);
const MAX_WINDOW: Duration = Duration::from_micros(200);
/// The probe thread's priority under `SCHED_FIFO` (the helper's).
const FIFO_PRIORITY: i32 = 10;

/// Wake-up lateness and CPU at one scheduling priority, in µs.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WakeupCost {
    /// Median lateness past the timeout.
    pub wakeup_late_p50_us: f64,
    /// 90th percentile of lateness (the calibrated idle policy's window for a short wait
    /// starts at this plus 1 µs).
    pub wakeup_late_p90_us: f64,
    /// 99th percentile of lateness.
    pub wakeup_late_p99_us: f64,
    /// Largest lateness seen.
    pub wakeup_late_max_us: f64,
    /// CPU time the sleeping thread is charged per wake-up (the system call's entry and exit,
    /// the switch in and out; not the timer interrupt itself, which an idle CPU takes).
    pub wakeup_cpu_us: f64,
}

/// What [`wakeup_probe`] measured: `SAMPLES` sleeps of `wait_us` each, in `clock_nanosleep`
/// with a 1 ns timer slack, at normal priority and under `SCHED_FIFO`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WakeupProbe {
    /// The timeout of each sleep, µs.
    pub wait_us: f64,
    /// Sleeps per priority.
    pub samples: usize,
    /// At normal priority (`SCHED_OTHER`), as the event loop sleeps.
    pub normal: WakeupCost,
    /// Under `SCHED_FIFO`, as the loop's helper sleeps; `None` where it was refused.
    pub fifo: Option<WakeupCost>,
    /// Why `SCHED_FIFO` was refused (no `CAP_SYS_NICE`, a real-time budget of zero, …).
    pub fifo_refused: Option<String>,
    /// At normal priority, sleeps of [`LONG_WAIT`] (fewer of them); `None` in older reports.
    #[serde(default)]
    pub normal_long: Option<WakeupCost>,
}

impl WakeupProbe {
    /// Where the calibrated idle policy's window for a short wait starts: the 90th
    /// percentile of lateness at normal priority, plus 1 µs, within 2 ..= 200 µs.
    pub fn spin_window(&self) -> Duration {
        window_of(&self.normal)
    }
}

/// A cost's 90th percentile of lateness plus 1 µs, within 2 ..= 200 µs.
fn window_of(cost: &WakeupCost) -> Duration {
    // Clamped before the conversion: a probe read back from a report may say anything
    // (an absurd or NaN lateness reads as the bound it is past).
    let p90_us = cost.wakeup_late_p90_us;
    let p90_us = if p90_us.is_nan() {
        0.0
    } else {
        p90_us.clamp(0.0, 1e6)
    };
    let p90 = Duration::from_secs_f64(p90_us / 1e6);
    (p90 + Duration::from_micros(1)).clamp(MIN_WINDOW, MAX_WINDOW)
}

/// This machine's wake-up cost, measured once per process (about 100 ms the first time: 128
/// sleeps of 100 µs at each priority and 48 of 1 ms; on a thread spawned from the caller, so
/// on the caller's CPUs).
///
/// ```
/// let probe = softtimer_rt::wakeup_probe();
/// assert_eq!(probe.samples, 128);
/// assert!(probe.normal.wakeup_late_p99_us >= probe.normal.wakeup_late_p50_us);
/// // Refused without the privilege; measured with it.
/// assert_eq!(probe.fifo.is_none(), probe.fifo_refused.is_some());
/// ```
pub fn wakeup_probe() -> WakeupProbe {
    let normal = *normal_cost();
    let fifo = fifo_cost();
    WakeupProbe {
        wait_us: WAIT.as_secs_f64() * 1e6,
        samples: SAMPLES,
        normal,
        fifo: fifo.as_ref().ok().copied(),
        fifo_refused: fifo.as_ref().err().cloned(),
        normal_long: Some(*long_cost()),
    }
}

/// The calibrated idle policy's starting windows, on `clock`'s ticks: [`wakeup_lateness`]
/// for waits up to [`SHORT_WAIT`], [`long_wait_window`] from [`LONG_WAIT`] on, and a
/// straight line between, but the widest window before waits of 8 ms and more, which aim at
/// the lateness's tail
/// ([`WakeupWindows::aiming_at_the_tail_before_long_waits`](crate::WakeupWindows::aiming_at_the_tail_before_long_waits));
/// the loop then keeps them current from its own wake-ups.
pub(crate) fn wakeup_windows<C: Clock>(clock: &C) -> crate::policy::WakeupWindows {
    windows_from(
        clock,
        Duration::ZERO,
        clock.span(Duration::from_micros(1)),
        MIN_WINDOW,
    )
    .aiming_at_the_tail_before_long_waits()
}

/// The windows of a named precision ([`SpinWindow::Precision`](crate::SpinWindow::Precision)):
/// the calibrated ones less the precision to start from, then each following the loop's own
/// wake-ups towards the width that leaves one wake in a hundred more than `precision` late.
/// They learn rather than trust the probe's 99th percentile, which 128 sleeps estimate
/// badly (one preemption of the host sets it) and which a spin cannot help anyway when the
/// host takes the CPU away from a spinning thread as well.
pub(crate) fn precision_windows<C: Clock>(
    clock: &C,
    precision: Duration,
) -> crate::policy::WakeupWindows {
    windows_from(
        clock,
        precision,
        softtimer::Span::ZERO,
        PRECISION_MIN_WINDOW,
    )
    .aiming_at(100, clock.span(precision))
}

/// The narrowest window of a named precision: a wake-up precise enough on its own spins
/// this little, and a window widens from it in steps of a sixteenth (from zero it would
/// take a tick at a time).
const PRECISION_MIN_WINDOW: Duration = Duration::from_micros(1);

/// Windows starting at the calibrated ones less `less` (within `min ..= MAX_WINDOW`).
fn windows_from<C: Clock>(
    clock: &C,
    less: Duration,
    margin: softtimer::Span,
    min: Duration,
) -> crate::policy::WakeupWindows {
    let (short, long) = (wakeup_lateness(), long_wait_window());
    let (short, long) = (short.saturating_sub(less), long.saturating_sub(less));
    let initial = |wait: softtimer::Span| {
        let wait = clock.duration(wait);
        if wait <= SHORT_WAIT {
            return clock.span(short);
        }
        if wait >= LONG_WAIT {
            return clock.span(long);
        }
        let along = (wait - SHORT_WAIT).as_secs_f64() / (LONG_WAIT - SHORT_WAIT).as_secs_f64();
        clock.span(short + (long - short).mul_f64(along))
    };
    crate::policy::WakeupWindows::new(
        clock.span(Duration::from_micros(64)),
        initial,
        margin,
        clock.span(min),
        clock.span(MAX_WINDOW),
    )
}

/// The spin window for waits of [`LONG_WAIT`] and more: the 90th percentile of a long
/// sleep's lateness at normal priority, plus 1 µs, within 2 ..= 200 µs, and never narrower
/// than [`wakeup_lateness`]. Measured once per process (about 50 ms the first time).
///
/// ```
/// use std::time::Duration;
/// let window = softtimer_rt::long_wait_window();
/// assert!((Duration::from_micros(2)..=Duration::from_micros(200)).contains(&window));
/// ```
pub fn long_wait_window() -> Duration {
    window_of(long_cost()).max(wakeup_lateness())
}

/// Wake-up lateness of a blocked thread on this machine, as a spin window (where the
/// calibrated idle policy's window for a short wait starts), from the same measurement as
/// [`wakeup_probe`]'s normal priority (which it runs, once per process, if it has not run
/// yet: about 20 ms).
pub fn wakeup_lateness() -> Duration {
    window_of(normal_cost())
}

/// The wake-up cost at normal priority (the loop's), measured once per process.
pub(crate) fn normal_wakeup() -> WakeupCost {
    *normal_cost()
}

fn normal_cost() -> &'static WakeupCost {
    static NORMAL: OnceLock<WakeupCost> = OnceLock::new();
    NORMAL.get_or_init(|| on_probe_thread(false, SAMPLES, WAIT).unwrap_or(FALLBACK))
}

fn long_cost() -> &'static WakeupCost {
    static LONG: OnceLock<WakeupCost> = OnceLock::new();
    LONG.get_or_init(|| on_probe_thread(false, LONG_WAIT_SAMPLES, LONG_WAIT).unwrap_or(FALLBACK))
}

fn fifo_cost() -> &'static Result<WakeupCost, String> {
    static FIFO: OnceLock<Result<WakeupCost, String>> = OnceLock::new();
    FIFO.get_or_init(|| on_probe_thread(true, SAMPLES, WAIT))
}

/// What the probe reports if it cannot run at all (no thread could be spawned): the largest
/// window, so that the idle policy errs towards precision.
const FALLBACK: WakeupCost = WakeupCost {
    wakeup_late_p50_us: 200.0,
    wakeup_late_p90_us: 200.0,
    wakeup_late_p99_us: 200.0,
    wakeup_late_max_us: 200.0,
    wakeup_cpu_us: 0.0,
};

/// Runs the sleeps on a thread of its own, so that the caller's priority and timer slack stay
/// as they are.
fn on_probe_thread(fifo: bool, samples: usize, wait: Duration) -> Result<WakeupCost, String> {
    std::thread::Builder::new()
        .name("softtimer-probe".into())
        .spawn(move || {
            let _ = sys::minimal_timer_slack();
            if fifo {
                sys::set_realtime_priority(FIFO_PRIORITY).map_err(|e| e.to_string())?;
            }
            Ok(sleep_and_measure(samples, wait))
        })
        .map_err(|e| e.to_string())?
        .join()
        .map_err(|_| "the probe thread panicked".to_string())?
}

fn sleep_and_measure(samples: usize, wait: Duration) -> WakeupCost {
    let ts = crate::timerfd::timespec(wait);
    // Measured on the facility's own clock, the clock the loops run on.
    let clock = SystemClock::new();
    let cpu_before = sys::thread_cpu_ns();
    let mut late_us: Vec<f64> = (0..samples)
        .map(|_| {
            let start = clock.now();
            let _ =
                rustix::thread::clock_nanosleep_relative(rustix::thread::ClockId::Monotonic, &ts);
            clock
                .duration(clock.now().saturating_since(start))
                .saturating_sub(wait)
                .as_secs_f64()
                * 1e6
        })
        .collect();
    let cpu_us = (sys::thread_cpu_ns() - cpu_before) as f64 / 1e3 / samples.max(1) as f64;
    late_us.sort_by(f64::total_cmp);
    let at = |q: f64| late_us[((late_us.len() - 1) as f64 * q).round() as usize];
    WakeupCost {
        wakeup_late_p50_us: at(0.5),
        wakeup_late_p90_us: at(0.9),
        wakeup_late_p99_us: at(0.99),
        wakeup_late_max_us: at(1.0),
        wakeup_cpu_us: cpu_us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe read back from a report with an absurd lateness gives a window within its
    /// bounds, not a panic.
    #[test]
    fn an_absurd_lateness_gives_a_bounded_window() {
        for late in [1e300, f64::INFINITY, f64::NAN, -5.0] {
            let cost = WakeupCost {
                wakeup_late_p50_us: 0.0,
                wakeup_late_p90_us: late,
                wakeup_late_p99_us: 0.0,
                wakeup_late_max_us: 0.0,
                wakeup_cpu_us: 0.0,
            };
            let window = window_of(&cost);
            assert!(
                (MIN_WINDOW..=MAX_WINDOW).contains(&window),
                "{late}: {window:?}"
            );
        }
    }

    #[test]
    fn the_spin_window_is_the_p90_plus_a_microsecond_within_bounds() {
        let cost = |p90| WakeupCost {
            wakeup_late_p50_us: 1.0,
            wakeup_late_p90_us: p90,
            wakeup_late_p99_us: 2.0 * p90,
            wakeup_late_max_us: 3.0 * p90,
            wakeup_cpu_us: 5.0,
        };
        let probe = |p90| WakeupProbe {
            wait_us: 100.0,
            samples: SAMPLES,
            normal: cost(p90),
            fifo: None,
            fifo_refused: Some("test".into()),
            normal_long: None,
        };
        assert_eq!(probe(9.0).spin_window(), Duration::from_micros(10));
        assert_eq!(probe(0.0).spin_window(), MIN_WINDOW);
        assert_eq!(probe(5000.0).spin_window(), MAX_WINDOW);
    }

    #[test]
    fn a_probe_round_trips_through_json_with_the_names_info_prints() {
        let probe = wakeup_probe();
        let json = serde_json::to_value(&probe).unwrap();
        for key in ["wakeup_late_p50_us", "wakeup_late_p99_us", "wakeup_cpu_us"] {
            assert!(json["normal"][key].is_number(), "{key}: {json}");
        }
        let back: WakeupProbe = serde_json::from_value(json).unwrap();
        assert_eq!(back, probe);
        // The calibrated policy's starting window comes from the same measurement.
        assert_eq!(wakeup_lateness(), probe.spin_window());
        let normal = probe.normal;
        assert!(normal.wakeup_late_p50_us <= normal.wakeup_late_p90_us);
        assert!(normal.wakeup_late_p90_us <= normal.wakeup_late_p99_us);
        assert!(normal.wakeup_late_p99_us <= normal.wakeup_late_max_us);
        assert!(normal.wakeup_cpu_us > 0.0, "a wake-up costs some CPU");
        let long = probe.normal_long.expect("the long wait is measured");
        assert!(
            long.wakeup_cpu_us > 0.0,
            "a long sleep's wake-up costs some CPU"
        );
    }
}
