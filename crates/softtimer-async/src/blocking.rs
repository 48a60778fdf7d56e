//! Blocking work off the loops: [`spawn_blocking`] runs a closure on a pool of threads the
//! runtime starts when there is work for them, so that a task can wait for a file read, a
//! name lookup or a long computation without stopping its loop, whose timers and sockets
//! would wait with it.
//!
//! The pool grows a thread whenever work arrives and none is idle, up to
//! [`Builder::max_blocking_threads`](crate::Builder::max_blocking_threads) (512 by default,
//! as tokio's), and a thread idle for
//! [`Builder::blocking_keep_alive`](crate::Builder::blocking_keep_alive) (10 s) exits. Where
//! the runtime pins its loops, the pool's threads run on the CPUs the building thread had
//! before, not confined to the CPU of the loop that started them. On them,
//! [`Handle::current`] is the runtime's.
//!
//! When the runtime is dropped, blocking work not yet started is cancelled (its
//! [`JoinHandle`] reports a cancelled task), idle threads exit and are joined, and work
//! already running finishes on its thread, which exits then: the drop does not wait for a
//! closure that may never return. [`Runtime::shutdown_timeout`](crate::Runtime::shutdown_timeout)
//! waits for running closures up to a bound.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::thread::{JoinHandle as ThreadHandle, ThreadId};
use std::time::{Duration, Instant};

use async_task::Runnable;

use crate::executor::lock;
use crate::runtime::{Handle, HandleInner};
use crate::task::{JoinHandle, spawn_with};

/// How long a pool thread with nothing to do waits for work before it exits, by default.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The pool's default size, as tokio's.
pub(crate) const MAX_THREADS: usize = 512;

thread_local! {
    /// On a pool thread: the runtime it works for, for [`Handle::try_current`].
    static POOL_RUNTIME: RefCell<Option<Weak<HandleInner>>> = const { RefCell::new(None) };
}

/// The runtime this thread works for when it is one of a runtime's blocking threads.
pub(crate) fn pool_runtime() -> Option<Arc<HandleInner>> {
    POOL_RUNTIME
        .try_with(|r| r.borrow().as_ref().and_then(Weak::upgrade))
        .ok()
        .flatten()
}

/// A runtime's pool of threads for blocking work.
pub(crate) struct BlockingPool {
    state: Mutex<PoolState>,
    /// Signalled when work is queued for an idle thread (one), and at shutdown (all).
    work_ready: Condvar,
    /// Signalled when a thread leaves, for shutdown to wait on.
    left: Condvar,
    max_threads: usize,
    keep_alive: Duration,
    /// The CPUs its threads run on (`None`: those of the thread that starts them).
    cpus: Option<rustix::thread::CpuSet>,
    /// The runtime, set once it is built.
    runtime: OnceLock<Weak<HandleInner>>,
}

#[derive(Default)]
struct PoolState {
    queue: VecDeque<Runnable>,
    /// Threads alive, busy or idle.
    threads: usize,
    /// Threads running a closure.
    busy: usize,
    /// Threads waiting for work.
    idle: usize,
    /// Idle threads signalled for work they have not woken to take yet: a thread is started
    /// when every idle one is spoken for.
    notified: usize,
    shutdown: bool,
    /// The threads not yet joined.
    handles: Vec<ThreadHandle<()>>,
    /// Of those, the ones that have left their work loop (each adds itself, under the lock,
    /// as it leaves), to be joined.
    left: Vec<ThreadId>,
}

impl BlockingPool {
    pub(crate) fn new(
        max_threads: usize,
        keep_alive: Duration,
        cpus: Option<rustix::thread::CpuSet>,
    ) -> Arc<Self> {
        Arc::new(BlockingPool {
            state: Mutex::new(PoolState::default()),
            work_ready: Condvar::new(),
            left: Condvar::new(),
            max_threads: max_threads.max(1),
            keep_alive,
            cpus,
            runtime: OnceLock::new(),
        })
    }

    /// Names the runtime the pool's threads work for.
    pub(crate) fn set_runtime(&self, runtime: Weak<HandleInner>) {
        let _ = self.runtime.set(runtime);
    }

    /// Threads alive in the pool, busy or idle.
    pub(crate) fn threads(&self) -> usize {
        lock(&self.state).threads
    }

    /// Whether closures are queued or running: a simulated clock does not jump past them.
    pub(crate) fn in_flight(&self) -> bool {
        let state = lock(&self.state);
        state.busy > 0 || !state.queue.is_empty()
    }

    /// Queues `runnable` for a pool thread: an idle one, or a new one where none is free and
    /// the pool may grow. After shutdown the work is cancelled instead.
    ///
    /// # Panics
    ///
    /// When no thread can be started and none is alive to take the work (the system is out
    /// of threads), as `std::thread::spawn` does.
    fn schedule(self: &Arc<Self>, runnable: Runnable) {
        let mut state = lock(&self.state);
        if state.shutdown {
            drop(state);
            drop(runnable);
            return;
        }
        state.queue.push_back(runnable);
        if state.idle > state.notified {
            state.notified += 1;
            self.work_ready.notify_one();
            return;
        }
        if state.threads >= self.max_threads {
            // Taken by the next thread to finish its closure.
            return;
        }
        let pool = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("softtimer-async-blocking".into())
            .spawn(move || pool.thread());
        match spawned {
            Ok(thread) => {
                state.threads += 1;
                state.handles.push(thread);
            }
            // A thread that is alive takes it when its closure returns.
            Err(_) if state.threads > 0 => {}
            Err(e) => {
                let orphan = state.queue.pop_back();
                drop(state);
                drop(orphan);
                panic!("softtimer-async: cannot start a thread for blocking work: {e}");
            }
        }
    }

    /// A pool thread's life: the runtime's context, the CPUs, then [`work`](Self::work).
    fn thread(&self) {
        if let Some(cpus) = &self.cpus {
            let _ = rustix::thread::sched_setaffinity(None, cpus);
        }
        if let Some(runtime) = self.runtime.get() {
            POOL_RUNTIME.with(|r| *r.borrow_mut() = Some(Weak::clone(runtime)));
        }
        self.work();
    }

    /// Runs queued work, waits up to the keep-alive for more, and returns when none came or
    /// at shutdown. It marks itself left as it leaves, under the lock, so that whoever sees it
    /// gone from the count finds it marked; and joins the threads that left before it (they
    /// need only their last instructions), so that no more than one left thread waits to be
    /// joined, and never by a loop thread.
    fn work(&self) {
        let mut state = lock(&self.state);
        loop {
            if let Some(runnable) = state.queue.pop_front() {
                state.busy += 1;
                drop(state);
                runnable.run();
                state = lock(&self.state);
                state.busy -= 1;
                if state.busy == 0 && state.queue.is_empty() {
                    // A simulated clock waits for blocking work before it jumps: its loop,
                    // parked meanwhile, is told the work has drained.
                    if let Some(runtime) = self.runtime.get().and_then(Weak::upgrade) {
                        runtime.wake_simulated_loops();
                    }
                }
                continue;
            }
            if state.shutdown {
                break;
            }
            // Idle until work is queued for this thread, shutdown, or the keep-alive has
            // passed since it went idle (a wake that finds nothing waits out the rest).
            state.idle += 1;
            // `None`: a keep-alive too long to represent, which never ends.
            let until = Instant::now().checked_add(self.keep_alive);
            let expired = loop {
                let woken;
                (state, woken) = wait_until(&self.work_ready, state, until);
                if !woken {
                    break true;
                }
                if state.notified > 0 || state.shutdown || !state.queue.is_empty() {
                    break false;
                }
            };
            state.idle -= 1;
            state.notified = state.notified.saturating_sub(1);
            if expired && state.queue.is_empty() {
                break;
            }
        }
        let me = std::thread::current().id();
        state.left.push(me);
        state.threads -= 1;
        let earlier = take_left(&mut state, Some(me));
        drop(state);
        self.left.notify_all();
        for thread in earlier {
            let _ = thread.join();
        }
    }

    /// Cancels the work not started, lets idle threads exit and joins every thread that is
    /// not running a closure, then waits up to `running` for the closures that run to return
    /// and joins their threads too; a thread still running one then exits when it returns.
    pub(crate) fn shutdown(&self, running: Duration) {
        let mut state = lock(&self.state);
        state.shutdown = true;
        let cancelled = std::mem::take(&mut state.queue);
        self.work_ready.notify_all();
        drop(state);
        // Dropped unlocked, and before any wait: a cancelled task wakes whoever awaits its
        // handle.
        drop(cancelled);
        let mut state = lock(&self.state);
        while state.threads > state.busy {
            state = self
                .left
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        // `None`: a wait too long to represent, which has no end.
        let until = Instant::now().checked_add(running);
        while state.threads > 0 {
            let woken;
            (state, woken) = wait_until(&self.left, state, until);
            if !woken {
                break;
            }
        }
        let left = take_left(&mut state, None);
        drop(state);
        for thread in left {
            let _ = thread.join();
        }
    }
}

/// Waits on `condvar` until it is notified (or wakes spuriously) or `until` comes (`None`:
/// no deadline); the guard again, and `false` when the deadline had passed without a wait.
fn wait_until<'a>(
    condvar: &Condvar,
    state: MutexGuard<'a, PoolState>,
    until: Option<Instant>,
) -> (MutexGuard<'a, PoolState>, bool) {
    let Some(until) = until else {
        return (
            condvar.wait(state).unwrap_or_else(PoisonError::into_inner),
            true,
        );
    };
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return (state, false);
    }
    let (state, _) = condvar
        .wait_timeout(state, left)
        .unwrap_or_else(PoisonError::into_inner);
    (state, true)
}

/// Takes out of `state` the handles of the threads that have left their work loop, but for
/// the caller's own (`mine`), to be joined once the lock is released.
fn take_left(state: &mut PoolState, mine: Option<ThreadId>) -> Vec<ThreadHandle<()>> {
    let joinable = |id: ThreadId| Some(id) != mine && state.left.contains(&id);
    let (left, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut state.handles)
        .into_iter()
        .partition(|thread| joinable(thread.thread().id()));
    state.handles = kept;
    state
        .left
        .retain(|&id| !left.iter().any(|t| t.thread().id() == id));
    left
}

/// A closure as a future that completes at its first poll, on a pool thread.
struct Blocking<F>(Option<F>);

impl<F> Unpin for Blocking<F> {}

impl<F: FnOnce() -> R, R> std::future::Future for Blocking<F> {
    type Output = R;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<R> {
        let f = self.0.take().expect("a blocking closure is polled once");
        std::task::Poll::Ready(f())
    }
}

/// Runs `f` on `pool` (see [`spawn_blocking`]).
pub(crate) fn spawn_on_pool<F, R>(pool: &Arc<BlockingPool>, f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let pool = Arc::clone(pool);
    spawn_with(Blocking(Some(f)), move |runnable| pool.schedule(runnable))
}

/// Runs `f` on one of the runtime's threads for blocking work, and returns a handle that
/// awaits its result: a file read, a name lookup or a long computation waits there, not on
/// the loop, whose timers and sockets keep running. A panic in `f` is reported through the
/// handle, as a task's is. Dropping the handle does not stop `f` once it has started (a
/// thread cannot be interrupted); [`JoinHandle::abort`] cancels it only while it is queued.
/// In `f`, [`Handle::current`] is the runtime's, and [`spawn`](crate::spawn), the timers and
/// the sockets made there belong to its loops (each to the next in turn), as on tokio's
/// blocking threads.
///
/// Dropping the runtime cancels the work still queued but does not wait for `f` once it
/// runs: it finishes on its thread, which exits then, and a program that ends meanwhile ends
/// it mid-way. So await the handle of work that must finish (a file being written) before
/// dropping the runtime, or shut it down with
/// [`Runtime::shutdown_timeout`](crate::Runtime::shutdown_timeout), which waits for running
/// closures up to a bound. (tokio's `Runtime` waits for running blocking work when dropped,
/// without bound; dropping this one is its `shutdown_background`.)
///
/// ```
/// use std::time::Duration;
/// use softtimer_async::{Runtime, spawn_blocking, time};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let read = spawn_blocking(|| std::fs::read_to_string("/proc/self/stat"));
///     // The loop is free meanwhile: its timers fire on time.
///     time::sleep(Duration::from_micros(100)).await;
///     let stat = read.await.unwrap().unwrap();
///     assert!(!stat.is_empty());
/// });
/// ```
///
/// # Panics
///
/// Outside a runtime thread (use [`Handle::spawn_blocking`] there); and when no thread can be
/// started for `f` and none of the pool's is alive to take it (the system is out of threads),
/// as `std::thread::spawn` does.
#[track_caller]
pub fn spawn_blocking<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    Handle::try_current()
        .expect(
            "softtimer_async::spawn_blocking called outside a runtime thread: use \
             Handle::spawn_blocking there",
        )
        .spawn_blocking(f)
}
