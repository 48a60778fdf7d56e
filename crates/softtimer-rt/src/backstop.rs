//! The helper threads: the backstop (the paper's interrupt clock, made adaptive) and the
//! deadline services (Section 5.9).
//!
//! * The **backstop thread** waits on the backstop's one-shot timerfd, which the loop arms by
//!   [`BackstopPlan`](crate::BackstopPlan)'s rule only while events are pending and pushes out
//!   while its trigger states keep up, so it expires only when the loop has gone `X` without a
//!   trigger state. It is created by the loop thread, so it inherits the loop's CPU affinity;
//!   with real-time priority it preempts a computing loop thread the way an interrupt would.
//!   In the lazy-timerfd deadline design it also serves the deadline timer.
//! * The **deadline watcher** runs on another CPU and sleeps (precise timeout, minimal timer
//!   slack) or spins until the earliest deadline the loop published, and fires an event only
//!   when its deadline has really passed.
//!
//! Both fire under the facility lock, on their own thread, with the same `Send + Sync`
//! handler the loop uses.

use std::os::fd::{AsFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use rustix::event::epoll;
use rustix::event::{EventfdFlags, eventfd};
use softtimer::{Clock, Span};

use crate::error::RtError;
use crate::shared::{DeadlineService, Shared};
use crate::sys;

const BACKSTOP: u64 = 0;
const DEADLINE: u64 = 1;
const STOP: u64 = 2;
const WAKE: u64 = 3;

/// Priority of the backstop thread under `SCHED_FIFO`: above every normal thread, low among
/// real-time ones.
const BACKSTOP_PRIORITY: i32 = 10;

/// A helper thread and the eventfd that stops it.
pub(crate) struct Helper {
    thread: Option<JoinHandle<()>>,
    stop: Arc<OwnedFd>,
    stop_flag: Arc<AtomicBool>,
}

impl Helper {
    fn spawn(
        name: &str,
        body: impl FnOnce(&OwnedFd, &AtomicBool) + Send + 'static,
    ) -> Result<Self, RtError> {
        let stop = Arc::new(
            eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
                .map_err(|e| RtError::from(("eventfd", e)))?,
        );
        let stop_flag = Arc::new(AtomicBool::new(false));
        let (fd, flag) = (Arc::clone(&stop), Arc::clone(&stop_flag));
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&fd, &flag))
            .map_err(RtError::io("spawning a helper thread"))?;
        Ok(Helper {
            thread: Some(thread),
            stop,
            stop_flag,
        })
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.stop_flag.store(true, Ordering::Release);
        let _ = rustix::io::write(&*self.stop, &1u64.to_ne_bytes());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn epoll_over(fds: &[(std::os::fd::BorrowedFd<'_>, u64)]) -> Result<OwnedFd, RtError> {
    let poll = epoll::create(epoll::CreateFlags::CLOEXEC)
        .map_err(|e| RtError::from(("epoll_create", e)))?;
    for &(fd, token) in fds {
        epoll::add(
            &poll,
            fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN,
        )
        .map_err(|e| RtError::from(("epoll_ctl", e)))?;
    }
    Ok(poll)
}

/// Spawns the backstop thread if this configuration has a backstop timer or a lazy
/// deadline timer to serve; `None` otherwise.
pub(crate) fn spawn_backstop<E, C>(
    shared: &Arc<Shared<E, C>>,
    realtime: bool,
) -> Result<Option<Helper>, RtError>
where
    E: Send + 'static,
    C: Clock + Send + Sync + 'static,
{
    let has_deadline_fd = shared.lazy_deadline_fd().is_some();
    if shared.backstop.is_none() && !has_deadline_fd {
        return Ok(None);
    }
    let shared = Arc::clone(shared);
    Helper::spawn("softtimer-backstop", move |stop, _| {
        let mut fds = vec![(stop.as_fd(), STOP)];
        if let Some((fd, _)) = &shared.backstop {
            fds.push((fd.as_fd(), BACKSTOP));
        }
        let deadline_fd = shared.lazy_deadline_fd();
        if let Some(fd) = &deadline_fd {
            fds.push((fd.as_fd(), DEADLINE));
        }
        let Ok(poll) = epoll_over(&fds) else {
            return;
        };
        // Its timeouts carry due times: no slack on top of them.
        let _ = sys::minimal_timer_slack();
        if realtime && sys::set_realtime_priority(BACKSTOP_PRIORITY).is_ok() {
            shared.backstop_realtime.store(true, Ordering::Relaxed);
        }
        let mut events = Vec::with_capacity(4);
        'run: loop {
            events.clear();
            match epoll::wait(&poll, rustix::buffer::spare_capacity(&mut events), None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
            for event in &events {
                match event.data.u64() {
                    BACKSTOP => {
                        if let Some((fd, _)) = &shared.backstop {
                            let _ = sys::read_counter(fd.as_fd());
                        }
                        guarded(&shared, || {
                            shared.on_backstop_expiry();
                        });
                    }
                    DEADLINE => {
                        if let Some(fd) = &deadline_fd {
                            let _ = sys::read_counter(fd.as_fd());
                        }
                        shared.deadline_wakeups.fetch_add(1, Ordering::Relaxed);
                        guarded(&shared, || {
                            shared.enforce_deadlines();
                        });
                    }
                    _ => break 'run,
                }
            }
        }
        shared
            .backstop_cpu_ns
            .store(sys::thread_cpu_ns(), Ordering::Relaxed);
    })
    .map(Some)
}

/// Spawns the deadline watcher on `cpu` if the configuration uses one.
pub(crate) fn spawn_watcher<E, C>(
    shared: &Arc<Shared<E, C>>,
    cpu: Option<usize>,
) -> Result<Option<Helper>, RtError>
where
    E: Send + 'static,
    C: Clock + Send + Sync + 'static,
{
    let DeadlineService::Watcher(link) = &shared.deadlines else {
        return Ok(None);
    };
    let spin = link.spin;
    let shared = Arc::clone(shared);
    Helper::spawn("softtimer-deadline", move |stop, stop_flag| {
        if let Some(cpu) = cpu {
            sys::pin_current_thread(cpu);
        }
        let _ = sys::minimal_timer_slack();
        if spin {
            watch_spinning(&shared, stop_flag);
        } else {
            watch_sleeping(&shared, stop);
        }
        shared
            .watcher_cpu_ns
            .store(sys::thread_cpu_ns(), Ordering::Relaxed);
    })
    .map(Some)
}

fn watch_spinning<E, C: Clock>(shared: &Shared<E, C>, stop: &AtomicBool) {
    let DeadlineService::Watcher(link) = &shared.deadlines else {
        return;
    };
    while !stop.load(Ordering::Relaxed) {
        let deadline = link.deadline.load(Ordering::Acquire);
        if deadline != u64::MAX && shared.gate.rel(shared.clock.now()) >= deadline {
            guarded(shared, || {
                shared.enforce_deadlines();
            });
        }
        std::hint::spin_loop();
    }
}

/// `sleeping_until` of a watcher that is not sleeping: lower than any deadline, so the loop
/// never nudges it.
pub(crate) const AWAKE: u64 = 0;

fn watch_sleeping<E, C: Clock>(shared: &Shared<E, C>, stop: &OwnedFd) {
    let DeadlineService::Watcher(link) = &shared.deadlines else {
        return;
    };
    let Ok(poll) = epoll_over(&[(stop.as_fd(), STOP), (link.wake.as_fd(), WAKE)]) else {
        return;
    };
    let hz = shared.clock.resolution_hz();
    let mut events = Vec::with_capacity(2);
    loop {
        let deadline = link.deadline.load(Ordering::SeqCst);
        let now = shared.gate.rel(shared.clock.now());
        if deadline != u64::MAX && now >= deadline {
            guarded(shared, || {
                shared.enforce_deadlines();
            });
            continue;
        }
        // Say what we sleep until, then look again: a loop that published an earlier
        // deadline in between either saw this store (and nudges us) or we see its deadline.
        link.sleeping_until.store(deadline, Ordering::SeqCst);
        if link.deadline.load(Ordering::SeqCst) != deadline {
            continue;
        }
        let timeout = (deadline != u64::MAX)
            .then(|| crate::timerfd::timespec(Span::from_ticks(deadline - now).to_duration(hz)));
        events.clear();
        let woke = epoll::wait(
            &poll,
            rustix::buffer::spare_capacity(&mut events),
            timeout.as_ref(),
        );
        // Awake: it looks at the deadline again before it sleeps, so no nudge is needed
        // (and one now would be a wasted system call on the loop's core).
        link.sleeping_until.store(AWAKE, Ordering::SeqCst);
        shared.deadline_wakeups.fetch_add(1, Ordering::Relaxed);
        match woke {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
        for event in &events {
            match event.data.u64() {
                WAKE => {
                    let _ = sys::read_counter(link.wake.as_fd());
                }
                _ => return,
            }
        }
    }
}

/// Runs `f`, counting (not propagating) a handler panic, so that one bad handler does not
/// take the backstop away from every other event. The loop reports it as an error.
fn guarded<E, C: Clock>(shared: &Shared<E, C>, f: impl FnOnce()) {
    if std::panic::catch_unwind(AssertUnwindSafe(f)).is_err() {
        shared.handler_panics.fetch_add(1, Ordering::Relaxed);
    }
}
