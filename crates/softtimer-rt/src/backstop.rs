//! The backstop thread: the paper's periodic interrupt clock and the one-shot deadline timer,
//! in user space.
//!
//! It waits on two timerfds (periodic, every `X`; one-shot, at the earliest deadline) and an
//! eventfd that tells it to stop. It is created by the loop thread, so it inherits the loop
//! thread's CPU affinity; with real-time priority (when the process may have it) it preempts
//! the loop thread the way an interrupt would, and fires overdue events while the loop
//! thread computes without system calls. It fires them under the facility lock, on its own
//! thread, with the same `Send + Sync` handler the loop uses.

use std::os::fd::{AsFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::event::epoll;
use rustix::event::{EventfdFlags, eventfd};
use softtimer::{Clock, TriggerSource};

use crate::error::RtError;
use crate::shared::Shared;
use crate::sys;
use crate::timerfd::periodic_timerfd;

const TICK: u64 = 0;
const DEADLINE: u64 = 1;
const STOP: u64 = 2;

/// Priority of the backstop thread under `SCHED_FIFO`: above every normal thread, low among
/// real-time ones.
const BACKSTOP_PRIORITY: i32 = 10;

pub(crate) struct Backstop {
    thread: Option<JoinHandle<()>>,
    stop: Arc<OwnedFd>,
}

impl Backstop {
    pub(crate) fn spawn<E: Send + 'static>(
        shared: Arc<Shared<E>>,
        interval: Duration,
        realtime: bool,
    ) -> Result<Self, RtError> {
        let tick = periodic_timerfd(interval).map_err(RtError::io("the backstop's timerfd"))?;
        let stop = Arc::new(
            eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
                .map_err(|e| RtError::from(("eventfd", e)))?,
        );
        let poll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .map_err(|e| RtError::from(("epoll_create", e)))?;
        for (fd, token) in [
            (tick.as_fd(), TICK),
            (shared.deadline_fd().as_fd(), DEADLINE),
            (stop.as_fd(), STOP),
        ] {
            epoll::add(
                &poll,
                fd,
                epoll::EventData::new_u64(token),
                epoll::EventFlags::IN,
            )
            .map_err(|e| RtError::from(("epoll_ctl", e)))?;
        }
        let stop_fd = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("softtimer-backstop".into())
            .spawn(move || {
                if realtime && sys::set_realtime_priority(BACKSTOP_PRIORITY).is_ok() {
                    shared
                        .counters
                        .backstop_realtime
                        .store(true, Ordering::Relaxed);
                }
                run(&shared, &poll, &tick, &stop_fd);
            })
            .map_err(RtError::io("spawning the backstop thread"))?;
        Ok(Backstop {
            thread: Some(thread),
            stop,
        })
    }
}

fn run<E>(shared: &Shared<E>, poll: &OwnedFd, tick: &OwnedFd, stop: &OwnedFd) {
    let mut events = Vec::with_capacity(4);
    loop {
        events.clear();
        match epoll::wait(poll, spare(&mut events), None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        for event in &events {
            match event.data.u64() {
                TICK => {
                    let _ = sys::read_counter(tick.as_fd());
                    shared
                        .counters
                        .backstop_ticks
                        .fetch_add(1, Ordering::Relaxed);
                    let now = shared.clock.now();
                    if !shared.nothing_due(now) {
                        guarded(shared, || {
                            shared.fire(now, TriggerSource::Backstop);
                        });
                    }
                }
                DEADLINE => {
                    let _ = sys::read_counter(shared.deadline_fd().as_fd());
                    guarded(shared, || {
                        shared.on_deadline_expiry();
                    });
                }
                _ => {
                    let _ = sys::read_counter(stop.as_fd());
                    return;
                }
            }
        }
    }
}

/// Runs `f`, counting (not propagating) a handler panic, so that one bad handler does not
/// take the backstop away from every other event. The loop reports it as an error.
fn guarded<E>(shared: &Shared<E>, f: impl FnOnce()) {
    if std::panic::catch_unwind(AssertUnwindSafe(f)).is_err() {
        shared
            .counters
            .handler_panics
            .fetch_add(1, Ordering::Relaxed);
    }
}

fn spare(events: &mut Vec<epoll::Event>) -> rustix::buffer::SpareCapacity<'_, epoll::Event> {
    rustix::buffer::spare_capacity(events)
}

impl Drop for Backstop {
    fn drop(&mut self) {
        let _ = rustix::io::write(&*self.stop, &1u64.to_ne_bytes());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
