//! What `sink` makes of the sequence numbers in `pace`'s headers: per flow of one sender
//! (its address and the header's flow number), which datagrams are missing, which came late
//! (reordered) and which came twice.
//!
//! A flow starts at the first number seen (a sink started after its sender does not count
//! the datagrams before it as missing; a rerun of `pace` sends from a new port, so it is a
//! new flow). A number past the next expected one counts the gap as missing; one below it is
//! looked up in a window of the last [`WINDOW`] numbers: one not seen there was counted
//! missing and is now reordered, one seen is a duplicate. One further back than the window
//! (or below the flow's first) is counted late and reordered: from the flow's first number
//! on it comes off the missing count, as if its number had been counted missing (a duplicate
//! that far back cannot be told from a late first copy, and is counted so too); below the
//! first, nothing was counted for it.

use std::collections::HashMap;
use std::net::SocketAddr;

/// How far back a late datagram is told apart from a restarted sender, in sequence numbers.
pub(crate) const WINDOW: u64 = 1024;

/// The counts over every flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SequenceCounts {
    /// Datagrams skipped in their flow's sequence and not come since.
    pub missing: u64,
    /// Datagrams that came after a later one of their flow.
    pub reordered: u64,
    /// Datagrams that came again.
    pub duplicates: u64,
    /// Of the reordered, those further back than the window (not told from duplicates).
    pub late: u64,
}

/// Sequence state of every flow seen, up to a bound.
pub(crate) struct Sequences {
    flows: HashMap<(Option<SocketAddr>, u32), FlowSequence>,
    limit: usize,
    counts: SequenceCounts,
}

struct FlowSequence {
    /// The first number seen.
    first: u64,
    /// The next number expected.
    next: u64,
    /// Bit `n % WINDOW`: number `n` came, for `n` in `next - WINDOW .. next`.
    seen: Box<[u64; (WINDOW / 64) as usize]>,
    /// Datagrams that came.
    count: u64,
}

impl FlowSequence {
    fn starting_at(first: u64) -> FlowSequence {
        FlowSequence {
            first,
            next: first,
            seen: Box::new([0; (WINDOW / 64) as usize]),
            count: 0,
        }
    }

    fn bit(n: u64) -> (usize, u64) {
        let i = n % WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn is_seen(&self, n: u64) -> bool {
        let (word, mask) = Self::bit(n);
        self.seen[word] & mask != 0
    }

    fn mark(&mut self, n: u64, seen: bool) {
        let (word, mask) = Self::bit(n);
        if seen {
            self.seen[word] |= mask;
        } else {
            self.seen[word] &= !mask;
        }
    }

    /// Number `n` came.
    fn arrived(&mut self, n: u64, counts: &mut SequenceCounts) {
        self.count += 1;
        if n >= self.next {
            let gap = n - self.next;
            counts.missing = counts.missing.saturating_add(gap);
            // The skipped numbers' bits (a wrap of the window at most) are cleared.
            for skipped in self.next..self.next + gap.min(WINDOW) {
                self.mark(skipped, false);
            }
            self.mark(n, true);
            self.next = n.saturating_add(1);
        } else if n < self.first || self.next - n > WINDOW {
            // Too far back to tell: counted late (and reordered), and off the missing count
            // if its number is one the flow has counted (a duplicate this far back is taken
            // for a late first copy).
            counts.late += 1;
            counts.reordered += 1;
            if n >= self.first {
                counts.missing = counts.missing.saturating_sub(1);
            }
        } else if self.is_seen(n) {
            counts.duplicates += 1;
        } else {
            counts.reordered += 1;
            counts.missing = counts.missing.saturating_sub(1);
            self.mark(n, true);
        }
    }
}

impl Sequences {
    /// Tracks at most `limit` flows (the others' datagrams are refused by [`Sequences::arrived`]).
    pub(crate) fn new(limit: usize) -> Sequences {
        Sequences {
            flows: HashMap::new(),
            limit,
            counts: SequenceCounts::default(),
        }
    }

    /// `segments` datagrams numbered from `seq` came from `from`'s flow `flow`; false if the
    /// flow is past the bound (the datagrams are then not counted here).
    pub(crate) fn arrived(
        &mut self,
        from: Option<SocketAddr>,
        flow: u32,
        seq: u64,
        segments: u64,
    ) -> bool {
        let flows_seen = self.flows.len();
        let state = match self.flows.entry((from, flow)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                if flows_seen >= self.limit {
                    return false;
                }
                e.insert(FlowSequence::starting_at(seq))
            }
        };
        for n in 0..segments {
            // Saturating: a forged number near u64::MAX is counted, not a crash.
            state.arrived(seq.saturating_add(n), &mut self.counts);
        }
        true
    }

    pub(crate) fn counts(&self) -> SequenceCounts {
        self.counts
    }

    /// Flows seen.
    pub(crate) fn flows(&self) -> u64 {
        self.flows.len() as u64
    }

    /// The fewest and the most datagrams that came from one flow (0 and 0 for none).
    pub(crate) fn packets_per_flow(&self) -> (u64, u64) {
        let counts = self.flows.values().map(|f| f.count);
        (counts.clone().min().unwrap_or(0), counts.max().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(arrivals: &[(Option<SocketAddr>, u64)]) -> SequenceCounts {
        let mut s = Sequences::new(16);
        for &(from, seq) in arrivals {
            assert!(s.arrived(from, 0, seq, 1));
        }
        s.counts()
    }

    const A: Option<SocketAddr> = None;

    #[test]
    fn gaps_late_arrivals_and_duplicates_are_told_apart() {
        // 2 lost, then 1 again: a duplicate, not a reorder hiding the loss.
        let c = counts(&[(A, 0), (A, 1), (A, 3), (A, 1)]);
        assert_eq!((c.missing, c.reordered, c.duplicates), (1, 0, 1));
        // 2 late: reordered, no longer missing.
        let c = counts(&[(A, 0), (A, 1), (A, 3), (A, 2)]);
        assert_eq!((c.missing, c.reordered, c.duplicates), (0, 1, 0));
    }

    #[test]
    fn a_flow_starts_where_the_sink_first_sees_it_and_a_stale_datagram_moves_nothing() {
        let c = counts(&[(A, 50_000), (A, 50_001)]);
        assert_eq!(c, SequenceCounts::default());
        // One from before the first seen: late, and no gap of this flow was counted for it.
        let c = counts(&[(A, 50_000), (A, 50_002), (A, 10)]);
        assert_eq!((c.missing, c.reordered, c.late), (1, 1, 1));
        // One far behind: late; the flow's place stays (nothing counted missing after it).
        let c = counts(&[(A, 0), (A, 2 * WINDOW), (A, 5), (A, 2 * WINDOW + 1)]);
        assert_eq!((c.missing, c.reordered, c.late), (2 * WINDOW - 2, 1, 1));
    }

    #[test]
    fn two_senders_with_the_same_flow_number_are_two_flows() {
        let (a, b) = (
            Some("10.0.0.1:5000".parse().unwrap()),
            Some("10.0.0.2:5000".parse().unwrap()),
        );
        let mut s = Sequences::new(16);
        for seq in 0..100 {
            assert!(s.arrived(a, 0, seq, 1));
            assert!(s.arrived(b, 0, seq, 1));
        }
        assert_eq!(s.counts(), SequenceCounts::default());
        assert_eq!((s.flows(), s.packets_per_flow()), (2, (100, 100)));
    }

    #[test]
    fn a_gap_wider_than_the_window_and_a_forged_number_are_counted_not_a_crash() {
        let c = counts(&[(A, 0), (A, 10 * WINDOW), (A, 10 * WINDOW - 1), (A, 3)]);
        assert_eq!((c.missing, c.reordered, c.late), (10 * WINDOW - 3, 2, 1));
        let c = counts(&[(A, 0), (A, u64::MAX), (A, u64::MAX)]);
        assert_eq!(c.missing, u64::MAX - 1);
        let mut s = Sequences::new(1);
        assert!(s.arrived(A, 0, 0, 1));
        assert!(!s.arrived(A, 1, 0, 1), "past the bound");
    }
}
