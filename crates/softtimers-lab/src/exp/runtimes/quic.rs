//! Unchanged quinn on the soft runtime and on tokio `current_thread`: request/response (1 KB
//! requests, 10 KB responses, a bidirectional stream each, one connection) over loopback
//! with 1 % of datagrams lost each way and each end asking its peer to acknowledge within
//! 1 ms. The loss is made in the runtime's socket (a wrapper around either runtime's
//! `quinn::Runtime` that drops a datagram at random before it is sent, one datagram per
//! send), so both runtimes run the same quinn over the same lossy path. Then bulk: one
//! stream of 32 MB (96 MB in a full run) from server to client, without loss and with
//! segmentation offload as quinn uses it: CPU per MB, both ends, in interleaved rounds (the
//! download takes a few tenths of a second, so one run of it is at the mercy of the host).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncTimer, AsyncUdpSocket, Endpoint, EndpointConfig, UdpPoller};
use softtimer_async::Precision;
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
use softtimers_tools::cpu::{CLIENT_CPU, pin_to, server_cpu};

use super::{AsyncRow, AsyncWorkload, RuntimeKind, interleaved, with_cpu};

/// The baseline of the quinn rows.
pub const ANCHOR: &str = "quinn 0.11 on tokio current_thread, same run";

/// The request/response workload's name.
pub const QUINN_RR: AsyncWorkload = AsyncWorkload::QuinnRr;
/// The bulk workload's name: its operation is a megabyte delivered.
pub const QUINN_BULK: AsyncWorkload = AsyncWorkload::QuinnBulk;

const REQUEST: usize = 1024;
const RESPONSE: usize = 10 * 1024;
/// One datagram in this many is dropped, each way.
const LOSS_ONE_IN: u64 = 100;
const ACK_DELAY: Duration = Duration::from_millis(1);

const MB: u64 = 1 << 20;

fn requests(quick: bool) -> usize {
    if quick { 1_000 } else { 4_000 }
}

fn bulk_bytes(quick: bool) -> u64 {
    if quick { 32 * MB } else { 96 * MB }
}

/// About how long the workloads take, s.
pub fn expected_seconds(quick: bool) -> f64 {
    let bulk_mb = (bulk_bytes(quick) / MB) as f64;
    let rr = requests(quick) as f64 * 0.1e-3 + 0.2;
    let bulk = bulk_mb * 2e-3 + 0.2;
    // Measured on loopback: about 0.1 ms a request, 1.1-1.3 ms a MB (2 allowed), 0.2 s to
    // set up; each runtime once, the bulk download once a round.
    2.0 * (rr + bulk * bulk_rounds(quick) as f64)
}

/// What the client does.
#[derive(Clone, Copy)]
enum Scenario {
    /// Requests one after another, this many, on a lossy path.
    RequestResponse(usize),
    /// One download of this many bytes, no loss.
    Bulk(u64),
}

/// A socket that drops about one datagram in `loss_one_in` before sending it (none if 0).
struct LossySocket {
    inner: Arc<dyn AsyncUdpSocket>,
    loss_one_in: u64,
    rng: AtomicU64,
}

impl fmt::Debug for LossySocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossySocket").finish_non_exhaustive()
    }
}

impl LossySocket {
    fn lose(&self) -> bool {
        if self.loss_one_in == 0 {
            return false;
        }
        // xorshift64: one thread sends at a time, and a lost update only repeats a draw.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x.is_multiple_of(self.loss_one_in)
    }
}

impl AsyncUdpSocket for LossySocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        if self.lose() {
            return Ok(());
        }
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        // With loss, one datagram per send, so that a loss is one datagram's.
        if self.loss_one_in == 0 {
            self.inner.max_transmit_segments()
        } else {
            1
        }
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// A quinn runtime whose sockets lose datagrams.
#[derive(Debug)]
struct Lossy<R> {
    inner: R,
    loss_one_in: u64,
    seed: u64,
}

impl<R: quinn::Runtime> quinn::Runtime for Lossy<R> {
    fn new_timer(&self, i: Instant) -> Pin<Box<dyn AsyncTimer>> {
        self.inner.new_timer(i)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        self.inner.spawn(future)
    }

    fn wrap_udp_socket(&self, t: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        Ok(Arc::new(LossySocket {
            inner: self.inner.wrap_udp_socket(t)?,
            loss_one_in: self.loss_one_in,
            rng: AtomicU64::new(self.seed | 1),
        }))
    }

    fn now(&self) -> Instant {
        self.inner.now()
    }
}

/// Which runtime both ends run on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Soft,
    Tokio,
}

impl Kind {
    fn runtime(self) -> RuntimeKind {
        match self {
            Kind::Soft => RuntimeKind::Soft,
            Kind::Tokio => RuntimeKind::TokioCt,
        }
    }

    /// Runs `f` (given the runtime to hand quinn) to completion on a fresh runtime of this
    /// kind on the calling thread.
    fn block_on<T>(
        self,
        loss_one_in: u64,
        seed: u64,
        f: impl AsyncFnOnce(Arc<dyn quinn::Runtime>) -> T,
    ) -> Result<T> {
        Ok(match self {
            Kind::Soft => {
                let rt = softtimer_async::Runtime::builder()
                    .precision(Precision::default())
                    .build()?;
                rt.block_on(async {
                    let inner = softtimer_async::quinn::SoftRuntime::current();
                    f(Arc::new(Lossy {
                        inner,
                        loss_one_in,
                        seed,
                    }))
                    .await
                })
            }
            Kind::Tokio => {
                let _stock = softtimers_tools::cpu::stock_timer_slack();
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async {
                    f(Arc::new(Lossy {
                        inner: quinn::TokioRuntime,
                        loss_one_in,
                        seed,
                    }))
                    .await
                })
            }
        })
    }
}

fn tuning() -> Tuning {
    Tuning {
        max_ack_delay: Some(ACK_DELAY),
        ..Tuning::default()
    }
}

/// Serves `endpoint` until it is closed: a request of 8 bytes asks for that many bytes (a
/// little-endian count), any other a [`RESPONSE`].
async fn serve(endpoint: Endpoint) {
    let chunk = vec![0u8; 64 * 1024];
    while let Some(incoming) = endpoint.accept().await {
        let Ok(connection) = incoming.await else {
            continue;
        };
        while let Ok((mut send, mut recv)) = connection.accept_bi().await {
            let Ok(request) = recv.read_to_end(REQUEST).await else {
                break;
            };
            let mut left = match <[u8; 8]>::try_from(request.as_slice()) {
                Ok(count) => u64::from_le_bytes(count),
                Err(_) => RESPONSE as u64,
            };
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                if send.write_all(&chunk[..n]).await.is_err() {
                    return;
                }
                left -= n as u64;
            }
            if send.finish().is_err() {
                break;
            }
        }
    }
}

/// The client: the scenario's requests one after another on one connection; how long
/// each took, ns.
async fn client(
    runtime: Arc<dyn quinn::Runtime>,
    config: quinn::ClientConfig,
    server: SocketAddr,
    scenario: Scenario,
) -> Result<Vec<u64>> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let mut endpoint = Endpoint::new(EndpointConfig::default(), None, socket, runtime)?;
    endpoint.set_default_client_config(config);
    let connection = endpoint.connect(server, "localhost")?.await?;
    let n = match scenario {
        Scenario::RequestResponse(n) => n,
        Scenario::Bulk(bytes) => {
            let start = Instant::now();
            let (mut send, mut recv) = connection.open_bi().await?;
            send.write_all(&bytes.to_le_bytes()).await?;
            send.finish()?;
            let mut got = 0u64;
            while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
                got += chunk.bytes.len() as u64;
            }
            anyhow::ensure!(got == bytes, "{got} bytes of {bytes} arrived");
            connection.close(0u32.into(), b"done");
            return Ok(vec![start.elapsed().as_nanos() as u64]);
        }
    };
    let request = vec![1u8; REQUEST];
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let (mut send, mut recv) = connection.open_bi().await?;
        send.write_all(&request).await?;
        send.finish()?;
        let body = recv.read_to_end(RESPONSE).await?;
        anyhow::ensure!(body.len() == RESPONSE, "a short response");
        latencies.push(start.elapsed().as_nanos() as u64);
    }
    connection.close(0u32.into(), b"done");
    Ok(latencies)
}

fn measure(kind: Kind, scenario: Scenario) -> Result<AsyncRow> {
    let loss = match scenario {
        Scenario::RequestResponse(_) => LOSS_ONE_IN,
        Scenario::Bulk(_) => 0,
    };
    let identity = Identity::self_signed(&["localhost"])?;
    let server_cfg = server_config(&identity, &tuning())?;
    let client_cfg = client_config(&Trust::Cert(identity.cert.clone()), &tuning())?;
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || -> Result<()> {
        let _pin = pin_to(server_cpu());
        kind.block_on(loss, 1, async move |runtime| -> Result<()> {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
            let endpoint =
                Endpoint::new(EndpointConfig::default(), Some(server_cfg), socket, runtime)?;
            let _ = tx.send((endpoint.local_addr()?, endpoint.clone()));
            serve(endpoint).await;
            Ok(())
        })?
    });
    let (addr, endpoint) = rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| anyhow!("the {} quinn server did not start", kind.runtime().name()))?;
    let (result, cpu) = with_cpu(|| {
        let client = std::thread::spawn(move || {
            let _pin = pin_to(CLIENT_CPU);
            kind.block_on(loss, 2, async move |runtime| {
                client(runtime, client_cfg, addr, scenario).await
            })
        });
        client.join().map_err(|_| anyhow!("the client panicked"))
    });
    endpoint.close(0u32.into(), b"done");
    server
        .join()
        .map_err(|_| anyhow!("the quinn server panicked"))?
        .with_context(|| format!("the {} quinn server", kind.runtime().name()))?;
    let mut times =
        result??.with_context(|| format!("the {} quinn client", kind.runtime().name()))?;
    let precision = (kind == Kind::Soft).then(Precision::default);
    let total: f64 = times.iter().map(|&l| l as f64 / 1e9).sum();
    Ok(match scenario {
        Scenario::RequestResponse(n) => {
            times.sort_unstable();
            let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
            let mut row = AsyncRow::new(QUINN_RR, kind.runtime(), precision);
            row.p99_us = Some(at(0.99));
            row.cpu_ns_per_op = Some(cpu as f64 / n as f64);
            row.ops_per_s = Some(n as f64 / total);
            row
        }
        Scenario::Bulk(bytes) => {
            let mb = bytes as f64 / MB as f64;
            let mut row = AsyncRow::new(QUINN_BULK, kind.runtime(), precision);
            row.cpu_ns_per_op = Some(cpu as f64 / mb);
            row.ops_per_s = Some(mb / total);
            row
        }
    })
}

/// `quinn-rr` and `quinn-bulk`: unchanged quinn on soft and on tokio `current_thread`. The
/// request/response rows are one run each; the bulk rows are the medians of
/// [`bulk_rounds`] interleaved rounds (each round's CPU per MB kept, so the target pairs the
/// rounds), because one download is short enough that a host's hiccup moves a single run's
/// ratio by several percent.
pub fn quinn(quick: bool) -> Result<Vec<AsyncRow>> {
    let mut rows = Vec::new();
    for kind in [Kind::Soft, Kind::Tokio] {
        rows.push(measure(kind, Scenario::RequestResponse(requests(quick)))?);
    }
    // The bulk download on each runtime once a round, soft first in even rounds.
    let scenario = Scenario::Bulk(bulk_bytes(quick));
    rows.extend(interleaved(
        bulk_rounds(quick),
        |kind| measure(kind, scenario),
        || [Kind::Soft, Kind::Tokio],
    )?);
    Ok(rows)
}

/// Rounds of the bulk download: each round runs it once on each runtime.
pub fn bulk_rounds(quick: bool) -> usize {
    if quick { 3 } else { 5 }
}
