//! hyper on one core: the same hyper HTTP/1.1 server (a 6 KB body, keep-alive) on the soft
//! runtime and on tokio `current_thread`, driven by the lab's load generator (`--client`:
//! the project's own, 32 keep-alive connections, or `wrk`) on the client CPU; then the soft
//! runtime with two loops, each with a listener of its own on one port (`SO_REUSEPORT`),
//! beside tokio's multi-thread scheduler with two workers.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use softtimer_async::{Precision, Runtime, TcpListener};
use softtimers_tools::cpu::{pin_to, process_cpu_ns, server_cpu, thread_cpu_ns};

use super::{AsyncRow, AsyncWorkload, RuntimeKind, find, ratio};
use crate::harness::{ExpOptions, Workload, run_client};
use crate::targets::TargetCheck;

/// The workload's name.
pub const HYPER_1CORE: AsyncWorkload = AsyncWorkload::Hyper1core;

static BODY: [u8; 6 * 1024] = [b'x'; 6 * 1024];
/// How often a server checks whether the run is over.
const STOP_POLL: Duration = Duration::from_millis(50);

fn run_length(quick: bool) -> Duration {
    Duration::from_secs(if quick { 2 } else { 8 })
}

/// About how long the workload takes, s.
pub fn expected_seconds(quick: bool) -> f64 {
    4.0 * (run_length(quick).as_secs_f64() + 0.5)
}

fn respond(
    _: Request<hyper::body::Incoming>,
) -> std::future::Ready<Result<Response<Full<Bytes>>, Infallible>> {
    std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(&BODY)))))
}

/// One loop's accept loop: a hyper connection task per accepted stream, on this loop.
async fn soft_accept(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        softtimer_async::spawn_local(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(softtimer_async::hyper::HyperTimer::current())
                .serve_connection(stream, hyper::service::service_fn(respond))
                .await;
        });
    }
}

/// A server on the soft runtime with `threads` loops, on a thread of its own, until `stop`.
fn soft_server(
    threads: usize,
    stop: Arc<AtomicBool>,
) -> Result<(SocketAddr, std::thread::JoinHandle<Result<()>>)> {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || -> Result<()> {
        // One loop: pinned here to the server CPU. Two: the builder pins loop i to the i-th
        // CPU this process may use.
        let _pin = (threads == 1).then(|| pin_to(server_cpu()));
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
                        soft_accept(l).await;
                    }
                });
            }
            softtimer_async::spawn_local(soft_accept(listener));
            let _ = tx.send(addr);
            while !stop.load(Ordering::Relaxed) {
                softtimer_async::time::sleep(STOP_POLL).await;
            }
            Ok::<_, std::io::Error>(())
        })?;
        Ok(())
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| anyhow!("the soft hyper server did not start"))?;
    Ok((addr, thread))
}

/// A server on tokio: `current_thread` on a thread of its own pinned to the server CPU
/// (`workers` 0), or the multi-thread scheduler with `workers` workers, unpinned as its
/// users run it.
fn tokio_server(
    workers: usize,
    stop: Arc<AtomicBool>,
) -> Result<(SocketAddr, std::thread::JoinHandle<Result<()>>)> {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || -> Result<()> {
        let _pin = (workers == 0).then(|| pin_to(server_cpu()));
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
                                hyper::service::service_fn(respond),
                            )
                            .await;
                    });
                }
            });
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(STOP_POLL).await;
            }
            Ok::<_, std::io::Error>(())
        })?;
        Ok(())
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| anyhow!("the tokio hyper server did not start"))?;
    Ok((addr, thread))
}

type Server = fn(Arc<AtomicBool>) -> Result<(SocketAddr, std::thread::JoinHandle<Result<()>>)>;

fn measure(
    options: &ExpOptions,
    runtime: RuntimeKind,
    precision: Option<Precision>,
    threads: u32,
    server: Server,
) -> Result<AsyncRow> {
    let duration = run_length(options.length.quick);
    let client = options.client;
    let stop = Arc::new(AtomicBool::new(false));
    let before = process_cpu_ns();
    let (addr, server) = server(stop.clone())?;
    let load = std::thread::spawn(move || {
        let start = thread_cpu_ns();
        let result = run_client(addr, Workload::HttpKeepAlive, client, duration);
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
    let (rate, elapsed) = result.with_context(|| format!("load on the {runtime} hyper server"))?;
    let mut row = AsyncRow::new(HYPER_1CORE, runtime, precision);
    row.threads = Some(threads);
    row.ops_per_s = Some(rate);
    let requests = rate * elapsed.as_secs_f64();
    row.cpu_ns_per_op = (requests > 0.0).then(|| server_cpu as f64 / requests);
    Ok(row)
}

/// `hyper-1core`: soft with one loop, tokio `current_thread`; then soft with two loops and
/// tokio's multi-thread scheduler with two workers.
pub fn hyper_1core(options: &ExpOptions) -> Result<Vec<AsyncRow>> {
    let soft = Some(Precision::default());
    let runs: [(RuntimeKind, Option<Precision>, u32, Server); 4] = [
        (RuntimeKind::Soft, soft, 1, |stop| soft_server(1, stop)),
        (RuntimeKind::TokioCt, None, 1, |stop| tokio_server(0, stop)),
        (RuntimeKind::Soft, soft, 2, |stop| soft_server(2, stop)),
        (RuntimeKind::TokioMt, None, 2, |stop| tokio_server(2, stop)),
    ];
    runs.into_iter()
        .map(|(runtime, precision, threads, server)| {
            measure(options, runtime, precision, threads, server)
        })
        .collect()
}

/// Two loops against one (soft), when both ran.
pub fn scale_target(rows: &[AsyncRow]) -> Option<TargetCheck> {
    let one = find(rows, HYPER_1CORE, RuntimeKind::Soft)?;
    let two = rows.iter().find(|r| {
        r.workload == HYPER_1CORE && r.runtime == RuntimeKind::Soft && r.threads == Some(2)
    })?;
    Some(TargetCheck::at_least(
        format!(
            "hyper requests/s, soft with 2 loops / 1 loop ({} CPUs online, the load generator on CPU 0 with loop 0)",
            softtimers_tools::cpu::cpus()
        ),
        "≥ 1.7",
        1.7,
        ratio(two.ops_per_s, one.ops_per_s),
        "design target",
    ))
}
