//! Rate-based clocking: E6 (Tables VI–VII), the busy HTTP server's throughput while it
//! paces a UDP flow; E7 (Tables VIII–IX), the transmission process the adaptive pacer
//! achieves under that load; E8 (Kobayashi's Table II), a slow-start ramp released by the
//! departure-time scheduler under each kind of timer, measured at the receiver with the
//! burstiness index.
//!
//! ## E8
//!
//! The ramp is TCP slow start without ACK clocking: the window doubles every RTT, from one
//! packet to a cap, and every packet is stamped with its departure time at the gap
//! g = RTT / cwnd · MSS ([`FlowStamper::set_gap_from_window`]) into one
//! [`DepartureQueue`]. What differs between rows is only what releases the due packets:
//!
//! - `none`: no pacing: each round's window leaves back to back at the round's start;
//! - `tick-1ms`, `tick-4ms`: a thread woken every 1 ms or every 4 ms (this kernel's HZ is
//!   250) sends everything due, as a tick-driven pacer in a kernel would;
//! - `soft`: a soft-timer event at the queue's next departure time, on the event loop
//!   (which blocks with a precise timeout and spins only the last stretch).
//!
//! The `softtimers sink` machinery receives on loopback, takes the kernel's timestamp of
//! each datagram and computes B against the slow-start virtual bottleneck (skipping the first
//! 20 packets, as the paper does).

use std::fmt::Write as _;
use std::net::UdpSocket;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, Instant, Span, SystemClock};
use softtimer_net::Rate;
use softtimer_net::departure::{DepartureQueue, FlowStamper};
use softtimer_net::udp::PacketHeader;
use softtimer_rt::{EventLoop, LoopConfig};

use crate::exp::senders::{SendSpec, SenderRow, constant_rate_rows};
use crate::harness::{
    Clocking, ExpOptions, PaceLoad, PaceOutcome, RunInfo, Setup, TimerSource, Workload, interleaved,
};
use crate::pace::{SinkInput, SinkOptions, SinkReport, SinkTarget, bind_sink, sink_on};
use crate::report::{Rendered, Section};
use crate::summary::{median, paired_ratios, range};
use crate::targets::{TargetCheck, targets_table};

/// Kobayashi's Table II, beside which E8 puts its figures.
pub const PAPER_TABLE_II: &str = "Kobayashi (Table II, FreeBSD, 5,000 packets of slow start): \
    no pacing 0.31; software pacing on a 10 ms tick 4.1e-4, on a 1 ms tick 5.9e-6; pacing by \
    the NIC's transmission timer 1.5e-7.";

/// Arrivals closer than this are one back-to-back burst, µs.
const BURST_GAP_US: u64 = 10;

/// What releases E8's stamped packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Release {
    /// No pacing: each round's window back to back at the round's start.
    None,
    /// A thread woken every 1 ms sends what is due.
    #[serde(rename = "tick-1ms")]
    Tick1ms,
    /// A thread woken every 4 ms (HZ = 250) sends what is due.
    #[serde(rename = "tick-4ms")]
    Tick4ms,
    /// A soft-timer event at the next departure time.
    Soft,
}

impl Release {
    /// Every release, in table order.
    pub const ALL: [Release; 4] = [
        Release::None,
        Release::Tick1ms,
        Release::Tick4ms,
        Release::Soft,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Release::None => "none",
            Release::Tick1ms => "tick-1ms",
            Release::Tick4ms => "tick-4ms",
            Release::Soft => "soft",
        }
    }
}

/// The ramp's shape.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Ramp {
    /// The round-trip time, µs.
    pub rtt_us: u64,
    /// The largest window, packets.
    pub max_cwnd: u64,
    /// Rounds (RTTs) sent.
    pub rounds: u32,
    /// UDP payload bytes per packet (the MSS).
    pub size: usize,
}

impl Ramp {
    fn new(quick: bool) -> Ramp {
        if quick {
            // 1 + 2 + … + 512, then one round at 512: 1,535 packets in 1.1 s.
            Ramp {
                rtt_us: 100_000,
                max_cwnd: 512,
                rounds: 11,
                size: 1472,
            }
        } else {
            // 1 + … + 2048, then one round at 2048: 6,143 packets in 1.3 s (the paper
            // counted 5,000).
            Ramp {
                rtt_us: 100_000,
                max_cwnd: 2048,
                rounds: 13,
                size: 1472,
            }
        }
    }

    /// Departure times of every packet, from `start`, on a clock at `hz`, stamped with the
    /// window gap of each round; also each packet's round.
    fn stamps(&self, start: Instant, hz: u64) -> Result<Vec<(Instant, Instant)>> {
        let rtt = Span::from_micros(self.rtt_us, hz);
        let mut flow = FlowStamper::new(hz);
        let mut out = Vec::new();
        for round in 0..self.rounds {
            let cwnd = (1u64 << round.min(40)).min(self.max_cwnd);
            let round_start = start + Span::from_ticks(rtt.ticks() * u64::from(round));
            flow.set_gap_from_window(rtt, cwnd * self.size as u64, self.size as u64)?;
            for _ in 0..cwnd {
                out.push((flow.stamp(round_start, self.size as u64), round_start));
            }
        }
        Ok(out)
    }

    fn duration(&self) -> Duration {
        Duration::from_micros(self.rtt_us * u64::from(self.rounds))
    }

    /// The rate of the largest window: `max_cwnd` packets per RTT.
    pub fn top_rate(&self) -> Result<Rate> {
        Ok(Rate::from_bits_per_sec(
            self.max_cwnd * self.size as u64 * 8 * 1_000_000 / self.rtt_us,
        )?)
    }

    /// Seconds of the constant-rate comparison (iperf3 takes whole seconds).
    pub fn constant_seconds(quick: bool) -> u64 {
        if quick { 1 } else { 2 }
    }
}

/// One row of E8: one release, over the rounds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BurstinessRow {
    /// What released the packets.
    pub release: Release,
    /// Burstiness index B at the receiver (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub burstiness_index: f64,
    /// Its smallest and largest value over the rounds.
    #[serde(deserialize_with = "crate::summary::num_pair")]
    pub burstiness_range: (f64, f64),
    /// Datagrams sent per round.
    pub packets: u64,
    /// Datagrams the receiver missed, summed over rounds.
    pub lost: u64,
    /// The longest back-to-back burst (gaps ≤ 10 µs) at the receiver (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub longest_burst: f64,
    /// 99th percentile inter-arrival time, µs (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub interarrival_p99_us: f64,
    /// The sender's CPU time per packet, ns (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub cpu_ns_per_packet: f64,
}

/// E8's result (`e8.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E8 {
    /// `quick` or `full`.
    pub mode: String,
    /// Interleaved rounds.
    pub rounds: usize,
    /// The ramp.
    pub ramp: Ramp,
    /// One row per release.
    pub rows: Vec<BurstinessRow>,
    /// `iperf3 -u -b` and the soft pacer at the ramp's top rate, constant (iperf3 cannot
    /// ramp), B against a constant bottleneck 10 % faster.
    #[serde(default)]
    pub constant_rate: Vec<SenderRow>,
    /// Why the iperf3 row (or both constant-rate rows, without root for the capture) is
    /// missing, if it is.
    #[serde(default)]
    pub iperf3_missing: Option<String>,
    /// The targets against this run.
    pub targets: Vec<TargetCheck>,
}

/// What one ramp measured.
struct RampOutcome {
    sink: SinkReport,
    sent: u64,
    cpu_ns: u64,
}

/// Sends the ramp released by `release` to a sink on loopback and returns both sides.
fn run_ramp(ramp: &Ramp, release: Release) -> Result<RampOutcome> {
    let rx = bind_sink("127.0.0.1:0".parse().expect("an address"))?;
    let to = rx.local_addr()?;
    let mut input = SinkInput::from(rx);
    let sink_options = SinkOptions {
        target: SinkTarget::Listen(to),
        duration: Some(ramp.duration() + Duration::from_secs(2)),
        idle: Duration::from_millis(300),
        rtt: Duration::from_micros(ramp.rtt_us),
        bottleneck: None,
        // A loopback send takes a few µs: closer than 10 µs is back to back.
        burst_gap: Duration::from_micros(BURST_GAP_US),
        expected_rate: None,
    };
    let sink = std::thread::spawn(move || sink_on(&mut input, &sink_options));
    let socket = UdpSocket::bind("127.0.0.1:0").context("the ramp's socket")?;
    socket.connect(to)?;
    let cpu_before = crate::harness::thread_cpu_ns();
    let sent = send_ramp(ramp, release, socket);
    let cpu_ns = crate::harness::thread_cpu_ns().saturating_sub(cpu_before);
    // The sink stops by itself (idle or duration), also when sending failed.
    let sink = sink.join().map_err(|_| anyhow!("the sink panicked"))?;
    let (sent, sink) = (sent?, sink?);
    Ok(RampOutcome { sink, sent, cpu_ns })
}

/// The ramp's sender: its socket, its queue, and what it has sent.
struct RampSender {
    socket: UdpSocket,
    queue: DepartureQueue<u64>,
    packet: Vec<u8>,
    sent: u64,
    due: Vec<u64>,
}

impl RampSender {
    /// Sends every packet due at `now`.
    fn release(&mut self, now: Instant) {
        self.due.clear();
        self.queue.drain_due(now, usize::MAX, &mut self.due);
        for &seq in &self.due {
            PacketHeader {
                flow: 0,
                seq,
                sent_ns: softtimer_net::udp::realtime_ns(),
            }
            .write(&mut self.packet);
            if self.socket.send(&self.packet).is_ok() {
                self.sent += 1;
            }
        }
    }
}

fn send_ramp(ramp: &Ramp, release: Release, socket: UdpSocket) -> Result<u64> {
    let clock = SystemClock::new();
    let hz = clock.resolution_hz();
    // Start a little ahead so that the first departures are not already late.
    let start = clock.now() + Span::from_micros(2_000, hz);
    let slot = Span::from_micros(10, hz);
    let mut queue = DepartureQueue::new(start, slot, 1 << 14)?;
    for (seq, (departure, round_start)) in ramp.stamps(start, hz)?.into_iter().enumerate() {
        let at = if release == Release::None {
            round_start
        } else {
            departure
        };
        queue.push(at, seq as u64);
    }
    let total = queue.len() as u64;
    let sender = RampSender {
        socket,
        queue,
        packet: vec![0u8; ramp.size],
        sent: 0,
        due: Vec::new(),
    };
    let end = start + Span::from_duration(ramp.duration() + Duration::from_millis(5), hz);
    match release {
        Release::None | Release::Tick1ms | Release::Tick4ms => {
            let tick = match release {
                Release::Tick1ms => Some(Duration::from_millis(1)),
                Release::Tick4ms => Some(Duration::from_millis(4)),
                _ => None,
            };
            run_ticks(sender, &clock, start, end, tick, total)
        }
        Release::Soft => run_soft(sender, start, total),
    }
}

/// A thread that sleeps to each tick (or, with no tick, to each next departure) and sends
/// what is due.
fn run_ticks(
    mut sender: RampSender,
    clock: &SystemClock,
    start: Instant,
    end: Instant,
    tick: Option<Duration>,
    total: u64,
) -> Result<u64> {
    let hz = clock.resolution_hz();
    let mut next_tick = start;
    while sender.sent < total && clock.now().is_before(end) {
        let wake = match tick {
            Some(t) => {
                next_tick += Span::from_duration(t, hz);
                next_tick
            }
            None => match sender.queue.next_departure() {
                Some(at) => at,
                None => break,
            },
        };
        let wait = wake.saturating_since(clock.now());
        std::thread::sleep(clock.duration(wait));
        sender.release(clock.now());
    }
    Ok(sender.sent)
}

/// A soft-timer event at each next departure time on an event loop.
fn run_soft(sender: RampSender, start: Instant, total: u64) -> Result<u64> {
    let sender = Arc::new(Mutex::new(sender));
    let in_handler = Arc::clone(&sender);
    let mut ev: EventLoop<()> = EventLoop::new(
        LoopConfig {
            capacity: 4,
            ..LoopConfig::default()
        },
        move |timers, fired| {
            let mut s = in_handler.lock().expect("the sender's lock");
            s.release(fired.now);
            if let Some(at) = s.queue.next_departure() {
                let _ = timers.schedule_at(at, ());
            }
        },
    )?;
    ev.cx().schedule_at(start, ())?;
    let stop = ev.stop_handle();
    let watcher_sender = Arc::clone(&sender);
    let watcher = std::thread::spawn(move || {
        let give_up = StdInstant::now() + Duration::from_secs(30);
        loop {
            std::thread::sleep(Duration::from_millis(5));
            let done = watcher_sender
                .lock()
                .map(|s| s.sent >= total)
                .unwrap_or(true);
            if done || StdInstant::now() > give_up {
                stop.stop();
                return;
            }
        }
    });
    ev.run(|_, _| {})?;
    let _ = watcher.join();
    let sent = sender
        .lock()
        .map_err(|_| anyhow!("the sender's lock"))?
        .sent;
    Ok(sent)
}

/// E8 (Kobayashi's Table II): the burstiness index of a slow-start ramp under each release.
pub fn e8(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E8> {
    let length = options.length;
    let ramp = Ramp::new(length.quick);
    let rounds = if length.quick { 1 } else { 3 };
    let outcomes = interleaved(
        rounds,
        &Release::ALL,
        &mut |f, what| progress(f * 0.7, what),
        |r| format!("ramp, {}", r.name()),
        |&release| run_ramp(&ramp, release),
    )?;
    let spec = SendSpec {
        rate: ramp.top_rate()?,
        size: ramp.size,
        seconds: Ramp::constant_seconds(length.quick),
        rtt: Duration::from_micros(ramp.rtt_us),
    };
    let (constant_rate, iperf3_missing) = constant_rate_rows(&spec, rounds, &mut |f, what| {
        progress(0.7 + f * 0.3, &format!("constant rate: {what}"))
    })?;
    let rows: Vec<BurstinessRow> = Release::ALL
        .iter()
        .zip(&outcomes)
        .map(|(&release, runs)| {
            let b: Vec<f64> = runs
                .iter()
                .map(|o| o.sink.burstiness_index.unwrap_or(f64::NAN))
                .collect();
            let med =
                |f: &dyn Fn(&RampOutcome) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
            BurstinessRow {
                release,
                burstiness_index: median(&b),
                burstiness_range: range(&b),
                packets: runs.first().map_or(0, |o| o.sent),
                lost: runs
                    .iter()
                    .map(|o| o.sent.saturating_sub(o.sink.packets))
                    .sum(),
                longest_burst: med(&|o| o.sink.longest_burst as f64),
                interarrival_p99_us: med(&|o| o.sink.interarrival_p99_us),
                cpu_ns_per_packet: med(&|o| o.cpu_ns as f64 / o.sent.max(1) as f64),
            }
        })
        .collect();
    let b_of = |r: Release| {
        rows.iter()
            .find(|row| row.release == r)
            .map_or(f64::NAN, |row| row.burstiness_index)
    };
    let soft = b_of(Release::Soft);
    let tick = b_of(Release::Tick1ms);
    let targets = vec![
        TargetCheck::new(
            "E8 burstiness index with soft timers",
            "<= 1.5e-7 (the paper's NIC pacing)",
            soft,
            soft <= 1.5e-7,
        ),
        TargetCheck::new(
            "E8 burstiness index, 1 ms tick / soft timers",
            ">= 10",
            tick / soft,
            tick >= 10.0 * soft,
        ),
    ];
    Ok(E8 {
        mode: length.mode().to_string(),
        rounds,
        ramp,
        rows,
        constant_rate,
        iperf3_missing,
        targets,
    })
}

impl Section for E8 {
    const FILE: &'static str = "e8.json";
    fn render(&self, _dir: &Path) -> Result<Rendered> {
        let mut md =
            String::from("## E8: burstiness of a paced slow start (Kobayashi, Table II)\n\n");
        let _ = writeln!(
            md,
            "A slow-start ramp (window 1, 2, 4, … {} packets of {} B, doubling every {} ms RTT, \
             {} rounds) stamped with departure times at g = RTT / cwnd and released by each \
             mechanism to a receiver on loopback that takes kernel timestamps; B against the \
             slow-start virtual bottleneck, first 20 packets skipped; median of {} round(s) \
             [range].\n",
            self.ramp.max_cwnd,
            self.ramp.size,
            self.ramp.rtt_us / 1000,
            self.ramp.rounds,
            self.rounds,
        );
        md += "| release | burstiness index B [range] | packets | lost | longest burst | inter-arrival p99 (µs) | sender CPU per packet (ns) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} | {:.3e} [{:.2e}, {:.2e}] | {} | {} | {:.0} | {:.1} | {:.0} |",
                r.release.name(),
                r.burstiness_index,
                r.burstiness_range.0,
                r.burstiness_range.1,
                r.packets,
                r.lost,
                r.longest_burst,
                r.interarrival_p99_us,
                r.cpu_ns_per_packet,
            );
        }
        if let Ok(rate) = self.ramp.top_rate() {
            let _ = writeln!(
                md,
                "\nAt the ramp's top rate, {rate}, constant (iperf3 cannot ramp): B against a \
                 constant bottleneck 10 % faster, the same RTT; bursts are datagrams closer \
                 than a quarter of the packet interval.\n"
            );
        }
        if let Some(why) = &self.iperf3_missing {
            let _ = writeln!(md, "Rows missing: {why}.\n");
        }
        if !self.constant_rate.is_empty() {
            md += "| sender | B | longest burst | inter-arrival stddev (µs) | p99 (µs) | sender CPU per packet (ns) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n";
            for r in &self.constant_rate {
                let _ = writeln!(
                    md,
                    "| {} | {:.3e} | {:.0} | {:.1} | {:.1} | {:.0} |",
                    r.sender.name(),
                    r.burstiness_index,
                    r.longest_burst,
                    r.interarrival_stddev_us,
                    r.interarrival_p99_us,
                    r.cpu_ns_per_packet,
                );
            }
        }
        let _ = writeln!(md, "\n{PAPER_TABLE_II}\n");
        md += &targets_table(&self.targets);
        Ok(Rendered::text(md))
    }
}

// ---------------------------------------------------------------------------------------
// E6 and E7: rate-based clocking on the busy HTTP server

/// The paper's Tables VI and VII, beside which E6 puts its figures.
pub const PAPER_TABLES_VI_VII: &str = "The paper (Tables VI–VII, Flash / Apache): soft timers \
    2–6 % overhead at average transmit intervals of 13–34 µs; the 8253 timer at 20 µs 28–36 %; \
    the APIC timer at 20 µs 13–19 %, at 10 µs 16–22 %.";

/// The paper's Tables VIII and IX, beside which E7 puts its figures.
pub const PAPER_TABLES_VIII_IX: &str = "The paper (Tables VIII–IX, ST-Apache on a 300 MHz \
    PII): target 40 µs: minimum interval 12 µs gives 40 µs (stddev 34.5), 35 µs gives 65.9 µs \
    (30.1); hardware timer 43.6 µs (26.8). Target 60 µs: 60 µs up to a minimum interval of \
    25 µs, 61 µs at 30, 65.9 µs at 35 (stddev 30–36); hardware timer 63 µs (27.7).";

/// E6's and E7's datagram payload, bytes (a full-size Ethernet frame, as the paper's TCP
/// segments).
const PACED_SIZE: usize = 1472;

/// One E6 or E7 configuration: what clocks the flow (`None`: the server alone).
#[derive(Clone, Copy, Debug, PartialEq)]
struct PacedConfig {
    source: TimerSource,
    load: Option<PaceLoad>,
}

impl PacedConfig {
    fn plain() -> Self {
        PacedConfig {
            source: TimerSource::None,
            load: None,
        }
    }
    fn new(source: TimerSource, clocking: Clocking, target_interval_us: u64) -> Self {
        PacedConfig {
            source,
            load: Some(PaceLoad {
                clocking,
                target_interval_us,
                size: PACED_SIZE,
            }),
        }
    }
    fn interval_us(&self) -> u64 {
        self.load.map_or(0, |l| l.target_interval_us)
    }
    fn name(&self) -> String {
        match (self.source, self.load.map(|l| l.clocking)) {
            (_, None) => "no flow".into(),
            (_, Some(Clocking::Bursts)) => "no pacing (1 ms bursts)".into(),
            (s, Some(Clocking::Adaptive { min_interval_us })) => {
                format!("{} (min {min_interval_us} µs)", s.name())
            }
            (s, Some(Clocking::PerExpiry)) => s.name().to_string(),
        }
    }
    fn setup(&self, options: &ExpOptions) -> Setup {
        let base = Setup::plain(
            Workload::HttpKeepAlive,
            options.length.throughput_run(),
            options.client,
        );
        Setup {
            pace: self.load,
            ..base.events(self.source, self.interval_us())
        }
    }
}

/// The figures of one run with a paced flow.
struct PacedRun {
    rate: f64,
    /// Busy CPU time on the loop's core per response, ns (loop and backstop threads, less
    /// the loop's idle spinning), as E13 measures it.
    loop_core_ns_per_response: f64,
    pace: PaceOutcome,
}

fn run_paced(config: &PacedConfig, options: &ExpOptions) -> Result<PacedRun> {
    let o = crate::harness::run(&config.setup(options))?;
    let responses = (o.rate * o.elapsed.as_secs_f64()).max(1.0);
    Ok(PacedRun {
        rate: o.rate,
        loop_core_ns_per_response: (o.loop_thread_ns + o.helpers.backstop_ns)
            .saturating_sub(o.loop_idle_spin_ns) as f64
            / responses,
        pace: o.pace.unwrap_or_default(),
    })
}

/// One row of E6.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PacingOverheadRow {
    /// What clocks the flow: `soft`, `timerfd`, `signal`, or `none` (1 ms bursts).
    pub clocking: String,
    /// The target interval between datagrams, µs.
    pub target_interval_us: u64,
    /// Extra busy CPU time on the server's core per response against the same datagrams
    /// sent without pacing (1 ms bursts), %: the paper's overhead of rate-based clocking,
    /// which it measured as the saturated server's throughput loss (median of per-round
    /// ratios). Here the load generator shares the machine and may not saturate the server,
    /// so the CPU per response is what is compared.
    #[serde(deserialize_with = "crate::summary::num")]
    pub overhead_pct: f64,
    /// Its smallest and largest per-round value, %.
    #[serde(deserialize_with = "crate::summary::num_pair")]
    pub overhead_range_pct: (f64, f64),
    /// The same against the server with no flow at all, % (the sends' own cost included).
    #[serde(deserialize_with = "crate::summary::num")]
    pub cost_vs_no_flow_pct: f64,
    /// Throughput loss against the unpaced flow, % (median of per-round ratios).
    #[serde(deserialize_with = "crate::summary::num")]
    pub throughput_loss_pct: f64,
    /// HTTP throughput, req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub rps: f64,
    /// The achieved mean interval between datagrams, µs (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub mean_interval_us: f64,
    /// The standard deviation of the intervals, µs (median of rounds): how evenly the
    /// datagrams left.
    #[serde(deserialize_with = "crate::summary::num")]
    pub stddev_interval_us: f64,
    /// Datagrams sent, summed over rounds.
    pub sent: u64,
    /// Datagrams the receiver got, summed over rounds.
    pub received: u64,
}

/// E6's result (`e6.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E6 {
    /// How the runs were made.
    pub run: RunInfo,
    /// Throughput with no flow, req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub no_flow_rps: f64,
    /// One row per (clocking, interval).
    pub rows: Vec<PacingOverheadRow>,
    /// The targets against this run.
    pub targets: Vec<TargetCheck>,
}

/// E6 (Tables VI–VII): the HTTP server's throughput while it paces a UDP flow.
pub fn e6(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E6> {
    let length = options.length;
    let mut configs = vec![PacedConfig::plain()];
    for interval in [20u64, 10] {
        configs.push(PacedConfig::new(
            TimerSource::Soft,
            Clocking::Bursts,
            interval,
        ));
        configs.push(PacedConfig::new(
            TimerSource::Soft,
            Clocking::Adaptive {
                min_interval_us: interval / 2,
            },
            interval,
        ));
        configs.push(PacedConfig::new(
            TimerSource::Timerfd,
            Clocking::PerExpiry,
            interval,
        ));
        configs.push(PacedConfig::new(
            TimerSource::Signal,
            Clocking::PerExpiry,
            interval,
        ));
    }
    let outcomes = interleaved(
        length.rounds(),
        &configs,
        progress,
        |c| format!("{} {} µs", c.name(), c.interval_us()),
        |c| run_paced(c, options),
    )?;
    let rates: Vec<Vec<f64>> = outcomes
        .iter()
        .map(|runs| runs.iter().map(|r| r.rate).collect())
        .collect();
    let cpu: Vec<Vec<f64>> = outcomes
        .iter()
        .map(|runs| runs.iter().map(|r| r.loop_core_ns_per_response).collect())
        .collect();
    let mut rows = Vec::new();
    for (i, c) in configs.iter().enumerate().skip(1) {
        let interval = c.interval_us();
        let bursts = configs
            .iter()
            .position(|b| {
                b.interval_us() == interval && b.load.map(|l| l.clocking) == Some(Clocking::Bursts)
            })
            .expect("a burst reference per interval");
        let extra = |reference: usize| {
            paired_ratios(&cpu[i], &cpu[reference])
                .iter()
                .map(|r| (r - 1.0) * 100.0)
                .collect::<Vec<_>>()
        };
        let overhead = extra(bursts);
        let loss: Vec<f64> = paired_ratios(&rates[i], &rates[bursts])
            .iter()
            .map(|r| (1.0 - r) * 100.0)
            .collect();
        rows.push(PacingOverheadRow {
            clocking: match c.load.map(|l| l.clocking) {
                Some(Clocking::Bursts) => "none".into(),
                _ => c.source.name().into(),
            },
            target_interval_us: interval,
            overhead_pct: median(&overhead),
            overhead_range_pct: range(&overhead),
            cost_vs_no_flow_pct: median(&extra(0)),
            throughput_loss_pct: median(&loss),
            rps: median(&rates[i]),
            mean_interval_us: median(
                &outcomes[i]
                    .iter()
                    .map(|r| r.pace.mean_interval_us)
                    .collect::<Vec<_>>(),
            ),
            stddev_interval_us: median(
                &outcomes[i]
                    .iter()
                    .map(|r| r.pace.stddev_interval_us)
                    .collect::<Vec<_>>(),
            ),
            sent: outcomes[i].iter().map(|r| r.pace.sent).sum(),
            received: outcomes[i].iter().map(|r| r.pace.received).sum(),
        });
    }
    let overhead_of = |clocking: &str, interval: u64| {
        rows.iter()
            .find(|r| r.clocking == clocking && r.target_interval_us == interval)
            .map_or(f64::NAN, |r| r.overhead_pct)
    };
    let soft = overhead_of("soft", 20);
    let timerfd = overhead_of("timerfd", 20);
    let ratio = overhead_ratio(timerfd, soft);
    let targets = vec![
        TargetCheck::new(
            "E6 overhead of soft-timer pacing at 20 µs, %",
            "<= 2 (paper: 2-6)",
            soft,
            soft <= 2.0,
        ),
        TargetCheck::new(
            "E6 timerfd overhead / soft overhead at 20 µs",
            ">= 5",
            ratio,
            ratio >= 5.0,
        ),
    ];
    Ok(E6 {
        run: RunInfo::new(options, length.throughput_run(), length.rounds()),
        no_flow_rps: median(&rates[0]),
        rows,
        targets,
    })
}

/// `timerfd`'s overhead over `soft`'s. A soft overhead at or below zero (within noise of
/// none) makes any positive timerfd overhead unboundedly larger; with both at or below zero
/// the ratio means nothing (NaN, shown as "n/a").
fn overhead_ratio(timerfd: f64, soft: f64) -> f64 {
    if soft.is_nan() || timerfd.is_nan() {
        f64::NAN
    } else if soft > 0.0 {
        timerfd / soft
    } else if timerfd > 0.0 {
        f64::INFINITY
    } else {
        f64::NAN
    }
}

impl Section for E6 {
    const FILE: &'static str = "e6.json";
    fn render(&self, _dir: &Path) -> Result<Rendered> {
        let mut md = String::from("## E6: overhead of rate-based clocking (Tables VI–VII)\n\n");
        let _ = writeln!(
            md,
            "The HTTP server (CPU {}, {} on CPU {}) sends a UDP flow of {PACED_SIZE}-byte \
             datagrams from its event loop while it serves: paced by soft timers (the adaptive \
             pacer, burst interval half the target), by a periodic timerfd or a timer signal at \
             the target interval (one datagram per expiry), or not paced (the datagrams due \
             sent back to back every 1 ms, as a window without rate-based clocking). Overhead \
             is the extra busy CPU time on the server's core per response against the unpaced \
             flow at the same interval, as the paper's base system sent the same packets in \
             bursts (median of per-round ratios [range]; the paper measured the saturated \
             server's throughput loss, reported here beside it); {} round(s) of {} s, interleaved. With no flow: {:.0} req/s.\n",
            self.run.server_cpu,
            self.run.client_name(),
            self.run.client_cpu,
            self.run.rounds,
            self.run.run_s,
            self.no_flow_rps,
        );
        md += "| clocking | target interval | overhead (%) [range] | cost vs no flow (%) | throughput loss (%) | req/s | achieved mean interval (µs) | interval stddev (µs) | sent / received |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} | {} µs | {:.2} [{:.1}, {:.1}] | {:.1} | {:.1} | {:.0} | {:.2} | {:.1} | {} / {} |",
                r.clocking,
                r.target_interval_us,
                r.overhead_pct,
                r.overhead_range_pct.0,
                r.overhead_range_pct.1,
                r.cost_vs_no_flow_pct,
                r.throughput_loss_pct,
                r.rps,
                r.mean_interval_us,
                r.stddev_interval_us,
                r.sent,
                r.received,
            );
        }
        let _ = writeln!(md, "\n{PAPER_TABLES_VI_VII}\n");
        md += &targets_table(&self.targets);
        Ok(Rendered::text(md))
    }
}

/// One row of E7.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TransmitProcessRow {
    /// `soft` (the adaptive pacer) or `timerfd` (one datagram per expiry at the target).
    pub clocking: String,
    /// The target interval, µs.
    pub target_interval_us: u64,
    /// The shortest interval the pacer may use while behind, µs (`null` for timerfd).
    pub min_interval_us: Option<u64>,
    /// The achieved mean interval, µs (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub mean_interval_us: f64,
    /// The intervals' standard deviation, µs (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub stddev_interval_us: f64,
    /// HTTP throughput, req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub rps: f64,
}

/// E7's result (`e7.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E7 {
    /// How the runs were made.
    pub run: RunInfo,
    /// One row per (target, clocking, minimum interval).
    pub rows: Vec<TransmitProcessRow>,
    /// The targets against this run.
    pub targets: Vec<TargetCheck>,
}

/// The minimum (burst) intervals of Tables VIII–IX, µs.
const MIN_INTERVALS_US: [u64; 6] = [12, 15, 20, 25, 30, 35];

/// E7 (Tables VIII–IX): the transmission process under the HTTP workload.
pub fn e7(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E7> {
    let length = options.length;
    let mut configs = Vec::new();
    for target in [40u64, 60] {
        for min in MIN_INTERVALS_US {
            configs.push(PacedConfig::new(
                TimerSource::Soft,
                Clocking::Adaptive {
                    min_interval_us: min,
                },
                target,
            ));
        }
        configs.push(PacedConfig::new(
            TimerSource::Timerfd,
            Clocking::PerExpiry,
            target,
        ));
    }
    let outcomes = interleaved(
        length.rounds(),
        &configs,
        progress,
        |c| format!("{} {} µs", c.name(), c.interval_us()),
        |c| run_paced(c, options),
    )?;
    let rows: Vec<TransmitProcessRow> = configs
        .iter()
        .zip(&outcomes)
        .map(|(c, runs)| {
            let med =
                |f: &dyn Fn(&PacedRun) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
            let min_interval_us = match c.load.map(|l| l.clocking) {
                Some(Clocking::Adaptive { min_interval_us }) => Some(min_interval_us),
                _ => None,
            };
            TransmitProcessRow {
                clocking: c.source.name().into(),
                target_interval_us: c.interval_us(),
                min_interval_us,
                mean_interval_us: med(&|r| r.pace.mean_interval_us),
                stddev_interval_us: med(&|r| r.pace.stddev_interval_us),
                rps: med(&|r| r.rate),
            }
        })
        .collect();
    // The paper's soft timers kept a 40 µs target with 12 µs bursts, and 60 µs up to 25 µs.
    let mut targets = Vec::new();
    for (target, min) in [(40u64, 12u64), (60, 25)] {
        if let Some(r) = rows
            .iter()
            .find(|r| r.target_interval_us == target && r.min_interval_us == Some(min))
        {
            let off = (r.mean_interval_us - target as f64).abs() / target as f64 * 100.0;
            targets.push(TargetCheck::new(
                format!("E7 soft mean interval off its {target} µs target, minimum {min} µs, %"),
                "<= 1 (the paper held it)",
                off,
                off <= 1.0,
            ));
        }
    }
    Ok(E7 {
        run: RunInfo::new(options, length.throughput_run(), length.rounds()),
        rows,
        targets,
    })
}

impl Section for E7 {
    const FILE: &'static str = "e7.json";
    fn render(&self, _dir: &Path) -> Result<Rendered> {
        let mut md =
            String::from("## E7: the transmission process under load (Tables VIII–IX)\n\n");
        let _ = writeln!(
            md,
            "The saturated HTTP server (CPU {}, {} on CPU {}) paces a UDP flow of \
             {PACED_SIZE}-byte datagrams at a target interval with the adaptive soft-timer \
             pacer, allowed to catch up at the minimum interval; a periodic timerfd at the \
             target interval (one datagram per expiry) for comparison. Intervals are taken at \
             the sender; medians of {} round(s) of {} s.\n",
            self.run.server_cpu,
            self.run.client_name(),
            self.run.client_cpu,
            self.run.rounds,
            self.run.run_s,
        );
        md += "| target | clocking | minimum interval | mean interval (µs) | stddev (µs) | req/s |\n| ---: | --- | ---: | ---: | ---: | ---: |\n";
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} µs | {} | {} | {:.1} | {:.1} | {:.0} |",
                r.target_interval_us,
                r.clocking,
                r.min_interval_us
                    .map_or_else(|| "—".to_string(), |m| format!("{m} µs")),
                r.mean_interval_us,
                r.stddev_interval_us,
                r.rps,
            );
        }
        let _ = writeln!(md, "\n{PAPER_TABLES_VIII_IX}\n");
        md += &targets_table(&self.targets);
        Ok(Rendered::text(md))
    }
}

#[cfg(test)]
mod tests {
    use super::overhead_ratio;

    #[test]
    fn the_overhead_ratio_is_unbounded_or_undefined_where_soft_costs_nothing() {
        assert_eq!(overhead_ratio(10.0, 2.0), 5.0);
        assert_eq!(overhead_ratio(10.0, 0.0), f64::INFINITY);
        assert_eq!(overhead_ratio(10.0, -3.0), f64::INFINITY);
        // Both within noise of none: no ratio, not −10⁹.
        assert!(overhead_ratio(-10.5, -9.8).is_nan());
        assert!(overhead_ratio(0.0, 0.0).is_nan());
        // A row that is missing is no ratio either.
        assert!(overhead_ratio(10.0, f64::NAN).is_nan());
        assert!(overhead_ratio(f64::NAN, 2.0).is_nan());
        // The target (≥ 5) is met only by a ratio that reaches it: NaN never does.
        let met = |r: f64| r >= 5.0;
        assert!(met(overhead_ratio(10.0, 0.0)));
        assert!(!met(overhead_ratio(-10.5, -9.8)));
        assert!(!met(overhead_ratio(0.0, 0.0)));
    }
}
