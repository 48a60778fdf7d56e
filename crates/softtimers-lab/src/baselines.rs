//! The timer queues the facility is measured against, behind one interface.
//!
//! * [`HeapQueue`]: a `BinaryHeap` with lazy cancel (a generation table marks cancelled
//!   entries; they are skipped when they reach the top, and the heap is rebuilt when the
//!   dead outnumber the live), the usual hand-rolled timer queue.
//! * [`BTreeQueue`]: a `BTreeMap` keyed by (due, sequence), exact cancel.
//! * [`DelayQueueBench`]: `tokio_util::time::DelayQueue`, tokio's hierarchical wheel at 1 ms
//!   resolution, the one user-space networking uses today.
//! * [`SoftQueue`]: ours, [`softtimer::SoftTimers`].
//!
//! All keep the same contract on cancel: a handle names one scheduled event, and a stale
//! handle (its event already fired or cancelled, its slot perhaps reused) cancels nothing.
//! Handles carry the slot's generation, as the facility's ids do, so every queue pays for
//! the same check.
//!
//! Each runs on a clock of the caller's choosing: a shared [`SimClock`] for the
//! data-structure benchmarks (so that firing needs no waiting), the [`SystemClock`] for the
//! trigger-state check. All carry a `u64` payload.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use softtimer::{Clock, EventId, SimClock, SoftTimers, Span, SystemClock, TriggerSource};
use tokio_util::time::{DelayQueue, delay_queue};

/// The operations the core benchmark times.
pub trait TimerQueue {
    /// The implementation's name in tables and JSON.
    fn name(&self) -> &'static str;
    /// Schedules an event `delay` ticks from the clock's now; returns a handle for cancel.
    fn schedule(&mut self, delay: u64, payload: u64) -> u64;
    /// Cancels by handle (a no-op for a handle no longer pending, even if its slot has been
    /// reused by a later event).
    fn cancel(&mut self, handle: u64);
    /// The trigger-state check: reads the clock and fires everything due; returns how many.
    fn poll(&mut self) -> usize;
    /// Events pending (cancelled-but-not-purged entries excluded).
    fn len(&self) -> usize;
    /// Whether nothing is pending.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Ours.
pub struct SoftQueue<C: Clock> {
    timers: SoftTimers<u64, C>,
    sink: u64,
}

impl<C: Clock> SoftQueue<C> {
    /// An empty facility on `clock`, with finest wheel slots of `slot_ticks` clock ticks
    /// (`None`: the facility's default).
    pub fn new(clock: C, slot_ticks: Option<u64>) -> Self {
        let config = softtimer::Config {
            slot_ticks,
            ..softtimer::Config::default()
        };
        let timers = SoftTimers::with_config(clock, config).expect("valid config");
        SoftQueue { timers, sink: 0 }
    }
}

impl<C: Clock> TimerQueue for SoftQueue<C> {
    fn name(&self) -> &'static str {
        "softtimer"
    }
    #[inline]
    fn schedule(&mut self, delay: u64, payload: u64) -> u64 {
        self.timers
            .schedule_soft_event(Span::from_ticks(delay), payload)
            .expect("delay fits")
            .to_u64()
    }
    #[inline]
    fn cancel(&mut self, handle: u64) {
        self.timers.cancel(EventId::from_u64(handle));
    }
    #[inline]
    fn poll(&mut self) -> usize {
        let sink = &mut self.sink;
        self.timers.trigger(TriggerSource::User, |_, ev| {
            *sink = sink.wrapping_add(ev.event)
        })
    }
    fn len(&self) -> usize {
        self.timers.pending()
    }
}

/// `BinaryHeap` with lazy cancel.
pub struct HeapQueue<C: Clock> {
    clock: C,
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    /// Generation per slot; a heap entry is live iff its generation matches and `live` says so.
    generation: Vec<u32>,
    live: Vec<bool>,
    free: Vec<u32>,
    pending: usize,
    sink: u64,
}

impl<C: Clock> HeapQueue<C> {
    /// An empty queue on `clock`.
    pub fn new(clock: C) -> Self {
        HeapQueue {
            clock,
            heap: BinaryHeap::new(),
            generation: Vec::new(),
            live: Vec::new(),
            free: Vec::new(),
            pending: 0,
            sink: 0,
        }
    }

    fn release(&mut self, slot: u32) {
        self.live[slot as usize] = false;
        self.generation[slot as usize] = self.generation[slot as usize].wrapping_add(1);
        self.free.push(slot);
        self.pending -= 1;
    }
}

impl<C: Clock> TimerQueue for HeapQueue<C> {
    fn name(&self) -> &'static str {
        "binary_heap"
    }
    #[inline]
    fn schedule(&mut self, delay: u64, payload: u64) -> u64 {
        let due = self.clock.now().ticks() + delay + 1;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.generation.push(0);
            self.live.push(false);
            (self.generation.len() - 1) as u32
        });
        self.live[slot as usize] = true;
        let generation = self.generation[slot as usize];
        self.heap.push(Reverse((due, slot, generation)));
        self.pending += 1;
        self.sink ^= payload;
        (u64::from(generation) << 32) | u64::from(slot)
    }
    #[inline]
    fn cancel(&mut self, handle: u64) {
        let (slot, generation) = (handle as u32, (handle >> 32) as u32);
        if self.generation.get(slot as usize) == Some(&generation) && self.live[slot as usize] {
            self.release(slot);
            // Rebuild when dead entries outnumber live ones, so memory stays bounded.
            if self.heap.len() > 2 * self.pending + 64 {
                let (generations, live) = (&self.generation, &self.live);
                self.heap.retain(|Reverse((_, s, g))| {
                    generations[*s as usize] == *g && live[*s as usize]
                });
            }
        }
    }
    #[inline]
    fn poll(&mut self) -> usize {
        let now = self.clock.now_unordered().ticks();
        let mut fired = 0;
        while let Some(&Reverse((due, slot, generation))) = self.heap.peek() {
            if due > now {
                break;
            }
            self.heap.pop();
            if self.generation[slot as usize] == generation && self.live[slot as usize] {
                self.release(slot);
                self.sink = self.sink.wrapping_add(due);
                fired += 1;
            }
        }
        fired
    }
    fn len(&self) -> usize {
        self.pending
    }
}

/// Handle slots with generations, shared by the hand-rolled queues: a handle is
/// `generation << 32 | slot`, and a slot's generation moves on when it is released, so a
/// stale handle no longer matches.
struct Slots<T> {
    entries: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
}

impl<T> Slots<T> {
    fn new() -> Self {
        Slots {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Takes a free slot for `value`; returns its handle.
    #[inline]
    fn insert(&mut self, value: T) -> u64 {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.entries.push((0, None));
            (self.entries.len() - 1) as u32
        });
        let entry = &mut self.entries[slot as usize];
        entry.1 = Some(value);
        (u64::from(entry.0) << 32) | u64::from(slot)
    }

    /// Takes the value out of the slot `handle` names, if the handle is current.
    #[inline]
    fn remove(&mut self, handle: u64) -> Option<T> {
        let (slot, generation) = (handle as u32, (handle >> 32) as u32);
        let entry = self.entries.get_mut(slot as usize)?;
        if entry.0 != generation {
            return None;
        }
        let value = entry.1.take()?;
        self.release(slot);
        Some(value)
    }

    /// Frees `slot` (whose value the caller took) for reuse under a new generation.
    #[inline]
    fn release(&mut self, slot: u32) {
        let entry = &mut self.entries[slot as usize];
        entry.0 = entry.0.wrapping_add(1);
        entry.1 = None;
        self.free.push(slot);
    }
}

/// `BTreeMap` keyed by (due, sequence).
pub struct BTreeQueue<C: Clock> {
    clock: C,
    /// (due, sequence) → payload << 32 | slot.
    map: BTreeMap<(u64, u64), u64>,
    /// Handle slot → key, so that cancel can find the entry.
    keys: Slots<(u64, u64)>,
    seq: u64,
    sink: u64,
}

impl<C: Clock> BTreeQueue<C> {
    /// An empty queue on `clock`.
    pub fn new(clock: C) -> Self {
        BTreeQueue {
            clock,
            map: BTreeMap::new(),
            keys: Slots::new(),
            seq: 0,
            sink: 0,
        }
    }
}

impl<C: Clock> TimerQueue for BTreeQueue<C> {
    fn name(&self) -> &'static str {
        "btree_map"
    }
    #[inline]
    fn schedule(&mut self, delay: u64, payload: u64) -> u64 {
        let due = self.clock.now().ticks() + delay + 1;
        self.seq += 1;
        let key = (due, self.seq);
        let handle = self.keys.insert(key);
        self.map
            .insert(key, (payload << 32) | (handle & 0xffff_ffff));
        handle
    }
    #[inline]
    fn cancel(&mut self, handle: u64) {
        if let Some(key) = self.keys.remove(handle) {
            self.map.remove(&key);
        }
    }
    #[inline]
    fn poll(&mut self) -> usize {
        let now = self.clock.now_unordered().ticks();
        let mut fired = 0;
        while let Some(entry) = self.map.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let value = entry.remove();
            self.keys.release(value as u32);
            self.sink = self.sink.wrapping_add(value >> 32);
            fired += 1;
        }
        fired
    }
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// tokio-util's `DelayQueue` on a current-thread runtime.
///
/// On a [`SimClock`] the runtime's time is paused and follows the simulated clock (each
/// [`TimerQueue::poll`] advances tokio's time by what the simulated clock moved); otherwise
/// it runs on tokio's real clock.
pub struct DelayQueueBench {
    runtime: tokio::runtime::Runtime,
    /// Payload and the handle slot, so that expiry can retire the handle.
    queue: DelayQueue<(u64, u32)>,
    keys: Slots<delay_queue::Key>,
    hz: u64,
    /// On a simulated clock: the clock, its value when tokio's time was last moved, and
    /// tokio's paused `Instant` at the simulated clock's start.
    sim: Option<(SimClock, u64, tokio::time::Instant, u64)>,
    sink: u64,
}

impl DelayQueueBench {
    /// An empty queue following a simulated clock.
    pub fn simulated(clock: SimClock) -> Self {
        let hz = clock.resolution_hz();
        let mut queue = Self::build(None, hz, true);
        let base = {
            let _guard = queue.runtime.enter();
            tokio::time::Instant::now()
        };
        let start = clock.now().ticks();
        queue.sim = Some((clock, start, base, start));
        queue
    }

    /// An empty queue on tokio's real clock; delays are in ticks of a clock at `hz`.
    pub fn real(hz: u64) -> Self {
        Self::build(None, hz, false)
    }

    fn build(
        sim: Option<(SimClock, u64, tokio::time::Instant, u64)>,
        hz: u64,
        paused: bool,
    ) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(paused)
            .build()
            .expect("a current-thread runtime builds");
        let queue = {
            let _guard = runtime.enter();
            DelayQueue::new()
        };
        DelayQueueBench {
            runtime,
            queue,
            keys: Slots::new(),
            hz,
            sim,
            sink: 0,
        }
    }
}

impl DelayQueueBench {
    /// Takes every expired entry the queue will hand out without the driver's help.
    fn drain(&mut self) -> usize {
        let mut cx = Context::from_waker(Waker::noop());
        let mut fired = 0;
        while let Poll::Ready(Some(expired)) = self.queue.poll_expired(&mut cx) {
            let (payload, slot) = expired.into_inner();
            self.keys.release(slot);
            self.sink = self.sink.wrapping_add(payload);
            fired += 1;
        }
        fired
    }
}

impl TimerQueue for DelayQueueBench {
    fn name(&self) -> &'static str {
        "tokio_delay_queue"
    }
    #[inline]
    fn schedule(&mut self, delay: u64, payload: u64) -> u64 {
        let nanos = Span::from_ticks(delay + 1).as_nanos(self.hz);
        // The slot the handle will name; the key is known only after the insert.
        let slot = self
            .keys
            .free
            .last()
            .copied()
            .unwrap_or(self.keys.entries.len() as u32);
        // Only the insert that creates the queue's timer needs the runtime context; entering
        // it on every insert would charge the baseline for work it does not need.
        let _guard = self.queue.is_empty().then(|| self.runtime.enter());
        let key = match &self.sim {
            // Outside a runtime context tokio's `Instant::now()` is the real clock, not the
            // paused one, so on a simulated clock the deadline is computed from it.
            Some((clock, _, base, start)) => {
                let since_start = Span::from_ticks(clock.now().ticks() - start).as_nanos(self.hz);
                let when = *base + Duration::from_nanos(since_start + nanos);
                self.queue.insert_at((payload, slot), when)
            }
            None => self
                .queue
                .insert((payload, slot), Duration::from_nanos(nanos)),
        };
        let handle = self.keys.insert(key);
        debug_assert_eq!(handle as u32, slot);
        handle
    }
    #[inline]
    fn cancel(&mut self, handle: u64) {
        if let Some(key) = self.keys.remove(handle) {
            self.queue.remove(&key);
        }
    }
    fn poll(&mut self) -> usize {
        // Polling may create the queue's `Sleep`, which needs the runtime context (a task
        // polled by tokio has it already; here it costs a thread-local swap per poll).
        let _guard = self.runtime.enter();
        let Some((clock, seen, _, _)) = &mut self.sim else {
            return self.drain();
        };
        let now = clock.now().ticks();
        let moved = Span::from_ticks(now - *seen).as_nanos(self.hz);
        *seen = now;
        if moved > 0 {
            // `advance` would not let the driver process the timers it jumps past;
            // sleeping on the paused clock auto-advances through them, firing each.
            self.runtime
                .block_on(tokio::time::sleep(Duration::from_nanos(moved)));
        }
        // The queue re-arms its `Sleep` as it drains, possibly at a time already passed;
        // that `Sleep` completes only when the driver gets a turn (a task would be woken
        // and polled again). Drain until a drain right after a turn finds nothing.
        let mut fired = self.drain();
        loop {
            self.runtime.block_on(tokio::task::yield_now());
            let more = self.drain();
            if more == 0 {
                return fired;
            }
            fired += more;
        }
    }
    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// Every implementation on one shared simulated clock.
pub fn simulated(clock: &SimClock, slot_ticks: Option<u64>) -> Vec<Box<dyn TimerQueue>> {
    vec![
        Box::new(SoftQueue::new(clock.clone(), slot_ticks)),
        Box::new(HeapQueue::new(clock.clone())),
        Box::new(BTreeQueue::new(clock.clone())),
        Box::new(DelayQueueBench::simulated(clock.clone())),
    ]
}

/// Every implementation on the real clock (`clock` for ours and the hand-rolled queues,
/// tokio's own for `DelayQueue`).
pub fn real(clock: SystemClock, slot_ticks: Option<u64>) -> Vec<Box<dyn TimerQueue>> {
    vec![
        Box::new(SoftQueue::new(clock, slot_ticks)),
        Box::new(HeapQueue::new(clock)),
        Box::new(BTreeQueue::new(clock)),
        Box::new(DelayQueueBench::real(clock.resolution_hz())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every implementation fires exactly the events due, and cancel removes exactly one.
    #[test]
    fn baselines_agree_on_what_fires() {
        let clock = SimClock::new(1_000_000); // 1 tick = 1 µs; DelayQueue rounds to 1 ms
        for mut q in simulated(&clock, None) {
            clock.set(0);
            let a = q.schedule(500, 1);
            q.schedule(1_500, 2);
            q.schedule(5_000_000, 3);
            let d = q.schedule(2_000, 4);
            q.cancel(d);
            q.cancel(d);
            assert_eq!(q.len(), 3, "{}", q.name());
            clock.advance(3_000);
            assert_eq!(q.poll(), 2, "{}", q.name());
            q.cancel(a); // already fired: no-op
            assert_eq!(q.len(), 1, "{}", q.name());
            clock.advance(5_000_000);
            assert_eq!(q.poll(), 1, "{}", q.name());
            assert!(q.is_empty(), "{}", q.name());
        }
    }

    /// A stale handle (its event fired, or cancelled) cancels nothing, even when a new
    /// event has taken its slot.
    fn stale_handles_cancel_nothing(mut q: Box<dyn TimerQueue>, clock: &SimClock) {
        let name = q.name();
        clock.set(0);
        // Fired, then its slot reused.
        let fired = q.schedule(500, 1);
        clock.advance(3_000);
        assert_eq!(q.poll(), 1, "{name}");
        let fresh = q.schedule(2_000, 2);
        q.cancel(fired);
        assert_eq!(
            q.len(),
            1,
            "{name}: a fired event's handle cancelled a new event"
        );
        // Cancelled, then its slot reused.
        q.cancel(fresh);
        assert!(q.is_empty(), "{name}");
        let newest = q.schedule(2_000, 3);
        q.cancel(fresh);
        q.cancel(fired);
        assert_eq!(
            q.len(),
            1,
            "{name}: a cancelled event's handle cancelled a new event"
        );
        clock.advance(5_000);
        assert_eq!(q.poll(), 1, "{name}: the new event fires");
        q.cancel(newest);
        assert!(q.is_empty(), "{name}");
    }

    #[test]
    fn every_queue_ignores_stale_handles() {
        let clock = SimClock::new(1_000_000);
        for q in simulated(&clock, None) {
            stale_handles_cancel_nothing(q, &clock);
        }
    }
}
