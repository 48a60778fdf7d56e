//! The backstop's adaptive one-shot timer, where the loop arms it itself (the helper shares
//! the loop's only CPU, or the lazy-timerfd design): arming it, the due time its rule goes
//! by across a block, the push past the loop's own wake-up, and the helper's expiry.

use std::sync::atomic::Ordering;

use softtimer::{Clock, Instant, TriggerSource};

use super::{Backstop, Locked, NEVER, Shared};
use crate::policy::Arm;
use crate::timerfd::arm_oneshot;

impl<E, C: Clock> Shared<E, C> {
    /// Arms the backstop's one-shot timer to expire at `at` (the clock read `now`) and counts
    /// the system call.
    pub(super) fn arm_backstop(&self, backstop: &Backstop, locked: &mut Locked<E, C>, at: Instant) {
        // The timer is relative: measured from a fresh reading, so that a `now` the caller
        // read earlier (a batch's) does not make it expire late.
        arm_oneshot(
            &backstop.timer,
            at.saturating_since(self.clock.now()),
            self.clock.resolution_hz(),
        );
        locked.backstop_armed = Some(at);
        locked.counters.backstop_arms += 1;
        locked.counters.loop_core_syscalls += 1;
    }

    /// The exact due time kept from before the loop last blocked, while it is still a lower
    /// bound of the earliest due time (nothing earlier has been scheduled since); dropped
    /// once it is not.
    fn kept_due(locked: &mut Locked<E, C>) -> Option<Instant> {
        if locked.backstop_due == NEVER {
            return None;
        }
        let kept = Instant::from_ticks(locked.backstop_due);
        if locked
            .facility
            .earliest_scheduled()
            .is_some_and(|scheduled| scheduled < kept)
        {
            locked.backstop_due = NEVER;
            return None;
        }
        Some(kept)
    }

    /// The earliest due time the backstop's rule goes by: the facility's lower bound
    /// `next_due`, raised to the exact time kept from before the loop last blocked
    /// ([`Shared::kept_due`]).
    pub(super) fn backstop_due(
        locked: &mut Locked<E, C>,
        next_due: Option<Instant>,
    ) -> Option<Instant> {
        let next_due = next_due?;
        Some(Self::kept_due(locked).map_or(next_due, |kept| next_due.max(kept)))
    }

    /// The exact earliest due time, for a loop about to decide how long to block. The
    /// facility watches what is scheduled from this read on (under the same lock), so that
    /// [`Shared::before_block`] can tell whether it is still the earliest.
    pub(crate) fn next_expiry_for_block(&self) -> Option<Instant> {
        let mut locked = self.lock();
        // A kept time is checked against what came before the watch restarts.
        let _ = Self::kept_due(&mut locked);
        locked.facility.mark_scheduled();
        locked.facility.next_expiry()
    }

    /// Before the loop blocks until `wake` (its next certain trigger state) for the event
    /// due at `due`, read by [`Shared::next_expiry_for_block`]. Returns false, and changes
    /// nothing, when something earlier has been scheduled since (from another thread): the
    /// wake-up is too late for it, and the loop must decide again.
    ///
    /// With the one-shot timer enforcing the bound, it pushes the timer out past the wake-up,
    /// so that a loop which wakes by itself is not also woken by the backstop, and keeps
    /// `due` for the rule, so that the trigger states after the wake-up, which read only the
    /// facility's lower bound (a coarse slot's start, by which the timer would look too late),
    /// leave it there. (The watch needs nothing: it sleeps until the late line of the event
    /// the loop will wake for.)
    pub(crate) fn before_block(&self, wake: Instant, due: Option<Instant>) -> bool {
        if !self.soft {
            return true;
        }
        let mut locked = self.lock();
        if locked
            .facility
            .earliest_scheduled()
            .is_some_and(|scheduled| due.is_none_or(|due| scheduled < due))
        {
            return false;
        }
        let Some(backstop) = self.backstop_timer() else {
            return true;
        };
        let plan = backstop.plan;
        // (A due time at tick `u64::MAX` reads as none kept: it only loses the saving.)
        locked.backstop_due = due.map_or(NEVER, Instant::ticks);
        let next_due = locked.facility.next_trigger_time();
        let rule_due = Self::backstop_due(&mut locked, next_due);
        if let Arm::At(at) = plan.rearm(locked.backstop_armed, wake, rule_due) {
            self.arm_backstop(backstop, &mut locked, at);
            let next = next_due.map_or(NEVER, |t| self.gate.rel(t));
            let revisit = self.gate.rel(plan.revisit_at(at));
            self.gate.next.store(next.min(revisit), Ordering::Release);
        }
        true
    }

    /// What the helper does when the one-shot timer expires: fire what is due (the loop has
    /// gone `X` without a trigger state) and re-arm by the rule, as if this were a trigger
    /// state.
    pub(crate) fn on_backstop_expiry(&self) -> usize {
        self.helper.backstop_wakeups.fetch_add(1, Ordering::Relaxed);
        let mut locked = self.lock();
        locked.backstop_armed = None;
        let now = self.clock.now();
        self.fire_locked(&mut locked, now, TriggerSource::Backstop)
    }
}
