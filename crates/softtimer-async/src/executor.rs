//! The executor: one per loop thread, on the loop's step API.
//!
//! A loop thread runs, in turn: the future `block_on` was given (when woken), a batch of
//! ready tasks (each poll followed by a trigger state), the tasks other threads woke, and
//! then, when nothing is ready, the loop's idle policy ([`softtimer_rt::EventLoop::park`]):
//! fire, spin the last stretch before a due event, or block in `epoll_wait` until it. While
//! tasks keep it busy it looks at its descriptors, without blocking, between batches: after
//! [`BATCH`] polls, or after a batch once [`IO_INTERVAL`] has passed since the last look
//! (tasks that poll for long stretch that).
//!
//! Wakes: a task woken on its own loop thread is pushed onto a thread-local queue (what
//! `async-task` does, and nothing else: no lock, no atomic, no system call). A task woken
//! from another thread (or by the backstop thread) goes through the loop's remote queue and
//! its [`LoopWaker`], which writes the loop's eventfd only while the loop is blocked.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use async_task::Runnable;
use slab::Slab;
use softtimer::{Clock, Fired, SoftTimers, Span, TriggerSource};
use softtimer_rt::{EventLoop, LoopConfig, LoopHandle, LoopWaker, Parked, Ready, RtError};

use crate::clock::{RuntimeClock, TimeBase};
use crate::reactor::IoSource;

/// Task polls between two looks at the descriptors while tasks keep the loop busy.
pub(crate) const BATCH: usize = 64;
/// How long a busy loop goes without looking at its descriptors before it looks after the
/// batch it is running (each of the batch's polls may take longer).
pub(crate) const IO_INTERVAL: Duration = Duration::from_micros(50);

/// A soft event of the runtime.
pub(crate) enum TimerEvent {
    /// A timer's deadline: wake the task that waits for it.
    Wake(Waker),
    /// A paced socket's next departure: send what is due, from the handler.
    Depart(Arc<crate::pace::Departures>),
}

pub(crate) type Loop = EventLoop<TimerEvent, RuntimeClock>;
pub(crate) type Timers = LoopHandle<TimerEvent, RuntimeClock>;

/// The soft-event handler: runs at a trigger state on the loop thread, or on the backstop
/// thread when the loop has gone the backstop interval without one.
fn on_fired(timers: &mut SoftTimers<TimerEvent, RuntimeClock>, fired: Fired<TimerEvent>) {
    match fired.event {
        TimerEvent::Wake(waker) => waker.wake(),
        TimerEvent::Depart(departures) => departures.on_departure(timers, fired.now),
    }
}

/// Counters of one loop, written by its thread only (plain loads and stores, no
/// read-modify-write on the hot path), read from anywhere.
#[derive(Default)]
pub(crate) struct Counters {
    pub polls: AtomicU64,
    pub io_polls: AtomicU64,
    pub parks: AtomicU64,
    pub blocked_parks: AtomicU64,
    pub remote_wakes: AtomicU64,
    /// The loop's idle spin so far, in measurement-clock ticks (a total, stored after
    /// every park).
    pub idle_spin_ticks: AtomicU64,
    /// Written by any thread that polls a timer (rare).
    pub early_fires: AtomicU64,
}

impl Counters {
    #[inline(always)]
    fn add(counter: &AtomicU64, n: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
}

/// What every thread may reach of one loop.
pub(crate) struct LoopShared {
    pub index: usize,
    pub timers: Timers,
    pub time: TimeBase,
    waker: LoopWaker,
    /// Tasks woken from other threads, waiting for the loop thread.
    remote: Mutex<Vec<Runnable>>,
    /// The runtime is being dropped: the loop thread returns.
    shutdown: AtomicBool,
    /// The loop has shut down: nothing runs here any more.
    closed: AtomicBool,
    /// Descriptors registered with the loop's epoll set, by token.
    pub io: Mutex<Slab<Arc<IoSource>>>,
    pub counters: Counters,
    /// The runtime's handle (weak: the handle holds the loops).
    pub handle: OnceLock<Weak<crate::runtime::HandleInner>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LoopShared {
    /// Wakes the loop if it runs on a simulated clock, whose jumps wait for blocking work.
    pub(crate) fn wake_if_simulated(&self) {
        if matches!(self.time.clock(), RuntimeClock::Sim(_)) {
            self.waker.wake();
        }
    }

    /// Wakes the loop (from another thread): it looks at its queue and its timers again.
    pub(crate) fn wake(&self) {
        self.waker.wake();
    }

    /// Whether the loop has shut down (its runtime was dropped): nothing fires here any more.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Queues a task woken on another thread and wakes the loop.
    fn inject(&self, runnable: Runnable) {
        let mut remote = lock(&self.remote);
        if self.closed.load(Ordering::Acquire) {
            drop(remote);
            // The loop is gone: the task is cancelled here (its future dropped).
            drop(runnable);
            return;
        }
        remote.push(runnable);
        drop(remote);
        self.waker.wake();
    }

    /// Asks the loop thread to return (worker loops).
    pub(crate) fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    /// A descriptor became ready: record it and wake whoever waits.
    fn io_ready(&self, ready: Ready) {
        let source = lock(&self.io).get(ready.token as usize).cloned();
        if let Some(source) = source {
            source.set_ready(ready);
        }
    }
}

/// Operations a task may complete in one poll before a socket or timer that is ready makes
/// it yield anyway (tokio's co-operative budget has the same size): a task that loops over
/// a socket that always has data, or over timers that have passed, cannot keep the others
/// on its loop, and the loop's own I/O poll, from running.
const POLL_BUDGET: u32 = 128;

/// Whether the running poll may complete one more operation; with its budget spent, wakes
/// the task to run again after the others and says no (the caller returns `Pending`).
#[inline]
pub(crate) fn has_budget(cx: &Context<'_>) -> bool {
    if BUDGET.with(Cell::get) == 0 {
        cx.waker().wake_by_ref();
        return false;
    }
    true
}

/// An operation completed (a socket's system call, a timer's deadline passed): one unit of
/// the running poll's budget.
#[inline]
pub(crate) fn spend_budget() {
    BUDGET.with(|budget| match budget.get() {
        UNLIMITED | 0 => {}
        left => budget.set(left - 1),
    });
}

/// [`has_budget`], then [`spend_budget`]: for an operation that is complete once allowed
/// (a deadline found passed).
#[inline]
pub(crate) fn take_budget(cx: &Context<'_>) -> bool {
    let allowed = has_budget(cx);
    if allowed {
        spend_budget();
    }
    allowed
}

/// A budget for one poll of a task or of `block_on`'s future: [`POLL_BUDGET`] while the
/// guard lives, unlimited again after, however the poll ends.
struct Budgeted;

impl Budgeted {
    #[inline]
    fn begin() -> Budgeted {
        BUDGET.with(|budget| budget.set(POLL_BUDGET));
        Budgeted
    }
}

impl Drop for Budgeted {
    #[inline]
    fn drop(&mut self) {
        BUDGET.with(|budget| budget.set(UNLIMITED));
    }
}

/// The budget outside a runtime's polls: a future polled by another executor, or by this
/// runtime's shutdown, is never made to yield.
const UNLIMITED: u32 = u32::MAX;

thread_local! {
    /// What is left of the running poll's budget ([`POLL_BUDGET`]); [`UNLIMITED`] outside a
    /// runtime's polls (spending leaves it so).
    static BUDGET: Cell<u32> = const { Cell::new(UNLIMITED) };
    /// The loop this thread runs now, or whose runtime it has entered (null: none).
    /// Compared, never dereferenced.
    static CURRENT: Cell<*const LoopShared> = const { Cell::new(std::ptr::null()) };
    /// Whether this thread is inside a loop's run (`block_on`, a worker, a shutdown), not
    /// only in a runtime's context ([`Runtime::enter`](crate::Runtime::enter)): a loop
    /// running must not block on another.
    static RUNNING: Cell<bool> = const { Cell::new(false) };
    /// How many [`Enter`] guards this thread holds: each checks, when dropped, that it is
    /// the latest, so that one dropped out of turn is caught before it moves anything.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Tasks woken on this thread, ready to run.
    static QUEUE: RefCell<VecDeque<Runnable>> = const { RefCell::new(VecDeque::new()) };
    static LOCAL: RefCell<Option<Rc<LocalLoop>>> = const { RefCell::new(None) };
    /// The time of the batch of task polls this thread's loop is running (the loop, and a
    /// `std` time and measurement-clock time read together as the batch began), so that the
    /// timers polled in it need not read both clocks each. `None` between batches.
    static BATCH_TIME: Cell<Option<(*const LoopShared, BatchTime)>> = const { Cell::new(None) };
}

/// A `std::time::Instant` and the measurement-clock time read with it.
pub(crate) type BatchTime = (std::time::Instant, softtimer::Instant);

/// Sets this thread's batch time for as long as it lives, and clears it however the batch
/// ends (a task's panic unwinding through it included).
struct BatchGuard;

impl BatchGuard {
    fn begin(owner: *const LoopShared, time: BatchTime) -> BatchGuard {
        BATCH_TIME.with(|t| t.set(Some((owner, time))));
        BatchGuard
    }
}

impl Drop for BatchGuard {
    fn drop(&mut self) {
        BATCH_TIME.with(|t| t.set(None));
    }
}

/// The time the batch of task polls `shared`'s loop runs on this thread began, if it is
/// running one here: never later than now, so a deadline it shows passed has passed.
#[inline]
pub(crate) fn batch_time(shared: &LoopShared) -> Option<BatchTime> {
    BATCH_TIME
        .with(Cell::get)
        .and_then(|(owner, time)| std::ptr::eq(owner, shared).then_some(time))
}

/// Whether this thread runs `shared`'s loop now.
#[inline(always)]
pub(crate) fn is_current(shared: *const LoopShared) -> bool {
    CURRENT.with(Cell::get) == shared
}

/// The schedule function of every task.
#[inline]
pub(crate) fn schedule(shared: &Arc<LoopShared>, runnable: Runnable) {
    if is_current(Arc::as_ptr(shared)) {
        if let Err(runnable) = push_local(runnable) {
            shared.inject(runnable);
        }
    } else {
        shared.inject(runnable);
    }
}

/// The shared side of the loop this thread runs or whose context it is in (null: none),
/// without taking a reference: set and cleared together with the loop [`current_shared`]
/// finds first (but for a thread exiting, whose `LOCAL` may be gone before it). It does not
/// name the loop serving a `Handle::block_on` thread (which [`current_shared`] falls back
/// to).
#[inline(always)]
pub(crate) fn current_ptr() -> *const LoopShared {
    CURRENT.with(Cell::get)
}

/// The loop this thread runs, if any.
pub(crate) fn current() -> Option<Rc<LocalLoop>> {
    LOCAL.try_with(|l| l.borrow().clone()).ok().flatten()
}

/// The shared side of the loop this thread runs or whose context it is in, if any; on a
/// thread in a [`Handle::block_on`](crate::Handle::block_on), the loop that serves it.
pub(crate) fn current_shared() -> Option<Arc<LoopShared>> {
    LOCAL
        .try_with(|l| l.borrow().as_ref().map(|l| Arc::clone(&l.shared)))
        .ok()
        .flatten()
        .or_else(crate::foreign::shared)
}

/// [`current_shared`]'s loop, or on one of a runtime's blocking threads
/// ([`spawn_blocking`](crate::spawn_blocking)) the runtime's next loop in turn: where a
/// task, a timer or a socket made on this thread goes, as on tokio's blocking threads.
/// (`Handle::block_on` asks [`current_shared`]: a blocking thread may block.)
pub(crate) fn context_shared() -> Option<Arc<LoopShared>> {
    current_shared().or_else(pool_loop)
}

/// On a runtime's blocking thread, the runtime's next loop in turn.
fn pool_loop() -> Option<Arc<LoopShared>> {
    crate::blocking::pool_runtime().map(|inner| crate::Handle { inner }.next_loop())
}

/// On a runtime's blocking thread, its first loop: for its time, which every loop keeps
/// alike (the next in turn would move the round that spawns follow).
fn pool_first_loop() -> Option<Arc<LoopShared>> {
    crate::blocking::pool_runtime().map(|inner| Arc::clone(&inner.loops[0]))
}

/// `f` on the shared side of [`context_shared`]'s loop, without taking a reference to a
/// loop this thread runs.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&LoopShared>) -> R) -> R {
    let mut f = Some(f);
    let mut call = |shared: Option<&LoopShared>| (f.take().expect("called once"))(shared);
    let result = LOCAL.try_with(|l| l.borrow().as_ref().map(|local| call(Some(&local.shared))));
    match result {
        Ok(Some(r)) => r,
        _ => call(crate::foreign::shared().or_else(pool_first_loop).as_deref()),
    }
}

/// A trigger state of this thread's loop, if it runs one (after a system call a future
/// made, on whatever loop its descriptor is registered with: trigger states are a thread's).
#[inline]
pub(crate) fn trigger(source: TriggerSource) {
    let _ = LOCAL.try_with(|l| {
        if let Some(local) = &*l.borrow()
            && let Ok(mut ev) = local.ev.try_borrow_mut()
        {
            ev.cx().trigger(source);
        }
    });
}

/// The waker of the future `block_on` runs (not a task): a flag, and the loop's waker when
/// woken from another thread.
struct MainWake {
    woken: AtomicBool,
    owner: usize,
    loop_waker: LoopWaker,
}

impl Wake for MainWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if CURRENT.with(Cell::get) as usize != self.owner {
            self.loop_waker.wake();
        }
    }
}

/// A loop thread's own state.
pub(crate) struct LocalLoop {
    pub shared: Arc<LoopShared>,
    ev: RefCell<Loop>,
    /// The ready queue while the loop is not entered (between two `block_on`s).
    saved: RefCell<VecDeque<Runnable>>,
    /// A waker of every live task, so that shutdown can reach them all.
    pub tasks: RefCell<Slab<Waker>>,
    /// The remote queue's other buffer (swapped in to take it without allocating).
    spare: RefCell<Vec<Runnable>>,
}

impl LocalLoop {
    /// A loop on this thread (its helper threads inherit this thread's affinity).
    pub(crate) fn new(
        index: usize,
        config: LoopConfig,
        clock: RuntimeClock,
    ) -> Result<Self, RtError> {
        let ev: Loop = EventLoop::with_clock(config, clock.clone(), on_fired)?;
        let shared = Arc::new(LoopShared {
            index,
            timers: ev.handle(),
            time: TimeBase::new(clock),
            waker: ev.waker(),
            remote: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            io: Mutex::new(Slab::new()),
            counters: Counters::default(),
            handle: OnceLock::new(),
        });
        Ok(LocalLoop {
            shared,
            ev: RefCell::new(ev),
            saved: RefCell::new(VecDeque::new()),
            tasks: RefCell::new(Slab::new()),
            spare: RefCell::new(Vec::new()),
        })
    }

    /// The loop's event loop (for statistics and counters).
    pub(crate) fn event_loop(&self) -> std::cell::Ref<'_, Loop> {
        self.ev.borrow()
    }

    /// Runs `fut` to completion, and the loop's tasks meanwhile. `None` when the runtime
    /// asked the loop to shut down first.
    pub(crate) fn run<F: Future>(&self, mut fut: Pin<&mut F>) -> Option<F::Output> {
        let main = Arc::new(MainWake {
            woken: AtomicBool::new(true),
            owner: Arc::as_ptr(&self.shared) as usize,
            loop_waker: self.shared.waker.clone(),
        });
        let waker = Waker::from(Arc::clone(&main));
        let mut cx = Context::from_waker(&waker);
        let clock = self.shared.time.clock().clone();
        let io_interval = clock.span(IO_INTERVAL);
        let counters = &self.shared.counters;
        let mut last_io = clock.now_unordered();
        let mut since_io = 0;
        loop {
            if main.woken.load(Ordering::Relaxed) && main.woken.swap(false, Ordering::Acquire) {
                let budget = Budgeted::begin();
                let polled = fut.as_mut().poll(&mut cx);
                drop(budget);
                self.assert_still_current();
                if let Poll::Ready(out) = polled {
                    return Some(out);
                }
                self.trigger(TriggerSource::Loop);
                since_io += 1;
                Counters::add(&counters.polls, 1);
            }
            let ran = self.run_tasks(BATCH);
            since_io += ran;
            Counters::add(&counters.polls, ran as u64);
            if self.ev.borrow().take_wake() {
                if self.shared.shutdown.load(Ordering::Acquire) {
                    return None;
                }
                self.take_remote();
            }
            if main.woken.load(Ordering::Relaxed) || !queue_is_empty() {
                let now = clock.now_unordered();
                if since_io >= BATCH || now.saturating_since(last_io) >= io_interval {
                    self.poll_io();
                    since_io = 0;
                    last_io = now;
                }
                continue;
            }
            let parked = self.park(&main.woken);
            if parked.blocked || parked.fired == 0 {
                since_io = 0;
                last_io = clock.now_unordered();
            }
        }
    }

    /// Runs up to `budget` ready tasks, each poll followed by a trigger state.
    fn run_tasks(&self, budget: usize) -> usize {
        if queue_is_empty() {
            return 0;
        }
        let time = self.shared.time.pair();
        let _batch = BatchGuard::begin(Arc::as_ptr(&self.shared), time);
        let mut ran = 0;
        while ran < budget {
            let Some(runnable) = QUEUE
                .try_with(|queue| queue.borrow_mut().pop_front())
                .ok()
                .flatten()
            else {
                break;
            };
            let budget = Budgeted::begin();
            runnable.run();
            drop(budget);
            self.trigger(TriggerSource::Loop);
            ran += 1;
        }
        self.assert_still_current();
        ran
    }

    #[inline(always)]
    fn trigger(&self, source: TriggerSource) {
        self.ev.borrow_mut().cx().trigger(source);
    }

    /// After a poll of `block_on`'s future or a batch of task polls: they left this thread
    /// in this loop (a guard of another runtime's context held across an `.await` would
    /// not, and the loop would go on with that runtime's queue). Once per batch, not per
    /// task: a misuse is caught within one batch, and a task's poll pays nothing for it.
    #[inline(always)]
    fn assert_still_current(&self) {
        assert!(
            is_current(Arc::as_ptr(&self.shared)),
            "softtimer-async: a poll left this thread in another runtime's context (an \
             EnterGuard held across an .await?)"
        );
    }

    /// Moves the tasks other threads woke onto this thread's queue.
    fn take_remote(&self) {
        let mut spare = self.spare.borrow_mut();
        std::mem::swap(&mut *lock(&self.shared.remote), &mut *spare);
        Counters::add(&self.shared.counters.remote_wakes, spare.len() as u64);
        let _ = QUEUE.try_with(|queue| queue.borrow_mut().extend(spare.drain(..)));
        // Left only when the thread's queue is gone (a runtime dropped as its thread exits,
        // shutting down): the tasks are cancelled here.
        spare.clear();
    }

    fn poll_io(&self) {
        let shared = &self.shared;
        Counters::add(&shared.counters.io_polls, 1);
        self.ev
            .borrow_mut()
            .poll_io(|_, ready| shared.io_ready(ready))
            .expect("the runtime's event loop failed (its epoll_wait, or its backstop helper)");
    }

    /// Nothing to run: the loop's idle policy. On a simulated clock, time jumps to the next
    /// due event instead (when no descriptor is ready), so that timers run deterministically
    /// and at once.
    fn park(&self, main_woken: &AtomicBool) -> Parked {
        let shared = &self.shared;
        Counters::add(&shared.counters.parks, 1);
        let mut ev = self.ev.borrow_mut();
        if let RuntimeClock::Sim(sim) = shared.time.clock() {
            let ready = ev
                .poll_io(|_, ready| shared.io_ready(ready))
                .expect("the runtime's event loop failed (its epoll_wait, or its backstop helper)");
            if ready > 0 {
                return Parked {
                    ready,
                    ..Parked::default()
                };
            }
            // A task (or `block_on`'s future) woken from another thread runs first; time
            // waits, too, for blocking work still under way (the pool wakes the loop out of
            // the real park below when it drains).
            if main_woken.load(Ordering::Acquire) || !lock(&shared.remote).is_empty() {
                return Parked::default();
            }
            let blocking = shared
                .handle
                .get()
                .and_then(Weak::upgrade)
                .is_some_and(|h| h.blocking_in_flight());
            let next = match blocking {
                true => None,
                false => shared
                    .timers
                    .with_timers(|t| t.next_expiry())
                    .ok()
                    .flatten(),
            };
            if let Some(next) = next {
                if next > sim.now() {
                    sim.set(next.ticks());
                }
                let fired = ev.cx().trigger(TriggerSource::Idle);
                return Parked {
                    fired,
                    ..Parked::default()
                };
            }
        }
        let parked = ev
            .park(|_, ready| shared.io_ready(ready))
            .expect("the runtime's event loop failed to park");
        if parked.blocked {
            Counters::add(&shared.counters.blocked_parks, 1);
        }
        let spin = &shared.counters.idle_spin_ticks;
        spin.store(ev.idle_spin().ticks(), Ordering::Relaxed);
        parked
    }

    /// Cancels every task of the loop (their futures are dropped here, on their thread) and
    /// every soft event, and closes the loop: wakes from elsewhere then cancel, not queue.
    pub(crate) fn shutdown(&self) {
        // Paced senders whose departures are dropped here: their waiting sends and flushes
        // are woken once the loop is closed, to find it so.
        let mut departures = Vec::new();
        // Wakers of timers and sockets, woken once the loop is closed.
        let mut waiting: Vec<Waker> = Vec::new();
        loop {
            // Every live task is woken, so that it is queued and its future dropped below.
            let wakers: Vec<Waker> = self.tasks.borrow_mut().drain().collect();
            let mut found = wakers.len();
            wakers.into_iter().for_each(Waker::wake);
            self.take_remote();
            let queue = take_queue();
            found += queue.len();
            drop(queue);
            // Tasks set aside while the thread ran elsewhere (or whose thread's queue is
            // gone): cancelled too.
            let saved = std::mem::take(&mut *self.saved.borrow_mut());
            found += saved.len();
            drop(saved);
            // Soft events: taken out under the lock, woken or dropped after it.
            let events = self.take_events();
            found += events.len();
            Self::sort_events(events, &mut waiting, &mut departures);
            let sources: Vec<Arc<IoSource>> = lock(&self.shared.io).drain().collect();
            found += sources.len();
            for source in &sources {
                waiting.extend(source.shut().into_iter().flatten());
            }
            if found == 0 {
                break;
            }
        }
        let leftover = {
            let mut remote = lock(&self.shared.remote);
            self.shared.closed.store(true, Ordering::Release);
            std::mem::take(&mut *remote)
        };
        drop(leftover);
        // A timer armed from another thread between the last pass and the store above
        // (checked again after arming, it sees the loop closed only if armed after this).
        let late = self.take_events();
        Self::sort_events(late, &mut waiting, &mut departures);
        // Likewise a socket registered from another thread in that gap (its registration
        // looks at the flag again after it enters the table).
        let late_sources: Vec<Arc<IoSource>> = lock(&self.shared.io).drain().collect();
        for source in &late_sources {
            waiting.extend(source.shut().into_iter().flatten());
        }
        for d in departures {
            d.wake_waiters();
        }
        // What still waits here belongs to futures outside this loop's tasks (a timer or a
        // socket of this runtime awaited by another runtime's task or another executor):
        // woken, they find the loop closed and say so, rather than wait for ever. This
        // loop's own tasks are cancelled by now, and their wakers do nothing.
        waiting.into_iter().for_each(Waker::wake);
    }

    /// Every soft event still pending, taken out under the facility's lock.
    fn take_events(&self) -> Vec<TimerEvent> {
        self.shared
            .timers
            .with_timers(|timers| {
                let end = timers.measure_time() + Span::from_ticks(1 << 62);
                let mut events = Vec::new();
                while let Some(fired) = timers.pop_due(end, TriggerSource::User) {
                    events.push(fired.event);
                }
                events
            })
            .unwrap_or_default()
    }

    /// Events taken out at shutdown: timers' wakers to wake once the loop is closed, paced
    /// senders' departures to wake their waiters.
    fn sort_events(
        events: Vec<TimerEvent>,
        waiting: &mut Vec<Waker>,
        departures: &mut Vec<Arc<crate::pace::Departures>>,
    ) {
        for event in events {
            match event {
                TimerEvent::Wake(waker) => waiting.push(waker),
                TimerEvent::Depart(d) => departures.push(d),
            }
        }
    }
}

/// Pushes `runnable` onto this thread's queue; handed back if the queue is gone (the thread
/// is exiting and its thread-locals have been dropped: a runtime kept in one of its own).
#[inline]
fn push_local(runnable: Runnable) -> Result<(), Runnable> {
    let mut slot = Some(runnable);
    match QUEUE.try_with(|queue| {
        queue
            .borrow_mut()
            .push_back(slot.take().expect("taken once"));
    }) {
        Ok(()) => Ok(()),
        Err(_) => Err(slot.take().expect("not taken")),
    }
}

/// This thread's queue, taken (empty where the queue is gone).
fn take_queue() -> VecDeque<Runnable> {
    QUEUE
        .try_with(|queue| std::mem::take(&mut *queue.borrow_mut()))
        .unwrap_or_default()
}

fn queue_is_empty() -> bool {
    QUEUE
        .try_with(|queue| queue.borrow().is_empty())
        .unwrap_or(true)
}

/// What a thread ran before it entered a loop to shut it down: its loop, its state and its
/// ready queue.
type SetAside = (*const LoopShared, Option<Rc<LocalLoop>>, VecDeque<Runnable>);

/// This thread runs `local`'s loop (or is in its runtime's context) while the guard lives.
pub(crate) struct Enter {
    /// What this thread was in before (a runtime dropped inside another's task, a context
    /// entered inside one): restored. `None` with `installed` false: it was in this loop's
    /// context already, and stays so.
    previous: Option<SetAside>,
    /// Whether the guard installed the loop (and takes it out again when dropped).
    installed: bool,
    /// [`RUNNING`] as it was, restored (`None`: a context guard, which leaves it alone).
    was_running: Option<bool>,
    /// [`DEPTH`] before it: the guard is the latest while `DEPTH` is one more.
    depth: u32,
}

impl Enter {
    /// Enters `local` on this thread to run it. Refused (with a clear message) inside a
    /// running loop: a loop thread must not block on another runtime. In the context of
    /// `local`'s runtime ([`Enter::context`]) it runs the loop in place; in another
    /// runtime's context, that one is set aside and restored after.
    pub(crate) fn new(local: &Rc<LocalLoop>) -> Enter {
        assert!(
            !RUNNING.with(Cell::get),
            "softtimer-async: cannot block on a runtime from a thread that already runs one \
             (inside a task or block_on); spawn the future instead"
        );
        let mut enter = Self::context(local);
        enter.was_running = Some(RUNNING.with(|r| r.replace(true)));
        enter
    }

    /// Enters `local` to shut it down, from any thread state: a loop this thread was running
    /// (a runtime dropped inside another runtime's task) is set aside and restored after.
    ///
    /// A thread left in `local`'s own context (a guard forgotten, or one whose out-of-turn
    /// drop panicked) is not set aside but shut down with it, and left in no context.
    pub(crate) fn for_shutdown(local: &Rc<LocalLoop>) -> Enter {
        let previous = if CURRENT.with(Cell::get) == Arc::as_ptr(&local.shared) {
            None
        } else {
            Self::set_aside()
        };
        Self::install(local);
        Enter {
            previous,
            installed: true,
            was_running: Some(RUNNING.with(|r| r.replace(true))),
            depth: DEPTH.with(|d| d.replace(d.get() + 1)),
        }
    }

    /// Puts this thread in `local`'s context without running it (what
    /// [`Runtime::enter`](crate::Runtime::enter) does): what is made here registers with
    /// its loop, and what is spawned here waits in its queue for it to run. A context or a
    /// running loop of another runtime is set aside and restored after; `local`'s own is
    /// left as it is.
    pub(crate) fn context(local: &Rc<LocalLoop>) -> Enter {
        let depth = DEPTH.with(|d| d.replace(d.get() + 1));
        if CURRENT.with(Cell::get) == Arc::as_ptr(&local.shared) {
            return Enter {
                previous: None,
                installed: false,
                was_running: None,
                depth,
            };
        }
        let previous = Self::set_aside();
        Self::install(local);
        Enter {
            previous,
            installed: true,
            was_running: None,
            depth,
        }
    }

    /// What this thread is in now, taken out of its thread-locals (`None`: nothing).
    fn set_aside() -> Option<SetAside> {
        let current = CURRENT.with(Cell::get);
        (!current.is_null()).then(|| {
            let previous_local = LOCAL.try_with(|l| l.borrow_mut().take()).ok().flatten();
            let queue = take_queue();
            CURRENT.with(|c| c.set(std::ptr::null()));
            (current, previous_local, queue)
        })
    }

    fn install(local: &Rc<LocalLoop>) {
        CURRENT.with(|c| c.set(Arc::as_ptr(&local.shared)));
        let _ = LOCAL.try_with(|l| *l.borrow_mut() = Some(Rc::clone(local)));
        // Where the thread's queue is gone (its thread is exiting), the saved tasks stay
        // saved: the loop's shutdown finds them there.
        let _ = QUEUE.try_with(|queue| {
            let saved = std::mem::take(&mut *local.saved.borrow_mut());
            queue.borrow_mut().extend(saved);
        });
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        // Only the latest guard may go: one dropped out of turn (a context guard dropped
        // inside a `block_on` begun after it, or before a guard entered after it) would
        // take a running loop's queue away. It moves nothing, and says so.
        if DEPTH.with(Cell::get) != self.depth + 1 {
            if !std::thread::panicking() {
                panic!(
                    "softtimer-async: EnterGuard values dropped out of order (or inside a \
                     block_on begun after it)"
                );
            }
            return;
        }
        DEPTH.with(|d| d.set(self.depth));
        if let Some(was_running) = self.was_running {
            RUNNING.with(|r| r.set(was_running));
        }
        if !self.installed {
            return;
        }
        let local = LOCAL.try_with(|l| l.borrow_mut().take()).ok().flatten();
        CURRENT.with(|c| c.set(std::ptr::null()));
        let queue = take_queue();
        if let Some(local) = local {
            local.saved.borrow_mut().extend(queue);
        }
        if let Some((current, local, queue)) = self.previous.take() {
            CURRENT.with(|c| c.set(current));
            let _ = LOCAL.try_with(|l| *l.borrow_mut() = local);
            let _ = QUEUE.try_with(|q| *q.borrow_mut() = queue);
        }
    }
}
