//! What I/O callbacks get: [`LoopCx`], whose helpers make every return from a system call a
//! trigger state, and the loop's trigger-state check itself.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

use rustix::event::epoll;
use rustix::net::{RecvFlags, SendFlags, SocketAddrAny};
use softtimer::{Clock, EventId, Instant, Span, TriggerSource, TriggerStats};

use crate::error::RtError;
use crate::event_loop::{MAX_TOKEN, StopInner};
use crate::policy::IdlePolicy;
use crate::shared::Shared;
use crate::sys::{self, RecvBatch, send_batch};
use crate::uring::{Received, Ring, RingCounters, RingFd, RingRecv, SendOptions};

/// What a descriptor is watched for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interest(epoll::EventFlags);

impl Interest {
    /// Readable (level-triggered).
    pub const READABLE: Interest = Interest(epoll::EventFlags::IN);
    /// Writable (level-triggered).
    pub const WRITABLE: Interest = Interest(epoll::EventFlags::OUT);
    /// Readable or writable.
    pub const BOTH: Interest = Interest(epoll::EventFlags::IN.union(epoll::EventFlags::OUT));

    /// The same interest, edge-triggered (`EPOLLET`): the loop reports a descriptor once per
    /// change of its readiness, not on every pass while it stays ready. An async reactor
    /// registers each descriptor once this way and keeps the readiness itself, until a
    /// system call says `WouldBlock`.
    ///
    /// ```
    /// use softtimer_rt::Interest;
    /// assert_ne!(Interest::BOTH.edge(), Interest::BOTH);
    /// assert!(Interest::BOTH.edge().is_edge() && !Interest::BOTH.is_edge());
    /// ```
    pub const fn edge(self) -> Interest {
        Interest(self.0.union(epoll::EventFlags::ET))
    }

    /// Whether the interest is edge-triggered.
    pub const fn is_edge(self) -> bool {
        self.0.contains(epoll::EventFlags::ET)
    }

    pub(crate) fn flags(self) -> epoll::EventFlags {
        self.0
    }
}

/// `fd`'s number, if it may be watched as `token`: the token is below [`MAX_TOKEN`], and a
/// descriptor being added (`add`) is open.
fn registrable(fd: BorrowedFd<'_>, token: u64, add: bool) -> Result<RawFd, RtError> {
    if token >= MAX_TOKEN {
        return Err(RtError::ReservedToken(token));
    }
    let raw = fd.as_raw_fd();
    if add && !sys::is_open(fd) {
        return Err(RtError::Register {
            fd: raw,
            source: io::Error::from_raw_os_error(libc::EBADF),
        });
    }
    Ok(raw)
}

/// Adds (`add`) or modifies `fd` in `epoll`, watched for `interest` and peer hang-up, as
/// `token` (below [`MAX_TOKEN`]).
pub(crate) fn watch(
    epoll: &OwnedFd,
    fd: impl AsFd,
    interest: Interest,
    token: u64,
    add: bool,
) -> Result<(), RtError> {
    let raw = registrable(fd.as_fd(), token, add)?;
    let (data, flags) = (
        epoll::EventData::new_u64(token),
        interest.0 | epoll::EventFlags::RDHUP,
    );
    let result = if add {
        epoll::add(epoll, fd, data, flags)
    } else {
        epoll::modify(epoll, fd, data, flags)
    };
    result.map_err(|e| RtError::Register {
        fd: raw,
        source: e.into(),
    })
}

/// A descriptor that became ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ready {
    /// The token it was registered with.
    pub token: u64,
    /// Data can be read (or a connection accepted).
    pub readable: bool,
    /// Data can be written.
    pub writable: bool,
    /// The peer hung up or an error is pending.
    pub closed: bool,
    /// The peer hung up (`EPOLLRDHUP`, `EPOLLHUP`), not only an error: what is left to read
    /// ends with the end of the stream, and no other edge may come to say so.
    pub hung_up: bool,
}

impl Ready {
    pub(crate) fn new(token: u64, event: epoll::Event) -> Self {
        let flags = event.flags;
        Ready {
            token,
            readable: flags.contains(epoll::EventFlags::IN),
            writable: flags.contains(epoll::EventFlags::OUT),
            closed: flags.intersects(
                epoll::EventFlags::HUP | epoll::EventFlags::ERR | epoll::EventFlags::RDHUP,
            ),
            hung_up: flags.intersects(epoll::EventFlags::HUP | epoll::EventFlags::RDHUP),
        }
    }
}

/// What the loop does at a trigger state besides the check, when asked: record statistics
/// or a trace, or (timers off) nothing at all. One option, so that with nothing to do the
/// check pays a single branch.
struct Extras {
    off: bool,
    stats: Option<TriggerStats>,
    trace: Option<Vec<(Instant, TriggerSource)>>,
}

impl Extras {
    fn record(&mut self, source: TriggerSource, now: Instant) {
        if let Some(stats) = &mut self.stats {
            stats.record_trigger(source, now);
        }
        if let Some(trace) = &mut self.trace
            && trace.len() < trace.capacity()
        {
            trace.push((now, source));
        }
    }
}

/// The loop's state that callbacks reach through [`LoopCx`].
pub(crate) struct Core<E, C: Clock> {
    pub shared: Arc<Shared<E, C>>,
    extras: Option<Box<Extras>>,
    /// Shared with the loop's [`LoopHandle`](crate::LoopHandle)s.
    pub epoll: Arc<OwnedFd>,
    /// The io_uring backend's ring (`None`: epoll).
    pub ring: Option<Box<Ring>>,
    pub stop: Arc<StopInner>,
    /// The idle policy (its spin window calibrated to this machine by default).
    pub idle: IdlePolicy,
    /// Whether the idle policy may spin before the next due event ([`LoopCx::set_idle_spin`]).
    pub spin_allowed: bool,
}

impl<E, C: Clock> Core<E, C> {
    pub(crate) fn new(
        shared: Arc<Shared<E, C>>,
        epoll: Arc<OwnedFd>,
        stop: Arc<StopInner>,
        off: bool,
        stats: bool,
        trace_capacity: usize,
        idle: IdlePolicy,
    ) -> Self {
        let hz = shared.clock.resolution_hz();
        let extras = (off || stats || trace_capacity > 0).then(|| {
            Box::new(Extras {
                off,
                stats: (stats && !off).then(|| TriggerStats::new(hz)),
                trace: (trace_capacity > 0 && !off).then(|| Vec::with_capacity(trace_capacity)),
            })
        });
        Core {
            shared,
            extras,
            epoll,
            ring: None,
            stop,
            idle,
            spin_allowed: true,
        }
    }

    /// A trigger state: one clock read and one compare when nothing is due (and nothing is
    /// recorded).
    #[inline(always)]
    pub(crate) fn trigger(&mut self, source: TriggerSource) -> usize {
        trigger(&self.shared, &mut self.extras, source)
    }

    /// Reaps every completion of the ring, each a trigger state tagged by what completed
    /// (`send`, `recv`, or `syscall` for readiness); returns how many.
    pub(crate) fn reap_ring(&mut self) -> usize {
        let Core {
            shared,
            extras,
            ring,
            ..
        } = self;
        match ring {
            Some(ring) => ring.reap_all(&mut |source| {
                trigger(shared, extras, source);
            }),
            None => 0,
        }
    }

    pub(crate) fn check_timers_on(&self) -> Result<(), RtError> {
        if self.timers_off() {
            Err(RtError::TimersOff)
        } else {
            Ok(())
        }
    }

    pub(crate) fn timers_off(&self) -> bool {
        self.extras.as_ref().is_some_and(|extras| extras.off)
    }

    pub(crate) fn recorded_stats(&self) -> Option<TriggerStats> {
        self.extras.as_ref()?.stats.clone()
    }

    pub(crate) fn trace(&self) -> &[(Instant, TriggerSource)] {
        self.extras
            .as_ref()
            .and_then(|r| r.trace.as_deref())
            .unwrap_or(&[])
    }

    pub(crate) fn reset_stats(&mut self) {
        if let Some(stats) = self.extras.as_mut().and_then(|r| r.stats.as_mut()) {
            stats.reset();
        }
    }
}

/// A trigger state: one clock read and one compare when nothing is due (and nothing is
/// recorded). A function of the two fields it uses, so that the ring's reap can run it while
/// it holds the ring.
#[inline(always)]
fn trigger<E, C: Clock>(
    shared: &Shared<E, C>,
    extras: &mut Option<Box<Extras>>,
    source: TriggerSource,
) -> usize {
    if let Some(extras) = extras {
        return trigger_with_extras(shared, extras, source);
    }
    let now = shared.clock.now_unordered();
    if shared.nothing_due(now) {
        return 0;
    }
    shared.fire(now, source)
}

#[inline(never)]
fn trigger_with_extras<E, C: Clock>(
    shared: &Shared<E, C>,
    extras: &mut Extras,
    source: TriggerSource,
) -> usize {
    if extras.off {
        return 0;
    }
    let now = shared.clock.now_unordered();
    extras.record(source, now);
    if shared.nothing_due(now) {
        return 0;
    }
    shared.fire(now, source)
}

/// What an I/O callback gets: the loop's I/O helpers (each return from the system call is a
/// trigger state), the timers, and stop.
pub struct LoopCx<'a, E, C: Clock = softtimer::SystemClock> {
    core: &'a mut Core<E, C>,
}

impl<'a, E, C: Clock> LoopCx<'a, E, C> {
    pub(crate) fn new(core: &'a mut Core<E, C>) -> Self {
        LoopCx { core }
    }
}

fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

/// [`retry`] for a call that fails with an `io::Error`.
fn retry_io<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

impl<E, C: Clock> LoopCx<'_, E, C> {
    /// The measurement clock's time (`measure_time()`).
    pub fn now(&self) -> Instant {
        self.core.shared.clock.now()
    }

    /// `duration` in ticks of the measurement clock (rounded up).
    pub fn span(&self, duration: std::time::Duration) -> Span {
        self.core.shared.clock.span(duration)
    }

    /// Schedules `event` `t` ahead (see [`softtimer::SoftTimers::schedule_soft_event`]).
    pub fn schedule_soft_event(&mut self, t: Span, event: E) -> Result<EventId, RtError> {
        self.core.check_timers_on()?;
        Ok(self
            .core
            .shared
            .with(None, |f| f.schedule_soft_event(t, event))?)
    }

    /// Schedules `event` at the clock time `at` (see [`softtimer::SoftTimers::schedule_at`]).
    pub fn schedule_at(&mut self, at: Instant, event: E) -> Result<EventId, RtError> {
        self.core.check_timers_on()?;
        Ok(self.core.shared.with(None, |f| f.schedule_at(at, event))?)
    }

    /// Schedules `event` `t` ahead, to fire no later than `deadline` ahead: the deadline
    /// service ([`LoopConfig::deadlines`](crate::LoopConfig::deadlines)) enforces it when no
    /// trigger state comes in time. Refused ([`RtError::DeadlinesNotEnforced`]) where nothing
    /// would enforce it: under a timer baseline or with timers off.
    pub fn schedule_with_deadline(
        &mut self,
        t: Span,
        deadline: Span,
        event: E,
    ) -> Result<EventId, RtError> {
        self.core.check_timers_on()?;
        self.core.shared.schedule_with_deadline(t, deadline, event)
    }

    /// Cancels an event; its payload if it was pending.
    pub fn cancel(&mut self, id: EventId) -> Option<E> {
        self.core.shared.with(None, |f| f.cancel(id))
    }

    /// Events pending.
    pub fn pending(&self) -> usize {
        self.core.shared.lock().facility.pending()
    }

    /// Declares a trigger state of the application's own (a loop it knows to be frequent).
    pub fn trigger(&mut self, source: TriggerSource) -> usize {
        self.core.trigger(source)
    }

    /// Runs `call` (any system call) and then a trigger state tagged `syscall`.
    pub fn syscall<R>(&mut self, call: impl FnOnce() -> R) -> R {
        let result = call();
        self.core.trigger(TriggerSource::Syscall);
        result
    }

    /// Whether the idle loop may spin before the next due event (the default) or must block
    /// until its due time. An application whose next event tolerates a wake-up's lateness
    /// (tens of µs on a virtual machine) says no: a paced departure a wake-up late leaves the
    /// spacing as it was, and the loop saves the CPU it would spin for the last
    /// [`LoopConfig::spin_window`](crate::LoopConfig) before each one. The loop has one idle
    /// policy, so this applies to whatever event is next, whoever scheduled it: it holds until
    /// said again (an application that says no says yes before an event that needs precision)
    /// or until [`EventLoop::run`](crate::EventLoop::run) returns, which restores the spin.
    ///
    /// ```
    /// use softtimer_rt::{EventLoop, LoopConfig};
    ///
    /// let mut ev: EventLoop<u32> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
    /// let mut cx = ev.cx();
    /// // The next event is a departure that can be a wake-up late: block until it.
    /// cx.set_idle_spin(false);
    /// let t = cx.span(std::time::Duration::from_micros(200));
    /// cx.schedule_soft_event(t, 1).unwrap();
    /// ```
    pub fn set_idle_spin(&mut self, allowed: bool) {
        self.core.spin_allowed = allowed;
    }

    /// The idle policy's spin window, the floor under its learnt windows when it has them:
    /// a wait within it is spun, and a wait under 64 µs has at least this window (when
    /// calibrated, the window learnt before a 100 µs wait; longer waits have their own,
    /// [`IdlePolicy::window_for`](crate::IdlePolicy::window_for)). How late a wake-up comes is
    /// [`EventLoop::wake_lateness`](crate::EventLoop::wake_lateness).
    pub fn spin_window(&self) -> Span {
        self.core.idle.spin_window
    }

    /// Asks the loop to return from [`EventLoop::run`](crate::EventLoop::run) after this batch.
    pub fn stop(&mut self) {
        self.core.stop.request();
    }

    /// Watches `fd` for `interest`; `token` (below [`MAX_TOKEN`]) comes back in [`Ready`].
    /// A closed descriptor, or one epoll cannot watch (a regular file), is an error.
    ///
    /// On an io_uring backend, [`deregister`](Self::deregister) a descriptor before closing
    /// it: the ring's poll holds its file open (a socket closed without it stays open, and
    /// its peer sees no end) until the number is registered again or the loop is dropped.
    /// epoll forgets a closed descriptor by itself (unless a duplicate keeps its file open).
    pub fn register(
        &mut self,
        fd: impl AsFd,
        interest: Interest,
        token: u64,
    ) -> Result<(), RtError> {
        self.watch_fd(fd, interest, token, true)
    }

    /// `register` (`add`) or `reregister`, on the loop's backend. With an io_uring backend,
    /// a poll in the ring: multishot for an edge-triggered interest, one-shot and armed again
    /// after each report for a level-triggered one.
    fn watch_fd(
        &mut self,
        fd: impl AsFd,
        interest: Interest,
        token: u64,
        add: bool,
    ) -> Result<(), RtError> {
        let Some(ring) = self.core.ring.as_deref_mut() else {
            return watch(&self.core.epoll, fd, interest, token, add);
        };
        let raw = registrable(fd.as_fd(), token, add)?;
        let readable = interest.0.contains(epoll::EventFlags::IN);
        let writable = interest.0.contains(epoll::EventFlags::OUT);
        let edge = interest.0.contains(epoll::EventFlags::ET);
        ring.watch(raw, readable, writable, edge, token)
            .map_err(|source| RtError::Register { fd: raw, source })
    }

    /// Changes what a registered `fd` is watched for.
    pub fn reregister(
        &mut self,
        fd: impl AsFd,
        interest: Interest,
        token: u64,
    ) -> Result<(), RtError> {
        self.watch_fd(fd, interest, token, false)
    }

    /// Stops watching `fd` (on an io_uring backend, this lets go of its file: do it before
    /// closing `fd`).
    pub fn deregister(&mut self, fd: impl AsFd) -> Result<(), RtError> {
        if let Some(ring) = &mut self.core.ring {
            return ring
                .unwatch(fd.as_fd().as_raw_fd())
                .map_err(RtError::io("poll_remove"));
        }
        epoll::delete(&self.core.epoll, fd).map_err(|e| RtError::from(("epoll_ctl", e)))
    }

    /// The loop's I/O backend.
    pub fn io_backend(&self) -> crate::IoBackend {
        match &self.core.ring {
            None => crate::IoBackend::Epoll,
            Some(ring) if ring.sqpoll() => crate::IoBackend::UringSqpoll,
            Some(_) => crate::IoBackend::Uring,
        }
    }

    fn ring(&mut self) -> Result<&mut Ring, RtError> {
        self.core.ring.as_deref_mut().ok_or(RtError::NoRing)
    }

    /// Attaches `fd` to the loop's ring (an io_uring backend only; [`RtError::NoRing`] on
    /// epoll), reported as `token` (below [`MAX_TOKEN`]) when it has received messages
    /// waiting ([`LoopCx::received`]). The ring holds the descriptor's file until
    /// [`detach`](Self::detach)ed: requests on it never reach another descriptor that takes
    /// the number. Sends ([`LoopCx::send_ring`]) are queued in the ring and submitted at the
    /// loop's next entry into it.
    ///
    /// ```
    /// use std::net::UdpSocket;
    /// use softtimer_rt::{EventLoop, IoBackend, LoopConfig, RingRecv, SendOptions};
    ///
    /// let config = LoopConfig { io_backend: IoBackend::Uring, ..LoopConfig::default() };
    /// let Ok(mut ev) = EventLoop::<()>::new(config, |_, _| {}) else {
    ///     return; // no io_uring here: the error says why
    /// };
    /// let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let mut cx = ev.cx();
    /// let rx_fd = cx.attach(&rx, 1, RingRecv::Datagrams { buffers: 8, size: 2048 }).unwrap();
    /// let tx_fd = cx.attach(&tx, 2, RingRecv::None).unwrap();
    /// let to = SendOptions { to: Some(rx.local_addr().unwrap()), ..Default::default() };
    /// cx.send_ring(tx_fd, &[b"hello"], &to).unwrap();
    /// let stop = ev.stop_handle();
    /// ev.run(|cx, ready| {
    ///     let n = cx.received(rx_fd, usize::MAX, |m| assert_eq!(m.data, b"hello"));
    ///     if ready.token == 1 && n > 0 {
    ///         cx.stop();
    ///     }
    /// })
    /// .unwrap();
    /// # drop(stop);
    /// ```
    pub fn attach(&mut self, fd: impl AsFd, token: u64, recv: RingRecv) -> Result<RingFd, RtError> {
        let raw = registrable(fd.as_fd(), token, true)?;
        self.ring()?
            .attach(fd.as_fd(), token, recv)
            .map_err(|source| RtError::Register { fd: raw, source })
    }

    /// Detaches `fd` from the ring: its receive is cancelled, messages not yet taken are
    /// dropped, and the ring lets go of the file. Sends already queued are submitted first
    /// and still leave; those waiting for room (refused with `EAGAIN`) are counted refused.
    /// Returns its counters as it leaves, those included (`None`: not attached, or no ring;
    /// a write to a descriptor in blocking mode still waiting in the kernel is not in them).
    pub fn detach(&mut self, fd: RingFd) -> Option<RingCounters> {
        self.core.ring.as_deref_mut()?.detach(fd)
    }

    /// Queues one datagram made of `parts` (or, with [`SendOptions::segment_size`], a GSO
    /// batch of them) for `fd`, copied into a slot the ring owns: the caller's buffers are
    /// free again when this returns. It leaves at the loop's next entry into the ring. When
    /// every slot is in use, the ring submits and waits for one (each completion reaped is
    /// a trigger state), failing with `WouldBlock` only if none frees within a second; a
    /// send the kernel refuses because the socket's buffer is full is sent again when it has
    /// room, in order. Counted in [`LoopCx::ring_counters`].
    pub fn send_ring(
        &mut self,
        fd: RingFd,
        parts: &[&[u8]],
        options: &SendOptions,
    ) -> Result<(), RtError> {
        let (ring, on_completion) = self.ring_and_trigger()?;
        ring.send(fd, parts, options, on_completion)
            .map_err(RtError::io("a send through the ring"))
    }

    /// The ring, and the trigger state its completions are, borrowed apart so that the ring
    /// can call it.
    fn ring_and_trigger(&mut self) -> Result<(&mut Ring, impl FnMut(TriggerSource) + '_), RtError> {
        let Core {
            shared,
            extras,
            ring,
            ..
        } = &mut *self.core;
        let ring = ring.as_deref_mut().ok_or(RtError::NoRing)?;
        Ok((ring, move |source| {
            trigger(shared, extras, source);
        }))
    }

    /// Hands `fd`'s received messages to `f`, oldest first, at most `max` of them, and gives
    /// their buffers back to the kernel; returns how many. No system call: they were reaped
    /// by the loop.
    pub fn received(&mut self, fd: RingFd, max: usize, f: impl FnMut(Received<'_>)) -> usize {
        match self.core.ring.as_deref_mut() {
            Some(ring) => ring.received(fd, max, f),
            None => 0,
        }
    }

    /// Submits what is queued in the ring now, instead of at the loop's next entry into it
    /// (a system call, except with SQPOLL while its thread polls).
    pub fn submit_ring(&mut self) -> Result<(), RtError> {
        self.ring()?.submit().map_err(RtError::io("io_uring_enter"))
    }

    /// Submits what is queued in the ring and waits, up to `limit`, until every send has
    /// completed (each completion reaped a trigger state): what a program calls before it
    /// drops the loop, whose ring cancels what is still in flight. Whether they all did.
    pub fn flush_ring(&mut self, limit: std::time::Duration) -> Result<bool, RtError> {
        let (ring, mut on_completion) = self.ring_and_trigger()?;
        ring.flush(limit, &mut on_completion)
            .map_err(RtError::io("io_uring_enter"))
    }

    /// What the ring did for `fd` (`None`: not attached, or no ring).
    pub fn ring_counters(&self, fd: RingFd) -> Option<RingCounters> {
        self.core.ring.as_deref()?.counters(fd)
    }

    /// `recv` (non-blocking); a trigger state tagged `recv` follows. `WouldBlock` when
    /// nothing is waiting.
    pub fn recv(&mut self, fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
        let result = retry(|| rustix::net::recv(&fd, &mut *buf, RecvFlags::DONTWAIT));
        self.core.trigger(TriggerSource::Recv);
        result.map(|(n, _)| n)
    }

    /// `recvfrom` (non-blocking), with the sender; a trigger state tagged `recv` follows.
    pub fn recv_from(
        &mut self,
        fd: impl AsFd,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<SocketAddr>)> {
        let result = retry(|| rustix::net::recvfrom(&fd, &mut *buf, RecvFlags::DONTWAIT));
        self.core.trigger(TriggerSource::Recv);
        result.map(|(n, _, addr)| (n, addr.and_then(|a: SocketAddrAny| a.try_into().ok())))
    }

    /// `recvmmsg` (non-blocking) into `batch`; a trigger state tagged `recv` follows.
    /// `Ok(0)` when nothing is waiting.
    pub fn recvmmsg(&mut self, fd: impl AsFd, batch: &mut RecvBatch) -> io::Result<usize> {
        let result = retry_io(|| batch.recv(fd.as_fd(), usize::MAX, false));
        self.core.trigger(TriggerSource::Recv);
        result
    }

    /// `send` (non-blocking); a trigger state tagged `send` follows.
    pub fn send(&mut self, fd: impl AsFd, buf: &[u8]) -> io::Result<usize> {
        let result = retry(|| rustix::net::send(&fd, buf, SendFlags::DONTWAIT));
        self.core.trigger(TriggerSource::Send);
        result
    }

    /// `sendto` (non-blocking); a trigger state tagged `send` follows.
    pub fn send_to(&mut self, fd: impl AsFd, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        let result = retry(|| rustix::net::sendto(&fd, buf, SendFlags::DONTWAIT, &to));
        self.core.trigger(TriggerSource::Send);
        result
    }

    /// `sendmmsg` (non-blocking) of `(payload, destination)` pairs; returns how many were
    /// sent. A trigger state tagged `send` follows.
    pub fn sendmmsg(
        &mut self,
        fd: impl AsFd,
        messages: &[(&[u8], SocketAddr)],
    ) -> io::Result<usize> {
        let result = retry_io(|| send_batch(fd.as_fd(), messages));
        self.core.trigger(TriggerSource::Send);
        result
    }

    /// `accept4` (non-blocking, close-on-exec); a trigger state tagged `accept` follows.
    pub fn accept(&mut self, listener: impl AsFd) -> io::Result<OwnedFd> {
        let result = retry(|| {
            rustix::net::accept_with(
                &listener,
                rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC,
            )
        });
        self.core.trigger(TriggerSource::Accept);
        result
    }

    /// `read`; a trigger state tagged `recv` follows.
    pub fn read(&mut self, fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
        let result = retry(|| rustix::io::read(&fd, &mut *buf));
        self.core.trigger(TriggerSource::Recv);
        result
    }

    /// `write`; a trigger state tagged `send` follows.
    pub fn write(&mut self, fd: impl AsFd, buf: &[u8]) -> io::Result<usize> {
        let result = retry(|| rustix::io::write(&fd, buf));
        self.core.trigger(TriggerSource::Send);
        result
    }
}
