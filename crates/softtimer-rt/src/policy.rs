//! The runtime's decisions, as pure functions of the times involved.
//!
//! Nothing here reads a clock, blocks or makes a system call: each function takes `now` and
//! the relevant times and returns what to do, and the event loop, the backstop thread and the
//! deadline services carry it out. This is what lets the tests drive every decision on a
//! [`softtimer::SimClock`], deterministically (as quinn-proto's `poll_timeout` and smoltcp's
//! `poll_at` do for their protocols).

use softtimer::{Instant, Span};

/// What an idle loop (no descriptor ready) does next (Section 5.1's idle loop, made precise
/// and cheap: block for the long part of a wait, spin only for the last stretch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleAction {
    /// An event is due: run a trigger state now.
    Fire,
    /// An event is due within the spin window: spin on trigger checks until `until` (then
    /// look at the descriptors again).
    Spin {
        /// When to stop spinning.
        until: Instant,
    },
    /// Block in `epoll_wait` for at most `timeout` (`None`: until a descriptor is ready).
    Block {
        /// How long to block at most.
        timeout: Option<Span>,
    },
}

/// The idle policy: block with a precise timeout until `spin_window` before the next due
/// time, then spin on trigger checks for the rest, at most `spin_slice` at a time so that
/// descriptors are looked at between slices.
///
/// `spin_window` is the machine's wake-up lateness: a blocked thread whose timeout expires
/// runs again that much later, so waking that early and spinning the rest fires on time
/// without spinning through the whole wait.
///
/// ```
/// use softtimer::{Instant, Span};
/// use softtimer_rt::{IdleAction, IdlePolicy};
///
/// let policy = IdlePolicy { spin_window: Span::from_ticks(10), spin_slice: Span::from_ticks(20) };
/// let now = Instant::from_ticks(1_000);
/// // Nothing pending: block until a descriptor is ready.
/// assert_eq!(policy.decide(now, None), IdleAction::Block { timeout: None });
/// // Due in 100 ticks: block for 90, then spin the last 10.
/// let due = now + Span::from_ticks(100);
/// assert_eq!(policy.decide(now, Some(due)), IdleAction::Block { timeout: Some(Span::from_ticks(90)) });
/// // Due in 5: spin until then.
/// let soon = now + Span::from_ticks(5);
/// assert_eq!(policy.decide(now, Some(soon)), IdleAction::Spin { until: soon });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePolicy {
    /// Spin for this long before a due time instead of blocking through it.
    pub spin_window: Span,
    /// Look at the descriptors at least this often while spinning.
    pub spin_slice: Span,
}

impl IdlePolicy {
    /// What to do at `now` when no descriptor is ready and the next trigger state has work at
    /// `next_due` (`None`: nothing pending).
    pub fn decide(&self, now: Instant, next_due: Option<Instant>) -> IdleAction {
        let Some(due) = next_due else {
            return IdleAction::Block { timeout: None };
        };
        let Some(wait) = due.checked_since(now).filter(|w| !w.is_zero()) else {
            return IdleAction::Fire;
        };
        if wait <= self.spin_window {
            let slice_end = now + self.spin_slice;
            return IdleAction::Spin {
                until: due.min(slice_end),
            };
        }
        IdleAction::Block {
            timeout: Some(wait - self.spin_window),
        }
    }
}

/// The adaptive backstop's arming rule (after FreeBSD's HPTS callout): a one-shot timer,
/// armed only while events are pending, at the later of the next due time and the last
/// trigger state plus `X`. It therefore expires only when the loop has gone `X` without a
/// trigger state while an event waits, which is exactly when the paper's bound
/// `T < actual < T + X + 1` needs it; an idle loop with nothing pending, and a busy loop
/// whose trigger states keep up, take no timer wake-ups at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackstopPlan {
    /// `X`: the longest a due event may wait for a trigger state.
    pub interval: Span,
}

/// What to do with the backstop's one-shot timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Leave it as it is.
    Keep,
    /// Arm it (again) at this time.
    At(Instant),
}

impl BackstopPlan {
    /// When the timer should expire, given the earliest pending due time and the time of the
    /// loop's latest (or next certain) trigger state; `None` when nothing is pending.
    pub fn expiry(&self, next_due: Option<Instant>, last_trigger: Instant) -> Option<Instant> {
        next_due.map(|due| due.max(last_trigger + self.interval))
    }

    /// Whether to move a timer armed at `armed` (`None`: disarmed), seen from a trigger state
    /// at `now` with `next_due` pending.
    ///
    /// It re-arms when nothing is armed, when the armed time is too late for the bound (past
    /// `next_due + X`), or when it would expire within `X/2` although the loop is evidently
    /// running (it is at a trigger state now): pushing it out costs one system call per
    /// `X/2` at most while busy, instead of a wake-up of the backstop thread per `X`. With
    /// nothing pending it leaves the timer alone; a stale expiry finds nothing and re-arms
    /// nothing, so the backstop goes quiet after one wake-up.
    pub fn rearm(&self, armed: Option<Instant>, now: Instant, next_due: Option<Instant>) -> Arm {
        let Some(want) = self.expiry(next_due, now) else {
            return Arm::Keep;
        };
        let Some(armed) = armed else {
            return Arm::At(want);
        };
        let latest_allowed = want.max(next_due.unwrap_or(want) + self.interval);
        let too_late = armed > latest_allowed;
        let too_soon = armed < now + self.half();
        if too_late || too_soon {
            Arm::At(want)
        } else {
            Arm::Keep
        }
    }

    /// The time from which a trigger state should look at the timer again (to push it out
    /// before it expires): `X/2` before it is armed to expire.
    pub fn revisit_at(&self, armed: Instant) -> Instant {
        armed - self.half()
    }

    fn half(&self) -> Span {
        Span::from_ticks(self.interval.ticks() / 2)
    }
}

/// The deadline timer's arming rule (Section 5.9): arm only when a deadline is earlier than
/// the one the timer is armed for; a later deadline never touches it.
///
/// ```
/// use softtimer::Instant;
/// use softtimer_rt::deadline_needs_arming;
/// let t = Instant::from_ticks;
/// assert!(deadline_needs_arming(None, t(50)));
/// assert!(deadline_needs_arming(Some(t(100)), t(50)));
/// assert!(!deadline_needs_arming(Some(t(100)), t(150)));
/// ```
pub fn deadline_needs_arming(armed: Option<Instant>, deadline: Instant) -> bool {
    armed.is_none_or(|armed| deadline < armed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use softtimer::{Clock, SimClock};

    fn span(t: u64) -> Span {
        Span::from_ticks(t)
    }

    const POLICY: IdlePolicy = IdlePolicy {
        spin_window: Span::from_ticks(20),
        spin_slice: Span::from_ticks(15),
    };

    #[test]
    fn idle_with_nothing_pending_blocks_without_timeout() {
        let clock = SimClock::new(1_000_000);
        assert_eq!(
            POLICY.decide(clock.now(), None),
            IdleAction::Block { timeout: None }
        );
    }

    #[test]
    fn an_event_due_within_the_window_spins_in_slices() {
        let clock = SimClock::new(1_000_000);
        let now = clock.now();
        assert_eq!(
            POLICY.decide(now, Some(now + span(10))),
            IdleAction::Spin {
                until: now + span(10)
            }
        );
        // Due in 18 (inside the window of 20), but a slice is 15: spin 15, then look again.
        assert_eq!(
            POLICY.decide(now, Some(now + span(18))),
            IdleAction::Spin {
                until: now + span(15)
            }
        );
    }

    #[test]
    fn an_event_due_later_blocks_until_the_window_before_it() {
        let clock = SimClock::new(1_000_000);
        let now = clock.now();
        assert_eq!(
            POLICY.decide(now, Some(now + span(1000))),
            IdleAction::Block {
                timeout: Some(span(980))
            }
        );
        // After the block, the clock reads the window's start: now spin to the due time.
        clock.advance(980);
        assert_eq!(
            POLICY.decide(clock.now(), Some(now + span(1000))),
            IdleAction::Spin {
                until: clock.now() + span(15)
            }
        );
    }

    #[test]
    fn an_event_already_due_fires() {
        let clock = SimClock::starting_at(u64::MAX - 3, 1_000_000);
        let due = clock.now() + span(2); // across the wrap
        clock.advance(5);
        assert_eq!(POLICY.decide(clock.now(), Some(due)), IdleAction::Fire);
        assert_eq!(POLICY.decide(due, Some(due)), IdleAction::Fire);
    }

    #[test]
    fn without_a_window_the_loop_only_blocks() {
        let never = IdlePolicy {
            spin_window: Span::ZERO,
            spin_slice: span(15),
        };
        let now = Instant::from_ticks(7);
        assert_eq!(
            never.decide(now, Some(now + span(1))),
            IdleAction::Block {
                timeout: Some(span(1))
            }
        );
    }

    const PLAN: BackstopPlan = BackstopPlan {
        interval: Span::from_ticks(1000),
    };

    #[test]
    fn backstop_expiry_is_the_later_of_due_and_last_trigger_plus_x() {
        let t = Instant::from_ticks;
        assert_eq!(PLAN.expiry(None, t(0)), None);
        assert_eq!(PLAN.expiry(Some(t(100)), t(0)), Some(t(1000)));
        assert_eq!(PLAN.expiry(Some(t(5000)), t(0)), Some(t(5000)));
    }

    #[test]
    fn backstop_arms_when_disarmed_and_leaves_an_idle_loop_alone() {
        let t = Instant::from_ticks;
        assert_eq!(PLAN.rearm(None, t(0), Some(t(100))), Arm::At(t(1000)));
        assert_eq!(PLAN.rearm(None, t(0), None), Arm::Keep);
        assert_eq!(PLAN.rearm(Some(t(1000)), t(10), None), Arm::Keep);
    }

    #[test]
    fn a_busy_loop_pushes_the_backstop_out_before_it_expires() {
        let t = Instant::from_ticks;
        // Armed at 1000; a trigger state at 200 with an event due at 300: leave it.
        assert_eq!(PLAN.rearm(Some(t(1000)), t(200), Some(t(300))), Arm::Keep);
        // At 600 the timer is within X/2: push it to 600 + X.
        assert_eq!(
            PLAN.rearm(Some(t(1000)), t(600), Some(t(700))),
            Arm::At(t(1600))
        );
        assert_eq!(PLAN.revisit_at(t(1600)), t(1100));
    }

    #[test]
    fn a_new_earlier_event_pulls_a_too_late_backstop_in() {
        let t = Instant::from_ticks;
        // Armed for a far event at 50_000; an event due at 200 is scheduled at 100: the bound
        // needs the backstop by 200 + X, so it re-arms at max(200, 100 + X) = 1100.
        assert_eq!(
            PLAN.rearm(Some(t(50_000)), t(100), Some(t(200))),
            Arm::At(t(1100))
        );
    }

    #[test]
    fn deadlines_arm_only_when_earlier() {
        let clock = SimClock::new(1_000_000);
        let now = clock.now();
        assert!(deadline_needs_arming(None, now + span(50)));
        assert!(deadline_needs_arming(Some(now + span(100)), now + span(50)));
        assert!(!deadline_needs_arming(
            Some(now + span(100)),
            now + span(100)
        ));
        assert!(!deadline_needs_arming(
            Some(now + span(100)),
            now + span(150)
        ));
    }
}
