//! The timer-signal baseline: a per-thread POSIX timer whose signal interrupts the loop
//! thread wherever it is, and whose handler fires due events right there, in signal context.
//! It is the closest user-space analogue of a hardware timer interrupt, and it is what
//! soft timers are measured against.
//!
//! The signal handler finds the facility through a thread-local pointer that the loop
//! thread sets while the timer runs and clears (after deleting the timer) before the
//! facility can go away.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use softtimer::{Clock, TriggerSource};

use crate::shared::Shared;

/// What the signal handler calls on the interrupted thread.
pub(crate) trait SignalTarget {
    fn on_signal(&self);
}

impl<E, C: Clock> SignalTarget for Shared<E, C> {
    fn on_signal(&self) {
        // The loop is stopping or stopped (see `Shared::signals_paused`).
        if self.signals_paused.load(Ordering::Relaxed) {
            return;
        }
        // `try_lock`: the signal may have interrupted this very thread inside the facility;
        // waiting for the lock would wait forever. A busy facility is a missed interrupt,
        // counted by the atomic below (the counters live under the very lock we failed to
        // take).
        match self.try_lock() {
            Some(mut locked) => {
                locked.counters.timer_expirations += 1;
                locked.counters.signal_busy += self.helper.signal_busy.swap(0, Ordering::Relaxed);
                let now = self.clock.now();
                self.fire_locked(&mut locked, now, TriggerSource::Timer);
            }
            None => {
                self.helper.signal_busy.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

thread_local! {
    static TARGET: Cell<Option<*const dyn SignalTarget>> = const { Cell::new(None) };
}

/// Makes `shared` the target of timer signals delivered to the calling thread, until
/// [`clear_target`]. The caller keeps `shared` alive until then. `false` (and nothing
/// changes) if the thread already has a target: one signal-mode loop per thread.
pub(crate) fn set_target<E: Send + 'static, C: Clock + 'static>(
    shared: &Arc<Shared<E, C>>,
) -> bool {
    let concrete: *const Shared<E, C> = Arc::as_ptr(shared);
    let ptr: *const dyn SignalTarget = concrete;
    TARGET.with(|t| {
        if t.get().is_some() {
            return false;
        }
        t.set(Some(ptr));
        true
    })
}

/// Stops timer signals on the calling thread from touching any facility.
pub(crate) fn clear_target() {
    TARGET.with(|t| t.set(None));
}

pub(crate) extern "C" fn handle_signal(_signo: i32) {
    // The thread-local is a const-initialised `Cell` without a destructor, so reading it
    // needs no allocation or lock and is safe in a signal handler.
    if let Some(ptr) = TARGET.with(Cell::get) {
        // SAFETY: `set_target` stored a pointer to a `Shared` that the loop keeps alive (it
        // holds an `Arc`) until it has deleted the timer and called `clear_target`, so the
        // pointer is valid whenever it is set. `Shared` is `Sync` and `on_signal` only takes
        // `&self`.
        unsafe { (*ptr).on_signal() };
    }
}
