//! Ctrl-C and `SIGTERM` for the programs that run until stopped (`sink`, `quic server`,
//! `path` and its command): while such a program runs it says how to end its run early
//! ([`stop_on_interrupt`]), and the first signal does that, so the program prints its report
//! and writes its JSON instead of losing what it measured. A second signal, or one that comes
//! while no program can stop early, ends the process at once (the binary's handler).

use std::sync::{Mutex, PoisonError};

type Stop = Box<dyn FnOnce() + Send>;

/// How to stop the program running now, if it can stop early.
static ON_INTERRUPT: Mutex<Option<Stop>> = Mutex::new(None);

/// While the guard lives, the first interrupt calls `stop` (once) instead of ending the
/// process; `stop` must make the program's run return soon (set a flag its loop reads, stop
/// its event loop, close its endpoint or listener).
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use softtimers_tools::interrupt;
///
/// let stopped = Arc::new(AtomicBool::new(false));
/// let flag = Arc::clone(&stopped);
/// let _guard = interrupt::stop_on_interrupt(move || flag.store(true, Ordering::Relaxed));
/// // What the binary's signal handler calls:
/// assert!(interrupt::interrupt());
/// assert!(stopped.load(Ordering::Relaxed));
/// // The second signal ends the process.
/// assert!(!interrupt::interrupt());
/// ```
#[must_use = "the program stops early only while the guard lives"]
pub fn stop_on_interrupt(stop: impl FnOnce() + Send + 'static) -> InterruptGuard {
    *ON_INTERRUPT.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(stop));
    InterruptGuard(())
}

/// Ends [`stop_on_interrupt`]'s say when dropped: later signals end the process.
#[derive(Debug)]
pub struct InterruptGuard(());

impl Drop for InterruptGuard {
    fn drop(&mut self) {
        ON_INTERRUPT
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// For the binary's signal handler: stops the running program if it can stop early and has
/// not been asked before (then `true`: let it finish its report), or `false` (end the process
/// now).
pub fn interrupt() -> bool {
    let stop = ON_INTERRUPT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    match stop {
        Some(stop) => {
            stop();
            true
        }
        None => false,
    }
}
