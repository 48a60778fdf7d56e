//! Per-packet pacing of the datagrams quinn-proto produces (sans-IO).
//!
//! quinn-proto paces with a token bucket that refills for 2 ms and then lets a burst of 10 to
//! 256 datagrams go at once, because its authors could not count on a timer finer than 1 ms.
//! [`PacketPacer`] does what Linux's `fq` does for the kernel's TCP instead: every datagram (or
//! small GSO batch, as the driver is configured) is stamped with its own departure time at
//! the connection's pacing rate (1.25 × cwnd / srtt,
//! from quinn-proto's `stats()`), and one [`DepartureQueue`] shared by all connections
//! releases it at that time. The driver asks quinn-proto for a connection's next datagram
//! only when that connection has nothing waiting in the queue, so quinn-proto sees a packet
//! as sent (and times its RTT sample from there) at most one gap before it leaves.
//!
//! ```
//! use softtimer::{Instant, Span};
//! use softtimer_quic::pacing::PacketPacer;
//!
//! let hz = 1_000_000_000; // ticks are nanoseconds
//! let t0 = Instant::from_ticks(0);
//! let mut pacer = PacketPacer::new(t0, hz);
//! // cwnd 100 kB over a 10 ms RTT: 1.25 × 80 Mbit/s = 100 Mbit/s, 1250 B every 100 µs.
//! pacer.set_window(7, 100_000, Span::from_ticks(10_000_000));
//! for seq in 0..3u32 {
//!     pacer.push(7, t0, 1250, seq);
//! }
//! let mut out = Vec::new();
//! pacer.release(t0 + Span::from_ticks(150_000), &mut out);
//! assert_eq!(out.iter().map(|(_, p, _)| *p).collect::<Vec<_>>(), vec![0, 1]);
//! assert_eq!(pacer.next_departure(), Some(t0 + Span::from_ticks(200_000)));
//! ```

use std::collections::HashMap;

use softtimer::{Instant, Span};
use softtimer_net::Rate;
use softtimer_net::departure::{DepartureQueue, FlowStamper};

/// The pacing gain over one congestion window per smoothed RTT (RFC 9002, Section 7.7).
pub const PACING_GAIN_PERCENT: u64 = 125;

/// Width of one slot of the departure queue's ring.
const SLOT: std::time::Duration = std::time::Duration::from_micros(10);
/// Slots in the ring: a 40 ms horizon; later packets wait in its overflow heap.
const SLOTS: usize = 4096;

/// Datagrams of many connections, each released at its own departure time.
///
/// `K` names a connection, `P` is the datagram (or whatever the caller sends later).
pub struct PacketPacer<K, P> {
    hz: u64,
    queue: DepartureQueue<(K, P, Instant)>,
    flows: HashMap<K, Flow>,
}

struct Flow {
    stamper: FlowStamper,
    queued: usize,
}

impl<K: Copy + Eq + std::hash::Hash, P> PacketPacer<K, P> {
    /// An empty pacer whose clock runs at `hz` and starts at `start`.
    pub fn new(start: Instant, hz: u64) -> Self {
        let slot = Span::from_duration(SLOT, hz).max(Span::from_ticks(1));
        let queue = DepartureQueue::new(start, slot, SLOTS).expect("non-zero slot and ring");
        PacketPacer {
            hz,
            queue,
            flows: HashMap::new(),
        }
    }

    /// The width of one slot: how far apart two packets may leave from their stamps when
    /// both fall due in one pass.
    pub fn slot(&self) -> Span {
        Span::from_duration(SLOT, self.hz).max(Span::from_ticks(1))
    }

    fn flow(&mut self, key: K) -> &mut Flow {
        let hz = self.hz;
        self.flows.entry(key).or_insert_with(|| Flow {
            stamper: FlowStamper::new(hz),
            queued: 0,
        })
    }

    /// Sets `key`'s rate to [`PACING_GAIN_PERCENT`] of one `cwnd` (bytes) per `srtt`; it
    /// applies from the next packet pushed. A zero window or RTT, or a rate past what a
    /// [`Rate`] holds (over 1 Tbit/s: a large window over a loopback RTT), leaves the flow
    /// unpaced. Returns the rate set, `None` when unpaced.
    pub fn set_window(&mut self, key: K, cwnd: u64, srtt: Span) -> Option<Rate> {
        let hz = self.hz;
        let flow = self.flow(key);
        if cwnd == 0 || srtt == Span::ZERO {
            flow.stamper.clear_rate();
            return None;
        }
        let bps = u128::from(cwnd) * 8 * u128::from(PACING_GAIN_PERCENT) * u128::from(hz)
            / 100
            / u128::from(srtt.ticks());
        // At least 1 bit/s: a window that small over an RTT that long is a slow flow, not
        // an unpaced one.
        match Rate::from_bits_per_sec(u64::try_from(bps).unwrap_or(u64::MAX).max(1)) {
            Ok(rate) => {
                flow.stamper.set_rate(rate);
                Some(rate)
            }
            Err(_) => {
                flow.stamper.clear_rate();
                None
            }
        }
    }

    /// Leaves `key` unpaced: its packets leave as soon as they are pushed.
    pub fn clear_rate(&mut self, key: K) {
        self.flow(key).stamper.clear_rate();
    }

    /// `key`'s rate in force, if paced.
    pub fn rate(&self, key: K) -> Option<Rate> {
        self.flows.get(&key).and_then(|f| f.stamper.rate())
    }

    /// Queues a datagram of `bytes` for `key`, stamped after the ones before it; returns its
    /// departure time.
    pub fn push(&mut self, key: K, now: Instant, bytes: u64, packet: P) -> Instant {
        let flow = self.flow(key);
        let at = flow.stamper.stamp(now, bytes);
        flow.queued += 1;
        self.queue.push(at, (key, packet, at));
        at
    }

    /// Datagrams of `key` waiting.
    pub fn queued(&self, key: K) -> usize {
        self.flows.get(&key).map_or(0, |f| f.queued)
    }

    /// Datagrams waiting in all.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The earliest departure time waiting.
    pub fn next_departure(&self) -> Option<Instant> {
        self.queue.next_departure()
    }

    /// Moves every datagram due at `now` into `out`, in departure order, with its
    /// connection and its departure time.
    pub fn release(&mut self, now: Instant, out: &mut Vec<(K, P, Instant)>) -> usize {
        let start = out.len();
        self.queue.drain_due(now, usize::MAX, out);
        for (key, _, _) in &out[start..] {
            if let Some(flow) = self.flows.get_mut(key) {
                flow.queued = flow.queued.saturating_sub(1);
            }
        }
        out.len() - start
    }

    /// Forgets `key` (its connection is gone); packets already queued still leave.
    pub fn remove(&mut self, key: K) {
        self.flows.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 1_000_000_000;

    #[test]
    fn a_rate_past_what_a_rate_holds_leaves_the_flow_unpaced_not_at_its_old_rate() {
        let mut pacer: PacketPacer<u32, u32> = PacketPacer::new(Instant::from_ticks(0), HZ);
        assert!(
            pacer
                .set_window(1, 150_000, Span::from_ticks(12_000_000))
                .is_some()
        );
        // 1 GB in flight over a 1 µs RTT: 10^16 bit/s.
        assert_eq!(pacer.set_window(1, 1 << 30, Span::from_ticks(1_000)), None);
        assert_eq!(pacer.rate(1), None);
        let t0 = Instant::from_ticks(5_000);
        assert_eq!(pacer.push(1, t0, 1200, 0), t0);
        assert_eq!(pacer.push(1, t0, 1200, 1), t0);
    }

    #[test]
    fn a_window_of_100_packets_leaves_evenly_spaced_at_the_pacing_rate() {
        let t0 = Instant::from_ticks(1_000);
        let mut pacer: PacketPacer<u32, u32> = PacketPacer::new(t0, HZ);
        // 150 kB per 12 ms × 1.25 = 125 Mbit/s: 1200 B every 76.8 µs.
        let rate = pacer
            .set_window(1, 150_000, Span::from_ticks(12_000_000))
            .unwrap();
        assert_eq!(u64::from(rate), 125_000_000);
        for seq in 0..100 {
            pacer.push(1, t0, 1200, seq);
        }
        // Release at every 5 µs, as trigger states would, and record when each left.
        let mut left = Vec::new();
        let mut out = Vec::new();
        let mut now = t0;
        while !pacer.is_empty() {
            out.clear();
            pacer.release(now, &mut out);
            left.extend(out.iter().map(|&(_, seq, _)| (seq, now)));
            now += Span::from_ticks(5_000);
        }
        assert_eq!(left.len(), 100);
        let gap = 76_800i64;
        for (i, &(seq, at)) in left.iter().enumerate() {
            assert_eq!(seq as usize, i, "in order");
            let ideal = t0.ticks() as i64 + i as i64 * gap;
            let err = at.ticks() as i64 - ideal;
            assert!(
                (0..=pacer.slot().ticks() as i64).contains(&err),
                "packet {i} left {err} ns from its ideal time"
            );
        }
    }

    #[test]
    fn a_rate_change_takes_effect_at_the_next_packet() {
        let t0 = Instant::from_ticks(0);
        let mut pacer: PacketPacer<u8, u8> = PacketPacer::new(t0, HZ);
        // 1.25 × 8 Mbit/s = 10 Mbit/s: 1250 B per ms.
        pacer.set_window(0, 10_000, Span::from_ticks(10_000_000));
        assert_eq!(pacer.push(0, t0, 1250, 0), t0);
        assert_eq!(pacer.push(0, t0, 1250, 1), t0 + Span::from_ticks(1_000_000));
        // Twice the window: the next packet is still stamped after the previous one's gap,
        // and the gap after it is half.
        pacer.set_window(0, 20_000, Span::from_ticks(10_000_000));
        assert_eq!(pacer.push(0, t0, 1250, 2), t0 + Span::from_ticks(2_000_000));
        assert_eq!(pacer.push(0, t0, 1250, 3), t0 + Span::from_ticks(2_500_000));
        assert_eq!(pacer.queued(0), 4);
        let mut out = Vec::new();
        pacer.release(t0 + Span::from_ticks(2_000_000), &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(pacer.queued(0), 1);
    }

    #[test]
    fn unpaced_or_degenerate_windows_send_at_once() {
        let t0 = Instant::from_ticks(0);
        let mut pacer: PacketPacer<u8, u8> = PacketPacer::new(t0, HZ);
        assert_eq!(pacer.set_window(0, 0, Span::from_ticks(1)), None);
        assert_eq!(pacer.set_window(0, 1000, Span::ZERO), None);
        assert_eq!(pacer.push(0, t0, 1500, 0), t0);
        assert_eq!(pacer.push(0, t0, 1500, 1), t0);
        pacer.set_window(0, 1000, Span::from_ticks(1_000_000));
        pacer.clear_rate(0);
        assert_eq!(pacer.push(0, t0, 1500, 2), t0);
    }
}
