//! Tasks: spawning onto a loop (with `async-task`'s tasks and wakers), and the handle that
//! reports a task's output, or its panic.

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
    /// The task, until an [`AbortHandle`] is made: then it moves to `shared`. A lock only
    /// `abort` and `abort_handle` take (`&self`); polls and the drop reach it through
    /// `&mut self`, without locking.
    task: Mutex<Option<TaskOf<T>>>,
    shared: OnceLock<Arc<SharedTask<T>>>,
}

type TaskOf<T> = FallibleTask<Result<T, Panic>>;

/// A task that an [`AbortHandle`] can reach: where the task moves when the first one is
/// made. The last of its holders to go detaches it (a task runs on when its handles are
/// dropped).
struct SharedTask<T>(Mutex<Option<TaskOf<T>>>);

impl<T> Drop for SharedTask<T> {
    fn drop(&mut self) {
        detach(&mut self.0);
    }
}

fn detach<T>(task: &mut Mutex<Option<TaskOf<T>>>) {
    let task = task
        .get_mut()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(task) = task {
        task.detach();
    }
}

/// Cancels the task in `slot` unless it has finished (then its output stays for the
/// handle): dropping an `async-task` task that is not finished cancels it, and its future is
/// dropped where its loop runs it next (it is scheduled for that).
fn abort_in<T>(slot: &Mutex<Option<TaskOf<T>>>) {
    let cancelled = take_unfinished(&mut slot.lock().unwrap_or_else(PoisonError::into_inner));
    // Dropped unlocked: it may schedule the task.
    drop(cancelled);
}

/// The task in `slot` if it has not finished, for the caller to drop (and so cancel).
fn take_unfinished<T>(slot: &mut Option<TaskOf<T>>) -> Option<TaskOf<T>> {
    match slot {
        Some(t) if !t.is_finished() => slot.take(),
        _ => None,
    }
}

fn finished_in<T>(slot: &Mutex<Option<TaskOf<T>>>) -> bool {
    let task = slot.lock().unwrap_or_else(PoisonError::into_inner);
    task.as_ref().is_none_or(FallibleTask::is_finished)
}

impl<T> JoinHandle<T> {
    fn new(task: TaskOf<T>) -> Self {
        JoinHandle {
            task: Mutex::new(Some(task)),
            shared: OnceLock::new(),
        }
    }

    /// Cancels the task: its future is dropped on its own loop's thread, the next time that
    /// loop runs its tasks (for loop 0, inside `block_on`), without being polled again, and
    /// awaiting the handle gives a cancelled [`JoinError`]. A task that has already finished
    /// keeps its output. Blocking work ([`spawn_blocking`](crate::spawn_blocking)) is
    /// cancelled only while it waits for a thread (it then never runs): a closure that has
    /// started runs to its end, and its output is dropped.
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
        let mut local = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        let cancelled = take_unfinished(&mut local);
        drop(local);
        // Dropped unlocked: it may schedule the task.
        drop(cancelled);
        if let Some(shared) = self.shared.get() {
            abort_in(&shared.0);
        }
    }

    /// Whether the task has finished (completed, panicked or been cancelled).
    pub fn is_finished(&self) -> bool {
        let local = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        match self.shared.get() {
            Some(shared) => {
                drop(local);
                finished_in(&shared.0)
            }
            None => local.as_ref().is_none_or(FallibleTask::is_finished),
        }
    }

    /// The task's slot for a poll or the drop: shared once an `AbortHandle` exists.
    fn slot_mut(&mut self) -> SlotMut<'_, T> {
        match self.shared.get() {
            Some(shared) => {
                SlotMut::Shared(shared.0.lock().unwrap_or_else(PoisonError::into_inner))
            }
            None => SlotMut::Own(self.task.get_mut().unwrap_or_else(PoisonError::into_inner)),
        }
    }
}

enum SlotMut<'a, T> {
    Own(&'a mut Option<TaskOf<T>>),
    Shared(std::sync::MutexGuard<'a, Option<TaskOf<T>>>),
}

impl<T> SlotMut<'_, T> {
    fn get(&mut self) -> &mut Option<TaskOf<T>> {
        match self {
            SlotMut::Own(task) => task,
            SlotMut::Shared(task) => task,
        }
    }
}

impl<T: Send + 'static> JoinHandle<T> {
    /// A handle that cancels the task without owning its output: to keep beside the
    /// `JoinHandle` (or after handing that away), and to clone. Making the first one moves
    /// the task into an allocation the handles share; a task nobody asks one for costs
    /// nothing for it.
    pub fn abort_handle(&self) -> AbortHandle {
        let mut local = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        let shared = self
            .shared
            .get_or_init(|| Arc::new(SharedTask(Mutex::new(local.take()))));
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
        abort_in(&self.0);
    }

    fn is_finished(&self) -> bool {
        finished_in(&self.0)
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

    /// Whether the task has finished (completed, panicked or been cancelled).
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

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.slot_mut();
        let Some(task) = slot.get().as_mut() else {
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
        // Once shared, the last holder of the shared task detaches it.
        if self.shared.get().is_none() {
            detach(&mut self.task);
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
