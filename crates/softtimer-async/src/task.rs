//! Tasks: spawning onto a loop (with `async-task`'s tasks and wakers), and the handle that
//! reports a task's output, or its panic.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
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
    JoinHandle::new(task.fallible())
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
    JoinHandle::new(task.fallible())
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
/// Dropping the handle detaches the task (it runs on); [`JoinHandle::abort`] cancels it. A
/// task that panics does not take its runtime down: its handle reports the panic as a
/// [`JoinError`].
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
    task: Option<FallibleTask<Result<T, Panic>>>,
}

impl<T> JoinHandle<T> {
    fn new(task: FallibleTask<Result<T, Panic>>) -> Self {
        JoinHandle { task: Some(task) }
    }

    /// Cancels the task: its future is dropped on its thread (at once if it is not running).
    /// Blocking work ([`spawn_blocking`](crate::spawn_blocking)) is cancelled only while it
    /// waits for a thread: a closure that has started runs to its end.
    pub fn abort(mut self) {
        drop(self.task.take());
    }

    /// Whether the task has finished (completed, panicked or been cancelled).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(FallibleTask::is_finished)
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(task) = self.task.as_mut() else {
            return Poll::Ready(Err(JoinError::CANCELLED));
        };
        Pin::new(task).poll(cx).map(|out| match out {
            Some(Ok(value)) => Ok(value),
            Some(Err(panic)) => Err(JoinError::panic(panic)),
            None => Err(JoinError::CANCELLED),
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
