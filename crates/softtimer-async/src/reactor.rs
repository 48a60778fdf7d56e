//! The reactor: readiness of descriptors from the loop's epoll set.
//!
//! A descriptor is registered once, edge-triggered, for both directions. The loop records
//! each readiness change in the descriptor's [`IoSource`] and wakes the tasks waiting for
//! it; a task then makes its system call until it says `WouldBlock`, which clears that
//! direction's readiness, unless another readiness change came in meanwhile (a tick counts
//! them, as tokio's does), so that no edge is lost between the call and the clearing.
//!
//! Every system call a future makes is followed by a trigger state of the thread it runs on
//! ([`crate::executor::trigger`]).

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use softtimer_rt::{Interest, Ready};

use crate::executor::{self, LoopShared, lock};

/// A direction of readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Read = 0,
    Write = 1,
}

impl Direction {
    fn bit(self) -> u64 {
        1 << (self as u64)
    }
}

const READ: u64 = 1;
const WRITE: u64 = 2;
/// The loop has seen the peer hang up: it stays set (see [`IoSource::is_read_closed`]).
const READ_CLOSED: u64 = 4;
/// The loop shut down (its runtime was dropped): every wait ends in an error.
const SHUT: u64 = 8;
const BITS: u64 = 0xff;
const TICK: u64 = 1 << 8;

/// The tasks waiting for one direction. One waiter of either kind (a `poll_*` caller's
/// waker, an awaited operation's ticketed entry) is taken without giving up the list's
/// allocation, so that a task waiting on a socket, readiness change after readiness change,
/// allocates once; only several waiters at once move their list out.
///
/// Callers of `poll_*` methods (and of the pace queue's waits) stay until the list is taken,
/// one entry per task. Futures awaited through [`wait_fn`] are entered with a ticket and
/// withdraw their entry when dropped before it is taken, so that a wait given up (a
/// `timeout` around a `recv_from` on a quiet socket, by one task after another) leaves no
/// waker behind to keep its task's memory alive.
#[derive(Default)]
pub(crate) struct Waiters {
    first: Option<Waker>,
    rest: Vec<Waker>,
    futures: Vec<Ticketed>,
}

/// A [`wait_fn`] future's entry.
pub(crate) struct Ticketed {
    ticket: u64,
    waker: Waker,
}

impl Waiters {
    /// Adds `waker` unless a waker that wakes the same task is there already.
    pub(crate) fn add(&mut self, waker: &Waker) {
        match &self.first {
            None => self.first = Some(waker.clone()),
            Some(w) if w.will_wake(waker) => {}
            Some(_) => {
                if !self.rest.iter().any(|w| w.will_wake(waker)) {
                    self.rest.push(waker.clone());
                }
            }
        }
    }

    /// Enters a [`wait_fn`] future's `waker` under `ticket`.
    fn enter(&mut self, ticket: u64, waker: &Waker) {
        self.futures.push(Ticketed {
            ticket,
            waker: waker.clone(),
        });
    }

    /// Points `ticket`'s entry at `waker`; false if it is not there.
    fn renew(&mut self, ticket: u64, waker: &Waker) -> bool {
        match self.futures.iter_mut().find(|t| t.ticket == ticket) {
            Some(entry) => {
                if !entry.waker.will_wake(waker) {
                    entry.waker = waker.clone();
                }
                true
            }
            None => false,
        }
    }

    /// Takes `ticket`'s entry out, if it is there.
    fn withdraw(&mut self, ticket: u64) -> Option<Waker> {
        let at = self.futures.iter().position(|t| t.ticket == ticket)?;
        Some(self.futures.swap_remove(at).waker)
    }

    /// Takes every waiter out. A list of one gives up its entry and keeps its allocation for
    /// the next wait (the common case: one task per direction); a longer one is moved out.
    pub(crate) fn take(&mut self) -> Waiters {
        let mut taken = Waiters {
            first: self.first.take(),
            rest: Vec::new(),
            futures: Vec::new(),
        };
        if self.rest.len() > 1 {
            taken.rest = std::mem::take(&mut self.rest);
        } else if let Some(waker) = self.rest.pop() {
            taken.second(waker);
        }
        if self.futures.len() > 1 {
            taken.futures = std::mem::take(&mut self.futures);
        } else if let Some(entry) = self.futures.pop() {
            taken.second(entry.waker);
        }
        taken
    }

    /// Adds a taken waker: in `first` while it is free (no allocation), else to `rest`.
    fn second(&mut self, waker: Waker) {
        match self.first {
            None => self.first = Some(waker),
            Some(_) => self.rest.push(waker),
        }
    }

    pub(crate) fn wake(self) {
        self.into_iter().for_each(Waker::wake);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len() + self.futures.len()
    }
}

impl IntoIterator for Waiters {
    type Item = Waker;
    type IntoIter = std::iter::Chain<
        std::iter::Chain<std::option::IntoIter<Waker>, std::vec::IntoIter<Waker>>,
        std::iter::Map<std::vec::IntoIter<Ticketed>, fn(Ticketed) -> Waker>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        let waker_of: fn(Ticketed) -> Waker = |t| t.waker;
        self.first
            .into_iter()
            .chain(self.rest)
            .chain(self.futures.into_iter().map(waker_of))
    }
}

/// One direction's waiters and the count of [`wait_fn`] tickets handed out for it.
#[derive(Default)]
struct DirectionWaits {
    waiters: Waiters,
    next_ticket: u64,
}

/// The readiness of one registered descriptor and the tasks waiting for it.
#[derive(Default)]
pub(crate) struct IoSource {
    /// `tick << 8 | readiness bits`.
    state: AtomicU64,
    waiters: Mutex<[DirectionWaits; 2]>,
    /// How many times each direction's waiters were taken (changed under the `waiters`
    /// lock): a [`wait_fn`] future whose entry was taken since it made it has nothing to
    /// withdraw, and is dropped without the lock.
    taken: [AtomicU64; 2],
}

impl IoSource {
    /// The loop saw `ready`: record it and wake the directions it concerns. A hang-up or an
    /// error wakes both: the next system call reports it.
    pub(crate) fn set_ready(&self, ready: Ready) {
        let mut bits = 0;
        if ready.readable || ready.closed {
            bits |= READ;
        }
        if ready.writable || ready.closed {
            bits |= WRITE;
        }
        if ready.hung_up {
            bits |= READ_CLOSED;
        }
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some((s & !BITS).wrapping_add(TICK) | (s & BITS) | bits)
            });
        let (read, write) = {
            let mut waits = lock(&self.waiters);
            let read = if bits & READ != 0 {
                self.take_locked(&mut waits, Direction::Read)
            } else {
                Waiters::default()
            };
            let write = if bits & WRITE != 0 {
                self.take_locked(&mut waits, Direction::Write)
            } else {
                Waiters::default()
            };
            (read, write)
        };
        read.wake();
        write.wake();
    }

    /// Takes `dir`'s waiters out (the `waiters` lock held) and counts the taking.
    fn take_locked(&self, waits: &mut [DirectionWaits; 2], dir: Direction) -> Waiters {
        self.taken[dir as usize].fetch_add(1, Ordering::Release);
        waits[dir as usize].waiters.take()
    }

    /// The loop shut down: marks the source so, and takes every waiting waker out (both
    /// directions), for the caller to wake once the loop is closed.
    pub(crate) fn shut(&self) -> [Waiters; 2] {
        self.state.fetch_or(SHUT, Ordering::AcqRel);
        let mut waits = lock(&self.waiters);
        [
            self.take_locked(&mut waits, Direction::Read),
            self.take_locked(&mut waits, Direction::Write),
        ]
    }

    /// Ready in `dir` (with the tick it was seen at), or the task is registered to be woken;
    /// an error once the loop has shut down.
    pub(crate) fn poll_ready(
        self: &Arc<Self>,
        dir: Direction,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<u64>> {
        let state = self.state.load(Ordering::Acquire);
        if let Some(ready) = Self::ready_in(state, dir) {
            return Poll::Ready(ready);
        }
        self.register(dir, cx.waker());
        // Looked at again after registering: a change between the first look and the
        // registration either shows here or found the waker.
        let state = self.state.load(Ordering::Acquire);
        match Self::ready_in(state, dir) {
            Some(ready) => Poll::Ready(ready),
            None => Poll::Pending,
        }
    }

    /// Enters `waker` in `dir`'s list: under the ticket of the [`wait_fn`] future being
    /// polled on this thread where there is one, so that it can withdraw it; otherwise as a
    /// `poll_*` caller's, until the list is taken.
    fn register(self: &Arc<Self>, dir: Direction, waker: &Waker) {
        let mut waits = lock(&self.waiters);
        let epoch = self.taken[dir as usize].load(Ordering::Relaxed);
        let waits = &mut waits[dir as usize];
        if !withdrawals_in_scope(|scope| scope.enter(self, dir, epoch, waker, waits)) {
            waits.waiters.add(waker);
        }
    }

    /// A [`wait_fn`] future is dropped: takes out the entry it made under `ticket` when
    /// `dir`'s waiters were taken `epoch` times, unless they were taken since (then the
    /// entry is gone, and so is the need for the lock).
    fn withdraw(&self, dir: Direction, ticket: u64, epoch: u64) {
        if self.taken[dir as usize].load(Ordering::Acquire) != epoch {
            return;
        }
        let waker = {
            let mut waits = lock(&self.waiters);
            if self.taken[dir as usize].load(Ordering::Relaxed) != epoch {
                return;
            }
            waits[dir as usize].waiters.withdraw(ticket)
        };
        // Dropped outside the lock: the last reference to a task may go with it.
        drop(waker);
    }

    /// What `state` says of `dir`: its tick if ready, an error if the loop shut down.
    fn ready_in(state: u64, dir: Direction) -> Option<io::Result<u64>> {
        if state & SHUT != 0 {
            return Some(Err(runtime_shut_down()));
        }
        (state & dir.bit() != 0).then_some(Ok(state >> 8))
    }

    /// Whether the loop has seen the peer hang up (`EPOLLRDHUP`, `EPOLLHUP`; an error alone,
    /// such as a UDP socket's ICMP report, does not count). A hang-up may come as one edge
    /// with the last data, and no edge comes after it, so a read that used up the data it
    /// saw must not clear the readiness on that account: only a `WouldBlock` may (a stream's
    /// end reads as 0 at once). tokio keeps its closed bits likewise.
    fn is_read_closed(&self) -> bool {
        self.state.load(Ordering::Acquire) & READ_CLOSED != 0
    }

    /// Whether `dir` is ready as far as the source knows (the tick if so; an error once
    /// the loop has shut down).
    fn ready_tick(&self, dir: Direction) -> Option<io::Result<u64>> {
        Self::ready_in(self.state.load(Ordering::Acquire), dir)
    }

    /// A system call said `WouldBlock`: clear `dir`, unless a readiness change came in after
    /// `tick` was seen.
    pub(crate) fn clear(&self, dir: Direction, tick: u64) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s >> 8 == tick).then_some(s & !dir.bit())
            });
    }
}

/// A descriptor's registration with a loop, held by the socket that owns the descriptor.
/// Dropping it frees the token; closing the descriptor (which the owner does right after)
/// takes it out of the epoll set.
pub(crate) struct Registration {
    source: Arc<IoSource>,
    token: usize,
    shared: Arc<LoopShared>,
    /// Whether the epoll set watches writability too (see [`Registration::new_read_only`]).
    writes_watched: AtomicBool,
}

impl Registration {
    /// Registers `fd` (non-blocking) with `shared`'s loop, edge-triggered for both
    /// directions. It starts out ready both ways, so that the first call is simply tried.
    pub(crate) fn new(shared: Arc<LoopShared>, fd: BorrowedFd<'_>) -> io::Result<Registration> {
        Self::watching(shared, fd, true)
    }

    /// As [`Registration::new`], watching readability only until a write says `WouldBlock`
    /// ([`Registration::watch_writable`]). For UDP: the kernel reports a UDP socket writable
    /// again each time a sent datagram's buffer is freed, so watching it would wake a blocked
    /// loop once per datagram sent (a paced sender's every departure) for nothing.
    pub(crate) fn new_read_only(
        shared: Arc<LoopShared>,
        fd: BorrowedFd<'_>,
    ) -> io::Result<Registration> {
        Self::watching(shared, fd, false)
    }

    fn watching(
        shared: Arc<LoopShared>,
        fd: BorrowedFd<'_>,
        writes: bool,
    ) -> io::Result<Registration> {
        let source = Arc::new(IoSource {
            state: AtomicU64::new(READ | WRITE),
            ..IoSource::default()
        });
        if shared.is_closed() {
            return Err(runtime_shut_down());
        }
        let token = lock(&shared.io).insert(Arc::clone(&source));
        // Looked at again after the insert: a shutdown that closed the loop in between has
        // drained the table for the last time, and nothing would ever wake or shut this one.
        if shared.is_closed() {
            remove_own(&shared, token, &source);
            return Err(runtime_shut_down());
        }
        let interest = if writes {
            Interest::BOTH
        } else {
            Interest::READABLE
        };
        if let Err(e) = shared.timers.register(fd, interest.edge(), token as u64) {
            remove_own(&shared, token, &source);
            return Err(match e {
                softtimer_rt::RtError::Register { source, .. } => source,
                other => io::Error::other(other),
            });
        }
        Ok(Registration {
            source,
            token,
            shared,
            writes_watched: AtomicBool::new(writes),
        })
    }

    /// Makes sure the epoll set watches `fd`'s writability (once a write has said
    /// `WouldBlock`); it stays watched. The change reports a descriptor already writable, so
    /// a waiter registered before it is not missed.
    pub(crate) fn watch_writable(&self, fd: BorrowedFd<'_>) {
        if !self.writes_watched.swap(true, Ordering::AcqRel) {
            let _ = self
                .shared
                .timers
                .reregister(fd, Interest::BOTH.edge(), self.token as u64);
        }
    }

    /// Runs a send once the socket may be writable, as [`Registration::poll_io`]; a send
    /// that has to wait makes the loop watch `fd`'s writability (for a registration made with
    /// [`Registration::new_read_only`]).
    pub(crate) fn poll_send<R>(
        &self,
        fd: BorrowedFd<'_>,
        cx: &mut Context<'_>,
        op: impl FnMut() -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        let result = self.poll_io(Direction::Write, cx, op);
        // Pending for want of room, not of the task's budget (which leaves the readiness
        // set): watching writability for a yield would wake the loop on every send after.
        if result.is_pending() && self.source.ready_tick(Direction::Write).is_none() {
            self.watch_writable(fd);
        }
        result
    }

    /// Ready when a send may go (with the tick it was seen at, as
    /// [`Registration::poll_ready_tick`]); waiting makes the loop watch `fd`'s writability.
    pub(crate) fn poll_send_ready(
        &self,
        fd: BorrowedFd<'_>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<u64>> {
        let ready = self.source.poll_ready(Direction::Write, cx);
        if ready.is_pending() {
            self.watch_writable(fd);
        }
        ready
    }

    /// A send tried once, as [`Registration::try_io`]; one that says `WouldBlock` makes the
    /// loop watch `fd`'s writability.
    pub(crate) fn try_send<R>(
        &self,
        fd: BorrowedFd<'_>,
        op: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R> {
        let result = self.try_io(Direction::Write, op);
        if matches!(&result, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            self.watch_writable(fd);
        }
        result
    }

    /// Registers `fd` with the loop of the calling thread.
    pub(crate) fn current(fd: BorrowedFd<'_>) -> io::Result<Registration> {
        let shared = crate::executor::context_shared().ok_or_else(no_runtime)?;
        Self::new(shared, fd)
    }

    /// The loop it is registered with.
    pub(crate) fn shared(&self) -> &Arc<LoopShared> {
        &self.shared
    }

    /// Ready in `dir`, for a socket's `readable()`/`writable()`: one unit of the task's
    /// budget when ready, and a yield when none is left, as a completed system call takes.
    /// A loop over `readable()` and a `try_*` call that never drains the socket (a flood)
    /// would otherwise keep its task running and the loop's other tasks waiting, since the
    /// readiness stays set.
    pub(crate) fn poll_ready(&self, dir: Direction, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !executor::has_budget(cx) {
            return Poll::Pending;
        }
        self.source
            .poll_ready(dir, cx)
            .map_ok(|_| executor::spend_budget())
    }

    /// [`Registration::poll_send_ready`] for a socket's `writable()` (and quinn's poller),
    /// budgeted as [`Registration::poll_ready`].
    pub(crate) fn poll_writable(
        &self,
        fd: BorrowedFd<'_>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if !executor::has_budget(cx) {
            return Poll::Pending;
        }
        self.poll_send_ready(fd, cx)
            .map_ok(|_| executor::spend_budget())
    }

    /// Ready in `dir`, with the tick it was seen at (for [`Registration::clear`]).
    pub(crate) fn poll_ready_tick(
        &self,
        dir: Direction,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<u64>> {
        self.source.poll_ready(dir, cx)
    }

    /// Clears `dir`'s readiness seen at `tick` (a call said `WouldBlock`), unless a
    /// readiness change came in since.
    pub(crate) fn clear(&self, dir: Direction, tick: u64) {
        self.source.clear(dir, tick);
    }

    /// Takes `fd` out of the loop's epoll set (for a descriptor that stays open after its
    /// registration goes).
    pub(crate) fn deregister(&self, fd: BorrowedFd<'_>) {
        let _ = self.shared.timers.deregister(fd);
    }

    /// Runs `op` (a non-blocking system call, followed by a trigger state) once `dir` is
    /// ready, until it does not say `WouldBlock`.
    pub(crate) fn poll_io<R>(
        &self,
        dir: Direction,
        cx: &mut Context<'_>,
        op: impl FnMut() -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.poll_io_until(dir, cx, op, |_| false)
    }

    /// As [`Registration::poll_io`] for a call that moves up to `want` bytes: one that moves
    /// fewer (but some) has drained the socket's buffer (or filled it), so the readiness is
    /// cleared without a second call to find out, as tokio does; but not a read's once the
    /// peer has hung up, whose end of stream the next read returns.
    pub(crate) fn poll_io_partial(
        &self,
        dir: Direction,
        cx: &mut Context<'_>,
        want: usize,
        op: impl FnMut() -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        self.poll_io_until(dir, cx, op, |&n| n > 0 && n < want)
    }

    /// Runs `op` once `dir` is ready, until it does not say `WouldBlock`; a result that
    /// `exhausted` says used the readiness up clears it.
    fn poll_io_until<R>(
        &self,
        dir: Direction,
        cx: &mut Context<'_>,
        mut op: impl FnMut() -> io::Result<R>,
        exhausted: impl Fn(&R) -> bool,
    ) -> Poll<io::Result<R>> {
        if !executor::has_budget(cx) {
            return Poll::Pending;
        }
        loop {
            let tick = match self.source.poll_ready(dir, cx) {
                Poll::Ready(Ok(tick)) => tick,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            match op() {
                Ok(r) => {
                    // After a hang-up a short read is not the last word: the next read says
                    // end of stream, and no other edge will come to prompt it.
                    if exhausted(&r) && !(dir == Direction::Read && self.source.is_read_closed()) {
                        self.source.clear(dir, tick);
                    }
                    executor::spend_budget();
                    return Poll::Ready(Ok(r));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.source.clear(dir, tick),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    executor::spend_budget();
                    return Poll::Ready(Err(e));
                }
            }
        }
    }

    /// Runs `op` once if `dir` may be ready; `WouldBlock` (and the readiness cleared) if not.
    pub(crate) fn try_io<R>(
        &self,
        dir: Direction,
        op: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R> {
        let tick = match self.source.ready_tick(dir) {
            Some(ready) => ready?,
            None => return Err(io::ErrorKind::WouldBlock.into()),
        };
        let result = op();
        if let Err(e) = &result
            && e.kind() == io::ErrorKind::WouldBlock
        {
            self.source.clear(dir, tick);
        }
        result
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        remove_own(&self.shared, self.token, &self.source);
    }
}

/// Takes `source` out of its loop's table at `token`, if it is still there: a shutdown drains
/// the table, and a token it freed may name another descriptor's source by now.
fn remove_own(shared: &LoopShared, token: usize, source: &Arc<IoSource>) {
    let mut io = lock(&shared.io);
    if io.get(token).is_some_and(|s| Arc::ptr_eq(s, source)) {
        let own = io.remove(token);
        drop(io);
        drop(own);
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("token", &self.token)
            .field("loop", &self.shared.index)
            .finish()
    }
}

/// A future that polls `f` as [`std::future::poll_fn`] does, and withdraws the waits `f`
/// registers on descriptors when it is dropped before they end: the form of every awaited
/// socket operation. (A `poll_*` method's caller cannot be told from one that gave up, so
/// its waker stays until the readiness comes; one per task.)
pub(crate) fn wait_fn<T, F>(f: F) -> WaitFn<F>
where
    F: FnMut(&mut Context<'_>) -> Poll<T>,
{
    WaitFn {
        f,
        waits: Withdrawals::default(),
    }
}

/// See [`wait_fn`].
pub(crate) struct WaitFn<F> {
    f: F,
    waits: Withdrawals,
}

// `f` is called through `&mut`, never pinned, as `std::future::PollFn`'s is.
impl<F> Unpin for WaitFn<F> {}

impl<T, F> Future for WaitFn<F>
where
    F: FnMut(&mut Context<'_>) -> Poll<T>,
{
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        let scope = Scope::open(&mut this.waits);
        let result = (this.f)(cx);
        drop(scope);
        result
    }
}

impl<F> Drop for WaitFn<F> {
    fn drop(&mut self) {
        for w in self.waits.0.iter_mut().filter_map(Option::take) {
            w.source.withdraw(w.dir, w.ticket, w.epoch);
        }
    }
}

/// The entries a [`WaitFn`] made and may have to withdraw: one per direction of one source
/// (an operation waits on one descriptor; a second source falls back to the untracked
/// entry).
#[derive(Default)]
struct Withdrawals([Option<Withdrawal>; 2]);

struct Withdrawal {
    source: Arc<IoSource>,
    dir: Direction,
    ticket: u64,
    /// How many times `dir`'s waiters had been taken when the entry was made.
    epoch: u64,
}

impl Withdrawals {
    /// Enters `waker` for `dir` of `source` (whose waiters were taken `epoch` times),
    /// renewing this future's entry if it is still there; false if there is no room to
    /// track it.
    fn enter(
        &mut self,
        source: &Arc<IoSource>,
        dir: Direction,
        epoch: u64,
        waker: &Waker,
        waits: &mut DirectionWaits,
    ) -> bool {
        let mut ticket = || {
            waits.next_ticket += 1;
            waits.next_ticket
        };
        let mine = self
            .0
            .iter_mut()
            .flatten()
            .find(|w| w.dir == dir && Arc::ptr_eq(&w.source, source));
        if let Some(w) = mine {
            if w.epoch == epoch && waits.waiters.renew(w.ticket, waker) {
                return true;
            }
            // Taken (and this future woken) since: a new entry.
            w.ticket = ticket();
            w.epoch = epoch;
            waits.waiters.enter(w.ticket, waker);
            return true;
        }
        let Some(free) = self.0.iter_mut().find(|w| w.is_none()) else {
            return false;
        };
        let t = ticket();
        waits.waiters.enter(t, waker);
        *free = Some(Withdrawal {
            source: Arc::clone(source),
            dir,
            ticket: t,
            epoch,
        });
        true
    }
}

thread_local! {
    /// The entries of the [`WaitFn`] being polled on this thread, lent to it for the poll.
    static SCOPE: RefCell<Option<Withdrawals>> = const { RefCell::new(None) };
}

/// Runs `f` on the withdrawals of the [`WaitFn`] being polled on this thread; false when
/// there is none (a `poll_*` caller).
fn withdrawals_in_scope(f: impl FnOnce(&mut Withdrawals) -> bool) -> bool {
    SCOPE
        .try_with(|scope| match scope.try_borrow_mut() {
            Ok(mut scope) => scope.as_mut().is_some_and(f),
            Err(_) => false,
        })
        .unwrap_or(false)
}

/// Lends a [`WaitFn`]'s withdrawals to this thread for one poll, and takes them back however
/// the poll ends (a panic unwinding through it included), restoring an enclosing one's.
struct Scope<'a> {
    home: &'a mut Withdrawals,
    outer: Option<Withdrawals>,
}

impl<'a> Scope<'a> {
    fn open(home: &'a mut Withdrawals) -> Scope<'a> {
        let mut lent = Some(std::mem::take(home));
        let outer = SCOPE
            .try_with(|scope| scope.replace(lent.take()))
            .unwrap_or(None);
        if let Some(back) = lent {
            // The thread is ending: nothing was lent.
            *home = back;
        }
        Scope { home, outer }
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        let outer = self.outer.take();
        if let Ok(Some(back)) = SCOPE.try_with(|scope| scope.replace(outer)) {
            *self.home = back;
        }
    }
}

/// The error of a wait on a descriptor whose loop has shut down (its runtime was dropped
/// while another runtime's task, or another executor, still used the object).
pub(crate) fn runtime_shut_down() -> io::Error {
    io::Error::other("the softtimer-async runtime this I/O object belongs to has shut down")
}

/// The error of an I/O object made outside a runtime thread.
pub(crate) fn no_runtime() -> io::Error {
    io::Error::other(
        "softtimer-async: I/O objects are made on a runtime thread (inside block_on, a task, \
         Runtime::enter's context, or a blocking task)",
    )
}

/// `fd`'s pending socket error (`SO_ERROR`), if any.
pub(crate) fn take_socket_error(fd: impl AsFd) -> io::Result<()> {
    match rustix::net::sockopt::socket_error(fd)? {
        Ok(()) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

#[cfg(test)]
#[path = "reactor_tests.rs"]
mod tests;
