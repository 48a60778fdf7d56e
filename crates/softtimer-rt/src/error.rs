//! Errors of the runtime.

use std::io;

/// What can go wrong building or running an [`EventLoop`](crate::EventLoop).
#[derive(Debug, thiserror::Error)]
pub enum RtError {
    /// The facility's configuration was refused (backstop frequency out of range, …).
    #[error("facility configuration: {0}")]
    Config(#[from] softtimer::ConfigError),
    /// An event could not be scheduled (delay overflow, deadline before delay, …).
    #[error("cannot schedule: {0}")]
    Schedule(#[from] softtimer::ScheduleError),
    /// A timer period outside 1 µs ..= 1 hour.
    #[error("timer period {0:?} is out of range (1 µs ..= 1 hour)")]
    Period(std::time::Duration),
    /// A descriptor that is closed or that epoll cannot watch (a regular file, say).
    #[error("cannot register file descriptor {fd}: {source}")]
    Register {
        /// The descriptor's number.
        fd: i32,
        /// Why.
        source: io::Error,
    },
    /// A token in the range the loop keeps for itself.
    #[error("token {0} is reserved for the loop's own use (tokens must be below {max})", max = crate::event_loop::MAX_TOKEN)]
    ReservedToken(u64),
    /// This thread already runs a loop with the timer-signal baseline.
    #[error("a loop with the timer-signal baseline already exists on this thread")]
    SignalLoopExists,
    /// A soft-event handler panicked on a helper thread (backstop or deadline watcher).
    #[error("a soft-event handler panicked on a helper thread (backstop or deadline watcher)")]
    HandlerPanicked,
    /// The helper thread (backstop watch or deadline service) stopped on a failed system
    /// call: the loop no longer keeps the backstop's bound or enforces deadlines. Reported
    /// by every run, park and poll_io from then on; build a new loop.
    #[error(
        "the backstop's helper thread stopped on a failed epoll_wait; the loop no longer keeps its bound"
    )]
    HelperStopped(#[source] io::Error),
    /// A deadline was asked for where nothing would enforce it (a timer baseline, or timers
    /// off).
    #[error(
        "deadlines are enforced only in soft-timer mode; this loop runs a timer baseline or no timers"
    )]
    DeadlinesNotEnforced,
    /// An event was scheduled on a loop built with timers off (the "no timers" reference).
    #[error(
        "this loop runs with timers off (the reference without timers): nothing can be scheduled"
    )]
    TimersOff,
    /// io_uring was asked for and this kernel or process cannot have it.
    #[error("io_uring is unavailable: {0}")]
    Uring(#[from] crate::UringUnavailable),
    /// A ring operation was asked of a loop without a ring (the epoll backend).
    #[error("this loop runs the epoll backend: attach and ring sends need an io_uring backend")]
    NoRing,
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// Which call.
        what: &'static str,
        /// Why.
        source: io::Error,
    },
}

impl RtError {
    pub(crate) fn io(what: &'static str) -> impl FnOnce(io::Error) -> RtError {
        move |source| RtError::Io { what, source }
    }
}

impl From<(&'static str, rustix::io::Errno)> for RtError {
    fn from((what, errno): (&'static str, rustix::io::Errno)) -> Self {
        RtError::Io {
            what,
            source: errno.into(),
        }
    }
}
