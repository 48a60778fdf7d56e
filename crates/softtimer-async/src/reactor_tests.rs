//! The reactor's unit tests: waiter lists, wait futures and their scopes.

use super::*;
use std::task::Wake;

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// A source not ready for reading, as the loop leaves one after a `WouldBlock`.
fn quiet_source() -> Arc<IoSource> {
    Arc::new(IoSource::default())
}

fn entries(source: &IoSource, dir: Direction) -> usize {
    lock(&source.waiters)[dir as usize].waiters.len()
}

/// A future's entry is renewed, not repeated, when it is polled again; taken by a
/// readiness change and made afresh by the next poll; and withdrawn when the future is
/// dropped, while a `poll_*` caller's entry stays.
#[test]
fn a_wait_fn_renews_and_withdraws_its_own_entry_only() {
    let source = quiet_source();
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut wait = wait_fn(|cx| source.poll_ready(Direction::Read, cx));
    assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
    assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
    assert_eq!(entries(&source, Direction::Read), 1);
    // Taken and woken, as by a readiness change that a call then found used up.
    source
        .take_locked(&mut lock(&source.waiters), Direction::Read)
        .wake();
    assert_eq!(entries(&source, Direction::Read), 0);
    assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
    assert_eq!(entries(&source, Direction::Read), 1);
    // A poll_* caller of another task waits beside it.
    let other = Waker::from(Arc::new(Noop));
    assert!(
        source
            .poll_ready(Direction::Read, &mut Context::from_waker(&other))
            .is_pending()
    );
    assert_eq!(entries(&source, Direction::Read), 2);
    drop(wait);
    assert_eq!(entries(&source, Direction::Read), 1);
}

/// A waiter alone is taken without its list's allocation, which the next wait reuses;
/// several are all taken, each woken once.
#[test]
fn one_waiter_is_taken_without_giving_up_the_lists_allocation() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&count));
    let mut waiters = Waiters::default();
    waiters.enter(1, &waker);
    let capacity = waiters.futures.capacity();
    assert!(capacity > 0);
    let taken = waiters.take();
    assert_eq!((taken.len(), waiters.len()), (1, 0));
    assert_eq!(
        waiters.futures.capacity(),
        capacity,
        "kept for the next wait"
    );
    taken.wake();
    // A poll_* waker, two futures and two more poll_* wakers of other tasks: all five
    // taken and woken.
    waiters.add(&waker);
    waiters.enter(2, &waker);
    waiters.enter(3, &waker);
    for _ in 0..2 {
        waiters.add(&Waker::from(Arc::clone(&count)));
    }
    // `add` keeps one waker per task: the last two wake the same task as the first.
    assert_eq!(waiters.len(), 3);
    let taken = waiters.take();
    assert_eq!((taken.len(), waiters.len()), (3, 0));
    taken.wake();
    assert_eq!(count.0.load(Ordering::Relaxed), 4);
    // A future's entry and another task's poll_* waker: the entry joins `first`'s
    // neighbour without moving its list.
    let other = Arc::new(Count(AtomicUsize::new(0)));
    waiters.add(&Waker::from(Arc::clone(&other)));
    waiters.enter(4, &waker);
    let capacity = waiters.futures.capacity();
    let taken = waiters.take();
    assert_eq!(taken.len(), 2);
    assert_eq!(waiters.futures.capacity(), capacity);
    taken.wake();
    assert_eq!(count.0.load(Ordering::Relaxed), 5);
    assert_eq!(other.0.load(Ordering::Relaxed), 1);
}

/// A poll that panics gives the thread's scope back: a `poll_*` caller after it is not
/// taken for the panicked future.
#[test]
fn a_panicking_poll_closes_its_scope() {
    let source = quiet_source();
    let waker = Waker::from(Arc::new(Noop));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut wait = wait_fn(|cx| -> Poll<()> {
            let _ = source.poll_ready(Direction::Read, cx);
            panic!("a poll that panics");
        });
        let _ = Pin::new(&mut wait).poll(&mut Context::from_waker(&waker));
    }));
    assert!(panicked.is_err());
    // The dropped future withdrew its entry as it unwound.
    assert_eq!(entries(&source, Direction::Read), 0);
    assert!(SCOPE.with(|scope| scope.borrow().is_none()));
    let _ = source.poll_ready(Direction::Read, &mut Context::from_waker(&waker));
    assert_eq!(entries(&source, Direction::Read), 1);
}
