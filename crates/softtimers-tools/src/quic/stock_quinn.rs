//! Stock quinn 0.11, unchanged, written the way quinn's own examples and its `perf` tool
//! write it: an accept loop, a task per connection and per stream, and one response buffer
//! shared by every stream (quinn's `perf` server answers from one static buffer; building the
//! response per request would charge the baseline for work no user does).
//!
//! Three arms:
//!
//! * `quinn-tokio` ([`Arm::Measured`] on [`Engine::Tokio`]): a current-thread tokio runtime,
//!   the lab's transport settings ([`Tuning`](softtimer_quic::tls::Tuning), the same as the
//!   soft stacks') and every timer quinn arms measured: how late quinn handled it past its
//!   deadline. The measurement reads the clock once per timer reset and takes a lock only
//!   when a deadline has passed; everything else is `quinn::TokioRuntime`'s.
//! * `quinn-async` ([`Arm::Measured`] on [`Engine::Soft`]): the same quinn, settings and
//!   measurement on `softtimer-async`'s runtime (`SoftRuntime`: quinn's timers are soft
//!   events), one loop: what a user of unchanged quinn gets by passing another runtime.
//! * `quinn-plain` ([`Arm::Plain`], tokio): quinn with its defaults
//!   (`TransportConfig::default()`, `Endpoint::server` and `Endpoint::client` with quinn's own
//!   socket set-up), nothing measured: the stock-quinn server a user writes, the anchor the
//!   others' median is read against.

use super::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};
use std::task::{Context as TaskContext, Poll};

use softtimer_quic::tls::{ALPN_PERF, client_config_with, server_config_with};

/// The async runtime a stock-quinn arm runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Engine {
    /// tokio's current-thread scheduler.
    Tokio,
    /// `softtimer-async`, one loop, its default precision.
    Soft,
}

/// A runtime of either engine, and what the arms need of it: quinn's runtime, tasks, time.
enum Executor {
    Tokio(tokio::runtime::Runtime),
    Soft(softtimer_async::Runtime),
}

/// A spawned task, awaited for its end.
type Joined = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Executor {
    fn new(engine: Engine) -> Result<Executor> {
        Ok(match engine {
            Engine::Tokio => Executor::Tokio(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .context("starting the tokio runtime")?,
            ),
            Engine::Soft => Executor::Soft(
                softtimer_async::Runtime::new().context("starting the softtimer-async runtime")?,
            ),
        })
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        match self {
            Executor::Tokio(rt) => rt.block_on(future),
            Executor::Soft(rt) => rt.block_on(future),
        }
    }

    /// quinn's runtime on this executor.
    fn quinn(&self) -> Arc<dyn quinn::Runtime> {
        match self {
            Executor::Tokio(_) => Arc::new(quinn::TokioRuntime),
            Executor::Soft(rt) => Arc::new(softtimer_async::quinn::SoftRuntime::new(rt.handle())),
        }
    }
}

impl Engine {
    /// Spawns `task` on this engine's runtime (the caller runs on it).
    fn spawn(self, task: impl Future<Output = ()> + Send + 'static) -> Joined {
        match self {
            Engine::Tokio => {
                let handle = tokio::spawn(task);
                Box::pin(async move {
                    let _ = handle.await;
                })
            }
            Engine::Soft => {
                let handle = softtimer_async::spawn(task);
                Box::pin(async move {
                    let _ = handle.await;
                })
            }
        }
    }

    async fn sleep_until(self, at: Instant) {
        match self {
            Engine::Tokio => tokio::time::sleep_until(at.into()).await,
            Engine::Soft => softtimer_async::time::sleep_until(at).await,
        }
    }

    /// `future`'s output, or `None` if `limit` passes first.
    async fn timeout<F: Future>(self, limit: Duration, future: F) -> Option<F::Output> {
        match self {
            Engine::Tokio => tokio::time::timeout(limit, future).await.ok(),
            Engine::Soft => softtimer_async::time::timeout(limit, future).await.ok(),
        }
    }
}

/// Which stock-quinn arm runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arm {
    /// The lab's transport settings, quinn's timers measured.
    Measured,
    /// quinn's defaults, nothing measured.
    Plain,
}

/// The response every stream is answered from, built once per process.
fn shared_pattern() -> &'static Pattern {
    static PATTERN: OnceLock<Pattern> = OnceLock::new();
    PATTERN.get_or_init(Pattern::default)
}

/// How late quinn handled its deadlines, shared by every timer of a runtime.
#[derive(Debug)]
struct Lateness {
    /// (ns past the deadline, deadlines seen passed).
    inner: Mutex<(Histogram<u64>, u64)>,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness {
            inner: Mutex::new((
                Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds"),
                0,
            )),
        }
    }
}

impl Lateness {
    fn record(&self, late: Duration) {
        let mut inner = self.inner.lock().expect("lock");
        let _ = inner.0.record((late.as_nanos() as u64).max(1));
        inner.1 += 1;
    }
}

/// One timer's deadline, and whether its passing has been counted.
///
/// quinn's connection driver, each time it runs, reads the runtime's clock, handles every
/// timeout that has passed (`handle_timeout(now)`), and then resets its timer to quinn-proto's
/// next deadline. So when a timer is reset, a previous deadline at or before `now` has just
/// been handled, `now − deadline` late, whether tokio's timer fired for it or a packet's
/// processing got there first. That is the only place the clock is read.
#[derive(Clone, Copy, Debug)]
struct Deadline {
    at: Instant,
    counted: bool,
}

impl Deadline {
    fn new(at: Instant) -> Deadline {
        Deadline { at, counted: false }
    }

    /// The timer is reset to `next` at `now`: how late the previous deadline was handled,
    /// if it had passed and was not counted yet.
    fn reset(&mut self, now: Instant, next: Instant) -> Option<Duration> {
        let late = (!self.counted && self.at <= now).then(|| now.duration_since(self.at));
        if late.is_some() {
            self.counted = true;
        }
        if next != self.at {
            *self = Deadline::new(next);
        }
        late
    }
}

/// A quinn runtime (tokio's or the soft one) with every timer quinn arms measured
/// ([`Deadline`]).
#[derive(Debug)]
struct MeasuredRuntime {
    inner: Arc<dyn quinn::Runtime>,
    lateness: Arc<Lateness>,
}

impl MeasuredRuntime {
    fn new(inner: Arc<dyn quinn::Runtime>) -> MeasuredRuntime {
        MeasuredRuntime {
            inner,
            lateness: Arc::default(),
        }
    }
}

#[derive(Debug)]
struct MeasuredTimer {
    sleep: Pin<Box<dyn quinn::AsyncTimer>>,
    deadline: Deadline,
    lateness: Arc<Lateness>,
}

impl quinn::AsyncTimer for MeasuredTimer {
    fn reset(mut self: Pin<&mut Self>, i: Instant) {
        if let Some(late) = self.deadline.reset(Instant::now(), i) {
            self.lateness.record(late);
        }
        self.sleep.as_mut().reset(i);
    }

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext) -> Poll<()> {
        self.sleep.as_mut().poll(cx)
    }
}

impl quinn::Runtime for MeasuredRuntime {
    fn new_timer(&self, i: Instant) -> Pin<Box<dyn quinn::AsyncTimer>> {
        Box::pin(MeasuredTimer {
            sleep: self.inner.new_timer(i),
            deadline: Deadline::new(i),
            lateness: Arc::clone(&self.lateness),
        })
    }

    fn spawn(&self, future: Pin<Box<dyn std::future::Future<Output = ()> + Send>>) {
        self.inner.spawn(future)
    }

    fn wrap_udp_socket(
        &self,
        socket: UdpSocket,
    ) -> std::io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
        self.inner.wrap_udp_socket(socket)
    }

    fn now(&self) -> Instant {
        self.inner.now()
    }
}

/// What a stock-quinn side reports: its sends, and quinn's timers where measured.
fn side(lateness: Option<&Lateness>, datagrams: u64, ios: u64) -> DriverSide {
    let (p50, p99, max, hist, timeouts) = match lateness {
        Some(l) => {
            let inner = l.inner.lock().expect("lock");
            let (p50, p99, max, hist) = timer_side(&inner.0);
            (p50, p99, max, hist, inner.1)
        }
        None => (f64::NAN, f64::NAN, f64::NAN, Vec::new(), 0),
    };
    DriverSide {
        datagrams_sent: Some(datagrams),
        send_calls: Some(ios),
        timeouts,
        timer_late_p50_us: p50,
        timer_late_p99_us: p99,
        timer_late_max_us: max,
        release_late_p99_us: None,
        timer_late_hist: hist,
        causes: None,
        tail_probes: None,
        tail_probes_finding_loss: None,
        spin_window_us: None,
        io: None,
        idle_spin_ms: None,
    }
}

/// The measured arm's endpoint on `socket`.
fn measured_endpoint(
    socket: UdpSocket,
    server: Option<quinn::ServerConfig>,
    runtime: Arc<MeasuredRuntime>,
) -> Result<quinn::Endpoint> {
    // The same socket buffers as the soft-timer driver asks for.
    let state = quinn::udp::UdpSocketState::new((&socket).into())?;
    let _ = state.set_send_buffer_size((&socket).into(), 8 << 20);
    let _ = state.set_recv_buffer_size((&socket).into(), 8 << 20);
    socket.set_nonblocking(true)?;
    quinn::Endpoint::new(quinn::EndpointConfig::default(), server, socket, runtime)
        .context("starting the quinn endpoint")
}

pub(super) fn server(
    opts: &ServerOptions,
    identity: &Identity,
    tuning: &Tuning,
    arm: Arm,
    engine: Engine,
) -> Result<((ServerReport, u64), DriverSide)> {
    let rt = Executor::new(engine)?;
    let measured = Arc::new(MeasuredRuntime::new(rt.quinn()));
    let connections = opts.connections;
    let lateness = Arc::clone(&measured.lateness);
    rt.block_on(async move {
        let endpoint = match arm {
            Arm::Measured => {
                let socket = UdpSocket::bind(opts.listen)
                    .with_context(|| format!("cannot listen on {}", opts.listen))?;
                measured_endpoint(socket, Some(server_config(identity, tuning)?), measured)?
            }
            Arm::Plain => {
                let transport = Arc::new(quinn::TransportConfig::default());
                let config = server_config_with(identity, &[ALPN_PERF], transport)?;
                quinn::Endpoint::server(config, opts.listen)
                    .with_context(|| format!("cannot listen on {}", opts.listen))?
            }
        };
        // Ctrl-C closes the endpoint: accept ends, the connections close, the report follows.
        let closing = endpoint.clone();
        let _interrupt = crate::interrupt::stop_on_interrupt(move || {
            use softtimer_quic::perf::{SHUTDOWN_CODE, SHUTDOWN_REASON};
            closing.close(SHUTDOWN_CODE.into(), SHUTDOWN_REASON);
        });
        crate::output::announce_port("quic server", opts.listen, endpoint.local_addr());
        let report = Arc::new(Mutex::new(ServerReport::default()));
        let udp = Arc::new(Mutex::new((0u64, 0u64)));
        // Connections and streams are counted, not kept: a handle per request held to the
        // end would grow with every request a long run serves.
        let connections_running = Outstanding::new();
        let (mut accepted, mut retries) = (0u64, 0u64);
        while let Some(incoming) = endpoint.accept().await {
            // As quinn's own server example does: a Retry for an address not yet validated
            // (the client comes back with the token; quinn refuses a second Retry itself).
            if opts.retry && !incoming.remote_address_validated() && incoming.may_retry() {
                if incoming.retry().is_ok() {
                    retries += 1;
                }
                continue;
            }
            accepted += 1;
            let report = Arc::clone(&report);
            let udp = Arc::clone(&udp);
            let running = connections_running.start();
            drop(engine.spawn(async move {
                let _running = running;
                let Ok(conn) = incoming.await else { return };
                report.lock().expect("lock").connections += 1;
                let streams = Outstanding::new();
                while let Ok((send, recv)) = conn.accept_bi().await {
                    let report = Arc::clone(&report);
                    let running = streams.start();
                    drop(engine.spawn(async move {
                        let _running = running;
                        serve_stream(send, recv, report).await;
                    }));
                }
                streams.all_done().await;
                let stats = conn.stats();
                report.lock().expect("lock").add_path_stats(&stats.path);
                let mut u = udp.lock().expect("lock");
                u.0 += stats.udp_tx.datagrams;
                u.1 += stats.udp_tx.ios;
            }));
            if connections.is_some_and(|n| accepted >= n) {
                break;
            }
        }
        connections_running.all_done().await;
        endpoint.wait_idle().await;
        let report = report.lock().expect("lock").clone();
        let (datagrams, ios) = *udp.lock().expect("lock");
        let measured = (arm == Arm::Measured).then_some(&*lateness);
        Ok(((report, retries), side(measured, datagrams, ios)))
    })
}

/// Answers one perf request: the 8-byte size, the upload read and dropped, then the response
/// written from the shared pattern.
async fn serve_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    report: Arc<Mutex<ServerReport>>,
) {
    let mut header = [0u8; 8];
    if recv.read_exact(&mut header).await.is_err() {
        report.lock().expect("lock").aborted += 1;
        return;
    }
    let download = u64::from_be_bytes(header);
    let mut uploaded = 0u64;
    loop {
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => uploaded += chunk.bytes.len() as u64,
            Ok(None) => break,
            Err(_) => {
                report.lock().expect("lock").aborted += 1;
                return;
            }
        }
    }
    let pattern = shared_pattern();
    let mut sent = 0;
    while sent < download {
        let chunk = pattern.at(sent, download - sent);
        if send.write_all(chunk).await.is_err() {
            report.lock().expect("lock").aborted += 1;
            return;
        }
        sent += chunk.len() as u64;
    }
    let _ = send.finish();
    let mut r = report.lock().expect("lock");
    r.requests += 1;
    r.bytes_sent += sent;
    r.bytes_received += uploaded;
}

pub(super) fn client(
    opts: &ClientOptions,
    trust: &Trust,
    tuning: &Tuning,
    arm: Arm,
    engine: Engine,
) -> Result<(ClientReport, DriverSide)> {
    let bind: SocketAddr = if opts.to.is_ipv6() {
        "[::]:0".parse()?
    } else {
        "0.0.0.0:0".parse()?
    };
    let rt = Executor::new(engine)?;
    let plan = opts.plan.clone();
    let measured = Arc::new(MeasuredRuntime::new(rt.quinn()));
    let lateness = Arc::clone(&measured.lateness);
    rt.block_on(async move {
        let (endpoint, config) = match arm {
            Arm::Measured => {
                let socket = UdpSocket::bind(bind).context("binding the client socket")?;
                let endpoint = measured_endpoint(socket, None, measured)?;
                (endpoint, client_config(trust, tuning)?)
            }
            Arm::Plain => {
                let transport = Arc::new(quinn::TransportConfig::default());
                let endpoint =
                    quinn::Endpoint::client(bind).context("binding the client socket")?;
                (
                    endpoint,
                    client_config_with(trust, &[ALPN_PERF], transport)?,
                )
            }
        };
        let started = Instant::now();
        let connecting = endpoint
            .connect_with(config, opts.to, &opts.server_name)
            .map_err(|e| anyhow!("cannot connect: {e}"))?;
        let conn = match engine.timeout(plan.connect_timeout, connecting).await {
            None => bail!(
                "no answer from the server within {} s",
                plan.connect_timeout.as_secs_f64()
            ),
            Some(Err(e)) => bail!("the handshake failed: {e}"),
            Some(Ok(conn)) => conn,
        };
        let mut report = ClientReport {
            handshake_us: started.elapsed().as_secs_f64() * 1e6,
            ..ClientReport::default()
        };
        if let Some((bytes, idle)) = plan.warmup {
            request(&conn, bytes, 0, false).await?;
            engine.sleep_until(Instant::now() + idle).await;
        }
        let mut verified = true;
        let first = Instant::now();
        for k in 0..plan.requests {
            if let Some(interval) = plan.interval {
                engine.sleep_until(first + interval * k as u32).await;
            }
            let start = Instant::now();
            verified &= request(&conn, plan.download, plan.upload, plan.verify).await?;
            count_request(&mut report, &plan, start);
        }
        report.elapsed_s = first.elapsed().as_secs_f64();
        let stats = conn.stats();
        report.rtt_us = stats.path.rtt.as_secs_f64() * 1e6;
        report.cwnd = stats.path.cwnd;
        report.sent_packets = stats.path.sent_packets;
        report.lost_packets = stats.path.lost_packets;
        report.congestion_events = stats.path.congestion_events;
        conn.close(0u32.into(), b"done");
        endpoint.wait_idle().await;
        report.summarize(plan.requests, plan.verify.then_some(verified));
        let measured = (arm == Arm::Measured).then_some(&*lateness);
        Ok((
            report,
            side(measured, stats.udp_tx.datagrams, stats.udp_tx.ios),
        ))
    })
}

async fn request(
    conn: &quinn::Connection,
    download: u64,
    upload: u64,
    verify: bool,
) -> Result<bool> {
    let (mut send, mut recv) = conn.open_bi().await.context("opening a stream")?;
    send.write_all(&download.to_be_bytes()).await?;
    let pattern = shared_pattern();
    let mut sent = 0;
    while sent < upload {
        let chunk = pattern.at(sent, upload - sent);
        send.write_all(chunk).await?;
        sent += chunk.len() as u64;
    }
    send.finish()?;
    let mut got = 0u64;
    let mut ok = true;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
        if verify {
            ok &= check(&chunk.bytes, got);
        }
        got += chunk.bytes.len() as u64;
    }
    if got != download {
        bail!("the server sent {got} of {download} bytes");
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn::Runtime;

    #[test]
    fn the_plain_arm_s_side_without_measured_timers_reads_back_from_its_json() {
        let written = serde_json::to_string(&side(None, 7, 3)).unwrap();
        let read: DriverSide = serde_json::from_str(&written).unwrap();
        assert!(read.timer_late_p50_us.is_nan() && read.timer_late_max_us.is_nan());
        assert_eq!((read.datagrams_sent, read.send_calls), (Some(7), Some(3)));
    }

    #[test]
    fn a_passed_deadline_is_counted_once_when_its_timer_is_reset() {
        let base = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Deadline::new(base + ms(1));
        // Reset before the deadline: nothing passed.
        assert_eq!(d.reset(base, base + ms(1)), None);
        // Reset 2 ms after a 1 ms deadline (handled then): 1 ms late, once.
        assert_eq!(d.reset(base + ms(2), base + ms(1)), Some(ms(1)));
        assert_eq!(d.reset(base + ms(3), base + ms(1)), None, "counted twice");
        // A new deadline is counted when it passes in its turn.
        assert_eq!(d.reset(base + ms(3), base + ms(5)), None);
        assert_eq!(d.reset(base + ms(6), base + ms(9)), Some(ms(1)));
        // A deadline moved later before it passed never counts.
        assert_eq!(d.reset(base + ms(7), base + ms(20)), None);
        assert_eq!(d.reset(base + ms(8), base + ms(30)), None);
    }

    #[test]
    fn the_measured_runtime_records_a_real_timers_lateness_and_not_a_moved_one() {
        let rt = Executor::new(Engine::Tokio).unwrap();
        let measured = MeasuredRuntime::new(rt.quinn());
        rt.block_on(async {
            let deadline = measured.now() + Duration::from_millis(2);
            let mut timer = measured.new_timer(deadline);
            std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
            // quinn handles the expiry and resets its timer to the next deadline.
            let next = measured.now() + Duration::from_millis(50);
            timer.as_mut().reset(next);
            // Moved before it passed: never counted.
            timer.as_mut().reset(next + Duration::from_millis(50));
        });
        let inner = measured.lateness.inner.lock().unwrap();
        assert_eq!(inner.1, 1);
        // tokio rounds a deadline up to its next millisecond tick: late, but not by much.
        let late = inner.0.max();
        assert!((1..1_000_000_000).contains(&late), "{late} ns");
    }
}

/// Tasks started and not yet ended, and a wait for none to be left.
#[derive(Clone)]
struct Outstanding(Arc<OutstandingInner>);

struct OutstandingInner {
    running: std::sync::atomic::AtomicUsize,
    waiter: Mutex<Option<std::task::Waker>>,
}

/// Held by a task while it runs: its end (or its cancellation) counts it out.
struct Running(Outstanding);

impl Outstanding {
    fn new() -> Outstanding {
        Outstanding(Arc::new(OutstandingInner {
            running: std::sync::atomic::AtomicUsize::new(0),
            waiter: Mutex::new(None),
        }))
    }

    fn start(&self) -> Running {
        self.0
            .running
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Running(self.clone())
    }

    /// Ready once every task started has ended.
    async fn all_done(&self) {
        use std::sync::atomic::Ordering;
        std::future::poll_fn(|cx| {
            if self.0.running.load(Ordering::Acquire) == 0 {
                return std::task::Poll::Ready(());
            }
            *self.0.waiter.lock().expect("lock") = Some(cx.waker().clone());
            // Looked at again after the waker is in place: an end in between found it.
            if self.0.running.load(Ordering::Acquire) == 0 {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let inner = &self.0.0;
        if inner
            .running
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
            && let Some(waker) = inner.waiter.lock().expect("lock").take()
        {
            waker.wake();
        }
    }
}
