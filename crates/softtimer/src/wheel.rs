//! A hierarchical timing wheel (Varghese & Lauck, scheme 7) over an external slab of nodes.
//!
//! Level `l` has 64 slots of 64^l ticks each; eleven levels cover every 64-bit time, so no
//! event is ever "beyond the span" and none has to be clamped (and so fired early). An event
//! sits at the level of the highest bit in which its due time differs from the wheel's
//! current time (`elapsed`), which gives the invariant the whole structure rests on:
//!
//! * every event at level `l` agrees with `elapsed` in all bits above level `l`, and its
//!   slot index at level `l` is not below `elapsed`'s;
//! * hence every event at a lower level is due before every event at a higher one, and
//!   inside a level the lowest occupied slot at or after `elapsed`'s slot is the earliest.
//!
//! Finding the next expiration is a `trailing_zeros` on two bitmaps. A level-0 slot covers
//! one tick, so its events are due exactly at its start; a higher slot is "cascaded" (its
//! events re-inserted relative to the new `elapsed`, landing at lower levels) when the time
//! reaches its start. Each event cascades at most ten times in its life, so expiry is
//! amortised O(1).
//!
//! Nodes live in a slab owned by the caller and carry two sets of links, so that two wheels
//! (due times and deadlines) can index the same nodes without allocating.

/// Index meaning "no node".
pub(crate) const NIL: u32 = u32::MAX;
/// `loc` value of a node that is in no wheel.
pub(crate) const NO_LOC: u16 = u16::MAX;

const BITS: u32 = 6;
const SLOTS: usize = 1 << BITS;
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// 11 × 6 bits ≥ 64 bits: the wheel spans every u64 time.
pub(crate) const LEVELS: usize = 11;

/// One wheel's intrusive links in a node: the node's time in that wheel and its neighbours
/// in a circular doubly linked slot list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Link {
    pub when: u64,
    pub prev: u32,
    pub next: u32,
}

impl Link {
    pub(crate) const EMPTY: Link = Link {
        when: 0,
        prev: NIL,
        next: NIL,
    };
}

/// A slab node: links for two wheels, where it is in each, its generation and its payload.
#[derive(Debug)]
pub(crate) struct Node<E> {
    pub links: [Link; 2],
    /// `level * 64 + slot` in each wheel, or [`NO_LOC`].
    pub loc: [u16; 2],
    pub generation: u32,
    pub payload: Option<E>,
}

#[derive(Debug)]
pub(crate) struct Wheel {
    /// Which of the node's two links this wheel uses.
    link: usize,
    /// The wheel's notion of the current time; every node's `when` is ≥ it (see `place`).
    elapsed: u64,
    heads: [[u32; SLOTS]; LEVELS],
    occupied: [u64; LEVELS],
    nonempty_levels: u16,
    len: usize,
}

/// The level at which an event due at `when` sits when the wheel's time is `elapsed`.
#[inline(always)]
fn level_for(elapsed: u64, when: u64) -> usize {
    let masked = (elapsed ^ when) | SLOT_MASK;
    ((63 - masked.leading_zeros()) / BITS) as usize
}

#[inline(always)]
fn slot_for(when: u64, level: usize) -> usize {
    ((when >> (BITS as usize * level)) & SLOT_MASK) as usize
}

/// The first tick of `slot` at `level`, in the window of `elapsed`.
#[inline(always)]
fn slot_start(elapsed: u64, level: usize, slot: usize) -> u64 {
    let shift = BITS as usize * level;
    let upper_shift = shift + BITS as usize;
    let upper = if upper_shift >= 64 {
        0
    } else {
        (elapsed >> upper_shift) << upper_shift
    };
    upper | ((slot as u64) << shift)
}

impl Wheel {
    pub(crate) fn new(link: usize, elapsed: u64) -> Self {
        Wheel {
            link,
            elapsed,
            heads: [[NIL; SLOTS]; LEVELS],
            occupied: [0; LEVELS],
            nonempty_levels: 0,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Inserts node `idx` (its `links[self.link].when` already set). Returns the first tick
    /// of the slot it landed in: a lower bound on its due time, exact at level 0.
    #[inline]
    pub(crate) fn insert<E>(&mut self, nodes: &mut [Node<E>], idx: u32) -> u64 {
        // A time in the past (the caller's contract forbids it, but be safe) is placed at the
        // current tick, where the next poll finds it due.
        let when = nodes[idx as usize].links[self.link].when.max(self.elapsed);
        let level = level_for(self.elapsed, when);
        let slot = slot_for(when, level);
        self.push_back(nodes, level, slot, idx);
        slot_start(self.elapsed, level, slot)
    }

    /// Removes node `idx`, which must be in this wheel.
    #[inline]
    pub(crate) fn remove<E>(&mut self, nodes: &mut [Node<E>], idx: u32) {
        let loc = nodes[idx as usize].loc[self.link];
        debug_assert_ne!(loc, NO_LOC, "removing a node that is not in the wheel");
        let (level, slot) = ((loc as usize) >> BITS, (loc as usize) & (SLOTS - 1));
        self.unlink(nodes, level, slot, idx);
    }

    /// The earliest non-empty slot: `(level, slot, first tick of the slot)`.
    #[inline]
    pub(crate) fn next_expiration(&self) -> Option<(usize, usize, u64)> {
        if self.nonempty_levels == 0 {
            return None;
        }
        let level = self.nonempty_levels.trailing_zeros() as usize;
        let current = slot_for(self.elapsed, level);
        let ahead = self.occupied[level] & (u64::MAX << current);
        debug_assert_ne!(ahead, 0, "an occupied slot lies behind the wheel's time");
        let bits = if ahead != 0 {
            ahead
        } else {
            self.occupied[level]
        };
        let slot = bits.trailing_zeros() as usize;
        Some((level, slot, slot_start(self.elapsed, level, slot)))
    }

    /// A lower bound on the earliest due time (exact when it is at level 0).
    #[inline]
    pub(crate) fn next_check(&self) -> u64 {
        self.next_expiration()
            .map_or(u64::MAX, |(_, _, start)| start)
    }

    /// The exact earliest `when` in the wheel. Scans one slot when the earliest is above
    /// level 0.
    pub(crate) fn earliest<E>(&self, nodes: &[Node<E>]) -> Option<u64> {
        let (level, slot, start) = self.next_expiration()?;
        if level == 0 {
            return Some(start);
        }
        let head = self.heads[level][slot];
        let mut best = u64::MAX;
        let mut cur = head;
        loop {
            let link = &nodes[cur as usize].links[self.link];
            best = best.min(link.when);
            cur = link.next;
            if cur == head {
                break;
            }
        }
        Some(best)
    }

    /// Removes and returns the next node due at or before `now`, cascading higher slots
    /// whose start has been reached. `None` when nothing is due; the wheel's time is then
    /// moved up to `now`.
    #[inline]
    pub(crate) fn pop_due<E>(&mut self, nodes: &mut [Node<E>], now: u64) -> Option<u32> {
        loop {
            match self.next_expiration() {
                Some((level, slot, start)) if start <= now => {
                    self.elapsed = self.elapsed.max(start);
                    if level == 0 {
                        let idx = self.heads[0][slot];
                        self.unlink(nodes, 0, slot, idx);
                        return Some(idx);
                    }
                    self.cascade(nodes, level, slot);
                }
                _ => {
                    self.elapsed = self.elapsed.max(now);
                    return None;
                }
            }
        }
    }

    /// Moves the wheel's time towards `now` without removing anything: cascades every
    /// higher slot that has started, and stops at a due level-0 slot if there is one.
    pub(crate) fn advance<E>(&mut self, nodes: &mut [Node<E>], now: u64) {
        loop {
            match self.next_expiration() {
                Some((level, slot, start)) if start <= now => {
                    self.elapsed = self.elapsed.max(start);
                    if level == 0 {
                        return;
                    }
                    self.cascade(nodes, level, slot);
                }
                _ => {
                    self.elapsed = self.elapsed.max(now);
                    return;
                }
            }
        }
    }

    fn cascade<E>(&mut self, nodes: &mut [Node<E>], level: usize, slot: usize) {
        let head = self.heads[level][slot];
        let tail = nodes[head as usize].links[self.link].prev;
        self.heads[level][slot] = NIL;
        self.clear_bit(level, slot);
        let mut cur = head;
        loop {
            let next = nodes[cur as usize].links[self.link].next;
            self.len -= 1;
            self.insert(nodes, cur);
            if cur == tail {
                break;
            }
            cur = next;
        }
    }

    #[inline(always)]
    fn push_back<E>(&mut self, nodes: &mut [Node<E>], level: usize, slot: usize, idx: u32) {
        let w = self.link;
        let head = self.heads[level][slot];
        if head == NIL {
            self.heads[level][slot] = idx;
            let link = &mut nodes[idx as usize].links[w];
            link.prev = idx;
            link.next = idx;
            self.occupied[level] |= 1 << slot;
            self.nonempty_levels |= 1 << level;
        } else {
            let tail = nodes[head as usize].links[w].prev;
            {
                let link = &mut nodes[idx as usize].links[w];
                link.prev = tail;
                link.next = head;
            }
            nodes[tail as usize].links[w].next = idx;
            nodes[head as usize].links[w].prev = idx;
        }
        nodes[idx as usize].loc[w] = ((level << BITS) | slot) as u16;
        self.len += 1;
    }

    #[inline(always)]
    fn unlink<E>(&mut self, nodes: &mut [Node<E>], level: usize, slot: usize, idx: u32) {
        let w = self.link;
        let Link { prev, next, .. } = nodes[idx as usize].links[w];
        if next == idx {
            self.heads[level][slot] = NIL;
            self.clear_bit(level, slot);
        } else {
            nodes[prev as usize].links[w].next = next;
            nodes[next as usize].links[w].prev = prev;
            if self.heads[level][slot] == idx {
                self.heads[level][slot] = next;
            }
        }
        nodes[idx as usize].loc[w] = NO_LOC;
        self.len -= 1;
    }

    #[inline(always)]
    fn clear_bit(&mut self, level: usize, slot: usize) {
        self.occupied[level] &= !(1 << slot);
        if self.occupied[level] == 0 {
            self.nonempty_levels &= !(1 << level);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(when: u64) -> Node<()> {
        Node {
            links: [
                Link {
                    when,
                    ..Link::EMPTY
                },
                Link::EMPTY,
            ],
            loc: [NO_LOC; 2],
            generation: 0,
            payload: Some(()),
        }
    }

    #[test]
    fn levels_and_slots() {
        assert_eq!(level_for(0, 0), 0);
        assert_eq!(level_for(0, 63), 0);
        assert_eq!(level_for(0, 64), 1);
        assert_eq!(level_for(0, 4095), 1);
        assert_eq!(level_for(0, 4096), 2);
        assert_eq!(level_for(0, u64::MAX), 10);
        assert_eq!(slot_for(u64::MAX, 10), 15);
        assert_eq!(slot_start(u64::MAX, 10, 15), 15 << 60);
    }

    #[test]
    fn pops_in_time_order_across_levels() {
        let whens = [5u64, 70, 4100, 1 << 40, u64::MAX - 1, 3, 70];
        let mut nodes: Vec<Node<()>> = whens.iter().map(|&w| node(w)).collect();
        let mut wheel = Wheel::new(0, 0);
        for i in 0..nodes.len() as u32 {
            wheel.insert(&mut nodes, i);
        }
        assert_eq!(wheel.earliest(&nodes), Some(3));
        let mut order = vec![];
        while let Some(i) = wheel.pop_due(&mut nodes, u64::MAX) {
            order.push(nodes[i as usize].links[0].when);
        }
        assert_eq!(order, vec![3, 5, 70, 70, 4100, 1 << 40, u64::MAX - 1]);
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn nothing_pops_early() {
        let mut nodes = vec![node(1000), node(1001)];
        let mut wheel = Wheel::new(0, 0);
        wheel.insert(&mut nodes, 0);
        wheel.insert(&mut nodes, 1);
        assert_eq!(wheel.pop_due(&mut nodes, 999), None);
        assert_eq!(wheel.pop_due(&mut nodes, 1000), Some(0));
        assert_eq!(wheel.pop_due(&mut nodes, 1000), None);
        wheel.remove(&mut nodes, 1);
        assert_eq!(wheel.next_expiration(), None);
    }
}
