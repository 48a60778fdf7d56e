//! The event loop: epoll, trigger states at every system-call return, the idle policy, and
//! the timer source.

use std::marker::PhantomData;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::event::epoll;
use rustix::event::{EventfdFlags, eventfd};
use softtimer::{
    Clock, Config, Fired, Instant, SoftTimers, Span, SystemClock, TriggerSource, TriggerStats,
};

use crate::backstop::{Helper, HelperPlan, spawn_helper};
use crate::config::{DeadlineDesign, LoopConfig, SpinWindow, TimerMode, check_period};
use crate::cx::{Core, LoopCx, Ready};
use crate::error::RtError;
use crate::handle::LoopHandle;
use crate::policy::{HelperPlacement, IdleAction, IdlePolicy, place_helper};
use crate::shared::{Counters, Handler, Shared};
use crate::signal;
use crate::sys::{self, ThreadSignalTimer};
use crate::timerfd::{periodic_timerfd, timespec};

mod idle;
mod ring_wait;
mod wake;

pub(crate) use wake::StopInner;
pub use wake::{LoopWaker, StopHandle};

/// Tokens from here up are the loop's own.
pub const MAX_TOKEN: u64 = u64::MAX - 16;
pub(crate) const STOP_TOKEN: u64 = u64::MAX;
const TIMERFD_TOKEN: u64 = u64::MAX - 1;
/// With an io_uring backend, the ring's poll of the loop's epoll set (where a
/// [`LoopHandle`] registers descriptors).
const EPOLL_TOKEN: u64 = u64::MAX - 2;

/// How long the idle loop spins at most before it looks at the descriptors again.
const SPIN_SLICE: Duration = Duration::from_micros(20);

/// How close to its due time a block may wake and spin the rest rather than block again.
const WAKE_MARGIN: Duration = Duration::from_micros(2);

/// Where [`EventLoop::run_with`] hands the application a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopTurn {
    /// The end of a pass over the descriptors; `ready` of them were ready (0: the loop is
    /// about to idle).
    Pass {
        /// Descriptors found ready in this pass.
        ready: usize,
    },
    /// The loop has nothing to do before its next due time and is about to block in the
    /// kernel (the paper's idle loop halting the CPU): the moment to arm interrupts again.
    BeforeBlock,
}

/// What one [`EventLoop::park`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parked {
    /// Soft events fired by its trigger states.
    pub fired: usize,
    /// Descriptors it found ready (and handed to `on_ready`).
    pub ready: usize,
    /// Whether it blocked in `epoll_wait` (otherwise it fired, spun, or was woken first).
    pub blocked: bool,
}

/// CPU time used by the loop's helper thread (the backstop and the deadline service), known
/// once it has stopped ([`EventLoop::stop_helpers`]), by where it ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HelperCpu {
    /// On the loop's CPU (or where it may be: [`HelperPlacement::shares_loop_cpu`]), ns.
    pub backstop_ns: u64,
    /// On another CPU, ns.
    pub watcher_ns: u64,
}

/// The event loop. One per thread, made on the thread that runs it (it is not `Send`); see
/// the crate documentation. Generic over the measurement [`Clock`] so that tests can run it
/// on a [`softtimer::SimClock`].
pub struct EventLoop<E: Send + 'static, C: Clock + Clone + Send + Sync + 'static = SystemClock> {
    core: Core<E, C>,
    events: Vec<epoll::Event>,
    /// The readiness a ring's reap found, handed out in a pass (io_uring backends).
    ring_ready: Vec<Ready>,
    mode: &'static str,
    timerfd: Option<OwnedFd>,
    signal_timer: Option<ThreadSignalTimer>,
    helper: Option<Helper>,
    /// Time spent spinning in the idle policy (see [`Counters::idle_spin_ns`]).
    idle_spin_total: Span,
    /// The timed block the idle policy just asked for, to learn from when it returns.
    block_plan: Option<BlockPlan>,
    /// The due time the last timed block was for, when it ended by its timeout: until then
    /// the idle policy spins for an event due by it rather than blocking a second time.
    spin_through: Option<Instant>,
    /// See [`EventLoop::wake_lateness`].
    wake_lateness: Duration,
    /// The thread's timer slack at its minimum while the loop lives (soft timers only).
    _precise_timeouts: Option<sys::PreciseTimeouts>,
    /// A loop belongs to the thread that made it (its timer signal is addressed to that
    /// thread), so it is neither `Send` nor `Sync`.
    _thread_bound: PhantomData<*const ()>,
}

/// A timed block of the idle policy: until when, for the event due at `due`, `wait` away
/// when the block was decided.
#[derive(Clone, Copy, Debug)]
struct BlockPlan {
    until: Instant,
    due: Instant,
    wait: Span,
}

impl<E: Send + 'static> EventLoop<E, SystemClock> {
    /// A loop on the system clock whose soft events are handled by `handler`.
    ///
    /// While a soft-timer loop lives, its thread's timer slack is 1 ns, so that the kernel
    /// adds nothing (50 µs by default) to the loop's precise timeouts; the slack the thread
    /// had comes back when the last loop on it is dropped, so threads and processes the
    /// thread starts afterwards get the usual slack.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use softtimer_rt::{EventLoop, LoopConfig};
    ///
    /// let fired = Arc::new(AtomicU32::new(0));
    /// let counter = Arc::clone(&fired);
    /// let mut ev = EventLoop::new(LoopConfig::default(), move |_timers, _event: softtimer::Fired<()>| {
    ///     counter.fetch_add(1, Ordering::Relaxed);
    /// })
    /// .unwrap();
    /// let stop = ev.stop_handle();
    /// // 50 µs from now.
    /// let t = ev.span(Duration::from_micros(50));
    /// ev.cx().schedule_soft_event(t, ()).unwrap();
    /// std::thread::spawn(move || {
    ///     std::thread::sleep(Duration::from_millis(20));
    ///     stop.stop();
    /// });
    /// ev.run(|_cx, _ready| {}).unwrap();
    /// assert_eq!(fired.load(Ordering::Relaxed), 1);
    /// ```
    pub fn new<H>(config: LoopConfig, handler: H) -> Result<Self, RtError>
    where
        H: Fn(&mut SoftTimers<E>, Fired<E>) + Send + Sync + 'static,
    {
        Self::with_clock(config, SystemClock::new(), handler)
    }

    /// The timer-signal baseline: a POSIX timer signal, delivered to the loop thread every
    /// `period` (1 µs ..= 1 hour), interrupts whatever it is doing and fires due events from
    /// the signal handler; trigger states fire nothing. `config.mode` is ignored. Signals
    /// fire events only while the loop runs, until it is asked to stop: a handler slower
    /// than `period` keeps the thread in signal context, and must not keep it from
    /// starting, stopping or dropping the loop.
    ///
    /// # Safety
    ///
    /// `handler`, and the `Drop` of the payloads it receives, run in signal context, on the
    /// loop thread, at an arbitrary point of its execution, like a hardware interrupt
    /// handler. They must be async-signal-safe: no allocation or freeing (reserve
    /// [`LoopConfig::capacity`] so that scheduling from the handler does not grow the slab
    /// either), no locks, no buffered I/O, no panics (a panic aborts). The facility itself is
    /// protected: a signal that interrupts the loop inside the facility fires nothing and is
    /// counted as busy ([`Counters::signal_busy`]).
    #[allow(unsafe_code)]
    pub unsafe fn with_timer_signal<H>(
        config: LoopConfig,
        period: Duration,
        handler: H,
    ) -> Result<Self, RtError>
    where
        H: Fn(&mut SoftTimers<E>, Fired<E>) + Send + Sync + 'static,
    {
        let period = check_period(period)?;
        Self::build(config, SystemClock::new(), Box::new(handler), Some(period))
    }
}

/// Adds `fd` to `epoll`, watched for input, as `token`.
fn watch_input(epoll: &OwnedFd, fd: impl AsFd, token: u64) -> Result<(), RtError> {
    let data = epoll::EventData::new_u64(token);
    epoll::add(epoll, fd, data, epoll::EventFlags::IN).map_err(|e| RtError::from(("epoll_ctl", e)))
}

impl<E: Send + 'static, C: Clock + Clone + Send + Sync + 'static> EventLoop<E, C> {
    /// A loop on `clock` (a [`softtimer::SimClock`] in tests).
    pub fn with_clock<H>(config: LoopConfig, clock: C, handler: H) -> Result<Self, RtError>
    where
        H: Fn(&mut SoftTimers<E, C>, Fired<E>) + Send + Sync + 'static,
    {
        Self::build(config, clock, Box::new(handler), None)
    }

    fn build(
        config: LoopConfig,
        clock: C,
        handler: Box<Handler<E, C>>,
        signal_period: Option<Duration>,
    ) -> Result<Self, RtError> {
        let facility = SoftTimers::with_config(
            clock.clone(),
            Config {
                interrupt_clock_hz: config.interrupt_clock_hz,
                stats: config.stats,
                capacity: config.capacity,
                slot_ticks: None,
            },
        )?;
        let mode = if signal_period.is_some() {
            "signal"
        } else {
            config.mode.name()
        };
        let soft = signal_period.is_none() && config.mode == TimerMode::Soft;
        let deadlines = soft.then_some(config.deadlines);
        let mut shared = Shared::new(facility, handler, soft, config.backstop, deadlines)?;
        // The helper fires at the late line its own wake-up lateness early, so that it fires
        // by `X` rather than `X` and a wake-up.
        if soft && config.backstop {
            shared.set_watch_margin(clock.span(crate::calibrate::wakeup_lateness()));
        }
        let shared = Arc::new(shared);

        let epoll = Arc::new(
            epoll::create(epoll::CreateFlags::CLOEXEC)
                .map_err(|e| RtError::from(("epoll_create", e)))?,
        );
        let stop_fd = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
            .map_err(|e| RtError::from(("eventfd", e)))?;
        watch_input(&epoll, &stop_fd, STOP_TOKEN)?;

        let mut timerfd = None;
        if let (None, TimerMode::Timerfd(period)) = (signal_period, config.mode) {
            let period = check_period(period)?;
            let fd = periodic_timerfd(period).map_err(RtError::io("the baseline's timerfd"))?;
            watch_input(&epoll, &fd, TIMERFD_TOKEN)?;
            timerfd = Some(fd);
        }
        // The loop's own blocking timeouts carry due times: no slack on top of them, while
        // the loop lives.
        let precise_timeouts = soft.then(sys::PreciseTimeouts::begin);
        let loop_cpus = sys::allowed_cpus();
        let helper = spawn_helper(
            &shared,
            HelperPlan {
                placement: place_helper(
                    &loop_cpus,
                    &sys::online_cpus(),
                    config.watcher_cpu,
                    config.deadlines == DeadlineDesign::LazyTimerfd,
                ),
                loop_cpus,
                realtime: config.realtime_backstop,
            },
        )?;
        // The calibrated window and a named precision's are kept per wait length and follow
        // the loop's own wake-ups (a longer sleep wakes later, and the lateness drifts with
        // the host's load).
        let windows = match config.spin_window {
            SpinWindow::Calibrated if soft => Some(crate::calibrate::wakeup_windows(&clock)),
            SpinWindow::Precision(precision) if soft => {
                Some(crate::calibrate::precision_windows(&clock, precision))
            }
            _ => None,
        };
        let spin_window = match config.spin_window {
            SpinWindow::Calibrated if !soft => Span::ZERO,
            // The learnt windows' own window for a short wait (a named precision's driver
            // reads it as its wake-up lateness), kept so as they learn (`IdlePolicy::learn`),
            // not the probe's figure or plan. In ticks as it is (a trip through a Duration and back
            // would round it off by a tick or two).
            SpinWindow::Calibrated | SpinWindow::Precision(_) if soft => windows
                .map_or(Span::ZERO, |w| {
                    w.window_for(clock.span(crate::calibrate::SHORT_WAIT))
                }),
            window => clock.span(window.resolve()),
        };
        // What a driver above reads as this loop's wake-up lateness: the probe's figure where
        // the loop learns its windows (their floor is bounded by the short waits' bucket).
        let wake_lateness = match config.spin_window {
            SpinWindow::Calibrated if soft => crate::calibrate::wakeup_lateness(),
            _ => clock.duration(spin_window),
        };
        let idle = IdlePolicy {
            spin_window,
            spin_slice: clock.span(SPIN_SLICE),
            windows,
        };
        let off = config.mode == TimerMode::Off && signal_period.is_none();
        let signals_paused = Arc::clone(&shared.signals_paused);
        let ring = ring_wait::build_ring(&config, &stop_fd, timerfd.as_ref(), &epoll)?;
        let mut core = Core::new(
            shared,
            epoll,
            Arc::new(StopInner {
                flag: AtomicBool::new(false),
                signals_paused,
                fd: stop_fd,
                woken: AtomicBool::new(false),
                parked: AtomicBool::new(false),
            }),
            off,
            config.stats,
            config.trace_capacity,
            idle,
        );
        core.ring = ring;
        let events = Vec::with_capacity(config.max_events.max(1));
        let mut signal_timer = None;
        if let Some(period) = signal_period {
            sys::install_signal_handler(signal::handle_signal).map_err(RtError::io("sigaction"))?;
            // Last of the fallible steps, after every allocation, so that no failure (or
            // panic) after it leaves the thread's target set to a loop that was never built.
            // The timer is created disarmed, so no signal comes before the target is set; a
            // failure after the target is set clears it again.
            let timer = ThreadSignalTimer::new(sys::gettid(), sys::timer_signal())
                .map_err(RtError::io("timer_create"))?;
            if !signal::set_target(&core.shared) {
                return Err(RtError::SignalLoopExists);
            }
            if let Err(e) = timer.set_periodic(period) {
                drop(timer);
                signal::clear_target();
                return Err(RtError::io("timer_settime")(e));
            }
            signal_timer = Some(timer);
        }
        Ok(EventLoop {
            core,
            events,
            ring_ready: Vec::new(),
            mode,
            timerfd,
            signal_timer,
            helper,
            idle_spin_total: Span::ZERO,
            block_plan: None,
            spin_through: None,
            wake_lateness,
            _precise_timeouts: precise_timeouts,
            _thread_bound: PhantomData,
        })
    }

    /// A handle that stops [`EventLoop::run`] from any thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.core.stop))
    }

    /// A handle that wakes the loop from any thread ([`EventLoop::park`] returns).
    pub fn waker(&self) -> LoopWaker {
        LoopWaker(Arc::clone(&self.core.stop))
    }

    /// Whether a [`LoopWaker`] woke the loop since the last call (and forgets it).
    #[inline]
    pub fn take_wake(&self) -> bool {
        let woken = &self.core.stop.woken;
        woken.load(Ordering::Relaxed) && woken.swap(false, Ordering::Acquire)
    }

    /// A thread-safe handle to the loop's facility and descriptors, for code that runs
    /// outside the loop's callbacks (see [`LoopHandle`]).
    pub fn handle(&self) -> LoopHandle<E, C> {
        LoopHandle::new(
            Arc::clone(&self.core.shared),
            Arc::clone(&self.core.epoll),
            self.core.timers_off(),
        )
    }

    /// The loop's helpers and timers outside [`EventLoop::run`] (to register descriptors
    /// and schedule the first events).
    pub fn cx(&mut self) -> LoopCx<'_, E, C> {
        LoopCx::new(&mut self.core)
    }

    /// `duration` in ticks of the measurement clock (rounded up).
    pub fn span(&self, duration: Duration) -> Span {
        self.core.shared.clock.span(duration)
    }

    /// The measurement clock.
    pub fn clock(&self) -> &C {
        &self.core.shared.clock
    }

    /// `soft`, `timerfd`, `signal` or `off`.
    pub fn mode_name(&self) -> &'static str {
        self.mode
    }

    /// The idle policy in force (its spin window is calibrated to this machine by default).
    pub fn idle_policy(&self) -> IdlePolicy {
        self.core.idle
    }

    /// How late a wake-up of this loop is expected to come, for a driver above it that
    /// decides which of its wake-ups need a spin (`softtimer_quic`'s `wake_lateness`): with
    /// the calibrated window, this machine's wake-up lateness as probed
    /// ([`wakeup_lateness`](crate::wakeup_lateness)), which the learnt windows' floor may sit
    /// below; with a named precision, its starting window for a short wait; with a fixed
    /// window, that window; zero in the modes that do not spin (`timerfd`, `signal`, `off`)
    /// with the calibrated window.
    ///
    /// ```
    /// use softtimer_rt::{EventLoop, LoopConfig};
    ///
    /// let ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
    /// assert_eq!(ev.wake_lateness(), softtimer_rt::wakeup_lateness());
    /// ```
    pub fn wake_lateness(&self) -> Duration {
        self.wake_lateness
    }

    /// Replaces the idle policy: to start from windows another loop of this machine has
    /// learnt (its [`idle_policy`](Self::idle_policy)) rather than from the calibration, so
    /// that a loop built again (a restart, a benchmark's next round) does not learn them
    /// afresh. The loop keeps following its wake-ups from there (in soft mode; the other
    /// modes block without a timeout and use no window). The policy's times are ticks of the
    /// loop's clock: take it from a loop on the same clock. What was copied from the old
    /// policy at construction stays as it was (a `softtimer_quic::QuicLoop`'s driver keeps
    /// the [`wake_lateness`](Self::wake_lateness) it was given). A floor set here
    /// (`spin_window`, with learnt windows) follows them again from the next timed block.
    ///
    /// ```
    /// use softtimer_rt::{EventLoop, LoopConfig};
    ///
    /// let first: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
    /// let learnt = first.idle_policy();
    /// drop(first);
    /// let mut next: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
    /// next.set_idle_policy(learnt);
    /// assert_eq!(next.idle_policy(), learnt);
    /// ```
    pub fn set_idle_policy(&mut self, policy: IdlePolicy) {
        self.core.idle = policy;
    }

    /// Time the loop thread has spun in its idle policy, on the measurement clock: what
    /// [`Counters::idle_spin_ns`] reports, read without the facility's lock (a field of the
    /// loop thread's own), for a caller that samples it after every park.
    ///
    /// ```
    /// use std::time::Duration;
    /// use softtimer::Span;
    /// use softtimer_rt::{EventLoop, LoopConfig, SpinWindow};
    ///
    /// // A loop that spins through the last 2 ms before each due time, and an event 1 ms
    /// // ahead: the park spins for it rather than block (unless the thread is held off
    /// // for the whole millisecond, when the event is due at once: then again).
    /// let config = LoopConfig {
    ///     spin_window: SpinWindow::Fixed(Duration::from_millis(2)),
    ///     ..LoopConfig::default()
    /// };
    /// let mut ev: EventLoop<u32> = EventLoop::new(config, |_, _| {}).unwrap();
    /// assert_eq!(ev.idle_spin(), Span::ZERO);
    /// for _ in 0..100 {
    ///     let t = ev.span(Duration::from_millis(1));
    ///     ev.cx().schedule_soft_event(t, 1).unwrap();
    ///     while ev.cx().pending() > 0 {
    ///         ev.park(|_, _| {}).unwrap();
    ///     }
    ///     if ev.idle_spin() > Span::ZERO {
    ///         break;
    ///     }
    /// }
    /// assert!(ev.idle_spin() > Span::ZERO);
    /// ```
    pub fn idle_spin(&self) -> Span {
        self.idle_spin_total
    }

    /// A snapshot of the runtime's counters.
    pub fn counters(&self) -> Counters {
        let mut counters = self.core.shared.counters();
        counters.idle_spin_ns = self
            .core
            .shared
            .clock
            .duration(self.idle_spin_total)
            .as_nanos() as u64;
        counters
    }

    /// Trigger-state statistics of the loop thread, with the facility's firing delays merged
    /// in, if statistics are on.
    pub fn stats(&self) -> Option<TriggerStats> {
        let mut stats = self.core.recorded_stats()?;
        if let Some(facility) = self.core.shared.lock().facility.stats() {
            // The facility saw no trigger states (the loop counts those); it adds the delays
            // and the fired count.
            stats.merge(facility);
        }
        Some(stats)
    }

    /// The recorded trigger states (clock time, source), oldest first; empty without
    /// [`LoopConfig::trace_capacity`].
    pub fn trace(&self) -> &[(Instant, TriggerSource)] {
        self.core.trace()
    }

    /// Clears the statistics, if they are on.
    pub fn reset_stats(&mut self) {
        self.core.reset_stats();
        self.core.shared.lock().facility.reset_stats();
    }

    /// Whether the helper thread (the backstop and the deadline service) got real-time
    /// priority (`None`: no helper, as with a timer baseline or timers off).
    pub fn backstop_realtime(&self) -> Option<bool> {
        self.helper.as_ref().map(|_| {
            self.core
                .shared
                .helper
                .backstop_realtime
                .load(Ordering::Relaxed)
        })
    }

    /// Where the helper thread runs, and so who enforces the delay bound (`None`: no helper).
    /// By default it goes to a CPU the loop thread may not use, when the loop thread is
    /// pinned and another CPU is online; see [`HelperPlacement`].
    pub fn helper_placement(&self) -> Option<HelperPlacement> {
        self.helper
            .as_ref()
            .and_then(|_| self.core.shared.placement())
    }

    /// Stops and joins the helper thread (backstop, deadline service) and returns the CPU
    /// time it used. After this the loop has no backstop and enforces no deadline; call it
    /// when a run is over, to account for the helper's cost.
    pub fn stop_helpers(&mut self) -> HelperCpu {
        self.helper.take();
        let helper = &self.core.shared.helper;
        HelperCpu {
            backstop_ns: helper.loop_cpu_ns.load(Ordering::Relaxed),
            watcher_ns: helper.other_cpu_ns.load(Ordering::Relaxed),
        }
    }

    /// Runs until stopped (by [`LoopCx::stop`] or a [`StopHandle`]). `on_ready` is called
    /// for each ready descriptor with the loop's helpers.
    pub fn run<F>(&mut self, on_ready: F) -> Result<(), RtError>
    where
        F: FnMut(&mut LoopCx<'_, E, C>, Ready),
    {
        self.run_with(on_ready, |_, _| false)
    }

    /// As [`run`](Self::run), and `on_turn` is called at the end of every pass over the
    /// descriptors ([`LoopTurn::Pass`]) and just before the loop would block in the kernel
    /// ([`LoopTurn::BeforeBlock`]). That is where an application acts on what its soft-event
    /// handlers noted (a handler runs at a trigger state, inside another call, and cannot
    /// borrow the application's state), and where it re-arms interrupts before the loop
    /// sleeps, as soft-timer polling does ([`PollSet`](crate::PollSet)). `on_turn` returns
    /// whether it did work or changed what the loop waits for; then the loop looks at the
    /// descriptors again before it idles.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::time::Duration;
    /// use softtimer_rt::{EventLoop, LoopConfig, LoopTurn};
    ///
    /// let due = Arc::new(AtomicBool::new(false));
    /// let flag = Arc::clone(&due);
    /// let mut ev = EventLoop::new(LoopConfig::default(), move |_, _: softtimer::Fired<()>| {
    ///     flag.store(true, Ordering::Relaxed); // note it; act on it at the end of the pass
    /// })
    /// .unwrap();
    /// let t = ev.span(Duration::from_micros(100));
    /// ev.cx().schedule_soft_event(t, ()).unwrap();
    /// let mut acted = 0;
    /// ev.run_with(
    ///     |_, _| {},
    ///     |cx, turn| {
    ///         if let LoopTurn::Pass { .. } = turn
    ///             && due.swap(false, Ordering::Relaxed)
    ///         {
    ///             acted += 1;
    ///             cx.stop();
    ///             return true;
    ///         }
    ///         false
    ///     },
    /// )
    /// .unwrap();
    /// assert_eq!(acted, 1);
    /// ```
    pub fn run_with<F, T>(&mut self, mut on_ready: F, mut on_turn: T) -> Result<(), RtError>
    where
        F: FnMut(&mut LoopCx<'_, E, C>, Ready),
        T: FnMut(&mut LoopCx<'_, E, C>, LoopTurn) -> bool,
    {
        // Timer signals fire events during a run only: outside one, nothing would stop a
        // handler slower than the signal period.
        if !self.core.stop.flag.load(Ordering::Acquire) {
            self.core
                .stop
                .signals_paused
                .store(false, Ordering::Release);
        }
        let mut result = self.run_inner(&mut on_ready, &mut on_turn);
        // What the last pass queued in the ring leaves now, not at the next run.
        if let Some(ring) = self.core.ring.as_deref_mut()
            && let Err(e) = ring.submit()
        {
            result = result.and(Err(RtError::io("io_uring_enter")(e)));
        }
        self.core.stop.signals_paused.store(true, Ordering::Release);
        self.core.stop.flag.store(false, Ordering::Release);
        self.core.spin_allowed = true;
        result
    }

    /// One look at the descriptors, without blocking: a non-blocking `epoll_wait`, a trigger
    /// state (`syscall`), `on_ready` for each ready descriptor, and after them a trigger state
    /// (`loop`). Returns how many descriptors were ready. This and [`EventLoop::park`] are the
    /// loop's step form, for a caller that runs its own work between them (an async
    /// runtime's executor, which polls its tasks and looks at the descriptors every so
    /// many polls) instead of handing [`EventLoop::run_with`] callbacks. A handler panic on
    /// the helper thread, or a helper stopped, is reported as [`park`](Self::park) reports
    /// it.
    pub fn poll_io<F>(&mut self, mut on_ready: F) -> Result<usize, RtError>
    where
        F: FnMut(&mut LoopCx<'_, E, C>, Ready),
    {
        self.core.shared.helper_trouble()?;
        self.wait(Some(Duration::ZERO))?;
        self.core.trigger(TriggerSource::Syscall);
        Ok(self.dispatch(&mut on_ready))
    }

    /// The idle policy, carried out once, for a caller that has nothing to run (an async
    /// runtime's park). It fires what is due; or spins on trigger checks until the next due
    /// time (at most a spin slice), stopping early when an event fires or a [`LoopWaker`]
    /// wakes the loop, and looks at the descriptors (without blocking) only when a slice
    /// ends before the due time; or blocks in `epoll_wait` with a precise timeout (none when
    /// nothing is pending) until the next due time less the spin window, a ready descriptor
    /// or a wake, and hands what became ready to `on_ready`. So a wait for a soft event costs
    /// one `epoll_wait` at most, and none when the event is due within the spin window.
    ///
    /// A wake seen before blocking returns at once; [`EventLoop::take_wake`] tells the caller
    /// it was woken. A handler panic on a helper thread is reported as
    /// [`RtError::HandlerPanicked`], and a helper that stopped on a failed system call as
    /// [`RtError::HelperStopped`], as [`EventLoop::run`] reports them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use softtimer_rt::{EventLoop, LoopConfig};
    ///
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// // The handler counts, not `Parked::fired`: a late event may be fired by the backstop
    /// // thread, and a park with nothing pending blocks until a descriptor or a wake.
    /// let fired = Arc::new(AtomicUsize::new(0));
    /// let counter = fired.clone();
    /// let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), move |_, _| {
    ///     counter.fetch_add(1, Ordering::Relaxed);
    /// })
    /// .unwrap();
    /// let t = ev.span(Duration::from_micros(200));
    /// ev.cx().schedule_soft_event(t, ()).unwrap();
    /// while fired.load(Ordering::Relaxed) == 0 {
    ///     ev.park(|_, _| {}).unwrap();
    /// }
    /// ```
    pub fn park<F>(&mut self, mut on_ready: F) -> Result<Parked, RtError>
    where
        F: FnMut(&mut LoopCx<'_, E, C>, Ready),
    {
        self.core.shared.helper_trouble()?;
        let mut parked = Parked::default();
        match self.idle_action() {
            IdleAction::Fire => parked.fired = self.core.trigger(TriggerSource::Idle),
            IdleAction::Spin { until } => {
                // A spin cut short of the due time by the spin slice (a window longer than
                // a slice) looks at the descriptors when the slice ends; one that runs to
                // the due time does not: a descriptor that became ready meanwhile waited no
                // longer than a wake-up from a block would have taken.
                let sliced = self
                    .core
                    .shared
                    .next_check()
                    .is_some_and(|next| until < next);
                parked.fired = self.spin(until, true);
                let stopped = self.core.stop.woken.load(Ordering::Relaxed)
                    || self.core.stop.flag.load(Ordering::Relaxed);
                if parked.fired == 0 && sliced && !stopped {
                    parked.ready = self.poll_io(&mut on_ready)?;
                }
            }
            IdleAction::Block { timeout } => {
                if self.block(timeout, true)? {
                    parked.blocked = true;
                    parked.ready = self.dispatch(&mut on_ready);
                    if parked.ready == 0 {
                        parked.fired = self.spin_past_early_wake();
                    }
                }
            }
        }
        Ok(parked)
    }

    fn run_inner<F, T>(&mut self, on_ready: &mut F, on_turn: &mut T) -> Result<(), RtError>
    where
        F: FnMut(&mut LoopCx<'_, E, C>, Ready),
        T: FnMut(&mut LoopCx<'_, E, C>, LoopTurn) -> bool,
    {
        // Whether `self.events` holds the result of a wait that just returned (a blocking
        // wait of the idle policy): then the loop goes on from it without polling again.
        let mut fresh = false;
        // Whether the turn after an idle pass may skip its look at the descriptors (below).
        let mut looked = false;
        while !self.core.stop.flag.load(Ordering::Acquire) {
            self.core.shared.helper_trouble()?;
            if !fresh && !looked {
                // Look at the descriptors first, without blocking: the loop is idle only when
                // nothing is ready, and only then does the idle policy spin or block.
                self.wait(Some(Duration::ZERO))?;
                self.core.trigger(TriggerSource::Syscall);
            }
            let woke = fresh;
            (fresh, looked) = (false, false);
            let ready = self.events.len();
            if ready == 0 {
                if on_turn(&mut LoopCx::new(&mut self.core), LoopTurn::Pass { ready }) {
                    continue;
                }
                fresh = self.idle(on_turn)?;
                // A wake-up a little before the due time found nothing ready, and the idle
                // policy then fired the event (spinning the rest): the wait was a look at the
                // descriptors microseconds ago, so the next turn goes to the idle policy
                // without another (one non-blocking epoll_wait per event saved). Only once:
                // the turn after looks again, so a run of spins never starves them.
                looked = woke && !fresh;
                continue;
            }
            self.dispatch(on_ready);
            on_turn(&mut LoopCx::new(&mut self.core), LoopTurn::Pass { ready });
        }
        Ok(())
    }

    /// Hands the events of the last wait to `on_ready` (the loop's own tokens it handles
    /// itself), then a trigger state (`loop`) if there were any. Returns how many were the
    /// application's.
    fn dispatch<F>(&mut self, on_ready: &mut F) -> usize
    where
        F: FnMut(&mut LoopCx<'_, E, C>, Ready),
    {
        let mut ready = 0;
        for i in 0..self.events.len() {
            let event = self.events[i];
            match event.data.u64() {
                STOP_TOKEN => {
                    let _ = sys::read_counter(self.core.stop.fd.as_fd());
                }
                TIMERFD_TOKEN => self.on_baseline_timer(),
                token => {
                    ready += 1;
                    on_ready(&mut LoopCx::new(&mut self.core), Ready::new(token, event));
                }
            }
        }
        if !self.events.is_empty() {
            self.core.trigger(TriggerSource::Loop);
        }
        ready
    }

    fn on_baseline_timer(&mut self) {
        if let Some(fd) = &self.timerfd {
            let expirations = sys::read_counter(fd.as_fd()).unwrap_or(0);
            let shared = &self.core.shared;
            let mut locked = shared.lock();
            locked.counters.timer_expirations += expirations;
            let now = shared.clock.now();
            shared.fire_locked(&mut locked, now, TriggerSource::Timer);
        }
    }

    /// One `epoll_wait` into `self.events`; an interrupted wait returns no events. With an
    /// io_uring backend, the ring's look (a zero timeout: a system call only when the
    /// kernel holds completion work or sends should leave now) or its wait (what is queued
    /// leaves, and the loop sleeps until a completion or the timeout), every completion then
    /// reaped (each a trigger state), and the readiness found, as epoll's events.
    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), RtError> {
        self.events.clear();
        if self.core.ring.is_some() {
            return self.ring_wait(timeout);
        }
        let ts = timeout.map(timespec);
        match epoll::wait(
            &*self.core.epoll,
            rustix::buffer::spare_capacity(&mut self.events),
            ts.as_ref(),
        ) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(("epoll_wait", e).into()),
        }
    }
}

impl<E: Send + 'static, C: Clock + Clone + Send + Sync + 'static> Drop for EventLoop<E, C> {
    fn drop(&mut self) {
        // Signal mode: delete the timer first, then stop signals from reaching the facility.
        if self.signal_timer.take().is_some() {
            signal::clear_target();
        }
        // Joins the helper threads.
        self.stop_helpers();
    }
}
