//! Timer lateness: one task sleeping 20 µs, 100 µs or 1 ms in a loop (the test of tokio's
//! timer-precision report),
//! one task ticking an `interval` at 100 µs or 1 ms, and 10,000 tasks each sleeping
//! 100 µs–10 ms at random in a loop (the runtimes interleaved in rounds).

use std::cell::RefCell;
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use softtimer_async::{Precision, Runtime};
use softtimers_tools::cpu::{pin_to, server_cpu, stock_timer_slack};

use super::{AsyncRow, AsyncWorkload, RuntimeKind, precisions, with_cpu};

/// The one-task workload the targets read.
pub const SLEEP_100US: AsyncWorkload = AsyncWorkload::Sleep100us;
/// The many-task workload's name.
pub const SLEEP_10K: AsyncWorkload = AsyncWorkload::Sleep10kTasks;

const WARM_UP: Duration = Duration::from_micros(100);
const TASKS: usize = 10_000;
/// The range each task's sleeps are drawn from, µs.
const TASK_SLEEP_US: (u64, u64) = (100, 10_000);

/// What one task does in a lateness workload.
#[derive(Clone, Copy, Debug)]
enum Pattern {
    /// `sleep_until(now + d)` in a loop: lateness past each deadline.
    Sleep(Duration),
    /// The runtime's interval timer at this period, started a period from now: lateness of
    /// each tick past its place on the schedule (`start + k × period`).
    Interval(Duration),
}

/// The one-task workloads, in the order they run.
const PATTERNS: [(AsyncWorkload, Pattern); 5] = [
    (
        AsyncWorkload::Sleep20us,
        Pattern::Sleep(Duration::from_micros(20)),
    ),
    (
        AsyncWorkload::Sleep100us,
        Pattern::Sleep(Duration::from_micros(100)),
    ),
    (
        AsyncWorkload::Sleep1ms,
        Pattern::Sleep(Duration::from_millis(1)),
    ),
    (
        AsyncWorkload::Interval100us,
        Pattern::Interval(Duration::from_micros(100)),
    ),
    (
        AsyncWorkload::Interval1ms,
        Pattern::Interval(Duration::from_millis(1)),
    ),
];

/// Timers per one-task row: `sleep(100 µs)`, which the targets read, three times the others.
fn timers(workload: AsyncWorkload, quick: bool) -> usize {
    let n = if quick { 300 } else { 1_000 };
    if workload == SLEEP_100US { 3 * n } else { n }
}

/// One runtime's run in a round of the many-task workload.
fn tasks_run(quick: bool) -> Duration {
    Duration::from_millis(if quick { 600 } else { 1_600 })
}

/// Rounds of the many-task workload: every runtime runs once in each.
fn tasks_rounds(quick: bool) -> usize {
    if quick { 2 } else { 3 }
}

/// About how long the one-task rows take, s: each runtime's timers at their period, and
/// about 0.5 ms a timer beyond it over the runtimes (tokio's are a millisecond late;
/// measured).
pub fn sleep_seconds(quick: bool) -> f64 {
    let runtimes = (precisions().len() + 2) as f64;
    let rounds = ONE_TASK_ROUNDS as f64;
    PATTERNS
        .iter()
        .map(|&(w, p)| {
            let d = match p {
                Pattern::Sleep(d) | Pattern::Interval(d) => d.as_secs_f64(),
            };
            // And about 20 ms a run (measured).
            timers(w, quick) as f64 * (runtimes * d + 0.5e-3) + 0.02 * runtimes * rounds
        })
        .sum()
}

/// About how long the many-task rows take, s.
pub fn tasks_seconds(quick: bool) -> f64 {
    let runs = tasks_rounds(quick) * TASK_RUNTIMES.len();
    runs as f64 * (tasks_run(quick).as_secs_f64() + 0.3)
}

/// About how long both take, s.
pub fn expected_seconds(quick: bool) -> f64 {
    sleep_seconds(quick) + tasks_seconds(quick)
}

fn soft_runtime(precision: Precision) -> Result<Runtime> {
    Runtime::builder()
        .precision(precision)
        .build()
        .context("softtimer-async runtime")
}

fn tokio_ct() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio current_thread runtime")
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// `n` timers of `pattern` on a runtime, given as its `sleep_until`, its `interval_at` and its
/// interval's tick (each runtime's own: tokio's and the soft runtime's `poll_tick`, smol's
/// timer stream): their lateness, ns.
async fn lateness<S, I>(
    pattern: Pattern,
    n: usize,
    sleep_until: impl Fn(Instant) -> S,
    interval_at: impl FnOnce(Instant, Duration) -> I,
    poll_tick: impl Fn(&mut I, &mut std::task::Context<'_>) -> Poll<()>,
) -> Vec<u64>
where
    S: std::future::Future,
{
    let mut late = Vec::with_capacity(n);
    match pattern {
        Pattern::Sleep(d) => {
            for _ in 0..n {
                let deadline = Instant::now() + d;
                sleep_until(deadline).await;
                late.push(nanos(Instant::now() - deadline));
            }
        }
        Pattern::Interval(period) => {
            let start = Instant::now() + period;
            let mut ticks = interval_at(start, period);
            for k in 0..n as u32 {
                std::future::poll_fn(|cx| poll_tick(&mut ticks, cx)).await;
                late.push(nanos(Instant::now() - (start + period * k)));
            }
        }
    }
    late
}

/// [`lateness`] on the soft runtime.
async fn soft_timers(pattern: Pattern, n: usize) -> Vec<u64> {
    use softtimer_async::time;
    lateness(
        pattern,
        n,
        time::sleep_until,
        time::interval_at,
        |t: &mut time::Interval, cx| t.poll_tick(cx).map(drop),
    )
    .await
}

/// [`lateness`] on tokio (`sleep_until`, `interval_at`).
async fn tokio_timers(pattern: Pattern, n: usize) -> Vec<u64> {
    lateness(
        pattern,
        n,
        |at| tokio::time::sleep_until(at.into()),
        |start, period| tokio::time::interval_at(start.into(), period),
        |t: &mut tokio::time::Interval, cx| t.poll_tick(cx).map(drop),
    )
    .await
}

/// [`lateness`] on smol (`Timer::at`, `Timer::interval_at`).
async fn smol_timers(pattern: Pattern, n: usize) -> Vec<u64> {
    use smol::stream::Stream as _;
    lateness(
        pattern,
        n,
        smol::Timer::at,
        smol::Timer::interval_at,
        |t: &mut smol::Timer, cx| std::pin::Pin::new(t).poll_next(cx).map(drop),
    )
    .await
}

/// A one-task row from its timers' lateness (ns), their CPU and the soft loop's idle spin in
/// it (ns).
fn lateness_row(
    workload: AsyncWorkload,
    runtime: RuntimeKind,
    precision: Option<Precision>,
    mut late: Vec<u64>,
    (cpu, spin): (u64, Option<u64>),
) -> AsyncRow {
    let n = late.len().max(1) as f64;
    let mut row = AsyncRow::new(workload, runtime, precision).with_lateness(&mut late);
    row.cpu_ns_per_op = Some(cpu as f64 / n);
    row.idle_spin_ns_per_op = spin.map(|spin| spin as f64 / n);
    row
}

/// A runtime of the one-task rows: the soft runtime at a precision, tokio, smol. Built once
/// for a row and kept across its rounds, as a long-running program keeps its runtime (a soft
/// runtime's calibrated spin windows learn from its own wake-ups).
enum OneTask {
    Soft(Precision, Runtime),
    Tokio(tokio::runtime::Runtime),
    Smol,
}

impl OneTask {
    /// Every runtime of a row, each warmed up with one sleep: its lazy parts (calibration,
    /// the backstop) start outside the measurement.
    fn all() -> Result<Vec<OneTask>> {
        let mut all = Vec::new();
        for precision in precisions() {
            let rt = soft_runtime(precision)?;
            rt.block_on(async { softtimer_async::time::sleep(WARM_UP).await });
            all.push(OneTask::Soft(precision, rt));
        }
        // The baselines run as their users run them: at the kernel's stock timer slack, not
        // the 1 ns the soft runtimes alive on this thread set for their loops. smol's reactor
        // thread keeps the slack it starts with; every smol use in the lab is under this
        // guard, so it starts with the stock one.
        let stock = stock_timer_slack();
        let rt = tokio_ct()?;
        rt.block_on(async { tokio::time::sleep(WARM_UP).await });
        all.push(OneTask::Tokio(rt));
        smol::block_on(smol::Timer::after(WARM_UP));
        all.push(OneTask::Smol);
        drop(stock);
        Ok(all)
    }

    /// `n` timers of `pattern`: their lateness, ns, the CPU they took, and the soft loop's
    /// idle spin in it, ns (`None` for the other runtimes).
    fn run(&self, pattern: Pattern, n: usize) -> (Vec<u64>, u64, Option<u64>) {
        match self {
            OneTask::Soft(_, rt) => {
                let ((late, spin), cpu) =
                    with_cpu(|| idle_spin_of(rt, || rt.block_on(soft_timers(pattern, n))));
                (late, cpu, Some(spin))
            }
            OneTask::Tokio(rt) => {
                let _stock = stock_timer_slack();
                let (late, cpu) = with_cpu(|| rt.block_on(tokio_timers(pattern, n)));
                (late, cpu, None)
            }
            OneTask::Smol => {
                let _stock = stock_timer_slack();
                let (late, cpu) = with_cpu(|| smol::block_on(smol_timers(pattern, n)));
                (late, cpu, None)
            }
        }
    }

    /// The row of `late`, `cpu` and the idle `spin`, pooled over the rounds.
    fn row(
        &self,
        workload: AsyncWorkload,
        late: Vec<u64>,
        cpu: u64,
        spin: Option<u64>,
    ) -> AsyncRow {
        let (runtime, precision) = match self {
            OneTask::Soft(precision, _) => (RuntimeKind::Soft, Some(*precision)),
            OneTask::Tokio(_) => (RuntimeKind::TokioCt, None),
            OneTask::Smol => (RuntimeKind::Smol, None),
        };
        lateness_row(workload, runtime, precision, late, (cpu, spin))
    }
}

/// `work` on `rt`, and the time `rt`'s loops spent spinning in their idle policy meanwhile,
/// ns.
fn idle_spin_of<T>(rt: &Runtime, work: impl FnOnce() -> T) -> (T, u64) {
    let before = rt.stats().idle_spin;
    let out = work();
    let spin = rt.stats().idle_spin.saturating_sub(before);
    (out, spin.as_nanos() as u64)
}

/// Rounds of each one-task row: every runtime takes its share of the timers in each, the
/// order rotating from round to round, so that a stretch of host noise falls on all of them
/// alike rather than on whichever ran then.
const ONE_TASK_ROUNDS: usize = 3;

/// The one-task workloads (`sleep-20us`, `sleep-100us`, `sleep-1ms`, `interval-100us`,
/// `interval-1ms`): soft at each precision, tokio current_thread, smol, interleaved in
/// rounds; a row's lateness quantiles are over the timers of all its rounds.
pub fn one_task(quick: bool) -> Result<Vec<AsyncRow>> {
    let _pin = pin_to(server_cpu());
    let mut rows = Vec::new();
    for (workload, pattern) in PATTERNS {
        let runtimes = OneTask::all()?;
        let per_round = timers(workload, quick).div_ceil(ONE_TASK_ROUNDS);
        let mut pooled: Vec<(Vec<u64>, u64, Option<u64>)> =
            vec![(Vec::new(), 0, None); runtimes.len()];
        for round in 0..ONE_TASK_ROUNDS {
            for k in 0..runtimes.len() {
                let i = (round + k) % runtimes.len();
                let (late, cpu, spin) = runtimes[i].run(pattern, per_round);
                pooled[i].0.extend(late);
                pooled[i].1 += cpu;
                if let Some(spin) = spin {
                    *pooled[i].2.get_or_insert(0) += spin;
                }
            }
        }
        for (runtime, (late, cpu, spin)) in runtimes.iter().zip(pooled) {
            rows.push(runtime.row(workload, late, cpu, spin));
        }
    }
    Ok(rows)
}

thread_local! {
    /// Every fire's lateness, ns, of the many-task run on this thread (every runtime runs
    /// all its tasks on the thread that blocks on them): one buffer for all the tasks,
    /// sized and paged in before the run. A buffer per task (10,000 of them, growing) cost
    /// each fire a cache miss, and now and then a page fault or a copy: the harness's cost,
    /// not the runtime's, paid by every runtime (20–60 ns a fire, by the `many_tasks`
    /// example before and after).
    static FIRES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Makes the calling thread's [`FIRES`] empty, with room for a run of `run` paged in.
fn make_room_for_fires(run: Duration) {
    // Half as many again as the fires of sleeps of the mean length: a reallocation during
    // the run would be a stall in what it measures.
    let mean = Duration::from_micros((TASK_SLEEP_US.0 + TASK_SLEEP_US.1) / 2);
    let room = (TASKS as f64 * run.as_secs_f64() / mean.as_secs_f64() * 1.5) as usize;
    FIRES.with_borrow_mut(|fires| {
        fires.clear();
        fires.resize(room, 0);
        fires.clear();
    });
}

/// One task of the many-task workload: sleeps at random until `end`, its lateness in
/// [`FIRES`] (ns); returns how many it recorded. `sleep_until` is the runtime's.
async fn sleeper<S, F>(seed: u64, end: Instant, sleep_until: S) -> usize
where
    S: Fn(Instant) -> F,
    F: std::future::Future<Output = ()>,
{
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut fired = 0;
    loop {
        let deadline = Instant::now()
            + Duration::from_micros(rng.random_range(TASK_SLEEP_US.0..=TASK_SLEEP_US.1));
        if deadline > end {
            return fired;
        }
        fired += 1;
        sleep_until(deadline).await;
        let late = nanos(Instant::now() - deadline);
        FIRES.with_borrow_mut(|fires| fires.push(late));
    }
}

fn tasks_row(
    runtime: RuntimeKind,
    precision: Option<Precision>,
    mut late: Vec<u64>,
    (cpu, spin): (u64, Option<u64>),
    run: Duration,
) -> AsyncRow {
    let fires = late.len().max(1) as f64;
    let mut row = AsyncRow::new(SLEEP_10K, runtime, precision).with_lateness(&mut late);
    row.cpu_ns_per_op = Some(cpu as f64 / fires);
    row.idle_spin_ns_per_op = spin.map(|spin| spin as f64 / fires);
    row.ops_per_s = Some(fires / run.as_secs_f64());
    row
}

/// The runtimes of the many-task workload, in the order of its first round.
const TASK_RUNTIMES: [RuntimeKind; 3] =
    [RuntimeKind::Soft, RuntimeKind::TokioCt, RuntimeKind::Smol];

/// `sleep-10k-tasks`: soft at its default precision, tokio current_thread and smol, each once
/// a round, the order rotating from round to round so that a host's drift falls on every
/// runtime alike. A runtime's row holds the medians over its rounds (the largest lateness
/// over all), and each round's CPU per fire and lateness p99, round by round.
pub fn sleep_10k_tasks(quick: bool) -> Result<Vec<AsyncRow>> {
    let run = tasks_run(quick);
    let _pin = pin_to(server_cpu());
    let mut per_runtime: [Vec<AsyncRow>; 3] = Default::default();
    for round in 0..tasks_rounds(quick) {
        for k in 0..TASK_RUNTIMES.len() {
            let i = (round + k) % TASK_RUNTIMES.len();
            per_runtime[i].push(tasks_once(TASK_RUNTIMES[i], run)?);
        }
    }
    Ok(per_runtime
        .into_iter()
        .filter_map(AsyncRow::over_rounds)
        .collect())
}

/// One run of the many-task workload on `runtime`, as its users write it.
fn tasks_once(runtime: RuntimeKind, run: Duration) -> Result<AsyncRow> {
    make_room_for_fires(run);
    let room = FIRES.with_borrow(Vec::capacity);
    let (fired, cpu, spin) = match runtime {
        RuntimeKind::Soft => {
            let rt = soft_runtime(Precision::default())?;
            rt.block_on(async { softtimer_async::time::sleep(WARM_UP).await });
            let ((fired, spun), cpu) = with_cpu(|| {
                idle_spin_of(&rt, || {
                    let end = Instant::now() + run;
                    let handles: Vec<_> = (0..TASKS as u64)
                        .map(|i| {
                            rt.spawn_local(sleeper(i, end, |at| {
                                softtimer_async::time::sleep_until(at)
                            }))
                        })
                        .collect();
                    rt.block_on(async move {
                        let mut fired = 0;
                        for h in handles {
                            fired += h.await.expect("a sleeper does not panic");
                        }
                        fired
                    })
                })
            });
            (fired, cpu, Some(spun))
        }
        RuntimeKind::TokioCt => {
            let rt = tokio_ct()?;
            let _stock = stock_timer_slack();
            let (fired, cpu) = with_cpu(|| {
                rt.block_on(async {
                    let end = Instant::now() + run;
                    let handles: Vec<_> = (0..TASKS as u64)
                        .map(|i| {
                            tokio::spawn(sleeper(i, end, |at| tokio::time::sleep_until(at.into())))
                        })
                        .collect();
                    let mut fired = 0;
                    for h in handles {
                        fired += h.await.expect("a sleeper does not panic");
                    }
                    fired
                })
            });
            (fired, cpu, None)
        }
        RuntimeKind::Smol => {
            let ex = smol::LocalExecutor::new();
            let _stock = stock_timer_slack();
            let (fired, cpu) = with_cpu(|| {
                smol::block_on(ex.run(async {
                    let end = Instant::now() + run;
                    let handles: Vec<_> = (0..TASKS as u64)
                        .map(|i| {
                            ex.spawn(sleeper(i, end, |at| async move {
                                smol::Timer::at(at).await;
                            }))
                        })
                        .collect();
                    let mut fired = 0;
                    for h in handles {
                        fired += h.await;
                    }
                    fired
                }))
            });
            (fired, cpu, None)
        }
        RuntimeKind::TokioMt => anyhow::bail!("the many-task workload runs on one thread"),
    };
    let late = FIRES.take();
    // Every fire in the buffer of this thread, and no stall to grow it during the run.
    anyhow::ensure!(
        late.len() == fired && late.capacity() == room,
        "{}: {} fires recorded on the thread that ran the tasks, of {fired}; the buffer held \
         {} where it had room for {room}",
        runtime.name(),
        late.len(),
        late.capacity()
    );
    let precision = (runtime == RuntimeKind::Soft).then(Precision::default);
    Ok(tasks_row(runtime, precision, late, (cpu, spin), run))
}
