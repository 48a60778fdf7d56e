//! E8 (Kobayashi's Table II): the burstiness of a paced slow start.
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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, Instant, Span, SystemClock};
use softtimer_net::Rate;
use softtimer_net::departure::{DepartureQueue, FlowStamper};
use softtimer_net::udp::PacketHeader;
use softtimer_rt::{EventLoop, LoopConfig};

use crate::exp::senders::{SendSpec, SenderRow, constant_rate_rows};
use crate::harness::{ExpOptions, interleaved};
use crate::paper::PAPER_TABLE_II;
use crate::report::{Page, Section, StepResult};
use crate::summary::{median, range};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck};
use softtimers_tools::pace::{SinkInput, SinkOptions, SinkReport, SinkTarget, bind_sink, sink_on};

/// Arrivals closer than this are one back-to-back burst, µs.
pub(super) const BURST_GAP_US: u64 = 10;

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
    pub(super) fn new(quick: bool) -> Ramp {
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
    pub(super) fn stamps(&self, start: Instant, hz: u64) -> Result<Vec<(Instant, Instant)>> {
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

    pub(super) fn duration(&self) -> Duration {
        Duration::from_micros(self.rtt_us * u64::from(self.rounds))
    }

    /// The rate of the largest window: `max_cwnd` packets per RTT.
    ///
    /// # Errors
    ///
    /// A ramp with no RTT, or whose rate does not fit (a hand-edited JSON file's).
    pub fn top_rate(&self) -> Result<Rate> {
        let bits_per_rtt = (self.size as u64)
            .checked_mul(8 * 1_000_000)
            .and_then(|bits| bits.checked_mul(self.max_cwnd))
            .context("the ramp's largest window overflows")?;
        let bits_per_sec = bits_per_rtt
            .checked_div(self.rtt_us)
            .context("the ramp has an RTT of 0 µs")?;
        Ok(Rate::from_bits_per_sec(bits_per_sec)?)
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
pub type E8 = StepResult<BurstinessRow, E8Extra>;

/// What E8 records beside its rows: the ramp, and the constant-rate comparison.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E8Extra {
    /// Interleaved rounds.
    pub rounds: usize,
    /// The ramp.
    pub ramp: Ramp,
    /// `iperf3 -u -b` and the soft pacer at the ramp's top rate, constant (iperf3 cannot
    /// ramp), B against a constant bottleneck 10 % faster.
    #[serde(default)]
    pub constant_rate: Vec<SenderRow>,
    /// Why the iperf3 row (or both constant-rate rows, without root for the capture) is
    /// missing, if it is.
    #[serde(default)]
    pub iperf3_missing: Option<String>,
}

/// What one ramp measured.
pub(super) struct RampOutcome {
    pub(super) sink: SinkReport,
    pub(super) sent: u64,
    pub(super) cpu_ns: u64,
}

/// Sends the ramp released by `release` to a sink on loopback and returns both sides.
pub(super) fn run_ramp(ramp: &Ramp, release: Release) -> Result<RampOutcome> {
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
        gso_segment: None,
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
    if let Some(e) = &sink.receive_error {
        bail!("the sink stopped early: {e}");
    }
    Ok(RampOutcome { sink, sent, cpu_ns })
}

/// The ramp's sender: its socket, its queue, and what it has sent.
pub(super) struct RampSender {
    pub(super) socket: UdpSocket,
    pub(super) queue: DepartureQueue<u64>,
    pub(super) packet: Vec<u8>,
    pub(super) sent: u64,
    pub(super) due: Vec<u64>,
}

impl RampSender {
    /// Sends every packet due at `now`.
    pub(super) fn release(&mut self, now: Instant) {
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

pub(super) fn send_ramp(ramp: &Ramp, release: Release, socket: UdpSocket) -> Result<u64> {
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
pub(super) fn run_ticks(
    mut sender: RampSender,
    clock: &SystemClock,
    start: Instant,
    end: Instant,
    tick: Option<Duration>,
    total: u64,
) -> Result<u64> {
    // A sleeping sender as its users run it: at the kernel's stock timer slack.
    let _stock_slack = softtimers_tools::cpu::stock_timer_slack();
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
pub(super) fn run_soft(sender: RampSender, start: Instant, total: u64) -> Result<u64> {
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
            Goal::at_most(1.5e-7, "<= 1.5e-7 (the paper's NIC pacing)"),
            soft,
            crate::paper::ANCHOR_KOBAYASHI_TABLE_II,
        ),
        // A soft index of zero makes the ratio unbounded, which meets the target.
        TargetCheck::new(
            "E8 burstiness index, 1 ms tick / soft timers",
            Goal::at_least(10.0, ">= 10"),
            if soft == 0.0 && tick > 0.0 {
                f64::INFINITY
            } else {
                tick / soft
            },
            crate::paper::ANCHOR_KOBAYASHI_TABLE_II,
        ),
    ];
    Ok(E8::ran(
        length.mode(),
        E8Extra {
            rounds,
            ramp,
            constant_rate,
            iperf3_missing,
        },
        rows,
        targets,
    ))
}

impl Section for E8 {
    const FILE: &'static str = "e8.json";
    const TITLE: &'static str = "E8: burstiness of a paced slow start (Kobayashi, Table II)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "A slow-start ramp (window 1, 2, 4, … {} packets of {} B, doubling every {} ms RTT, \
             {} rounds) stamped with departure times at g = RTT / cwnd and released by each \
             mechanism to a receiver on loopback that takes kernel timestamps; B against the \
             slow-start virtual bottleneck, first 20 packets skipped; median of {} round(s) \
             [range].\n",
            self.extra.ramp.max_cwnd,
            self.extra.ramp.size,
            self.extra.ramp.rtt_us / 1000,
            self.extra.ramp.rounds,
            self.extra.rounds,
        );
        page.table(
            Table::of(&self.rows)
                .text("release", |r| r.release.name())
                .text("burstiness index B [range]:", |r| {
                    format!(
                        "{:.3e} [{:.2e}, {:.2e}]",
                        r.burstiness_index, r.burstiness_range.0, r.burstiness_range.1
                    )
                })
                .text("packets:", |r| r.packets)
                .text("lost:", |r| r.lost)
                .fixed("longest burst:", 0, |r| r.longest_burst)
                .fixed("inter-arrival p99 (µs):", 1, |r| r.interarrival_p99_us)
                .fixed("sender CPU per packet (ns):", 0, |r| r.cpu_ns_per_packet)
                .table(),
        );
        if let Ok(rate) = self.extra.ramp.top_rate() {
            let _ = writeln!(
                page,
                "\nAt the ramp's top rate, {rate}, constant (iperf3 cannot ramp): B against a \
                 constant bottleneck 10 % faster, the same RTT; bursts are datagrams closer \
                 than a quarter of the packet interval.\n"
            );
        }
        if let Some(why) = &self.extra.iperf3_missing {
            let _ = writeln!(page, "Rows missing: {why}.\n");
        }
        if !self.extra.constant_rate.is_empty() {
            page.table(
                Table::of(&self.extra.constant_rate)
                    .text("sender", |r| format!("{} {}", r.sender.name(), r.setting))
                    .text("B:", |r| format!("{:.3e}", r.burstiness_index))
                    .fixed("longest burst:", 0, |r| r.longest_burst)
                    .fixed("inter-arrival stddev (µs):", 1, |r| {
                        r.interarrival_stddev_us
                    })
                    .fixed("p99 (µs):", 1, |r| r.interarrival_p99_us)
                    .fixed("sender CPU per packet (ns):", 0, |r| r.cpu_ns_per_packet)
                    .table(),
            );
        }
        page.paper(PAPER_TABLE_II);
        page.targets(&self.targets);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Ramp;

    /// The report reads the ramp back from JSON: a hand-edited one is an error, not a panic
    /// (an RTT of 0 divided by zero).
    #[test]
    fn a_ramp_without_rtt_or_with_an_overflowing_window_has_no_rate() {
        let ramp = Ramp::new(true);
        assert_eq!(ramp.top_rate().unwrap().bits_per_sec(), 512 * 1472 * 8 * 10);
        let no_rtt = Ramp { rtt_us: 0, ..ramp };
        assert!(
            no_rtt
                .top_rate()
                .unwrap_err()
                .to_string()
                .contains("RTT of 0")
        );
        let huge_window = Ramp {
            max_cwnd: u64::MAX,
            ..ramp
        };
        let huge_size = Ramp {
            size: usize::MAX,
            ..ramp
        };
        for huge in [huge_window, huge_size] {
            let e = huge.top_rate().unwrap_err().to_string();
            assert!(e.contains("overflows"), "{e}");
        }
    }
}
