//! `sink`: receives on a port it owns or observes one another program owns, takes the
//! kernel's receive timestamp of every datagram, and reports the rate, the inter-arrival
//! statistics, the longest back-to-back burst and the burstiness index.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use softtimer_net::Rate;
use softtimer_net::burstiness::{ArrivalStats, Bottleneck, BurstinessIndex};
use softtimer_net::capture::PortObserver;
use softtimer_net::udp::{MAX_DATAGRAM, PacketHeader, TimestampedReceiver, realtime_ns};

use super::sequence::Sequences;

use crate::output::Report;

/// How `sink` runs.
#[derive(Clone, Debug)]
pub struct SinkOptions {
    /// What to receive: a port to own, or one to observe.
    pub target: SinkTarget,
    /// Stop after this long (from the start).
    pub duration: Option<Duration>,
    /// Stop after this long without a datagram, once one has come.
    pub idle: Duration,
    /// The RTT the burstiness index is normalised by.
    pub rtt: Duration,
    /// The virtual bottleneck's rate for the burstiness index; `None`: the slow-start
    /// bottleneck of Kobayashi's equation 3.
    pub bottleneck: Option<Rate>,
    /// Gaps at most this long make datagrams one back-to-back burst.
    pub burst_gap: Duration,
    /// The rate the sender was asked for, to report conformance against.
    pub expected_rate: Option<Rate>,
    /// Observing: the sender's datagram size, when it may send with UDP segmentation (GSO).
    /// A capture sees such a send whole, one packet of `k` datagrams, which the receiving
    /// socket gets as `k` datagrams at once; a captured datagram of exactly `k` times this
    /// size (`k > 1`) counts as those `k`, at its one timestamp, numbered on from its header.
    pub gso_segment: Option<usize>,
}

/// Where `sink` takes its datagrams from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkTarget {
    /// Bind this address and receive on it.
    Listen(SocketAddr),
    /// Observe datagrams to `port` arriving on `interface`, without owning the port (an
    /// `AF_PACKET` capture; needs root). Another program must receive them.
    Observe {
        /// The interface they arrive on (`lo`, a veth end).
        interface: String,
        /// Their destination port.
        port: u16,
    },
}

impl std::fmt::Display for SinkTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkTarget::Listen(addr) => write!(f, "socket {addr}"),
            SinkTarget::Observe { interface, port } => write!(f, "capture {interface}:{port}"),
        }
    }
}

/// What `sink` reads datagrams from: a bound socket or a capture.
pub enum SinkInput {
    /// A UDP socket `sink` owns.
    Socket(TimestampedReceiver),
    /// A capture of a port another program owns.
    Observer(PortObserver),
}

impl From<TimestampedReceiver> for SinkInput {
    fn from(rx: TimestampedReceiver) -> Self {
        SinkInput::Socket(rx)
    }
}

impl SinkInput {
    /// Opens what `target` names.
    pub fn open(target: &SinkTarget) -> Result<SinkInput> {
        Ok(match target {
            SinkTarget::Listen(addr) => SinkInput::Socket(bind_sink(*addr)?),
            SinkTarget::Observe { interface, port } => SinkInput::Observer(
                PortObserver::open(interface, *port, 256)
                    .with_context(|| format!("observing port {port} on {interface}"))?,
            ),
        })
    }

    fn set_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        match self {
            SinkInput::Socket(rx) => rx.set_timeout(timeout),
            SinkInput::Observer(o) => o.set_timeout(timeout),
        }
    }

    fn kernel_drops(&self) -> u64 {
        match self {
            SinkInput::Socket(rx) => rx.kernel_drops(),
            SinkInput::Observer(o) => o.kernel_drops(),
        }
    }

    /// Takes a batch and hands each packet to `visit`; returns how many came. A captured
    /// datagram of `k > 1` times `gso_segment` bytes comes as `k` segments.
    fn recv(
        &mut self,
        gso_segment: Option<usize>,
        mut visit: impl FnMut(Arrival<'_>),
    ) -> std::io::Result<usize> {
        match self {
            SinkInput::Socket(rx) => {
                let n = rx.recv_batch()?;
                for i in 0..n {
                    let d = rx.get(i).expect("received");
                    visit(Arrival::Datagram {
                        from: d.from,
                        data: d.data,
                        len: d.data.len(),
                        segments: 1,
                        truncated: d.truncated,
                        kernel_ns: d.kernel_ns,
                    });
                }
                Ok(n)
            }
            SinkInput::Observer(o) => {
                let n = o.recv_batch()?;
                for i in 0..n {
                    visit(match o.get(i).expect("received") {
                        (Ok(udp), kernel_ns) => {
                            let segments = gso_segment
                                .filter(|&g| g > 0 && udp.len > g && udp.len % g == 0)
                                .map_or(1, |g| udp.len / g);
                            Arrival::Datagram {
                                from: Some(udp.from),
                                data: udp.payload,
                                len: udp.len / segments,
                                segments: segments as u64,
                                truncated: false,
                                kernel_ns,
                            }
                        }
                        (Err(_), _) => Arrival::Malformed,
                    });
                }
                Ok(n)
            }
        }
    }
}

/// One thing `sink` received.
enum Arrival<'a> {
    /// A datagram, or `segments` of one GSO send: its (captured) bytes, the length of each,
    /// and the kernel's timestamp.
    Datagram {
        /// The sender, where known.
        from: Option<SocketAddr>,
        data: &'a [u8],
        len: usize,
        segments: u64,
        truncated: bool,
        kernel_ns: Option<u64>,
    },
    /// A captured packet that is not a readable UDP datagram.
    Malformed,
}

/// What `sink` measured (`sink --json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SinkReport {
    /// What it received from: `socket ADDR` or `capture IFACE:PORT`.
    pub source: String,
    /// Datagrams received (all of them, ours and foreign).
    pub packets: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Receive rate (payload bits over first-to-last arrival), bit/s.
    #[serde(deserialize_with = "crate::json::num")]
    pub rate_bps: f64,
    /// Mean inter-arrival time, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub interarrival_mean_us: f64,
    /// Its standard deviation, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub interarrival_stddev_us: f64,
    /// Median inter-arrival time, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub interarrival_p50_us: f64,
    /// 99th percentile, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub interarrival_p99_us: f64,
    /// Longest gap, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub interarrival_max_us: f64,
    /// Gaps longer than 1 ms: on a shared machine, mostly the sender's CPU taken away (they
    /// weigh heavily in the stddev of a stream 100 µs apart).
    pub gaps_over_1ms: u64,
    /// The most datagrams in a row with gaps of at most `burst_gap_us`.
    pub longest_burst: u64,
    /// The gap that counts as back to back, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub burst_gap_us: f64,
    /// Kobayashi's burstiness index B (Section V), `null` for too few datagrams.
    pub burstiness_index: Option<f64>,
    /// The virtual bottleneck B was computed for: `slow-start` or its rate in bit/s.
    pub bottleneck: String,
    /// The RTT B is normalised by, µs.
    #[serde(deserialize_with = "crate::json::num")]
    pub rtt_us: f64,
    /// Datagrams without the `pace` header (another sender's traffic, or garbage).
    pub foreign: u64,
    /// Datagrams longer than the receive buffer, cut.
    pub truncated: u64,
    /// Datagrams the kernel dropped on the socket (buffer full).
    pub kernel_drops: u64,
    /// `pace` datagrams missing from their flows' sequence (lost or still in flight). A flow
    /// is one sender's (its address and the header's flow number), counted from the first
    /// datagram the sink saw of it.
    pub missing: u64,
    /// `pace` datagrams that came after a later one of their flow.
    pub reordered: u64,
    /// `pace` datagrams that came again.
    #[serde(default)]
    pub duplicates: u64,
    /// Of the reordered, those further back than the sink tells duplicates in (1,024
    /// numbers) or from before their flow's first.
    #[serde(default)]
    pub late: u64,
    /// Datagrams without a kernel timestamp (measured at user-space receive time instead).
    pub untimestamped: u64,
    /// Captured packets that were not readable UDP datagrams (observe mode only).
    pub malformed: u64,
    /// |rate − expected| / expected, %, when the expected rate was given (`--rate`).
    pub conformance_pct: Option<f64>,
    /// `pace` flows seen (one per sender and flow number).
    pub flows: u64,
    /// The fewest and the most datagrams received from one `pace` flow (equal shares mean
    /// every flow got its rate).
    pub flow_packets_min: u64,
    /// See `flow_packets_min`.
    pub flow_packets_max: u64,
    /// The receive error that ended the run early (the interface went down, the socket
    /// failed), if one did: the counts above are what came before it.
    #[serde(default)]
    pub receive_error: Option<String>,
}

/// The most flows `sink` tracks sequences for (more are counted as foreign): `pace`'s most
/// flows from two senders, with room (each takes about 150 bytes).
const MAX_FLOWS: usize = 1 << 18;

/// Runs `sink` on an already bound receiver until its duration or idle time is up.
pub fn sink_on(input: &mut SinkInput, options: &SinkOptions) -> Result<SinkReport> {
    receive(input, options, &AtomicBool::new(false))
}

/// [`sink_on`], ending early (and reporting) once `stop` is set: it is read every 50 ms.
fn receive(input: &mut SinkInput, options: &SinkOptions, stop: &AtomicBool) -> Result<SinkReport> {
    check_sink(options)?;
    input.set_timeout(Duration::from_millis(50))?;
    let rtt_ns = options.rtt.as_nanos() as u64;
    let bottleneck = match options.bottleneck {
        Some(rate) => Bottleneck::Rate {
            bits_per_sec: rate.bits_per_sec(),
            rtt_ns,
        },
        None => Bottleneck::SlowStart { rtt_ns },
    };
    let mut index = BurstinessIndex::new(bottleneck, 20);
    let burst_gap_ns = options.burst_gap.as_nanos() as u64;
    let mut stats = ArrivalStats::new(burst_gap_ns);
    let (mut foreign, mut truncated, mut untimestamped, mut malformed) = (0u64, 0u64, 0u64, 0u64);
    let mut sequences = Sequences::new(MAX_FLOWS);
    let started = StdInstant::now();
    let mut last_arrival: Option<StdInstant> = None;
    let mut receive_error = None;
    loop {
        let now = StdInstant::now();
        if options
            .duration
            .is_some_and(|d| now.duration_since(started) >= d)
        {
            break;
        }
        if last_arrival.is_some_and(|t| now.duration_since(t) >= options.idle)
            || stop.load(Ordering::Relaxed)
        {
            break;
        }
        let got = input.recv(options.gso_segment, |arrival| {
            let Arrival::Datagram {
                from,
                data,
                len,
                segments,
                truncated: cut,
                kernel_ns,
            } = arrival
            else {
                malformed += 1;
                return;
            };
            let at = kernel_ns.unwrap_or_else(|| {
                untimestamped += 1;
                realtime_ns()
            });
            truncated += u64::from(cut);
            for _ in 0..segments {
                stats.push(at, len as u64);
                index.push(at, len as u64);
            }
            match PacketHeader::read(data) {
                Ok(h) if sequences.arrived(from, h.flow, h.seq, segments) => {}
                _ => foreign += segments,
            }
        });
        // What came before an error is reported with it, not thrown away.
        let n = match got {
            Ok(n) => n,
            Err(e) => {
                receive_error = Some(format!("{e:#}"));
                break;
            }
        };
        if n > 0 {
            last_arrival = Some(StdInstant::now());
        }
    }
    let us = |ns: f64| ns / 1000.0;
    let sequence = sequences.counts();
    let (flow_packets_min, flow_packets_max) = sequences.packets_per_flow();
    Ok(SinkReport {
        source: options.target.to_string(),
        packets: stats.packets(),
        bytes: stats.bytes(),
        rate_bps: stats.rate_bps().unwrap_or(f64::NAN),
        interarrival_mean_us: us(stats.interarrival_mean_ns().unwrap_or(f64::NAN)),
        interarrival_stddev_us: us(stats.interarrival_stddev_ns().unwrap_or(f64::NAN)),
        interarrival_p50_us: us(stats.interarrival_percentile_ns(50.0).unwrap_or(f64::NAN)),
        interarrival_p99_us: us(stats.interarrival_percentile_ns(99.0).unwrap_or(f64::NAN)),
        interarrival_max_us: us(stats.max_gap_ns().map_or(f64::NAN, |g| g as f64)),
        gaps_over_1ms: stats.gaps_over_ns(1_000_000),
        longest_burst: stats.longest_burst(),
        burst_gap_us: us(burst_gap_ns as f64),
        burstiness_index: index.index(),
        bottleneck: options.bottleneck.map_or_else(
            || "slow-start".to_string(),
            |r| r.bits_per_sec().to_string(),
        ),
        rtt_us: us(rtt_ns as f64),
        foreign,
        truncated,
        kernel_drops: input.kernel_drops(),
        missing: sequence.missing,
        reordered: sequence.reordered,
        duplicates: sequence.duplicates,
        late: sequence.late,
        untimestamped,
        malformed,
        conformance_pct: options
            .expected_rate
            .zip(stats.rate_bps())
            .map(|(want, got)| {
                let want = want.bits_per_sec() as f64;
                (got - want).abs() / want * 100.0
            }),
        flows: sequences.flows(),
        flow_packets_min,
        flow_packets_max,
        receive_error,
    })
}

/// Checks `sink`'s options: a duration and an idle time of 10 ms to 1 hour, an RTT of at
/// least 1 µs.
fn check_sink(options: &SinkOptions) -> Result<()> {
    if let Some(duration) = options.duration {
        crate::parse::check_run_duration(duration)?;
    }
    ensure!(
        options.idle >= Duration::from_millis(10) && options.idle <= Duration::from_secs(3600),
        "--idle {:?}: want 10 ms ..= 1 hour",
        options.idle
    );
    ensure!(
        options.rtt >= Duration::from_micros(1),
        "--rtt {:?}: want at least 1 µs",
        options.rtt
    );
    Ok(())
}

/// Opens `options.target` and runs `sink`; Ctrl-C ends the run and reports what came
/// ([`crate::interrupt`]).
pub fn sink(options: &SinkOptions) -> Result<SinkReport> {
    check_sink(options)?;
    let mut input = SinkInput::open(&options.target)?;
    if let (SinkTarget::Listen(asked), SinkInput::Socket(socket)) = (&options.target, &input) {
        crate::output::announce_port("sink", *asked, socket.local_addr());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let _interrupt =
        crate::interrupt::stop_on_interrupt(move || flag.store(true, Ordering::Relaxed));
    receive(&mut input, options, &stop)
}

impl Report for SinkReport {
    fn failure(&self) -> Option<String> {
        self.receive_error
            .as_ref()
            .map(|e| format!("sink stopped early by a receive error: {e}"))
    }

    fn text(&self) -> String {
        let r = self;
        let stopped = r
            .receive_error
            .as_ref()
            .map(|e| format!("stopped early by a receive error: {e}\n"))
            .unwrap_or_default();
        if r.packets == 0 {
            return format!("{}: no datagrams came\n{stopped}", r.source);
        }
        let mut out = format!(
            "{}: {} datagrams, {} bytes: {:.3} Mbit/s\n\
             inter-arrival: mean {:.2} µs, stddev {:.2} µs, p50 {:.2} µs, p99 {:.2} µs, max {:.1} µs, \
             {} over 1 ms\n\
             longest burst {} (gaps ≤ {:.1} µs); burstiness index B {} ({} bottleneck, RTT {:.0} µs)\n\
             missing {}, reordered {} ({} late), duplicates {}, kernel drops {}, foreign {}, \
             truncated {}, without timestamp {}, malformed {}\n",
            r.source,
            r.packets,
            r.bytes,
            r.rate_bps / 1e6,
            r.interarrival_mean_us,
            r.interarrival_stddev_us,
            r.interarrival_p50_us,
            r.interarrival_p99_us,
            r.interarrival_max_us,
            r.gaps_over_1ms,
            r.longest_burst,
            r.burst_gap_us,
            r.burstiness_index.map_or_else(
                || "— (too few datagrams)".to_string(),
                |b| format!("{b:.3e}")
            ),
            if r.bottleneck == "slow-start" {
                "slow-start".to_string()
            } else {
                format!("{} bit/s", r.bottleneck)
            },
            r.rtt_us,
            r.missing,
            r.reordered,
            r.late,
            r.duplicates,
            r.kernel_drops,
            r.foreign,
            r.truncated,
            r.untimestamped,
            r.malformed,
        );
        if let Some(c) = r.conformance_pct {
            out += &format!("off the expected rate by {c:.3} %\n");
        }
        if r.flows > 1 {
            out += &format!(
                "{} flows: {} to {} datagrams each\n",
                r.flows, r.flow_packets_min, r.flow_packets_max
            );
        }
        out + &stopped
    }
}

/// The socket `sink` would use, for callers that need its address before it runs.
pub fn bind_sink(listen: SocketAddr) -> Result<TimestampedReceiver> {
    TimestampedReceiver::bind(listen, 256, MAX_DATAGRAM)
        .with_context(|| format!("listening on {listen}"))
}
