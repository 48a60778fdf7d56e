//! `softtimers pace` and `softtimers sink`: a paced UDP sender and a measuring receiver.
//!
//! `pace` sends UDP datagrams at a rate, paced by the timer chosen: soft timers on the event
//! loop (the paper's adaptive pacer, one event per flow), a periodic `timerfd` or a timer
//! signal at the packet interval (sending every packet due at each expiry), a spinning loop,
//! or no pacing at all. It reports the achieved rate, the process's CPU time per packet
//! (`getrusage`, idle spinning included) and the send-interval statistics.
//!
//! What precision costs is a choice: how long before a send the soft loop stops blocking and
//! spins (`--spin-window`), and how many datagrams leave back to back per wake-up
//! (`--per-wakeup N`, every `N` intervals, as one GSO send or one `sendmmsg`: fewer wake-ups,
//! a burst of `N`). `--precision` names the p99 departure error wanted: the batch is the
//! largest that error allows ([`softtimer_rt::plan_precision`]), and the soft loop learns the
//! narrowest spin windows that keep one wake-up in a hundred within it from its own
//! wake-ups (`SpinWindow::Precision`), rather than trusting a short probe. The default blocks
//! until each send and spins not at all: the cheapest one-datagram setting, a wake-up per
//! datagram like a timerfd sender's, at the datagram's own time rather than a period's.
//!
//! `sink` receives on a port, takes the kernel's receive timestamp of every datagram, and
//! reports the rate, the inter-arrival statistics, the longest back-to-back burst and the
//! burstiness index of Kobayashi's Section V. It measures any sender's traffic (datagrams
//! without the `pace` header are counted as foreign and measured all the same), and it can
//! observe a port another program owns (`--observe PORT`: a capture on the interface, with
//! the same kernel timestamps), so that `iperf3 -u` and `pace` are measured alike.

mod args;
mod counters;
mod ring;
mod sender;
mod sequence;
mod sink;

pub use args::{PaceArgs, SinkArgs};
pub use counters::{SendCounters, SendSummary};
pub use sink::{SinkInput, SinkOptions, SinkReport, SinkTarget, bind_sink, sink, sink_on};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Result, bail, ensure};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, SystemClock};
use softtimer_net::Rate;
use softtimer_net::pacer::{FlowPacer, PacerConfig};
use softtimer_net::udp::{MAX_DATAGRAM, PacketHeader};
use softtimer_rt::{IoBackend, LoopConfig, PrecisionPlan, SpinWindow, plan_precision};

use crate::cpu::process_cpu_ns;
use crate::output::Report;
use sender::{Flow, Sender, connect, run_departure, run_loop, run_spin, run_unpaced};

/// What paces the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PaceTimer {
    /// Soft timers on the event loop: the adaptive pacer, one event outstanding per flow,
    /// fired at trigger states; the loop blocks with a precise timeout and spins only for
    /// the last stretch before a send.
    Soft,
    /// A periodic `timerfd` at the packet interval, in the loop's epoll set; each expiry
    /// sends every packet that is due.
    Timerfd,
    /// A POSIX timer signal at the packet interval; each signal sends every packet due.
    Signal,
    /// A loop that spins on the clock and sends each packet when due (a whole core).
    Spin,
    /// No pacing: the datagrams of the whole run back to back, as fast as the socket
    /// takes them.
    None,
}

/// How the soft pacer schedules many flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// The soft-timers paper's pacer: one soft-timer event per flow, a target and a burst
    /// rate each.
    PerFlow,
    /// Departure-time scheduling (Kobayashi, Carousel): each flow's next datagram is stamped
    /// with its departure time into one two-level queue, and one soft-timer event at the
    /// queue's next departure sends everything due, in one `sendmmsg`. A flow that falls
    /// behind (a late wake-up) starts again from its next send, as the kernel's pacing
    /// does: time lost is not made up in a burst, so a loop that wakes late often sends a
    /// little under the rate (the per-flow pacer catches up at its burst rate instead).
    Departure,
}

/// How `pace` runs.
#[derive(Clone, Debug)]
pub struct PaceOptions {
    /// Where to send.
    pub to: SocketAddr,
    /// The total target rate (split evenly over the flows).
    pub rate: Rate,
    /// The burst rate of the soft pacer (default: twice the rate).
    pub burst: Option<Rate>,
    /// UDP payload bytes per datagram.
    pub size: usize,
    /// Flows, each paced on its own at `rate / flows`.
    pub flows: u32,
    /// How long to send.
    pub duration: Duration,
    /// What paces.
    pub timer: PaceTimer,
    /// The soft loop's spin window (how long before a send it stops blocking and spins).
    pub spin_window: SpinWindow,
    /// With soft timers: datagrams of several flows due at one trigger state leave in one
    /// `sendmmsg` (off: one `send` each).
    pub batch: bool,
    /// With soft timers: how the flows are scheduled.
    pub scheduler: Scheduler,
    /// With soft timers and one event per flow: how the loop sends (epoll: a `send` per
    /// datagram; io_uring: queued in the ring and submitted with the loop's next entry).
    pub io: IoBackend,
    /// Datagrams of a flow sent back to back per wake-up (its event, or a timerfd's expiry),
    /// every that many intervals: 1 ..= [`MAX_PER_WAKEUP`].
    pub per_wakeup: u32,
    /// How several datagrams leave at once: a burst, or flows due together.
    pub batch_send: BatchSend,
    /// The p99 departure error wanted: when given, the datagrams per wake-up are the most it
    /// allows ([`plan_precision`]) and a soft loop learns its spin window towards it
    /// (`SpinWindow::Precision`), in place of `spin_window` and `per_wakeup`.
    pub precision: Option<Duration>,
    /// With soft timers: the backstop's frequency, `1 / X` ([`DEFAULT_BACKSTOP_HZ`]).
    pub backstop_hz: u64,
}

/// `pace`'s backstop frequency: 100 Hz, `X` = 10 ms. Its loop does nothing but wait for the
/// next send, so its trigger states never fall behind by themselves; the backstop only covers
/// a wake-up the host delays past `X`. Its helper looks once per `X` while a send is pending,
/// a wake-up on another CPU each time: at the loop's default 1 kHz that is 1,000 wake-ups a
/// second beside the sender's own 8,500 (100 Mbit/s of 1472 B), each costing what
/// [`softtimer_rt::wakeup_probe`] measures; at 100 Hz a tenth of that. `--backstop-hz 1000`
/// buys back the tighter bound (a host that delays the loop's wake-up past 1 ms, rather than
/// 10 ms, has the datagram sent from the other CPU).
pub const DEFAULT_BACKSTOP_HZ: u64 = 100;

impl PaceOptions {
    /// Sending to `to` at `rate` with the command line's defaults: 1472-byte datagrams, one
    /// flow, 10 s, soft timers with no spin window, one datagram per wake-up.
    ///
    /// ```
    /// use softtimers_tools::pace::{PaceOptions, PaceTimer};
    /// let options = PaceOptions {
    ///     timer: PaceTimer::Timerfd,
    ///     ..PaceOptions::new("127.0.0.1:9".parse().unwrap(), "10M".parse().unwrap())
    /// };
    /// assert!(softtimers_tools::pace::check_pace(&options).is_ok());
    /// ```
    pub fn new(to: SocketAddr, rate: Rate) -> PaceOptions {
        PaceOptions {
            to,
            rate,
            burst: None,
            size: 1472,
            flows: 1,
            duration: Duration::from_secs(10),
            timer: PaceTimer::Soft,
            spin_window: SpinWindow::Fixed(Duration::ZERO),
            batch: true,
            scheduler: Scheduler::PerFlow,
            per_wakeup: 1,
            batch_send: BatchSend::Gso,
            precision: None,
            backstop_hz: DEFAULT_BACKSTOP_HZ,
            io: IoBackend::Epoll,
        }
    }
}

/// The most datagrams per wake-up (`--per-wakeup`).
pub const MAX_PER_WAKEUP: u32 = 64;

/// How several datagrams that leave at once are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BatchSend {
    /// One `sendmsg` of all of them, cut into datagrams by the kernel (UDP generic
    /// segmentation offload): one pass through the stack.
    Gso,
    /// One `sendmmsg`: one system call, a pass through the stack per datagram.
    Sendmmsg,
}

impl BatchSend {
    /// `gso` or `sendmmsg`.
    pub fn name(self) -> &'static str {
        match self {
            BatchSend::Gso => "gso",
            BatchSend::Sendmmsg => "sendmmsg",
        }
    }
}

/// What `pace` measured (`pace --json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PaceReport {
    /// What paced.
    pub timer: PaceTimer,
    /// The target rate, bit/s.
    pub target_bps: u64,
    /// The rate achieved: the bits of every datagram but the last over the time from the
    /// first send to the last.
    #[serde(deserialize_with = "crate::json::num")]
    pub achieved_bps: f64,
    /// |achieved − target| / target, %.
    #[serde(deserialize_with = "crate::json::num")]
    pub conformance_pct: f64,
    /// Datagrams sent.
    pub packets: u64,
    /// Sends the kernel refused (buffer full, unreachable port): not counted as sent.
    pub send_errors: u64,
    /// What the last refused send said, when one was (absent from older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_send_error: Option<String>,
    /// The process's CPU time (user + system, every thread) per datagram sent, ns.
    #[serde(deserialize_with = "crate::json::num")]
    pub cpu_ns_per_packet: f64,
    /// The process's CPU time over the run, % of one core.
    #[serde(deserialize_with = "crate::json::num")]
    pub cpu_pct: f64,
    /// Datagram payload bytes.
    pub size: usize,
    /// Flows.
    pub flows: u32,
    /// The run's length, s.
    #[serde(deserialize_with = "crate::json::num")]
    pub duration_s: f64,
    /// Mean interval between a flow's consecutive sends, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub send_interval_mean_us: f64,
    /// Their standard deviation, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub send_interval_stddev_us: f64,
    /// The longest, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub send_interval_max_us: f64,
    /// The soft loop's spin window, µs (`null` for the other timers): what its idle policy
    /// spins before its wait between wake-ups at the end of the run; with `--precision`,
    /// the window its loop learnt for that wait.
    pub spin_window_us: Option<f64>,
    /// Send system calls made (`sendmmsg` counts once however many datagrams it carried);
    /// with io_uring, the ring's `io_uring_enter` calls, which carry the waits too.
    pub send_calls: u64,
    /// How the loop sent (`epoll` for the senders without a loop).
    #[serde(default)]
    pub io: IoBackend,
    /// Datagrams a flow sent back to back per wake-up.
    #[serde(default = "one")]
    pub per_wakeup: u32,
    /// How datagrams that left at once were sent.
    #[serde(default = "gso")]
    pub batch_send: BatchSend,
    /// What `--precision` planned from the wake-up probe, and what it expected, when it was
    /// given: its batch is used; its spin window is where the probe put it, and a soft
    /// loop's learnt one is `spin_window_us` (a timerfd sender does not spin).
    #[serde(default)]
    pub precision: Option<PrecisionPlan>,
    /// The soft loop's backstop frequency, Hz (`null` for the other timers).
    #[serde(default)]
    pub backstop_hz: Option<u64>,
    /// Expirations of the hardware timer, each a wake-up (`timerfd` and `signal` only):
    /// one per `per_wakeup` intervals.
    #[serde(default)]
    pub timer_expirations: Option<u64>,
}

fn one() -> u32 {
    1
}

fn gso() -> BatchSend {
    BatchSend::Gso
}

/// Checks `pace`'s options: sizes, the flow count, the duration, and a packet interval the
/// timers can keep (at least 1 µs per flow for the hardware timers).
pub fn check_pace(options: &PaceOptions) -> Result<()> {
    ensure!(
        (PacketHeader::LEN..=MAX_DATAGRAM).contains(&options.size),
        "--size {}: a datagram carries {}..={} bytes (the header is {} bytes)",
        options.size,
        PacketHeader::LEN,
        MAX_DATAGRAM,
        PacketHeader::LEN
    );
    ensure!(
        (1..=100_000).contains(&options.flows),
        "--flows {}: want 1..=100000",
        options.flows
    );
    ensure!(
        options.rate.bits_per_sec() >= u64::from(options.flows),
        "--rate {} over {} flows is under 1 bit/s per flow",
        options.rate,
        options.flows
    );
    // Each flow paces at the whole bits per second of rate / flows: what that drops is under
    // a part in a thousand once a flow has 1 kbit/s; below, it must be nothing.
    let (bps, flows) = (options.rate.bits_per_sec(), u64::from(options.flows));
    ensure!(
        bps / flows >= 1000 || bps % flows == 0,
        "--rate {} over {} flows: each flow would pace at {} bit/s, {} bit/s in all; \
         ask for a multiple of the flows",
        options.rate,
        options.flows,
        bps / flows,
        bps / flows * flows
    );
    crate::parse::check_run_duration(options.duration)?;
    ensure!(
        options.io == IoBackend::Epoll
            || (options.timer == PaceTimer::Soft && options.scheduler == Scheduler::PerFlow),
        "--io {} sends through the soft loop's ring: it needs --timer soft and --scheduler \
         per-flow",
        options.io
    );
    ensure!(
        options.io == IoBackend::Epoll || (options.per_wakeup == 1 && options.precision.is_none()),
        "--io {} sends one datagram per wake-up through the ring: it does not take \
         --per-wakeup or --precision",
        options.io
    );
    ensure!(
        (1..=MAX_PER_WAKEUP).contains(&options.per_wakeup),
        "--per-wakeup {}: want 1..={MAX_PER_WAKEUP}",
        options.per_wakeup
    );
    let batches = options.per_wakeup > 1 || options.precision.is_some();
    ensure!(
        !batches
            || (matches!(options.timer, PaceTimer::Soft | PaceTimer::Timerfd)
                && options.scheduler == Scheduler::PerFlow),
        "--per-wakeup and --precision pace soft timers with the per-flow scheduler, or a \
         timerfd (a signal handler must not allocate; the spinning loop and no pacing wake \
         for nothing)"
    );
    ensure!(
        (1..=100_000).contains(&options.backstop_hz),
        "--backstop-hz {}: want 1..=100000",
        options.backstop_hz
    );
    if let Some(p) = options.precision {
        ensure!(
            p <= Duration::from_secs(1),
            "--precision {p:?}: want at most 1 s"
        );
    }
    if let Some(burst) = options.burst {
        ensure!(
            burst >= options.rate,
            "--burst {burst} is below --rate {}",
            options.rate
        );
    }
    if matches!(options.timer, PaceTimer::Timerfd | PaceTimer::Signal) {
        let interval = packet_interval(options.rate, options.size);
        ensure!(
            interval >= Duration::from_micros(1),
            "{} datagrams of {} bytes are {:?} apart: the {} timer cannot fire more often than \
             every 1 µs",
            options.rate,
            options.size,
            interval,
            options.timer.name()
        );
    }
    Ok(())
}

impl PaceTimer {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            PaceTimer::Soft => "soft",
            PaceTimer::Timerfd => "timerfd",
            PaceTimer::Signal => "signal",
            PaceTimer::Spin => "spin",
            PaceTimer::None => "none",
        }
    }
}

/// The interval between datagrams of `size` bytes at `rate` (all flows together).
fn packet_interval(rate: Rate, size: usize) -> Duration {
    Duration::from_nanos(rate.ticks_for_bytes(size as u64, 1_000_000_000))
}

/// Runs `pace` and returns what it measured.
pub fn pace(options: &PaceOptions) -> Result<PaceReport> {
    check_pace(options)?;
    let clock = SystemClock::new();
    let hz = clock.resolution_hz();
    let plan = Plan::new(options)?;
    let sender = Arc::new(Sender::new(
        connect(options.to)?,
        options.size,
        options.batch_send,
        hz,
    )?);
    let config = match options.timer {
        // Timer-driven pacing sends, at each expiry, every datagram the target rate has made
        // due since the train started: a late expiry is made up at once, not lost.
        PaceTimer::Timerfd | PaceTimer::Signal => {
            PacerConfig::new(plan.per_flow, unlimited_burst())?
        }
        _ => PacerConfig::new(plan.per_flow, plan.burst)?,
    };
    let flows: Vec<Flow> = (0..options.flows)
        .map(|id| Flow {
            id,
            seq: 0,
            pacer: FlowPacer::new(config, hz),
            last_sent: None,
        })
        .collect();
    let cpu_before = process_cpu_ns();
    let started = StdInstant::now();
    let run = Run {
        options,
        plan: &plan,
        sender: &sender,
        flows,
    };
    let looped = match options.timer {
        PaceTimer::Soft if options.scheduler == Scheduler::Departure => Some(run_departure(run)?),
        PaceTimer::Soft if options.io != IoBackend::Epoll => Some(ring::run_ring(run)?),
        PaceTimer::Soft | PaceTimer::Timerfd | PaceTimer::Signal => Some(run_loop(run)?),
        PaceTimer::Spin => {
            run_spin(options, &sender, run.flows, &clock);
            None
        }
        PaceTimer::None => {
            run_unpaced(options, &sender);
            None
        }
    };
    let elapsed = started.elapsed();
    let cpu_ns = process_cpu_ns().saturating_sub(cpu_before);
    let c = sender.counters.summary();
    let last_send_error = c.last_error.map(send_error_text);
    if c.packets == 0 && c.refused > 0 {
        bail!(
            "every send to {} was refused ({} tries): {}",
            options.to,
            c.refused,
            last_send_error.as_deref().unwrap_or("no reason given")
        );
    }
    let achieved_bps = if c.packets > 1 && c.span_ns > 0 {
        (c.packets - 1) as f64 * options.size as f64 * 8.0 / (c.span_ns as f64 / 1e9)
    } else {
        f64::NAN
    };
    let target = options.rate.bits_per_sec() as f64;
    Ok(PaceReport {
        timer: options.timer,
        target_bps: options.rate.bits_per_sec(),
        achieved_bps,
        conformance_pct: (achieved_bps - target).abs() / target * 100.0,
        packets: c.packets,
        send_errors: c.refused,
        last_send_error,
        cpu_ns_per_packet: cpu_ns as f64 / c.packets.max(1) as f64,
        cpu_pct: cpu_ns as f64 / elapsed.as_nanos().max(1) as f64 * 100.0,
        size: options.size,
        flows: options.flows,
        duration_s: elapsed.as_secs_f64(),
        send_interval_mean_us: c.gap_mean_us,
        send_interval_stddev_us: c.gap_stddev_us,
        send_interval_max_us: c.gap_max_us,
        spin_window_us: (options.timer == PaceTimer::Soft).then(|| {
            looped
                .as_ref()
                .map_or(plan.spin_window, |l| l.spin_window)
                .as_secs_f64()
                * 1e6
        }),
        timer_expirations: matches!(options.timer, PaceTimer::Timerfd | PaceTimer::Signal)
            .then(|| looped.as_ref().map_or(0, |l| l.timer_expirations)),
        send_calls: c.calls,
        io: options.io,
        per_wakeup: plan.per_wakeup,
        batch_send: sender.batch_send(),
        precision: plan.precision,
        backstop_hz: (options.timer == PaceTimer::Soft).then_some(options.backstop_hz),
    })
}

/// What a paced run starts from: the options, the plan resolved from them, the socket and
/// its counters, and the flows.
struct Run<'a> {
    options: &'a PaceOptions,
    plan: &'a Plan,
    sender: &'a Arc<Sender>,
    flows: Vec<Flow>,
}

/// What `pace` derives from its options, once, and hands to whichever sender runs.
pub(super) struct Plan {
    /// Each flow's target rate: the total over the flows (at least 1 bit/s).
    per_flow: Rate,
    /// Each flow's burst rate: `--burst` over the flows, or twice the target.
    burst: Rate,
    /// The interval between datagrams of all flows together, at least 1 µs (a hardware
    /// timer's period).
    period: Duration,
    /// The soft loop's spin window, resolved (zero for the other timers, which do not spin);
    /// with `--precision`, the probe's plan, which the loop's learnt windows replace.
    spin_window: Duration,
    /// What the soft loop is given: the resolved window, or with `--precision` the named
    /// precision, whose windows the loop learns from its own wake-ups.
    loop_spin: SpinWindow,
    /// Datagrams per flow per wake-up.
    per_wakeup: u32,
    /// What `--precision` picked, when it was given.
    precision: Option<PrecisionPlan>,
}

impl Plan {
    /// The soft loop's settings: room for `events` pending events and one more, the plan's
    /// spin window.
    fn loop_config(&self, events: u32) -> LoopConfig {
        LoopConfig {
            capacity: events as usize + 1,
            spin_window: self.loop_spin,
            ..LoopConfig::default()
        }
    }

    fn new(options: &PaceOptions) -> Result<Plan> {
        let flows = u64::from(options.flows);
        let per_flow = Rate::from_bits_per_sec((options.rate.bits_per_sec() / flows).max(1))?;
        let burst = match options.burst {
            Some(b) => (b.bits_per_sec() / flows).max(1),
            None => per_flow
                .bits_per_sec()
                .saturating_mul(2)
                .min(softtimer_net::MAX_RATE_BPS),
        };
        let period = packet_interval(options.rate, options.size).max(Duration::from_micros(1));
        // A flow's datagrams are `flows` periods apart: that is what a batch makes early.
        let precision = options.precision.map(|p| {
            let wakeup = softtimer_rt::wakeup_probe().normal;
            plan_precision(&wakeup, p, Some(period * options.flows), MAX_PER_WAKEUP)
        });
        let (spin_window, per_wakeup) = match precision {
            Some(plan) => (plan.spin_window, plan.per_wakeup),
            None => (options.spin_window.resolve(), options.per_wakeup),
        };
        let spin_window = match options.timer {
            PaceTimer::Soft => spin_window,
            _ => Duration::ZERO,
        };
        let loop_spin = match (options.timer, options.precision) {
            (PaceTimer::Soft, Some(p)) => SpinWindow::Precision(p),
            _ => SpinWindow::Fixed(spin_window),
        };
        Ok(Plan {
            per_flow,
            burst: Rate::from_bits_per_sec(burst)?,
            period,
            spin_window,
            loop_spin,
            per_wakeup,
            precision,
        })
    }
}

/// What a refused send's `errno` means for `pace`, with what to do where that is clear.
fn send_error_text(errno: i32) -> String {
    let error = std::io::Error::from_raw_os_error(errno);
    let hint = match rustix::io::Errno::from_raw_os_error(errno) {
        rustix::io::Errno::CONNREFUSED => ": is anything listening there?",
        rustix::io::Errno::MSGSIZE => {
            ": a datagram (or a GSO batch) larger than the path takes: a smaller --size, or \
             --batch-send sendmmsg"
        }
        _ => "",
    };
    format!("{error}{hint}")
}

/// The fastest burst rate: catch up at once.
fn unlimited_burst() -> Rate {
    Rate::from_bits_per_sec(softtimer_net::MAX_RATE_BPS).expect("the maximum rate is a rate")
}

impl Report for PaceReport {
    fn text(&self) -> String {
        let r = self;
        format!(
            "timer {}, io {}: {} datagrams of {} B in {:.2} s, {} flow(s)\n\
             target {:.3} Mbit/s, {}\n\
             CPU {:.1} % of a core, {:.0} ns per datagram; {} send calls; send errors {}{}\n\
             send interval per flow: mean {:.2} µs, stddev {:.2} µs, max {:.1} µs{}\n{}",
            r.timer.name(),
            r.io,
            r.packets,
            r.size,
            r.duration_s,
            r.flows,
            r.target_bps as f64 / 1e6,
            if r.achieved_bps.is_finite() {
                format!(
                    "achieved {:.3} Mbit/s (off by {:.3} %)",
                    r.achieved_bps / 1e6,
                    r.conformance_pct
                )
            } else if r.packets < 2 {
                "no rate achieved: fewer than two datagrams left (a run shorter than the \
                 interval between them?)"
                    .to_string()
            } else {
                "no rate to measure: every datagram left at one time (one burst)".to_string()
            },
            r.cpu_pct,
            r.cpu_ns_per_packet,
            r.send_calls,
            r.send_errors,
            r.last_send_error
                .as_ref()
                .map_or_else(String::new, |e| format!(" (the last: {e})")),
            r.send_interval_mean_us,
            r.send_interval_stddev_us,
            r.send_interval_max_us,
            r.spin_window_us
                .map_or_else(String::new, |w| format!("; spin window {w:.1} µs")),
            batching(r),
        )
    }
}

/// What the report says of datagrams per wake-up and of `--precision`'s choice.
fn batching(r: &PaceReport) -> String {
    let mut out = String::new();
    if r.per_wakeup > 1 {
        out += &format!(
            "{} datagrams per wake-up, sent with {}\n",
            r.per_wakeup,
            r.batch_send.name()
        );
    }
    if let Some(p) = &r.precision {
        out += &format!(
            "precision {:.1} µs (p99 departure error), planned from the wake-up probe: spin \
             window {:.1} µs (a soft loop learns its own) and {} per wake-up expected late by \
             {:.1} µs at p99 and the last of a batch {:.1} µs early, for {:.1} µs of waiting CPU \
             per datagram\n",
            p.precision_us,
            p.spin_window.as_secs_f64() * 1e6,
            p.per_wakeup,
            p.expected_late_p99_us,
            p.batch_early_us,
            p.expected_wait_cpu_us,
        );
    }
    out
}
