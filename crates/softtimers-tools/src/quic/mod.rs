//! `softtimers quic server|client`: the QUIC performance protocol on every stack the lab
//! compares.
//!
//! * `soft`: quinn-proto on the soft-timer driver of `softtimer-quic`, quinn's own pacer;
//! * `soft-paced`: the same with per-packet pacing through the departure-time scheduler;
//! * `soft-1ms`: the same loop with every quinn timer rounded up to 1 ms, as tokio's wheel
//!   rounds, to separate timer precision from everything else the runtimes differ in;
//! * `quinn-tokio`: stock quinn 0.11 on a current-thread tokio runtime, written as quinn's
//!   own examples and its `perf` tool write it (an accept loop, a task per connection and per
//!   stream, one shared response buffer), with the lab's transport settings and quinn's
//!   timers measured;
//! * `quinn-plain`: the same stock quinn with quinn's defaults and nothing measured (the
//!   server a user of quinn writes; the anchor of the loopback median);
//! * `kernel-tcp`: the kernel's TCP (CUBIC) with plain blocking sockets, `TCP_NODELAY`, each
//!   request framed as `[download u64][upload u64][upload bytes]` on one connection; the
//!   server serves each connection on a thread of its own.
//!
//! Every QUIC stack but `quinn-plain` uses the same TLS set-up, congestion controller,
//! flow-control windows, MTU settings and socket buffers ([`softtimer_quic::tls::Tuning`]),
//! and every stack the same response pattern, so that a client checks every byte whichever
//! server it talks to.

mod args;
mod stock_quinn;
mod tcp;

pub use args::{ClientArgs, QuicCommand, ServerArgs};

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use softtimer_quic::idle::{AfterIdle, AfterIdleFactory};
use softtimer_quic::perf::{
    ClientPlan, ClientReport, Pattern, PerfClient, PerfServer, ServerReport, pattern_byte,
};
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
use softtimer_quic::{DriverConfig, Pacing, QuicLoop, TransmitCauses};
use softtimer_rt::{IoBackend, LoopConfig, SpinWindow};

use crate::cpu::process_cpu_ns;
use crate::output::{Report, announce_port};
use crate::parse::{parse_bytes, parse_duration, parse_spin_window};
use tcp::{tcp_client, tcp_server};

/// A stack of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
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
    /// Stock quinn on tokio, the lab's transport settings, its timers measured.
    QuinnTokio,
    /// Stock quinn on tokio with quinn's defaults, nothing measured.
    QuinnPlain,
    /// Stock quinn, unchanged, on `softtimer-async` (quinn's timers as soft events), the lab's
    /// transport settings, its timers measured.
    QuinnAsync,
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
            Stack::QuinnPlain => "quinn-plain",
            Stack::QuinnAsync => "quinn-async",
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AfterIdleArg {
    /// quinn's CUBIC as it is.
    Keep,
    /// Slow-start restart after idle.
    SlowStart,
    /// Rate-based clocking after idle.
    RateBased,
}

/// Settings shared by server and client, and the options both QUIC commands take.
#[derive(clap::Args, Clone, Debug)]
pub struct Common {
    /// The stack: quinn-proto on soft timers (`soft`, `soft-paced` with per-packet pacing,
    /// `soft-1ms` with timers rounded up to 1 ms), stock quinn on tokio (`quinn-tokio` with
    /// the lab's transport settings and its timers measured, `quinn-plain` with quinn's
    /// defaults), the same unchanged quinn on `softtimer-async` (`quinn-async`: the settings
    /// and measurement of `quinn-tokio`), or kernel TCP.
    #[arg(long, value_enum, default_value = "soft")]
    pub stack: Stack,
    /// Flow-control windows (bytes; k, M suffixes): at least twice the path's BDP.
    #[arg(long, default_value = "16M", value_parser = parse_bytes)]
    pub window: u64,
    /// What the congestion controller (CUBIC) does after an idle period.
    #[arg(long, value_enum, default_value = "keep")]
    pub after_idle: AfterIdleArg,
    /// Ask the peer to acknowledge only every N ack-eliciting packets (ACK frequency).
    #[arg(long, value_name = "N")]
    pub ack_every: Option<u32>,
    /// The largest ACK delay to ask the peer for (ACK frequency; alone or with --ack-every).
    #[arg(long, value_parser = parse_duration)]
    pub max_ack_delay: Option<Duration>,
    /// How long the soft-timer loop spins before a due event instead of sleeping through
    /// it (the soft stacks): a duration up to 1s, or `calibrated` (this machine's typical
    /// wake-up lateness; the default). `0` never spins: cheaper, and events run a wake-up
    /// late.
    #[arg(long, value_parser = parse_spin_window)]
    pub spin: Option<SpinWindow>,
    /// How the soft stacks' loop does its I/O: `epoll` (quinn-udp's `sendmsg`/`recvmmsg`,
    /// as stock quinn), `uring` (the same datagrams queued in an io_uring and submitted with
    /// the loop's next wait, received by a multishot `recvmsg`) or `uring-sqpoll` (a kernel
    /// thread polls the ring: fewer system calls, but it costs a core).
    #[arg(long, default_value = "epoll")]
    pub io: IoBackend,
    /// With `--stack soft-paced`: datagrams that leave together (one GSO send) at each
    /// departure time. 1 spaces every datagram; 2 halves the system calls and wake-ups.
    #[arg(long, default_value_t = 1)]
    pub per_departure: usize,
    /// The soft-timer driver's tail-loss probe (the soft stacks; on unless
    /// `--no-tail-probe`): a PING two smoothed RTTs, and an allowance learned from the
    /// peer's late ACKs, after the last data or ACK while data is unacknowledged, which finds
    /// a lost last packet in about an RTT instead of quinn's probe timeout of 25 ms and more.
    #[arg(
        long = "no-tail-probe",
        action = clap::ArgAction::SetFalse,
        help = "Turn off the soft-timer driver's tail-loss probe (a PING two smoothed RTTs, and an allowance learned from the peer's late ACKs, after the last data or ACK while data is unacknowledged, which finds a lost last packet in about an RTT instead of quinn's probe timeout of 25 ms and more)",
        long_help = None
    )]
    pub tail_probe: bool,
    /// Run path MTU discovery, as quinn does by default (the QUIC stacks but quinn-plain,
    /// which always does; off: every datagram is 1200 bytes, as in the lab's path runs).
    #[arg(long)]
    pub mtu_discovery: bool,
    /// Close a connection after this long without a packet from the peer (the QUIC stacks;
    /// the smaller of the two sides' values applies). A server whose client's close was lost
    /// exits after this long. Default: 30 s.
    #[arg(long, value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
}

impl Common {
    /// The soft-timer stacks' loop and driver on `socket`, serving if given a server
    /// config (validating addresses by Retry if `retry`), and the loop's spin window:
    /// resolved here, once, given to the loop and reported as it was given.
    fn quic_loop(
        &self,
        socket: UdpSocket,
        server: Option<quinn::ServerConfig>,
        retry: bool,
    ) -> Result<(QuicLoop, Duration)> {
        let spin_window = self.spin.unwrap_or(SpinWindow::Calibrated).resolve();
        let loop_config = LoopConfig {
            spin_window: SpinWindow::Fixed(spin_window),
            io_backend: self.io,
            ..LoopConfig::default()
        };
        let driver = DriverConfig {
            validate_addresses: retry,
            ..self
                .stack
                .driver_config(self.per_departure, self.tail_probe)
        };
        let quic = QuicLoop::new(loop_config, socket, driver, server)?;
        Ok((quic, spin_window))
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
        if self.stack == Stack::QuinnPlain {
            let tuned = [
                (self.window != DEFAULT_WINDOW, "--window"),
                (self.after_idle != AfterIdleArg::Keep, "--after-idle"),
                (self.ack_every.is_some(), "--ack-every"),
                (self.max_ack_delay.is_some(), "--max-ack-delay"),
                (self.idle_timeout.is_some(), "--idle-timeout"),
                (self.mtu_discovery, "--mtu-discovery"),
            ];
            if let Some((_, flag)) = tuned.iter().find(|(set, _)| *set) {
                bail!(
                    "{flag} does not apply to quinn-plain (stock quinn with quinn's default \
                     transport settings; quinn-tokio takes them)"
                );
            }
        }
        let stock_or_tcp = matches!(
            self.stack,
            Stack::QuinnTokio | Stack::QuinnPlain | Stack::QuinnAsync | Stack::KernelTcp
        );
        if self.spin.is_some() && stock_or_tcp {
            bail!("--spin applies to the soft-timer stacks only (soft, soft-paced, soft-1ms)");
        }
        if self.io != IoBackend::Epoll && stock_or_tcp {
            bail!("--io applies to the soft-timer stacks only (soft, soft-paced, soft-1ms)");
        }
        if !self.tail_probe && stock_or_tcp {
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
        if self.mtu_discovery && self.stack == Stack::KernelTcp {
            bail!("--mtu-discovery applies to the QUIC stacks only");
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
            mtu_discovery: self.mtu_discovery,
            ..Tuning::default()
        })
    }
}

/// `--window`'s default, bytes.
pub const DEFAULT_WINDOW: u64 = 16_000_000;

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
    /// Exit after this many connections have closed and no other is open (on the soft
    /// stacks, none in its handshake either; stock quinn: accept this many, and exit once
    /// they have closed).
    pub connections: Option<u64>,
    /// Write the self-signed certificate (DER) here, for a client's `--cert`.
    pub cert_out: Option<PathBuf>,
    /// Validate each client's address with a Retry before its handshake (QUIC only).
    pub retry: bool,
}

/// What a server run reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    /// Retry packets sent to validate clients' addresses (`--retry`; `null` without it and
    /// in older reports).
    #[serde(default)]
    pub retries: Option<u64>,
}

/// What a QUIC runtime saw on one side: its sends and quinn's timers.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DriverSide {
    /// Datagrams sent (`null` where the runtime does not count them).
    pub datagrams_sent: Option<u64>,
    /// `sendmsg` calls (`null` likewise).
    pub send_calls: Option<u64>,
    /// quinn deadlines the runtime saw pass: the soft-timer driver counts each timeout it
    /// handles; for stock quinn, each deadline quinn armed that its clock reads found passed
    /// (one whose expiry a packet's processing superseded counts too, at that moment).
    pub timeouts: u64,
    /// Timer lateness past what quinn asked for, µs: p50, p99, max (`null` where nothing
    /// was measured: `quinn-plain`, or no timer handled).
    #[serde(deserialize_with = "crate::json::num")]
    pub timer_late_p50_us: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "crate::json::num")]
    pub timer_late_p99_us: f64,
    /// Largest.
    #[serde(deserialize_with = "crate::json::num")]
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
    /// The soft-timer loop's I/O backend as it ran (`epoll`, `uring`, `uring-sqpoll`;
    /// `null` for stock quinn and in older reports).
    #[serde(default)]
    pub io: Option<String>,
    /// Tail-loss probes the soft-timer driver sent (`null` for stock quinn).
    pub tail_probes: Option<u64>,
    /// Of those, the probes after which quinn declared a loss before sending data again.
    pub tail_probes_finding_loss: Option<u64>,
    /// Time the loop spent spinning before due events, ms, by the loop's clock (CPU time
    /// unless the host took the CPU away meanwhile; `null` for stock quinn).
    pub idle_spin_ms: Option<f64>,
}

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

/// What the soft-timer driver on `quic` saw, with the spin window its loop was given.
fn driver_side(quic: &mut QuicLoop, spin_window: Duration) -> DriverSide {
    let counters = quic.event_loop().counters();
    let backend = quic.event_loop_mut().cx().io_backend().to_string();
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
        spin_window_us: Some(spin_window.as_secs_f64() * 1e6),
        io: Some(backend),
        idle_spin_ms: Some(counters.idle_spin_ns as f64 / 1e6),
    }
}

/// Runs a server until `connections` have closed (or forever).
pub fn server(opts: &ServerOptions) -> Result<ServerRun> {
    let tuning = opts.common.tuning()?;
    if opts.retry && opts.common.stack == Stack::KernelTcp {
        bail!("--retry validates QUIC clients' addresses: not for --stack kernel-tcp");
    }
    let identity = Identity::self_signed(&["localhost"])?;
    if let Some(path) = &opts.cert_out {
        std::fs::write(path, identity.cert.as_ref())
            .with_context(|| format!("writing the certificate to {}", path.display()))?;
    }
    let (served, driver, cpu_ns) = on_stack(
        opts.common.stack,
        || {
            let socket = UdpSocket::bind(opts.listen)
                .with_context(|| format!("cannot listen on {}", opts.listen))?;
            announce_port("quic server", opts.listen, socket.local_addr());
            let config = server_config(&identity, &tuning)?;
            let (mut quic, spin_window) =
                opts.common.quic_loop(socket, Some(config), opts.retry)?;
            // Ctrl-C closes every connection (the clients hear of it at once) and stops.
            let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let mut app = PerfServer::new(opts.connections).close_on(Arc::clone(&closing));
            let waker = quic.event_loop().waker();
            let _interrupt = crate::interrupt::stop_on_interrupt(move || {
                closing.store(true, std::sync::atomic::Ordering::Release);
                waker.wake();
            });
            quic.run(&mut app)?;
            let retries = quic.driver().stats().retries;
            Ok(((app.report, retries), driver_side(&mut quic, spin_window)))
        },
        |arm, engine| stock_quinn::server(opts, &identity, &tuning, arm, engine),
        || Ok((tcp_server(opts)?, 0)),
    )?;
    let (served, retries) = served;
    Ok(ServerRun {
        stack: opts.common.stack,
        cpu_ns_per_mb: per_mb(cpu_ns, served.bytes_sent + served.bytes_received),
        served,
        cpu_ns,
        driver,
        retries: opts.retry.then_some(retries),
    })
}

/// Runs one side on `stack`, counting the process's CPU time meanwhile: the soft-timer
/// stacks through `soft` (its app on a QUIC loop), stock quinn's arms through `stock`, the
/// kernel's TCP through `tcp`. What the side reported, its QUIC runtime's figures (none for
/// TCP) and the CPU time, ns.
fn on_stack<R>(
    stack: Stack,
    soft: impl FnOnce() -> Result<(R, DriverSide)>,
    stock: impl FnOnce(stock_quinn::Arm, stock_quinn::Engine) -> Result<(R, DriverSide)>,
    tcp: impl FnOnce() -> Result<R>,
) -> Result<(R, Option<DriverSide>, u64)> {
    use stock_quinn::{Arm, Engine};
    let cpu0 = process_cpu_ns();
    let quic = |(report, side): (R, DriverSide)| (report, Some(side));
    let (report, driver) = match stack {
        Stack::Soft | Stack::SoftPaced | Stack::Soft1ms => quic(soft()?),
        Stack::QuinnTokio => quic(stock(Arm::Measured, Engine::Tokio)?),
        Stack::QuinnPlain => quic(stock(Arm::Plain, Engine::Tokio)?),
        Stack::QuinnAsync => quic(stock(Arm::Measured, Engine::Soft)?),
        Stack::KernelTcp => (tcp()?, None),
    };
    Ok((report, driver, process_cpu_ns() - cpu0))
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
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    let (report, driver, cpu_ns) = on_stack(
        opts.common.stack,
        || {
            let bind: SocketAddr = if opts.to.is_ipv6() {
                "[::]:0".parse()?
            } else {
                "0.0.0.0:0".parse()?
            };
            let socket = UdpSocket::bind(bind).context("binding the client socket")?;
            let (mut quic, spin_window) = opts.common.quic_loop(socket, None, false)?;
            let config = client_config(&trust, &tuning)?;
            let started = quic.driver().now();
            let conn = quic.driver().connect(config, opts.to, &opts.server_name)?;
            let mut app = PerfClient::new(opts.plan.clone(), conn, started);
            quic.run(&mut app)?;
            Ok((app.report, driver_side(&mut quic, spin_window)))
        },
        |arm, engine| stock_quinn::client(opts, &trust, &tuning, arm, engine),
        || tcp_client(opts),
    )?;
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

/// Counts one request of `plan`, started at `start`, done now (the kernel-TCP and stock-quinn
/// clients; the soft-timer client's `PerfClient` counts its own).
fn count_request(report: &mut ClientReport, plan: &ClientPlan, start: Instant) {
    report
        .latencies_us
        .push(start.elapsed().as_secs_f64() * 1e6);
    report.requests += 1;
    report.download_bytes += plan.download;
    report.upload_bytes += plan.upload;
}

fn check(data: &[u8], offset: u64) -> bool {
    data.iter()
        .enumerate()
        .all(|(i, &b)| b == pattern_byte(offset + i as u64))
}

impl Report for ServerRun {
    fn text(&self) -> String {
        let run = self;
        let count = |n: Option<u64>| n.map_or_else(|| "unavailable".to_string(), |n| n.to_string());
        let retries = run
            .retries
            .map_or_else(String::new, |n| format!("; {n} Retry packets sent"));
        format!(
            "{}: {} connections, {} requests, {} bytes sent, {} received, {:.0} ns CPU per MB; \
             packets sent {}, lost {}{retries}\n",
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
}

impl Report for ClientRun {
    fn text(&self) -> String {
        let run = self;
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
}
