//! Blocking work off the loops: [`spawn_blocking`] runs a closure on a pool of threads the
//! runtime starts when there is work for them, so that a task can wait for a file read, a
//! name lookup or a long computation without stopping its loop, whose timers and sockets
//! would wait with it.
//!
//! The pool grows a thread whenever work arrives and none is idle, up to
//! [`Builder::max_blocking_threads`](crate::Builder::max_blocking_threads) (512 by default,
//! as tokio's), and a thread idle for [`KEEP_ALIVE`] exits. Its threads run on the CPUs the
//! runtime's building thread had before any loop was pinned, not on a loop's CPU.
//!
//! When the runtime is dropped, blocking work not yet started is cancelled (its
//! [`JoinHandle`] reports a cancelled task), idle threads exit and are joined, and work
//! already running finishes on its thread, which exits then: the drop does not wait for a
//! closure that may never return.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle as ThreadHandle;
use std::time::Duration;

use async_task::Runnable;

use crate::executor::lock;
use crate::runtime::Handle;
use crate::task::{JoinHandle, spawn_with};

/// How long a pool thread with nothing to do waits for work before it exits.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The pool's default size, as tokio's.
pub(crate) const MAX_THREADS: usize = 512;

/// A runtime's pool of threads for blocking work.
pub(crate) struct BlockingPool {
    state: Mutex<PoolState>,
    /// Signalled when work is queued for an idle thread, at shutdown, and when a thread
    /// exits.
    changed: Condvar,
    max_threads: usize,
    /// The CPUs its threads run on (`None`: those of the thread that starts them).
    cpus: Option<rustix::thread::CpuSet>,
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
    /// Every thread started, and whether it has returned from its work loop (to be joined).
    handles: Vec<(ThreadHandle<()>, Arc<AtomicBool>)>,
}

impl BlockingPool {
    pub(crate) fn new(max_threads: usize, cpus: Option<rustix::thread::CpuSet>) -> Arc<Self> {
        Arc::new(BlockingPool {
            state: Mutex::new(PoolState::default()),
            changed: Condvar::new(),
            max_threads: max_threads.max(1),
            cpus,
        })
    }

    /// Queues `runnable` for a pool thread: an idle one, or a new one where none is free and
    /// the pool may grow. After shutdown the work is cancelled instead.
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
            self.changed.notify_one();
            return;
        }
        if state.threads >= self.max_threads {
            // Taken by the next thread to finish its closure.
            return;
        }
        let exited = reap_exited(&mut state);
        let done = Arc::new(AtomicBool::new(false));
        let (pool, mark) = (Arc::clone(self), Arc::clone(&done));
        let spawned = std::thread::Builder::new()
            .name("softtimer-async-blocking".into())
            .spawn(move || {
                if let Some(cpus) = &pool.cpus {
                    let _ = rustix::thread::sched_setaffinity(None, cpus);
                }
                pool.work(&mark);
            });
        let orphan = match spawned {
            Ok(thread) => {
                state.threads += 1;
                state.handles.push((thread, done));
                None
            }
            // No thread will ever take it: cancelled rather than left waiting for ever.
            Err(_) if state.threads == 0 => state.queue.pop_back(),
            // A thread that is running takes it when its closure returns.
            Err(_) => None,
        };
        drop(state);
        drop(orphan);
        for thread in exited {
            let _ = thread.join();
        }
    }

    /// A pool thread: runs queued work, waits up to [`KEEP_ALIVE`] for more, and returns when
    /// none came or at shutdown, marking `done` as it leaves (under the lock, so that whoever
    /// sees the thread gone from the count finds it marked, to join).
    fn work(&self, done: &AtomicBool) {
        let mut state = lock(&self.state);
        loop {
            if let Some(runnable) = state.queue.pop_front() {
                state.busy += 1;
                drop(state);
                runnable.run();
                state = lock(&self.state);
                state.busy -= 1;
                continue;
            }
            if state.shutdown {
                break;
            }
            state.idle += 1;
            let (woken, wait) = self
                .changed
                .wait_timeout(state, KEEP_ALIVE)
                .unwrap_or_else(PoisonError::into_inner);
            state = woken;
            state.idle -= 1;
            state.notified = state.notified.saturating_sub(1);
            if wait.timed_out() && state.queue.is_empty() {
                break;
            }
        }
        done.store(true, Ordering::Release);
        state.threads -= 1;
        drop(state);
        self.changed.notify_all();
    }

    /// Cancels the work not started, lets idle threads exit and joins them; a thread running
    /// a closure exits when it returns.
    pub(crate) fn shutdown(&self) {
        let mut state = lock(&self.state);
        state.shutdown = true;
        let cancelled = std::mem::take(&mut state.queue);
        self.changed.notify_all();
        while state.threads > state.busy {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let exited = reap_exited(&mut state);
        drop(state);
        // Dropped outside the lock: a cancelled task wakes whoever awaits its handle.
        drop(cancelled);
        for thread in exited {
            let _ = thread.join();
        }
    }
}

/// Takes out of `state` the handles of the threads that have left their work loop, to be
/// joined (after the lock is released: a thread that has left needs only its last
/// instructions).
fn reap_exited(state: &mut PoolState) -> Vec<ThreadHandle<()>> {
    let (exited, alive): (Vec<_>, Vec<_>) = std::mem::take(&mut state.handles)
        .into_iter()
        .partition(|(_, done)| done.load(Ordering::Acquire));
    state.handles = alive;
    exited.into_iter().map(|(thread, _)| thread).collect()
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
/// Outside a runtime thread (use [`Handle::spawn_blocking`] there).
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
