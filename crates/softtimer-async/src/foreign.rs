//! [`Handle::block_on`](crate::Handle::block_on): a future run to completion on a thread that
//! runs no loop (a blocking task's, a thread of the program's own), served by one of the
//! runtime's loops from its thread. The future's timers are armed on that loop's facility and
//! its sockets registered in that loop's epoll set (both safe from any thread), what it spawns
//! goes to that loop, and the calling thread sleeps between the wakes the loop sends it.

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use crate::executor::LoopShared;

thread_local! {
    /// The loop that serves this thread's `Handle::block_on`, while it runs.
    static FOREIGN: RefCell<Option<Arc<LoopShared>>> = const { RefCell::new(None) };
}

/// The loop that serves this thread's `Handle::block_on`, if it is in one.
pub(crate) fn shared() -> Option<Arc<LoopShared>> {
    FOREIGN.try_with(|f| f.borrow().clone()).ok().flatten()
}

/// Runs `future` to completion on this thread (which runs no loop and is in no runtime's
/// context: the caller checks) in `shared`'s context.
pub(crate) fn block_on<F: Future>(shared: Arc<LoopShared>, future: F) -> F::Output {
    let _context = ForeignContext::enter(shared);
    let notify = Arc::new(Notify {
        thread: std::thread::current(),
        woken: AtomicBool::new(false),
    });
    let waker = Waker::from(Arc::clone(&notify));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        // A wake that came during the poll is not lost: the flag stays set for this look.
        while !notify.woken.swap(false, Ordering::Acquire) {
            std::thread::park();
        }
    }
}

/// Wakes the thread in `block_on`.
struct Notify {
    thread: Thread,
    woken: AtomicBool,
}

impl Wake for Notify {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.woken.swap(true, Ordering::Release) {
            self.thread.unpark();
        }
    }
}

/// This thread in a loop's context for as long as it lives (a panic of the future unwinding
/// through `block_on` included).
struct ForeignContext(());

impl ForeignContext {
    fn enter(shared: Arc<LoopShared>) -> ForeignContext {
        FOREIGN.with(|f| *f.borrow_mut() = Some(shared));
        ForeignContext(())
    }
}

impl Drop for ForeignContext {
    fn drop(&mut self) {
        let shared = FOREIGN.try_with(|f| f.borrow_mut().take()).ok().flatten();
        drop(shared);
    }
}
