//! `lab async`: the async runtime on soft timers (`softtimer-async`) against tokio 1.x
//! (`current_thread`, and multi-thread for HTTP on two cores) and smol, every row pinned alike
//! and measured in the same run.
//!
//! | workload | what it measures | module |
//! | --- | --- | --- |
//! | `sleep-20us`, `sleep-100us`, `sleep-1ms` | one task sleeping 20 µs, 100 µs, 1 ms in a loop: lateness, CPU per sleep, at each [`Precision`] | [`sleep`] |
//! | `interval-100us`, `interval-1ms` | one task ticking an `interval`: each tick's lateness past its schedule, CPU per tick | [`sleep`] |
//! | `sleep-10k-tasks` | 10,000 tasks each sleeping 100 µs–10 ms at random in a loop (the three runtimes interleaved in rounds): lateness, CPU per fire | [`sleep`] |
//! | `paced-udp-100mbit` | 1472-byte datagrams at 100 Mbit/s over loopback: inter-arrival stddev, sender CPU | [`udp`] |
//! | `hyper-1core` | a hyper HTTP/1.1 server, a 6 KB body, keep-alive, on one core (soft and tokio interleaved in rounds), then on two (soft's two loops, tokio's multi-thread scheduler): requests/s | [`http`] |
//! | `hyper-hello`, `hyper-6k-close`, `hyper-hello-close` | the same server on one core with a hello-world body, and a connection per request | [`http`] |
//! | `quinn-rr` | unchanged quinn, request/response at 1 % loss each way and a 1 ms ACK delay: p99, CPU per request | [`quic`] |
//! | `quinn-bulk` | unchanged quinn, a 32 MB download without loss per runtime in each of 3 interleaved rounds (full: 96 MB, 5 rounds): CPU per MB (the row's operation is a megabyte), MB/s | [`quic`] |
//!
//! Each runtime is written as its own users write it: tokio's `sleep_until` and `interval`,
//! smol's `Timer::at` and `Timer::interval` on a `LocalExecutor`, hyper on tokio through
//! `hyper-util`'s `TokioIo`. CPU is the process's CPU time (every thread: a runtime's helper
//! threads count) over the measured part, less the receiver's own where the receiver runs in
//! the process.

pub mod http;
pub mod quic;
pub mod sleep;
pub mod udp;

use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use softtimer_async::Precision;
use softtimers_tools::cpu::process_cpu_ns;

use crate::harness::{Client, ExpOptions};
use crate::report::{Page, Section, StepResult};
use crate::summary::{median, paired_ratios, range};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck};

/// Where the baselines come from (the anchor: the same workload on tokio and smol).
pub const ANCHOR: &str = "tokio 1.x current_thread and smol 2, same run, pinned alike";

/// The workloads of `lab async`; in JSON by their kebab-case names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AsyncWorkload {
    /// Sequential `sleep(20 µs)` on one task.
    #[serde(rename = "sleep-20us")]
    Sleep20us,
    /// Sequential `sleep(100 µs)` on one task.
    #[serde(rename = "sleep-100us")]
    Sleep100us,
    /// Sequential `sleep(1 ms)` on one task.
    #[serde(rename = "sleep-1ms")]
    Sleep1ms,
    /// An `interval` at 100 µs on one task.
    #[serde(rename = "interval-100us")]
    Interval100us,
    /// An `interval` at 1 ms on one task.
    #[serde(rename = "interval-1ms")]
    Interval1ms,
    /// 10,000 tasks sleeping at random and re-arming.
    #[serde(rename = "sleep-10k-tasks")]
    Sleep10kTasks,
    /// 100 Mbit/s of 1472 B datagrams, paced.
    #[serde(rename = "paced-udp-100mbit")]
    PacedUdp100mbit,
    /// hyper HTTP/1.1 keep-alive, a 6 KB body.
    #[serde(rename = "hyper-1core")]
    Hyper1core,
    /// hyper HTTP/1.1 keep-alive, a hello-world body.
    #[serde(rename = "hyper-hello")]
    HyperHello,
    /// hyper HTTP/1.1, a connection per request, a 6 KB body.
    #[serde(rename = "hyper-6k-close")]
    Hyper6kClose,
    /// hyper HTTP/1.1, a connection per request, a hello-world body.
    #[serde(rename = "hyper-hello-close")]
    HyperHelloClose,
    /// Unchanged quinn, request/response under loss.
    #[serde(rename = "quinn-rr")]
    QuinnRr,
    /// Unchanged quinn, a bulk download; its operation is a megabyte delivered.
    #[serde(rename = "quinn-bulk")]
    QuinnBulk,
}

impl AsyncWorkload {
    /// The name in JSON and in the report.
    pub fn name(self) -> &'static str {
        match self {
            AsyncWorkload::Sleep20us => "sleep-20us",
            AsyncWorkload::Sleep100us => "sleep-100us",
            AsyncWorkload::Sleep1ms => "sleep-1ms",
            AsyncWorkload::Interval100us => "interval-100us",
            AsyncWorkload::Interval1ms => "interval-1ms",
            AsyncWorkload::Sleep10kTasks => "sleep-10k-tasks",
            AsyncWorkload::PacedUdp100mbit => "paced-udp-100mbit",
            AsyncWorkload::Hyper1core => "hyper-1core",
            AsyncWorkload::HyperHello => "hyper-hello",
            AsyncWorkload::Hyper6kClose => "hyper-6k-close",
            AsyncWorkload::HyperHelloClose => "hyper-hello-close",
            AsyncWorkload::QuinnRr => "quinn-rr",
            AsyncWorkload::QuinnBulk => "quinn-bulk",
        }
    }
}

/// The runtimes `lab async` compares; in JSON as `soft`, `tokio-ct`, `tokio-mt`, `smol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeKind {
    /// `softtimer-async`.
    Soft,
    /// tokio's `current_thread` scheduler.
    TokioCt,
    /// tokio's multi-thread scheduler.
    TokioMt,
    /// smol 2 (`async-io`'s reactor).
    Smol,
}

impl RuntimeKind {
    /// The name in JSON and in the report.
    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Soft => "soft",
            RuntimeKind::TokioCt => "tokio-ct",
            RuntimeKind::TokioMt => "tokio-mt",
            RuntimeKind::Smol => "smol",
        }
    }
}

impl std::fmt::Display for AsyncWorkload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A row of `async.json`. A field a workload does not measure is `null` (`idle_spin_ns_per_op`:
/// absent).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AsyncRow {
    /// What was measured.
    pub workload: AsyncWorkload,
    /// Which runtime ran it.
    pub runtime: RuntimeKind,
    /// The soft runtime's [`Precision`] (`coarse`, `calibrated`, `window-20us`, `within-5us`,
    /// `busy`).
    pub precision: Option<String>,
    /// Timer lateness past the deadline, µs.
    pub late_p50_us: Option<f64>,
    /// p99.
    pub late_p99_us: Option<f64>,
    /// Maximum.
    pub late_max_us: Option<f64>,
    /// CPU per operation (a sleep, a fire, a datagram, a request; a megabyte in
    /// `quinn-bulk`), ns.
    pub cpu_ns_per_op: Option<f64>,
    /// Of the CPU per operation, the part the soft runtime's loop spent spinning in its idle
    /// policy (no task to run, a timer due within its spin window), ns
    /// ([`softtimer_async::RuntimeStats::idle_spin`]); over rounds, the median of the rounds'
    /// as `cpu_ns_per_op` is (each its own median). Absent for the other runtimes, the rows
    /// that do not record it, and older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_spin_ns_per_op: Option<f64>,
    /// Operations per second.
    pub ops_per_s: Option<f64>,
    /// p99 of the workload's own figure (inter-arrival time for UDP), µs.
    pub p99_us: Option<f64>,
    /// Standard deviation of the inter-arrival time, µs.
    pub stddev_us: Option<f64>,
    /// Runtime threads.
    pub threads: Option<u32>,
    /// The load generator of an HTTP row (`own`, `wrk`); `null` elsewhere and in older
    /// reports.
    #[serde(default)]
    pub client: Option<Client>,
    /// Operations per second in each round, where the row is the median of interleaved
    /// rounds (`hyper-1core` on one core, `sleep-10k-tasks`, `quinn-bulk`,
    /// `paced-udp-100mbit`); empty elsewhere and in older reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ops_per_s_rounds: Vec<f64>,
    /// CPU per operation in each round, as `ops_per_s_rounds`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_ns_per_op_rounds: Vec<f64>,
    /// Lateness p99 in each round, µs, as `cpu_ns_per_op_rounds`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_p99_us_rounds: Vec<f64>,
    /// Inter-arrival stddev in each round, µs (`paced-udp-100mbit`), as
    /// `cpu_ns_per_op_rounds`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stddev_us_rounds: Vec<f64>,
}

impl AsyncRow {
    /// A row with nothing measured yet.
    pub fn new(
        workload: AsyncWorkload,
        runtime: RuntimeKind,
        precision: Option<Precision>,
    ) -> Self {
        AsyncRow {
            workload,
            runtime,
            precision: precision.map(|p| p.name()),
            late_p50_us: None,
            late_p99_us: None,
            late_max_us: None,
            cpu_ns_per_op: None,
            idle_spin_ns_per_op: None,
            ops_per_s: None,
            p99_us: None,
            stddev_us: None,
            threads: Some(1),
            client: None,
            ops_per_s_rounds: Vec::new(),
            cpu_ns_per_op_rounds: Vec::new(),
            late_p99_us_rounds: Vec::new(),
            stddev_us_rounds: Vec::new(),
        }
    }

    /// One runtime's row over interleaved rounds: each figure the median of the rounds'
    /// (the lateness maximum, the largest), with each round's operations per second, CPU per
    /// operation, lateness p99 and inter-arrival stddev kept round by round where every
    /// round has them (the targets pair them with the other runtime's by index). `None` for
    /// no rounds.
    pub fn over_rounds(rounds: Vec<AsyncRow>) -> Option<AsyncRow> {
        // A figure's rounds only where every round has it: the targets pair them by index.
        let of = |figure: fn(&AsyncRow) -> Option<f64>| -> Vec<f64> {
            rounds
                .iter()
                .map(figure)
                .collect::<Option<Vec<f64>>>()
                .unwrap_or_default()
        };
        let median_of = |figure: fn(&AsyncRow) -> Option<f64>| {
            let some: Vec<f64> = rounds.iter().filter_map(figure).collect();
            Some(median(&some)).filter(|m| !m.is_nan())
        };
        let mut row = rounds.first()?.clone();
        row.late_p50_us = median_of(|r| r.late_p50_us);
        row.late_p99_us = median_of(|r| r.late_p99_us);
        row.late_max_us = of(|r| r.late_max_us).into_iter().reduce(f64::max);
        row.cpu_ns_per_op = median_of(|r| r.cpu_ns_per_op);
        row.idle_spin_ns_per_op = median_of(|r| r.idle_spin_ns_per_op);
        row.ops_per_s = median_of(|r| r.ops_per_s);
        row.p99_us = median_of(|r| r.p99_us);
        row.stddev_us = median_of(|r| r.stddev_us);
        row.ops_per_s_rounds = of(|r| r.ops_per_s);
        row.cpu_ns_per_op_rounds = of(|r| r.cpu_ns_per_op);
        row.late_p99_us_rounds = of(|r| r.late_p99_us);
        row.stddev_us_rounds = of(|r| r.stddev_us);
        Some(row)
    }

    /// Fills the lateness columns from `late_ns` (sorted here).
    pub fn with_lateness(mut self, late_ns: &mut [u64]) -> Self {
        late_ns.sort_unstable();
        self.late_p50_us = quantile_us(late_ns, 0.5);
        self.late_p99_us = quantile_us(late_ns, 0.99);
        self.late_max_us = quantile_us(late_ns, 1.0);
        self
    }
}

/// The `q` quantile of sorted nanosecond figures, in µs.
fn quantile_us(sorted_ns: &[u64], q: f64) -> Option<f64> {
    let last = sorted_ns.len().checked_sub(1)?;
    Some(sorted_ns[(last as f64 * q).round() as usize] as f64 / 1e3)
}

/// `async.json`.
pub type AsyncResult = StepResult<AsyncRow, AsyncExtra>;

/// What `lab async` records beside its rows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AsyncExtra {
    /// Paced UDP's floor on this machine: the inter-arrival stddev, µs, of a thread that
    /// spins on the clock and sends each datagram at its time (a whole core, no runtime), so
    /// that a runtime's figure is read against what the machine allows. `None` in older
    /// reports.
    #[serde(default)]
    pub paced_udp_floor_stddev_us: Option<f64>,
    /// The floor's stddev in each of paced UDP's interleaved rounds, µs (its median is
    /// `paced_udp_floor_stddev_us`); empty in older reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paced_udp_floor_stddev_us_rounds: Vec<f64>,
    /// What did not run, and why (the `wrk` cross-check where `wrk` is not installed).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Runs the pair of runs `pair` makes `rounds` times through `measure`, the first run first
/// in even rounds and second in odd ones; returns one row per run of the pair (in its
/// order) holding the medians over its rounds, each round's figures kept
/// ([`AsyncRow::over_rounds`]).
pub(super) fn interleaved<R>(
    rounds: usize,
    measure: impl Fn(R) -> Result<AsyncRow>,
    pair: impl Fn() -> [R; 2],
) -> Result<Vec<AsyncRow>> {
    let mut per_run: [Vec<AsyncRow>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let [first, second] = pair();
        let ordered = if round % 2 == 0 {
            [(0, first), (1, second)]
        } else {
            [(1, second), (0, first)]
        };
        for (i, run) in ordered {
            per_run[i].push(measure(run)?);
        }
    }
    Ok(per_run
        .into_iter()
        .filter_map(AsyncRow::over_rounds)
        .collect())
}

/// Process CPU time around `work`: its result and the CPU it took, ns.
pub fn with_cpu<T>(work: impl FnOnce() -> T) -> (T, u64) {
    let before = process_cpu_ns();
    let out = work();
    (out, process_cpu_ns().saturating_sub(before))
}

/// The soft runtime's precision settings the lab measures.
pub fn precisions() -> [Precision; 5] {
    [
        Precision::Coarse,
        Precision::Calibrated,
        Precision::Window(std::time::Duration::from_micros(20)),
        Precision::Within(std::time::Duration::from_micros(5)),
        Precision::Busy,
    ]
}

/// About how long the step takes, s.
pub fn expected_seconds(quick: bool) -> f64 {
    sleep::expected_seconds(quick)
        + udp::expected_seconds(quick)
        + http::expected_seconds(quick)
        + quic::expected_seconds(quick)
}

/// Runs `lab async`.
pub fn run(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<AsyncResult> {
    let quick = options.length.quick;
    let total = expected_seconds(quick);
    let mut done = 0.0;
    let mut rows = Vec::new();
    let mut step = |name: &str, seconds: f64, progress: &mut dyn FnMut(f64, &str)| {
        progress(done / total, name);
        done += seconds;
    };
    step(
        "sleep and interval lateness",
        sleep::sleep_seconds(quick),
        progress,
    );
    rows.extend(sleep::one_task(quick)?);
    step("sleep-10k-tasks", sleep::tasks_seconds(quick), progress);
    rows.extend(sleep::sleep_10k_tasks(quick)?);
    step("paced-udp-100mbit", udp::expected_seconds(quick), progress);
    let paced = udp::paced_udp(quick)?;
    rows.extend(paced.rows);
    step("hyper", http::expected_seconds(quick), progress);
    let (hyper, notes) = http::hyper(options)?;
    rows.extend(hyper);
    step(
        "quinn-rr, quinn-bulk",
        quic::expected_seconds(quick),
        progress,
    );
    rows.extend(quic::quinn(quick)?);
    let targets = targets(&rows);
    let extra = AsyncExtra {
        paced_udp_floor_stddev_us: Some(paced.floor_stddev_us),
        paced_udp_floor_stddev_us_rounds: paced.floor_stddev_us_rounds,
        notes,
    };
    Ok(AsyncResult::ran(
        options.length.mode(),
        extra,
        rows,
        targets,
    ))
}

/// The first one-thread row of `workload` on `runtime` (soft's at its default precision):
/// for HTTP, the row of the load generator the lab was given (`--client`; its rows come
/// before the cross-check's).
fn find(rows: &[AsyncRow], workload: AsyncWorkload, runtime: RuntimeKind) -> Option<&AsyncRow> {
    let default = Precision::default().name();
    rows.iter().find(|r| {
        r.workload == workload
            && r.runtime == runtime
            && r.threads == Some(1)
            && (runtime != RuntimeKind::Soft || r.precision.as_deref() == Some(&default))
    })
}

fn ratio(a: Option<f64>, b: Option<f64>) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => a / b,
        (Some(_), Some(_)) => f64::INFINITY,
        _ => f64::NAN,
    }
}

/// `at_most` (or at least, `at_least`) `bound`: `figure` of soft's one-thread row over
/// tokio `current_thread`'s in `workload`, when both ran.
pub(super) struct SoftVsTokio {
    workload: AsyncWorkload,
    name: &'static str,
    goal: &'static str,
    bound: f64,
    at_least: bool,
    figure: fn(&AsyncRow) -> Option<f64>,
    /// The figure round by round, where the rows are medians of interleaved rounds (empty
    /// otherwise): the target is then the median of the per-round ratios.
    rounds: fn(&AsyncRow) -> &[f64],
    anchor: &'static str,
}

impl SoftVsTokio {
    fn check(&self, rows: &[AsyncRow]) -> Option<TargetCheck> {
        let soft = find(rows, self.workload, RuntimeKind::Soft)?;
        let tokio = find(rows, self.workload, RuntimeKind::TokioCt)?;
        let (measured, name) = soft_over(self.name, soft, tokio, self.figure, self.rounds);
        let goal = if self.at_least {
            Goal::at_least(self.bound, self.goal)
        } else {
            Goal::at_most(self.bound, self.goal)
        };
        Some(TargetCheck::new(name, goal, measured, self.anchor))
    }
}

/// `figure` of `soft`'s row over `base`'s, as a target reads it: the median of the per-round
/// ratios of `rounds` where both rows hold their rounds (`name` then says so, with their
/// range), else the ratio of the rows (a row of one run, or an older report).
pub(super) fn soft_over(
    name: &str,
    soft: &AsyncRow,
    base: &AsyncRow,
    figure: fn(&AsyncRow) -> Option<f64>,
    rounds: fn(&AsyncRow) -> &[f64],
) -> (f64, String) {
    let ratios = paired_ratios(rounds(soft), rounds(base));
    over_rounds(name, &ratios)
        .unwrap_or_else(|| (ratio(figure(soft), figure(base)), name.to_string()))
}

/// The median of per-round ratios, and `name` saying so with their range; `None` for no
/// rounds (a row of one run, or an older report).
pub(super) fn over_rounds(name: &str, ratios: &[f64]) -> Option<(f64, String)> {
    if ratios.is_empty() {
        return None;
    }
    let (lo, hi) = range(ratios);
    let n = ratios.len();
    let name =
        format!("{name} (median of {n} interleaved rounds, per-round range {lo:.2}-{hi:.2})");
    Some((median(ratios), name))
}

/// The targets that compare soft's row with tokio `current_thread`'s.
const SOFT_VS_TOKIO: [SoftVsTokio; 4] = [
    SoftVsTokio {
        workload: sleep::SLEEP_10K,
        name: "10,000 sleeping tasks, lateness p99: soft / tokio-ct",
        goal: "≤ 0.05 (1/20)",
        bound: 0.05,
        at_least: false,
        figure: |r| r.late_p99_us,
        rounds: |r| &r.late_p99_us_rounds,
        anchor: ANCHOR,
    },
    SoftVsTokio {
        workload: sleep::SLEEP_10K,
        name: "10,000 sleeping tasks, CPU per fire: soft / tokio-ct",
        goal: "≤ 1.0",
        bound: 1.0,
        at_least: false,
        figure: |r| r.cpu_ns_per_op,
        rounds: |r| &r.cpu_ns_per_op_rounds,
        anchor: ANCHOR,
    },
    SoftVsTokio {
        workload: quic::QUINN_RR,
        name: "unchanged quinn, request/response p99 at 1 % loss each way, 1 ms ACK delay: soft / tokio-ct",
        goal: "≤ 0.8",
        bound: 0.8,
        at_least: false,
        figure: |r| r.p99_us,
        rounds: |_| &[],
        anchor: quic::ANCHOR,
    },
    SoftVsTokio {
        workload: quic::QUINN_BULK,
        name: "unchanged quinn, bulk download without loss, CPU per MB (both ends): soft / tokio-ct",
        goal: "≤ 1.05",
        bound: 1.05,
        at_least: false,
        figure: |r| r.cpu_ns_per_op,
        rounds: |r| &r.cpu_ns_per_op_rounds,
        anchor: quic::ANCHOR,
    },
];

/// The step's targets, judged from the rows.
pub fn targets(rows: &[AsyncRow]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    let w = sleep::SLEEP_100US;
    let soft: Vec<&AsyncRow> = rows
        .iter()
        .filter(|r| r.workload == w && r.runtime == RuntimeKind::Soft)
        .collect();
    if let (Some(tokio), Some(smol)) = (
        find(rows, w, RuntimeKind::TokioCt),
        find(rows, w, RuntimeKind::Smol),
    ) {
        // The best setting that keeps its CPU within 1.2 × smol's.
        let best = soft
            .iter()
            .filter(|r| ratio(r.cpu_ns_per_op, smol.cpu_ns_per_op) <= 1.2)
            .min_by(|a, b| {
                ratio(a.late_p99_us, smol.late_p99_us)
                    .total_cmp(&ratio(b.late_p99_us, smol.late_p99_us))
            });
        let (name, vs_tokio, vs_smol, cpu) = match best {
            Some(r) => (
                r.precision.clone().unwrap_or_default(),
                ratio(r.late_p99_us, tokio.late_p99_us),
                ratio(r.late_p99_us, smol.late_p99_us),
                ratio(r.cpu_ns_per_op, smol.cpu_ns_per_op),
            ),
            None => (
                "none within 1.2 × smol's CPU".into(),
                f64::NAN,
                f64::NAN,
                f64::NAN,
            ),
        };
        out.push(TargetCheck::new(
            format!("sleep(100 µs) lateness p99, soft ({name}) / tokio-ct"),
            Goal::at_most(0.02, "≤ 0.02 (1/50), at ≤ 1.2 × smol's CPU per sleep"),
            vs_tokio,
            ANCHOR,
        ));
        out.push(TargetCheck::new(
            format!("sleep(100 µs) lateness p99, soft ({name}) / smol"),
            Goal::at_most(0.333, "≤ 0.333 (1/3), at ≤ 1.2 × smol's CPU per sleep"),
            vs_smol,
            ANCHOR,
        ));
        out.push(TargetCheck::new(
            format!("sleep(100 µs) CPU per sleep, soft ({name}) / smol"),
            Goal::at_most(1.2, "≤ 1.2"),
            cpu,
            ANCHOR,
        ));
        let default = Precision::default().name();
        if let Some(d) = soft
            .iter()
            .find(|r| r.precision.as_deref() == Some(&default))
        {
            let p99 = ratio(d.late_p99_us, smol.late_p99_us);
            let cpu = ratio(d.cpu_ns_per_op, smol.cpu_ns_per_op);
            let name = format!(
                "sleep(100 µs), default precision ({default}): the larger of lateness p99 / smol's and CPU per sleep / smol's"
            );
            // Unmeasured if either is: `f64::max` would pass over a NaN.
            let larger = if p99.is_nan() || cpu.is_nan() {
                f64::NAN
            } else {
                p99.max(cpu)
            };
            let goal = Goal::at_most(1.0, "≤ 1.0 (each figure at most smol's)");
            out.push(TargetCheck::new(name, goal, larger, ANCHOR));
        }
    }
    let w = udp::PACED_UDP;
    if let Some(soft) = find(rows, w, RuntimeKind::Soft) {
        let better = [RuntimeKind::TokioCt, RuntimeKind::Smol]
            .into_iter()
            .filter_map(|rt| find(rows, w, rt))
            .filter(|r| r.stddev_us.is_some())
            .min_by(|a, b| a.stddev_us.unwrap().total_cmp(&b.stddev_us.unwrap()));
        if let Some(base) = better {
            // `what` of soft's row over the better baseline's: the median of the per-round
            // ratios where the rows are rounds', else the rows' ratio.
            let against_base = |what: &str,
                                note: &str,
                                goal,
                                of: fn(&AsyncRow) -> Option<f64>,
                                rounds: fn(&AsyncRow) -> &[f64]| {
                let name = base.runtime.name();
                let figure = format!("paced UDP 100 Mbit/s, {what}: soft / {name}{note}");
                let (measured, figure) = soft_over(&figure, soft, base, of, rounds);
                TargetCheck::new(figure, goal, measured, ANCHOR)
            };
            out.push(against_base(
                "inter-arrival stddev",
                " (the better baseline)",
                Goal::at_most(0.2, "≤ 0.2 (1/5)"),
                |r| r.stddev_us,
                |r| &r.stddev_us_rounds,
            ));
            out.push(against_base(
                "sender CPU per datagram",
                "",
                Goal::at_most(1.0, "≤ 1.0"),
                |r| r.cpu_ns_per_op,
                |r| &r.cpu_ns_per_op_rounds,
            ));
        }
    }
    out.extend(SOFT_VS_TOKIO.iter().filter_map(|t| t.check(rows)));
    out.extend(http::one_core_target(rows));
    out.extend(http::scale_target(rows));
    out
}

fn cell(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

impl Section for AsyncResult {
    const FILE: &'static str = "async.json";
    const TITLE: &'static str = "async: the runtime on soft timers against tokio and smol";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        page.text("Every runtime pinned to the same CPU (the load generator or receiver on another). Lateness: how long after its deadline a timer's task ran again. CPU: the process's CPU time per operation (a sleep, a fire, a datagram sent, a request), helper threads included, the in-process receiver's excluded; of it spinning: the time the soft runtime's loop spent spinning in its idle policy, for a timer due within its spin window or just after a wake-up a hair early (by the loop's clock, so a stretch the thread was descheduled counts too: waiting, not work), in the timer rows; in the 10,000-task row it and the CPU are each the median of their rounds. Paced UDP's p99 and stddev are of the gaps between the datagrams' kernel receive timestamps (on loopback, taken as the sender hands each over). `-`: not measured by that workload. The one-task rows pool three rounds and the 10,000-task row is the median of its rounds, the runtimes interleaved in each; paced UDP's rows are the medians of three interleaved rounds of the four senders (one in a quick run; the floor's among them; the targets the median of the per-round ratios); the other rows are one run each, except hyper on one core (rounds, below) and quinn's bulk download (the median of its rounds, the target the median of the per-round ratios).\n\n");
        page.table(
            Table::of(&self.rows)
                .text("workload", |r| r.workload.name())
                .text("runtime", |r| r.runtime.name())
                .text("precision", |r| r.precision.as_deref().unwrap_or("-"))
                .text("threads:", |r| {
                    r.threads.map_or_else(|| "-".into(), |t| t.to_string())
                })
                .text("client", |r| r.client.map_or("-", Client::name))
                .text("late p50 (µs):", |r| cell(r.late_p50_us, 1))
                .text("late p99 (µs):", |r| cell(r.late_p99_us, 1))
                .text("late max (µs):", |r| cell(r.late_max_us, 1))
                .text("CPU per op (ns):", |r| cell(r.cpu_ns_per_op, 0))
                .text("of it spinning (ns):", |r| cell(r.idle_spin_ns_per_op, 0))
                .text("ops/s:", |r| cell(r.ops_per_s, 0))
                .text("p99 (µs):", |r| cell(r.p99_us, 1))
                .text("stddev (µs):", |r| cell(r.stddev_us, 2))
                .table(),
        );
        page.text("\nThe quinn rows here run on loopback with the loss made in each runtime's socket; the same unchanged quinn on this runtime runs through the path emulator (`softtimers path`) as stack `quinn-async` in E16 (request/response at 1 % loss, quinn's defaults and the 1 ms ACK delay) and in the QUIC matrix's first bulk scenario, each against `quinn-tokio`.\n\n");
        if let Some(floor) = self.extra.paced_udp_floor_stddev_us {
            let rounds = &self.extra.paced_udp_floor_stddev_us_rounds;
            let how = if rounds.is_empty() {
                "measured after the runtimes, not interleaved with them".to_string()
            } else {
                let each: Vec<String> = rounds.iter().map(|r| format!("{r:.2}")).collect();
                format!(
                    "the median of its rounds, interleaved with the runtimes': {} µs",
                    each.join(", ")
                )
            };
            let _ = writeln!(
                page,
                "Paced UDP's floor on this machine: a thread that spins on the clock and sends each datagram at its time, a whole core, has an inter-arrival stddev of {floor:.2} µs ({how}); a runtime's stddev is read against it.\n"
            );
        }
        for note in &self.extra.notes {
            let _ = writeln!(page, "Note: {note}.\n");
        }
        page.targets(&self.targets);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
