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
//! the run without events.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::event::{EventfdFlags, eventfd};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, Fired, SoftTimers, Span};
use softtimer_rt::{EventLoop, Interest, LoopConfig, SpinWindow};

use crate::exp::cost::PAPER_TABLE_I;
use crate::harness::{
    RunLength, TimerSource, interleaved, interval_label, pin_to_last_cpu, thread_cpu_ns,
};
use crate::report::{Rendered, Section};
use crate::summary::{median, paired_ratios, percentile, range};
use crate::targets::{TargetCheck, soft_vs_hardware_targets, targets_table};

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
    /// How long the loop thread computes without system calls while the backstop's
    /// lateness is measured.
    pub backstop_compute: Duration,
    /// How long each backstop wake-up state and each idle-policy row runs.
    pub state_time: Duration,
}

impl TimersConfig {
    /// The full run (13 rounds, about four minutes here) or the quick one (three rounds,
    /// about a minute).
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
            backstop_compute: length.backstop_compute(),
            state_time: length.state_time(),
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
    /// after `cut_runs_enough` runs cut short (0 in reports from before this was recorded).
    #[serde(default)]
    pub runs: usize,
}

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
    #[serde(default)]
    pub max_run_s: Option<f64>,
    /// After this many runs cut short a configuration was not run again (absent in older
    /// reports).
    #[serde(default)]
    pub cut_runs_enough: Option<usize>,
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

/// What the loop is doing while its backstop's wake-ups are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoopState {
    /// Nothing pending, blocked in `epoll_wait`.
    Idle,
    /// An event every 100 µs, and trigger states keep up.
    Busy,
    /// An event pending while the loop thread computes without system calls.
    Computing,
}

impl LoopState {
    /// Every state, in report order.
    pub const ALL: [LoopState; 3] = [LoopState::Idle, LoopState::Busy, LoopState::Computing];
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            LoopState::Idle => "idle",
            LoopState::Busy => "busy",
            LoopState::Computing => "computing",
        }
    }
}

/// Backstop wake-ups per second in one state of the loop.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WakeupRow {
    /// What the loop was doing.
    pub state: LoopState,
    /// Backstop timer wake-ups per second.
    #[serde(deserialize_with = "crate::summary::num")]
    pub backstop_wakeups_per_s: f64,
    /// Backstop timer arms (system calls) per second.
    #[serde(deserialize_with = "crate::summary::num")]
    pub backstop_arms_per_s: f64,
    /// Events fired per second.
    #[serde(deserialize_with = "crate::summary::num")]
    pub events_per_s: f64,
}

/// How a loop whose only work is a periodic event waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdlePolicyKind {
    /// Block with a precise timeout, then spin the measured wake-up lateness (the default).
    Calibrated,
    /// Never spin (timer slack 1 ns).
    Block,
    /// Never spin, with the kernel's default 50 µs timer slack: the loop before it set its
    /// own.
    BlockDefaultSlack,
    /// Spin whenever an event is due within a backstop period: the paper's idle loop.
    Spin,
}

impl IdlePolicyKind {
    /// Every policy, in report order.
    pub const ALL: [IdlePolicyKind; 4] = [
        IdlePolicyKind::Calibrated,
        IdlePolicyKind::Block,
        IdlePolicyKind::BlockDefaultSlack,
        IdlePolicyKind::Spin,
    ];
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            IdlePolicyKind::Calibrated => "calibrated",
            IdlePolicyKind::Block => "block",
            IdlePolicyKind::BlockDefaultSlack => "block-default-slack",
            IdlePolicyKind::Spin => "spin",
        }
    }
}

/// A loop whose only work is one event re-armed every `period_us`, pinned, for a while.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdlePolicyRow {
    /// The event's period, µs.
    pub period_us: u64,
    /// How the loop waits.
    pub policy: IdlePolicyKind,
    /// The spin window, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub spin_window_us: f64,
    /// Median lateness past the due time, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub late_p50_us: f64,
    /// 99th percentile of lateness, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub late_p99_us: f64,
    /// CPU time of the loop thread over wall time, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub cpu_pct: f64,
    /// Events fired.
    pub events: usize,
    /// Backstop wake-ups.
    pub backstop_wakeups: u64,
}

/// Lateness of events fired by the backstop thread while the loop thread computes without
/// system calls: the measured `ε` in `T < actual < T + X + 1 + ε`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackstopLateness {
    /// Events measured.
    pub events: usize,
    /// Backstop period X, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub x_us: f64,
    /// Median lateness past the due time, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub median_us: f64,
    /// 99th percentile, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p99_us: f64,
    /// Largest, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub max_us: f64,
    /// Share of events later than X past due (the paper's bound), %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub pct_over_x: f64,
    /// Share of events later than X + X/4 past due, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub pct_over_x_plus_quarter: f64,
    /// Share fired by the backstop thread (the rest by a trigger state at the end), %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub pct_fired_by_backstop: f64,
}

/// Schedules events 97 µs apart while the loop thread computes for `compute` without a system
/// call, and measures how late the backstop thread fires them.
pub fn measure_backstop(compute: Duration) -> Result<BackstopLateness> {
    use softtimer::{Clock, TriggerSource};
    use std::sync::{Arc, Mutex};
    let clock = softtimer::SystemClock::new();
    let late: Arc<Mutex<Vec<(u64, TriggerSource)>>> = Arc::default();
    let sink = Arc::clone(&late);
    let mut ev: EventLoop<()> = EventLoop::new(
        LoopConfig {
            capacity: 1 << 16,
            ..LoopConfig::default()
        },
        move |_, fired: Fired<()>| {
            let now = clock.now();
            if let Ok(mut v) = sink.lock() {
                v.push((now.saturating_since(fired.due).ticks(), fired.source));
            }
        },
    )?;
    let x = Span::from_ticks(clock.resolution_hz() / 1000);
    let kick: OwnedFd = eventfd(1, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
    ev.cx().register(&kick, Interest::READABLE, 1)?;
    let compute_ticks = clock.span(compute);
    let step = Span::from_micros(97, clock.resolution_hz());
    let mut scheduled = 0usize;
    ev.run(|cx, _| {
        let start = clock.now();
        let mut at = start + step;
        while at + x < start + compute_ticks {
            let _ = cx.schedule_at(at, ());
            at += step;
            scheduled += 1;
        }
        let mut acc = 0u64;
        while clock.now() < start + compute_ticks {
            for k in 0..1000u64 {
                acc = acc.wrapping_mul(6364136223846793005).wrapping_add(k);
            }
        }
        std::hint::black_box(acc);
        cx.stop();
    })?;
    let fired = late.lock().map(|v| v.clone()).unwrap_or_default();
    let to_us =
        |ticks: u64| Span::from_ticks(ticks).as_nanos(clock.resolution_hz()) as f64 / 1000.0;
    let lateness: Vec<f64> = fired.iter().map(|&(t, _)| to_us(t)).collect();
    let x_us = to_us(x.ticks());
    let share = |limit: f64| {
        lateness.iter().filter(|&&l| l > limit).count() as f64 / lateness.len().max(1) as f64
            * 100.0
    };
    let by_backstop = fired
        .iter()
        .filter(|(_, s)| *s == TriggerSource::Backstop)
        .count();
    Ok(BackstopLateness {
        events: scheduled,
        x_us,
        median_us: median(&lateness),
        p99_us: percentile(&lateness, 99.0),
        max_us: lateness.iter().copied().fold(0.0, f64::max),
        pct_over_x: share(x_us),
        pct_over_x_plus_quarter: share(x_us * 1.25),
        pct_fired_by_backstop: by_backstop as f64 / fired.len().max(1) as f64 * 100.0,
    })
}

/// A random cyclic permutation: following `a[i]` visits every element, each step a likely
/// cache miss.
fn pointer_chase_array() -> Vec<u32> {
    let mut order: Vec<u32> = (0..ARRAY_LEN as u32).collect();
    // Sattolo's algorithm, with a fixed LCG so every run chases the same cycle.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for i in (1..ARRAY_LEN).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (state >> 33) as usize % i;
        order.swap(i, j);
    }
    let mut next = vec![0u32; ARRAY_LEN];
    for w in 0..ARRAY_LEN {
        next[order[w] as usize] = order[(w + 1) % ARRAY_LEN];
    }
    next
}

struct RunResult {
    /// The run's time, extrapolated to all its chunks if it was cut short.
    elapsed: Duration,
    /// Events fired, extrapolated likewise.
    fired: u64,
    /// Whether the run was cut at [`MAX_RUN`].
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

/// A run the events slow down past this is cut short, its time and events extrapolated from
/// the chunks it did: a timer signal every 10 µs can slow the workload a hundredfold on a
/// virtual machine (each signal costs about as much as its interval), and three such runs
/// would take minutes.
const MAX_RUN: Duration = Duration::from_secs(4);

/// Runs cut at [`MAX_RUN`] after which a configuration is not run again.
const CUT_RUNS_ENOUGH: usize = 3;

/// Configurations per round for `intervals` event intervals: the run without events, the
/// backstop alone, soft at every trigger state, then soft, timerfd and signal at each.
pub fn configurations(intervals: usize) -> usize {
    3 + 3 * intervals
}

/// The event periods of the idle-policy rows, µs.
const IDLE_POLICY_PERIODS_US: [u64; 2] = [100, 1000];

/// Runs of [`TimersConfig::state_time`] each: the backstop's wake-up states and the
/// idle-policy rows.
pub fn state_runs() -> usize {
    LoopState::ALL.len() + IDLE_POLICY_PERIODS_US.len() * IdlePolicyKind::ALL.len()
}

/// The most time `rounds` runs of a configuration slow enough to be cut short take, for the
/// lab's estimate of what is left.
pub fn slowest_runs_at_most(rounds: usize) -> Duration {
    MAX_RUN * rounds.min(CUT_RUNS_ENOUGH) as u32
}

fn run_once(
    array: &[u32],
    source: TimerSource,
    interval_us: u64,
    chunks: u64,
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
        if remaining == 0 || (remaining % 1024 == 0 && start.elapsed() > MAX_RUN) {
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
    let array = pointer_chase_array();
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
        true,
    )?;
    let trigger_states_per_s = probe.triggers.unwrap_or(0) as f64 / probe.elapsed.as_secs_f64();
    let backstop_realtime = probe.backstop_realtime;

    // A configuration cut short in CUT_RUNS_ENOUGH rounds is not run again: its slowdown is
    // then tens of times the workload, known well enough, and each further run would cost
    // MAX_RUN.
    let mut cut_runs: std::collections::HashMap<(TimerSource, u64), usize> = Default::default();
    let runs = interleaved(
        config.runs,
        &configs,
        &mut progress,
        |&(source, us)| format!("{} {}", source.name(), interval_label(source, us)),
        |&(source, us)| {
            let cut = cut_runs.entry((source, us)).or_default();
            // The baseline always runs: every row is paired with it round by round.
            if source != TimerSource::None && *cut >= CUT_RUNS_ENOUGH {
                return Ok(None);
            }
            let r = run_once(&array, source, us, config.chunks, false)?;
            *cut += usize::from(r.cut_short);
            Ok(Some(r))
        },
    )?;
    // Skipped rounds are the last ones, so the runs left stay paired with the baseline's
    // runs of the same rounds.
    let runs: Vec<Vec<RunResult>> = runs
        .into_iter()
        .map(|c| c.into_iter().flatten().collect())
        .collect();
    let times: Vec<Vec<f64>> = runs
        .iter()
        .map(|c| c.iter().map(|r| r.elapsed.as_secs_f64()).collect())
        .collect();
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
    let mut idle_policy = Vec::new();
    for period_us in IDLE_POLICY_PERIODS_US {
        for policy in IdlePolicyKind::ALL {
            idle_policy.push(measure_idle_policy(period_us, policy, config.state_time)?);
        }
    }
    targets.extend(wakeup_and_idle_targets(
        &backstop_wakeups_per_s,
        &idle_policy,
    ));
    Ok(TimersReport {
        trigger_states_per_s,
        baseline_run_s: base,
        chunks: config.chunks,
        runs: config.runs,
        max_run_s: Some(MAX_RUN.as_secs_f64()),
        cut_runs_enough: Some(CUT_RUNS_ENOUGH),
        pinned_cpu,
        backstop_realtime,
        rows,
        targets,
        backstop,
        backstop_wakeups_per_s,
        idle_policy,
    })
}

/// Stops `ev` after `time`, from another thread.
fn stop_after(ev: &EventLoop<()>, time: Duration) {
    let stop = ev.stop_handle();
    std::thread::spawn(move || {
        std::thread::sleep(time);
        stop.stop();
    });
}

/// Runs a loop in one `state` for `time` and counts the backstop's wake-ups and arms.
fn measure_wakeups(state: LoopState, time: Duration) -> Result<WakeupRow> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let hz = softtimer::SystemClock::new().resolution_hz();
    let period = Span::from_micros(100, hz);
    let fired = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&fired);
    let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), move |t, f| {
        counter.fetch_add(1, Ordering::Relaxed);
        let _ = t.schedule_at(f.due + period, ());
    })?;
    let start = Instant::now();
    match state {
        LoopState::Idle => {
            stop_after(&ev, time);
            ev.run(|_, _| {})?;
        }
        LoopState::Busy => {
            ev.cx().schedule_soft_event(period, ())?;
            stop_after(&ev, time);
            ev.run(|_, _| {})?;
        }
        LoopState::Computing => {
            // One callback that computes for `time` without a system call, an event pending.
            let kick: OwnedFd = eventfd(1, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
            ev.cx().register(&kick, Interest::READABLE, 1)?;
            ev.cx().schedule_soft_event(period, ())?;
            ev.run(|cx, _| {
                let mut acc = 0u64;
                while start.elapsed() < time {
                    for k in 0..1000u64 {
                        acc = acc.wrapping_mul(6364136223846793005).wrapping_add(k);
                    }
                }
                std::hint::black_box(acc);
                cx.stop();
            })?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let c = ev.counters();
    Ok(WakeupRow {
        state,
        backstop_wakeups_per_s: c.backstop_wakeups as f64 / secs,
        backstop_arms_per_s: c.backstop_arms as f64 / secs,
        events_per_s: fired.load(Ordering::Relaxed) as f64 / secs,
    })
}

/// A loop whose only work is one event re-armed every `period_us`, waiting under `policy`.
fn measure_idle_policy(
    period_us: u64,
    policy: IdlePolicyKind,
    time: Duration,
) -> Result<IdlePolicyRow> {
    use std::sync::{Arc, Mutex};
    let hz = softtimer::SystemClock::new().resolution_hz();
    let period = Span::from_micros(period_us, hz);
    let spin_window = match policy {
        IdlePolicyKind::Calibrated => SpinWindow::Calibrated,
        IdlePolicyKind::Spin => SpinWindow::Fixed(Duration::from_millis(1)),
        IdlePolicyKind::Block | IdlePolicyKind::BlockDefaultSlack => {
            SpinWindow::Fixed(Duration::ZERO)
        }
    };
    let late = Arc::new(Mutex::new(Vec::with_capacity(
        (time.as_micros() as usize / period_us as usize) + 16,
    )));
    let sink = Arc::clone(&late);
    let mut ev: EventLoop<()> = EventLoop::new(
        LoopConfig {
            spin_window,
            ..LoopConfig::default()
        },
        move |t, f| {
            if let Ok(mut v) = sink.lock() {
                v.push(f.late().as_nanos(hz) as f64 / 1000.0);
            }
            let _ = t.schedule_at(f.due + period, ());
        },
    )?;
    if policy == IdlePolicyKind::BlockDefaultSlack {
        // The kernel's default slack (50 µs), as the loop had before it set its own.
        let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(50_000));
    }
    ev.cx().schedule_soft_event(period, ())?;
    stop_after(&ev, time);
    let (cpu0, start) = (thread_cpu_ns(), Instant::now());
    ev.run(|_, _| {})?;
    let cpu_pct = (thread_cpu_ns() - cpu0) as f64 / start.elapsed().as_nanos() as f64 * 100.0;
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    let v = late.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(IdlePolicyRow {
        period_us,
        policy,
        spin_window_us: ev.idle_policy().spin_window.as_nanos(hz) as f64 / 1000.0,
        late_p50_us: median(&v),
        late_p99_us: percentile(&v, 99.0),
        cpu_pct,
        events: v.len(),
        backstop_wakeups: ev.counters().backstop_wakeups,
    })
}

fn wakeup_and_idle_targets(wakeups: &[WakeupRow], idle: &[IdlePolicyRow]) -> Vec<TargetCheck> {
    let mut targets = Vec::new();
    if let Some(w) = wakeups.iter().find(|w| w.state == LoopState::Idle) {
        targets.push(TargetCheck::new(
            "backstop wake-ups per second, idle with nothing pending",
            "0",
            w.backstop_wakeups_per_s,
            w.backstop_wakeups_per_s == 0.0,
        ));
    }
    for (period, cpu_goal) in [(100, 15.0), (1000, 3.0)] {
        if let Some(r) = idle
            .iter()
            .find(|r| r.period_us == period && r.policy == IdlePolicyKind::Calibrated)
        {
            targets.push(TargetCheck::new(
                format!("an event every {period} µs: lateness p99, µs (calibrated idle policy)"),
                "<= 5",
                r.late_p99_us,
                r.late_p99_us <= 5.0,
            ));
            targets.push(TargetCheck::new(
                format!("an event every {period} µs: CPU of the loop, %"),
                &format!("<= {cpu_goal}"),
                r.cpu_pct,
                r.cpu_pct <= cpu_goal,
            ));
        }
    }
    targets
}

fn row(rows: &[TimerRow], source: TimerSource, us: u64) -> Option<&TimerRow> {
    rows.iter()
        .find(|r| r.source == source && r.interval_us == us)
}

fn check_targets(rows: &[TimerRow]) -> Vec<TargetCheck> {
    let mut targets = Vec::new();
    if let Some(soft) = row(rows, TimerSource::Soft, 0) {
        // The soft cost per event comes from the run with the most events.
        targets = soft_vs_hardware_targets(
            "slowdown, soft events at every trigger state",
            soft.slowdown_pct,
            soft.cost_per_event_us,
            rows.iter().filter(|r| r.source.is_hardware()).map(|r| {
                (
                    r.source.name().to_string(),
                    r.interval_us,
                    r.cost_per_event_us,
                )
            }),
        );
    }
    if let Some(soft10) = row(rows, TimerSource::Soft, 10) {
        let share = soft10.events_delivered_per_s / soft10.events_asked_per_s * 100.0;
        targets.push(TargetCheck::new(
            "events delivered at 10 µs, soft",
            ">= 95 % of asked",
            share,
            share >= 95.0,
        ));
    }
    targets
}

impl Section for TimersReport {
    const FILE: &'static str = "bench_timers.json";
    fn render(&self, _dir: &std::path::Path) -> Result<Rendered> {
        let mut md = String::from(
            "## Cost per timer event, synthetic workload (`softtimers bench timers`)\n\n",
        );
        md += &to_markdown(self);
        Ok(Rendered::text(md))
    }
}

/// The report as Markdown, with the paper's Table I beside it.
pub fn to_markdown(report: &TimersReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Workload: {} chunks of pointer chasing, one `epoll_wait` per chunk; {:.0} trigger \
         states/s; median of {} runs without events: {:.3} s. Loop thread {}; backstop \
         thread real-time: {}.\n",
        report.chunks,
        report.trigger_states_per_s,
        report.runs,
        report.baseline_run_s,
        report
            .pinned_cpu
            .map_or("not pinned".to_string(), |c| format!("pinned to CPU {c}")),
        report
            .backstop_realtime
            .map_or("no backstop".to_string(), |r| r.to_string()),
    );
    let _ = writeln!(
        out,
        "| source | interval | events asked/s | delivered/s | delivered % | slowdown %, median [range] | µs per event | run time (s), median [range] |"
    );
    let _ = writeln!(
        out,
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"
    );
    for r in &report.rows {
        let interval = interval_label(r.source, r.interval_us);
        let (delivered, per_event) = if r.events_asked_per_s > 0.0 {
            (
                format!(
                    "{:.1}",
                    r.events_delivered_per_s / r.events_asked_per_s * 100.0
                ),
                format!("{:.3}", r.cost_per_event_us),
            )
        } else {
            ("—".to_string(), "—".to_string())
        };
        let _ = writeln!(
            out,
            "| {} | {interval} | {:.0} | {:.0} | {delivered} | {:.2} [{:.2}, {:.2}] | {per_event} | {:.3} [{:.3}, {:.3}]{} |",
            r.source.name(),
            r.events_asked_per_s,
            r.events_delivered_per_s,
            r.slowdown_pct,
            r.slowdown_range_pct.0,
            r.slowdown_range_pct.1,
            r.median_run_s,
            r.run_range_s.0,
            r.run_range_s.1,
            match (r.runs_cut_short, r.runs) {
                (0, _) => String::new(),
                (_, runs) if runs > 0 && runs < report.runs => format!(" * ({runs} runs)"),
                _ => " *".to_string(),
            },
        );
    }
    if report.rows.iter().any(|r| r.runs_cut_short > 0) {
        let cut_at = report
            .max_run_s
            .map_or(String::new(), |s| format!(" at {s:.0} s"));
        let dropped = report.cut_runs_enough.map_or(String::new(), |n| {
            format!("; after {n} such runs a configuration was not run again")
        });
        let _ = writeln!(
            out,
            "\n\\* Runs cut{cut_at}, their time and events extrapolated from the chunks \
             done{dropped}."
        );
    }
    let _ = writeln!(out, "\n{PAPER_TABLE_I}\n");
    let b = &report.backstop;
    let _ = writeln!(
        out,
        "The backstop while the loop thread computes without system calls ({} events due 97 µs \
         apart, X = {:.0} µs): {:.1} % fired by the backstop thread; lateness past due median \
         {:.0} µs, p99 {:.0} µs, max {:.0} µs; {:.2} % later than X (the paper's bound), {:.2} % \
         later than X + X/4.\n",
        b.events,
        b.x_us,
        b.pct_fired_by_backstop,
        b.median_us,
        b.p99_us,
        b.max_us,
        b.pct_over_x,
        b.pct_over_x_plus_quarter
    );
    let _ = writeln!(
        out,
        "Backstop timer wake-ups (the adaptive one-shot backstop):\n\n| loop state | wake-ups/s | arms (timerfd_settime)/s | events/s |\n| --- | ---: | ---: | ---: |"
    );
    for w in &report.backstop_wakeups_per_s {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} |",
            w.state.name(),
            w.backstop_wakeups_per_s,
            w.backstop_arms_per_s,
            w.events_per_s
        );
    }
    let _ = writeln!(
        out,
        "\nA loop whose only work is one periodic event, by idle policy:\n\n| period | policy | spin window (µs) | lateness p50 (µs) | p99 (µs) | loop CPU (%) | events | backstop wake-ups |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for r in &report.idle_policy {
        let _ = writeln!(
            out,
            "| {} µs | {} | {:.1} | {:.2} | {:.1} | {:.1} | {} | {} |",
            r.period_us,
            r.policy.name(),
            r.spin_window_us,
            r.late_p50_us,
            r.late_p99_us,
            r.cpu_pct,
            r.events,
            r.backstop_wakeups
        );
    }
    out += "\n";
    out += &targets_table(&report.targets);
    out
}
