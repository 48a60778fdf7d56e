//! `softtimers quic server|client`: the QUIC performance protocol on every stack the lab
//! compares.
//!
//! * `soft`: quinn-proto on the soft-timer driver of `softtimer-quic`, quinn's own pacer;
//! * `soft-paced`: the same with per-packet pacing through the departure-time scheduler;
//! * `soft-1ms`: the same loop with every quinn timer rounded up to 1 ms, as tokio's wheel
//!   rounds, to separate timer precision from everything else the runtimes differ in;
//! * `quinn-tokio`: stock quinn 0.11 on a current-thread tokio runtime, structured as
//!   quinn's own examples (an accept loop, a task per connection and per stream);
//! * `kernel-tcp`: the kernel's TCP (CUBIC) with plain blocking sockets, `TCP_NODELAY`, each
//!   request framed as `[download u64][upload u64][upload bytes]` on one connection.
//!
//! Every QUIC stack uses the same TLS set-up, congestion controller, flow-control windows,
//! MTU settings and socket buffers ([`softtimer_quic::tls::Tuning`]), and the same
//! response pattern, so that a client checks every byte whichever server it talks to.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;
use serde::Serialize;
use softtimer::Clock;
use softtimer_quic::idle::{AfterIdle, AfterIdleFactory};
use softtimer_quic::perf::{
    ClientPlan, ClientReport, Pattern, PerfClient, PerfServer, ServerReport, pattern_byte,
};
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
use softtimer_quic::{DriverConfig, Pacing, QuicLoop, TransmitCauses};
use softtimer_rt::{LoopConfig, SpinWindow};

/// A stack of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stack {
    /// quinn-proto on soft timers, quinn's pacer.
    Soft,
    /// quinn-proto on soft timers, per-packet pacing.
    SoftPaced,
    /// quinn-proto on soft timers, every timer rounded up to 1 ms.
    #[value(name = "soft-1ms")]
    #[serde(rename = "soft-1ms")]
    Soft1ms,
    /// Stock quinn on tokio.
    QuinnTokio,
    /// The kernel's TCP.
    KernelTcp,
}

impl Stack {
    /// The name rows carry.
    pub fn name(self) -> &'static str {
        match self {
            Stack::Soft => "soft",
            Stack::SoftPaced => "soft-paced",
            Stack::Soft1ms => "soft-1ms",
            Stack::QuinnTokio => "quinn-tokio",
            Stack::KernelTcp => "kernel-tcp",
        }
    }

    fn driver_config(self, per_departure: usize, tail_probe: bool) -> DriverConfig {
        DriverConfig {
            datagrams_per_departure: per_departure,
            tail_probe,
            pacing: if self == Stack::SoftPaced {
                Pacing::PerPacket
            } else {
                Pacing::Quinn
            },
            timer_granularity: (self == Stack::Soft1ms).then_some(Duration::from_millis(1)),
            ..DriverConfig::default()
        }
    }
}

/// The after-idle behaviour, as a command-line value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AfterIdleArg {
    /// quinn's CUBIC as it is.
    Keep,
    /// Slow-start restart after idle.
    SlowStart,
    /// Rate-based clocking after idle.
    RateBased,
}

/// Settings shared by server and client.
#[derive(Clone, Debug)]
pub struct Common {
    /// The stack.
    pub stack: Stack,
    /// Flow-control windows, bytes.
    pub window: u64,
    /// What the congestion controller does after idle.
    pub after_idle: AfterIdleArg,
    /// Ask the peer to acknowledge every this many packets.
    pub ack_every: Option<u32>,
    /// Largest ACK delay to ask the peer for.
    pub max_ack_delay: Option<Duration>,
    /// The soft-timer loop's idle spin window (the soft stacks only; default: calibrated).
    pub spin: Option<SpinWindow>,
    /// Datagrams per paced departure (`soft-paced` only).
    pub per_departure: usize,
    /// The soft-timer driver's tail-loss probe (the soft stacks; on by default).
    pub tail_probe: bool,
    /// The connection's idle timeout (the QUIC stacks; default:
    /// [`softtimer_quic::tls::DEFAULT_IDLE_TIMEOUT`], 30 s).
    pub idle_timeout: Option<Duration>,
}

impl Common {
    /// The soft-timer stacks' loop and driver on `socket`, serving if given a server config.
    fn quic_loop(
        &self,
        socket: UdpSocket,
        server: Option<quinn::ServerConfig>,
    ) -> Result<QuicLoop> {
        let loop_config = LoopConfig {
            spin_window: self.spin.unwrap_or(SpinWindow::Calibrated),
            ..LoopConfig::default()
        };
        let driver = self
            .stack
            .driver_config(self.per_departure, self.tail_probe);
        Ok(QuicLoop::new(loop_config, socket, driver, server)?)
    }

    fn tuning(&self) -> Result<Tuning> {
        if self.window < 16 * 1024 {
            bail!("--window {} is below 16 KiB", self.window);
        }
        let mode = match self.after_idle {
            AfterIdleArg::Keep => AfterIdle::Keep,
            AfterIdleArg::SlowStart => AfterIdle::SlowStart,
            AfterIdleArg::RateBased => AfterIdle::RateBased,
        };
        if self.per_departure == 0 {
            bail!("--per-departure must be at least 1");
        }
        if self.per_departure > 1 && self.stack != Stack::SoftPaced {
            bail!("--per-departure applies to --stack soft-paced only");
        }
        if self.spin.is_some() && matches!(self.stack, Stack::QuinnTokio | Stack::KernelTcp) {
            bail!("--spin applies to the soft-timer stacks only (soft, soft-paced, soft-1ms)");
        }
        if !self.tail_probe && matches!(self.stack, Stack::QuinnTokio | Stack::KernelTcp) {
            bail!(
                "--no-tail-probe applies to the soft-timer stacks only (soft, soft-paced, soft-1ms)"
            );
        }
        if self.ack_every == Some(0) {
            bail!("--ack-every must be at least 1");
        }
        if self.idle_timeout.is_some() && self.stack == Stack::KernelTcp {
            bail!("--idle-timeout applies to the QUIC stacks only");
        }
        let idle_timeout = self
            .idle_timeout
            .unwrap_or(softtimer_quic::tls::DEFAULT_IDLE_TIMEOUT);
        if !(MIN_IDLE_TIMEOUT..=MAX_IDLE_TIMEOUT).contains(&idle_timeout) {
            bail!(
                "--idle-timeout {idle_timeout:?} is out of range ({MIN_IDLE_TIMEOUT:?} to \
                 {MAX_IDLE_TIMEOUT:?})"
            );
        }
        Ok(Tuning {
            window: self.window,
            controller: Arc::new(AfterIdleFactory::new(mode)),
            ack_every: self.ack_every,
            max_ack_delay: self.max_ack_delay,
            idle_timeout,
            ..Tuning::default()
        })
    }
}

/// The shortest `--idle-timeout`: a few RTTs of a slow path.
const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(100);
/// The longest `--idle-timeout`: a day.
const MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(86_400);

/// `softtimers quic server`.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Stack and transport settings.
    pub common: Common,
    /// Exit after this many connections have closed.
    pub connections: Option<u64>,
    /// Write the self-signed certificate (DER) here, for a client's `--cert`.
    pub cert_out: Option<PathBuf>,
}

/// What a server run reports.
#[derive(Clone, Debug, Serialize)]
pub struct ServerRun {
    /// The stack.
    pub stack: Stack,
    /// What was served.
    pub served: ServerReport,
    /// CPU time of the process, ns.
    pub cpu_ns: u64,
    /// CPU time per megabyte sent, ns.
    pub cpu_ns_per_mb: f64,
    /// The QUIC runtime's side: timers and sends (absent for TCP).
    pub driver: Option<DriverSide>,
}

/// What a QUIC runtime saw on one side: its sends and quinn's timers.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DriverSide {
    /// Datagrams sent (`null` where the runtime does not count them).
    pub datagrams_sent: Option<u64>,
    /// `sendmsg` calls (`null` likewise).
    pub send_calls: Option<u64>,
    /// quinn deadlines the runtime saw pass: the soft-timer driver counts each timeout it
    /// handles; for stock quinn, each deadline quinn armed that its clock reads found passed
    /// (one whose expiry a packet's processing superseded counts too, at that moment).
    pub timeouts: u64,
    /// Timer lateness past what quinn asked for, µs: p50, p99, max.
    pub timer_late_p50_us: f64,
    /// 99th percentile.
    pub timer_late_p99_us: f64,
    /// Largest.
    pub timer_late_max_us: f64,
    /// Paced datagrams' lateness past their departure times, µs, p99 (`null` without
    /// per-packet pacing).
    pub release_late_p99_us: Option<f64>,
    /// Timer lateness histogram: (upper bound µs, count) buckets by decade from 1 µs.
    pub timer_late_hist: Vec<(f64, u64)>,
    /// What caused the datagrams to leave (`null` for stock quinn, whose runtime does not
    /// say).
    pub causes: Option<TransmitCauses>,
    /// The soft-timer loop's idle spin window, µs (`null` for stock quinn).
    pub spin_window_us: Option<f64>,
    /// Tail-loss probes the soft-timer driver sent (`null` for stock quinn).
    pub tail_probes: Option<u64>,
    /// Of those, the probes after which quinn declared a loss before sending data again.
    pub tail_probes_finding_loss: Option<u64>,
    /// Time the loop spent spinning before due events, ms, by the loop's clock (CPU time
    /// unless the host took the CPU away meanwhile; `null` for stock quinn).
    pub idle_spin_ms: Option<f64>,
}

use crate::harness::process_cpu_ns;

/// The timer side of a lateness histogram (ns).
fn timer_side(h: &Histogram<u64>) -> (f64, f64, f64, Vec<(f64, u64)>) {
    let us = |ns: u64| ns as f64 / 1000.0;
    let mut hist = Vec::new();
    if !h.is_empty() {
        for v in h.iter_log(1000, 10.0) {
            hist.push((us(v.value_iterated_to()), v.count_since_last_iteration()));
        }
    }
    (
        us(h.value_at_quantile(0.5)),
        us(h.value_at_quantile(0.99)),
        us(h.max()),
        hist,
    )
}

fn driver_side(quic: &mut QuicLoop) -> DriverSide {
    let counters = quic.event_loop().counters();
    let spin_window_us = {
        let ev = quic.event_loop();
        let span = ev.idle_policy().spin_window;
        ev.clock().duration(span).as_secs_f64() * 1e6
    };
    let io = quic.stats().clone();
    let d = quic.driver();
    let stats = d.stats();
    let (p50, p99, max, hist) = timer_side(d.timer_lateness());
    let paced = !d.release_lateness().is_empty();
    DriverSide {
        datagrams_sent: Some(io.datagrams_sent),
        send_calls: Some(io.send_calls),
        timeouts: stats.timeouts,
        tail_probes: Some(stats.tail_probes),
        tail_probes_finding_loss: Some(stats.tail_probes_finding_loss),
        timer_late_p50_us: p50,
        timer_late_p99_us: p99,
        timer_late_max_us: max,
        release_late_p99_us: paced
            .then(|| d.release_lateness().value_at_quantile(0.99) as f64 / 1000.0),
        timer_late_hist: hist,
        causes: Some(io.causes),
        spin_window_us: Some(spin_window_us),
        idle_spin_ms: Some(counters.idle_spin_ns as f64 / 1e6),
    }
}

/// Runs a server until `connections` have closed (or forever).
pub fn server(opts: &ServerOptions) -> Result<ServerRun> {
    let tuning = opts.common.tuning()?;
    let identity = Identity::self_signed(&["localhost"])?;
    if let Some(path) = &opts.cert_out {
        std::fs::write(path, identity.cert.as_ref())
            .with_context(|| format!("writing the certificate to {}", path.display()))?;
    }
    let cpu0 = process_cpu_ns();
    let (served, driver) = match opts.common.stack {
        Stack::Soft | Stack::SoftPaced | Stack::Soft1ms => {
            let socket = UdpSocket::bind(opts.listen)
                .with_context(|| format!("cannot listen on {}", opts.listen))?;
            let config = server_config(&identity, &tuning)?;
            let mut quic = opts.common.quic_loop(socket, Some(config))?;
            let mut app = PerfServer::new(opts.connections);
            quic.run(&mut app)?;
            (app.report, Some(driver_side(&mut quic)))
        }
        Stack::QuinnTokio => {
            let (served, side) = tokio_arm::server(opts, &identity, &tuning)?;
            (served, Some(side))
        }
        Stack::KernelTcp => (tcp_server(opts)?, None),
    };
    let cpu_ns = process_cpu_ns() - cpu0;
    Ok(ServerRun {
        stack: opts.common.stack,
        cpu_ns_per_mb: per_mb(cpu_ns, served.bytes_sent + served.bytes_received),
        served,
        cpu_ns,
        driver,
    })
}

fn per_mb(cpu_ns: u64, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    cpu_ns as f64 / (bytes as f64 / 1e6)
}

/// `softtimers quic client`.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The server.
    pub to: SocketAddr,
    /// The name its certificate must carry.
    pub server_name: String,
    /// Stack and transport settings.
    pub common: Common,
    /// What to ask for.
    pub plan: ClientPlan,
    /// Accept any certificate.
    pub insecure: bool,
    /// Trust exactly this certificate (DER file).
    pub cert: Option<PathBuf>,
}

/// What a client run reports.
#[derive(Clone, Debug, Serialize)]
pub struct ClientRun {
    /// The stack.
    pub stack: Stack,
    /// What was measured.
    pub report: ClientReport,
    /// CPU time of the process, ns.
    pub cpu_ns: u64,
    /// CPU time per megabyte received and sent, ns.
    pub cpu_ns_per_mb: f64,
    /// The QUIC runtime's side: timers and sends (absent for TCP).
    pub driver: Option<DriverSide>,
}

/// Runs the client's plan against a server.
pub fn client(opts: &ClientOptions) -> Result<ClientRun> {
    let tuning = opts.common.tuning()?;
    if opts.plan.requests == 0 {
        bail!("--requests must be at least 1");
    }
    let trust = match (&opts.cert, opts.insecure) {
        (Some(path), _) => Trust::Cert(
            std::fs::read(path)
                .with_context(|| format!("reading the certificate {}", path.display()))?
                .into(),
        ),
        (None, true) => Trust::Insecure,
        (None, false) => Trust::Nothing,
    };
    let cpu0 = process_cpu_ns();
    let (report, driver) = match opts.common.stack {
        Stack::Soft | Stack::SoftPaced | Stack::Soft1ms => {
            let bind: SocketAddr = if opts.to.is_ipv6() {
                "[::]:0".parse()?
            } else {
                "0.0.0.0:0".parse()?
            };
            let socket = UdpSocket::bind(bind).context("binding the client socket")?;
            let mut quic = opts.common.quic_loop(socket, None)?;
            let config = client_config(&trust, &tuning)?;
            let started = quic.driver().now();
            let conn = quic.driver().connect(config, opts.to, &opts.server_name)?;
            let mut app = PerfClient::new(opts.plan.clone(), conn, started);
            quic.run(&mut app)?;
            (app.report, Some(driver_side(&mut quic)))
        }
        Stack::QuinnTokio => {
            let (report, side) = tokio_arm::client(opts, &trust, &tuning)?;
            (report, Some(side))
        }
        Stack::KernelTcp => (tcp_client(opts)?, None),
    };
    let cpu_ns = process_cpu_ns() - cpu0;
    if let Some(e) = &report.error {
        if matches!(trust, Trust::Nothing) && e.contains("handshake failed") {
            bail!("{e} (the client trusts no certificate: pass --cert FILE or --insecure)");
        }
        bail!("{e}");
    }
    if report.verified == Some(false) {
        bail!(
            "the data received did not match the perf pattern (pass --no-verify for a server that sends other bytes)"
        );
    }
    Ok(ClientRun {
        stack: opts.common.stack,
        cpu_ns_per_mb: per_mb(cpu_ns, report.download_bytes + report.upload_bytes),
        report,
        cpu_ns,
        driver,
    })
}

fn check(data: &[u8], offset: u64) -> bool {
    data.iter()
        .enumerate()
        .all(|(i, &b)| b == pattern_byte(offset + i as u64))
}

// ---------------------------------------------------------------------------------------
// Kernel TCP

fn tcp_server(opts: &ServerOptions) -> Result<ServerReport> {
    let listener = TcpListener::bind(opts.listen)
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    let mut report = ServerReport::default();
    let pattern = Pattern::default();
    let mut closed = 0;
    loop {
        let (mut stream, _) = listener.accept().context("accept")?;
        let _ = stream.set_nodelay(true);
        report.connections += 1;
        let mut header = [0u8; 16];
        while stream.read_exact(&mut header).is_ok() {
            let download = u64::from_be_bytes(header[..8].try_into().expect("8"));
            let mut upload = u64::from_be_bytes(header[8..].try_into().expect("8"));
            let mut sink = vec![0u8; 64 * 1024];
            while upload > 0 {
                let n = stream.read(&mut sink[..upload.min(65536) as usize])?;
                if n == 0 {
                    break;
                }
                upload -= n as u64;
                report.bytes_received += n as u64;
            }
            let mut sent = 0;
            while sent < download {
                let chunk = pattern.at(sent, download - sent);
                stream.write_all(chunk)?;
                sent += chunk.len() as u64;
            }
            report.bytes_sent += sent;
            report.requests += 1;
        }
        // The connection's own count of what it sent and resent, as QUIC's stacks report
        // theirs (a plain socket has no other way to say).
        if let Some(c) = crate::tcp_info::counts(&stream) {
            *report.sent_packets.get_or_insert(0) += c.segments_out;
            *report.lost_packets.get_or_insert(0) += c.retransmitted;
        }
        closed += 1;
        if opts.connections.is_some_and(|n| closed >= n) {
            return Ok(report);
        }
    }
}

fn tcp_client(opts: &ClientOptions) -> Result<ClientReport> {
    let plan = &opts.plan;
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&opts.to, plan.connect_timeout)
        .with_context(|| format!("no TCP connection to {}", opts.to))?;
    let _ = stream.set_nodelay(true);
    let mut report = ClientReport {
        handshake_us: started.elapsed().as_secs_f64() * 1e6,
        ..ClientReport::default()
    };
    let pattern = Pattern::default();
    let mut buf = vec![0u8; 256 * 1024];
    let mut exchange = |stream: &mut TcpStream, download: u64, upload: u64| -> Result<bool> {
        let mut header = [0u8; 16];
        header[..8].copy_from_slice(&download.to_be_bytes());
        header[8..].copy_from_slice(&upload.to_be_bytes());
        stream.write_all(&header)?;
        let mut sent = 0;
        while sent < upload {
            let chunk = pattern.at(sent, upload - sent);
            stream.write_all(chunk)?;
            sent += chunk.len() as u64;
        }
        let mut got = 0;
        let mut ok = true;
        while got < download {
            let want = (download - got).min(buf.len() as u64) as usize;
            let n = stream.read(&mut buf[..want])?;
            if n == 0 {
                bail!("the server closed the connection after {got} of {download} bytes");
            }
            if plan.verify {
                ok &= check(&buf[..n], got);
            }
            got += n as u64;
        }
        Ok(ok)
    };
    if let Some((bytes, idle)) = plan.warmup {
        exchange(&mut stream, bytes, 0)?;
        std::thread::sleep(idle);
    }
    let mut verified = true;
    let first = Instant::now();
    for k in 0..plan.requests {
        if let Some(interval) = plan.interval {
            let at = first + interval * k as u32;
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let start = Instant::now();
        verified &= exchange(&mut stream, plan.download, plan.upload)?;
        report
            .latencies_us
            .push(start.elapsed().as_secs_f64() * 1e6);
        report.requests += 1;
        report.download_bytes += plan.download;
        report.upload_bytes += plan.upload;
    }
    report.elapsed_s = first.elapsed().as_secs_f64();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    report.summarize(plan.requests, plan.verify.then_some(verified));
    Ok(report)
}

// ---------------------------------------------------------------------------------------
// Stock quinn on tokio

mod tokio_arm {
    use super::*;
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context as TaskContext, Poll};

    /// Stock quinn's tokio runtime, with every timer quinn arms measured: how late quinn
    /// handled it against the deadline it set. quinn detects expiry by reading the
    /// runtime's clock (`now() >= deadline`), so the clock read is where the first
    /// observation of a passed deadline is recorded. Everything else is
    /// `quinn::TokioRuntime`'s.
    #[derive(Debug, Default)]
    struct MeasuredRuntime {
        timers: Arc<Mutex<Timers>>,
    }

    #[derive(Debug)]
    struct Timers {
        /// Deadlines armed and not yet seen passed, by timer.
        armed: Vec<(u64, Instant)>,
        next_id: u64,
        lateness: Histogram<u64>,
        expiries: u64,
    }

    impl Default for Timers {
        fn default() -> Self {
            Timers {
                armed: Vec::new(),
                next_id: 0,
                lateness: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds"),
                expiries: 0,
            }
        }
    }

    impl Timers {
        fn arm(&mut self, id: u64, deadline: Instant) {
            match self.armed.iter_mut().find(|a| a.0 == id) {
                Some(a) => a.1 = deadline,
                None => self.armed.push((id, deadline)),
            }
        }

        fn observe(&mut self, now: Instant) {
            let Timers {
                armed,
                lateness,
                expiries,
                ..
            } = self;
            armed.retain(|&(_, deadline)| {
                if now < deadline {
                    return true;
                }
                *expiries += 1;
                let late = now.duration_since(deadline).as_nanos() as u64;
                let _ = lateness.record(late.max(1));
                false
            });
        }
    }

    #[derive(Debug)]
    struct MeasuredTimer {
        sleep: Pin<Box<dyn quinn::AsyncTimer>>,
        id: u64,
        timers: Arc<Mutex<Timers>>,
    }

    impl quinn::AsyncTimer for MeasuredTimer {
        fn reset(mut self: Pin<&mut Self>, i: Instant) {
            self.timers.lock().expect("lock").arm(self.id, i);
            self.sleep.as_mut().reset(i);
        }

        fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext) -> Poll<()> {
            self.sleep.as_mut().poll(cx)
        }
    }

    impl Drop for MeasuredTimer {
        fn drop(&mut self) {
            if let Ok(mut t) = self.timers.lock() {
                t.armed.retain(|a| a.0 != self.id);
            }
        }
    }

    impl quinn::Runtime for MeasuredRuntime {
        fn new_timer(&self, i: Instant) -> Pin<Box<dyn quinn::AsyncTimer>> {
            let mut t = self.timers.lock().expect("lock");
            let id = t.next_id;
            t.next_id += 1;
            t.arm(id, i);
            Box::pin(MeasuredTimer {
                sleep: quinn::TokioRuntime.new_timer(i),
                id,
                timers: Arc::clone(&self.timers),
            })
        }

        fn spawn(&self, future: Pin<Box<dyn std::future::Future<Output = ()> + Send>>) {
            quinn::TokioRuntime.spawn(future)
        }

        fn wrap_udp_socket(
            &self,
            socket: UdpSocket,
        ) -> std::io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
            quinn::TokioRuntime.wrap_udp_socket(socket)
        }

        fn now(&self) -> Instant {
            let now = quinn::TokioRuntime.now();
            self.timers.lock().expect("lock").observe(now);
            now
        }
    }

    impl MeasuredRuntime {
        fn side(&self, datagrams: u64, ios: u64) -> DriverSide {
            let t = self.timers.lock().expect("lock");
            let (p50, p99, max, hist) = timer_side(&t.lateness);
            DriverSide {
                datagrams_sent: Some(datagrams),
                send_calls: Some(ios),
                timeouts: t.expiries,
                timer_late_p50_us: p50,
                timer_late_p99_us: p99,
                timer_late_max_us: max,
                release_late_p99_us: None,
                timer_late_hist: hist,
                causes: None,
                tail_probes: None,
                tail_probes_finding_loss: None,
                spin_window_us: None,
                idle_spin_ms: None,
            }
        }
    }

    fn runtime() -> Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the tokio runtime")
    }

    fn endpoint(
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

    pub fn server(
        opts: &ServerOptions,
        identity: &Identity,
        tuning: &Tuning,
    ) -> Result<(ServerReport, DriverSide)> {
        let config = server_config(identity, tuning)?;
        let measured = Arc::new(MeasuredRuntime::default());
        let quinn_rt = Arc::clone(&measured);
        let socket = UdpSocket::bind(opts.listen)
            .with_context(|| format!("cannot listen on {}", opts.listen))?;
        let rt = runtime()?;
        let connections = opts.connections;
        rt.block_on(async move {
            let endpoint = endpoint(socket, Some(config), quinn_rt)?;
            let report = Arc::new(std::sync::Mutex::new(ServerReport::default()));
            let udp = Arc::new(std::sync::Mutex::new((0u64, 0u64)));
            let mut tasks = tokio::task::JoinSet::new();
            let mut accepted = 0u64;
            while let Some(incoming) = endpoint.accept().await {
                accepted += 1;
                let report = Arc::clone(&report);
                let udp = Arc::clone(&udp);
                tasks.spawn(async move {
                    let Ok(conn) = incoming.await else { return };
                    report.lock().expect("lock").connections += 1;
                    let mut streams = tokio::task::JoinSet::new();
                    while let Ok((send, recv)) = conn.accept_bi().await {
                        let report = Arc::clone(&report);
                        streams.spawn(serve_stream(send, recv, report));
                    }
                    while streams.join_next().await.is_some() {}
                    let stats = conn.stats();
                    report.lock().expect("lock").add_path_stats(&stats.path);
                    let mut u = udp.lock().expect("lock");
                    u.0 += stats.udp_tx.datagrams;
                    u.1 += stats.udp_tx.ios;
                });
                if connections.is_some_and(|n| accepted >= n) {
                    break;
                }
            }
            while tasks.join_next().await.is_some() {}
            endpoint.wait_idle().await;
            let report = report.lock().expect("lock").clone();
            let (datagrams, ios) = *udp.lock().expect("lock");
            Ok((report, measured.side(datagrams, ios)))
        })
    }

    async fn serve_stream(
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
        report: Arc<std::sync::Mutex<ServerReport>>,
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
        let pattern = Pattern::default();
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

    pub fn client(
        opts: &ClientOptions,
        trust: &Trust,
        tuning: &Tuning,
    ) -> Result<(ClientReport, DriverSide)> {
        let config = client_config(trust, tuning)?;
        let bind: SocketAddr = if opts.to.is_ipv6() {
            "[::]:0".parse()?
        } else {
            "0.0.0.0:0".parse()?
        };
        let socket = UdpSocket::bind(bind).context("binding the client socket")?;
        let rt = runtime()?;
        let plan = opts.plan.clone();
        let measured = Arc::new(MeasuredRuntime::default());
        let quinn_rt = Arc::clone(&measured);
        rt.block_on(async move {
            let endpoint = endpoint(socket, None, quinn_rt)?;
            let started = Instant::now();
            let connecting = endpoint
                .connect_with(config, opts.to, &opts.server_name)
                .map_err(|e| anyhow!("cannot connect: {e}"))?;
            let conn = match tokio::time::timeout(plan.connect_timeout, connecting).await {
                Err(_) => bail!(
                    "no answer from the server within {} s",
                    plan.connect_timeout.as_secs_f64()
                ),
                Ok(Err(e)) => bail!("the handshake failed: {e}"),
                Ok(Ok(conn)) => conn,
            };
            let mut report = ClientReport {
                handshake_us: started.elapsed().as_secs_f64() * 1e6,
                ..ClientReport::default()
            };
            if let Some((bytes, idle)) = plan.warmup {
                request(&conn, bytes, 0, false).await?;
                tokio::time::sleep(idle).await;
            }
            let mut verified = true;
            let first = Instant::now();
            for k in 0..plan.requests {
                if let Some(interval) = plan.interval {
                    tokio::time::sleep_until((first + interval * k as u32).into()).await;
                }
                let start = Instant::now();
                verified &= request(&conn, plan.download, plan.upload, plan.verify).await?;
                report
                    .latencies_us
                    .push(start.elapsed().as_secs_f64() * 1e6);
                report.requests += 1;
                report.download_bytes += plan.download;
                report.upload_bytes += plan.upload;
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
            let side = measured.side(stats.udp_tx.datagrams, stats.udp_tx.ios);
            Ok((report, side))
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
        let pattern = Pattern::default();
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
        fn a_deadline_is_counted_once_when_a_clock_read_finds_it_passed() {
            let mut t = Timers::default();
            let base = Instant::now();
            let ms = Duration::from_millis;
            t.arm(0, base + ms(1));
            t.arm(1, base + ms(5));
            // Re-arming a timer moves its deadline; it stays one timer.
            t.arm(1, base + ms(3));
            t.observe(base);
            assert_eq!(t.expiries, 0);
            t.observe(base + ms(2));
            assert_eq!(t.expiries, 1);
            assert_eq!(t.lateness.len(), 1);
            let late = t.lateness.max();
            assert!((999_000..=1_001_000).contains(&late), "{late} ns");
            t.observe(base + ms(2));
            assert_eq!(t.expiries, 1, "counted twice");
            t.observe(base + ms(4));
            assert_eq!(t.expiries, 2);
            assert!(t.armed.is_empty());
        }

        #[test]
        fn the_measured_runtime_records_a_real_timers_lateness_and_forgets_dropped_ones() {
            let rt = runtime().unwrap();
            let measured = MeasuredRuntime::default();
            rt.block_on(async {
                let deadline = measured.now() + Duration::from_millis(2);
                let mut timer = measured.new_timer(deadline);
                std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
                // quinn notices the expiry when it next reads the clock.
                let now = measured.now();
                assert!(now >= deadline);
                // A timer dropped before its deadline never counts.
                let dropped = measured.new_timer(now + Duration::from_millis(1));
                drop(dropped);
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _ = measured.now();
            });
            let t = measured.timers.lock().unwrap();
            assert_eq!(t.expiries, 1);
            // tokio rounds a deadline up to its next millisecond tick: late, but not by much.
            let late = t.lateness.max();
            assert!(late < 1_000_000_000, "{late} ns");
            assert!(t.armed.is_empty(), "{:?}", t.armed);
        }
    }
}

/// Parses a byte count: `1000`, `64k`, `10M`, `1G` (powers of 1000), `64KiB`, `1MiB`
/// (powers of 1024); a trailing `B` is allowed.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix('B')
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(t);
    let (number, scale) = if let Some(n) = t.strip_suffix("Ki") {
        (n, 1u64 << 10)
    } else if let Some(n) = t.strip_suffix("Mi") {
        (n, 1 << 20)
    } else if let Some(n) = t.strip_suffix("Gi") {
        (n, 1 << 30)
    } else if let Some(n) = t.strip_suffix(['k', 'K']) {
        (n, 1_000)
    } else if let Some(n) = t.strip_suffix('M') {
        (n, 1_000_000)
    } else if let Some(n) = t.strip_suffix('G') {
        (n, 1_000_000_000)
    } else {
        (t, 1)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count (write 1000, 64k, 10M or 1MiB)"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("{text:?}: a byte count must be a positive number"));
    }
    let bytes = value * scale as f64;
    if bytes > 1e15 {
        return Err(format!("{text:?} is more than a petabyte"));
    }
    Ok(bytes as u64)
}

/// One line about a server run.
pub fn server_summary(run: &ServerRun) -> String {
    let count = |n: Option<u64>| n.map_or_else(|| "unavailable".to_string(), |n| n.to_string());
    format!(
        "{}: {} connections, {} requests, {} bytes sent, {} received, {:.0} ns CPU per MB; \
         packets sent {}, lost {}",
        run.stack.name(),
        run.served.connections,
        run.served.requests,
        run.served.bytes_sent,
        run.served.bytes_received,
        run.cpu_ns_per_mb,
        count(run.served.sent_packets),
        count(run.served.lost_packets),
    )
}

/// A few lines about a client run.
pub fn client_summary(run: &ClientRun) -> String {
    let r = &run.report;
    let mut out = format!(
        "{}: {} requests, {} bytes in {:.3} s: {:.2} Mbit/s goodput; handshake {:.0} µs\n\
         latency p50 {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs; RTT {:.0} µs, cwnd {} B\n\
         packets sent {}, lost {}, congestion events {}; CPU {:.0} ns per MB; data {}\n",
        run.stack.name(),
        r.requests,
        r.download_bytes,
        r.elapsed_s,
        r.goodput_bps / 1e6,
        r.handshake_us,
        r.p50_us,
        r.p99_us,
        r.p999_us,
        r.rtt_us,
        r.cwnd,
        r.sent_packets,
        r.lost_packets,
        r.congestion_events,
        run.cpu_ns_per_mb,
        match r.verified {
            Some(true) => "verified",
            Some(false) => "MISMATCH",
            None => "not checked",
        }
    );
    if let Some(d) = &run.driver {
        out += &format!(
            "timers: {} handled, late p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs\n",
            d.timeouts, d.timer_late_p50_us, d.timer_late_p99_us, d.timer_late_max_us
        );
    }
    out
}
