//! `softtimers bench timers`: what an event costs from each timer source, measured from the
//! slowdown of a workload (the method of the paper's Table I), before any network workload.
//!
//! The workload runs on the event loop: an always-readable eventfd makes every iteration one
//! `epoll_wait` (a system call, so a trigger state) followed by a chunk of pointer chasing
//! through 64 MB (a few microseconds of cache misses). Events with a null handler (it only
//! re-arms itself) fire every 10, 20 and 50 µs from each source: soft timers, a periodic
//! `timerfd`, and a POSIX timer signal; soft timers also fire "at every trigger state" (the
//! paper's setting). Each configuration runs the same number of chunks; the runs are
//! interleaved and repeated, and the median time of each is compared with the median time of
//! the run without events. A configuration slowed by half or more (a `timerfd` or a signal at
//! these intervals on a virtual machine) stops after three rounds: its slowdown is known well
//! enough by then, and the rounds are for the soft configurations' percent or so.

mod backstop;
mod idle;
mod markdown;

pub use backstop::{BackstopLateness, measure_backstop};
pub use idle::{IdlePolicyKind, IdlePolicyRow, LoopState, WakeupRow};
pub use markdown::to_markdown;

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::event::{EventfdFlags, eventfd};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, Fired, SoftTimers, Span};
use softtimer_rt::{Interest, LoopConfig};

use softtimers_tools::output::{Program, Report};

use crate::harness::{
    RunLength, TimerSource, interleaved, interval_label, per_config, pin_to_last_cpu,
};
use crate::report::{Page, Section, Skippable};
use crate::summary::{median, paired_ratios, range};
use crate::targets::{Goal, TargetCheck, soft_vs_hardware_targets};
use idle::*;

/// Pointer-chasing steps per chunk (about 3 µs of cache misses on the project's VM).
const STEPS_PER_CHUNK: usize = 32;

/// Elements (u32) of the workload's array: 64 MB, far beyond the caches.
const ARRAY_LEN: usize = 16 << 20;

/// How much to measure.
#[derive(Clone, Debug)]
pub struct TimersConfig {
    /// Event intervals, µs.
    pub intervals_us: Vec<u64>,
    /// Workload chunks per run.
    pub chunks: u64,
    /// Runs per configuration (the median is reported).
    pub runs: usize,
    /// A run the events slow past this is cut short, its time and events extrapolated from
    /// the chunks it did: a timer signal every 10 µs can slow the workload a hundredfold on
    /// a virtual machine (each signal costs about as much as its interval), and three such
    /// runs would take minutes.
    pub max_run: Duration,
    /// How long the loop thread computes without system calls while the backstop's
    /// lateness is measured.
    pub backstop_compute: Duration,
    /// How long each backstop wake-up state and each idle-policy row runs (a row's rounds
    /// together).
    pub state_time: Duration,
    /// Interleaved rounds of the idle-policy rows, each row all its rounds' events together.
    pub idle_rounds: usize,
}

/// `softtimers bench timers` on the command line.
#[derive(clap::Args, Debug, Clone)]
pub struct TimersArgs {
    /// Event interval in µs (repeatable; default 10, 20 and 50).
    #[arg(long = "interval", value_name = "US")]
    pub intervals: Vec<u64>,
    /// Three rounds instead of 13, and shorter backstop and idle-policy runs (about a
    /// minute instead of about four).
    #[arg(long)]
    pub quick: bool,
}

impl Program for TimersArgs {
    type Output = TimersReport;

    /// Runs the benchmark with a progress bar.
    fn run(&self) -> Result<TimersReport> {
        let intervals = if self.intervals.is_empty() {
            vec![10, 20, 50]
        } else {
            self.intervals.clone()
        };
        let config = TimersConfig::new(self.quick, intervals)?;
        crate::harness::with_progress("bench timers", |p| run(&config, p))
    }
}

impl TimersConfig {
    /// The full run (12 rounds, the dear configurations three; about three minutes here) or
    /// the quick one (three rounds, about a minute).
    pub fn new(quick: bool, intervals_us: Vec<u64>) -> Result<Self> {
        for &us in &intervals_us {
            if us == 0 || us > 3_600_000_000 {
                bail!("interval {us} µs is out of range (1 ..= 3600000000 µs, one hour)");
            }
        }
        let length = RunLength::new(quick);
        Ok(TimersConfig {
            intervals_us,
            // Many short interleaved rounds: the median of paired ratios tightens with the
            // number of rounds, while long runs only average the machine's drift in.
            chunks: 100_000,
            runs: length.timers_rounds(),
            max_run: length.timers_max_run(),
            backstop_compute: length.backstop_compute(),
            state_time: length.state_time(),
            idle_rounds: length.idle_rounds(),
        })
    }
}

/// One (source, interval) result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TimerRow {
    /// `soft`, `timerfd` or `signal`.
    pub source: TimerSource,
    /// Event interval, µs; 0 means "at every trigger state" (soft only).
    pub interval_us: u64,
    /// Events per second asked for (for interval 0: the trigger-state rate).
    #[serde(deserialize_with = "crate::summary::num")]
    pub events_asked_per_s: f64,
    /// Events per second delivered (handler calls).
    #[serde(deserialize_with = "crate::summary::num")]
    pub events_delivered_per_s: f64,
    /// Workload slowdown against the run without events, %: the median over rounds of
    /// this run's time against the baseline run of the same round.
    #[serde(deserialize_with = "crate::summary::num")]
    pub slowdown_pct: f64,
    /// Smallest and largest per-round slowdown, %.
    #[serde(deserialize_with = "crate::summary::num_pair")]
    pub slowdown_range_pct: (f64, f64),
    /// Slowdown divided by events delivered, µs per event.
    #[serde(deserialize_with = "crate::summary::num")]
    pub cost_per_event_us: f64,
    /// Median run time, s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub median_run_s: f64,
    /// Smallest and largest run time, s.
    #[serde(deserialize_with = "crate::summary::num_pair")]
    pub run_range_s: (f64, f64),
    /// Runs cut at the report's `max_run_s`, their time and events extrapolated from the
    /// chunks done.
    #[serde(default)]
    pub runs_cut_short: usize,
    /// Runs made: fewer than the report's `runs` when the configuration was not run again
    /// after `cut_runs_enough` runs cut short or slowed past `dear_slowdown_pct` (0 in
    /// reports from before this was recorded).
    #[serde(default)]
    pub runs: usize,
}

crate::timer_cost_row!(TimerRow);

/// What `bench timers` produces.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TimersReport {
    /// Trigger states per second of the workload (from a run with statistics on).
    #[serde(deserialize_with = "crate::summary::num")]
    pub trigger_states_per_s: f64,
    /// Median run time without events, s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub baseline_run_s: f64,
    /// Workload chunks per run.
    pub chunks: u64,
    /// Runs per configuration (rounds).
    pub runs: usize,
    /// A run slower than this was cut short, s (absent in older reports).
    pub max_run_s: Option<f64>,
    /// After this many runs cut short a configuration was not run again (absent in older
    /// reports); nor after this many runs slowed past `dear_slowdown_pct`.
    pub cut_runs_enough: Option<usize>,
    /// A configuration whose first `cut_runs_enough` runs took a median this much longer
    /// than the baseline's was not run again, % (absent in older reports, which ran it every
    /// round).
    #[serde(default)]
    pub dear_slowdown_pct: Option<f64>,
    /// The CPU the loop thread was pinned to.
    pub pinned_cpu: Option<usize>,
    /// Whether the backstop thread had real-time priority.
    pub backstop_realtime: Option<bool>,
    /// One row per (source, interval).
    pub rows: Vec<TimerRow>,
    /// How late the backstop fires events while the loop thread computes.
    pub backstop: BackstopLateness,
    /// Backstop timer wake-ups per second: idle, busy with events, computing.
    pub backstop_wakeups_per_s: Vec<WakeupRow>,
    /// A loop whose only work is one periodic event: lateness and CPU, by idle policy.
    pub idle_policy: Vec<IdlePolicyRow>,
    /// The targets against this run.
    pub targets: Vec<TargetCheck>,
}

/// A random cyclic permutation of `len` elements, as `next[i]`: following it from any
/// element visits every element once, each step a likely cache miss (Sattolo's
/// algorithm, with a fixed LCG so that every run chases the same cycle). The saturated
/// workload's memory access pattern.
pub fn pointer_chase_array(len: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..len as u32).collect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for i in (1..len).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (state >> 33) as usize % i);
    }
    let mut next = vec![0u32; len];
    for w in 0..len {
        next[order[w] as usize] = order[(w + 1) % len];
    }
    next
}

struct RunResult {
    /// The run's time, extrapolated to all its chunks if it was cut short.
    elapsed: Duration,
    /// Events fired, extrapolated likewise.
    fired: u64,
    /// Whether the run was cut at [`TimersConfig::max_run`].
    cut_short: bool,
    triggers: Option<u64>,
    backstop_realtime: Option<bool>,
}

/// The null handler: re-arms a periodic event at its own schedule (so that late firings do
/// not stretch the period), or at the next tick for "every trigger state". It allocates
/// nothing (the facility has room reserved), so it is async-signal-safe.
fn null_handler(interval: Span) -> impl Fn(&mut SoftTimers<()>, Fired<()>) + Send + Sync {
    move |timers, ev| {
        let next = if interval.is_zero() {
            ev.now
        } else {
            ev.due + interval
        };
        let _ = timers.schedule_at(next, ());
    }
}

/// Runs cut at [`TimersConfig::max_run`] after which a configuration is not run again; also
/// the runs after which a configuration slowed past [`DEAR_SLOWDOWN`] is not.
const CUT_RUNS_ENOUGH: usize = 3;

/// A configuration whose first [`CUT_RUNS_ENOUGH`] runs took a median this much longer than
/// the baseline's (a fraction: 0.5 is 50 %) is not run again: its events cost a sizeable
/// share of their interval (a `timerfd` or a signal every 10–50 µs on a virtual machine), so
/// three paired runs know its slowdown to a few percent of itself, far inside the tenfold
/// margins its targets ask of it, and each further round would add its run, the longest of
/// the round, to the lab's time. The soft-timer configurations, whose slowdowns of about
/// 1 % are what the rounds are for, never come near it.
const DEAR_SLOWDOWN: f64 = 0.5;

/// Whether a configuration has been measured enough not to run in the rounds left: `made`
/// holds its runs so far (seconds, whether cut short), `baseline_s` the baseline's.
fn measured_enough(made: &[(f64, bool)], baseline_s: &[f64]) -> bool {
    if made.iter().filter(|&&(_, cut)| cut).count() >= CUT_RUNS_ENOUGH {
        return true;
    }
    if made.len() < CUT_RUNS_ENOUGH || baseline_s.is_empty() {
        return false;
    }
    let times: Vec<f64> = made.iter().map(|&(s, _)| s).collect();
    median(&times) >= (1.0 + DEAR_SLOWDOWN) * median(baseline_s)
}

/// About how long the slowdown rounds take for `intervals` event intervals, for the lab's
/// estimate of what is left: the configurations without timer system calls (the baseline,
/// the backstop alone, and soft events at every trigger state and at each interval) every
/// round at `cheap_run`, and the `timerfd` and signal ones (slowed by half or more on
/// this project's machines, so run three rounds at most) at `dear_run`.
pub fn rounds_time(
    rounds: usize,
    intervals: usize,
    cheap_run: Duration,
    dear_run: Duration,
) -> Duration {
    let dear_configs = 2 * intervals;
    let cheap = (configurations(intervals) - dear_configs) * rounds;
    let dear = dear_configs * rounds.min(CUT_RUNS_ENOUGH);
    cheap_run * cheap as u32 + dear_run * dear as u32
}

/// Configurations per round for `intervals` event intervals: the run without events, the
/// backstop alone, soft at every trigger state, then soft, timerfd and signal at each.
pub fn configurations(intervals: usize) -> usize {
    3 + 3 * intervals
}

/// How long one idle-policy row runs, its rounds together: half of
/// [`TimersConfig::state_time`] for periods up to a millisecond, which still gives a thousand
/// events and more over the rounds (a round of three at 1 ms: 333), so that the 35 rows keep
/// the full lab within its time; the whole of it for the longer periods (a round of three
/// at 10 ms: 66 events; the row's p99 rests on the latest three of all 198).
fn idle_policy_run(period_us: u64, state_time: Duration) -> Duration {
    if period_us <= 1000 {
        state_time / 2
    } else {
        state_time
    }
}

/// Runs of [`TimersConfig::state_time`] each (the backstop's wake-up states and the
/// idle-policy rows; a half-length run counts as half).
pub fn state_runs() -> f64 {
    let short = IDLE_POLICY_PERIODS_US
        .iter()
        .filter(|&&p| p <= 1000)
        .count();
    let long = IDLE_POLICY_PERIODS_US.len() - short;
    LoopState::ALL.len() as f64 + (long as f64 + short as f64 / 2.0) * idle_settings().len() as f64
}

fn run_once(
    array: &[u32],
    source: TimerSource,
    interval_us: u64,
    chunks: u64,
    max_run: Duration,
    stats: bool,
) -> Result<RunResult> {
    let period = Duration::from_micros(interval_us.max(1));
    let config = LoopConfig {
        stats,
        capacity: 16,
        ..LoopConfig::default()
    };
    let interval = Span::from_micros(interval_us, softtimer::SystemClock::new().resolution_hz());
    // SAFETY: the handler (`null_handler`) only calls `schedule_at` on a facility with room
    // reserved (`capacity`), which neither allocates nor locks; the payload `()` has no
    // destructor. That is async-signal-safe.
    #[allow(unsafe_code)]
    let mut ev = unsafe { source.new_loop(config, period, null_handler(interval))? };
    let work: OwnedFd = eventfd(1, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
        .context("eventfd for the workload")?;
    ev.cx().register(&work, Interest::READABLE, 1)?;
    if source.has_events() {
        ev.cx().schedule_soft_event(interval, ())?;
    }
    let mut position = 0u32;
    let mut remaining = chunks;
    let start = Instant::now();
    ev.run(|cx, _ready| {
        // The eventfd stays readable (it is never read), so `epoll_wait` returns at once
        // every iteration: one system call per chunk of work.
        for _ in 0..STEPS_PER_CHUNK {
            position = array[position as usize];
        }
        remaining -= 1;
        // The clock is read every 64 chunks (a read per ~0.4 ms of work unslowed): under a
        // signal every 10 µs a chunk can take thousands of times its own length, and checked
        // every 1,024 chunks such a run went 25 s past its limit on a slow host.
        if remaining == 0 || (remaining.is_multiple_of(64) && start.elapsed() > max_run) {
            cx.stop();
        }
    })?;
    let elapsed = start.elapsed();
    std::hint::black_box(position);
    let triggers = ev.stats().map(|s| s.total_triggers());
    let done = chunks - remaining;
    let scale = chunks as f64 / done.max(1) as f64;
    Ok(RunResult {
        elapsed: elapsed.mul_f64(scale),
        fired: (ev.counters().fired_total() as f64 * scale) as u64,
        cut_short: remaining > 0,
        triggers,
        backstop_realtime: ev.backstop_realtime(),
    })
}

/// Runs the benchmark. `progress` is told the fraction done.
pub fn run(config: &TimersConfig, mut progress: impl FnMut(f64, &str)) -> Result<TimersReport> {
    let pin = pin_to_last_cpu();
    let pinned_cpu = pin.cpu;
    let array = pointer_chase_array(ARRAY_LEN);
    // The configurations: the baseline, soft at every trigger state, then each source at
    // each interval.
    let mut configs = vec![
        (TimerSource::None, 0),
        (TimerSource::BackstopOnly, 0),
        (TimerSource::Soft, 0),
    ];
    for &us in &config.intervals_us {
        for source in [TimerSource::Soft, TimerSource::Timerfd, TimerSource::Signal] {
            configs.push((source, us));
        }
    }
    debug_assert_eq!(configs.len(), configurations(config.intervals_us.len()));
    // Warm up (page in the array, calibrate the clock) and measure the trigger rate.
    let probe = run_once(
        &array,
        TimerSource::BackstopOnly,
        0,
        config.chunks / 4,
        config.max_run,
        true,
    )?;
    let trigger_states_per_s = probe.triggers.unwrap_or(0) as f64 / probe.elapsed.as_secs_f64();
    let backstop_realtime = probe.backstop_realtime;

    // A configuration cut short in CUT_RUNS_ENOUGH rounds is not run again (its slowdown is
    // then tens of times the workload, known well enough, and each further run would cost
    // max_run), nor one slowed past DEAR_SLOWDOWN in as many (see there).
    let mut made: std::collections::HashMap<(TimerSource, u64), Vec<(f64, bool)>> =
        Default::default();
    let mut baseline_s = Vec::with_capacity(config.runs);
    let runs = interleaved(
        config.runs,
        &configs,
        &mut progress,
        |&(source, us)| format!("{} {}", source.name(), interval_label(source, us)),
        |&(source, us)| {
            let runs_made = made.entry((source, us)).or_default();
            // The baseline always runs: every row is paired with it round by round.
            if source != TimerSource::None && measured_enough(runs_made, &baseline_s) {
                return Ok(None);
            }
            let r = run_once(&array, source, us, config.chunks, config.max_run, false)?;
            runs_made.push((r.elapsed.as_secs_f64(), r.cut_short));
            if source == TimerSource::None {
                baseline_s.push(r.elapsed.as_secs_f64());
            }
            Ok(Some(r))
        },
    )?;
    // Skipped rounds are the last ones, so the runs left stay paired with the baseline's
    // runs of the same rounds.
    let runs: Vec<Vec<RunResult>> = runs
        .into_iter()
        .map(|c| c.into_iter().flatten().collect())
        .collect();
    let times = per_config(&runs, |r| r.elapsed.as_secs_f64());
    let base = median(&times[0]);
    let mut rows = Vec::new();
    for (i, &(source, us)) in configs.iter().enumerate().skip(1) {
        let t = median(&times[i]);
        let delivered = median(
            &runs[i]
                .iter()
                .map(|r| r.fired as f64 / r.elapsed.as_secs_f64())
                .collect::<Vec<_>>(),
        );
        let events_per_run = delivered * t;
        // Paired by round: machine noise drifts slowly, so a run is compared with the
        // baseline run made just before it.
        let paired: Vec<f64> = paired_ratios(&times[i], &times[0])
            .into_iter()
            .map(|r| (r - 1.0) * 100.0)
            .collect();
        let slowdown = median(&paired);
        let cost_us = if events_per_run > 0.0 {
            slowdown / 100.0 * base / events_per_run * 1e6
        } else {
            f64::NAN
        };
        rows.push(TimerRow {
            source,
            interval_us: us,
            events_asked_per_s: if !source.has_events() {
                0.0
            } else if us == 0 {
                trigger_states_per_s
            } else {
                1e6 / us as f64
            },
            events_delivered_per_s: delivered,
            slowdown_pct: slowdown,
            slowdown_range_pct: range(&paired),
            cost_per_event_us: cost_us,
            median_run_s: t,
            run_range_s: range(&times[i]),
            runs_cut_short: runs[i].iter().filter(|r| r.cut_short).count(),
            runs: runs[i].len(),
        });
    }
    let mut targets = check_targets(&rows);
    progress(1.0, "backstop lateness");
    let backstop = measure_backstop(config.backstop_compute)?;
    progress(1.0, "backstop wake-ups");
    let backstop_wakeups_per_s = LoopState::ALL
        .into_iter()
        .map(|state| measure_wakeups(state, config.state_time))
        .collect::<Result<Vec<_>>>()?;
    progress(1.0, "idle policy");
    let idle_policy = measure_idle_policies(config.idle_rounds, |period_us| {
        idle_policy_run(period_us, config.state_time)
    })?;
    targets.extend(wakeup_and_idle_targets(
        &backstop_wakeups_per_s,
        &idle_policy,
    ));
    Ok(TimersReport {
        trigger_states_per_s,
        baseline_run_s: base,
        chunks: config.chunks,
        runs: config.runs,
        max_run_s: Some(config.max_run.as_secs_f64()),
        cut_runs_enough: Some(CUT_RUNS_ENOUGH),
        dear_slowdown_pct: Some(DEAR_SLOWDOWN * 100.0),
        pinned_cpu,
        backstop_realtime,
        rows,
        targets,
        backstop,
        backstop_wakeups_per_s,
        idle_policy,
    })
}

fn row(rows: &[TimerRow], source: TimerSource, us: u64) -> Option<&TimerRow> {
    rows.iter()
        .find(|r| r.source == source && r.interval_us == us)
}

fn check_targets(rows: &[TimerRow]) -> Vec<TargetCheck> {
    // The soft cost per event comes from the run with the most events.
    let mut targets =
        soft_vs_hardware_targets("slowdown, soft events at every trigger state", rows);
    if let Some(soft10) = row(rows, TimerSource::Soft, 10) {
        let share = soft10.events_delivered_per_s / soft10.events_asked_per_s * 100.0;
        targets.push(TargetCheck::new(
            "events delivered at 10 µs, soft",
            Goal::at_least(95.0, ">= 95 % of asked"),
            share,
            crate::paper::ANCHOR_DESIGN,
        ));
    }
    targets
}

impl Report for TimersReport {
    fn text(&self) -> String {
        to_markdown(self)
    }
}

impl Skippable for TimersReport {}

impl Section for TimersReport {
    const FILE: &'static str = "bench_timers.json";
    const TITLE: &'static str =
        "Cost per timer event, synthetic workload (`softtimers bench timers`)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        page.text(&to_markdown(self));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_runs_every_round_unless_cut_short_or_dear_three_times() {
        let baseline = [0.62, 0.63, 0.61];
        // Soft events: about 1 % over the baseline, every round.
        let soft = [(0.63, false), (0.64, false), (0.62, false)];
        assert!(!measured_enough(&soft, &baseline));
        // A timerfd every 10 µs: five times the baseline, known after three runs.
        let timerfd = [(3.4, false), (3.5, false), (3.6, false)];
        assert!(!measured_enough(&timerfd[..2], &baseline));
        assert!(measured_enough(&timerfd, &baseline));
        // Just under the line: the median, not one slow run, decides.
        let mixed = [(0.9, false), (3.0, false), (0.9, false)];
        assert!(!measured_enough(&mixed, &baseline));
        // Cut short three times, whatever the baseline.
        let cut = [(400.0, true), (380.0, true), (410.0, true)];
        assert!(measured_enough(&cut, &[]));
        assert!(!measured_enough(&cut[..2], &[]));
    }

    #[test]
    fn the_estimate_counts_the_dear_configurations_for_three_rounds_at_most() {
        let (cheap, dear) = (Duration::from_secs(1), Duration::from_secs(10));
        // Three intervals: six configurations without timer system calls and six with.
        assert_eq!(
            rounds_time(12, 3, cheap, dear),
            Duration::from_secs(72 + 180)
        );
        assert_eq!(
            rounds_time(2, 3, cheap, dear),
            Duration::from_secs(12 + 120)
        );
        assert_eq!(configurations(3), 12);
    }
}
