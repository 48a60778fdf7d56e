//! The path emulator's bottleneck beside the kernel's `tbf` at the same rate and queue
//! limit, and the emulator's delay error from 10 Mbit/s up: a constant-rate UDP offer of
//! 1.2 × the rate, measured at the receiving socket (rate held, inter-arrival spread) and
//! by each bottleneck's own drop count.
//!
//! The emulator adds a 1 ms one-way delay (its delay error is measured on it); `tbf` has no
//! delay (this kernel has no `netem` to give it one), so the comparison is of the rate and
//! spacing a bottleneck imposes, which is what the two have in common.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use softtimer_net::burstiness::ArrivalStats;
use softtimer_net::path::{LinkConfig, QueueLimit};
use softtimer_rt::SpinWindow;

use crate::harness::pin_to;
use softtimers_tools::netns::{End, VethLink, spawn_in};
use softtimers_tools::path::{
    ADDR_A, ADDR_B, COMMAND_SPIN, EmulatorOptions, PathSpec, RunningPath, Side,
};

/// The CPU the sender and receiver threads share; the emulator has the other one.
const TRAFFIC_CPU: usize = 1;
const EMULATOR_CPU: usize = 0;
/// IP packets of 1500 bytes.
const PAYLOAD: usize = 1472;
const PORT: u16 = 7010;
/// The drop-tail queue of both bottlenecks.
pub const QUEUE_BYTES: u64 = 64_000;

/// One bottleneck at one rate, one round.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BottleneckRow {
    /// `emulator` (spinning up to 1 ms before a packet is due), `emulator-calibrated`
    /// (the event loop's calibrated spin window) or `tbf`.
    pub bottleneck: String,
    /// The configured rate, bit/s.
    pub rate_bps: f64,
    /// The queue limit, bytes.
    pub queue_bytes: u64,
    /// Round (rounds interleave the two).
    pub round: usize,
    /// What the sender offered, bit/s (IP bytes).
    #[serde(deserialize_with = "crate::summary::num")]
    pub offered_bps: f64,
    /// What the receiving socket got once the queue stood, bit/s (IP bytes).
    #[serde(deserialize_with = "crate::summary::num")]
    pub delivered_bps: f64,
    /// `delivered_bps` against the configured rate, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub rate_error_pct: f64,
    /// Inter-arrival stddev at the receiving socket, µs (the ideal is 0: one packet every
    /// 12 000 / rate seconds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub interarrival_stddev_us: f64,
    /// Inter-arrival 99th percentile at the receiving socket, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub interarrival_p99_us: f64,
    /// Packets the bottleneck dropped.
    #[serde(deserialize_with = "crate::summary::num")]
    pub drops: f64,
    /// The emulator's delay error, p99, µs (`null` for `tbf`, which delays nothing).
    #[serde(deserialize_with = "crate::summary::num")]
    pub delay_error_p99_us: f64,
}

/// The rates measured.
pub fn rates(quick: bool) -> Vec<u64> {
    if quick {
        vec![10_000_000, 100_000_000]
    } else {
        vec![10_000_000, 100_000_000, 1_000_000_000]
    }
}

fn offer_seconds(quick: bool) -> f64 {
    if quick { 0.5 } else { 1.5 }
}

/// What the receiving socket saw.
struct Received {
    delivered_bps: f64,
    stddev_us: f64,
    p99_us: f64,
}

/// Offers 1.2 × `rate_bps` from `from_ns` to `to` (bound in `to_ns`) for `seconds`;
/// returns the offered rate and what arrived after the first 100 ms.
fn offer(
    from_ns: &str,
    from: Ipv4Addr,
    to_ns: &str,
    to: Ipv4Addr,
    rate_bps: u64,
    seconds: f64,
) -> Result<(f64, Received)> {
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let sink = spawn_in(to_ns, move || -> Result<Received> {
        let _pin = pin_to(TRAFFIC_CPU);
        let s = UdpSocket::bind((to, PORT)).context("binding the sink")?;
        s.set_read_timeout(Some(Duration::from_millis(20)))?;
        let _ = ready_tx.send(());
        let mut buf = [0u8; 2048];
        let mut first: Option<Instant> = None;
        let mut stats = ArrivalStats::new(1_000);
        while !st.load(Ordering::Relaxed) {
            let Ok(n) = s.recv(&mut buf) else { continue };
            let now = Instant::now();
            let t0 = *first.get_or_insert(now);
            let since = now - t0;
            // Leave out the first 100 ms (the queue builds; at 10 Mbit/s a 1.2 × offer fills
            // 64 KB in about 250 ms, which the 1.5 s full run outlasts).
            if since >= Duration::from_millis(100) {
                stats.push(since.as_nanos() as u64, n as u64 + 28);
            }
        }
        let ns = |v: Option<f64>| v.map_or(f64::NAN, |v| v / 1000.0);
        Ok(Received {
            delivered_bps: stats.rate_bps().unwrap_or(f64::NAN),
            stddev_us: ns(stats.interarrival_stddev_ns()),
            p99_us: ns(stats.interarrival_percentile_ns(99.0)),
        })
    })?;
    // Stops the sink however this function returns.
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop_sink = StopOnDrop(Arc::clone(&stop));
    let _ = ready_rx.recv_timeout(Duration::from_secs(2));
    let blaster = spawn_in(from_ns, move || -> Result<f64> {
        let _pin = pin_to(TRAFFIC_CPU);
        let s = UdpSocket::bind((from, 0)).context("binding the sender")?;
        let to = SocketAddr::from((to, PORT));
        let payload = [0x5au8; PAYLOAD];
        let gap = Duration::from_secs_f64((PAYLOAD + 28) as f64 * 8.0 / (rate_bps as f64 * 1.2));
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(seconds);
        let (mut sent, mut due) = (0u64, start);
        while due < end {
            // Send everything due, then sleep to the next: bursts when behind, never
            // more than the offered rate on average.
            let now = Instant::now();
            while due <= now && due < end {
                if s.send_to(&payload, to).is_ok() {
                    sent += 1;
                }
                due += gap;
            }
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        Ok(sent as f64 * (PAYLOAD + 28) as f64 * 8.0 / start.elapsed().as_secs_f64())
    })?;
    let offered = blaster.join()??;
    std::thread::sleep(Duration::from_millis(200));
    drop(stop_sink);
    let received = sink.join()??;
    Ok((offered, received))
}

fn row(
    bottleneck: &str,
    rate_bps: u64,
    round: usize,
    offered: f64,
    got: &Received,
    drops: f64,
    delay_error_p99_us: f64,
) -> BottleneckRow {
    BottleneckRow {
        bottleneck: bottleneck.into(),
        rate_bps: rate_bps as f64,
        queue_bytes: QUEUE_BYTES,
        round,
        offered_bps: offered,
        delivered_bps: got.delivered_bps,
        rate_error_pct: (got.delivered_bps / rate_bps as f64 - 1.0) * 100.0,
        interarrival_stddev_us: got.stddev_us,
        interarrival_p99_us: got.p99_us,
        drops,
        delay_error_p99_us,
    }
}

/// The emulator's spin windows measured: the `path` command's default, and the event
/// loop's calibrated window (what the QUIC runs use, whose emulator shares its CPU).
pub const EMULATOR_ARMS: [(&str, SpinWindow); 2] = [
    ("emulator", SpinWindow::Fixed(COMMAND_SPIN)),
    ("emulator-calibrated", SpinWindow::Calibrated),
];

/// The emulator at `rate_bps` with a 1 ms delay.
fn through_emulator(
    name: &str,
    spin: SpinWindow,
    rate_bps: u64,
    round: usize,
    quick: bool,
) -> Result<BottleneckRow> {
    let forward = LinkConfig {
        delay: Duration::from_millis(1),
        rate: Some(softtimer_net::Rate::from_bits_per_sec(rate_bps)?),
        queue: QueueLimit::Bytes(QUEUE_BYTES),
        loss: 0.0,
    };
    let back = LinkConfig {
        rate: None,
        ..forward
    };
    let path = RunningPath::start_with(
        "bn",
        PathSpec {
            a_to_b: forward,
            b_to_a: back,
        },
        EmulatorOptions {
            cpu: Some(EMULATOR_CPU),
            spin,
            ..EmulatorOptions::default()
        },
    )?;
    let (offered, got) = offer(
        path.namespace(Side::A),
        ADDR_A,
        path.namespace(Side::B),
        ADDR_B,
        rate_bps,
        offer_seconds(quick),
    )?;
    let report = path.finish()?;
    let d = &report.a_to_b;
    Ok(row(
        name,
        rate_bps,
        round,
        offered,
        &got,
        d.queue_drops as f64,
        d.delay_error.p99_us.unwrap_or(f64::NAN),
    ))
}

/// The kernel's `tbf` at `rate_bps` on a veth pair.
fn through_tbf(rate_bps: u64, round: usize, quick: bool) -> Result<BottleneckRow> {
    let mut link = VethLink::create("tbf")?;
    link.set_tbf(rate_bps, QUEUE_BYTES)?;
    let (offered, got) = offer(
        link.namespace(End::Sender),
        link.sender_addr,
        link.namespace(End::Receiver),
        link.receiver_addr,
        rate_bps,
        offer_seconds(quick),
    )?;
    let drops = link.qdisc_drops()? as f64;
    Ok(row("tbf", rate_bps, round, offered, &got, drops, f64::NAN))
}

/// Every rate, both bottlenecks, `rounds` interleaved rounds.
pub fn measure(
    quick: bool,
    rounds: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<BottleneckRow>> {
    let mut rows = Vec::new();
    for round in 0..rounds {
        for rate in rates(quick) {
            let label = format!("{} Mbit/s", rate / 1_000_000);
            let arms = EMULATOR_ARMS.len() + 1;
            for k in 0..arms {
                match EMULATOR_ARMS.get((k + round) % arms) {
                    Some(&(name, spin)) => {
                        progress(&format!("{name} at {label}"));
                        rows.push(through_emulator(name, spin, rate, round, quick)?);
                    }
                    None => {
                        progress(&format!("tbf at {label}"));
                        rows.push(through_tbf(rate, round, quick)?);
                    }
                }
            }
        }
    }
    Ok(rows)
}

/// Seconds `measure` takes, for the progress estimate.
pub fn expected_seconds(quick: bool, rounds: usize) -> f64 {
    (rates(quick).len() * (EMULATOR_ARMS.len() + 1) * rounds) as f64 * (offer_seconds(quick) + 0.25)
}
