//! The idle policy, carried out: what the loop does when nothing is ready (fire, spin the
//! last stretch before a due time, or block with a precise timeout), and how each timed
//! block's lateness keeps the calibrated windows current.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use softtimer::{Clock, Instant, Span, TriggerSource};

use super::{BlockPlan, EventLoop, WAKE_MARGIN};
use crate::LoopTurn;
use crate::cx::LoopCx;
use crate::error::RtError;
use crate::policy::{IdleAction, IdlePolicy};
use crate::uring::Ring;

/// How much earlier than its timeout a wait may end and still count as ended by it (the
/// measurement clock and the kernel's may differ by this much over a block).
const TIMEOUT_TOLERANCE: Duration = Duration::from_micros(1);

impl<E: Send + 'static, C: Clock + Clone + Send + Sync + 'static> EventLoop<E, C> {
    /// What the idle policy says to do now that nothing is ready. Before a timed block it
    /// moves the backstop past the loop's own wake-up; when an earlier event came from
    /// another thread while it decided, it says `Fire` (a trigger state, then decide again).
    pub(super) fn idle_action(&mut self) -> IdleAction {
        let shared = &self.core.shared;
        let now = shared.clock.now_unordered();
        let mut policy = if self.core.spin_allowed {
            self.core.idle
        } else {
            IdlePolicy {
                spin_window: Span::ZERO,
                windows: None,
                ..self.core.idle
            }
        };
        self.block_plan = None;
        // After a timed block that ended by its timeout, spin (slice after slice) through
        // what it left before the due time it was for, rather than blocking again.
        match self.spin_through {
            Some(due) if now >= due => self.spin_through = None,
            Some(due) if self.core.spin_allowed => {
                policy.spin_window = policy.spin_window.max(due.saturating_since(now));
            }
            _ => {}
        }
        let action = policy.decide(now, shared.next_check());
        let IdleAction::Block { timeout: Some(_) } = action else {
            return action;
        };
        // The trigger's next check is a lower bound of the earliest due time (exact only
        // for an event in the wheel's finest level) or the backstop's revisit; a loop about
        // to block wakes for neither: it blocks until the earliest due time itself (one
        // wake-up, not a wake-up to cascade the wheel and another for the event), and the
        // backstop is moved past its wake-up.
        let due = shared.next_expiry_for_block();
        let action = policy.decide(now, due);
        if let IdleAction::Block { timeout: Some(t) } = action {
            if !shared.before_block(now + t, due) {
                // An earlier event came from another thread since `due` was read: a trigger
                // state, then the policy again, rather than a block past it.
                return IdleAction::Fire;
            }
            self.block_plan = due.map(|due| BlockPlan {
                until: now + t,
                due,
                wait: due.saturating_since(now),
            });
        }
        action
    }

    /// Spins on trigger checks until `until`, an event fires, a stop request, or (when
    /// `wakeable`) a [`LoopWaker`]'s wake. Returns how many events fired.
    pub(super) fn spin(&mut self, until: Instant, wakeable: bool) -> usize {
        let shared = Arc::clone(&self.core.shared);
        let start = shared.clock.now_unordered();
        let mut now = start;
        // What the ring holds leaves before the spin, not after it; the spin ends when a
        // completion comes.
        if let Some(ring) = self.core.ring.as_deref_mut() {
            let _ = ring.submit();
        }
        let fired = loop {
            // The trigger reads the clock after `now`: an event due at `until` fires at
            // the check that ends the spin.
            let fired = self.core.trigger(TriggerSource::Idle);
            let stop = &self.core.stop;
            if fired > 0
                || now >= until
                || stop.flag.load(Ordering::Relaxed)
                || (wakeable && stop.woken.load(Ordering::Relaxed))
                || self.core.ring.as_deref_mut().is_some_and(Ring::pending)
            {
                break fired;
            }
            std::hint::spin_loop();
            now = shared.clock.now_unordered();
        };
        self.idle_spin_total += now.saturating_since(start);
        fired
    }

    /// After a timed block that woke with nothing ready: a wake-up a hair before the due
    /// time (the timeout's rounding to nanoseconds, the kernel's clock a few parts per
    /// million off the TSC) spins the rest, up to [`WAKE_MARGIN`], instead of paying another
    /// block for it. Returns how many events fired.
    pub(super) fn spin_past_early_wake(&mut self) -> usize {
        let shared = &self.core.shared;
        let now = shared.clock.now_unordered();
        match shared.next_check() {
            Some(next)
                if next > now && next.saturating_since(now) <= shared.clock.span(WAKE_MARGIN) =>
            {
                self.spin(next, true)
            }
            _ => 0,
        }
    }

    /// Blocks in `epoll_wait` for at most `timeout`; when `wakeable`, not at all if a
    /// [`LoopWaker`] has woken the loop, and a wake ends the wait. A trigger state (`syscall`)
    /// follows. Returns whether it waited (`self.events` then holds what became ready).
    pub(super) fn block(&mut self, timeout: Option<Span>, wakeable: bool) -> Result<bool, RtError> {
        let stop = Arc::clone(&self.core.stop);
        if wakeable {
            // Pairs with `LoopWaker::wake`: see there.
            stop.parked.store(true, Ordering::SeqCst);
            if stop.woken.load(Ordering::SeqCst) {
                stop.parked.store(false, Ordering::Relaxed);
                return Ok(false);
            }
        }
        let plan = self.block_plan.take().filter(|_| timeout.is_some());
        let clock = self.core.shared.clock.clone();
        // The timeout from a fresh reading: what ran since the decision (the backstop's
        // re-arm, the application's last look) must not delay the wake-up.
        let timeout = match plan {
            Some(plan) => Some(plan.until.saturating_since(clock.now_unordered())),
            None => timeout,
        };
        let result = self.wait(timeout.map(|t| clock.duration(t)));
        if wakeable {
            stop.parked.store(false, Ordering::Relaxed);
        }
        result?;
        if let Some(plan) = plan
            && self.events.is_empty()
        {
            // Nothing ready: woken by the timeout, unless the wait ended well before it (a
            // signal, a ring completion without readiness), which says nothing of how late
            // a wake-up comes.
            let now = clock.now_unordered();
            if now + clock.span(TIMEOUT_TOLERANCE) >= plan.until {
                self.core.idle.learn(
                    plan.wait,
                    now.saturating_since(plan.until),
                    clock.span(crate::calibrate::SHORT_WAIT),
                );
                self.spin_through = Some(plan.due);
            }
        }
        self.core.trigger(TriggerSource::Syscall);
        Ok(true)
    }

    /// The idle policy, carried out for [`EventLoop::run_with`]: no descriptor is ready, so
    /// fire, spin for the last stretch before a due time, or block (with a precise timeout)
    /// until then. Returns whether it blocked, so that `self.events` holds what became
    /// ready.
    pub(super) fn idle<T>(&mut self, on_turn: &mut T) -> Result<bool, RtError>
    where
        T: FnMut(&mut LoopCx<'_, E, C>, LoopTurn) -> bool,
    {
        match self.idle_action() {
            IdleAction::Fire => {
                self.core.trigger(TriggerSource::Idle);
            }
            IdleAction::Spin { until } => {
                self.spin(until, false);
            }
            IdleAction::Block { timeout } => {
                if on_turn(&mut LoopCx::new(&mut self.core), LoopTurn::BeforeBlock)
                    || self.core.stop.flag.load(Ordering::Acquire)
                {
                    // The application changed what the loop waits for (decide again), or
                    // asked it to stop (`LoopCx::stop` sets the flag only: nothing would
                    // wake the block).
                    return Ok(false);
                }
                return self.block(timeout, false);
            }
        }
        Ok(false)
    }
}
