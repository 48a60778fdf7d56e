//! Tasks: spawning onto a loop (with `async-task`'s tasks and wakers), and the handle that
//! reports a task's output, or its panic.
//!
//! Every item is at the crate's root too; this module has them where `tokio::task` does, so
//! a port changes only the crate's name:
//!
//! ```
//! use softtimer_async::task::{JoinSet, spawn_blocking, yield_now};
//!
//! softtimer_async::Runtime::new().unwrap().block_on(async {
//!     let mut set = JoinSet::new();
//!     for i in 0..3u64 {
//!         set.spawn(async move {
//!             yield_now().await;
//!             spawn_blocking(move || i * 2).await.unwrap()
//!         });
//!     }
//!     let mut sum = 0;
//!     while let Some(done) = set.join_next().await {
//!         sum += done.unwrap();
//!     }
//!     assert_eq!(sum, 6);
//! });
//! ```

pub use crate::blocking::spawn_blocking;
pub use crate::join_set::JoinSet;
use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};

use async_task::{FallibleTask, Runnable};

use crate::executor::{self, LoopShared};

type Panic = Box<dyn Any + Send + 'static>;

pin_project_lite::pin_project! {
    /// A task's future as the executor runs it: a panic is caught and becomes the task's
    /// output, and the task's waker is kept in its loop's task list while it lives, so that
    /// shutdown can reach it.
    struct TaskFuture<F> {
        #[pin]
        future: F,
        // (slot in the loop's task list, the loop)
        slot: Option<(usize, usize)>,
    }

    impl<F> PinnedDrop for TaskFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            if let Some((slot, owner)) = this.slot
                && let Some(local) = executor::current()
                && Arc::as_ptr(&local.shared) as usize == owner
            {
                let waker = local.tasks.borrow_mut().try_remove(slot);
                drop(waker);
            }
        }
    }
}

impl<F: Future> Future for TaskFuture<F> {
    type Output = Result<F::Output, Panic>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if this.slot.is_none()
            && let Some(local) = executor::current()
        {
            let slot = local.tasks.borrow_mut().insert(cx.waker().clone());
            *this.slot = Some((slot, Arc::as_ptr(&local.shared) as usize));
        }
        let future = this.future;
        match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// Spawns `future` onto `shared`'s loop: it runs on that loop's thread from now on.
pub(crate) fn spawn_onto<F>(shared: &Arc<LoopShared>, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let owner = Arc::clone(shared);
    spawn_with(future, move |r| executor::schedule(&owner, r))
}

/// Spawns `future` as a task that `schedule` queues wherever it runs (a loop, the blocking
/// pool), and schedules it once.
pub(crate) fn spawn_with<F, S>(future: F, schedule: S) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Fn(Runnable) + Send + Sync + 'static,
{
    let future = TaskFuture { future, slot: None };
    let (runnable, task) = async_task::spawn(future, schedule);
    runnable.schedule();
    JoinHandle::new(task.fallible(), cancel_and_wait)
}

/// Spawns a future that is not `Send` onto `shared`'s loop, which must be this thread's.
pub(crate) fn spawn_local_onto<F>(shared: &Arc<LoopShared>, future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let owner = Arc::clone(shared);
    let future = TaskFuture { future, slot: None };
    let (runnable, task) = async_task::spawn_local(future, move |r| executor::schedule(&owner, r));
    runnable.schedule();
    JoinHandle::new(task.fallible(), cancel_at_once)
}

/// Lets the other tasks ready on this loop run before the caller goes on: it is woken at
/// once and queued behind them. A task also yields on its own once it has completed 128
/// socket operations or passed timers in one poll, so a loop over a busy socket needs no
/// `yield_now`.
///
/// ```
/// use std::cell::RefCell;
/// use std::rc::Rc;
/// use softtimer_async::Runtime;
///
/// let rt = Runtime::new().unwrap();
/// let order = rt.block_on(async {
///     let order = Rc::new(RefCell::new(Vec::new()));
///     let (a, b) = (Rc::clone(&order), Rc::clone(&order));
///     let first = softtimer_async::spawn_local(async move {
///         a.borrow_mut().push("first, before yielding");
///         softtimer_async::yield_now().await;
///         a.borrow_mut().push("first, after");
///     });
///     let second = softtimer_async::spawn_local(async move { b.borrow_mut().push("second") });
///     first.await.unwrap();
///     second.await.unwrap();
///     order.take()
/// });
/// assert_eq!(order, ["first, before yielding", "second", "first, after"]);
/// ```
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// Spawns `future` onto the calling thread's loop, where it stays (from one of the runtime's
/// blocking threads, onto its next loop in turn).
///
/// # Panics
///
/// Outside a runtime's threads (use [`Handle::spawn`](crate::Handle::spawn) there).
#[track_caller]
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let shared = executor::context_shared().expect(
        "softtimer_async::spawn called outside a runtime's threads: use Handle::spawn there",
    );
    spawn_onto(&shared, future)
}

/// Spawns a future that need not be `Send` onto the calling thread's loop.
///
/// ```
/// use std::rc::Rc;
/// use softtimer_async::Runtime;
///
/// let rt = Runtime::new().unwrap();
/// let n = rt.block_on(async {
///     let shared = Rc::new(41); // not Send
///     softtimer_async::spawn_local(async move { *shared + 1 }).await.unwrap()
/// });
/// assert_eq!(n, 42);
/// ```
///
/// # Panics
///
/// Outside a runtime thread.
#[track_caller]
pub fn spawn_local<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    // The loop this thread runs: a future that is not `Send` cannot go to another thread's
    // (a `Handle::block_on`'s serving loop included).
    let local = executor::current().expect(
        "softtimer_async::spawn_local called outside a runtime thread (a thread in \
         Handle::block_on runs no loop: use spawn there)",
    );
    spawn_local_onto(&local.shared, future)
}

/// Awaits a spawned task's output.
///
/// Dropping the handle detaches the task (it runs on); [`JoinHandle::abort`] (or an
/// [`AbortHandle`] from [`JoinHandle::abort_handle`]) cancels it. A task that panics does not
/// take its runtime down: its handle reports the panic as a [`JoinError`]. A panic in the
/// destructor of a task's future (dropped when the task is cancelled or has completed)
/// aborts the process, as `async-task`, which runs the tasks, has it; tokio reports that
/// one through the handle too.
///
/// ```
/// use softtimer_async::Runtime;
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let bad = softtimer_async::spawn(async { panic!("boom") });
///     let good = softtimer_async::spawn(async { 7 });
///     let err = bad.await.unwrap_err();
///     assert!(err.is_panic());
///     assert_eq!(good.await.unwrap(), 7);
/// });
/// ```
pub struct JoinHandle<T> {
    /// The task, until an [`AbortHandle`] is made: then it moves to `shared`. Its lock is
    /// taken by the `&self` methods (`abort`, `abort_handle`, `is_finished`, `Debug`); polls
    /// and the drop reach it through `&mut self`, without locking.
    task: Mutex<Slot<T>>,
    shared: OnceLock<Arc<SharedTask<T>>>,
    /// How an abort cancels the task: waiting for its future to be dropped (the tasks of
    /// `spawn`, `Handle::spawn` and `spawn_blocking`), or at once (`spawn_local`'s).
    cancel: Cancel<T>,
}

type TaskOf<T> = FallibleTask<Result<T, Panic>>;

type Cancel<T> = fn(TaskOf<T>) -> Slot<T>;

/// `async-task`'s `cancel()` of a task whose output is `Send`, boxed.
type CancelFuture<T> = Pin<Box<dyn Future<Output = Option<Result<T, Panic>>> + Send>>;

/// Where a handle's task stands. Two words whatever `T` is: what only an abort needs is
/// boxed.
enum Slot<T> {
    /// Running, or finished with its output there to take.
    Task(TaskOf<T>),
    /// Aborted, its future not known to be gone yet.
    Cancelling(Box<Cancelling<T>>),
    /// Ended when the abort came: its output, or `None` for a cancelled task, for the next
    /// poll.
    Ended(Box<Option<Result<T, Panic>>>),
    /// Aborted and the future dropped (or, for a `spawn_local` task, left to its loop's next
    /// pass), or its output taken, or moved to the shared slot.
    Gone,
}

/// An aborted task being cancelled: `async-task`'s `cancel()` of it, which cancels at its
/// first poll and completes once the task's future has been dropped (with the output of a
/// task that had finished), always polled with one waker of ours, so that `async-task`
/// notifies us (for `is_finished`) and we pass it on to whoever polls the handle.
struct Cancelling<T> {
    cancel: CancelFuture<T>,
    notified: Arc<CancelWaker>,
    waker: std::task::Waker,
}

/// The waker of a cancellation: records that the task's future is gone and wakes the task
/// awaiting the handle, if one is.
#[derive(Default)]
struct CancelWaker {
    done: std::sync::atomic::AtomicBool,
    waiter: Mutex<Option<std::task::Waker>>,
}

impl std::task::Wake for CancelWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.done.store(true, std::sync::atomic::Ordering::Release);
        let waiter = self
            .waiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(waiter) = waiter {
            waiter.wake();
        }
    }
}

impl<T> Cancelling<T> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Panic>>> {
        {
            let mut waiter = self
                .notified
                .waiter
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match &*waiter {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *waiter = Some(cx.waker().clone()),
            }
        }
        self.cancel
            .as_mut()
            .poll(&mut Context::from_waker(&self.waker))
    }
}

/// [`Cancel`] for `Send` outputs: the handle completes once the future has been dropped.
fn cancel_and_wait<T: Send + 'static>(task: TaskOf<T>) -> Slot<T> {
    let notified = Arc::new(CancelWaker::default());
    let mut cancelling = Cancelling {
        cancel: Box::pin(task.cancel()),
        waker: std::task::Waker::from(Arc::clone(&notified)),
        notified,
    };
    // The first poll cancels; it may already have the output of a task that finished.
    let first = cancelling
        .cancel
        .as_mut()
        .poll(&mut Context::from_waker(&cancelling.waker));
    match first {
        Poll::Ready(output) => Slot::Ended(Box::new(output)),
        Poll::Pending => Slot::Cancelling(Box::new(cancelling)),
    }
}

/// [`Cancel`] for `spawn_local` tasks, whose output need not be `Send`: cancelled at once,
/// the loop dropping the future at its next pass; the handle does not wait for that (its
/// waiting would not be `Send`), but keeps the output of a task that finished first.
fn cancel_at_once<T>(task: TaskOf<T>) -> Slot<T> {
    let mut cancel = std::pin::pin!(task.cancel());
    match cancel
        .as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()))
    {
        Poll::Ready(output) => Slot::Ended(Box::new(output)),
        Poll::Pending => Slot::Gone,
    }
}

impl<T> Slot<T> {
    /// Aborts the task here if it has not finished (a finished one keeps its output). The
    /// cancel's first poll runs under the slot's lock; it may schedule the task, which only
    /// queues it.
    fn abort(&mut self, cancel: Cancel<T>) {
        if let Slot::Task(task) = self
            && !task.is_finished()
            && let Slot::Task(task) = std::mem::replace(self, Slot::Gone)
        {
            *self = cancel(task);
        }
    }

    fn is_finished(&self) -> bool {
        match self {
            Slot::Task(task) => task.is_finished(),
            Slot::Cancelling(c) => c.notified.done.load(std::sync::atomic::Ordering::Acquire),
            Slot::Ended(_) | Slot::Gone => true,
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, JoinError>> {
        let output = match self {
            Slot::Task(task) => std::task::ready!(Pin::new(task).poll(cx)),
            Slot::Cancelling(c) => {
                let output = std::task::ready!(c.poll(cx));
                *self = Slot::Gone;
                output
            }
            Slot::Ended(output) => {
                let output = output.take();
                *self = Slot::Gone;
                output
            }
            Slot::Gone => None,
        };
        Poll::Ready(match output {
            Some(Ok(value)) => Ok(value),
            Some(Err(panic)) => Err(JoinError::panic(panic)),
            None => Err(JoinError::CANCELLED),
        })
    }

    /// Lets a running task run on without this handle.
    fn detach(&mut self) {
        if let Slot::Task(task) = std::mem::replace(self, Slot::Gone) {
            task.detach();
        }
    }
}

/// A task that an [`AbortHandle`] can reach: where the task moves when the first one is
/// made. The last of its holders to go detaches it (a task runs on when its handles are
/// dropped).
struct SharedTask<T> {
    slot: Mutex<Slot<T>>,
    cancel: Cancel<T>,
}

impl<T> SharedTask<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot<T>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T> Drop for SharedTask<T> {
    fn drop(&mut self) {
        self.slot
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .detach();
    }
}

impl<T> JoinHandle<T> {
    fn new(task: TaskOf<T>, cancel: Cancel<T>) -> Self {
        JoinHandle {
            task: Mutex::new(Slot::Task(task)),
            shared: OnceLock::new(),
            cancel,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot<T>> {
        self.task.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Cancels the task: its future is dropped on its own loop's thread, the next time that
    /// loop runs its tasks (for loop 0, inside `block_on`; or when the runtime is dropped),
    /// without being polled again. Awaiting the handle then gives a cancelled [`JoinError`]
    /// once the future has been dropped, so what it captured (a borrow, a socket, a port) is
    /// free by then; so that await needs the task's loop to run. For a task of
    /// [`spawn_local`] the handle completes at once and [`is_finished`](Self::is_finished)
    /// says so, the future being dropped at the loop's next pass. A task that has already
    /// finished keeps its output. Blocking work ([`spawn_blocking`])
    /// is cancelled only while it waits for a thread: it then never runs, and awaiting the
    /// handle returns when a pool thread takes it off the queue (behind busy threads, when
    /// one frees up) or the pool shuts down; a closure that has started runs to its end,
    /// awaiting the handle waits for it, and its output is dropped (possibly a moment after
    /// the handle has returned).
    ///
    /// ```
    /// use std::time::Duration;
    /// use softtimer_async::{Runtime, time};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let forever = softtimer_async::spawn(time::sleep(Duration::from_secs(3600)));
    ///     forever.abort();
    ///     assert!(forever.await.unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn abort(&self) {
        // Under the task's own lock, `abort_handle` cannot move it meanwhile.
        let mut local = self.lock();
        local.abort(self.cancel);
        drop(local);
        if let Some(shared) = self.shared.get() {
            shared.lock().abort(shared.cancel);
        }
    }

    /// Whether the task has finished: completed, panicked, or cancelled with its future
    /// dropped (for an aborted task of [`spawn_local`], at once: its future is dropped at
    /// the loop's next pass, as [`abort`](Self::abort) says).
    pub fn is_finished(&self) -> bool {
        let local = self.lock();
        match self.shared.get() {
            Some(shared) => {
                drop(local);
                shared.lock().is_finished()
            }
            None => local.is_finished(),
        }
    }
}

impl<T: Send + 'static> JoinHandle<T> {
    /// A handle that cancels the task without owning its output: to keep beside the
    /// `JoinHandle` (or after handing that away), and to clone. Making the first one moves
    /// the task into an allocation the handles share; a task nobody asks one for has no
    /// such allocation. (A task that finishes after its `JoinHandle` is dropped keeps its
    /// output until the last `AbortHandle` goes.)
    pub fn abort_handle(&self) -> AbortHandle {
        let mut local = self.lock();
        let shared = self.shared.get_or_init(|| {
            Arc::new(SharedTask {
                slot: Mutex::new(std::mem::replace(&mut *local, Slot::Gone)),
                cancel: self.cancel,
            })
        });
        drop(local);
        AbortHandle {
            task: Arc::clone(shared) as Arc<dyn Abortable>,
        }
    }
}

/// What an [`AbortHandle`] does to its task, whatever the task's output type.
trait Abortable: Send + Sync {
    fn abort(&self);
    fn is_finished(&self) -> bool;
}

impl<T: Send> Abortable for SharedTask<T> {
    fn abort(&self) {
        self.lock().abort(self.cancel);
    }

    fn is_finished(&self) -> bool {
        self.lock().is_finished()
    }
}

/// Cancels a task from anywhere, without owning its output ([`JoinHandle::abort_handle`]).
///
/// ```
/// use std::time::Duration;
/// use softtimer_async::{Runtime, time};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let task = softtimer_async::spawn(time::sleep(Duration::from_secs(3600)));
///     let stop = task.abort_handle();
///     // Another task (or thread) can stop it.
///     softtimer_async::spawn(async move { stop.abort() });
///     assert!(task.await.unwrap_err().is_cancelled());
/// });
/// ```
#[derive(Clone)]
pub struct AbortHandle {
    task: Arc<dyn Abortable>,
}

impl AbortHandle {
    /// Cancels the task, as [`JoinHandle::abort`] does.
    pub fn abort(&self) {
        self.task.abort();
    }

    /// Whether the task has finished, as [`JoinHandle::is_finished`] says.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl std::fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbortHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

// The output is only ever moved out, never pinned.
impl<T> Unpin for JoinHandle<T> {}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.shared.get() {
            Some(shared) => shared.lock().poll(cx),
            None => this
                .task
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .poll(cx),
        }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        self.task
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .detach();
        // Once shared, the last holder of the shared task detaches it; the output of one
        // that has finished is nobody's now, and goes at once.
        if let Some(shared) = self.shared.get() {
            let mut slot = shared.lock();
            let finished = if slot.is_finished() {
                std::mem::replace(&mut *slot, Slot::Gone)
            } else {
                Slot::Gone
            };
            drop(slot);
            drop(finished);
        }
    }
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Why a task gave no output: it panicked, or it was cancelled. `Send + Sync`, so it goes
/// into any error box.
pub struct JoinError {
    repr: Repr,
}

enum Repr {
    Panic {
        message: Option<String>,
        payload: std::sync::Mutex<Panic>,
    },
    Cancelled,
}

impl JoinError {
    pub(crate) const CANCELLED: JoinError = JoinError {
        repr: Repr::Cancelled,
    };

    fn panic(payload: Panic) -> JoinError {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned());
        JoinError {
            repr: Repr::Panic {
                message,
                payload: std::sync::Mutex::new(payload),
            },
        }
    }

    /// Whether the task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self.repr, Repr::Panic { .. })
    }

    /// Whether the task was cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.repr, Repr::Cancelled)
    }

    /// The panic's message, when it was a string.
    pub fn panic_message(&self) -> Option<&str> {
        match &self.repr {
            Repr::Panic { message, .. } => message.as_deref(),
            Repr::Cancelled => None,
        }
    }

    /// What the task panicked with, to resume the panic with (as tokio's).
    ///
    /// ```
    /// use softtimer_async::Runtime;
    ///
    /// let rt = Runtime::new().unwrap();
    /// let err = rt.block_on(rt.spawn(async { panic!("boom") })).unwrap_err();
    /// let resumed = std::panic::catch_unwind(|| std::panic::resume_unwind(err.into_panic()));
    /// assert_eq!(resumed.unwrap_err().downcast_ref::<&str>(), Some(&"boom"));
    /// ```
    ///
    /// # Panics
    ///
    /// If the task was cancelled; [`try_into_panic`](Self::try_into_panic) does not.
    pub fn into_panic(self) -> Panic {
        self.try_into_panic()
            .expect("JoinError::into_panic: the task was cancelled, it did not panic")
    }

    /// What the task panicked with, or the error back if it was cancelled.
    pub fn try_into_panic(self) -> Result<Panic, JoinError> {
        match self.repr {
            Repr::Panic { payload, .. } => Ok(payload
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)),
            Repr::Cancelled => Err(self),
        }
    }
}

/// A task's error as an I/O error (`Other`, the [`JoinError`] its source), as tokio's, so
/// that `handle.await?` works in a function returning `io::Result`.
impl From<JoinError> for std::io::Error {
    fn from(error: JoinError) -> std::io::Error {
        std::io::Error::other(error)
    }
}

impl std::fmt::Debug for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.repr {
            Repr::Panic { message, .. } => write!(f, "JoinError::Panic({message:?})"),
            Repr::Cancelled => write!(f, "JoinError::Cancelled"),
        }
    }
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.repr {
            Repr::Panic {
                message: Some(msg), ..
            } => write!(f, "task panicked: {msg}"),
            Repr::Panic { message: None, .. } => write!(f, "task panicked"),
            Repr::Cancelled => write!(f, "task was cancelled"),
        }
    }
}

impl std::error::Error for JoinError {}
