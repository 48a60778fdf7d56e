//! How long runs last, in quick and full mode: every duration and repetition count of the
//! lab and the benchmarks, in one place.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long runs last: a quick run (a few seconds per step, as CI does) or the full one.
/// Every duration and repetition count of the lab and the benchmarks is here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLength {
    /// Short runs.
    pub quick: bool,
    /// E15's closed connections held, where the command line set it (`--e15-held`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e15_held: Option<usize>,
}

impl RunLength {
    /// Quick or full.
    pub fn new(quick: bool) -> Self {
        RunLength {
            quick,
            e15_held: None,
        }
    }
    /// Closed connections E15's compact design holds: `--e15-held`, or 10⁴ quick and
    /// 6 × 10⁴ full (each takes a real handshake, about 330 µs per design; 10⁵ took the
    /// lab to its 30 minutes on a slow host, and a million take about a quarter of an hour).
    pub fn e15_held(self) -> usize {
        self.e15_held.unwrap_or(self.pick(10_000, 60_000))
    }
    fn pick<T>(self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }
    /// `quick` or `full` milliseconds.
    fn ms(self, quick: u64, full: u64) -> Duration {
        Duration::from_millis(self.pick(quick, full))
    }
    /// `quick` or `full`.
    pub fn mode(self) -> &'static str {
        self.pick("quick", "full")
    }
    /// One run of a throughput comparison (E1, E2, E6, E7, E9, E13, nginx). Runs are kept
    /// short: the host's drift between rounds, not a run's length, limits a ratio, and
    /// the ratios are paired within rounds. (`--client wrk` takes whole seconds: 1 s.)
    pub fn throughput_run(self) -> Duration {
        self.ms(400, 1_250)
    }
    /// Interleaved rounds of a throughput comparison (E7's are
    /// [`process_rounds`](Self::process_rounds)).
    pub fn rounds(self) -> usize {
        self.pick(1, 5)
    }
    /// Rounds of E7, whose figures are each configuration's own medians (a pacer's mean
    /// interval and spread, not a ratio between arms that the host's drift moves from round
    /// to round); its targets allow 1 % and the full runs' means were within 0.002 %
    /// (`docs/RESULTS.md`).
    pub fn process_rounds(self) -> usize {
        self.pick(1, 3)
    }
    /// One run that records trigger states (E3, and E5 on its own).
    pub fn trace_run(self) -> Duration {
        self.ms(500, 5_000)
    }
    /// Trigger states recorded in a [`trace_run`](Self::trace_run).
    pub fn trace_capacity(self) -> usize {
        self.pick(200_000, 2_000_000)
    }
    /// E4's run, whose trace is cut into windows.
    pub fn timeline(self) -> Duration {
        self.ms(1_000, 10_000)
    }
    /// Rounds of `bench timers`.
    pub fn timers_rounds(self) -> usize {
        self.pick(3, 12)
    }
    /// Longest `bench timers` run: one its events slow past this (a `timerfd` or a signal
    /// every 10–50 µs) is cut short, its time and events extrapolated from the chunks it did.
    /// The quick run's 1.5 s still hold thousands of those events, and its six dear
    /// configurations (`timerfd` and signals at each interval) in three rounds took half
    /// its step at 4 s; the full run's 2.5 s tens of thousands (it cut at 4 s until the
    /// lab reached its 30 minutes on a slow host).
    pub fn timers_max_run(self) -> Duration {
        self.ms(1_500, 2_500)
    }
    /// How long `bench timers` computes without system calls to measure the backstop.
    pub fn backstop_compute(self) -> Duration {
        self.ms(300, 2_000)
    }
    /// How long each backstop wake-up state and idle-policy row of `bench timers` runs.
    pub fn state_time(self) -> Duration {
        self.ms(300, 2_000)
    }
    /// Interleaved rounds of `bench timers`' idle-policy rows (their runs share
    /// [`state_time`](Self::state_time)): one in the quick run, whose runs are too short to
    /// split.
    pub fn idle_rounds(self) -> usize {
        self.pick(1, 3)
    }
    /// Samples per operation in `bench core`.
    pub fn core_reps(self) -> usize {
        self.pick(15, 151)
    }
    /// Trigger checks per sample in `bench core`.
    pub fn core_trigger_batch(self) -> usize {
        self.pick(2_000, 20_000)
    }
}
