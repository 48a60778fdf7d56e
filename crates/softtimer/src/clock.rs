//! The measurement clock: `measure_time()` and `measure_resolution()`.
//!
//! The facility reads the clock at every trigger state, so a read must be as cheap as the
//! machine allows. On x86-64 with an invariant TSC that the kernel itself trusts as its
//! clocksource, that is an ordered `rdtsc` (about 20–30 ns on a VM, less on bare metal);
//! elsewhere it is `CLOCK_MONOTONIC` through the vDSO (nanosecond ticks).
//!
//! The clock is a trait so that the facility can run on a [`SimClock`] in tests: a simulated
//! clock makes every timing decision deterministic.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::time::{Instant, Span};

/// A source of time for the facility: ticks of a fixed, known frequency.
///
/// Implementations must be monotonic (never go backwards as observed by one thread) and
/// cheap: the facility calls [`Clock::now`] once at every trigger state.
pub trait Clock {
    /// The current time in ticks. Need not relate to any wall-clock epoch. Ordered: a read
    /// made after observing another thread's write is not smaller than a read that thread
    /// made before writing.
    fn now(&self) -> Instant;
    /// The current time, possibly read a little before earlier instructions finished. Used
    /// by the trigger-state check, which only compares against this thread's own due times:
    /// a read can only be *earlier* than program order, never later, so an event still
    /// never fires early. Defaults to [`Clock::now`].
    #[inline(always)]
    fn now_unordered(&self) -> Instant {
        self.now()
    }
    /// Ticks per second.
    fn resolution_hz(&self) -> u64;
    /// `duration` in ticks of this clock, rounded up (so a delay is never shortened).
    fn span(&self, duration: Duration) -> Span {
        Span::from_duration(duration, self.resolution_hz())
    }
    /// `span` ticks of this clock as a `Duration` (rounded down).
    fn duration(&self, span: Span) -> Duration {
        span.to_duration(self.resolution_hz())
    }
}

/// Where the system clock gets its ticks from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockSource {
    /// The CPU's invariant time-stamp counter, read with an ordered `rdtsc`.
    Tsc,
    /// `clock_gettime(CLOCK_MONOTONIC)`, in nanoseconds.
    Monotonic,
}

impl ClockSource {
    /// A short lower-case name (`tsc` or `monotonic`).
    pub fn name(self) -> &'static str {
        match self {
            ClockSource::Tsc => "tsc",
            ClockSource::Monotonic => "monotonic",
        }
    }
}

/// The process-wide measurement clock: the TSC where it is sound, `CLOCK_MONOTONIC` otherwise.
///
/// Detection and calibration run once per process (about 30 ms, the first time
/// [`SystemClock::new`] is called); later calls copy the result.
///
/// The environment variable `SOFTTIMER_CLOCK` (`tsc` or `monotonic`) overrides the choice;
/// asking for `tsc` where it is unusable falls back to `monotonic` and says so in
/// [`ClockInfo::reason`].
///
/// ```
/// use softtimer::{Clock, SystemClock};
/// let clock = SystemClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// assert!(clock.resolution_hz() >= 1_000_000);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    source: ClockSource,
    hz: u64,
}

/// What [`SystemClock`] chose, and why.
#[derive(Clone, Debug)]
pub struct ClockInfo {
    /// The source in use.
    pub source: ClockSource,
    /// Ticks per second of the source in use.
    pub hz: u64,
    /// Why this source was chosen (or why the TSC was rejected).
    pub reason: String,
}

impl SystemClock {
    /// The detected system clock (detection runs once per process).
    pub fn new() -> Self {
        let info = Self::info();
        SystemClock {
            source: info.source,
            hz: info.hz,
        }
    }

    /// A clock on `CLOCK_MONOTONIC`, whatever the detection would choose.
    pub fn monotonic() -> Self {
        SystemClock {
            source: ClockSource::Monotonic,
            hz: 1_000_000_000,
        }
    }

    /// The result of detection: source, frequency and the reason for the choice.
    pub fn info() -> &'static ClockInfo {
        static INFO: OnceLock<ClockInfo> = OnceLock::new();
        INFO.get_or_init(detect)
    }

    /// Which source this clock reads.
    pub fn source(&self) -> ClockSource {
        self.source
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline(always)]
    fn now(&self) -> Instant {
        Instant::from_ticks(match self.source {
            ClockSource::Tsc => tsc::read_ordered(),
            ClockSource::Monotonic => monotonic_nanos(),
        })
    }

    #[inline(always)]
    fn now_unordered(&self) -> Instant {
        Instant::from_ticks(match self.source {
            ClockSource::Tsc => tsc::read_unordered(),
            ClockSource::Monotonic => monotonic_nanos(),
        })
    }

    #[inline(always)]
    fn resolution_hz(&self) -> u64 {
        self.hz
    }
}

/// `ticks` of a clock at `hz`, in nanoseconds (saturating at `u64::MAX`).
pub(crate) fn ticks_to_nanos(ticks: u64, hz: u64) -> u64 {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(hz.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// `nanos` in ticks of a clock at `hz`, rounded up (saturating at `u64::MAX`).
pub(crate) fn nanos_to_ticks(nanos: u64, hz: u64) -> u64 {
    let ticks = (u128::from(nanos) * u128::from(hz)).div_ceil(1_000_000_000);
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

/// `CLOCK_MONOTONIC` in nanoseconds.
#[inline(always)]
pub fn monotonic_nanos() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // CLOCK_MONOTONIC is never negative; the casts cannot lose information.
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// A simulated clock for deterministic tests. Clones share one time.
///
/// ```
/// use softtimer::{Clock, SimClock};
/// let clock = SimClock::new(1_000_000); // 1 MHz: one tick is a microsecond
/// let shared = clock.clone();
/// clock.advance(5);
/// assert_eq!(shared.now().ticks(), 5);
/// ```
#[derive(Clone, Debug)]
pub struct SimClock {
    now: Arc<AtomicU64>,
    hz: u64,
}

impl SimClock {
    /// A clock at time 0 ticking at `hz` (at least 1).
    pub fn new(hz: u64) -> Self {
        Self::starting_at(0, hz)
    }

    /// A clock at time `start` ticking at `hz` (at least 1).
    pub fn starting_at(start: u64, hz: u64) -> Self {
        SimClock {
            now: Arc::new(AtomicU64::new(start)),
            hz: hz.max(1),
        }
    }

    /// Moves the clock forward by `ticks` (wrapping at `u64::MAX`, like a real counter).
    /// Atomic: clones advancing at once from several threads lose no ticks.
    pub fn advance(&self, ticks: u64) {
        self.now.fetch_add(ticks, Ordering::Relaxed);
    }

    /// Sets the clock to `ticks`.
    pub fn set(&self, ticks: u64) {
        self.now.store(ticks, Ordering::Relaxed);
    }
}

impl Clock for SimClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::from_ticks(self.now.load(Ordering::Relaxed))
    }
    fn resolution_hz(&self) -> u64 {
        self.hz
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline(always)]
    fn now(&self) -> Instant {
        (**self).now()
    }
    #[inline(always)]
    fn now_unordered(&self) -> Instant {
        (**self).now_unordered()
    }
    fn resolution_hz(&self) -> u64 {
        (**self).resolution_hz()
    }
}

fn detect() -> ClockInfo {
    let wanted = std::env::var("SOFTTIMER_CLOCK").ok();
    let monotonic = |reason: String| ClockInfo {
        source: ClockSource::Monotonic,
        hz: 1_000_000_000,
        reason,
    };
    if wanted.as_deref() == Some("monotonic") {
        return monotonic("SOFTTIMER_CLOCK=monotonic".into());
    }
    let prefix = match wanted.as_deref() {
        None | Some("tsc") => String::new(),
        Some(other) => format!("SOFTTIMER_CLOCK={other:?} is not tsc or monotonic, ignored; "),
    };
    match tsc::usable() {
        Err(why) => monotonic(format!("{prefix}TSC not used: {why}")),
        Ok(()) => match calibrate_tsc() {
            Ok(hz) => ClockInfo {
                source: ClockSource::Tsc,
                hz,
                reason: format!(
                    "{prefix}invariant TSC (constant_tsc, nonstop_tsc), kernel clocksource is tsc, \
                     calibration against CLOCK_MONOTONIC agrees"
                ),
            },
            Err(why) => monotonic(format!("{prefix}TSC not used: {why}")),
        },
    }
}

/// Reads (tsc, monotonic ns) as a tight pair: the best of a few tries, so that a preemption
/// between the two reads does not skew the calibration.
fn paired_read() -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..16 {
        let a = tsc::read_ordered();
        let ns = monotonic_nanos();
        let b = tsc::read_ordered();
        if b.wrapping_sub(a) < best.2 {
            best = (a + (b - a) / 2, ns, b.wrapping_sub(a));
        }
    }
    (best.0, best.1)
}

fn measure_tsc_hz(window: Duration) -> Option<f64> {
    let (t0, n0) = paired_read();
    std::thread::sleep(window);
    let (t1, n1) = paired_read();
    let dt = t1.checked_sub(t0)?;
    let dn = n1.checked_sub(n0)?;
    (dn > 0).then(|| dt as f64 * 1e9 / dn as f64)
}

/// Two independent 12 ms calibrations must agree within 0.5 % and give a plausible rate.
fn calibrate_tsc() -> Result<u64, String> {
    let window = Duration::from_millis(12);
    let a = measure_tsc_hz(window).ok_or("TSC went backwards during calibration")?;
    let b = measure_tsc_hz(window).ok_or("TSC went backwards during calibration")?;
    let spread = (a - b).abs() / a.max(b);
    if spread > 0.005 {
        return Err(format!(
            "two calibrations against CLOCK_MONOTONIC disagree by {:.2} % ({a:.0} vs {b:.0} Hz)",
            spread * 100.0
        ));
    }
    let hz = (a + b) / 2.0;
    if !(1e8..=1e11).contains(&hz) {
        return Err(format!("implausible TSC rate {hz:.0} Hz"));
    }
    Ok(hz.round() as u64)
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod tsc {
    /// Reads the TSC after all earlier instructions have completed (`lfence; rdtsc`, as the
    /// kernel's `rdtsc_ordered`), so that a value read after observing another thread's
    /// write is never smaller than one that thread read before writing.
    #[inline(always)]
    pub fn read_ordered() -> u64 {
        // SAFETY: `lfence` and `rdtsc` exist on every x86-64 CPU (SSE2 is part of the base
        // ISA), touch no memory and have no preconditions.
        unsafe {
            core::arch::x86_64::_mm_lfence();
            core::arch::x86_64::_rdtsc()
        }
    }

    /// Reads the TSC with a plain `rdtsc`, which may execute before earlier instructions
    /// complete.
    #[inline(always)]
    pub fn read_unordered() -> u64 {
        // SAFETY: `rdtsc` exists on every x86-64 CPU, touches no memory and has no
        // preconditions (user-mode reads are allowed unless CR4.TSD is set, which Linux does
        // not do for processes that have not asked for it).
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Whether the TSC is invariant and the kernel trusts it as its own clocksource (which
    /// means its watchdog found it synchronised across CPUs and stable).
    pub fn usable() -> Result<(), String> {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo")
            .map_err(|e| format!("cannot read /proc/cpuinfo: {e}"))?;
        let flags = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .ok_or("no flags line in /proc/cpuinfo")?;
        for needed in ["constant_tsc", "nonstop_tsc"] {
            if !flags.split_whitespace().any(|f| f == needed) {
                return Err(format!(
                    "CPU does not report {needed} (TSC is not invariant)"
                ));
            }
        }
        let path = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
        let current =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        if current.trim() != "tsc" {
            return Err(format!(
                "the kernel's clocksource is {:?}, not tsc (it does not trust the TSC here)",
                current.trim()
            ));
        }
        Ok(())
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tsc {
    pub fn read_ordered() -> u64 {
        super::monotonic_nanos()
    }
    pub fn read_unordered() -> u64 {
        super::monotonic_nanos()
    }
    pub fn usable() -> Result<(), String> {
        Err("not an x86-64 CPU".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip_and_saturate() {
        assert_eq!(ticks_to_nanos(3_000, 3_000_000_000), 1_000);
        assert_eq!(nanos_to_ticks(1_000, 3_000_000_000), 3_000);
        // Rounds up: 1 ns at 1 MHz is one whole tick, never zero.
        assert_eq!(nanos_to_ticks(1, 1_000_000), 1);
        assert_eq!(nanos_to_ticks(u64::MAX, 10_000_000_000), u64::MAX);
        assert_eq!(ticks_to_nanos(u64::MAX, 1), u64::MAX);
        assert_eq!(ticks_to_nanos(5, 0), 5_000_000_000, "hz 0 is treated as 1");
    }

    #[test]
    fn sim_clock_wraps_like_a_counter() {
        let c = SimClock::starting_at(u64::MAX - 1, 1000);
        c.advance(3);
        assert_eq!(c.now().ticks(), 1);
    }

    #[test]
    fn sim_clock_advances_atomically_from_many_threads() {
        let c = SimClock::new(1000);
        std::thread::scope(|s| {
            for _ in 0..4 {
                let c = c.clone();
                s.spawn(move || {
                    for _ in 0..10_000 {
                        c.advance(1);
                    }
                });
            }
        });
        assert_eq!(c.now().ticks(), 40_000);
    }
}
