//! The helper thread: the backstop (the paper's interrupt clock) and the deadline service
//! (Section 5.9), in one thread placed off the loop's core when the machine allows.
//!
//! * **On another CPU** (the default when the loop thread is pinned and another CPU is
//!   online), the helper is the backstop's *watch* ([`BackstopWatch`](crate::BackstopWatch)):
//!   it sleeps, with a precise timeout, until the late line of the earliest due time the loop
//!   published or the earliest deadline, and fires only what the loop really left overdue.
//!   While the loop keeps passing trigger states the loop programs no timer and makes no
//!   system call for it; the watch wakes at most once per `X` on its own CPU. Its wake-ups on
//!   a CPU the loop does not use cost the loop's core nothing.
//! * **On the loop's only CPU** (no other usable, or the lazy-timerfd deadline design), it
//!   serves the adaptive one-shot timer the loop arms
//!   ([`BackstopPlan`](crate::BackstopPlan)) and the lazy deadline timer, at `SCHED_FIFO`, so
//!   that it preempts a computing loop thread the way an interrupt would.
//!
//! Either way it fires under the facility lock, on its own thread, with the same
//! `Send + Sync` handler the loop uses.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::event::epoll;
use rustix::event::{EventfdFlags, eventfd};
use softtimer::Clock;

use crate::error::RtError;
use crate::policy::{HelperPlacement, WatchAction, unpinned_placement};
use crate::shared::{HelperLink, Shared};
use crate::sys;

const BACKSTOP: u64 = 0;
const DEADLINE: u64 = 1;
const STOP: u64 = 2;
const WAKE: u64 = 3;

/// Priority of the helper under `SCHED_FIFO`: above every normal thread, low among real-time
/// ones.
const HELPER_PRIORITY: i32 = 10;

/// How long the loop's constructor waits for the helper to place itself (it takes a few
/// system calls; the bound only turns a helper that never starts into an error).
const PLACEMENT_WAIT: Duration = Duration::from_secs(10);

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

fn epoll_over(fds: &[(BorrowedFd<'_>, u64)]) -> Result<OwnedFd, RtError> {
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

/// Where the loop asked the helper to go.
pub(crate) struct HelperPlan {
    /// From [`place_helper`](crate::place_helper).
    pub placement: HelperPlacement,
    /// The CPUs the loop thread may use (the helper inherits them).
    pub loop_cpus: Vec<usize>,
    /// Ask for `SCHED_FIFO` (not for a spinning watch, which would starve its CPU).
    pub realtime: bool,
}

/// Puts the calling thread (the helper, spawned by the loop thread) where `plan` says; where
/// it could not be pinned, it stays with the loop.
fn place_current_thread(plan: &HelperPlan) -> HelperPlacement {
    match plan.placement {
        HelperPlacement::OtherCpu(cpu) | HelperPlacement::MayShare(Some(cpu)) => {
            if sys::pin_current_thread(cpu) {
                plan.placement
            } else {
                unpinned_placement(&plan.loop_cpus)
            }
        }
        placement => placement,
    }
}

/// Spawns the helper if this configuration has one (soft mode), and waits until it has placed
/// itself, so that the loop knows who enforces the bound before it runs.
pub(crate) fn spawn_helper<E, C>(
    shared: &Arc<Shared<E, C>>,
    plan: HelperPlan,
) -> Result<Option<Helper>, RtError>
where
    E: Send + 'static,
    C: Clock + Send + Sync + 'static,
{
    if shared.link.is_none() {
        return Ok(None);
    }
    let (placed_tx, placed_rx) = std::sync::mpsc::sync_channel::<Result<(), RtError>>(1);
    let shared = Arc::clone(shared);
    let helper = Helper::spawn("softtimer-backstop", move |stop, stop_flag| {
        let placement = place_current_thread(&plan);
        shared.set_placement(placement);
        // Its timeouts carry due times and deadlines: no slack on top of them.
        let _ = sys::minimal_timer_slack();
        let spin = shared.helper_spins();
        if plan.realtime && !spin && sys::set_realtime_priority(HELPER_PRIORITY).is_ok() {
            shared
                .helper
                .backstop_realtime
                .store(true, Ordering::Relaxed);
        }
        if spin {
            let _ = placed_tx.send(Ok(()));
            watch_spinning(&shared, stop_flag);
        } else {
            // The epoll set is made before the loop's constructor returns, so that a helper
            // that cannot wait (out of descriptors) fails the constructor instead of leaving
            // a loop without its bound.
            match SleepingWatch::new(&shared, stop, placement) {
                Ok(watch) => {
                    let _ = placed_tx.send(Ok(()));
                    if let Err(errno) = watch.run(stop_flag) {
                        shared.helper_failed(errno);
                    }
                }
                Err(e) => {
                    let _ = placed_tx.send(Err(e));
                }
            }
        }
        let cpu = if placement.shares_loop_cpu() {
            &shared.helper.loop_cpu_ns
        } else {
            &shared.helper.other_cpu_ns
        };
        cpu.store(sys::thread_cpu_ns(), Ordering::Relaxed);
    })?;
    let starting = RtError::io("starting the backstop's helper");
    match placed_rx.recv_timeout(PLACEMENT_WAIT) {
        Ok(Ok(())) => Ok(Some(helper)),
        Ok(Err(e)) => Err(e),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            Err(starting(std::io::ErrorKind::TimedOut.into()))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(starting(
            std::io::Error::other("the helper thread ended before it started watching"),
        )),
    }
}

/// The watch, spinning: no wake-up latency and no system call anywhere, for a whole CPU.
fn watch_spinning<E, C: Clock>(shared: &Shared<E, C>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let (next, deadline) = shared.watched_times();
        match shared.watch().decide(shared.clock.now(), next, deadline) {
            WatchAction::FireOverdue => guarded(shared, || {
                shared.fire_overdue();
            }),
            WatchAction::EnforceDeadlines => guarded(shared, || {
                shared.enforce_deadlines();
            }),
            WatchAction::Sleep { .. } => std::hint::spin_loop(),
        }
    }
}

/// The watch, sleeping until its alarm (and serving the one-shot timers when it shares the
/// loop's only CPU): its epoll set over the stop eventfd, the loop's wake eventfd, the
/// one-shot timer and the deadline timer, whichever this loop has.
struct SleepingWatch<'a, E, C: Clock> {
    shared: &'a Shared<E, C>,
    poll: OwnedFd,
    link: &'a HelperLink,
    deadline_fd: Option<BorrowedFd<'a>>,
    on_loop_core: bool,
    fds: usize,
}

impl<'a, E, C: Clock> SleepingWatch<'a, E, C> {
    fn new(
        shared: &'a Shared<E, C>,
        stop: &OwnedFd,
        placement: HelperPlacement,
    ) -> Result<Self, RtError> {
        let Some(link) = &shared.link else {
            return Err(RtError::io("starting the backstop's helper")(
                std::io::ErrorKind::InvalidInput.into(),
            ));
        };
        let mut fds = vec![(stop.as_fd(), STOP), (link.wake.as_fd(), WAKE)];
        if let (Some(backstop), HelperPlacement::LoopCpu) = (&shared.backstop, placement) {
            fds.push((backstop.timer.as_fd(), BACKSTOP));
        }
        let deadline_fd = shared.lazy_deadline_fd();
        if let Some(fd) = deadline_fd {
            fds.push((fd, DEADLINE));
        }
        Ok(SleepingWatch {
            shared,
            poll: epoll_over(&fds)?,
            link,
            deadline_fd,
            on_loop_core: placement.shares_loop_cpu(),
            fds: fds.len(),
        })
    }

    /// Watches until stopped; an `epoll_wait` that fails (other than by a signal) ends it
    /// with that error, which the loop then reports.
    fn run(self, stop_flag: &AtomicBool) -> Result<(), rustix::io::Errno> {
        let SleepingWatch {
            shared,
            poll,
            link,
            deadline_fd,
            on_loop_core,
            fds,
        } = self;
        let syscalls = |n: u64| {
            if on_loop_core {
                shared
                    .helper
                    .loop_core_syscalls
                    .fetch_add(n, Ordering::Relaxed);
            }
        };
        let watch = shared.watch();
        let hz = shared.clock.resolution_hz();
        let mut events = Vec::with_capacity(fds);
        // The flag, not only the eventfd: a helper that never catches up (each pass leaves
        // its events overdue again) never reaches the `epoll_wait` that would see the
        // eventfd.
        while !stop_flag.load(Ordering::Acquire) {
            let (next, deadline) = shared.watched_times();
            let now = shared.clock.now();
            let until = match watch.decide(now, next, deadline) {
                WatchAction::FireOverdue => {
                    guarded(shared, || {
                        shared.fire_overdue();
                    });
                    continue;
                }
                WatchAction::EnforceDeadlines => {
                    guarded(shared, || {
                        shared.enforce_deadlines();
                    });
                    continue;
                }
                WatchAction::Sleep { until } => until,
            };
            // Say what we sleep until, then look again: a loop that published an earlier
            // time in between either saw this store (and wakes us) or we see its time now.
            shared.set_sleeping_until(Some(until));
            let (next, deadline) = shared.watched_times();
            let again = watch.alarm(next, deadline);
            if again.is_some_and(|a| until.is_none_or(|u| a < u)) {
                shared.set_sleeping_until(None);
                continue;
            }
            let timeout = until.map(|u| {
                let wait = u.saturating_since(now).to_duration(hz);
                crate::timerfd::timespec(wait)
            });
            events.clear();
            let woke = epoll::wait(
                &poll,
                rustix::buffer::spare_capacity(&mut events),
                timeout.as_ref(),
            );
            // Awake: it looks at the published times before it sleeps again, so the loop
            // need not wake it (and doing so now would be a wasted system call on the loop's
            // core).
            shared.set_sleeping_until(None);
            syscalls(1);
            match woke {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e),
            }
            if events.is_empty() {
                // The timeout: the deadline's, or the late line's.
                let counter = if until.is_some() && until == deadline {
                    &shared.helper.deadline_wakeups
                } else {
                    &shared.helper.backstop_wakeups
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            for event in &events {
                match event.data.u64() {
                    WAKE => {
                        let _ = sys::read_counter(link.wake.as_fd());
                        syscalls(1);
                    }
                    BACKSTOP => {
                        if let Some(backstop) = &shared.backstop {
                            let _ = sys::read_counter(backstop.timer.as_fd());
                        }
                        syscalls(1);
                        guarded(shared, || {
                            shared.on_backstop_expiry();
                        });
                    }
                    DEADLINE => {
                        if let Some(fd) = deadline_fd {
                            let _ = sys::read_counter(fd);
                        }
                        syscalls(1);
                        shared
                            .helper
                            .deadline_wakeups
                            .fetch_add(1, Ordering::Relaxed);
                        guarded(shared, || {
                            shared.enforce_deadlines();
                        });
                    }
                    // Only the tokens above are registered.
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Runs `f`, counting (not propagating) a handler panic, so that one bad handler does not
/// take the backstop away from every other event. The loop reports it as an error.
fn guarded<E, C: Clock>(shared: &Shared<E, C>, f: impl FnOnce()) {
    if std::panic::catch_unwind(AssertUnwindSafe(f)).is_err() {
        shared.handler_panics.fetch_add(1, Ordering::Relaxed);
    }
}
