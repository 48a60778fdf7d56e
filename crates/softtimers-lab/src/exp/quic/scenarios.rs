//! The QUIC matrix's scenarios: the bulk transfers behind a bottleneck (rate, RTT, queue as a
//! fraction of the BDP), request/response under loss, the timer-driven workloads, and the
//! stacks each runs on.

use std::time::Duration;

use softtimer_net::path::QueueLimit;
use softtimers_tools::path::PathSpec;
use softtimers_tools::quic::Stack;

use super::link;

/// The bulk scenario the targets read.
pub(super) const BULK_50M_SMALL_QUEUE: &str = "bulk-50M-20ms-0.25bdp";

/// A bulk scenario: a bottleneck of `mbit` Mbit/s, an RTT, a queue of a fraction of the BDP.
pub(super) struct Bulk {
    pub(super) mbit: u32,
    pub(super) rtt_ms: u64,
    pub(super) bdp_fraction: f64,
    /// The download of a full run: about 2 s at what the QUIC stacks reach in the first
    /// scenarios, about 1 s in the matrix's other corners when they were sized (the stacks
    /// moved 190–340 Mbit/s at 500 Mbit/s then; 0.3–0.7 s a run in the full runs since),
    /// except where bursts overrun a two-packet queue.
    pub(super) download_bytes: u64,
    /// A run's typical transfer time, s, over the stacks and the variants (for the time
    /// estimate; measured in a full lab run).
    pub(super) expected_s: f64,
}

impl Bulk {
    pub(super) const fn new(
        mbit: u32,
        rtt_ms: u64,
        bdp_fraction: f64,
        download_bytes: u64,
        expected_s: f64,
    ) -> Self {
        Bulk {
            mbit,
            rtt_ms,
            bdp_fraction,
            download_bytes,
            expected_s,
        }
    }
    /// The scenario's name in the rows, e.g. `bulk-50M-20ms-0.25bdp`.
    pub(super) fn name(&self) -> String {
        format!(
            "bulk-{}M-{}ms-{}bdp",
            self.mbit, self.rtt_ms, self.bdp_fraction
        )
    }
    /// The rate as the path takes it.
    pub(super) fn rate(&self) -> String {
        format!("{}M", self.mbit)
    }
    pub(super) fn rate_bps(&self) -> f64 {
        f64::from(self.mbit) * 1e6
    }
    pub(super) fn rtt(&self) -> Duration {
        Duration::from_millis(self.rtt_ms)
    }
}

pub(super) fn bulks(quick: bool) -> Vec<Bulk> {
    // The target's scenario (BULK_50M_SMALL_QUEUE) first: the quick lab runs only it.
    let mut v = vec![Bulk::new(50, 20, 0.25, 12_500_000, 2.2)];
    if !quick {
        v.extend([
            // Half the target scenario's transfer (a second at the rate after slow start):
            // this corner is read beside it, not against a target, and the time saved pays
            // for the loopback median's runs.
            Bulk::new(50, 20, 1.0, 6_250_000, 1.0),
            // The other corners of the matrix (50 Mbit/s at 1 ms, 500 Mbit/s at 20 ms), with
            // transfers of about 1 s plus slow start where the stacks reach the rate, to keep
            // the full lab under 30 minutes. At 50 Mbit/s, RTT 1 ms and 0.25 BDP (two packets
            // of queue) every stack but per-packet pacing reaches 5–9 Mbit/s, so its transfer
            // is the smallest (3 MB, about 3 s a run; it paid for the idle policy's rows in the
            // lab's time).
            Bulk::new(50, 1, 0.25, 3_125_000, 2.7),
            Bulk::new(50, 1, 1.0, 6_250_000, 1.4),
            Bulk::new(500, 1, 1.0, 50_000_000, 0.9),
            // A 15.6 KB queue, 12 of QUIC's 1228-byte IP packets: what a burst of GSO
            // segments overruns. In `quic11` (docs/RESULTS.md) stock quinn and the kernel's
            // TCP reached about 80 Mbit/s here (2.5 s for 25 MB), per-packet pacing about 190
            // (1 s).
            Bulk::new(500, 1, 0.25, 25_000_000, 1.2),
            Bulk::new(500, 20, 0.25, 25_000_000, 0.5),
            Bulk::new(500, 20, 1.0, 25_000_000, 0.5),
        ]);
    }
    v
}

pub(super) const BULK_STACKS: [Stack; 4] = [
    Stack::QuinnTokio,
    Stack::Soft,
    Stack::SoftPaced,
    Stack::KernelTcp,
];

/// The stacks of a bulk scenario: the target's scenario also runs `soft-1ms` (quinn's pacer
/// on the soft-timer loop with every timer rounded up to 1 ms), which separates what the
/// timers' precision does to quinn's own pacer from everything else the runtimes differ in,
/// and `quinn-async` (unchanged quinn on `softtimer-async`).
pub(super) fn bulk_stacks(b: &Bulk) -> Vec<Stack> {
    let mut stacks = BULK_STACKS.to_vec();
    if b.name() == BULK_50M_SMALL_QUEUE {
        stacks.extend([Stack::Soft1ms, Stack::QuinnAsync]);
    }
    stacks
}

pub(super) const RR: &str = "rr-200us-1%";

/// Request/response runs on these; E16 adds `soft-1ms` and the tail probe's effect.
pub(super) const RR_STACKS: [Stack; 3] = [Stack::QuinnTokio, Stack::Soft, Stack::SoftPaced];

/// `soft-paced` variants run beside the first bulk scenario: (name, arguments of both
/// sides). A system call and a wake-up per datagram are what per-packet pacing costs in user
/// space, besides the idle spin before quinn's own timers (the driver does not spin before a
/// departure); these take one or both away.
pub(super) const PACING_VARIANTS: [(&str, &[&str]); 3] = [
    ("spin-0", &["--spin", "0"]),
    ("2-per-departure", &["--per-departure", "2"]),
    (
        "2-per-departure-spin-0",
        &["--per-departure", "2", "--spin", "0"],
    ),
];

/// Workloads where only a timer wakes the sender: application-limited bursts, thinned ACKs
/// and a transfer after idle, each through 50 Mbit/s, RTT 20 ms, a queue of one BDP.
pub(super) const TIMER_STACKS: [Stack; 4] = [
    Stack::QuinnTokio,
    Stack::Soft,
    Stack::SoftPaced,
    Stack::Soft1ms,
];

pub(super) const APP_LIMITED: &str = "app-256k-50ms";

pub(super) const THIN_ACKS: &str = "thin-acks-50M-20ms";

/// A 100-packet transfer after 1 s of idle, on a connection that moved 2 MB before: the
/// window quinn's CUBIC kept goes out behind its pacer (or ours), which only timers clock.
pub(super) const AFTER_IDLE: &str = "after-idle-100pkt";

/// The bytes the connection moves before its idle period, in `after-idle-100pkt`.
pub(super) const AFTER_IDLE_WARMUP: u64 = 2_000_000;

/// The timer-driven scenarios, whose rows the report tables apart from the bulk ones.
pub(super) fn timer_driven(scenario: &str) -> bool {
    [APP_LIMITED, THIN_ACKS, AFTER_IDLE].contains(&scenario)
}

pub(super) fn timer_spec() -> PathSpec {
    let rtt = Duration::from_millis(20);
    let bdp = (50e6 / 8.0 * rtt.as_secs_f64()) as u64;
    PathSpec {
        a_to_b: link(rtt / 2, None, QueueLimit::Packets(10_000), 0.0),
        b_to_a: link(rtt / 2, Some("50M"), QueueLimit::Bytes(bdp), 0.0),
    }
}

/// (scenario, server arguments, client arguments).
pub(super) fn timer_runs(quick: bool) -> Vec<(&'static str, Vec<&'static str>, Vec<String>)> {
    let bursts = if quick { 10 } else { 40 };
    // ACK every 10th packet, and within 10 ms, asked of the peer by both ends.
    let thin = ["--ack-every", "10", "--max-ack-delay", "10ms"];
    let app_limited: Vec<String> = [
        "--download",
        "262144",
        "--requests",
        &bursts.to_string(),
        "--interval",
        "50ms",
    ]
    .map(String::from)
    .to_vec();
    let mut thin_client: Vec<String> = thin.map(String::from).to_vec();
    thin_client.push("--download".into());
    thin_client.push(((50e6 / 8.0 * if quick { 0.6 } else { 2.0 }) as u64).to_string());
    let after_idle: Vec<String> = [
        "--warmup".into(),
        AFTER_IDLE_WARMUP.to_string(),
        "--idle".into(),
        "1s".into(),
        "--download".into(),
        "120000".into(),
    ]
    .to_vec();
    vec![
        (APP_LIMITED, vec![], app_limited),
        (THIN_ACKS, thin.to_vec(), thin_client),
        (AFTER_IDLE, vec![], after_idle),
    ]
}

pub(super) fn bulk_bytes(b: &Bulk, quick: bool) -> u64 {
    if quick {
        // 0.6 s at the bottleneck rate.
        (b.rate_bps() / 8.0 * 0.6) as u64
    } else {
        b.download_bytes
    }
}

pub(super) fn rr_requests(quick: bool) -> u64 {
    if quick { 300 } else { 2000 }
}

pub(super) fn rr_spec() -> PathSpec {
    let l = link(
        Duration::from_micros(100),
        None,
        QueueLimit::Packets(1000),
        0.01,
    );
    PathSpec {
        a_to_b: l,
        b_to_a: l,
    }
}

pub(super) fn rr_args(quick: bool) -> Vec<String> {
    vec![
        "--download".into(),
        "10000".into(),
        "--upload".into(),
        "1000".into(),
        "--requests".into(),
        rr_requests(quick).to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_scenarios_cover_the_matrix_under_their_row_names() {
        let names: Vec<String> = bulks(false).iter().map(Bulk::name).collect();
        assert_eq!(
            names,
            [
                "bulk-50M-20ms-0.25bdp",
                "bulk-50M-20ms-1bdp",
                "bulk-50M-1ms-0.25bdp",
                "bulk-50M-1ms-1bdp",
                "bulk-500M-1ms-1bdp",
                "bulk-500M-1ms-0.25bdp",
                "bulk-500M-20ms-0.25bdp",
                "bulk-500M-20ms-1bdp",
            ]
        );
        assert_eq!(bulks(true)[0].name(), BULK_50M_SMALL_QUEUE);
        let b = &bulks(false)[4];
        assert_eq!(
            (b.rate(), b.rate_bps(), b.rtt()),
            ("500M".to_string(), 500e6, Duration::from_millis(1))
        );
    }
}
