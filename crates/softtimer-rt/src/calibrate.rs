//! This machine's wake-up lateness: how long after its timeout a thread blocked in
//! `epoll_wait` runs again (with the minimal timer slack). The idle policy wakes that much
//! early and spins the rest, so an event fires on time without spinning through a wait.
//! Measured on the facility's own clock ([`SystemClock`]), the clock the loops run on.

use std::sync::OnceLock;
use std::time::Duration;

use softtimer::{Clock, SystemClock};

use rustix::event::epoll;

use crate::sys;
use crate::timerfd::timespec;

/// The smallest and largest spin window the calibration returns.
const MIN_WINDOW: Duration = Duration::from_micros(2);
const MAX_WINDOW: Duration = Duration::from_micros(200);

/// Wake-up lateness of a blocked thread on this machine, measured once per process (about
/// 5 ms): the 90th percentile of 24 timed 150 µs waits, plus 1 µs.
pub fn wakeup_lateness() -> Duration {
    static LATENESS: OnceLock<Duration> = OnceLock::new();
    *LATENESS.get_or_init(measure)
}

fn measure() -> Duration {
    let Ok(poll) = epoll::create(epoll::CreateFlags::CLOEXEC) else {
        return MAX_WINDOW;
    };
    let slack = sys::timer_slack().ok();
    let _ = sys::minimal_timer_slack();
    let wait = Duration::from_micros(150);
    let ts = timespec(wait);
    let clock = SystemClock::new();
    let mut late: Vec<Duration> = (0..24)
        .map(|_| {
            let mut events: Vec<epoll::Event> = Vec::with_capacity(1);
            let start = clock.now();
            let _ = epoll::wait(
                &poll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&ts),
            );
            clock
                .duration(clock.now().saturating_since(start))
                .saturating_sub(wait)
        })
        .collect();
    if let Some(slack) = slack.and_then(std::num::NonZeroU64::new) {
        let _ = rustix::thread::set_current_timer_slack(Some(slack));
    }
    late.sort();
    (late[late.len() * 9 / 10] + Duration::from_micros(1)).clamp(MIN_WINDOW, MAX_WINDOW)
}
