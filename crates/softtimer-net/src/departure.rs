//! Departure-time scheduling: each packet carries the earliest time it may leave, and a
//! two-level scheduler releases packets at their times (sans-IO).
//!
//! This is Kobayashi's per-packet transmission timer, and the idea Carousel builds on: the
//! transport does not ask "may I send now?" on every poll (quinn's token bucket); it stamps
//! each packet once, with a [`FlowStamper`], and hands it to a [`DepartureQueue`] shared by
//! every flow. A soft-timer event at [`DepartureQueue::next_departure`] (or simply every
//! trigger state) then calls [`DepartureQueue::drain_due`] and sends what it returns, in one
//! `sendmmsg` when several packets are due at once.
//!
//! The queue has two levels:
//!
//! - a ring of coarse *slots* covering a horizon (`slots × slot_width`): inserting a packet
//!   is O(1), a push onto its slot's list;
//! - the *due* slot, kept in exact order of (departure time, insertion order): when the
//!   cursor reaches a slot its packets move into a binary heap, so packets leave in order
//!   even inside one slot, and never before their time.
//!
//! Packets stamped beyond the horizon wait in an overflow heap and move into the ring as the
//! cursor comes near them; packets stamped in the past go straight to the due heap. The ring
//! works on [`Instant`]s, so a clock that wraps past `u64::MAX` is handled like any other
//! time.
//!
//! ```
//! use softtimer::{Instant, Span};
//! use softtimer_net::departure::{DepartureQueue, FlowStamper};
//!
//! let hz = 1_000_000_000; // 1 tick = 1 ns
//! let start = Instant::from_ticks(0);
//! let mut queue = DepartureQueue::new(start, Span::from_ticks(10_000), 1024).unwrap();
//! let mut flow = FlowStamper::new(hz);
//! flow.set_rate("100M".parse().unwrap()); // 1250 B every 100 µs
//! for seq in 0..3u32 {
//!     let at = flow.stamp(start, 1250);
//!     queue.push(at, seq);
//! }
//! // A retransmission may leave before the data queued behind it.
//! let at = flow.stamp_retransmit(start, 1250);
//! queue.push(at, 99);
//!
//! let mut out = Vec::new();
//! queue.drain_due(start, usize::MAX, &mut out);
//! assert_eq!(out, vec![0, 99]); // both due at once, in insertion order
//! assert_eq!(queue.next_departure(), Some(start + Span::from_ticks(100_000)));
//! out.clear();
//! queue.drain_due(start + Span::from_ticks(200_000), usize::MAX, &mut out);
//! assert_eq!(out, vec![1, 2]);
//! ```

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use softtimer::{Instant, Span};

use crate::Rate;

/// Why a queue or stamper was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DepartureError {
    /// A slot of zero ticks, or a ring of no slots.
    #[error("a departure queue needs slots of at least one tick and at least one slot")]
    EmptyRing,
    /// The ring's horizon (`slots × slot_width`) does not fit in half the clock's range.
    #[error("the ring's horizon does not fit in the clock's range")]
    HorizonTooLong,
    /// A window-based gap with an RTT, window or MSS of zero.
    #[error("a window-based rate needs a positive RTT, window and MSS")]
    EmptyWindow,
    /// The rate the window gives is not one [`Rate`] accepts.
    #[error("the window's rate: {0}")]
    Rate(#[from] crate::RateError),
}

/// One queued packet.
#[derive(Debug)]
struct Entry<P> {
    departure: Instant,
    seq: u64,
    packet: P,
}

impl<P> Entry<P> {
    fn key(&self) -> (Instant, u64) {
        (self.departure, self.seq)
    }
}

impl<P> PartialEq for Entry<P> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl<P> Eq for Entry<P> {}
impl<P> PartialOrd for Entry<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for Entry<P> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Instants order on the circle, which is a total order among the times one queue
        // holds (all within 2^63 ticks of its cursor).
        self.key().cmp(&other.key())
    }
}

/// Packets waiting for their departure times, released in order and never early.
///
/// `P` is whatever the caller needs to send the packet (a buffer, an index into one, a flow
/// and sequence number). See the [module docs](self) for the design and an example.
#[derive(Debug)]
pub struct DepartureQueue<P> {
    slot_width: Span,
    /// The ring; `slots[cursor_index]` is the slot after the due one.
    slots: Vec<Vec<Entry<P>>>,
    cursor_index: usize,
    /// Everything before this instant is in `due` (or gone); `slots[cursor_index]` covers
    /// `[due_end, due_end + slot_width)`.
    due_end: Instant,
    due: BinaryHeap<Reverse<Entry<P>>>,
    overflow: BinaryHeap<Reverse<Entry<P>>>,
    in_ring: usize,
    /// The next [`push`](DepartureQueue::push)'s sequence number: counts up from `SEQ_START`.
    next_seq: u64,
    /// The next [`requeue`](DepartureQueue::requeue)'s: counts up from 0, below
    /// `SEQ_START`, so that packets put back go before every packet pushed for the same
    /// time, in the order they were put back.
    requeue_seq: u64,
}

/// Where pushed packets' sequence numbers start: requeued ones take the numbers below.
const SEQ_START: u64 = 1 << 63;

impl<P> DepartureQueue<P> {
    /// An empty queue whose ring starts at `start` and covers `slots × slot_width` ticks
    /// ahead of its cursor. The slot width sets how far the ring's order is coarse (inside a
    /// slot the heap orders exactly); a width near the spacing of packets at the highest rate
    /// keeps the due heap small.
    pub fn new(start: Instant, slot_width: Span, slots: usize) -> Result<Self, DepartureError> {
        if slot_width == Span::ZERO || slots == 0 {
            return Err(DepartureError::EmptyRing);
        }
        let horizon = u64::try_from(slots)
            .ok()
            .and_then(|n| n.checked_mul(slot_width.ticks()))
            .filter(|&h| h < 1 << 62)
            .ok_or(DepartureError::HorizonTooLong)?;
        debug_assert!(horizon > 0);
        Ok(DepartureQueue {
            slot_width,
            slots: (0..slots).map(|_| Vec::new()).collect(),
            cursor_index: 0,
            due_end: start + slot_width,
            due: BinaryHeap::new(),
            overflow: BinaryHeap::new(),
            in_ring: 0,
            next_seq: SEQ_START,
            requeue_seq: 0,
        })
    }

    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.due.len() + self.in_ring + self.overflow.len()
    }

    /// Whether no packet waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The end of the ring's horizon: packets at or after it go to the overflow heap.
    fn ring_end(&self) -> Instant {
        self.due_end + Span::from_ticks(self.slot_width.ticks() * self.slots.len() as u64)
    }

    /// Queues `packet` to leave at `departure` or later. O(1) unless the departure is past
    /// the ring's horizon or inside the due slot (then O(log n) in that heap).
    pub fn push(&mut self, departure: Instant, packet: P) {
        let entry = Entry {
            departure,
            seq: self.next_seq,
            packet,
        };
        self.next_seq += 1;
        self.place(entry);
    }

    /// Puts back packets [`pop_due`](Self::pop_due) gave (their send was refused for want
    /// of room, to be tried again), in the order they were popped: ahead of the packets
    /// pushed for the same departure, so that all of them still leave in the order they
    /// were pushed.
    ///
    /// ```
    /// use softtimer::{Instant, Span};
    /// use softtimer_net::departure::DepartureQueue;
    ///
    /// let at = Instant::from_ticks(1_000);
    /// let start = Instant::from_ticks(0);
    /// let mut queue = DepartureQueue::new(start, Span::from_ticks(100), 8).unwrap();
    /// for name in ["first", "second", "third"] {
    ///     queue.push(at, name);
    /// }
    /// let first = queue.pop_due(at).unwrap();
    /// let second = queue.pop_due(at).unwrap();
    /// queue.requeue(first.0, first.1);
    /// queue.requeue(second.0, second.1);
    /// let order: Vec<_> = std::iter::from_fn(|| queue.pop_due(at).map(|(_, p)| p)).collect();
    /// assert_eq!(order, ["first", "second", "third"]);
    /// ```
    pub fn requeue(&mut self, departure: Instant, packet: P) {
        let entry = Entry {
            departure,
            seq: self.requeue_seq,
            packet,
        };
        self.requeue_seq = (self.requeue_seq + 1).min(SEQ_START - 1);
        self.place(entry);
    }

    fn place(&mut self, entry: Entry<P>) {
        let Some(ahead) = entry.departure.checked_since(self.due_end) else {
            self.due.push(Reverse(entry));
            return;
        };
        let slot = ahead.ticks() / self.slot_width.ticks();
        if slot < self.slots.len() as u64 {
            let index = (self.cursor_index + slot as usize) % self.slots.len();
            self.slots[index].push(entry);
            self.in_ring += 1;
        } else {
            self.overflow.push(Reverse(entry));
        }
    }

    /// Moves the cursor one slot on: that slot's packets become due, and overflow packets
    /// that now fall inside the horizon move into the ring.
    fn advance_one(&mut self) {
        let slot = std::mem::take(&mut self.slots[self.cursor_index]);
        self.in_ring -= slot.len();
        self.due.extend(slot.into_iter().map(Reverse));
        self.cursor_index = (self.cursor_index + 1) % self.slots.len();
        self.due_end += self.slot_width;
        self.pull_overflow();
    }

    fn pull_overflow(&mut self) {
        let ring_end = self.ring_end();
        while self
            .overflow
            .peek()
            .is_some_and(|Reverse(e)| e.departure.is_before(ring_end))
        {
            let Reverse(entry) = self.overflow.pop().expect("peeked");
            self.place(entry);
        }
    }

    /// Moves the cursor so that every packet due by `now` is in the due heap.
    fn advance_to(&mut self, now: Instant) {
        while !now.is_before(self.due_end) {
            if self.in_ring == 0 {
                // Nothing in the ring: jump straight to the slot holding `now`, or to the
                // first overflow packet, whichever is first, instead of walking empty slots.
                let target = match self.overflow.peek() {
                    Some(Reverse(e)) if e.departure.is_before(now) => e.departure,
                    _ => now,
                };
                let slots = target.saturating_since(self.due_end).ticks() / self.slot_width.ticks();
                let slots = slots.min(u64::MAX / 2 / self.slot_width.ticks().max(1));
                self.due_end += Span::from_ticks(slots * self.slot_width.ticks());
                self.cursor_index =
                    ((self.cursor_index as u64 + slots) % self.slots.len() as u64) as usize;
                self.pull_overflow();
                if self.in_ring == 0 && now.is_before(self.due_end) {
                    break;
                }
            }
            self.advance_one();
        }
    }

    /// The earliest departure time queued, if any.
    pub fn next_departure(&self) -> Option<Instant> {
        if let Some(Reverse(e)) = self.due.peek() {
            return Some(e.departure);
        }
        if self.in_ring > 0 {
            for k in 0..self.slots.len() {
                let slot = &self.slots[(self.cursor_index + k) % self.slots.len()];
                if let Some(first) = slot.iter().map(|e| e.departure).min() {
                    return Some(first);
                }
            }
        }
        self.overflow.peek().map(|Reverse(e)| e.departure)
    }

    /// The next packet whose departure time is at or before `now`, with that time; packets
    /// leave in order of departure, and in the order they were pushed among equal times.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, P)> {
        if self
            .due
            .peek()
            .is_none_or(|Reverse(e)| e.departure.is_after(now))
        {
            self.advance_to(now);
        }
        match self.due.peek() {
            Some(Reverse(e)) if !e.departure.is_after(now) => {
                let Reverse(e) = self.due.pop().expect("peeked");
                Some((e.departure, e.packet))
            }
            _ => None,
        }
    }

    /// Appends up to `limit` packets due by `now` to `out`, in departure order; returns how
    /// many. One call per trigger state, then one `sendmmsg` for the batch.
    pub fn drain_due(&mut self, now: Instant, limit: usize, out: &mut Vec<P>) -> usize {
        let mut n = 0;
        while n < limit {
            match self.pop_due(now) {
                Some((_, packet)) => {
                    out.push(packet);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }
}

/// One flow's departure-time stamps (sans-IO): each packet leaves `bytes / rate` after the
/// one before it, and never before `now`.
///
/// The rate may change at any time (a congestion controller changes it on every ACK); it
/// applies from the next stamp. Rounding is carried from packet to packet, so the long-run
/// rate is exact. A flow that falls idle does not bank credit: its next packet leaves at
/// `now`, not in a burst.
///
/// ```
/// use softtimer::{Instant, Span};
/// use softtimer_net::departure::FlowStamper;
///
/// let mut flow = FlowStamper::new(1_000_000); // 1 tick = 1 µs
/// // Slow start: 10 packets of 1500 B in flight per 10 ms RTT is 12 Mbit/s, a packet per ms.
/// flow.set_gap_from_window(Span::from_ticks(10_000), 15_000, 1500).unwrap();
/// let t0 = Instant::from_ticks(0);
/// assert_eq!(flow.stamp(t0, 1500), t0);
/// assert_eq!(flow.stamp(t0, 1500), t0 + Span::from_ticks(1_000));
/// ```
#[derive(Clone, Debug)]
pub struct FlowStamper {
    hz: u64,
    rate: Option<Rate>,
    /// The earliest time the flow's next packet may leave.
    next: Option<Instant>,
    /// Rounding carried over, in units of 1 / (rate in bit/s) ticks.
    remainder: u128,
}

impl FlowStamper {
    /// A flow on a clock at `hz`, unpaced until a rate is set.
    pub fn new(hz: u64) -> FlowStamper {
        FlowStamper {
            hz,
            rate: None,
            next: None,
            remainder: 0,
        }
    }

    /// Paces the flow at `rate` from the next stamp on. The gap already charged to the last
    /// packet stamped stands, as a pacer in the kernel keeps the departure it computed: the
    /// next packet leaves that gap (at the old rate) after it, and the gaps after that are
    /// the new rate's.
    pub fn set_rate(&mut self, rate: Rate) {
        if self.rate != Some(rate) {
            self.remainder = 0;
        }
        self.rate = Some(rate);
    }

    /// Stops pacing: every packet from the next stamp on may leave at once.
    pub fn clear_rate(&mut self) {
        self.rate = None;
        self.next = None;
        self.remainder = 0;
    }

    /// The rate in force.
    pub fn rate(&self) -> Option<Rate> {
        self.rate
    }

    /// Paces at one window per RTT: the gap between MSS-sized packets is
    /// g = RTT / cwnd · MSS (Kobayashi's equation 1), `cwnd` in bytes.
    pub fn set_gap_from_window(
        &mut self,
        rtt: Span,
        cwnd_bytes: u64,
        mss: u64,
    ) -> Result<Rate, DepartureError> {
        if rtt == Span::ZERO || cwnd_bytes == 0 || mss == 0 {
            return Err(DepartureError::EmptyWindow);
        }
        let bps = u128::from(cwnd_bytes) * 8 * u128::from(self.hz) / u128::from(rtt.ticks());
        let rate = Rate::from_bits_per_sec(u64::try_from(bps).unwrap_or(u64::MAX))?;
        self.set_rate(rate);
        Ok(rate)
    }

    /// The departure time of the flow's next packet of `bytes`, sent in order after the
    /// ones stamped before it.
    pub fn stamp(&mut self, now: Instant, bytes: u64) -> Instant {
        let departure = match self.next {
            Some(next) if next.is_after(now) => next,
            // On schedule to the tick: the rounding carried over stays, so that packets of
            // less than a tick each (a rate past `bytes` per tick) still add up to one and
            // move the schedule on.
            Some(next) if next == now => now,
            _ => {
                self.remainder = 0;
                now
            }
        };
        self.next = Some(departure + self.span_for(bytes));
        departure
    }

    /// The departure time of the flow's next packet of `bytes`, asked for as one is sent at
    /// `now` by a pacer that stamps a flow's packets one at a time: on schedule (or late by
    /// less than a packet's interval), its place in the schedule; a flow a whole interval or
    /// more behind (a late wake-up) starts again from this send, one interval after it,
    /// rather than make the lost time up in a burst.
    ///
    /// ```
    /// use softtimer::{Instant, Span};
    /// use softtimer_net::departure::FlowStamper;
    /// use softtimer_net::Rate;
    ///
    /// let mut flow = FlowStamper::new(1_000_000_000);
    /// flow.set_rate(Rate::from_bits_per_sec(8_000_000).unwrap()); // 1000 B: 1 ms apart
    /// let t0 = Instant::from_ticks(0);
    /// assert_eq!(flow.stamp(t0, 1000), t0);
    /// // Sent at its time: the next keeps the schedule.
    /// assert_eq!(flow.stamp_after_send(t0, 1000), Instant::from_ticks(1_000_000));
    /// // That one sent 2.5 ms late: the next is 1 ms after the send, not at once.
    /// let late = Instant::from_ticks(3_500_000);
    /// assert_eq!(flow.stamp_after_send(late, 1000), Instant::from_ticks(4_500_000));
    /// ```
    pub fn stamp_after_send(&mut self, now: Instant, bytes: u64) -> Instant {
        let next = self.stamp(now, bytes);
        if next.is_after(now) {
            next
        } else {
            // `stamp` restarted the schedule at `now`, for the packet just sent.
            self.stamp(now, bytes)
        }
    }

    /// The departure time of a retransmission of `bytes`: it leaves now, ahead of the data
    /// already stamped, and pushes that data back by its own transmission time so the flow
    /// keeps its rate.
    pub fn stamp_retransmit(&mut self, now: Instant, bytes: u64) -> Instant {
        let span = self.span_for(bytes);
        self.next = Some(match self.next {
            Some(next) if next.is_after(now) => next + span,
            _ => now + span,
        });
        now
    }

    /// The earliest time the next in-order packet may leave.
    pub fn next_departure(&self) -> Option<Instant> {
        self.next
    }

    fn span_for(&mut self, bytes: u64) -> Span {
        let Some(rate) = self.rate else {
            return Span::ZERO;
        };
        let bps = u128::from(rate.bits_per_sec());
        let scaled = u128::from(bytes) * 8 * u128::from(self.hz) + self.remainder;
        self.remainder = scaled % bps;
        Span::from_ticks(u64::try_from(scaled / bps).unwrap_or(u64::MAX / 4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A rate past one packet per tick still moves the schedule on: stamped again and again
    /// at one `now` (as a handler that sends what is due does), the flow's next departure
    /// passes `now` after the packets one tick holds, instead of staying at `now` for ever.
    #[test]
    fn packets_shorter_than_a_tick_add_up_to_one() {
        let mut flow = FlowStamper::new(1_000); // 1 tick = 1 ms
        // 24 B at 1 Mbit/s is 0.192 ms: five such packets and a bit fill a tick.
        flow.set_rate(Rate::from_bits_per_sec(1_000_000).unwrap());
        let now = Instant::from_ticks(10);
        let mut stamped = 0;
        while !flow.next_departure().unwrap_or(now).is_after(now) {
            assert_eq!(flow.stamp(now, 24), now);
            stamped += 1;
            assert!(stamped <= 6, "the schedule never moved past now");
        }
        assert_eq!(stamped, 6);
        assert_eq!(flow.next_departure(), Some(now + Span::from_ticks(1)));
    }

    #[test]
    fn refuses_empty_rings() {
        let t = Instant::from_ticks(0);
        assert_eq!(
            DepartureQueue::<u8>::new(t, Span::ZERO, 8).unwrap_err(),
            DepartureError::EmptyRing
        );
        assert_eq!(
            DepartureQueue::<u8>::new(t, Span::from_ticks(1), 0).unwrap_err(),
            DepartureError::EmptyRing
        );
        assert_eq!(
            DepartureQueue::<u8>::new(t, Span::from_ticks(u64::MAX / 2), 4).unwrap_err(),
            DepartureError::HorizonTooLong
        );
    }

    #[test]
    fn far_future_and_past() {
        let t0 = Instant::from_ticks(1_000);
        let mut q = DepartureQueue::new(t0, Span::from_ticks(10), 4).unwrap();
        q.push(t0 + Span::from_ticks(1_000_000), "far");
        q.push(Instant::from_ticks(5), "past");
        q.push(t0 + Span::from_ticks(25), "ring");
        assert_eq!(q.len(), 3);
        assert_eq!(q.next_departure(), Some(Instant::from_ticks(5)));
        assert_eq!(q.pop_due(t0).map(|p| p.1), Some("past"));
        assert_eq!(q.pop_due(t0 + Span::from_ticks(24)), None);
        assert_eq!(
            q.pop_due(t0 + Span::from_ticks(25)).map(|p| p.1),
            Some("ring")
        );
        assert_eq!(q.next_departure(), Some(t0 + Span::from_ticks(1_000_000)));
        assert_eq!(q.pop_due(t0 + Span::from_ticks(999_999)), None);
        assert_eq!(
            q.pop_due(t0 + Span::from_ticks(1_000_000)).map(|p| p.1),
            Some("far")
        );
        assert!(q.is_empty());
    }

    #[test]
    fn stamper_keeps_its_rate_and_banks_no_credit() {
        let hz = 1_000_000_000;
        let mut f = FlowStamper::new(hz);
        f.set_rate(Rate::from_bits_per_sec(3_000_000).unwrap()); // 1 B every 2666.67 ns
        let t0 = Instant::from_ticks(0);
        let mut last = t0;
        for _ in 0..3000 {
            last = f.stamp(t0, 1);
        }
        // 2999 bytes after the first: 2999 × 8000 / 3 ns, rounded down once.
        assert_eq!(last.ticks(), 2999 * 8000 / 3);
        // Idle for a second: the next packet leaves at now, the one after a gap later.
        let later = t0 + Span::from_ticks(hz);
        assert_eq!(f.stamp(later, 3), later);
        assert_eq!(f.stamp(later, 3), later + Span::from_ticks(8000));
        // No rate: no spacing.
        f.clear_rate();
        assert_eq!(
            f.stamp(later + Span::from_ticks(9000), 1500),
            later + Span::from_ticks(9000)
        );
    }

    #[test]
    fn window_gap_refuses_zero() {
        let mut f = FlowStamper::new(1_000);
        assert_eq!(
            f.set_gap_from_window(Span::ZERO, 1, 1).unwrap_err(),
            DepartureError::EmptyWindow
        );
        assert!(matches!(
            f.set_gap_from_window(Span::from_ticks(u64::MAX), 1, 1),
            Err(DepartureError::Rate(_))
        ));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u64),
        Pop(u64),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                // Near times, far times beyond a small ring, and times in the past.
                4 => (0u64..200).prop_map(Op::Push),
                1 => (0u64..5_000).prop_map(Op::Push),
                3 => (0u64..100).prop_map(Op::Pop),
            ],
            1..300,
        )
    }

    proptest! {
        /// Against a sorted reference: packets leave in (departure, push order), none early,
        /// across ring wrap-around, far-future times and a clock that wraps past u64::MAX.
        #[test]
        fn matches_a_sorted_reference(
            ops in ops(),
            start in prop_oneof![Just(0u64), Just(u64::MAX - 1_000), any::<u64>()],
            width in 1u64..20,
            slots in 1usize..16,
        ) {
            let mut now = Instant::from_ticks(start);
            let mut q = DepartureQueue::new(now, Span::from_ticks(width), slots).unwrap();
            let mut reference: Vec<(u64, u64)> = Vec::new(); // (offset from start, seq)
            let mut seq = 0u64;
            let mut elapsed = 0u64;
            for op in ops {
                match op {
                    Op::Push(ahead) => {
                        // Times relative to now, some of them already past.
                        let offset = (elapsed + ahead).saturating_sub(50);
                        q.push(Instant::from_ticks(start) + Span::from_ticks(offset), seq);
                        reference.push((offset, seq));
                        seq += 1;
                    }
                    Op::Pop(step) => {
                        elapsed += step;
                        now = Instant::from_ticks(start) + Span::from_ticks(elapsed);
                        reference.sort();
                        let due = reference.iter().take_while(|(o, _)| *o <= elapsed).count();
                        let expected: Vec<(u64, u64)> = reference.drain(..due).collect();
                        let mut got = Vec::new();
                        while let Some((at, s)) = q.pop_due(now) {
                            prop_assert!(!at.is_after(now), "released early");
                            got.push((at.saturating_since(Instant::from_ticks(start)).ticks(), s));
                        }
                        prop_assert_eq!(got, expected);
                    }
                }
                prop_assert_eq!(q.len(), reference.len());
                let next = reference.iter().min().map(|&(o, _)| Instant::from_ticks(start) + Span::from_ticks(o));
                prop_assert_eq!(q.next_departure(), next);
            }
        }

        /// A stamped flow's long-run rate is its rate, to the tick.
        #[test]
        fn stamps_keep_the_rate(bps in 1_000u64..10_000_000_000, size in 1u64..9000, n in 2u64..500) {
            let hz = 1_000_000_000;
            let mut f = FlowStamper::new(hz);
            f.set_rate(Rate::from_bits_per_sec(bps).unwrap());
            let t0 = Instant::from_ticks(0);
            let mut last = t0;
            for _ in 0..n {
                last = f.stamp(t0, size);
            }
            let exact = u128::from((n - 1) * size) * 8 * u128::from(hz) / u128::from(bps);
            prop_assert_eq!(u128::from(last.ticks()), exact);
        }
    }
}
