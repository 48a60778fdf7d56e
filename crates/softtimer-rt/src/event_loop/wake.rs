//! Reaching a loop from other threads: the stop request and the wake, through the loop's
//! notification eventfd, written only when the loop is blocked (or about to be).

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(doc)]
use crate::EventLoop;

/// What a loop shares with its stop handles and wakers.
pub(crate) struct StopInner {
    /// A stop was requested.
    pub flag: AtomicBool,
    /// The facility's: timer signals fire nothing while it is set.
    pub signals_paused: Arc<AtomicBool>,
    /// The loop's notification eventfd (in its epoll set): stop requests and wakes write it.
    pub fd: OwnedFd,
    /// A [`LoopWaker`] woke the loop and [`EventLoop::take_wake`] has not seen it yet.
    pub woken: AtomicBool,
    /// The loop is blocked in (or about to enter) `epoll_wait` and must be written to.
    pub parked: AtomicBool,
}

impl StopInner {
    /// Asks the loop to stop; timer signals fire nothing from now on.
    pub(crate) fn request(&self) {
        self.signals_paused.store(true, Ordering::Release);
        self.flag.store(true, Ordering::Release);
    }
}

/// Stops a running [`EventLoop`] from any thread.
#[derive(Clone)]
pub struct StopHandle(pub(super) Arc<StopInner>);

impl StopHandle {
    /// Asks the loop to return from [`EventLoop::run`] (promptly, even if it is blocked).
    pub fn stop(&self) {
        self.0.request();
        let _ = rustix::io::write(&self.0.fd, &1u64.to_ne_bytes());
    }
}

/// Wakes an [`EventLoop`] from any thread: the loop's side of an async runtime's cross-thread
/// waker. A wake sets a flag that [`EventLoop::take_wake`] consumes, and writes the loop's
/// eventfd only when the loop is blocked in the kernel (or about to be), so that waking a
/// running or spinning loop costs no system call. A spinning [`EventLoop::park`] stops at the
/// flag; a blocked one returns from `epoll_wait`, a trigger state.
///
/// ```
/// use softtimer_rt::{EventLoop, LoopConfig};
///
/// let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
/// let waker = ev.waker();
/// std::thread::spawn(move || waker.wake());
/// // Nothing is pending, so the park blocks until the wake arrives.
/// while !ev.take_wake() {
///     ev.park(|_, _| {}).unwrap();
/// }
/// ```
#[derive(Clone)]
pub struct LoopWaker(pub(super) Arc<StopInner>);

impl LoopWaker {
    /// Wakes the loop (see the type's documentation).
    pub fn wake(&self) {
        let inner = &self.0;
        // Pairs with the loop's store of `parked` then load of `woken` before it blocks: one
        // side sees the other's store, so a loop about to block never misses a wake.
        inner.woken.store(true, Ordering::SeqCst);
        if inner.parked.swap(false, Ordering::SeqCst) {
            let _ = rustix::io::write(&inner.fd, &1u64.to_ne_bytes());
        }
    }
}

impl std::fmt::Debug for LoopWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopWaker").finish_non_exhaustive()
    }
}
