//! A set of tasks whose outputs come back in the order they finish.

use std::collections::{HashMap, VecDeque};
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::task::{AbortHandle, JoinError, JoinHandle, spawn, spawn_local};

/// Tasks spawned together, awaited as they finish.
///
/// [`join_next`](JoinSet::join_next) gives each task's output (or its [`JoinError`]) in the
/// order the tasks finish, whichever loop they run on; it costs nothing per task still
/// running. Dropping the set aborts every task still in it, as tokio's `JoinSet` does.
/// Unlike tokio's, it has no task ids.
///
/// ```
/// use std::time::Duration;
/// use softtimer_async::{JoinSet, Runtime, time};
///
/// let rt = Runtime::new().unwrap();
/// let order = rt.block_on(async {
///     let mut set = JoinSet::new();
///     for ms in [3u64, 1, 2] {
///         set.spawn(async move {
///             time::sleep(Duration::from_millis(ms)).await;
///             ms
///         });
///     }
///     let mut order = Vec::new();
///     while let Some(out) = set.join_next().await {
///         order.push(out.unwrap());
///     }
///     order
/// });
/// assert_eq!(order, [1, 2, 3]);
/// ```
pub struct JoinSet<T> {
    tasks: HashMap<u64, JoinHandle<T>>,
    next_id: u64,
    /// Tasks whose futures are gone (finished, panicked, aborted): their ids, and the waker
    /// of the task awaiting the set.
    done: Arc<Mutex<Done>>,
    /// Ids taken from `done`, in the order their tasks finished, whose output was not yet
    /// written when last polled (a task's future is dropped just before its output is
    /// stored).
    finishing: VecDeque<u64>,
}

#[derive(Default)]
struct Done {
    ids: Vec<u64>,
    waker: Option<Waker>,
}

pin_project_lite::pin_project! {
    /// A task's future that reports its id to its set when it is dropped, which happens
    /// once it has finished, panicked or been aborted, or when its runtime shuts down.
    struct Member<F> {
        #[pin]
        future: F,
        // After `future`: it reports once the future is gone.
        report: Report,
    }
}

/// Reports a member's id to its set when dropped, and wakes the set's owner.
struct Report {
    id: u64,
    done: Arc<Mutex<Done>>,
}

impl Drop for Report {
    fn drop(&mut self) {
        let waker = {
            let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
            done.ids.push(self.id);
            done.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<F: Future> Future for Member<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().future.poll(cx)
    }
}

impl<T> JoinSet<T> {
    /// An empty set.
    pub fn new() -> Self {
        JoinSet {
            tasks: HashMap::new(),
            next_id: 0,
            done: Arc::default(),
            finishing: VecDeque::new(),
        }
    }

    /// Tasks in the set: spawned and whose output has not been taken.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether the set holds no task.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// A new member's id, and the guard that reports it when dropped.
    fn report(&mut self) -> (u64, Report) {
        let id = self.next_id;
        self.next_id += 1;
        let done = Arc::clone(&self.done);
        (id, Report { id, done })
    }

    fn member<F>(&mut self, future: F) -> (u64, Member<F>) {
        let (id, report) = self.report();
        (id, Member { future, report })
    }

    fn insert(&mut self, id: u64, handle: JoinHandle<T>) {
        self.tasks.insert(id, handle);
    }

    /// Spawns `future` onto the calling thread's loop (as [`spawn`](crate::spawn)) into the
    /// set. The [`AbortHandle`] cancels that one task (its cancelled output still comes from
    /// [`join_next`](JoinSet::join_next)); every task spawned this way costs one allocation
    /// for it, whether or not the handle is kept.
    ///
    /// # Panics
    ///
    /// Outside a runtime thread.
    #[track_caller]
    pub fn spawn<F>(&mut self, future: F) -> AbortHandle
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (id, member) = self.member(future);
        let handle = spawn(member);
        let abort = handle.abort_handle();
        self.insert(id, handle);
        abort
    }

    /// Spawns `future` through `handle` (as [`Handle::spawn`](crate::Handle::spawn), from any
    /// thread) into the set.
    pub fn spawn_on<F>(&mut self, future: F, handle: &crate::Handle) -> AbortHandle
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (id, member) = self.member(future);
        let task = handle.spawn(member);
        let abort = task.abort_handle();
        self.insert(id, task);
        abort
    }

    /// Spawns a future that need not be `Send` onto the calling thread's loop (as
    /// [`spawn_local`](crate::spawn_local)) into the set. No [`AbortHandle`] comes back, as
    /// the output need not be `Send` either; [`abort_all`](JoinSet::abort_all) reaches it.
    ///
    /// # Panics
    ///
    /// Outside a runtime thread.
    #[track_caller]
    pub fn spawn_local<F>(&mut self, future: F)
    where
        F: Future<Output = T> + 'static,
        T: 'static,
    {
        let (id, member) = self.member(future);
        let handle = spawn_local(member);
        self.insert(id, handle);
    }

    /// Runs `f` on the runtime's blocking pool (as [`spawn_blocking`](crate::spawn_blocking))
    /// into the set. Aborted (through the handle, [`abort_all`](JoinSet::abort_all) or the
    /// set's drop) while still queued, it never runs, and its cancelled output comes back
    /// when a pool thread takes it off the queue (behind busy threads, when one frees up) or
    /// the pool shuts down; a closure that has started runs to its end, as a thread cannot be
    /// stopped (see [`JoinHandle::abort`]).
    ///
    /// ```
    /// use softtimer_async::{JoinSet, Runtime};
    ///
    /// let rt = Runtime::new().unwrap();
    /// let mut sums = rt.block_on(async {
    ///     let mut set = JoinSet::new();
    ///     for n in [10u64, 20, 30] {
    ///         set.spawn_blocking(move || (1..=n).sum::<u64>());
    ///     }
    ///     set.join_all().await
    /// });
    /// sums.sort();
    /// assert_eq!(sums, [55, 210, 465]);
    /// ```
    ///
    /// # Panics
    ///
    /// Outside a runtime thread (use [`spawn_blocking_on`](JoinSet::spawn_blocking_on)
    /// there).
    #[track_caller]
    pub fn spawn_blocking<F>(&mut self, f: F) -> AbortHandle
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let handle = crate::Handle::try_current().expect(
            "JoinSet::spawn_blocking called outside a runtime thread: use spawn_blocking_on there",
        );
        self.spawn_blocking_on(f, &handle)
    }

    /// Runs `f` on the blocking pool of `handle`'s runtime (from any thread) into the set.
    /// After that runtime is dropped, `f` never runs and comes back cancelled.
    ///
    /// # Panics
    ///
    /// As [`Handle::spawn_blocking`](crate::Handle::spawn_blocking): if no thread can be
    /// started for `f` and none of the pool's is alive to take it.
    pub fn spawn_blocking_on<F>(&mut self, f: F, handle: &crate::Handle) -> AbortHandle
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (id, report) = self.report();
        // The report is dropped when the closure returns, panics, or is dropped unrun.
        let task = handle.spawn_blocking(move || {
            let _report = report;
            f()
        });
        let abort = task.abort_handle();
        self.insert(id, task);
        abort
    }

    /// Awaits every task in the set and returns their outputs in the order they finished,
    /// as tokio's `JoinSet::join_all` does.
    ///
    /// # Panics
    ///
    /// If a task panicked, with its panic, or was cancelled: the set is dropped first, which
    /// aborts the tasks still in it. Use [`join_next`](JoinSet::join_next) to handle each
    /// [`JoinError`] instead.
    pub async fn join_all(mut self) -> Vec<T> {
        let mut outputs = Vec::with_capacity(self.len());
        while let Some(out) = self.join_next().await {
            match out {
                Ok(output) => outputs.push(output),
                Err(error) => {
                    drop(self);
                    match error.try_into_panic() {
                        Ok(panic) => std::panic::resume_unwind(panic),
                        Err(_) => panic!("JoinSet::join_all: a task in the set was cancelled"),
                    }
                }
            }
        }
        outputs
    }

    /// The output of the next task to finish, or `None` when the set is empty. Cancel-safe:
    /// a `join_next` dropped before it completes loses no output.
    pub async fn join_next(&mut self) -> Option<Result<T, JoinError>> {
        poll_fn(|cx| self.poll_join_next(cx)).await
    }

    /// The output of a task that has finished, if any, without waiting.
    pub fn try_join_next(&mut self) -> Option<Result<T, JoinError>> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.poll_join_next(&mut cx) {
            Poll::Ready(out) => out,
            Poll::Pending => None,
        }
    }

    /// [`join_next`](JoinSet::join_next) as a poll: `Ready(None)` when the set is empty.
    pub fn poll_join_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, JoinError>>> {
        if self.tasks.is_empty() {
            return Poll::Ready(None);
        }
        let replaced = {
            let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
            self.finishing.extend(done.ids.drain(..));
            // Registered before the tasks are polled: a task that finishes after this
            // reports to this waker.
            match &mut done.waker {
                Some(w) if w.will_wake(cx.waker()) => None,
                slot => slot.replace(cx.waker().clone()),
            }
        };
        // Dropped unlocked: a task's last waker may run its schedule function.
        drop(replaced);
        // The earliest finished whose output is there: an earlier one whose output is still
        // being written (on another thread) is passed over until it is.
        let mut i = 0;
        while i < self.finishing.len() {
            let id = self.finishing[i];
            let Some(handle) = self.tasks.get_mut(&id) else {
                // A member that never became a task (its spawn panicked outside a runtime).
                self.finishing.remove(i);
                continue;
            };
            // Its output is written just after its future is dropped; if not yet, the
            // handle wakes this task when it is.
            if let Poll::Ready(out) = Pin::new(handle).poll(cx) {
                self.finishing.remove(i);
                self.tasks.remove(&id);
                return Poll::Ready(Some(out));
            }
            i += 1;
        }
        Poll::Pending
    }

    /// Aborts every task in the set; their cancelled outputs still come from
    /// [`join_next`](JoinSet::join_next) (a task that finished first gives its output).
    pub fn abort_all(&self) {
        for handle in self.tasks.values() {
            handle.abort();
        }
    }

    /// Aborts every task and waits until each has ended, discarding their outputs.
    pub async fn shutdown(&mut self) {
        self.abort_all();
        while self.join_next().await.is_some() {}
    }

    /// Lets every task in the set run on without it: the set is empty afterwards and
    /// dropping it aborts none of them.
    pub fn detach_all(&mut self) {
        self.tasks.clear();
        self.finishing.clear();
        // The detached tasks report to the old list, which nobody reads, and wake nobody.
        let old = std::mem::take(&mut self.done);
        let waker = old
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .waker
            .take();
        drop(waker);
    }
}

impl<T> Default for JoinSet<T> {
    fn default() -> Self {
        JoinSet::new()
    }
}

impl<T> Drop for JoinSet<T> {
    fn drop(&mut self) {
        self.abort_all();
        // The tasks report to `done` as they end; the waker of the task that owned the set
        // need not live that long.
        let waker = self
            .done
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .waker
            .take();
        drop(waker);
    }
}

impl<T> std::fmt::Debug for JoinSet<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinSet")
            .field("len", &self.tasks.len())
            .finish()
    }
}
