//! How bursty a packet stream is, measured at the receiver.
//!
//! Two measures, both fed one arrival at a time (`push(arrival_ns, bytes)`) so they work on
//! live traffic and on a capture alike, in bounded memory:
//!
//! - [`BurstinessIndex`]: the burstiness index B of Kobayashi's Section V (equations 2–7).
//!   Arrivals are offered to a *virtual bottleneck*; B is the mean queueing delay a packet
//!   would see there, as a fraction of the RTT. A stream that never arrives faster than the
//!   bottleneck serves has B = 0; TCP slow start without pacing reaches about 0.3–0.5.
//! - [`ArrivalStats`]: rate, inter-arrival mean / stddev / percentiles, the longest gap and
//!   the longest back-to-back burst.
//!
//! ## The recurrence
//!
//! Equation 5 as printed reads `d_i = max(d_{i-2} + σ_{i-1} − (t_i − t_{i-1}), 0)`. The
//! definition ("a delay until the i-th packet starts transmission, taking into account the
//! accumulation of the packets sent before it") is the waiting time of a single-server queue,
//! Lindley's recurrence, which uses the *previous* packet's wait:
//!
//! ```text
//! d_i = max(d_{i-1} + σ_{i-1} − (t_i − t_{i-1}), 0)      d_0 = 0
//! ```
//!
//! This module implements that (`d_{i-1}`); the printed `d_{i-2}` is taken to be a typo. The
//! per-packet index is `b_i = d_i / RTT` (equation 6) and `B` is the mean of `b_i` over the
//! packets after the first `skip_first` (equation 7; the paper skips 20).
//!
//! σ_i is the time the virtual bottleneck takes to serve packet i:
//!
//! - [`Bottleneck::SlowStart`] (equations 2–4): the bottleneck grows with an ideal slow start,
//!   `BW(t) = 2^(t/RTT) · MSS / RTT`, so `σ_i = RTT / 2^(t_i/RTT)` with `t` counted from the
//!   first arrival. The packet size cancels out.
//! - [`Bottleneck::Rate`]: a fixed rate, `σ_i = 8 · bytes_i / rate`, for a stream paced at a
//!   constant rate.
//!
//! ```
//! use softtimer_net::burstiness::{Bottleneck, BurstinessIndex};
//! // 1 Gbit/s bottleneck, 1 ms RTT; 1250-byte packets need 10 µs each.
//! let bottleneck = Bottleneck::Rate { bits_per_sec: 1_000_000_000, rtt_ns: 1_000_000 };
//! let mut paced = BurstinessIndex::new(bottleneck, 0);
//! let mut burst = BurstinessIndex::new(bottleneck, 0);
//! for i in 0..100u64 {
//!     paced.push(i * 10_000, 1250); // exactly one service time apart
//!     burst.push(i * 10, 1250); // back to back, 10 ns apart
//! }
//! assert_eq!(paced.index(), Some(0.0));
//! assert!(burst.index().unwrap() > 0.4); // mean wait ≈ half of 100 × 10 µs, over 1 ms
//! ```

use hdrhistogram::Histogram;

/// The virtual bottleneck arrivals are offered to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bottleneck {
    /// Kobayashi's slow-start bottleneck: its rate doubles every RTT from one packet per RTT
    /// at the first arrival (equations 2–4).
    SlowStart {
        /// The round-trip time, ns.
        rtt_ns: u64,
    },
    /// A constant rate.
    Rate {
        /// The bottleneck's rate, bit/s.
        bits_per_sec: u64,
        /// The round-trip time the delay is normalised by, ns.
        rtt_ns: u64,
    },
}

impl Bottleneck {
    fn rtt_ns(self) -> u64 {
        match self {
            Bottleneck::SlowStart { rtt_ns } | Bottleneck::Rate { rtt_ns, .. } => rtt_ns,
        }
    }

    /// σ: how long the bottleneck takes to serve a packet of `bytes` arriving `since_first_ns`
    /// after the first arrival, ns.
    fn service_ns(self, since_first_ns: u64, bytes: u64) -> f64 {
        match self {
            Bottleneck::SlowStart { rtt_ns } => {
                let rtt = rtt_ns as f64;
                // 2^(t/RTT) overflows to infinity after ~1024 RTTs: σ is then 0, as it should be.
                rtt / (since_first_ns as f64 / rtt).exp2()
            }
            Bottleneck::Rate { bits_per_sec, .. } => bytes as f64 * 8e9 / bits_per_sec as f64,
        }
    }
}

/// Kobayashi's burstiness index B, computed online.
///
/// See the [module docs](self) for the definition and the choice of `d_{i-1}`. Arrival times
/// are in ns on any clock; an arrival earlier than the one before it (a clock step) counts as
/// simultaneous with it.
#[derive(Clone, Debug)]
pub struct BurstinessIndex {
    bottleneck: Bottleneck,
    skip_first: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    /// σ of the previous packet, ns.
    last_service_ns: f64,
    /// d of the previous packet, ns.
    last_delay_ns: f64,
    seen: u64,
    sum_b: f64,
    counted: u64,
}

impl BurstinessIndex {
    /// An index for arrivals offered to `bottleneck`, averaging over the packets after the
    /// first `skip_first` (the paper skips 20 to leave out the start-up).
    ///
    /// # Panics
    ///
    /// If the bottleneck's RTT or rate is zero: neither means anything, and callers take
    /// them from validated input.
    pub fn new(bottleneck: Bottleneck, skip_first: u64) -> BurstinessIndex {
        assert!(bottleneck.rtt_ns() > 0, "the RTT must be positive");
        if let Bottleneck::Rate { bits_per_sec, .. } = bottleneck {
            assert!(bits_per_sec > 0, "the bottleneck rate must be positive");
        }
        BurstinessIndex {
            bottleneck,
            skip_first,
            first_ns: None,
            last_ns: 0,
            last_service_ns: 0.0,
            last_delay_ns: 0.0,
            seen: 0,
            sum_b: 0.0,
            counted: 0,
        }
    }

    /// Offers one arrival of `bytes` at `arrival_ns`.
    pub fn push(&mut self, arrival_ns: u64, bytes: u64) {
        let first = *self.first_ns.get_or_insert(arrival_ns);
        let delay = if self.seen == 0 {
            0.0
        } else {
            let gap = arrival_ns.saturating_sub(self.last_ns) as f64;
            (self.last_delay_ns + self.last_service_ns - gap).max(0.0)
        };
        let arrival_ns = arrival_ns.max(self.last_ns);
        if self.seen >= self.skip_first {
            self.sum_b += delay / self.bottleneck.rtt_ns() as f64;
            self.counted += 1;
        }
        self.seen += 1;
        self.last_ns = arrival_ns;
        self.last_delay_ns = delay;
        self.last_service_ns = self.bottleneck.service_ns(arrival_ns - first, bytes);
    }

    /// The delay `d` of the last packet at the virtual bottleneck, ns.
    pub fn last_delay_ns(&self) -> f64 {
        self.last_delay_ns
    }

    /// Packets offered so far.
    pub fn packets(&self) -> u64 {
        self.seen
    }

    /// B, the mean of `b_i = d_i / RTT` over the packets after the skipped ones; `None`
    /// until one has been counted.
    pub fn index(&self) -> Option<f64> {
        (self.counted > 0).then(|| self.sum_b / self.counted as f64)
    }
}

/// Gaps longer than this (an hour) count as this long in the percentiles; the mean and
/// maximum stay exact.
const MAX_TRACKED_GAP_NS: u64 = 3_600_000_000_000;

/// Rate and inter-arrival statistics of a packet stream, in bounded memory.
///
/// Percentiles come from a histogram with three significant digits (they are off by at
/// most 0.2 %); the mean, stddev and maximum are exact.
///
/// ```
/// use softtimer_net::burstiness::ArrivalStats;
/// let mut stats = ArrivalStats::new(2_000); // gaps ≤ 2 µs are back to back
/// for i in 0..10u64 {
///     stats.push(i * 100_000, 1250); // 1250 B every 100 µs: 100 Mbit/s
/// }
/// stats.push(900_000 + 1_000, 1250); // one right behind the last
/// assert_eq!(stats.packets(), 11);
/// assert_eq!(stats.interarrival_mean_ns(), Some(90_100.0));
/// assert_eq!(stats.longest_burst(), 2);
/// assert_eq!(stats.max_gap_ns(), Some(100_000));
/// ```
#[derive(Clone, Debug)]
pub struct ArrivalStats {
    burst_gap_ns: u64,
    packets: u64,
    bytes: u64,
    first: Option<(u64, u64)>,
    last_ns: u64,
    gaps: Histogram<u64>,
    // Welford's running mean and sum of squared deviations of the gaps.
    gap_count: u64,
    gap_mean: f64,
    gap_m2: f64,
    max_gap_ns: u64,
    burst_len: u64,
    longest_burst: u64,
}

impl ArrivalStats {
    /// Empty statistics; gaps of at most `burst_gap_ns` make two packets part of one
    /// back-to-back burst.
    pub fn new(burst_gap_ns: u64) -> ArrivalStats {
        ArrivalStats {
            burst_gap_ns,
            packets: 0,
            bytes: 0,
            first: None,
            last_ns: 0,
            gaps: Histogram::new_with_bounds(1, MAX_TRACKED_GAP_NS, 3)
                .expect("valid histogram bounds"),
            gap_count: 0,
            gap_mean: 0.0,
            gap_m2: 0.0,
            max_gap_ns: 0,
            burst_len: 0,
            longest_burst: 0,
        }
    }

    /// Records one arrival. An arrival earlier than the previous one (a clock step) counts
    /// as a zero gap.
    pub fn push(&mut self, arrival_ns: u64, bytes: u64) {
        self.packets += 1;
        self.bytes += bytes;
        if self.first.is_none() {
            self.first = Some((arrival_ns, bytes));
            self.last_ns = arrival_ns;
            self.burst_len = 1;
            self.longest_burst = 1;
            return;
        }
        let gap = arrival_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(arrival_ns);
        self.gaps.saturating_record(gap);
        self.gap_count += 1;
        let delta = gap as f64 - self.gap_mean;
        self.gap_mean += delta / self.gap_count as f64;
        self.gap_m2 += delta * (gap as f64 - self.gap_mean);
        self.max_gap_ns = self.max_gap_ns.max(gap);
        if gap <= self.burst_gap_ns {
            self.burst_len += 1;
        } else {
            self.burst_len = 1;
        }
        self.longest_burst = self.longest_burst.max(self.burst_len);
    }

    /// Packets recorded.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Bytes recorded.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The receive rate in bit/s: the bytes after the first packet over the time from the
    /// first arrival to the last (a stream paced at R yields exactly R). `None` with fewer
    /// than two packets or no time between them.
    pub fn rate_bps(&self) -> Option<f64> {
        let (first_ns, first_bytes) = self.first?;
        let span = self.last_ns.checked_sub(first_ns).filter(|&s| s > 0)?;
        Some((self.bytes - first_bytes) as f64 * 8e9 / span as f64)
    }

    /// Mean gap between arrivals, ns; `None` with fewer than two packets.
    pub fn interarrival_mean_ns(&self) -> Option<f64> {
        (self.gap_count > 0).then_some(self.gap_mean)
    }

    /// Standard deviation of the gaps (population), ns; `None` with fewer than two packets.
    pub fn interarrival_stddev_ns(&self) -> Option<f64> {
        (self.gap_count > 0).then(|| (self.gap_m2 / self.gap_count as f64).sqrt())
    }

    /// The `percentile` (0–100) of the gaps, ns; `None` with fewer than two packets.
    pub fn interarrival_percentile_ns(&self, percentile: f64) -> Option<f64> {
        (self.gap_count > 0)
            .then(|| self.gaps.value_at_percentile(percentile.clamp(0.0, 100.0)) as f64)
    }

    /// How many gaps were longer than `threshold_ns` (to within the histogram's three
    /// significant digits): on a shared machine, the stalls of the sender's CPU.
    pub fn gaps_over_ns(&self, threshold_ns: u64) -> u64 {
        if self.max_gap_ns <= threshold_ns {
            return 0;
        }
        self.gaps
            .count_between(threshold_ns.saturating_add(1), self.gaps.max())
    }

    /// The longest gap, ns; `None` with fewer than two packets.
    pub fn max_gap_ns(&self) -> Option<u64> {
        (self.gap_count > 0).then_some(self.max_gap_ns)
    }

    /// The most packets in a row with gaps of at most the burst gap (1 for a single packet,
    /// 0 for none).
    pub fn longest_burst(&self) -> u64 {
        self.longest_burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: u64 = 1_000_000;

    fn rate_bottleneck(bits_per_sec: u64) -> Bottleneck {
        Bottleneck::Rate {
            bits_per_sec,
            rtt_ns: RTT,
        }
    }

    /// Equations 5–7 by hand: a 1 Gbit/s bottleneck serves 1250 B in 10,000 ns.
    #[test]
    fn hand_computed_rate_case() {
        let mut b = BurstinessIndex::new(rate_bottleneck(1_000_000_000), 0);
        // t:  0, 4000, 8000, 30000, 31000
        // d0 = 0
        // d1 = max(0 + 10000 − 4000, 0)  = 6000
        // d2 = max(6000 + 10000 − 4000, 0) = 12000
        // d3 = max(12000 + 10000 − 22000, 0) = 0
        // d4 = max(0 + 10000 − 1000, 0) = 9000
        let expected = [0.0, 6000.0, 12000.0, 0.0, 9000.0];
        for (&t, &d) in [0u64, 4000, 8000, 30_000, 31_000].iter().zip(&expected) {
            b.push(t, 1250);
            assert_eq!(b.last_delay_ns(), d, "at t = {t}");
        }
        let mean = expected.iter().sum::<f64>() / 5.0 / RTT as f64;
        assert!((b.index().unwrap() - mean).abs() < 1e-15);
    }

    /// The recurrence uses the previous packet's delay (Lindley), not the one before it:
    /// three packets arriving at once wait 0, σ and 2σ; the printed `d_{i-2}` would give the
    /// third one d_0 + σ − 0 = σ.
    #[test]
    fn uses_the_previous_delay() {
        let mut b = BurstinessIndex::new(rate_bottleneck(1_000_000_000), 0);
        for t in [0u64, 0, 0] {
            b.push(t, 1250);
        }
        // Three simultaneous packets wait 0, 10, 20 µs behind each other.
        assert_eq!(b.last_delay_ns(), 20_000.0);
    }

    /// Slow start by hand: σ_i = RTT / 2^(t_i/RTT).
    #[test]
    fn hand_computed_slow_start_case() {
        let mut b = BurstinessIndex::new(Bottleneck::SlowStart { rtt_ns: RTT }, 1);
        // t0 = 0: σ0 = RTT. t1 = RTT/2: d1 = RTT − RTT/2 = RTT/2; σ1 = RTT / √2.
        b.push(0, 1500);
        b.push(RTT / 2, 1500);
        assert_eq!(b.last_delay_ns(), RTT as f64 / 2.0);
        // t2 = RTT: d2 = RTT/2 + RTT/√2 − RTT/2 = RTT/√2.
        b.push(RTT, 1500);
        let d2 = RTT as f64 / 2f64.sqrt();
        assert!((b.last_delay_ns() - d2).abs() < 1e-6);
        // Skipping the first packet: B = (0.5 + 1/√2) / 2.
        let expected = (0.5 + 1.0 / 2f64.sqrt()) / 2.0;
        assert!((b.index().unwrap() - expected).abs() < 1e-12);
    }

    /// A ramp that sends at g = RTT / cwnd, cwnd doubling each RTT, never outruns the
    /// slow-start bottleneck: B is exactly zero.
    #[test]
    fn perfectly_paced_ramp_is_zero() {
        const RTT: u64 = 1 << 20; // so that RTT / cwnd is exact
        let mut b = BurstinessIndex::new(Bottleneck::SlowStart { rtt_ns: RTT }, 20);
        let mut t = 0u64;
        let mut n = 0;
        for round in 0..12u32 {
            let cwnd = 1u64 << round;
            let gap = RTT / cwnd;
            for _ in 0..cwnd {
                b.push(t, 1500);
                t += gap;
                n += 1;
            }
        }
        assert!(n > 4000);
        assert_eq!(b.index(), Some(0.0));
    }

    /// The same ramp sent as a burst at the start of each RTT (unpaced slow start) scores
    /// near the paper's 0.3.
    #[test]
    fn unpaced_ramp_is_bursty() {
        let mut b = BurstinessIndex::new(Bottleneck::SlowStart { rtt_ns: RTT }, 20);
        for round in 0..12u64 {
            let cwnd = 1u64 << round;
            for k in 0..cwnd {
                b.push(round * RTT + k * 100, 1500); // 100 ns apart
            }
        }
        let index = b.index().unwrap();
        assert!(index > 0.1 && index < 1.0, "B = {index}");
    }

    #[test]
    fn too_few_packets_have_no_index() {
        let mut b = BurstinessIndex::new(rate_bottleneck(1_000_000), 20);
        assert_eq!(b.index(), None);
        for t in 0..20 {
            b.push(t, 100);
        }
        assert_eq!(b.index(), None);
        b.push(20, 100);
        assert!(b.index().is_some());
    }

    #[test]
    fn stats_of_an_even_stream() {
        let mut s = ArrivalStats::new(1_000);
        assert_eq!(s.rate_bps(), None);
        assert_eq!(s.interarrival_mean_ns(), None);
        assert_eq!(s.longest_burst(), 0);
        for i in 0..1000u64 {
            s.push(1_000_000 + i * 117_760, 1472); // 1472 B at 100 Mbit/s
        }
        assert!((s.rate_bps().unwrap() - 100e6).abs() < 1.0);
        assert_eq!(s.interarrival_mean_ns(), Some(117_760.0));
        assert_eq!(s.interarrival_stddev_ns(), Some(0.0));
        let p99 = s.interarrival_percentile_ns(99.0).unwrap();
        assert!((p99 - 117_760.0).abs() / 117_760.0 < 2e-3, "p99 {p99}");
        assert_eq!(s.longest_burst(), 1);
        assert_eq!(s.gaps_over_ns(1_000_000), 0);
        // A 5 ms stall of the sender, then the stream goes on.
        s.push(1_000_000 + 999 * 117_760 + 5_000_000, 1472);
        s.push(1_000_000 + 999 * 117_760 + 5_117_760, 1472);
        assert_eq!(s.gaps_over_ns(1_000_000), 1);
        assert_eq!(s.gaps_over_ns(200_000), 1);
        assert_eq!(s.gaps_over_ns(100_000), 1001); // every gap
    }

    #[test]
    fn bursts_and_clock_steps() {
        let mut s = ArrivalStats::new(1_000);
        for t in [0u64, 500, 1000, 10_000, 9_000, 9_500, 50_000] {
            s.push(t, 10);
        }
        // Gaps: 500, 500 (a burst of 3), 9000, then two arrivals before the latest one
        // (9,000 and 9,500 after 10,000) count as zero gaps (a burst of 3 again), then 40,000.
        assert_eq!(s.longest_burst(), 3);
        assert_eq!(s.max_gap_ns(), Some(40_000));
        assert_eq!(s.packets(), 7);
        assert_eq!(s.bytes(), 70);
    }

    proptest::proptest! {
        /// B is never negative, and a stream spaced at least σ apart scores zero.
        #[test]
        fn index_bounds(gaps in proptest::collection::vec(0u64..50_000, 1..300)) {
            let bottleneck = rate_bottleneck(1_000_000_000);
            let mut b = BurstinessIndex::new(bottleneck, 0);
            let mut spaced = BurstinessIndex::new(bottleneck, 0);
            let (mut t, mut u) = (0u64, 0u64);
            for g in gaps {
                b.push(t, 1250);
                spaced.push(u, 1250);
                t += g;
                u += g.max(10_000);
            }
            proptest::prop_assert!(b.index().unwrap() >= 0.0);
            proptest::prop_assert_eq!(spaced.index(), Some(0.0));
        }

        /// The online mean and stddev match a direct computation.
        #[test]
        fn moments_match(gaps in proptest::collection::vec(0u64..1_000_000, 1..500)) {
            let mut s = ArrivalStats::new(0);
            let mut t = 0u64;
            s.push(t, 1);
            for &g in &gaps {
                t += g;
                s.push(t, 1);
            }
            let n = gaps.len() as f64;
            let mean = gaps.iter().sum::<u64>() as f64 / n;
            let var = gaps.iter().map(|&g| (g as f64 - mean).powi(2)).sum::<f64>() / n;
            let got_mean = s.interarrival_mean_ns().unwrap();
            let got_sd = s.interarrival_stddev_ns().unwrap();
            proptest::prop_assert!((got_mean - mean).abs() <= 1e-6 * mean.max(1.0));
            proptest::prop_assert!((got_sd - var.sqrt()).abs() <= 1e-6 * var.sqrt().max(1.0));
            proptest::prop_assert_eq!(s.max_gap_ns(), gaps.iter().copied().max());
        }
    }
}
