//! What every lab experiment runs on.
//!
//! * [`run`]: one server (HTTP or UDP RPC) on an event loop pinned to the last CPU, its load
//!   generator pinned to CPU 0, and a timer source firing events with a chosen handler on the
//!   server's loop ([`Setup`] in, [`Outcome`] out);
//! * [`interleaved`]: configurations run round by round, so that slow drift on a shared
//!   machine falls on all of them alike; compare them with
//!   [`median_ratio`](crate::summary::median_ratio);
//! * [`RunLength`]: how long each kind of run lasts in quick and full mode (the one place);
//! * pinning ([`Pinned`], [`pin_to`], [`pin_to_last_cpu`], [`pin_process`]) and [`cpus`];
//! * progress bars ([`with_progress`], [`progress_bar`]) and JSON files ([`write_json`],
//!   [`read_json`]).
//!
//! The calls into `softtimer` and `softtimer-rt` that the experiments make are here, in
//! [`run`], [`TimerSource::new_loop`] and [`make_handler`].

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use softtimer::{Fired, SoftTimers, Span, TriggerSource, TriggerStats};
use softtimer_rt::{DeadlineDesign, EventLoop, HelperCpu, LoopConfig, TimerMode};

use crate::http::{HttpServer, run_load};
use crate::rpc::{RpcServer, run_rpc_load};
use crate::tools;

// ---------------------------------------------------------------------------------------
// Run lengths

/// How long runs last: a quick run (a few seconds per step, as CI does) or the full one.
/// Every duration and repetition count of the lab and the benchmarks is here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLength {
    /// Short runs.
    pub quick: bool,
}

impl RunLength {
    /// Quick or full.
    pub fn new(quick: bool) -> Self {
        RunLength { quick }
    }
    fn pick<T>(self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }
    /// `quick` or `full`.
    pub fn mode(self) -> &'static str {
        self.pick("quick", "full")
    }
    /// One run of a throughput comparison (E1, E2, E6, E7, E9, E13, nginx). Runs are kept
    /// short: the host's drift between rounds, not a run's length, limits a ratio, and
    /// the ratios are paired within rounds. (`--client wrk` takes whole seconds: 1 s.)
    pub fn throughput_run(self) -> Duration {
        Duration::from_millis(self.pick(400, 1_250))
    }
    /// Interleaved rounds of a throughput comparison.
    pub fn rounds(self) -> usize {
        self.pick(1, 5)
    }
    /// One run that records trigger states (E3, and E5 on its own).
    pub fn trace_run(self) -> Duration {
        Duration::from_millis(self.pick(500, 6_000))
    }
    /// Trigger states recorded in a [`trace_run`](Self::trace_run).
    pub fn trace_capacity(self) -> usize {
        self.pick(200_000, 2_000_000)
    }
    /// E4's run, whose trace is cut into windows.
    pub fn timeline(self) -> Duration {
        Duration::from_secs(self.pick(1, 10))
    }
    /// Rounds of `bench timers`.
    pub fn timers_rounds(self) -> usize {
        self.pick(3, 13)
    }
    /// How long `bench timers` computes without system calls to measure the backstop.
    pub fn backstop_compute(self) -> Duration {
        Duration::from_millis(self.pick(300, 2_000))
    }
    /// How long each backstop wake-up state and idle-policy row of `bench timers` runs.
    pub fn state_time(self) -> Duration {
        Duration::from_millis(self.pick(300, 2_000))
    }
    /// Samples per operation in `bench core`.
    pub fn core_reps(self) -> usize {
        self.pick(15, 151)
    }
    /// Trigger checks per sample in `bench core`.
    pub fn core_trigger_batch(self) -> usize {
        self.pick(2_000, 20_000)
    }
}

// ---------------------------------------------------------------------------------------
// Pinning and CPU time

/// CPU time the calling thread has used, ns.
pub fn thread_cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time (user + system) of the whole process, all its threads, ns.
pub fn process_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// CPU time (user + system) of every child this process has waited for, ns: what
/// `getrusage(RUSAGE_CHILDREN)` reports. Read before and after waiting for one child, the
/// difference is that child's whole CPU time, all its threads included.
pub fn waited_children_cpu_ns() -> u64 {
    // SAFETY: an all-zero `rusage` is a valid value; `getrusage` only writes into it.
    #[allow(unsafe_code)]
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// The calling thread pinned to one CPU until this is dropped, when its previous affinity
/// comes back (so that a benchmark does not leave the rest of the process on one CPU).
pub struct Pinned {
    /// The CPU, or `None` if the kernel refused.
    pub cpu: Option<usize>,
    previous: Option<rustix::thread::CpuSet>,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(set) = &self.previous {
            let _ = rustix::thread::sched_setaffinity(None, set);
        }
    }
}

fn one_cpu(cpu: usize) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    set
}

/// Pins the calling thread to `cpu` until the returned guard is dropped.
pub fn pin_to(cpu: usize) -> Pinned {
    let previous = rustix::thread::sched_getaffinity(None).ok();
    let cpu = rustix::thread::sched_setaffinity(None, &one_cpu(cpu))
        .ok()
        .map(|()| cpu);
    Pinned { cpu, previous }
}

/// Pins the calling thread to the last CPU it may run on (the first is busiest with
/// interrupts on small VMs) until the returned guard is dropped.
pub fn pin_to_last_cpu() -> Pinned {
    let allowed = rustix::thread::sched_getaffinity(None).ok();
    let last = allowed.as_ref().and_then(|set| {
        (0..rustix::thread::CpuSet::MAX_CPU)
            .rev()
            .find(|&c| set.is_set(c))
    });
    match last {
        Some(cpu) => pin_to(cpu),
        None => Pinned {
            cpu: None,
            previous: allowed,
        },
    }
}

/// Pins another process (a child: wrk, nginx) to `cpu`; false if the kernel refused.
pub fn pin_process(pid: u32, cpu: usize) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|pid| rustix::thread::sched_setaffinity(Some(pid), &one_cpu(cpu)).is_ok())
}

/// CPUs online (not this thread's affinity, which a benchmark may have narrowed).
pub fn cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .filter_map(|r| r.split('-').next_back()?.parse::<usize>().ok())
                .max()
        })
        .map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |m| m + 1,
        )
}

/// The CPU the server under test runs on: the last one.
pub fn server_cpu() -> usize {
    cpus().saturating_sub(1)
}

/// The CPU load generators run on.
pub const CLIENT_CPU: usize = 0;

// ---------------------------------------------------------------------------------------
// Progress and files

/// A progress bar labelled `label` on stderr (hidden when stderr is not a terminal).
pub fn progress_bar(label: &str) -> ProgressBar {
    let bar = ProgressBar::new(1000);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {percent:>3}% {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Runs `work` with a progress bar labelled `label`: `work` reports the fraction done and
/// what it is doing; the bar is cleared after.
pub fn with_progress<T>(label: &str, work: impl FnOnce(&mut dyn FnMut(f64, &str)) -> T) -> T {
    let bar = progress_bar(label);
    let result = work(&mut |fraction, message| {
        bar.set_position((fraction.clamp(0.0, 1.0) * 1000.0) as u64);
        bar.set_message(message.to_string());
    });
    bar.finish_and_clear();
    result
}

/// "1 min 05 s", "12 s": a duration for people.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s / 60 % 60),
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a JSON file written by [`write_json`].
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
}

// ---------------------------------------------------------------------------------------
// Interleaved rounds

/// Runs `measure` on every configuration once per round, in order, for `rounds` rounds;
/// returns the measurements per configuration, round by round. `label` names a
/// configuration in the progress line.
pub fn interleaved<C, M>(
    rounds: usize,
    configs: &[C],
    progress: &mut dyn FnMut(f64, &str),
    label: impl Fn(&C) -> String,
    mut measure: impl FnMut(&C) -> Result<M>,
) -> Result<Vec<Vec<M>>> {
    let mut out: Vec<Vec<M>> = configs.iter().map(|_| Vec::with_capacity(rounds)).collect();
    let total = (rounds * configs.len()).max(1) as f64;
    for round in 0..rounds {
        for (i, c) in configs.iter().enumerate() {
            progress(
                (round * configs.len() + i) as f64 / total,
                &format!("round {}/{rounds}: {}", round + 1, label(c)),
            );
            out[i].push(measure(c)?);
        }
    }
    progress(1.0, "done");
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// What a server run is made of

/// The server workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Workload {
    /// HTTP with keep-alive: the event-driven (Flash-like) server, saturated.
    #[serde(rename = "http-keepalive")]
    HttpKeepAlive,
    /// HTTP without keep-alive: a connection per request, as the paper's clients did.
    #[serde(rename = "http-close")]
    HttpClose,
    /// HTTP with keep-alive and a compute-bound thread on the server's CPU
    /// (ST-Apache-compute).
    #[serde(rename = "http-compute")]
    HttpCompute,
    /// Small UDP RPCs (NFS-like).
    #[serde(rename = "udp-rpc")]
    Rpc,
}

impl Workload {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Workload::HttpKeepAlive => "http-keepalive",
            Workload::HttpClose => "http-close",
            Workload::HttpCompute => "http-compute",
            Workload::Rpc => "udp-rpc",
        }
    }
    fn keep_alive(self) -> bool {
        self != Workload::HttpClose
    }
}

/// Which load generator drives the HTTP workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Client {
    /// The project's own S-client-style generator (no installation needed).
    #[default]
    Own,
    /// `wrk`, as a cross-check of the same server (must be installed).
    Wrk,
}

/// What fires events on a loop: nothing (the reference), soft timers, or one of the
/// hardware-timer baselines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimerSource {
    /// No events and no timer machinery at all ([`TimerMode::Off`]): the reference.
    None,
    /// The soft-timer machinery (trigger checks, backstop) with nothing scheduled: what the
    /// machinery costs by itself.
    #[serde(rename = "soft-no-events")]
    BackstopOnly,
    /// Soft timers (interval 0: an event at every trigger state).
    Soft,
    /// A periodic `timerfd`, read when the loop returns to `epoll_wait`.
    Timerfd,
    /// A POSIX timer signal that interrupts the loop thread.
    Signal,
}

impl TimerSource {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            TimerSource::None => "none",
            TimerSource::BackstopOnly => "soft-no-events",
            TimerSource::Soft => "soft",
            TimerSource::Timerfd => "timerfd",
            TimerSource::Signal => "signal",
        }
    }

    /// Whether this is a hardware-timer baseline (`timerfd` or `signal`).
    pub fn is_hardware(self) -> bool {
        matches!(self, TimerSource::Timerfd | TimerSource::Signal)
    }

    /// Whether this source schedules events.
    pub fn has_events(self) -> bool {
        !matches!(self, TimerSource::None | TimerSource::BackstopOnly)
    }

    /// An event loop for this source firing every `period` (hardware sources), with
    /// `config`'s other settings and `handler`.
    ///
    /// # Safety
    ///
    /// For [`TimerSource::Signal`] the handler runs in signal context: it must be
    /// async-signal-safe (no allocation, no lock, no panic path).
    #[allow(unsafe_code)]
    pub unsafe fn new_loop<H>(
        self,
        config: LoopConfig,
        period: Duration,
        handler: H,
    ) -> Result<EventLoop<()>>
    where
        H: Fn(&mut SoftTimers<()>, Fired<()>) + Send + Sync + 'static,
    {
        let mode = match self {
            TimerSource::None => TimerMode::Off,
            TimerSource::BackstopOnly | TimerSource::Soft | TimerSource::Signal => TimerMode::Soft,
            TimerSource::Timerfd => TimerMode::timerfd(period)?,
        };
        let config = LoopConfig { mode, ..config };
        Ok(if self == TimerSource::Signal {
            // SAFETY: the caller guarantees the handler is async-signal-safe.
            #[allow(unsafe_code)]
            unsafe {
                EventLoop::with_timer_signal(config, period, handler)?
            }
        } else {
            EventLoop::new(config, handler)?
        })
    }
}

/// "every trigger state", "10 µs", or "—" (no events): an interval in a table.
pub fn interval_label(source: TimerSource, interval_us: u64) -> String {
    match (source, interval_us) {
        (TimerSource::None | TimerSource::BackstopOnly, _) => "—".to_string(),
        (_, 0) => "every trigger state".to_string(),
        (_, us) => format!("{us} µs"),
    }
}

/// The event handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HandlerKind {
    /// Does nothing but re-arm.
    Null,
    /// Touches 50 cache lines, a different set each call, cycling over 4 pages (Section
    /// 5.1's synthetic handler), then re-arms.
    Synthetic,
}

/// One server run.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The workload.
    pub workload: Workload,
    /// The timer source.
    pub source: TimerSource,
    /// Event interval, µs (soft only: 0 fires at every trigger state).
    pub interval_us: u64,
    /// The handler.
    pub handler: HandlerKind,
    /// A deadline this many µs past each event's due time (soft events only).
    pub deadline_us: Option<u64>,
    /// What enforces the deadlines.
    pub deadline_design: DeadlineDesign,
    /// Keep trigger statistics.
    pub stats: bool,
    /// Record this many trigger states.
    pub trace: usize,
    /// How long the load runs.
    pub duration: Duration,
    /// The HTTP load generator.
    pub client: Client,
    /// A UDP flow the server's loop sends while it serves (rate-based clocking).
    pub pace: Option<PaceLoad>,
    /// Serve by soft-timer polling with this aggregation quota (HTTP workloads; the loop's
    /// soft events are then the polls, and `source` must be [`TimerSource::Soft`]).
    pub poll_quota: Option<u32>,
}

/// A UDP flow the server's event handler sends while the server serves (E6, E7): one
/// datagram of `size` bytes per event, to a receiver on the load generator's CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaceLoad {
    /// How the datagrams are clocked.
    pub clocking: Clocking,
    /// The target interval between datagrams, µs.
    pub target_interval_us: u64,
    /// UDP payload bytes.
    pub size: usize,
}

/// How a [`PaceLoad`] is clocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Clocking {
    /// The adaptive pacer on soft timers: the next datagram at the target interval, or at
    /// `min_interval_us` while the flow is behind its target rate.
    Adaptive {
        /// The shortest interval allowed (the burst rate), µs.
        min_interval_us: u64,
    },
    /// One datagram per expiry of the setup's hardware timer, at the target interval (the
    /// expiries a late wake-up missed included, up to 64).
    PerExpiry,
    /// No pacing: the datagrams the target rate makes due, sent back to back every 1 ms (as
    /// a window is sent without rate-based clocking).
    Bursts,
}

/// What a paced flow's sends measured.
#[derive(Default)]
struct PaceCounters {
    sent: AtomicU64,
    first_ticks: AtomicU64,
    last_ticks: AtomicU64,
    /// The sum of squared gaps in µs², as `f64` bits (one writer: the handler, which the
    /// facility runs one at a time).
    gap_sum_sq_us2_bits: AtomicU64,
}

/// The paced flow's state, reached from the event handler (which may run in signal
/// context: sends are single system calls, the counters are atomics, and the pacer's lock
/// is taken only by the soft handler, never in a signal handler).
struct PaceSender {
    socket: std::net::UdpSocket,
    packet: Vec<u8>,
    load: PaceLoad,
    pacer: std::sync::Mutex<softtimer_net::pacer::FlowPacer>,
    interval: Span,
    start: AtomicU64,
    counters: PaceCounters,
    hz: u64,
}

impl PaceSender {
    fn new(load: PaceLoad, to: SocketAddr, hz: u64) -> Result<Self> {
        use softtimer_net::{Rate, pacer};
        let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
        socket.connect(to)?;
        let bytes = load.size as u64;
        let target = Rate::from_packet_interval(bytes, load.target_interval_us * 1000)?;
        let burst = match load.clocking {
            Clocking::Adaptive { min_interval_us } => {
                Rate::from_packet_interval(bytes, min_interval_us.max(1) * 1000)?.max(target)
            }
            _ => target,
        };
        Ok(PaceSender {
            socket,
            packet: vec![0u8; load.size],
            load,
            pacer: std::sync::Mutex::new(pacer::FlowPacer::new(
                pacer::PacerConfig::new(target, burst)?,
                hz,
            )),
            interval: Span::from_micros(load.target_interval_us, hz),
            start: AtomicU64::new(u64::MAX),
            counters: PaceCounters::default(),
            hz,
        })
    }

    /// Sends one datagram at `now`, counting it.
    fn send_one(&self, now: softtimer::Instant) {
        if self.socket.send(&self.packet).is_err() {
            return;
        }
        let c = &self.counters;
        let t = now.ticks();
        if c.sent.fetch_add(1, Ordering::Relaxed) == 0 {
            c.first_ticks.store(t, Ordering::Relaxed);
        } else {
            let gap = t.saturating_sub(c.last_ticks.load(Ordering::Relaxed));
            let gap_us = Span::from_ticks(gap).as_nanos(self.hz) as f64 / 1000.0;
            let sum = f64::from_bits(c.gap_sum_sq_us2_bits.load(Ordering::Relaxed));
            c.gap_sum_sq_us2_bits
                .store((sum + gap_us * gap_us).to_bits(), Ordering::Relaxed);
        }
        c.last_ticks.store(t, Ordering::Relaxed);
    }

    /// The event handler's work: send, then re-arm by the clocking rule.
    fn on_event(&self, timers: &mut SoftTimers<()>, ev: &Fired<()>) {
        let now = ev.now;
        let next = match self.load.clocking {
            Clocking::PerExpiry => {
                // One datagram per expiry, those of expiries the loop saw late included (a
                // timerfd read returns how many expired; the schedule says the same).
                let mut due = ev.due;
                for _ in 0..64 {
                    self.send_one(now);
                    due += self.interval;
                    if due.is_after(now) {
                        break;
                    }
                }
                if !due.is_after(now) {
                    // Still behind after 64: the remaining expiries are dropped, as a
                    // timer's overruns beyond what one read handles are. Re-arming in the
                    // past would fire the event again in the same pass, and a sender slower
                    // than its interval would never leave it.
                    let step = self.interval.ticks().max(1);
                    let missed = now.saturating_since(due).ticks() / step + 1;
                    due += Span::from_ticks(missed * step);
                }
                due
            }
            Clocking::Adaptive { .. } => {
                self.send_one(now);
                match self.pacer.try_lock() {
                    Ok(mut p) => p.on_sent(now, self.load.size as u64),
                    Err(_) => now + self.interval,
                }
            }
            Clocking::Bursts => {
                let start = match self.start.load(Ordering::Relaxed) {
                    u64::MAX => {
                        self.start.store(now.ticks(), Ordering::Relaxed);
                        now.ticks()
                    }
                    s => s,
                };
                let elapsed = now.ticks().saturating_sub(start);
                let due = elapsed / self.interval.ticks().max(1) + 1;
                while self.counters.sent.load(Ordering::Relaxed) < due {
                    let before = self.counters.sent.load(Ordering::Relaxed);
                    self.send_one(now);
                    if self.counters.sent.load(Ordering::Relaxed) == before {
                        break;
                    }
                }
                ev.due + Span::from_micros(1000, self.hz)
            }
        };
        let _ = timers.schedule_at(next, ());
    }
}

/// What a paced flow achieved over a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct PaceOutcome {
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams the receiver got.
    pub received: u64,
    /// Mean interval between sends, µs.
    pub mean_interval_us: f64,
    /// Standard deviation of the intervals, µs.
    pub stddev_interval_us: f64,
}

impl PaceSender {
    fn outcome(&self, received: u64) -> PaceOutcome {
        let c = &self.counters;
        let sent = c.sent.load(Ordering::Relaxed);
        let gaps = sent.saturating_sub(1).max(1) as f64;
        let span = Span::from_ticks(
            c.last_ticks
                .load(Ordering::Relaxed)
                .saturating_sub(c.first_ticks.load(Ordering::Relaxed)),
        );
        let mean_us = span.as_nanos(self.hz) as f64 / 1000.0 / gaps;
        let var = f64::from_bits(c.gap_sum_sq_us2_bits.load(Ordering::Relaxed)) / gaps
            - mean_us * mean_us;
        PaceOutcome {
            sent,
            received,
            mean_interval_us: mean_us,
            stddev_interval_us: var.max(0.0).sqrt(),
        }
    }
}

/// Receives a paced flow on the load generator's CPU, waking every millisecond to take
/// what came in one `recvmmsg` batch, and counts it.
fn drain_udp(
    mut rx: softtimer_net::udp::TimestampedReceiver,
    stop: Arc<AtomicBool>,
) -> Result<u64> {
    let _pin = pin_to(CLIENT_CPU);
    rx.set_timeout(Duration::from_millis(20))?;
    let mut received = 0u64;
    loop {
        let n = rx.recv_batch()? as u64;
        received += n;
        if n == 0 && stop.load(Ordering::Relaxed) {
            return Ok(received);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Setup {
    /// `workload` with no events, no statistics and no trace, for `duration`.
    pub fn plain(workload: Workload, duration: Duration, client: Client) -> Self {
        Setup {
            workload,
            source: TimerSource::None,
            interval_us: 0,
            handler: HandlerKind::Null,
            deadline_us: None,
            deadline_design: DeadlineDesign::default(),
            stats: false,
            trace: 0,
            duration,
            client,
            pace: None,
            poll_quota: None,
        }
    }

    /// This setup with `source` firing every `interval_us` (0: every trigger state).
    pub fn events(self, source: TimerSource, interval_us: u64) -> Self {
        Setup {
            source,
            interval_us,
            ..self
        }
    }
}

/// What one run measured.
pub struct Outcome {
    /// Responses (or RPC replies) per second.
    pub rate: f64,
    /// Events fired per second.
    pub events_per_s: f64,
    /// Events fired by the deadline timer.
    pub fired_by_deadline: u64,
    /// Events fired in all.
    pub fired: u64,
    /// Timer signals that found the facility busy (signal source only).
    pub signal_busy: u64,
    /// CPU time of the loop's helper threads (backstop, deadline watcher).
    pub helpers: HelperCpu,
    /// CPU time of the server's loop thread while it served, ns.
    pub loop_thread_ns: u64,
    /// Time the loop thread spent spinning idle (waiting, not working), ns.
    pub loop_idle_spin_ns: u64,
    /// How long the load ran.
    pub elapsed: Duration,
    /// Trigger statistics, if asked for.
    pub stats: Option<TriggerStats>,
    /// The trigger trace, if asked for.
    pub trace: Vec<(u64, TriggerSource)>,
    /// The measurement clock's frequency.
    pub hz: u64,
    /// The paced flow's figures, if the setup had one.
    pub pace: Option<PaceOutcome>,
    /// What soft-timer polling did, if the server polled.
    pub polling: Option<crate::http::PollCounts>,
}

struct ServerSide {
    fired: u64,
    fired_by_deadline: u64,
    signal_busy: u64,
    helpers: HelperCpu,
    loop_thread_ns: u64,
    loop_idle_spin_ns: u64,
    stats: Option<TriggerStats>,
    trace: Vec<(u64, TriggerSource)>,
    pace: Option<Arc<PaceSender>>,
    polling: Option<crate::http::PollCounts>,
}

/// The synthetic handler's memory: 4 pages of 64 cache lines.
struct Synthetic {
    words: Vec<AtomicU64>,
    cursor: AtomicUsize,
}

const LINES: usize = 4 * 4096 / 64;
const WORDS_PER_LINE: usize = 8;

impl Synthetic {
    fn new() -> Self {
        Synthetic {
            words: (0..LINES * WORDS_PER_LINE)
                .map(|_| AtomicU64::new(0))
                .collect(),
            cursor: AtomicUsize::new(0),
        }
    }
    /// Writes one word in each of 50 consecutive lines (wrapping over the 4 pages).
    fn touch(&self) {
        let start = self.cursor.load(Ordering::Relaxed);
        for k in 0..50 {
            let word = &self.words[((start + k) % LINES) * WORDS_PER_LINE];
            word.store(word.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        self.cursor.store((start + 50) % LINES, Ordering::Relaxed);
    }
}

type Handler = Box<dyn Fn(&mut SoftTimers<()>, Fired<()>) + Send + Sync>;

/// The handler for `setup`: runs the synthetic work if asked, then re-arms its event at its
/// own schedule (so that late firings do not stretch the period), at the next tick for
/// "every trigger state", or with a deadline. It allocates nothing and takes no lock (the
/// facility has room reserved; the synthetic memory is preallocated atomics), so it is
/// async-signal-safe.
fn make_handler(setup: &Setup, interval: Span, deadline: Option<Span>) -> Handler {
    let synthetic = (setup.handler == HandlerKind::Synthetic).then(|| Arc::new(Synthetic::new()));
    let every = setup.source == TimerSource::Soft && setup.interval_us == 0;
    Box::new(move |timers, ev| {
        if let Some(s) = &synthetic {
            s.touch();
        }
        if every {
            let _ = timers.schedule_at(ev.now, ());
            return;
        }
        let next = ev.due + interval;
        match deadline {
            Some(d) => {
                let t = next
                    .saturating_since(ev.now)
                    .saturating_sub(Span::from_ticks(1));
                let _ = timers.schedule_with_deadline_from(ev.now, t, t + d, ());
            }
            None => {
                let _ = timers.schedule_at(next, ());
            }
        }
    })
}

/// Runs `wrk` (one thread, 32 connections) against `addr` for `duration` on the client CPU
/// and returns its requests per second and how long it ran.
fn run_wrk(addr: SocketAddr, keep_alive: bool, duration: Duration) -> Result<(f64, Duration)> {
    let binary = tools::require(tools::WRK, "wrk").context("--client wrk")?;
    let secs = duration.as_secs().max(1);
    let mut cmd = std::process::Command::new(&binary);
    cmd.args(["-t1", "-c32", &format!("-d{secs}s")]);
    if !keep_alive {
        cmd.args(["-H", "Connection: close"]);
    }
    cmd.arg(format!("http://{addr}/6k"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let start = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", binary.display()))?;
    pin_process(child.id(), CLIENT_CPU);
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rate = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("wrk printed no Requests/sec: {text}"))?;
    if text.contains("Non-2xx or 3xx responses") {
        anyhow::bail!("wrk saw error responses: {text}");
    }
    Ok((rate, start.elapsed()))
}

/// Runs the load generator `client` for `workload` against `addr` on the client CPU (call
/// on a thread of its own); returns its rate and how long it ran.
pub fn run_client(
    addr: SocketAddr,
    workload: Workload,
    client: Client,
    duration: Duration,
) -> Result<(f64, Duration)> {
    let _pin = pin_to(CLIENT_CPU);
    match (workload, client) {
        (Workload::Rpc, _) => {
            let r = run_rpc_load(addr, 32, duration)?;
            Ok((r.rate(), r.elapsed))
        }
        (w, Client::Wrk) => run_wrk(addr, w.keep_alive(), duration),
        (w, Client::Own) => {
            let r = run_load(addr, 32, w.keep_alive(), duration)?;
            Ok((r.rate(), r.elapsed))
        }
    }
}

/// Checks that `--client` can run here (wrk installed where asked for).
pub fn check_client(client: Client) -> Result<()> {
    match client {
        Client::Own => Ok(()),
        Client::Wrk => tools::require(tools::WRK, "wrk")
            .map(|_| ())
            .context("--client wrk"),
    }
}

/// Runs one server with its load and returns what it measured.
pub fn run(setup: &Setup) -> Result<Outcome> {
    if setup.poll_quota.is_some()
        && (setup.workload == Workload::Rpc
            || setup.pace.is_some()
            || setup.source != TimerSource::Soft)
    {
        bail!(
            "soft-timer polling serves the HTTP workloads on soft timers, with no other events \
             on the loop (got {} on {})",
            setup.workload.name(),
            setup.source.name()
        );
    }
    let server_cpu = server_cpu();
    // A paced flow's receiver, on the load generator's CPU.
    let pace_sink = match setup.pace {
        Some(_) => {
            let rx = softtimer_net::udp::TimestampedReceiver::bind(
                "127.0.0.1:0".parse().expect("an address"),
                256,
                2048,
            )?;
            let to = rx.local_addr()?;
            let stop = Arc::new(AtomicBool::new(false));
            let stop_drain = Arc::clone(&stop);
            let drain = std::thread::spawn(move || drain_udp(rx, stop_drain));
            Some((to, stop, drain))
        }
        None => None,
    };
    let pace_to = pace_sink.as_ref().map(|(to, _, _)| *to);
    let (ready_tx, ready_rx) = mpsc::channel();
    let stop_compute = Arc::new(AtomicBool::new(false));
    let s = setup.clone();
    let server = std::thread::Builder::new().name("server".into()).spawn(
        move || -> Result<ServerSide> {
            let _pin = pin_to(server_cpu);
            let period = Duration::from_micros(s.interval_us.max(1));
            let hz = softtimer::Clock::resolution_hz(&softtimer::SystemClock::new());
            let interval = Span::from_micros(s.interval_us, hz);
            let deadline = s.deadline_us.map(|us| Span::from_micros(us, hz));
            let pace = match (s.pace, pace_to) {
                (Some(load), Some(to)) => Some(Arc::new(PaceSender::new(load, to, hz)?)),
                _ => None,
            };
            let poll_due = Arc::new(AtomicBool::new(false));
            let handler: Handler = match (&pace, s.poll_quota) {
                (Some(p), _) => {
                    let p = Arc::clone(p);
                    Box::new(move |timers, ev| p.on_event(timers, &ev))
                }
                (None, Some(_)) => {
                    let due = Arc::clone(&poll_due);
                    Box::new(move |_, _| due.store(true, Ordering::Relaxed))
                }
                (None, None) => make_handler(&s, interval, deadline),
            };
            let config = LoopConfig {
                deadlines: s.deadline_design,
                stats: s.stats,
                trace_capacity: s.trace,
                capacity: 64,
                ..LoopConfig::default()
            };
            // SAFETY: the handler (`make_handler`) only re-arms on a facility with room
            // reserved and touches preallocated atomics: no allocation, no lock, no panic
            // path. The polling handler only stores to an atomic flag. A paced flow's handler adds one `send` system call on a buffer it owns;
            // its lock is taken only with adaptive clocking, which runs on soft timers,
            // never in a signal handler.
            #[allow(unsafe_code)]
            let mut ev = unsafe { s.source.new_loop(config, period, handler)? };
            let any = "127.0.0.1:0".parse().expect("a valid address");
            enum Server {
                Http(HttpServer),
                Rpc(RpcServer),
            }
            let mut server = match s.workload {
                Workload::Rpc => Server::Rpc(RpcServer::bind(any)?),
                _ => Server::Http(HttpServer::bind(any, Duration::from_secs(30))?),
            };
            if let (Some(quota), Server::Http(h)) = (s.poll_quota, &mut server) {
                let config = softtimer_net::poll::PollerConfig::new(quota)?;
                h.poll_with(config, hz, Arc::clone(&poll_due))?;
            }
            let addr = match &mut server {
                Server::Http(h) => {
                    h.register(&mut ev.cx())?;
                    h.local_addr()?
                }
                Server::Rpc(r) => {
                    r.register(&mut ev.cx())?;
                    r.local_addr()?
                }
            };
            match (s.source, deadline) {
                _ if s.poll_quota.is_some() => {}
                (TimerSource::None | TimerSource::BackstopOnly, _) => {}
                (_, Some(d)) => {
                    ev.cx().schedule_with_deadline(interval, interval + d, ())?;
                }
                _ => {
                    ev.cx().schedule_soft_event(interval, ())?;
                }
            }
            ready_tx
                .send((addr, ev.stop_handle()))
                .map_err(|_| anyhow!("the experiment went away"))?;
            let cpu_before = thread_cpu_ns();
            {
                let server = std::cell::RefCell::new(&mut server);
                ev.run_with(
                    |cx, ready| match &mut **server.borrow_mut() {
                        Server::Http(h) => h.on_ready(cx, ready),
                        Server::Rpc(r) => r.on_ready(cx, ready),
                    },
                    |cx, turn| match &mut **server.borrow_mut() {
                        Server::Http(h) => h.on_turn(cx, turn),
                        Server::Rpc(_) => false,
                    },
                )?;
            }
            let polling = match &server {
                Server::Http(h) => h.poll_counts(),
                Server::Rpc(_) => None,
            };
            let loop_thread_ns = thread_cpu_ns().saturating_sub(cpu_before);
            let helpers = ev.stop_helpers();
            let counters = ev.counters();
            Ok(ServerSide {
                fired: counters.fired_total(),
                fired_by_deadline: counters.fired(TriggerSource::Deadline),
                signal_busy: counters.signal_busy,
                helpers,
                loop_thread_ns,
                loop_idle_spin_ns: counters.idle_spin_ns,
                stats: ev.stats(),
                trace: ev.trace().iter().map(|&(t, s)| (t.ticks(), s)).collect(),
                pace,
                polling,
            })
        },
    )?;
    let (addr, stop) = match ready_rx.recv() {
        Ok(x) => x,
        Err(_) => {
            if let Some((_, stop, _)) = &pace_sink {
                stop.store(true, Ordering::Relaxed);
            }
            // The server thread failed before it was ready: report its error.
            return Err(match server.join() {
                Ok(Err(e)) => e.context("the server did not start"),
                _ => anyhow!("the server thread panicked"),
            });
        }
    };
    let compute = (setup.workload == Workload::HttpCompute).then(|| {
        let stop = Arc::clone(&stop_compute);
        std::thread::spawn(move || {
            let _pin = pin_to(server_cpu);
            let mut x = 1u64;
            while !stop.load(Ordering::Relaxed) {
                for k in 0..10_000u64 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(k);
                }
            }
            std::hint::black_box(x);
        })
    });
    let (workload, duration, which) = (setup.workload, setup.duration, setup.client);
    let client = std::thread::spawn(move || run_client(addr, workload, which, duration));
    let client = client
        .join()
        .map_err(|_| anyhow!("the load generator panicked"));
    stop.stop();
    stop_compute.store(true, Ordering::Relaxed);
    if let Some(c) = compute {
        let _ = c.join();
    }
    let side = server
        .join()
        .map_err(|_| anyhow!("the server thread panicked"))??;
    let (rate, elapsed) = client??;
    let pace = match (pace_sink, &side.pace) {
        (Some((_, stop, drain)), Some(sender)) => {
            stop.store(true, Ordering::Relaxed);
            let received = drain
                .join()
                .map_err(|_| anyhow!("the paced flow's receiver panicked"))??;
            Some(sender.outcome(received))
        }
        (Some((_, stop, drain)), None) => {
            stop.store(true, Ordering::Relaxed);
            let _ = drain.join();
            None
        }
        _ => None,
    };
    Ok(Outcome {
        pace,
        polling: side.polling,
        rate,
        events_per_s: side.fired as f64 / elapsed.as_secs_f64(),
        fired_by_deadline: side.fired_by_deadline,
        fired: side.fired,
        signal_busy: side.signal_busy,
        helpers: side.helpers,
        loop_thread_ns: side.loop_thread_ns,
        loop_idle_spin_ns: side.loop_idle_spin_ns,
        elapsed,
        stats: side.stats,
        trace: side.trace,
        hz: softtimer::Clock::resolution_hz(&softtimer::SystemClock::new()),
    })
}

/// What an experiment needs to know about the lab run it is part of.
#[derive(Clone, Debug)]
pub struct ExpOptions {
    /// Run lengths.
    pub length: RunLength,
    /// Where results go.
    pub out: PathBuf,
    /// The HTTP load generator.
    pub client: Client,
}

/// How an experiment's server runs were made, as its report section states them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    /// `quick` or `full`.
    pub mode: String,
    /// Seconds per run.
    #[serde(deserialize_with = "crate::summary::num")]
    pub run_s: f64,
    /// Interleaved rounds.
    pub rounds: usize,
    /// The CPU the server's loop was pinned to.
    pub server_cpu: usize,
    /// The CPU the load generator was pinned to.
    pub client_cpu: usize,
    /// The HTTP load generator.
    pub client: Client,
}

impl RunInfo {
    /// For runs of `run` each, `rounds` rounds, in the lab run `options`.
    pub fn new(options: &ExpOptions, run: Duration, rounds: usize) -> Self {
        RunInfo {
            mode: options.length.mode().to_string(),
            run_s: run.as_secs_f64(),
            rounds,
            server_cpu: server_cpu(),
            client_cpu: CLIENT_CPU,
            client: options.client,
        }
    }

    /// "the project's own load generator" or "wrk".
    pub fn client_name(&self) -> &'static str {
        match self.client {
            Client::Own => "the project's own load generator",
            Client::Wrk => "wrk",
        }
    }
}

/// Serialises a [`TriggerSource`] as its name (`syscall`, `send`, ...) and reads it back.
pub mod trigger_source_name {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};
    use softtimer::TriggerSource;

    /// Writes the name.
    pub fn serialize<S: Serializer>(source: &TriggerSource, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(source.name())
    }

    /// Reads a name written by [`serialize`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TriggerSource, D::Error> {
        let name = String::deserialize(d)?;
        TriggerSource::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| D::Error::custom(format!("unknown trigger source {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_json_are_the_reports_names() {
        for (source, name) in [
            (TimerSource::None, "none"),
            (TimerSource::BackstopOnly, "soft-no-events"),
            (TimerSource::Soft, "soft"),
            (TimerSource::Timerfd, "timerfd"),
            (TimerSource::Signal, "signal"),
        ] {
            assert_eq!(serde_json::to_value(source).unwrap(), name);
            assert_eq!(source.name(), name);
        }
        for w in [
            Workload::HttpKeepAlive,
            Workload::HttpClose,
            Workload::HttpCompute,
            Workload::Rpc,
        ] {
            assert_eq!(serde_json::to_value(w).unwrap(), w.name());
        }
        assert_eq!(serde_json::to_value(HandlerKind::Null).unwrap(), "null");
        assert_eq!(
            serde_json::to_value(HandlerKind::Synthetic).unwrap(),
            "synthetic"
        );
        assert_eq!(serde_json::to_value(Client::Wrk).unwrap(), "wrk");
    }

    #[test]
    fn interleaving_runs_every_configuration_each_round() {
        let mut order = Vec::new();
        let out = interleaved(
            2,
            &['a', 'b', 'c'],
            &mut |_, _| {},
            |c| c.to_string(),
            |c| {
                order.push(*c);
                Ok(order.len())
            },
        )
        .unwrap();
        assert_eq!(order, ['a', 'b', 'c', 'a', 'b', 'c']);
        assert_eq!(out, vec![vec![1, 4], vec![2, 5], vec![3, 6]]);
    }

    #[test]
    fn pinning_restores_the_previous_affinity() {
        let before = rustix::thread::sched_getaffinity(None).unwrap();
        {
            let pin = pin_to_last_cpu();
            if let Some(cpu) = pin.cpu {
                let now = rustix::thread::sched_getaffinity(None).unwrap();
                assert_eq!(now.count(), 1);
                assert!(now.is_set(cpu));
            }
        }
        let after = rustix::thread::sched_getaffinity(None).unwrap();
        assert_eq!(before, after);
    }

    #[test]
    fn durations_for_people() {
        assert_eq!(human_duration(Duration::from_secs(12)), "12 s");
        assert_eq!(human_duration(Duration::from_secs(65)), "1 min 05 s");
        assert_eq!(human_duration(Duration::from_secs(3725)), "1 h 02 min");
    }
}
