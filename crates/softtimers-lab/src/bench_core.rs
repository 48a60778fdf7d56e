//! `softtimers bench core`: the facility's micro-benchmarks against the baselines, in one
//! process run, interleaved so that machine noise falls on all of them alike.
//!
//! Operations, each at 1,000 and 1,000,000 pending events:
//!
//! * `trigger`: the trigger-state check with nothing due, on the real clock;
//! * `schedule`: schedule one event `T` ticks ahead (`T` log-uniform in 1 µs … 1 s);
//! * `cancel`: cancel one of those;
//! * `schedule_fire`: schedule an event 1–100 µs ahead and fire it 2 ms later, per event;
//! * `schedule_cancel_reap`: the life of a cancelled timer (a retransmission timer that an
//!   ACK cancels): schedule 1 µs – 1 ms ahead, cancel, and let the clock pass the due time,
//!   per event. A lazy-cancel heap pays here what its cheap `cancel` put off.
//!
//! `schedule`, `cancel` and `schedule_fire` run on one shared simulated clock, so that the
//! comparison is of the data structures and firing needs no waiting; the real clock's read
//! cost is measured on its own (`clock_read_ns`) and is what `schedule_soft_event` adds.
//! A sample is the mean over one batch of operations; a row gives the median and the 99th
//! percentile of the samples.

use std::hint::black_box;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, SimClock, Span, SystemClock};

use softtimers_tools::output::{Program, Report};

use crate::baselines::{self, TimerQueue};
use crate::harness::{RunLength, pin_to_last_cpu};
use crate::report::{Page, Section, Skippable};
use crate::summary::{median, percentile};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck, targets_table};
use softtimer_rt::alloc_count;

/// How much to measure.
#[derive(Clone, Debug)]
pub struct CoreBenchConfig {
    /// Pending-event counts to measure at.
    pub sizes: Vec<usize>,
    /// Batches (samples) per operation.
    pub reps: usize,
    /// Operations per batch for schedule, cancel and schedule_fire.
    pub batch: usize,
    /// Trigger checks per batch.
    pub trigger_batch: usize,
    /// The facility's finest slot width in clock ticks (`None`: its default), for comparing
    /// widths.
    pub slot_ticks: Option<u64>,
}

/// The widest slot `--slot-ticks` takes: a million events in slots much wider than their
/// spacing make the benchmark's inserts quadratic (2^32 ticks did not finish).
const MAX_BENCH_SLOT_TICKS: u64 = 1 << 16;

/// `softtimers bench core` on the command line.
#[derive(clap::Args, Debug, Clone)]
pub struct CoreArgs {
    /// Fewer repetitions (a few seconds).
    #[arg(long)]
    pub quick: bool,
    /// The facility's finest wheel-slot width in clock ticks, 1 to 65536, rounded down to a
    /// power of two (default: about 30 ns); for comparing widths. (A slot keeps its events
    /// in order, so slots much wider than the events' spacing make each insert a walk.)
    #[arg(long, value_name = "TICKS", value_parser = clap::value_parser!(u64).range(1..=MAX_BENCH_SLOT_TICKS))]
    pub slot_ticks: Option<u64>,
}

impl Program for CoreArgs {
    type Output = CoreReport;

    /// Runs the benchmark with a progress bar.
    fn run(&self) -> anyhow::Result<CoreReport> {
        let config = CoreBenchConfig {
            // The facility takes powers of two only; the flag promises rounding.
            slot_ticks: self.slot_ticks.map(|t| 1 << t.ilog2()),
            ..CoreBenchConfig::new(self.quick)
        };
        Ok(crate::harness::with_progress("bench core", |p| {
            run(&config, p)
        }))
    }
}

impl Report for CoreReport {
    fn text(&self) -> String {
        to_markdown(self)
    }
}

impl CoreBenchConfig {
    /// The full run (a few seconds here) or the quick one (about a second, for CI).
    pub fn new(quick: bool) -> Self {
        let length = RunLength::new(quick);
        CoreBenchConfig {
            sizes: vec![1_000, 1_000_000],
            reps: length.core_reps(),
            batch: 1_000,
            trigger_batch: length.core_trigger_batch(),
            slot_ticks: None,
        }
    }
}

/// One measured (implementation, pending, operation).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// Implementation (`softtimer`, `binary_heap`, `btree_map`, `tokio_delay_queue`).
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Events pending while measuring.
    pub pending: usize,
    /// `trigger`, `schedule`, `cancel`, `schedule_fire`, `schedule_cancel_reap`, or
    /// `clock_read` (implementation `clock`: the read the trigger makes).
    pub op: String,
    /// Median over samples of the mean cost per operation, ns.
    #[serde(deserialize_with = "crate::summary::num")]
    pub median_ns: f64,
    /// 99th percentile over samples, ns.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p99_ns: f64,
    /// Smallest sample, ns.
    #[serde(deserialize_with = "crate::summary::num")]
    pub min_ns: f64,
    /// Number of samples.
    pub samples: usize,
}

/// Memory per pending event, from a counting allocator.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemoryRow {
    /// Implementation.
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Events pending.
    pub pending: usize,
    /// Heap bytes held per pending event (including growth slack).
    #[serde(deserialize_with = "crate::summary::num")]
    pub bytes_per_event: f64,
}

/// Everything `bench core` produces.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoreReport {
    /// Median cost of the clock read the trigger check makes (`now_unordered`), ns.
    #[serde(deserialize_with = "crate::summary::num")]
    pub clock_read_ns: f64,
    /// `tsc` or `monotonic`.
    pub clock_source: String,
    /// Measurement clock frequency, Hz.
    pub clock_hz: u64,
    /// The CPU the benchmark thread was pinned to, if pinning worked.
    pub pinned_cpu: Option<usize>,
    /// Measured rows.
    pub rows: Vec<Row>,
    /// Memory per pending event (absent where the counting allocator is not installed).
    pub memory: Vec<MemoryRow>,
    /// The targets against this run.
    pub targets: Vec<TargetCheck>,
}

impl CoreReport {
    /// The lowest median of the baselines (not ours, not the clock) for (pending, op).
    pub fn best_baseline(&self, pending: usize, op: &str) -> f64 {
        self.rows
            .iter()
            .filter(|b| b.implementation != OURS && b.pending == pending && b.op == op)
            .map(|b| b.median_ns)
            .fold(f64::INFINITY, f64::min)
    }

    /// The row for (implementation, pending, op).
    pub fn row(&self, implementation: &str, pending: usize, op: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.implementation == implementation && r.pending == pending && r.op == op)
    }
}

/// Median ns of one call of `read`, over `reps` batches of `batch` calls.
pub fn per_call_ns(reps: usize, batch: usize, mut read: impl FnMut() -> u64) -> f64 {
    let samples: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                black_box(read());
            }
            start.elapsed().as_nanos() as f64 / batch as f64
        })
        .collect();
    median(&samples)
}

/// Runs the core benchmark. `progress` is told the fraction done.
pub fn run(config: &CoreBenchConfig, mut progress: impl FnMut(f64, &str)) -> CoreReport {
    let pin = pin_to_last_cpu();
    let pinned_cpu = pin.cpu;
    let system = SystemClock::new();
    let hz = system.resolution_hz();
    let info = SystemClock::info();
    let mut rows = Vec::new();
    let mut memory = Vec::new();
    // The read the trigger check makes.
    let clock_read = per_call_ns(config.reps, config.trigger_batch, || {
        system.now_unordered().ticks()
    });

    let total_steps = config.sizes.len() * 2;
    let mut step = 0;
    for &pending in &config.sizes {
        progress(
            step as f64 / total_steps as f64,
            &format!("trigger, {pending} pending"),
        );
        rows.extend(bench_trigger(system, pending, config));
        step += 1;
        progress(
            step as f64 / total_steps as f64,
            &format!("schedule/cancel/fire, {pending} pending"),
        );
        let (r, m) = bench_structures(hz, pending, config);
        rows.extend(r);
        memory.extend(m);
        step += 1;
    }
    progress(1.0, "done");
    let mut report = CoreReport {
        clock_read_ns: clock_read,
        clock_source: info.source.name().to_string(),
        clock_hz: hz,
        pinned_cpu,
        rows,
        memory,
        targets: Vec::new(),
    };
    report.targets = check_targets(&report, config);
    report
}

/// Fills `queue` with `n` events due 1 … 100 s ahead (none fires during a benchmark).
fn prefill(queue: &mut dyn TimerQueue, n: usize, hz: u64, rng: &mut SmallRng) {
    let (lo, hi) = (hz, 100 * hz);
    for i in 0..n {
        queue.schedule(rng.random_range(lo..hi), i as u64);
    }
}

fn bench_trigger(system: SystemClock, pending: usize, config: &CoreBenchConfig) -> Vec<Row> {
    let hz = system.resolution_hz();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut queues = baselines::real(system, config.slot_ticks);
    for q in &mut queues {
        prefill(q.as_mut(), pending, hz, &mut rng);
    }
    let mut samples = vec![Vec::with_capacity(config.reps); queues.len()];
    let mut reads = Vec::with_capacity(config.reps);
    for _ in 0..config.reps {
        // The clock read the trigger makes, measured between the queues' samples so that
        // the ratio is taken under the same machine conditions.
        reads.push(per_call_ns(1, config.trigger_batch, || {
            system.now_unordered().ticks()
        }));
        for (q, s) in queues.iter_mut().zip(&mut samples) {
            let start = Instant::now();
            for _ in 0..config.trigger_batch {
                black_box(q.poll());
            }
            s.push(start.elapsed().as_nanos() as f64 / config.trigger_batch as f64);
        }
    }
    let mut rows: Vec<Row> = queues
        .iter()
        .zip(samples)
        .map(|(q, s)| row(q.name(), pending, "trigger", &s))
        .collect();
    rows.push(row(CLOCK_READ, pending, "clock_read", &reads));
    rows
}

/// The pseudo-implementation whose rows hold the bare clock read.
pub const CLOCK_READ: &str = "clock";

fn bench_structures(
    hz: u64,
    pending: usize,
    config: &CoreBenchConfig,
) -> (Vec<Row>, Vec<MemoryRow>) {
    let clock = SimClock::new(hz);
    let mut rng = SmallRng::seed_from_u64(11);
    let mut queues = baselines::simulated(&clock, config.slot_ticks);
    let mut memory = Vec::new();
    for q in &mut queues {
        let before = alloc_count::live_bytes();
        prefill(q.as_mut(), pending, hz, &mut rng);
        if let (Some(before), Some(after)) = (before, alloc_count::live_bytes()) {
            memory.push(MemoryRow {
                implementation: q.name().to_string(),
                pending,
                bytes_per_event: (after - before) as f64 / pending as f64,
            });
        }
    }
    let n = queues.len();
    let (mut sched, mut cancel, mut fire) = (vec![vec![]; n], vec![vec![]; n], vec![vec![]; n]);
    let mut lifecycle = vec![vec![]; n];
    let micro = Span::from_micros(1, hz).ticks();
    let log_lo = (micro as f64).ln();
    let log_hi = (hz as f64).ln();
    let mut handles = vec![0u64; config.batch];
    for _ in 0..config.reps {
        // Log-uniform in 1 µs … 1 s: pacing gaps, delayed ACKs and retransmission timers.
        let delays: Vec<u64> = (0..config.batch)
            .map(|_| rng.random_range(log_lo..log_hi).exp() as u64)
            .collect();
        let near: Vec<u64> = (0..config.batch)
            .map(|_| rng.random_range(micro..100 * micro))
            .collect();
        for (i, q) in queues.iter_mut().enumerate() {
            let start = Instant::now();
            for (h, (j, &d)) in handles.iter_mut().zip(delays.iter().enumerate()) {
                *h = q.schedule(d, j as u64);
            }
            sched[i].push(start.elapsed().as_nanos() as f64 / config.batch as f64);

            let start = Instant::now();
            for &h in &handles {
                q.cancel(h);
            }
            cancel[i].push(start.elapsed().as_nanos() as f64 / config.batch as f64);
            debug_assert_eq!(q.len(), pending);
        }
        // Schedule then fire: every queue sees the same clock move.
        let fired = work_then_poll(
            &mut queues,
            &clock,
            2_000 * micro,
            config.batch,
            &mut fire,
            |q| {
                for (j, &d) in near.iter().enumerate() {
                    q.schedule(d, j as u64);
                }
            },
        );
        for (q, n) in queues.iter().zip(fired) {
            assert_eq!(
                n,
                config.batch,
                "{} fired the wrong number at {pending} pending",
                q.name()
            );
        }
        // Cancelled timers, until the clock has passed where they were due.
        let fired = work_then_poll(
            &mut queues,
            &clock,
            2_000 * micro,
            config.batch,
            &mut lifecycle,
            |q| {
                for (h, (j, &d)) in handles.iter_mut().zip(near.iter().enumerate()) {
                    *h = q.schedule(d * 10, j as u64);
                }
                for &h in &handles {
                    q.cancel(h);
                }
            },
        );
        for (q, n) in queues.iter().zip(fired) {
            assert_eq!(n, 0, "{} fired a cancelled event", q.name());
        }
    }
    let mut rows = Vec::new();
    for (i, q) in queues.iter().enumerate() {
        rows.push(row(q.name(), pending, "schedule", &sched[i]));
        rows.push(row(q.name(), pending, "cancel", &cancel[i]));
        rows.push(row(q.name(), pending, "schedule_fire", &fire[i]));
        rows.push(row(
            q.name(),
            pending,
            "schedule_cancel_reap",
            &lifecycle[i],
        ));
    }
    (rows, memory)
}

/// Times `work` on every queue, moves the shared clock by `advance` (2 ms: past tokio's 1 ms
/// rounding, so that every queue fires what is due), then times each queue's poll; pushes
/// each queue's (work + poll) time per operation onto `samples` and returns what each fired.
fn work_then_poll(
    queues: &mut [Box<dyn TimerQueue>],
    clock: &SimClock,
    advance: u64,
    ops: usize,
    samples: &mut [Vec<f64>],
    mut work: impl FnMut(&mut dyn TimerQueue),
) -> Vec<usize> {
    let spent: Vec<_> = queues
        .iter_mut()
        .map(|q| {
            let start = Instant::now();
            work(q.as_mut());
            start.elapsed()
        })
        .collect();
    clock.advance(advance);
    queues
        .iter_mut()
        .zip(spent)
        .zip(samples)
        .map(|((q, spent), s)| {
            let start = Instant::now();
            let fired = q.poll();
            s.push((spent + start.elapsed()).as_nanos() as f64 / ops as f64);
            fired
        })
        .collect()
}

fn row(implementation: &str, pending: usize, op: &str, samples: &[f64]) -> Row {
    Row {
        implementation: implementation.to_string(),
        pending,
        op: op.to_string(),
        median_ns: median(samples),
        p99_ns: percentile(samples, 99.0),
        min_ns: samples.iter().copied().fold(f64::INFINITY, f64::min),
        samples: samples.len(),
    }
}

const OURS: &str = "softtimer";

fn check_targets(report: &CoreReport, config: &CoreBenchConfig) -> Vec<TargetCheck> {
    use crate::paper::{ANCHOR_CLOCK_READ, ANCHOR_DESIGN, ANCHOR_HEAPS};
    let mut checks = Vec::new();
    let largest = config.sizes.iter().copied().max().unwrap_or(0);
    for &n in &config.sizes {
        if let (Some(r), Some(read)) = (
            report.row(OURS, n, "trigger"),
            report.row(CLOCK_READ, n, "clock_read"),
        ) {
            checks.push(TargetCheck::new(
                format!("trigger / clock read, {n} pending"),
                Goal::at_most(1.5, "<= 1.5"),
                r.median_ns / read.median_ns,
                ANCHOR_CLOCK_READ,
            ));
        }
        for op in ["schedule", "cancel"] {
            if let Some(r) = report.row(OURS, n, op) {
                checks.push(TargetCheck::new(
                    format!("{op} median ns, {n} pending"),
                    Goal::at_most(30.0, "<= 30"),
                    r.median_ns,
                    ANCHOR_DESIGN,
                ));
            }
        }
        if let Some(r) = report.row(OURS, n, "schedule_fire") {
            checks.push(TargetCheck::new(
                format!("schedule_fire median ns, {n} pending"),
                Goal::at_most(60.0, "<= 60"),
                r.median_ns,
                ANCHOR_DESIGN,
            ));
        }
        // Against the other queues, a timer's whole life: a lone schedule or cancel hides
        // what a lazy-cancel heap puts off until later.
        if n == largest
            && let Some(r) = report.row(OURS, n, "schedule_cancel_reap")
        {
            checks.push(TargetCheck::new(
                format!("a cancelled timer's whole life: best baseline / ours, {n} pending"),
                Goal::at_least(3.0, ">= 3"),
                report.best_baseline(n, "schedule_cancel_reap") / r.median_ns,
                ANCHOR_HEAPS,
            ));
        }
    }
    for m in report.memory.iter().filter(|m| m.implementation == OURS) {
        checks.push(TargetCheck::new(
            format!("bytes per pending event, {} pending", m.pending),
            Goal::at_most(64.0, "<= 64"),
            m.bytes_per_event,
            ANCHOR_DESIGN,
        ));
    }
    checks
}

impl Skippable for CoreReport {}

impl Section for CoreReport {
    const FILE: &'static str = "bench_core.json";
    const TITLE: &'static str = "The facility's core operations (`softtimers bench core`)";
    fn body(&self, page: &mut Page<'_>) -> anyhow::Result<()> {
        page.text(
            "Median ns per operation (99th percentile of batch means in brackets). \
             `schedule`, `cancel` and `schedule_fire` run on a simulated clock so that the \
             data structures are compared; `trigger` runs on the real clock.\n\n",
        );
        page.text(&to_markdown(self));
        Ok(())
    }
}

/// The report as a Markdown table.
pub fn to_markdown(report: &CoreReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let pin = report
        .pinned_cpu
        .map_or("not pinned".to_string(), |c| format!("pinned to CPU {c}"));
    let _ = writeln!(
        out,
        "Clock: {} at {} Hz, one read {:.1} ns (median); benchmark thread {pin}.\n",
        report.clock_source, report.clock_hz, report.clock_read_ns
    );
    let mut table = Table::new(
        "op | pending: | softtimer: | binary_heap: | btree_map: | tokio_delay_queue: | best baseline / softtimer:",
    );
    let mut sizes: Vec<usize> = report.rows.iter().map(|r| r.pending).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for op in [
        "trigger",
        "schedule",
        "cancel",
        "schedule_cancel_reap",
        "schedule_fire",
    ] {
        for &n in &sizes {
            let cell = |name: &str| {
                report.row(name, n, op).map_or("–".to_string(), |r| {
                    format!("{:.1} (p99 {:.1})", r.median_ns, r.p99_ns)
                })
            };
            let ours = report.row(OURS, n, op).map(|r| r.median_ns);
            let best = report.best_baseline(n, op);
            let ratio = ours.map_or("–".to_string(), |o| format!("{:.2}×", best / o));
            table.row(&[
                &op,
                &n,
                &cell("softtimer"),
                &cell("binary_heap"),
                &cell("btree_map"),
                &cell("tokio_delay_queue"),
                &ratio,
            ]);
        }
    }
    out += &table.finish();
    let reads: Vec<String> = sizes
        .iter()
        .filter_map(|&n| {
            report
                .row(CLOCK_READ, n, "clock_read")
                .map(|r| format!("{:.1} ns at {n} pending", r.median_ns))
        })
        .collect();
    let _ = writeln!(
        out,
        "\nThe clock read the trigger makes, measured between the trigger samples: {}.",
        reads.join(", ")
    );
    if !report.memory.is_empty() {
        let mut table = Table::new("memory | pending: | bytes per pending event:");
        for m in &report.memory {
            table.row(&[
                &m.implementation,
                &m.pending,
                &format!("{:.1}", m.bytes_per_event),
            ]);
        }
        out += "\n";
        out += &table.finish();
    }
    out += "\n";
    out += &targets_table(&report.targets);
    out
}
