//! The event loop: epoll, trigger states at every system-call return, the idle policy of
//! Section 5.1, and the choice of timer source.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::timerfd::{periodic_timerfd, timespec};
use rustix::event::epoll;
use rustix::event::{EventfdFlags, eventfd};
use rustix::net::{RecvFlags, SendFlags, SocketAddrAny};
use softtimer::{
    Clock, Config, EventId, Fired, SoftTimers, Stats, SystemClock, TriggerSource, nanos_to_ticks,
    ticks_to_nanos,
};

use crate::backstop::Backstop;
use crate::error::RtError;
use crate::shared::{Counters, Handler, Shared};
use crate::sys::{self, RecvBatch, ThreadSignalTimer};
use crate::{signal, sys::send_batch};

/// Tokens from here up are the loop's own.
pub const MAX_TOKEN: u64 = u64::MAX - 16;
const STOP_TOKEN: u64 = u64::MAX;
const TIMERFD_TOKEN: u64 = u64::MAX - 1;

/// How long the idle loop spins on trigger checks before it looks at the descriptors again.
const SPIN_SLICE: Duration = Duration::from_micros(20);

/// What fires soft events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerMode(Mode);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    Soft,
    Timerfd(Duration),
    Signal(Duration),
}

fn check_period(period: Duration) -> Result<Duration, RtError> {
    if period < Duration::from_micros(1) || period > Duration::from_secs(3600) {
        return Err(RtError::Period(period));
    }
    Ok(period)
}

impl TimerMode {
    /// Soft timers: events fire at trigger states, with the periodic backstop (the
    /// default).
    pub fn soft() -> Self {
        TimerMode(Mode::Soft)
    }

    /// Baseline: a periodic `timerfd` in the loop's epoll set fires due events when it
    /// expires; trigger states fire nothing. `period` must be 1 µs ..= 1 hour.
    pub fn timerfd(period: Duration) -> Result<Self, RtError> {
        Ok(TimerMode(Mode::Timerfd(check_period(period)?)))
    }

    /// Baseline: a POSIX timer signal, delivered to the loop thread every `period`,
    /// interrupts whatever it is doing and fires due events from the signal handler.
    ///
    /// # Safety
    ///
    /// The handler and the payload's `Drop` then run in signal context, on the loop thread,
    /// at an arbitrary point of its execution, like a hardware interrupt handler. They must
    /// be async-signal-safe: no allocation or freeing (reserve [`LoopConfig::capacity`] so
    /// that scheduling from the handler does not grow the slab either), no locks, no
    /// buffered I/O, no panics (a panic aborts). The facility itself is protected: a signal
    /// that interrupts the loop inside the facility fires nothing and is counted as busy.
    // `unsafe` here declares the contract above; the function itself does nothing unsafe.
    #[allow(unsafe_code)]
    pub unsafe fn signal(period: Duration) -> Result<Self, RtError> {
        Ok(TimerMode(Mode::Signal(check_period(period)?)))
    }

    /// `soft`, `timerfd` or `signal`.
    pub fn name(&self) -> &'static str {
        match self.0 {
            Mode::Soft => "soft",
            Mode::Timerfd(_) => "timerfd",
            Mode::Signal(_) => "signal",
        }
    }
}

/// Settings of an [`EventLoop`].
#[derive(Clone, Debug)]
pub struct LoopConfig {
    /// Backstop frequency in Hz (1 ..= 100 000; default 1000).
    pub interrupt_clock_hz: u64,
    /// What fires soft events (default: soft timers).
    pub mode: TimerMode,
    /// Run the backstop thread (soft mode only; default on). Without it the delay bound
    /// holds only while the loop keeps reaching trigger states, and deadlines are not
    /// enforced.
    pub backstop: bool,
    /// Ask for `SCHED_FIFO` priority for the backstop thread so that it preempts a computing
    /// loop thread like an interrupt (default on; silently normal priority where refused).
    pub realtime_backstop: bool,
    /// Keep trigger-state and delay statistics (default off).
    pub stats: bool,
    /// Events to make room for up front.
    pub capacity: usize,
    /// Readiness events taken per `epoll_wait` (default 256).
    pub max_events: usize,
    /// Spin on trigger checks when a soft event is due before the next backstop tick
    /// (Section 5.1's idle loop; default on). Off, the loop blocks until the event is due.
    pub idle_spin: bool,
    /// Record the first this-many trigger states (clock time and source) for later analysis
    /// (default 0: no trace). Memory is reserved up front; recording is a store.
    pub trace_capacity: usize,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            interrupt_clock_hz: 1000,
            mode: TimerMode::soft(),
            backstop: true,
            realtime_backstop: true,
            stats: false,
            capacity: 0,
            max_events: 256,
            idle_spin: true,
            trace_capacity: 0,
        }
    }
}

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
}

/// A descriptor that became ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ready {
    /// The token it was registered with.
    pub token: u64,
    /// Data can be read (or a connection accepted).
    pub readable: bool,
    /// Data can be written.
    pub writable: bool,
    /// The peer hung up or an error is pending.
    pub closed: bool,
}

struct StopInner {
    flag: AtomicBool,
    fd: OwnedFd,
}

/// Stops a running [`EventLoop`] from any thread.
#[derive(Clone)]
pub struct StopHandle(Arc<StopInner>);

impl StopHandle {
    /// Asks the loop to return from [`EventLoop::run`] (promptly, even if it is blocked).
    pub fn stop(&self) {
        self.0.flag.store(true, Ordering::Release);
        let _ = rustix::io::write(&self.0.fd, &1u64.to_ne_bytes());
    }
}

/// The loop's state that callbacks reach through [`LoopCx`].
/// What the loop records at each trigger state, when asked: statistics, a trace, or both. One
/// option, so that with nothing recorded the trigger check pays a single branch.
struct Recording {
    stats: Option<Stats>,
    trace: Option<Vec<(u64, TriggerSource)>>,
}

struct Core<E> {
    shared: Arc<Shared<E>>,
    recording: Option<Box<Recording>>,
    epoll: OwnedFd,
    stop: Arc<StopInner>,
    soft: bool,
}

/// What an I/O callback gets: the loop's I/O helpers (each return from the system call is a
/// trigger state), the timers, and stop.
pub struct LoopCx<'a, E> {
    core: &'a mut Core<E>,
}

/// The event loop. One per thread, made on the thread that runs it (it is not `Send`); see
/// the crate documentation.
pub struct EventLoop<E: Send + 'static> {
    core: Core<E>,
    events: Vec<epoll::Event>,
    x: Duration,
    x_ticks: u64,
    idle_spin: bool,
    mode: Mode,
    timerfd: Option<OwnedFd>,
    signal_timer: Option<ThreadSignalTimer>,
    backstop: Option<Backstop>,
    /// A loop belongs to the thread that made it (its timer signal is addressed to that
    /// thread), so it is neither `Send` nor `Sync`.
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl<E: Send + 'static> EventLoop<E> {
    /// A loop whose soft events are handled by `handler`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use softtimer_rt::{EventLoop, LoopConfig};
    ///
    /// let fired = Arc::new(AtomicU32::new(0));
    /// let counter = Arc::clone(&fired);
    /// let mut ev = EventLoop::new(LoopConfig::default(), move |_timers, _event: softtimer::Fired<()>| {
    ///     counter.fetch_add(1, Ordering::Relaxed);
    /// })
    /// .unwrap();
    /// let stop = ev.stop_handle();
    /// // 50 µs from now, in ticks of the measurement clock.
    /// let t = ev.micros_to_ticks(50);
    /// ev.cx().schedule_soft_event(t, ()).unwrap();
    /// // A second event stops the loop once the first has fired.
    /// std::thread::spawn(move || {
    ///     std::thread::sleep(std::time::Duration::from_millis(20));
    ///     stop.stop();
    /// });
    /// ev.run(|_cx, _ready| {}).unwrap();
    /// assert_eq!(fired.load(Ordering::Relaxed), 1);
    /// ```
    pub fn new<H>(config: LoopConfig, handler: H) -> Result<Self, RtError>
    where
        H: Fn(&mut SoftTimers<E>, Fired<E>) + Send + Sync + 'static,
    {
        let clock = SystemClock::new();
        let facility = SoftTimers::with_config(
            clock,
            Config {
                interrupt_clock_hz: config.interrupt_clock_hz,
                stats: config.stats,
                capacity: config.capacity,
                slot_ticks: None,
            },
        )?;
        let x_ticks = facility.backstop_interval_ticks();
        let x = Duration::from_nanos(1_000_000_000 / config.interrupt_clock_hz);
        let soft = config.mode.0 == Mode::Soft;
        let handler: Box<Handler<E>> = Box::new(handler);
        let shared = Arc::new(Shared::new(facility, handler, soft)?);

        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .map_err(|e| RtError::from(("epoll_create", e)))?;
        let stop_fd = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
            .map_err(|e| RtError::from(("eventfd", e)))?;
        epoll::add(
            &epoll,
            &stop_fd,
            epoll::EventData::new_u64(STOP_TOKEN),
            epoll::EventFlags::IN,
        )
        .map_err(|e| RtError::from(("epoll_ctl", e)))?;

        let mut timerfd = None;
        let mut signal_timer = None;
        match config.mode.0 {
            Mode::Soft => {}
            Mode::Timerfd(period) => {
                let fd = periodic_timerfd(period).map_err(RtError::io("the baseline's timerfd"))?;
                epoll::add(
                    &epoll,
                    &fd,
                    epoll::EventData::new_u64(TIMERFD_TOKEN),
                    epoll::EventFlags::IN,
                )
                .map_err(|e| RtError::from(("epoll_ctl", e)))?;
                timerfd = Some(fd);
            }
            Mode::Signal(period) => {
                sys::install_signal_handler(signal::handle_signal)
                    .map_err(RtError::io("sigaction"))?;
                // The timer is created disarmed, so no signal comes before the target is set;
                // a failure after the target is set clears it again.
                let timer = ThreadSignalTimer::new(sys::gettid(), sys::timer_signal())
                    .map_err(RtError::io("timer_create"))?;
                if !signal::set_target(&shared) {
                    return Err(RtError::SignalLoopExists);
                }
                if let Err(e) = timer.set_periodic(period) {
                    drop(timer);
                    signal::clear_target();
                    return Err(RtError::io("timer_settime")(e));
                }
                signal_timer = Some(timer);
            }
        }
        let backstop = if soft && config.backstop {
            Some(Backstop::spawn(
                Arc::clone(&shared),
                x,
                config.realtime_backstop,
            )?)
        } else {
            None
        };
        let hz = clock.resolution_hz();
        Ok(EventLoop {
            core: Core {
                shared,
                recording: (config.stats || config.trace_capacity > 0).then(|| {
                    Box::new(Recording {
                        stats: config.stats.then(|| Stats::new(hz)),
                        trace: (config.trace_capacity > 0)
                            .then(|| Vec::with_capacity(config.trace_capacity)),
                    })
                }),
                epoll,
                stop: Arc::new(StopInner {
                    flag: AtomicBool::new(false),
                    fd: stop_fd,
                }),
                soft,
            },
            events: Vec::with_capacity(config.max_events.max(1)),
            x,
            x_ticks,
            idle_spin: config.idle_spin,
            mode: config.mode.0,
            timerfd,
            signal_timer,
            backstop,
            _thread_bound: std::marker::PhantomData,
        })
    }

    /// A handle that stops [`EventLoop::run`] from any thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.core.stop))
    }

    /// The loop's helpers and timers outside [`EventLoop::run`] (to register descriptors
    /// and schedule the first events).
    pub fn cx(&mut self) -> LoopCx<'_, E> {
        LoopCx {
            core: &mut self.core,
        }
    }

    /// Converts microseconds to ticks of the measurement clock.
    pub fn micros_to_ticks(&self, us: u64) -> u64 {
        nanos_to_ticks(
            us.saturating_mul(1000),
            self.core.shared.clock.resolution_hz(),
        )
    }

    /// The measurement clock.
    pub fn clock(&self) -> SystemClock {
        self.core.shared.clock
    }

    /// `soft`, `timerfd` or `signal`.
    pub fn mode_name(&self) -> &'static str {
        match self.mode {
            Mode::Soft => "soft",
            Mode::Timerfd(_) => "timerfd",
            Mode::Signal(_) => "signal",
        }
    }

    /// Runtime counters (events fired by source, backstop and deadline timer activity).
    pub fn counters(&self) -> &Counters {
        &self.core.shared.counters
    }

    /// Trigger-state statistics of the loop thread, with the facility's firing delays merged
    /// in, if statistics are on.
    pub fn stats(&self) -> Option<Stats> {
        let mut stats = self.core.recording.as_ref()?.stats.clone()?;
        if let Some(facility) = self.core.shared.lock().stats() {
            // The facility saw no trigger states (the loop counts those); it adds the delays
            // and the fired count.
            stats.merge(facility);
        }
        Some(stats)
    }

    /// The recorded trigger states (clock time, source), oldest first; empty without
    /// [`LoopConfig::trace_capacity`].
    pub fn trace(&self) -> &[(u64, TriggerSource)] {
        self.core
            .recording
            .as_ref()
            .and_then(|r| r.trace.as_deref())
            .unwrap_or(&[])
    }

    /// Forgets the recorded trigger states (keeping the reserved memory).
    pub fn clear_trace(&mut self) {
        if let Some(trace) = self.core.recording.as_mut().and_then(|r| r.trace.as_mut()) {
            trace.clear();
        }
    }

    /// Clears the statistics, if they are on.
    pub fn reset_stats(&mut self) {
        if let Some(stats) = self.core.recording.as_mut().and_then(|r| r.stats.as_mut()) {
            stats.reset();
        }
        self.core.shared.lock().reset_stats();
    }

    /// Whether the backstop thread got real-time priority (`None`: no backstop thread).
    pub fn backstop_realtime(&self) -> Option<bool> {
        self.backstop.as_ref().map(|_| {
            self.core
                .shared
                .counters
                .backstop_realtime
                .load(Ordering::Relaxed)
        })
    }

    /// Timer-signal expirations the kernel merged because the previous signal was still
    /// pending (signal mode only).
    pub fn signal_overruns(&self) -> Option<u64> {
        self.signal_timer.as_ref().map(ThreadSignalTimer::overrun)
    }

    /// Runs until stopped (by [`LoopCx::stop`] or a [`StopHandle`]). `on_ready` is called
    /// for each ready descriptor with the loop's helpers.
    pub fn run<F>(&mut self, mut on_ready: F) -> Result<(), RtError>
    where
        F: FnMut(&mut LoopCx<'_, E>, Ready),
    {
        let result = self.run_inner(&mut on_ready);
        self.core.stop.flag.store(false, Ordering::Release);
        result
    }

    fn run_inner<F>(&mut self, on_ready: &mut F) -> Result<(), RtError>
    where
        F: FnMut(&mut LoopCx<'_, E>, Ready),
    {
        let spin_ticks = nanos_to_ticks(
            SPIN_SLICE.as_nanos() as u64,
            self.core.shared.clock.resolution_hz(),
        );
        while !self.core.stop.flag.load(Ordering::Acquire) {
            if self
                .core
                .shared
                .counters
                .handler_panics
                .load(Ordering::Relaxed)
                > 0
            {
                return Err(RtError::HandlerPanicked);
            }
            // Look at the descriptors first, without blocking: the loop is idle only when
            // nothing is ready, and only then does the idle policy spin or block.
            self.wait(Some(Duration::ZERO))?;
            self.core.trigger(TriggerSource::Syscall);
            if self.events.is_empty() {
                let timeout = self.idle(spin_ticks);
                if timeout != Some(Duration::ZERO) {
                    self.wait(timeout)?;
                    self.core.trigger(TriggerSource::Syscall);
                }
            }
            if self.events.is_empty() {
                continue;
            }
            for i in 0..self.events.len() {
                let event = self.events[i];
                let flags = event.flags;
                match event.data.u64() {
                    STOP_TOKEN => {
                        let _ = sys::read_counter(self.core.stop.fd.as_fd());
                    }
                    TIMERFD_TOKEN => {
                        if let Some(fd) = &self.timerfd {
                            let expirations = sys::read_counter(fd.as_fd()).unwrap_or(0);
                            let shared = &self.core.shared;
                            shared
                                .counters
                                .timer_expirations
                                .fetch_add(expirations, Ordering::Relaxed);
                            shared.fire(shared.clock.now(), TriggerSource::Timer);
                        }
                    }
                    token => {
                        let ready = Ready {
                            token,
                            readable: flags.contains(epoll::EventFlags::IN),
                            writable: flags.contains(epoll::EventFlags::OUT),
                            closed: flags.intersects(
                                epoll::EventFlags::HUP
                                    | epoll::EventFlags::ERR
                                    | epoll::EventFlags::RDHUP,
                            ),
                        };
                        on_ready(
                            &mut LoopCx {
                                core: &mut self.core,
                            },
                            ready,
                        );
                    }
                }
            }
            self.core.trigger(TriggerSource::Loop);
        }
        Ok(())
    }

    /// One `epoll_wait` into `self.events`; an interrupted wait returns no events.
    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), RtError> {
        self.events.clear();
        let ts = timeout.map(timespec);
        match epoll::wait(
            &self.core.epoll,
            rustix::buffer::spare_capacity(&mut self.events),
            ts.as_ref(),
        ) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(("epoll_wait", e).into()),
        }
    }

    /// The idle policy (Section 5.1), applied when no descriptor is ready. Returns the `epoll_wait` timeout: `Some(0)` to poll,
    /// a duration to block at most that long, `None` to block until something is ready.
    ///
    /// When a soft event is due before the next backstop tick, spin on trigger checks for
    /// up to a slice (then look at the descriptors without blocking); otherwise block until
    /// the event is due or a backstop period has passed, whichever is sooner.
    fn idle(&mut self, spin_ticks: u64) -> Option<Duration> {
        if !self.core.soft {
            return None;
        }
        let clock = self.core.shared.clock;
        let next = self.core.shared.next_check()?;
        let mut now = clock.now_unordered();
        if next <= now {
            return Some(Duration::ZERO);
        }
        let until_due = next - now;
        if self.idle_spin && until_due < self.x_ticks {
            let end = now.saturating_add(spin_ticks.min(until_due));
            while now < end {
                if self.core.trigger(TriggerSource::Idle) > 0
                    || self.core.stop.flag.load(Ordering::Relaxed)
                {
                    break;
                }
                now = clock.now_unordered();
            }
            return Some(Duration::ZERO);
        }
        let wait_ns = ticks_to_nanos(until_due, clock.resolution_hz());
        Some(Duration::from_nanos(wait_ns).min(self.x))
    }
}

impl<E: Send + 'static> Drop for EventLoop<E> {
    fn drop(&mut self) {
        // Signal mode: delete the timer first, then stop signals from reaching the facility.
        if self.signal_timer.take().is_some() {
            signal::clear_target();
        }
        // Joins the backstop thread.
        self.backstop.take();
    }
}

impl Recording {
    #[inline(never)]
    fn record(&mut self, source: TriggerSource, now: u64) {
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

impl<E> Core<E> {
    /// A trigger state: one clock read and one compare when nothing is due.
    #[inline(always)]
    fn trigger(&mut self, source: TriggerSource) -> usize {
        let now = self.shared.clock.now_unordered();
        if let Some(recording) = self.recording.as_deref_mut() {
            recording.record(source, now);
        }
        if self.shared.nothing_due(now) {
            return 0;
        }
        self.shared.fire(now, source)
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

impl<E> LoopCx<'_, E> {
    /// The measurement clock's time (`measure_time()`).
    pub fn now(&self) -> u64 {
        self.core.shared.clock.now()
    }

    /// Schedules `event` `t` ticks ahead (see [`SoftTimers::schedule_soft_event`]).
    pub fn schedule_soft_event(&mut self, t: u64, event: E) -> Result<EventId, RtError> {
        Ok(self.core.shared.with(|f| f.schedule_soft_event(t, event))?)
    }

    /// Schedules `event` at the clock time `at` (see [`SoftTimers::schedule_at`]).
    pub fn schedule_at(&mut self, at: u64, event: E) -> Result<EventId, RtError> {
        Ok(self.core.shared.with(|f| f.schedule_at(at, event))?)
    }

    /// Schedules `event` `t` ticks ahead, to fire no later than `deadline` ticks ahead: the
    /// backstop thread's one-shot timer enforces it when no trigger state comes in time.
    pub fn schedule_with_deadline(
        &mut self,
        t: u64,
        deadline: u64,
        event: E,
    ) -> Result<EventId, RtError> {
        self.core.shared.schedule_with_deadline(t, deadline, event)
    }

    /// Cancels an event; its payload if it was pending.
    pub fn cancel(&mut self, id: EventId) -> Option<E> {
        self.core.shared.with(|f| f.cancel(id))
    }

    /// Events pending.
    pub fn pending(&self) -> usize {
        self.core.shared.lock().pending()
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

    /// Asks the loop to return from [`EventLoop::run`] after this batch.
    pub fn stop(&mut self) {
        self.core.stop.flag.store(true, Ordering::Release);
    }

    /// Watches `fd` for `interest`; `token` (below [`MAX_TOKEN`]) comes back in [`Ready`].
    /// A closed descriptor, or one epoll cannot watch (a regular file), is an error.
    pub fn register(
        &mut self,
        fd: impl AsFd,
        interest: Interest,
        token: u64,
    ) -> Result<(), RtError> {
        if !sys::is_open(fd.as_fd()) {
            return Err(RtError::Register {
                fd: fd.as_fd().as_raw_fd(),
                source: io::Error::from_raw_os_error(libc::EBADF),
            });
        }
        self.watch(fd, interest, token, true)
    }

    /// Changes what a registered `fd` is watched for.
    pub fn reregister(
        &mut self,
        fd: impl AsFd,
        interest: Interest,
        token: u64,
    ) -> Result<(), RtError> {
        self.watch(fd, interest, token, false)
    }

    fn watch(
        &mut self,
        fd: impl AsFd,
        interest: Interest,
        token: u64,
        add: bool,
    ) -> Result<(), RtError> {
        if token >= MAX_TOKEN {
            return Err(RtError::ReservedToken(token));
        }
        let raw = fd.as_fd().as_raw_fd();
        let (data, flags) = (
            epoll::EventData::new_u64(token),
            interest.0 | epoll::EventFlags::RDHUP,
        );
        let result = if add {
            epoll::add(&self.core.epoll, fd, data, flags)
        } else {
            epoll::modify(&self.core.epoll, fd, data, flags)
        };
        result.map_err(|e| RtError::Register {
            fd: raw,
            source: e.into(),
        })
    }

    /// Stops watching `fd`.
    pub fn deregister(&mut self, fd: impl AsFd) -> Result<(), RtError> {
        epoll::delete(&self.core.epoll, fd).map_err(|e| RtError::from(("epoll_ctl", e)))
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
        let result = loop {
            match batch.recv_from(fd.as_fd()) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
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
        let result = loop {
            match send_batch(fd.as_fd(), messages) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
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
