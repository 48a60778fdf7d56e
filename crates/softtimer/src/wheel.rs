//! A hierarchical timing wheel (Varghese & Lauck, scheme 7) over an external slab of nodes.
//!
//! The wheel counts in *wheel ticks* of `2^shift` clock ticks (about 30 ns by default, the
//! facility's choice). Level `l` has 64 slots of 64^l wheel ticks each; eleven levels cover every
//! 64-bit time, so no event is ever "beyond the span" and none has to be clamped (and so
//! fired early). An event sits at the level of the highest bit in which its due time differs
//! from the wheel's current time (`elapsed`), in wheel ticks, which gives the invariant the
//! whole structure rests on:
//!
//! * every event at level `l` agrees with `elapsed` in all bits above level `l`, and its
//!   slot index at level `l` is not below `elapsed`'s;
//! * hence every event at a lower level is due before every event at a higher one, and
//!   inside a level the lowest occupied slot at or after `elapsed`'s slot is the earliest.
//!
//! Finding the next expiration is a `trailing_zeros` on two bitmaps. Inside a level-0 slot
//! events are kept in exact due-time order (Kobayashi's two-level scheduler: a coarse ring,
//! precise order within a slot), so the slot's head is the exact earliest event; the ordered
//! insert walks from the tail, which is short because level-0 slots are narrow (64 ticks,
//! about 30 ns on a 2 GHz TSC) and new events are usually the latest. A higher slot is
//! "cascaded" (its events re-inserted relative to the new `elapsed`, landing at lower
//! levels) when the time reaches its start. Each event cascades at most ten times in its
//! life, so expiry is amortised O(1). A cascade that would walk far to keep a level-0 slot
//! in order (thousands of events due within one slot, arriving in random order) appends
//! instead and sorts the slot once, so a crowd costs O(n log n), not O(n²).
//!
//! Nodes live in a slab owned by the caller and carry two sets of links, so that two wheels
//! (due times and deadlines) can index the same nodes without allocating. Slot lists are
//! doubly linked with head and tail kept in the wheel, so insert touches one neighbour and
//! cancel two.

/// Index meaning "no node".
pub(crate) const NIL: u32 = u32::MAX;
/// `loc` value of a node that is in no wheel.
pub(crate) const NO_LOC: u16 = u16::MAX;

const BITS: u32 = 6;
const SLOTS: usize = 1 << BITS;
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// 11 × 6 bits ≥ 64 bits: the wheel spans every u64 time.
pub(crate) const LEVELS: usize = 11;
/// The longest walk from a level-0 slot's tail a cascade makes to insert a node in order;
/// past it, the node is appended and the slot sorted when the cascade ends.
const CASCADE_WALK: usize = 8;

/// One wheel's intrusive links in a node: the node's time in that wheel and its neighbours
/// in a doubly linked slot list (`NIL` at the ends).
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
/// 40 bytes and the payload (`Option<E>`), rounded up to 8: not padded to a cache line.
/// Padding keeps a fired node on one line, but measured against this layout (`bench core`,
/// schedule then fire at 1,000 and at 1,000,000 pending, cold nodes) it saved nothing
/// measurable (presumably because the adjacent-line prefetcher fetches lines in pairs) and
/// cost 8 bytes per pending event with a `u64` or a `Waker`, 16 with `()`.
#[derive(Debug)]
pub(crate) struct Node<E> {
    pub links: [Link; 2],
    /// `level * 64 + slot` in each wheel, or [`NO_LOC`].
    pub loc: [u16; 2],
    pub generation: u32,
    pub payload: Option<E>,
}

/// A slot's list: its first and last node (`NIL` when empty), side by side so that one cache
/// line holds both ends of eight neighbouring slots.
#[derive(Clone, Copy, Debug)]
struct Slot {
    head: u32,
    tail: u32,
}

impl Slot {
    const EMPTY: Slot = Slot {
        head: NIL,
        tail: NIL,
    };
}

/// The wheel keeps what every operation reads in its first cache line (its time, length,
/// level summary, the slots' address and level 0's occupancy), and its 704 slots out of line,
/// so that a trigger state that fires an event touches few lines: a server's system calls
/// between two trigger states evict the first-level cache, and each line touched is then a
/// miss.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Wheel {
    /// The wheel's notion of the current time, in clock ticks; no node is due before it.
    elapsed: u64,
    len: usize,
    slots: Box<[[Slot; SLOTS]; LEVELS]>,
    /// Which of the node's two links this wheel uses.
    link: usize,
    /// log2 of the clock ticks in one wheel tick.
    shift: u32,
    nonempty_levels: u16,
    occupied: [u64; LEVELS],
}

/// The level at which an event due at wheel tick `when` sits when the wheel's time is
/// `elapsed` (both in wheel ticks).
#[inline(always)]
fn level_for(elapsed: u64, when: u64) -> usize {
    let masked = (elapsed ^ when) | SLOT_MASK;
    ((63 - masked.leading_zeros()) / BITS) as usize
}

#[inline(always)]
fn slot_for(when: u64, level: usize) -> usize {
    ((when >> (BITS as usize * level)) & SLOT_MASK) as usize
}

/// The first wheel tick of `slot` at `level`, in the window of `elapsed` (wheel ticks).
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
    /// A wheel over `links[link]` of the nodes, whose slots at level 0 are `2^shift` clock
    /// ticks wide, starting at clock time `elapsed`.
    pub(crate) fn new(link: usize, shift: u32, elapsed: u64) -> Self {
        Wheel {
            elapsed,
            len: 0,
            slots: Box::new([[Slot::EMPTY; SLOTS]; LEVELS]),
            link,
            shift: shift.min(32),
            nonempty_levels: 0,
            occupied: [0; LEVELS],
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Inserts node `idx` (its `links[self.link].when` already set). Returns a lower bound
    /// on the earliest due time in the wheel's slot that received it (exact at level 0).
    #[inline]
    pub(crate) fn insert<E>(&mut self, nodes: &mut [Node<E>], idx: u32) -> u64 {
        let when = nodes[idx as usize].links[self.link].when;
        let (level, slot) = self.place(when);
        if level == 0 {
            self.insert_ordered(nodes, slot, idx, when);
            when
        } else {
            self.push_back(nodes, level, slot, idx);
            slot_start(self.elapsed >> self.shift, level, slot) << self.shift
        }
    }

    /// Where an event due at clock time `when` goes now: `(level, slot)`. A time in the past
    /// (the caller's contract forbids it, but be safe) is placed in the current slot, where
    /// the next poll finds it due.
    #[inline(always)]
    fn place(&self, when: u64) -> (usize, usize) {
        let now_w = self.elapsed >> self.shift;
        let when_w = when.max(self.elapsed) >> self.shift;
        let level = level_for(now_w, when_w);
        (level, slot_for(when_w, level))
    }

    /// Removes node `idx`, which must be in this wheel.
    #[inline]
    pub(crate) fn remove<E>(&mut self, nodes: &mut [Node<E>], idx: u32) {
        let loc = nodes[idx as usize].loc[self.link];
        debug_assert_ne!(loc, NO_LOC, "removing a node that is not in the wheel");
        let (level, slot) = ((loc as usize) >> BITS, (loc as usize) & (SLOTS - 1));
        self.unlink(nodes, level, slot, idx);
    }

    /// The earliest non-empty slot: `(level, slot, its first clock tick)`.
    #[inline]
    pub(crate) fn next_expiration(&self) -> Option<(usize, usize, u64)> {
        if self.nonempty_levels == 0 {
            return None;
        }
        let level = self.nonempty_levels.trailing_zeros() as usize;
        let now_w = self.elapsed >> self.shift;
        let current = slot_for(now_w, level);
        let ahead = self.occupied[level] & (u64::MAX << current);
        debug_assert_ne!(ahead, 0, "an occupied slot lies behind the wheel's time");
        let bits = if ahead != 0 {
            ahead
        } else {
            self.occupied[level]
        };
        let slot = bits.trailing_zeros() as usize;
        Some((level, slot, slot_start(now_w, level, slot) << self.shift))
    }

    /// The time at which the wheel next has work: the exact earliest due time when it is at
    /// level 0, else the start of the slot to cascade. `u64::MAX` when empty.
    #[inline]
    pub(crate) fn next_check<E>(&self, nodes: &[Node<E>]) -> u64 {
        match self.next_expiration() {
            None => u64::MAX,
            Some((0, slot, _)) => nodes[self.slots[0][slot].head as usize].links[self.link].when,
            Some((_, _, start)) => start,
        }
    }

    /// The exact earliest `when` in the wheel. Scans one slot when the earliest is above
    /// level 0.
    pub(crate) fn earliest<E>(&self, nodes: &[Node<E>]) -> Option<u64> {
        let (level, slot, _) = self.next_expiration()?;
        let head = self.slots[level][slot].head;
        if level == 0 {
            return Some(nodes[head as usize].links[self.link].when);
        }
        let mut best = u64::MAX;
        let mut cur = head;
        while cur != NIL {
            let link = &nodes[cur as usize].links[self.link];
            best = best.min(link.when);
            cur = link.next;
        }
        Some(best)
    }

    /// Removes and returns the next node due at or before `now`, cascading higher slots
    /// whose start has been reached. `None` when nothing is due; the wheel's time is then
    /// moved up to `now`.
    #[inline]
    pub(crate) fn pop_due<E>(&mut self, nodes: &mut [Node<E>], now: u64) -> Option<u32> {
        self.pop_due_or_next(nodes, now).ok().map(|(idx, _)| idx)
    }

    /// [`Wheel::pop_due`], but when nothing is due it returns [`Wheel::next_check`] (as
    /// `Err`), which it has just computed anyway; and with the node it returns what
    /// [`Wheel::settle`] says after taking it out.
    #[inline]
    pub(crate) fn pop_due_or_next<E>(
        &mut self,
        nodes: &mut [Node<E>],
        now: u64,
    ) -> Result<(u32, Option<u64>), u64> {
        loop {
            match self.next_expiration() {
                Some((0, slot, _)) => {
                    let idx = self.slots[0][slot].head;
                    let when = nodes[idx as usize].links[self.link].when;
                    if when > now {
                        self.elapsed = self.elapsed.max(now);
                        return Err(when);
                    }
                    self.elapsed = self.elapsed.max(when);
                    self.unlink(nodes, 0, slot, idx);
                    return Ok((idx, self.settle(nodes, now)));
                }
                Some((level, slot, start)) if start <= now => {
                    self.elapsed = self.elapsed.max(start);
                    self.cascade(nodes, level, slot);
                }
                other => {
                    self.elapsed = self.elapsed.max(now);
                    return Err(other.map_or(u64::MAX, |(_, _, start)| start));
                }
            }
        }
    }

    /// After a node due at or before `now` was taken out: if nothing else is due at `now`,
    /// moves the wheel's time up to `now` and returns when the wheel next has work (as
    /// [`Wheel::next_check`]); `None` while more is due. A pop that leaves the wheel's time
    /// behind `now` would put an event scheduled just after `now` (a handler re-arming itself
    /// at the next tick) on a higher level, to be cascaded down again on the next pop.
    #[inline]
    fn settle<E>(&mut self, nodes: &[Node<E>], now: u64) -> Option<u64> {
        let next = match self.next_expiration() {
            None => u64::MAX,
            Some((0, slot, _)) => nodes[self.slots[0][slot].head as usize].links[self.link].when,
            Some((_, _, start)) => start,
        };
        if next <= now {
            return None;
        }
        self.elapsed = self.elapsed.max(now);
        Some(next)
    }

    /// Moves the wheel's time towards `now` without removing anything: cascades every
    /// higher slot that has started, and stops at a due level-0 slot if there is one.
    pub(crate) fn advance<E>(&mut self, nodes: &mut [Node<E>], now: u64) {
        loop {
            match self.next_expiration() {
                Some((level, slot, start)) if level > 0 && start <= now => {
                    self.elapsed = self.elapsed.max(start);
                    self.cascade(nodes, level, slot);
                }
                Some((0, slot, _)) => {
                    let when = nodes[self.slots[0][slot].head as usize].links[self.link].when;
                    self.elapsed = self.elapsed.max(now.min(when));
                    return;
                }
                _ => {
                    self.elapsed = self.elapsed.max(now);
                    return;
                }
            }
        }
    }

    /// Re-inserts every node of a slot relative to the (just advanced) wheel time, in list
    /// (schedule) order, so that events due at the same tick keep their order. Only called
    /// when every lower level is empty, so the level-0 slots it fills hold only its nodes.
    ///
    /// A node bound for level 0 is inserted in order if its place is a few nodes from the
    /// slot's tail (the usual case), and otherwise appended, the slot then sorted once at
    /// the end. Many events due within a few nanoseconds of each other (deadlines computed
    /// alike, mapped from slightly different clock readings) reach one slot in random order:
    /// an ordered insert each would walk the slot, O(n²) for the cascade, where the sort is
    /// O(n log n).
    fn cascade<E>(&mut self, nodes: &mut [Node<E>], level: usize, slot: usize) {
        let w = self.link;
        let mut cur = self.slots[level][slot].head;
        self.slots[level][slot].head = NIL;
        self.slots[level][slot].tail = NIL;
        self.clear_bit(level, slot);
        // Level-0 slots where an ordered insert gave up (a walk past `CASCADE_WALK`): appended
        // to from then on, and sorted at the end.
        let mut unsorted = 0u64;
        while cur != NIL {
            let next = nodes[cur as usize].links[w].next;
            self.len -= 1;
            let when = nodes[cur as usize].links[w].when;
            let (to, to_slot) = self.place(when);
            if to > 0 {
                self.push_back(nodes, to, to_slot, cur);
            } else if unsorted & (1 << to_slot) != 0
                || !self.insert_ordered_within(nodes, to_slot, cur, when, CASCADE_WALK)
            {
                self.push_back(nodes, 0, to_slot, cur);
                unsorted |= 1 << to_slot;
            }
            cur = next;
        }
        while unsorted != 0 {
            self.sort_slot(nodes, unsorted.trailing_zeros() as usize);
            unsorted &= unsorted - 1;
        }
    }

    /// Relinks level-0 `slot` in due-time order (ties in list order). It allocates its
    /// buffer: only a crowd (a walk past `CASCADE_WALK`) comes here, and the wheel stays the
    /// size its callers lay out around.
    fn sort_slot<E>(&mut self, nodes: &mut [Node<E>], slot: usize) {
        let w = self.link;
        let mut order: Vec<(u64, u32, u32)> = Vec::with_capacity(2 * CASCADE_WALK);
        let mut cur = self.slots[0][slot].head;
        while cur != NIL {
            let link = &nodes[cur as usize].links[w];
            // The list position breaks ties, so the unstable sort keeps their order.
            order.push((link.when, order.len() as u32, cur));
            cur = link.next;
        }
        order.sort_unstable();
        let mut prev = NIL;
        for &(_, _, idx) in &order {
            {
                let link = &mut nodes[idx as usize].links[w];
                link.prev = prev;
                link.next = NIL;
            }
            if prev == NIL {
                self.slots[0][slot].head = idx;
            } else {
                nodes[prev as usize].links[w].next = idx;
            }
            prev = idx;
        }
        self.slots[0][slot].tail = prev;
    }

    /// Inserts into a level-0 slot keeping due-time order (ties in insertion order). New
    /// events usually go last, so the walk from the tail is short.
    #[inline(always)]
    fn insert_ordered<E>(&mut self, nodes: &mut [Node<E>], slot: usize, idx: u32, when: u64) {
        let inserted = self.insert_ordered_within(nodes, slot, idx, when, usize::MAX);
        debug_assert!(inserted);
    }

    /// [`Wheel::insert_ordered`] if its place is at most `max_walk` nodes from the tail;
    /// otherwise inserts nothing and returns false.
    #[inline(always)]
    fn insert_ordered_within<E>(
        &mut self,
        nodes: &mut [Node<E>],
        slot: usize,
        idx: u32,
        when: u64,
        max_walk: usize,
    ) -> bool {
        let w = self.link;
        let mut after = self.slots[0][slot].tail;
        let mut walked = 0;
        while after != NIL && nodes[after as usize].links[w].when > when {
            if walked == max_walk {
                return false;
            }
            walked += 1;
            after = nodes[after as usize].links[w].prev;
        }
        if after == self.slots[0][slot].tail {
            self.push_back(nodes, 0, slot, idx);
            return true;
        }
        // `after` is NIL (new head) or a node with a successor.
        let next = if after == NIL {
            self.slots[0][slot].head
        } else {
            nodes[after as usize].links[w].next
        };
        {
            let link = &mut nodes[idx as usize].links[w];
            link.prev = after;
            link.next = next;
        }
        nodes[next as usize].links[w].prev = idx;
        if after == NIL {
            self.slots[0][slot].head = idx;
        } else {
            nodes[after as usize].links[w].next = idx;
        }
        nodes[idx as usize].loc[w] = slot as u16;
        self.len += 1;
        true
    }

    #[inline(always)]
    fn push_back<E>(&mut self, nodes: &mut [Node<E>], level: usize, slot: usize, idx: u32) {
        let w = self.link;
        let tail = self.slots[level][slot].tail;
        {
            let link = &mut nodes[idx as usize].links[w];
            link.prev = tail;
            link.next = NIL;
        }
        if tail == NIL {
            self.slots[level][slot].head = idx;
            self.occupied[level] |= 1 << slot;
            self.nonempty_levels |= 1 << level;
        } else {
            nodes[tail as usize].links[w].next = idx;
        }
        self.slots[level][slot].tail = idx;
        nodes[idx as usize].loc[w] = ((level << BITS) | slot) as u16;
        self.len += 1;
    }

    #[inline(always)]
    fn unlink<E>(&mut self, nodes: &mut [Node<E>], level: usize, slot: usize, idx: u32) {
        let w = self.link;
        let Link { prev, next, .. } = nodes[idx as usize].links[w];
        if prev == NIL {
            self.slots[level][slot].head = next;
        } else {
            nodes[prev as usize].links[w].next = next;
        }
        if next == NIL {
            self.slots[level][slot].tail = prev;
        } else {
            nodes[next as usize].links[w].prev = prev;
        }
        if prev == NIL && next == NIL {
            self.clear_bit(level, slot);
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

    /// The memory a pending event costs: 40 bytes of links, place and generation beside the
    /// payload, at 8-byte alignment, not padded to a cache line.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_node_is_not_padded_to_a_cache_line() {
        assert_eq!(std::mem::align_of::<Node<u64>>(), 8);
        assert_eq!(std::mem::size_of::<Node<()>>(), 48);
        assert_eq!(std::mem::size_of::<Node<u64>>(), 56);
        assert_eq!(std::mem::size_of::<Node<std::task::Waker>>(), 56);
    }

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
        let mut wheel = Wheel::new(0, 0, 0);
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
    fn coarse_slots_keep_exact_order() {
        // Slots of 1024 ticks: 10, 900, 5, 1023 share slot 0 and must still pop in order.
        let whens = [10u64, 900, 5, 1023, 1024, 5, 70_000, 69_999];
        let mut nodes: Vec<Node<()>> = whens.iter().map(|&w| node(w)).collect();
        let mut wheel = Wheel::new(0, 10, 0);
        for i in 0..nodes.len() as u32 {
            wheel.insert(&mut nodes, i);
        }
        assert_eq!(wheel.next_check(&nodes), 5);
        assert_eq!(wheel.pop_due(&mut nodes, 4), None);
        let mut order = vec![];
        while let Some(i) = wheel.pop_due(&mut nodes, 69_999) {
            order.push(i);
        }
        assert_eq!(order, vec![2, 5, 0, 1, 3, 4, 7]);
        assert_eq!(wheel.next_check(&nodes), 70_000);
    }

    #[test]
    fn the_last_pop_moves_the_wheel_up_to_now() {
        // An event due at 5, popped at 100_000 (a trigger state long after): with nothing
        // else due, the wheel's time moves to 100_000, and the pop says when it next has work.
        let mut nodes = vec![node(5), node(70_000_000), node(100_001)];
        let mut wheel = Wheel::new(0, 0, 0);
        wheel.insert(&mut nodes, 0);
        wheel.insert(&mut nodes, 1);
        let popped = wheel.pop_due_or_next(&mut nodes, 100_000);
        // (The far event sits in a higher slot: the next check is that slot's start.)
        let next = wheel.next_check(&nodes);
        assert!(next > 100_000 && next <= 70_000_000);
        assert_eq!(popped, Ok((0, Some(next))));
        // So an event re-armed just after now lands at level 0, ready for the next pop,
        // instead of a higher level to be cascaded down first.
        wheel.insert(&mut nodes, 2);
        assert_eq!(nodes[2].loc[0] >> BITS, 0, "level of the re-armed event");
        assert_eq!(
            wheel.pop_due_or_next(&mut nodes, 100_001),
            Ok((2, Some(next)))
        );
        let mut more = vec![node(200_000), node(200_000)];
        let mut busy = Wheel::new(0, 0, 0);
        busy.insert(&mut more, 0);
        busy.insert(&mut more, 1);
        assert_eq!(busy.pop_due_or_next(&mut more, 300_000), Ok((0, None)));
        assert_eq!(
            busy.pop_due_or_next(&mut more, 300_000),
            Ok((1, Some(u64::MAX)))
        );
    }

    #[test]
    fn a_crowded_slot_cascades_into_exact_order() {
        // 5,000 events due within 61 ticks of 1 << 20, one level-0 slot of 64 ticks,
        // scheduled in scrambled order (and not in slab order), with ties: they sit in one
        // higher slot, and cascade into level 0 in exact order, ties in schedule order.
        let base = 1u64 << 20;
        let n = 5_000u32;
        let whens: Vec<u64> = (0..u64::from(n)).map(|i| base + (i * 7_919) % 61).collect();
        let mut nodes: Vec<Node<()>> = whens.iter().map(|&w| node(w)).collect();
        let mut wheel = Wheel::new(0, 6, 0);
        let schedule: Vec<u32> = (0..n).map(|i| (i * 3_001) % n).collect();
        for &i in &schedule {
            wheel.insert(&mut nodes, i);
        }
        assert_ne!(nodes[0].loc[0] >> BITS, 0, "scheduled above level 0");
        assert_eq!(wheel.pop_due(&mut nodes, base - 1), None);
        let mut popped = vec![];
        while let Some(i) = wheel.pop_due(&mut nodes, base + 64) {
            popped.push(i);
        }
        let mut expected = schedule.clone();
        expected.sort_by_key(|&i| whens[i as usize]); // stable: ties in schedule order
        assert_eq!(popped, expected);
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn nothing_pops_early() {
        let mut nodes = vec![node(1000), node(1001)];
        let mut wheel = Wheel::new(0, 0, 0);
        wheel.insert(&mut nodes, 0);
        wheel.insert(&mut nodes, 1);
        assert_eq!(wheel.pop_due(&mut nodes, 999), None);
        assert_eq!(wheel.pop_due(&mut nodes, 1000), Some(0));
        assert_eq!(wheel.pop_due(&mut nodes, 1000), None);
        wheel.remove(&mut nodes, 1);
        assert_eq!(wheel.next_expiration(), None);
    }
}
