//! How an [`EventLoop`](crate::EventLoop) is set up: what fires soft events, the backstop,
//! the deadline service and the idle policy.

use std::time::Duration;

use crate::error::RtError;

/// What fires soft events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimerMode {
    /// Soft timers: events fire at trigger states, with the adaptive backstop (the default).
    #[default]
    Soft,
    /// Baseline: a periodic `timerfd` in the loop's epoll set fires due events when it
    /// expires; trigger states fire nothing. Build it with [`TimerMode::timerfd`].
    Timerfd(Duration),
    /// The reference for "no timers": no facility is consulted, trigger states do nothing
    /// (not even a clock read), and no backstop or deadline thread runs. Scheduling fails.
    Off,
}

impl TimerMode {
    /// The periodic-timerfd baseline, checking its period (1 µs ..= 1 hour).
    pub fn timerfd(period: Duration) -> Result<Self, RtError> {
        Ok(TimerMode::Timerfd(check_period(period)?))
    }

    /// `soft`, `timerfd` or `off`.
    pub fn name(&self) -> &'static str {
        match self {
            TimerMode::Soft => "soft",
            TimerMode::Timerfd(_) => "timerfd",
            TimerMode::Off => "off",
        }
    }
}

pub(crate) fn check_period(period: Duration) -> Result<Duration, RtError> {
    if period < Duration::from_micros(1) || period > Duration::from_secs(3600) {
        return Err(RtError::Period(period));
    }
    Ok(period)
}

/// What enforces deadlines (Section 5.9) when no trigger state comes in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeadlineDesign {
    /// The loop's helper thread, on another CPU (a housekeeping core) where there is one,
    /// sleeps with a precise timeout until the earliest deadline the loop has published (or
    /// the backstop's late line, whichever is first: it is the backstop's watch too), and
    /// fires an event only when its deadline has really passed. Met deadlines cost the loop's
    /// core nothing but a store; the helper's wake-ups land on the other core. The default.
    #[default]
    Watcher,
    /// The same helper, spinning on the published deadline and due time instead of sleeping:
    /// no wake-up latency and no system call anywhere, for a whole other core (it sleeps
    /// after all when it has no other core to spin on).
    WatcherSpin,
    /// The first design, kept whole for comparison: a one-shot kernel timer on the loop's
    /// CPU, re-armed lazily, and the backstop's adaptive one-shot timer beside it, both
    /// served by the helper on the loop's CPU: every met deadline still costs an expiry and
    /// a wake-up on the loop's core.
    LazyTimerfd,
}

impl DeadlineDesign {
    /// Every design, for experiments that compare them.
    pub const ALL: [DeadlineDesign; 3] = [
        DeadlineDesign::Watcher,
        DeadlineDesign::WatcherSpin,
        DeadlineDesign::LazyTimerfd,
    ];

    /// `watcher`, `watcher-spin` or `lazy-timerfd`.
    pub fn name(self) -> &'static str {
        match self {
            DeadlineDesign::Watcher => "watcher",
            DeadlineDesign::WatcherSpin => "watcher-spin",
            DeadlineDesign::LazyTimerfd => "lazy-timerfd",
        }
    }
}

/// How the loop does its I/O: readiness from `epoll` and a system call per operation, or
/// io_uring, whose completions are trigger states.
///
/// With io_uring the loop blocks in the ring's own wait (with the idle policy's timeout), the
/// descriptors it is given to watch are polls in the ring, and descriptors attached
/// to it ([`LoopCx::attach`](crate::LoopCx::attach)) send from slots the ring owns, queued and
/// submitted once per entry into the ring (the next wait, or the next pass's look), and
/// receive by a multishot `recvmsg` into provided buffers. Every completion reaped is a trigger
/// state. A loop refuses io_uring with [`RtError::Uring`] where the kernel has none or refuses
/// it, saying why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum IoBackend {
    /// Readiness from `epoll`, one system call per operation (`recvmmsg`/`sendmmsg` batch
    /// datagrams). The default.
    #[default]
    Epoll,
    /// io_uring: sends and the wait in one `io_uring_enter` where the loop idles next, no
    /// system call for the loop's look between passes unless the kernel flags completion work
    /// it holds for the loop (deferred task work, Linux 6.1+) or sends have waited a pass.
    Uring,
    /// io_uring with a kernel thread polling the submission queue (`SQPOLL`): submissions
    /// make no system call while it polls, but **it costs a core** while it polls (for
    /// [`UringOptions::sqpoll_idle`](crate::UringOptions::sqpoll_idle) after the last
    /// submission), on whatever CPU the kernel runs it.
    UringSqpoll,
}

impl IoBackend {
    /// Every backend, for experiments that compare them.
    pub const ALL: [IoBackend; 3] = [IoBackend::Epoll, IoBackend::Uring, IoBackend::UringSqpoll];

    /// `epoll`, `uring` or `uring-sqpoll`.
    pub fn name(self) -> &'static str {
        match self {
            IoBackend::Epoll => "epoll",
            IoBackend::Uring => "uring",
            IoBackend::UringSqpoll => "uring-sqpoll",
        }
    }

    /// Whether it is one of the io_uring backends.
    pub fn is_uring(self) -> bool {
        matches!(self, IoBackend::Uring | IoBackend::UringSqpoll)
    }
}

impl std::str::FromStr for IoBackend {
    type Err = String;

    /// Parses a [`name`](IoBackend::name).
    ///
    /// ```
    /// use softtimer_rt::IoBackend;
    /// assert_eq!("uring-sqpoll".parse::<IoBackend>(), Ok(IoBackend::UringSqpoll));
    /// assert!("kqueue".parse::<IoBackend>().is_err());
    /// ```
    fn from_str(text: &str) -> Result<Self, String> {
        IoBackend::ALL
            .into_iter()
            .find(|b| b.name() == text)
            .ok_or_else(|| format!("unknown I/O backend {text:?} (epoll, uring, uring-sqpoll)"))
    }
}

impl std::fmt::Display for IoBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How long the idle loop spins before a due time instead of blocking through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SpinWindow {
    /// The measured wake-up lateness of this machine (a blocked thread whose timeout expires
    /// runs again that much later), calibrated once per process. The default. The loop
    /// keeps a window per wait length and follows its own wake-ups
    /// ([`WakeupWindows`](crate::WakeupWindows)): a thread that slept 1 ms wakes later than
    /// one that slept 100 µs, and the lateness drifts with the host's load. Before waits of
    /// 8,192 µs and more it spins nearly the whole tail of that lateness, up to 200 µs
    /// ([`WakeupWindows::aiming_at_the_tail_before_long_waits`](crate::WakeupWindows::aiming_at_the_tail_before_long_waits)).
    /// A wait under 64 µs never has a narrower window than the one learnt before a 100 µs
    /// wait (the floor: see [`IdlePolicy::window_for`](crate::IdlePolicy::window_for)).
    /// [`resolve`](Self::resolve) gives the probe's figure, where a soft loop starts from.
    #[default]
    Calibrated,
    /// A fixed window; `Duration::ZERO` never spins (cheapest, but late by the wake-up
    /// latency), a window of `X` or more spins whenever an event is due before the next
    /// backstop tick (the paper's idle loop: most precise, a whole core while waiting).
    Fixed(Duration),
    /// The narrowest window that keeps the p99 lateness of events within this precision.
    /// The soft loop starts from the calibrated windows less the precision and keeps one
    /// per wait length, learnt from its own wake-ups, that leaves one wake-up in a hundred
    /// more than the precision late ([`WakeupWindows::aiming_at`](crate::WakeupWindows::aiming_at)):
    /// 1 µs of spin when a plain wake-up is precise enough. A short probe's 99th percentile
    /// is not trusted for this: one preemption of the host sets it. [`resolve`](Self::resolve)
    /// gives the up-front plan from the probe ([`plan_precision`](crate::plan_precision)
    /// without a batch), which the other timer modes use.
    Precision(Duration),
}

impl SpinWindow {
    /// The window as a length, up front: the calibration (measured once per process, on the
    /// facility's clock), the fixed one, or a named precision's plan from the probe. A
    /// program that fixes its window resolves it once, gives the loop [`SpinWindow::Fixed`]
    /// of it, and reports what it resolved, rather than reading the loop's policy back. A
    /// soft loop given `Calibrated` or `Precision` itself does better: it learns its windows
    /// from its own wake-ups (with a named precision, spinning at least 1 µs).
    ///
    /// ```
    /// use softtimer_rt::SpinWindow;
    /// use std::time::Duration;
    /// let fixed = SpinWindow::Fixed(Duration::from_micros(20));
    /// assert_eq!(fixed.resolve(), Duration::from_micros(20));
    /// assert!(SpinWindow::Calibrated.resolve() >= Duration::from_micros(2));
    /// // In the plan, a precision coarser than any wake-up's lateness needs no spin.
    /// assert_eq!(SpinWindow::Precision(Duration::from_secs(1)).resolve(), Duration::ZERO);
    /// ```
    pub fn resolve(self) -> Duration {
        match self {
            SpinWindow::Calibrated => crate::calibrate::wakeup_lateness(),
            SpinWindow::Fixed(window) => window,
            SpinWindow::Precision(precision) => {
                let wakeup = crate::calibrate::normal_wakeup();
                crate::plan_precision(&wakeup, precision, None, 1).spin_window
            }
        }
    }
}

/// Settings of an [`EventLoop`](crate::EventLoop).
#[derive(Clone, Debug)]
pub struct LoopConfig {
    /// Backstop frequency in Hz, `1 / X` (1 ..= 100 000; default 1000).
    pub interrupt_clock_hz: u64,
    /// What fires soft events (default: soft timers).
    pub mode: TimerMode,
    /// Run the backstop (soft mode only; default on). Without it the delay bound holds only
    /// while the loop keeps reaching trigger states.
    pub backstop: bool,
    /// Ask for `SCHED_FIFO` priority for the helper thread (the backstop and the deadline
    /// service) so that its wake-ups are prompt, and on the loop's CPU preempt a computing
    /// loop thread like an interrupt (default on; normal priority where refused, reported by
    /// [`EventLoop::backstop_realtime`](crate::EventLoop::backstop_realtime)).
    pub realtime_backstop: bool,
    /// What enforces deadlines (soft mode only; default: the helper on another CPU).
    pub deadlines: DeadlineDesign,
    /// The CPU the helper thread (the backstop's watch and the deadline service) runs on.
    /// Default: when the loop thread is pinned to one CPU, the lowest other online CPU (the
    /// loop's own when there is none: then the loop arms a one-shot timer instead, see
    /// [`HelperPlacement`](crate::HelperPlacement)); when it is not, wherever the kernel puts
    /// it. Naming the loop's only CPU asks for the one-shot timer.
    pub watcher_cpu: Option<usize>,
    /// Keep trigger-state and delay statistics (default off).
    pub stats: bool,
    /// Events to make room for up front.
    pub capacity: usize,
    /// Readiness events taken per `epoll_wait` (default 256).
    pub max_events: usize,
    /// The idle loop's spin window (default: calibrated to this machine's wake-up lateness,
    /// then learnt from the loop's own wake-ups).
    pub spin_window: SpinWindow,
    /// Record the first this-many trigger states (clock time and source) for later analysis
    /// (default 0: no trace). Memory is reserved up front; recording is a store.
    pub trace_capacity: usize,
    /// How the loop does its I/O (default: epoll).
    pub io_backend: IoBackend,
    /// The ring's set-up and wait, with an io_uring backend.
    pub uring: crate::UringOptions,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            interrupt_clock_hz: 1000,
            mode: TimerMode::Soft,
            backstop: true,
            realtime_backstop: true,
            deadlines: DeadlineDesign::default(),
            watcher_cpu: None,
            stats: false,
            capacity: 0,
            max_events: 256,
            spin_window: SpinWindow::default(),
            trace_capacity: 0,
            io_backend: IoBackend::default(),
            uring: crate::UringOptions::default(),
        }
    }
}
