//! Tasks: spawning onto a loop (with `async-task`'s tasks and wakers), and the handle that
//! reports a task's output, or its panic.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use async_task::{FallibleTask, Runnable};

use crate::executor::{self, LoopShared};

type Panic = Box<dyn Any + Send + 'static>;

/// Why a task ended without its output.
enum Failure {
    Panic(Panic),
    Aborted,
}

/// What a task and the handles that may abort it share.
struct AbortState {
    /// Set by `abort`: the task's next poll ends it instead of polling its future.
    aborted: AtomicBool,
    /// Set when the task's future has been dropped (completed, panicked or aborted).
    finished: AtomicBool,
    /// The task's waker, from its first poll until its future is dropped (then taken, so
    /// that the task and this state do not keep each other alive).
    waker: Mutex<Option<Waker>>,
}

impl AbortState {
    fn new() -> Arc<AbortState> {
        Arc::new(AbortState {
            aborted: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            waker: Mutex::new(None),
        })
    }

    fn abort(&self) {
        // Pairs with the task's store of its waker then load of the flag: either the task's
        // next check sees the flag, or this sees the waker and wakes it for that check.
        self.aborted.store(true, Ordering::SeqCst);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Puts `waker` in (or takes it out, for `None`) and returns what was there, to be
    /// dropped by the caller once the lock is released: dropping a task's last waker may
    /// run its schedule function.
    fn replace_waker(&self, waker: Option<Waker>) -> Option<Waker> {
        let mut slot = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *slot, waker)
    }
}

/// Marks its task finished when dropped: a field after the task's future, so that it is
/// dropped after it.
struct Finished(Arc<AbortState>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.finished.store(true, Ordering::Release);
    }
}

pin_project_lite::pin_project! {
    /// A task's future as the executor runs it: a panic is caught and becomes the task's
    /// output, an abort ends it at its next poll, and the task's waker is kept in its loop's
    /// task list while it lives, so that shutdown can reach it.
    struct TaskFuture<F> {
        #[pin]
        future: F,
        // (slot in the loop's task list, the loop)
        slot: Option<(usize, usize)>,
        // Whether the abort state holds this task's waker.
        waker_shared: bool,
        // The state the task's handles abort it through; after `future`, so that the task
        // counts as finished only once its future has been dropped.
        state: Finished,
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
            if this.waker_shared {
                drop(this.state.0.replace_waker(None));
            }
        }
    }
}

impl<F: Future> Future for TaskFuture<F> {
    type Output = Result<F::Output, Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let abort = &this.state.0;
        if abort.aborted.load(Ordering::SeqCst) {
            return Poll::Ready(Err(Failure::Aborted));
        }
        if this.slot.is_none()
            && let Some(local) = executor::current()
        {
            let slot = local.tasks.borrow_mut().insert(cx.waker().clone());
            *this.slot = Some((slot, Arc::as_ptr(&local.shared) as usize));
        }
        if !*this.waker_shared {
            // A task's waker stays the same for its life (async-task's), so once is enough;
            // then the flag again, for an abort that came before the waker was there.
            drop(abort.replace_waker(Some(cx.waker().clone())));
            *this.waker_shared = true;
            if abort.aborted.load(Ordering::SeqCst) {
                return Poll::Ready(Err(Failure::Aborted));
            }
        }
        let future = this.future;
        match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(panic) => Poll::Ready(Err(Failure::Panic(panic))),
        }
    }
}

/// `future` as a task's future, and the state its handles abort it through.
fn task_future<F>(future: F) -> (TaskFuture<F>, Arc<AbortState>) {
    let abort = AbortState::new();
    let task = TaskFuture {
        future,
        slot: None,
        waker_shared: false,
        state: Finished(Arc::clone(&abort)),
    };
    (task, abort)
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
    let (future, abort) = task_future(future);
    let (runnable, task) = async_task::spawn(future, schedule);
    runnable.schedule();
    JoinHandle::new(task.fallible(), abort)
}

/// Spawns a future that is not `Send` onto `shared`'s loop, which must be this thread's.
pub(crate) fn spawn_local_onto<F>(shared: &Arc<LoopShared>, future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let owner = Arc::clone(shared);
    let (future, abort) = task_future(future);
    let (runnable, task) = async_task::spawn_local(future, move |r| executor::schedule(&owner, r));
    runnable.schedule();
    JoinHandle::new(task.fallible(), abort)
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

/// Spawns `future` onto the calling thread's loop, where it stays.
///
/// # Panics
///
/// Outside a runtime thread (use [`Handle::spawn`](crate::Handle::spawn) there).
#[track_caller]
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let shared = executor::current_shared()
        .expect("softtimer_async::spawn called outside a runtime thread: use Handle::spawn there");
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
    let shared = executor::current_shared()
        .expect("softtimer_async::spawn_local called outside a runtime thread");
    spawn_local_onto(&shared, future)
}

/// Awaits a spawned task's output.
///
/// Dropping the handle detaches the task (it runs on); [`JoinHandle::abort`] (or an
/// [`AbortHandle`] from [`JoinHandle::abort_handle`]) cancels it. A task that panics does not
/// take its runtime down: its handle reports the panic as a [`JoinError`].
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
    task: Option<FallibleTask<Result<T, Failure>>>,
    abort: Arc<AbortState>,
}

impl<T> JoinHandle<T> {
    fn new(task: FallibleTask<Result<T, Failure>>, abort: Arc<AbortState>) -> Self {
        JoinHandle {
            task: Some(task),
            abort,
        }
    }

    /// Cancels the task: it is woken, and instead of polling its future again its loop drops
    /// it, on the task's own thread (for loop 0, the thread of `block_on`, when it next runs
    /// its tasks there); awaiting the handle then gives a cancelled [`JoinError`]. A task that
    /// has already finished keeps its output. Blocking work
    /// ([`spawn_blocking`](crate::spawn_blocking)) is cancelled only while it waits for a
    /// thread: a closure that has started runs to its end, and its output is delivered; one
    /// still queued (every thread of a pool at its
    /// [`max_blocking_threads`](crate::Builder::max_blocking_threads) busy) is dropped without
    /// running when a thread frees up to take it, and the handle resolves then.
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
        self.abort.abort();
    }

    /// A handle that cancels the task without owning its output: to keep beside the
    /// `JoinHandle` (or after handing that away), and to clone.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            state: Arc::clone(&self.abort),
        }
    }

    /// Whether the task has finished (completed, panicked or been cancelled).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(FallibleTask::is_finished)
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
    state: Arc<AbortState>,
}

impl AbortHandle {
    /// Cancels the task, as [`JoinHandle::abort`] does.
    pub fn abort(&self) {
        self.state.abort();
    }

    /// Whether the task's future is gone: it completed, panicked or was cancelled. (Its
    /// output may still be on its way to the `JoinHandle`, whose own `is_finished` says when
    /// it is there.)
    pub fn is_finished(&self) -> bool {
        self.state.finished.load(Ordering::Acquire)
    }
}

impl std::fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbortHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let task = self
            .task
            .as_mut()
            .expect("a JoinHandle's task is taken only by its drop");
        Pin::new(task).poll(cx).map(|out| match out {
            Some(Ok(value)) => Ok(value),
            Some(Err(Failure::Panic(panic))) => Err(JoinError::panic(panic)),
            Some(Err(Failure::Aborted)) | None => Err(JoinError::CANCELLED),
        })
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.detach();
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

    /// What the task panicked with (to resume the panic with); `None` if it was cancelled.
    pub fn into_panic(self) -> Option<Panic> {
        match self.repr {
            Repr::Panic { payload, .. } => Some(
                payload
                    .into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            ),
            Repr::Cancelled => None,
        }
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
