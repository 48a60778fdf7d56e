//! Statistics of a facility: trigger states by source, intervals between trigger states, and
//! how late events fired. Off by default; when off they cost one predictable branch.

use hdrhistogram::Histogram;

use crate::clock::ticks_to_nanos;
use crate::source::TriggerSource;
use crate::time::{Instant, Span};

/// The longest interval or delay the histograms hold exactly (one hour, in ns); longer
/// values are recorded as this.
const MAX_NS: u64 = 3_600_000_000_000;

/// Counters and histograms kept by a facility with statistics on.
///
/// ```
/// use softtimer::{Config, SimClock, SoftTimers, TriggerSource};
/// let clock = SimClock::new(1_000_000);
/// let mut timers: SoftTimers<(), _> =
///     SoftTimers::with_config(clock.clone(), Config { stats: true, ..Config::default() }).unwrap();
/// timers.trigger(TriggerSource::Recv, |_, _| {});
/// clock.advance(7);
/// timers.trigger(TriggerSource::Send, |_, _| {});
/// let stats = timers.stats().unwrap();
/// assert_eq!(stats.triggers(TriggerSource::Recv), 1);
/// // Histograms keep 3 significant digits.
/// let max = stats.trigger_intervals_ns().max();
/// assert!((7_000..7_010).contains(&max), "{max}");
/// ```
#[derive(Debug, Clone)]
pub struct TriggerStats {
    hz: u64,
    counts: [u64; TriggerSource::COUNT],
    last_trigger: Option<Instant>,
    intervals_ns: Histogram<u64>,
    delays_ns: Histogram<u64>,
    fired: u64,
}

impl TriggerStats {
    /// Empty statistics for a clock at `hz`. A runtime that checks the trigger fast path
    /// outside the facility keeps its own and calls [`TriggerStats::record_trigger`].
    pub fn new(hz: u64) -> Self {
        let hist = || Histogram::new_with_bounds(1, MAX_NS, 3).expect("static bounds are valid");
        TriggerStats {
            hz,
            counts: [0; TriggerSource::COUNT],
            last_trigger: None,
            intervals_ns: hist(),
            delays_ns: hist(),
            fired: 0,
        }
    }

    /// Counts a trigger state from `source` at clock time `now`.
    #[inline]
    pub fn record_trigger(&mut self, source: TriggerSource, now: Instant) {
        self.counts[source.index()] += 1;
        if let Some(last) = self.last_trigger {
            // An unordered read may be a few ticks behind the last one: count that as 0.
            let ticks = now.saturating_since(last).ticks();
            let ns = ticks_to_nanos(ticks, self.hz);
            self.intervals_ns.saturating_record(ns.min(MAX_NS));
        }
        self.last_trigger = Some(now);
    }

    #[inline]
    pub(crate) fn on_fire(&mut self, late: Span) {
        self.fired += 1;
        let ns = late.as_nanos(self.hz);
        self.delays_ns.saturating_record(ns.min(MAX_NS));
    }

    /// Trigger states seen from `source`.
    pub fn triggers(&self, source: TriggerSource) -> u64 {
        self.counts[source.index()]
    }

    /// Trigger states seen from every source.
    pub fn total_triggers(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Events fired.
    pub fn fired(&self) -> u64 {
        self.fired
    }

    /// Intervals between consecutive trigger states, in nanoseconds.
    pub fn trigger_intervals_ns(&self) -> &Histogram<u64> {
        &self.intervals_ns
    }

    /// How late each event fired past its due time, in nanoseconds. The paper's delay
    /// `d = actual − T` is this plus one measurement tick.
    pub fn delays_ns(&self) -> &Histogram<u64> {
        &self.delays_ns
    }

    /// Adds another's counts and histograms to these.
    pub fn merge(&mut self, other: &TriggerStats) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.fired += other.fired;
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.intervals_ns.add(&other.intervals_ns);
        let _ = self.delays_ns.add(&other.delays_ns);
    }

    /// Forgets everything counted so far.
    pub fn reset(&mut self) {
        *self = TriggerStats::new(self.hz);
    }
}
