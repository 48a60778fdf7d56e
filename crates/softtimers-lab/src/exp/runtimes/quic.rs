//! Unchanged quinn on the soft runtime and on tokio `current_thread`: request/response (1 KB
//! requests, 10 KB responses, a bidirectional stream each, one connection) over loopback
//! with 1 % of datagrams lost each way and each end asking its peer to acknowledge within
//! 1 ms. The loss is made in the runtime's socket (a wrapper around either runtime's
//! `quinn::Runtime` that drops a datagram at random before it is sent, one datagram per
//! send), so both runtimes run the same quinn over the same lossy path.

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

use super::{AsyncRow, with_cpu};

/// The workload's name.
pub const QUINN_RR: &str = "quinn-rr";

const REQUEST: usize = 1024;
const RESPONSE: usize = 10 * 1024;
/// One datagram in this many is dropped, each way.
const LOSS_ONE_IN: u64 = 100;
const ACK_DELAY: Duration = Duration::from_millis(1);

fn requests(quick: bool) -> usize {
    if quick { 1_000 } else { 5_000 }
}

/// About how long the workload takes, s.
pub fn expected_seconds(quick: bool) -> f64 {
    2.0 * (requests(quick) as f64 * 0.4e-3 + 0.5)
}

/// A socket that drops about one datagram in [`LOSS_ONE_IN`] before sending it.
struct LossySocket {
    inner: Arc<dyn AsyncUdpSocket>,
    rng: AtomicU64,
}

impl fmt::Debug for LossySocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossySocket").finish_non_exhaustive()
    }
}

impl LossySocket {
    fn lose(&self) -> bool {
        // xorshift64: one thread sends at a time, and a lost update only repeats a draw.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x % LOSS_ONE_IN == 0
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
        // One datagram per send, so that a loss is one datagram's.
        1
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
    fn name(self) -> &'static str {
        match self {
            Kind::Soft => "soft",
            Kind::Tokio => "tokio-ct",
        }
    }

    /// Runs `f` (given the runtime to hand quinn) to completion on a fresh runtime of this
    /// kind on the calling thread.
    fn block_on<T>(
        self,
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
                    f(Arc::new(Lossy { inner, seed })).await
                })
            }
            Kind::Tokio => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async {
                    f(Arc::new(Lossy {
                        inner: quinn::TokioRuntime,
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

/// Serves request/response on `endpoint` until it is closed.
async fn serve(endpoint: Endpoint) {
    while let Some(incoming) = endpoint.accept().await {
        let Ok(connection) = incoming.await else {
            continue;
        };
        while let Ok((mut send, mut recv)) = connection.accept_bi().await {
            if recv.read_to_end(REQUEST).await.is_err() {
                break;
            }
            let response = vec![0u8; RESPONSE];
            if send.write_all(&response).await.is_err() || send.finish().is_err() {
                break;
            }
        }
    }
}

/// The client: `n` requests one after another on one connection; their latencies, ns.
async fn client(
    runtime: Arc<dyn quinn::Runtime>,
    config: quinn::ClientConfig,
    server: SocketAddr,
    n: usize,
) -> Result<Vec<u64>> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let mut endpoint = Endpoint::new(EndpointConfig::default(), None, socket, runtime)?;
    endpoint.set_default_client_config(config);
    let connection = endpoint.connect(server, "localhost")?.await?;
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

fn measure(kind: Kind, quick: bool) -> Result<AsyncRow> {
    let identity = Identity::self_signed(&["localhost"])?;
    let server_cfg = server_config(&identity, &tuning())?;
    let client_cfg = client_config(&Trust::Cert(identity.cert.clone()), &tuning())?;
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || -> Result<()> {
        let _pin = pin_to(server_cpu());
        kind.block_on(1, async move |runtime| -> Result<()> {
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
        .map_err(|_| anyhow!("the {} quinn server did not start", kind.name()))?;
    let n = requests(quick);
    let (result, cpu) = with_cpu(|| {
        let client = std::thread::spawn(move || {
            let _pin = pin_to(CLIENT_CPU);
            kind.block_on(2, async move |runtime| {
                client(runtime, client_cfg, addr, n).await
            })
        });
        client.join().map_err(|_| anyhow!("the client panicked"))
    });
    endpoint.close(0u32.into(), b"done");
    server
        .join()
        .map_err(|_| anyhow!("the quinn server panicked"))?
        .with_context(|| format!("the {} quinn server", kind.name()))?;
    let mut latencies = result??.with_context(|| format!("the {} quinn client", kind.name()))?;
    latencies.sort_unstable();
    let q = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
    let mut row = AsyncRow::new(
        QUINN_RR,
        kind.name(),
        (kind == Kind::Soft).then(Precision::default),
    );
    row.p99_us = Some(q(0.99));
    row.cpu_ns_per_op = Some(cpu as f64 / n as f64);
    let total: f64 = latencies.iter().map(|&l| l as f64 / 1e9).sum();
    row.ops_per_s = Some(n as f64 / total);
    Ok(row)
}

/// `quinn-rr`: unchanged quinn on soft and on tokio `current_thread`.
pub fn quinn_rr(quick: bool) -> Result<Vec<AsyncRow>> {
    Ok(vec![
        measure(Kind::Soft, quick)?,
        measure(Kind::Tokio, quick)?,
    ])
}
