//! Periodic kernel timers as file descriptors: the backstop's tick, the timerfd baseline, and
//! any periodic housekeeping a program wants in its event loop.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};

/// `d` as a `Timespec`.
pub(crate) fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// A non-blocking, close-on-exec timerfd on `CLOCK_MONOTONIC` that expires every `period`,
/// the first time one period from now. Register it with an event loop and read it (8 bytes,
/// the expirations since the last read) when it is readable. A zero period (which would
/// make a timer that never fires) is refused with `InvalidInput`.
///
/// ```
/// let tick = softtimer_rt::periodic_timerfd(std::time::Duration::from_millis(10)).unwrap();
/// # drop(tick);
/// assert!(softtimer_rt::periodic_timerfd(std::time::Duration::ZERO).is_err());
/// ```
pub fn periodic_timerfd(period: Duration) -> io::Result<OwnedFd> {
    if period.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a periodic timerfd's period must be more than zero",
        ));
    }
    let fd = timerfd_create(
        TimerfdClockId::Monotonic,
        TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
    )?;
    let ts = timespec(period);
    timerfd_settime(
        &fd,
        TimerfdTimerFlags::empty(),
        &Itimerspec {
            it_interval: ts,
            it_value: ts,
        },
    )?;
    Ok(fd)
}

/// Arms the one-shot timer `fd` to expire `after` ticks of a clock at `hz` from now (at least
/// 1 ns: a zero time would disarm it). Arming can only fail on a bad descriptor, which the
/// runtime's own are not, so a failure is ignored.
pub(crate) fn arm_oneshot(fd: &OwnedFd, after: softtimer::Span, hz: u64) {
    let d = after.to_duration(hz).max(Duration::from_nanos(1));
    let _ = timerfd_settime(
        fd,
        TimerfdTimerFlags::empty(),
        &Itimerspec {
            it_interval: timespec(Duration::ZERO),
            it_value: timespec(d),
        },
    );
}
