//! hyper on one core: the same hyper HTTP/1.1 server on the soft runtime and on tokio
//! `current_thread`, driven by the lab's load generator (`--client`: the project's own, 32
//! connections, or `wrk`) on the client CPU.
//!
//! * `hyper-1core`: a 6 KB body, keep-alive, soft and tokio `current_thread` in interleaved
//!   rounds of a second (the row is the median; the target, the median of the per-round
//!   ratios); then the soft runtime with two loops, each with a listener of its own on one
//!   port (`SO_REUSEPORT`), beside tokio's multi-thread scheduler with two workers (the
//!   targets read these rows).
//! * `hyper-hello`, `hyper-6k-close`, `hyper-hello-close`: a 13-byte hello-world body, and a
//!   connection per request, shorter runs.
//! * The four one-core workloads again with the other load generator (`wrk` when the lab's
//!   is its own, and the reverse), as a cross-check; skipped, with a note, when `wrk` is not
//!   installed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use softtimer_async::{Precision, Runtime, TcpListener};
use softtimers_tools::cpu::{pin_to, process_cpu_ns, server_cpu, thread_cpu_ns};

use super::{ANCHOR, AsyncRow, AsyncWorkload, RuntimeKind, find, interleaved, ratio, soft_over};
use crate::harness::{Client, ExpOptions, Workload, check_client, run_client};
use crate::targets::{Goal, TargetCheck};

/// The workload's name.
pub const HYPER_1CORE: AsyncWorkload = AsyncWorkload::Hyper1core;

static BODY_6K: [u8; 6 * 1024] = [b'x'; 6 * 1024];
static BODY_HELLO: &[u8] = b"Hello, world!";
/// How often a server checks whether the run is over.
const STOP_POLL: Duration = Duration::from_millis(50);

/// A one-core workload: its name, the body every response carries, and the load.
#[derive(Clone, Copy)]
struct Case {
    workload: AsyncWorkload,
    body: &'static [u8],
    load: Workload,
}

const CASES: [Case; 4] = [
    Case {
        workload: HYPER_1CORE,
        body: &BODY_6K,
        load: Workload::HttpKeepAlive,
    },
    Case {
        workload: AsyncWorkload::HyperHello,
        body: BODY_HELLO,
        load: Workload::HttpKeepAlive,
    },
    Case {
        workload: AsyncWorkload::Hyper6kClose,
        body: &BODY_6K,
        load: Workload::HttpClose,
    },
    Case {
        workload: AsyncWorkload::HyperHelloClose,
        body: BODY_HELLO,
        load: Workload::HttpClose,
    },
];

/// The two-thread runs of `hyper-1core` (the scale target reads them).
fn target_run(quick: bool) -> Duration {
    Duration::from_secs(if quick { 2 } else { 3 })
}

/// The one-core `hyper-1core` comparison, soft against tokio `current_thread`: rounds of
/// [`short_run`] each, the two runtimes interleaved (their order swapped every round), so
/// that the machine's drift falls on both alike; the target reads the median of the
/// per-round ratios.
fn one_core_rounds(quick: bool) -> usize {
    if quick { 2 } else { 4 }
}

/// The other runs, quick or full (`wrk` counts whole seconds).
fn short_run() -> Duration {
    Duration::from_secs(1)
}

/// About how long the workload takes, s (starting and stopping a server and its load: about
/// 0.15 s, measured).
pub fn expected_seconds(quick: bool) -> f64 {
    let short = 2 * one_core_rounds(quick) + 2 * (CASES.len() - 1) + 2 * CASES.len();
    2.0 * (target_run(quick).as_secs_f64() + 0.15)
        + short as f64 * (short_run().as_secs_f64() + 0.15)
}

fn respond(body: &'static [u8]) -> std::future::Ready<Result<Response<Full<Bytes>>, Infallible>> {
    std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(body)))))
}

/// One loop's accept loop: a hyper connection task per accepted stream, on this loop.
async fn soft_accept(listener: TcpListener, body: &'static [u8]) {
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        softtimer_async::spawn_local(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(softtimer_async::hyper::HyperTimer::current())
                .serve_connection(stream, hyper::service::service_fn(move |_| respond(body)))
                .await;
        });
    }
}

/// A server running on a thread of its own, and the address it listens on.
type Started = (SocketAddr, std::thread::JoinHandle<Result<()>>);

/// Starts `serve` on a thread of its own, pinned to the server CPU where `pin`: `serve`
/// sends the address it listens on, then serves until the run is over. `name` names the
/// server in the error where it did not start.
fn start_server(
    name: &str,
    pin: bool,
    serve: impl FnOnce(mpsc::Sender<SocketAddr>) -> Result<()> + Send + 'static,
) -> Result<Started> {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _pin = pin.then(|| pin_to(server_cpu()));
        serve(tx)
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| anyhow!("the {name} hyper server did not start"))?;
    Ok((addr, thread))
}

/// Waits, with the runtime's `sleep`, until `stop` is set.
async fn until_stopped<F: Future>(stop: &AtomicBool, sleep: impl Fn(Duration) -> F) {
    while !stop.load(Ordering::Relaxed) {
        sleep(STOP_POLL).await;
    }
}

/// A server on the soft runtime with `threads` loops, on a thread of its own, until `stop`.
/// One loop is pinned to the server CPU; with two, the builder pins loop i to the i-th CPU
/// this process may use.
fn soft_server(threads: usize, body: &'static [u8], stop: Arc<AtomicBool>) -> Result<Started> {
    start_server("soft", threads == 1, move |tx| {
        let rt = Runtime::builder()
            .threads(threads)
            .precision(Precision::default())
            .build()?;
        let handle = rt.handle();
        rt.block_on(async move {
            let listener = TcpListener::bind_reuse_port("127.0.0.1:0".parse().unwrap())?;
            let addr = listener.local_addr()?;
            for i in 1..threads {
                handle.spawn_on(i, async move {
                    if let Ok(l) = TcpListener::bind_reuse_port(addr) {
                        soft_accept(l, body).await;
                    }
                });
            }
            softtimer_async::spawn_local(soft_accept(listener, body));
            let _ = tx.send(addr);
            until_stopped(&stop, softtimer_async::time::sleep).await;
            Ok::<_, std::io::Error>(())
        })?;
        Ok(())
    })
}

/// A server on tokio: `current_thread` on a thread of its own pinned to the server CPU
/// (`workers` 0), or the multi-thread scheduler with `workers` workers, unpinned as its
/// users run it.
fn tokio_server(workers: usize, body: &'static [u8], stop: Arc<AtomicBool>) -> Result<Started> {
    start_server("tokio", workers == 0, move |tx| {
        let _stock = softtimers_tools::cpu::stock_timer_slack();
        let rt = if workers == 0 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()?
        };
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let _ = tx.send(listener.local_addr()?);
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .timer(hyper_util::rt::TokioTimer::new())
                            .serve_connection(
                                hyper_util::rt::TokioIo::new(stream),
                                hyper::service::service_fn(move |_| respond(body)),
                            )
                            .await;
                    });
                }
            });
            until_stopped(&stop, tokio::time::sleep).await;
            Ok::<_, std::io::Error>(())
        })?;
        Ok(())
    })
}

type Server = fn(&'static [u8], Arc<AtomicBool>) -> Result<Started>;

/// How one server is run and loaded.
struct Run {
    case: Case,
    runtime: RuntimeKind,
    precision: Option<Precision>,
    threads: u32,
    server: Server,
    client: Client,
    duration: Duration,
}

fn measure(run: Run) -> Result<AsyncRow> {
    let Run {
        case,
        runtime,
        precision,
        threads,
        server,
        client,
        duration,
    } = run;
    let stop = Arc::new(AtomicBool::new(false));
    let before = process_cpu_ns();
    let (addr, server) = server(case.body, stop.clone())?;
    let load = std::thread::spawn(move || {
        let start = thread_cpu_ns();
        let result = run_client(addr, case.load, client, duration, case.body.len());
        (result, thread_cpu_ns() - start)
    });
    let (result, client_cpu) = load
        .join()
        .map_err(|_| anyhow!("the load generator panicked"))?;
    stop.store(true, Ordering::Relaxed);
    server
        .join()
        .map_err(|_| anyhow!("the {runtime} server panicked"))?
        .with_context(|| format!("the {runtime} hyper server"))?;
    let server_cpu = process_cpu_ns()
        .saturating_sub(before)
        .saturating_sub(client_cpu);
    let (rate, elapsed) = result.with_context(|| {
        format!(
            "{} load on the {runtime} hyper server ({})",
            client.name(),
            case.workload
        )
    })?;
    let mut row = AsyncRow::new(case.workload, runtime, precision);
    row.threads = Some(threads);
    row.client = Some(client);
    row.ops_per_s = Some(rate);
    let requests = rate * elapsed.as_secs_f64();
    row.cpu_ns_per_op = (requests > 0.0).then(|| server_cpu as f64 / requests);
    Ok(row)
}

/// The hyper workloads: `hyper-1core` with one and two threads, the other one-core cases,
/// all with the lab's load generator; then the one-core cases with the other generator.
/// Returns the rows and notes on what of the cross-check did not run.
pub fn hyper(options: &ExpOptions) -> Result<(Vec<AsyncRow>, Vec<String>)> {
    let quick = options.length.quick;
    let soft = Some(Precision::default());
    let soft_1: Server = |body, stop| soft_server(1, body, stop);
    let tokio_ct: Server = |body, stop| tokio_server(0, body, stop);
    let one_core = |case: Case, client: Client, duration: Duration| {
        [
            Run {
                case,
                runtime: RuntimeKind::Soft,
                precision: soft,
                threads: 1,
                server: soft_1,
                client,
                duration,
            },
            Run {
                case,
                runtime: RuntimeKind::TokioCt,
                precision: None,
                threads: 1,
                server: tokio_ct,
                client,
                duration,
            },
        ]
    };
    let primary = options.client;
    let mut rows = interleaved(one_core_rounds(quick), measure, || {
        one_core(CASES[0], primary, short_run())
    })?;
    let mut runs = Vec::new();
    runs.push(Run {
        case: CASES[0],
        runtime: RuntimeKind::Soft,
        precision: soft,
        threads: 2,
        server: |body, stop| soft_server(2, body, stop),
        client: primary,
        duration: target_run(quick),
    });
    runs.push(Run {
        case: CASES[0],
        runtime: RuntimeKind::TokioMt,
        precision: None,
        threads: 2,
        server: |body, stop| tokio_server(2, body, stop),
        client: primary,
        duration: target_run(quick),
    });
    for case in &CASES[1..] {
        runs.extend(one_core(*case, primary, short_run()));
    }
    for row in runs.into_iter().map(measure) {
        rows.push(row?);
    }
    // The cross-check with the other generator: a failure there is a note, not the end of
    // the step (the rows the targets read are in).
    let other = match primary {
        Client::Own => Client::Wrk,
        Client::Wrk => Client::Own,
    };
    let mut notes = Vec::new();
    match check_client(other) {
        Ok(()) => {
            for case in CASES {
                for run in one_core(case, other, short_run()) {
                    let what = format!("{} on {}", case.workload, run.runtime);
                    match measure(run) {
                        Ok(row) => rows.push(row),
                        Err(e) => notes.push(format!(
                            "hyper: the {} cross-check of {what} failed ({e:#})",
                            other.name()
                        )),
                    }
                }
            }
        }
        Err(e) => notes.push(format!(
            "hyper: the cross-check with the other load generator did not run ({e:#})"
        )),
    }
    Ok((rows, notes))
}

/// hyper on one core, soft / tokio `current_thread`: the median of the per-round ratios of
/// requests/s, when both ran in rounds.
pub fn one_core_target(rows: &[AsyncRow]) -> Option<TargetCheck> {
    let soft = find(rows, HYPER_1CORE, RuntimeKind::Soft)?;
    let tokio = find(rows, HYPER_1CORE, RuntimeKind::TokioCt)?;
    let name = "hyper HTTP/1.1 keep-alive requests/s on one core: soft / tokio-ct";
    let (measured, name) = soft_over(name, soft, tokio, |r| r.ops_per_s, |r| &r.ops_per_s_rounds);
    Some(TargetCheck::new(
        name,
        Goal::at_least(0.97, "≥ 0.97"),
        measured,
        ANCHOR,
    ))
}

/// Two loops against one (soft), when both ran.
pub fn scale_target(rows: &[AsyncRow]) -> Option<TargetCheck> {
    let one = find(rows, HYPER_1CORE, RuntimeKind::Soft)?;
    let two = rows.iter().find(|r| {
        r.workload == HYPER_1CORE && r.runtime == RuntimeKind::Soft && r.threads == Some(2)
    })?;
    Some(TargetCheck::new(
        format!(
            "hyper requests/s, soft with 2 loops / 1 loop ({} CPUs online, the load generator on CPU 0 with loop 0)",
            softtimers_tools::cpu::cpus()
        ),
        Goal::at_least(1.7, "≥ 1.7"),
        ratio(two.ops_per_s, one.ops_per_s),
        "design target",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(runtime: RuntimeKind, ops: f64, rounds: &[f64]) -> AsyncRow {
        let precision = (runtime == RuntimeKind::Soft).then(Precision::default);
        let mut r = AsyncRow::new(HYPER_1CORE, runtime, precision);
        r.ops_per_s = Some(ops);
        r.ops_per_s_rounds = rounds.to_vec();
        r
    }

    #[test]
    fn the_one_core_target_is_the_median_of_the_per_round_ratios() {
        // Medians of the rows alone would give 100 / 100 = 1.0; round by round soft is
        // 0.8, 1.1 and 1.2 × tokio.
        let rows = [
            row(RuntimeKind::TokioCt, 100.0, &[100.0, 100.0, 50.0]),
            row(RuntimeKind::Soft, 100.0, &[80.0, 110.0, 60.0]),
        ];
        let t = one_core_target(&rows).unwrap();
        assert_eq!(t.measured, 1.1);
        assert!(t.met);
        assert!(
            t.figure
                .contains("median of 3 interleaved rounds, per-round range 0.80-1.20")
        );
    }

    #[test]
    fn an_older_report_without_rounds_reads_its_one_run_each() {
        let rows = [
            row(RuntimeKind::Soft, 90.0, &[]),
            row(RuntimeKind::TokioCt, 100.0, &[]),
        ];
        let t = one_core_target(&rows).unwrap();
        assert_eq!(t.measured, 0.9);
        assert!(!t.met);
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert!(json.get("ops_per_s_rounds").is_none(), "{json}");
    }
}
