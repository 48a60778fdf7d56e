//! The runtime's decisions, as pure functions of the times involved.
//!
//! Nothing here reads a clock, blocks or makes a system call: each function takes `now` and
//! the relevant times and returns what to do, and the event loop, the backstop thread and the
//! deadline services carry it out. This is what lets the tests drive every decision on a
//! [`softtimer::SimClock`], deterministically (as quinn-proto's `poll_timeout` and smoltcp's
//! `poll_at` do for their protocols).

use softtimer::{Instant, Span};

mod windows;
pub use windows::WakeupWindows;

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

/// The idle policy: block with a precise timeout until a window before the next due time,
/// then spin on trigger checks for the rest, at most `spin_slice` at a time so that
/// descriptors are looked at between slices.
///
/// The window is the machine's wake-up lateness: a blocked thread whose timeout expires runs
/// again that much later, so waking that early and spinning the rest fires on time without
/// spinning through the whole wait. It is `spin_window` for every wait, or, with
/// [`windows`](Self::windows), the window for the wait's length (a wait within
/// `spin_window` is spun either way, and a wait of the shortest bucket never has a narrower
/// window; [`learn`](Self::learn) keeps that floor at the windows' window for a short wait).
///
/// ```
/// use softtimer::{Instant, Span};
/// use softtimer_rt::{IdleAction, IdlePolicy};
///
/// let policy = IdlePolicy {
///     spin_window: Span::from_ticks(10),
///     spin_slice: Span::from_ticks(20),
///     windows: None,
/// };
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
    /// Spin for this long before a due time instead of blocking through it (with `windows`,
    /// at least this long: the floor, which [`learn`](Self::learn) moves with them).
    pub spin_window: Span,
    /// Look at the descriptors at least this often while spinning.
    pub spin_slice: Span,
    /// Windows by wait length, kept current (`None`: `spin_window` for every wait).
    pub windows: Option<WakeupWindows>,
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
        let window = self.window_for(wait);
        if wait <= self.spin_window.max(window) {
            let slice_end = now + self.spin_slice;
            return IdleAction::Spin {
                until: due.min(slice_end),
            };
        }
        IdleAction::Block {
            timeout: Some(wait - window),
        }
    }

    /// The spin window before a due time `wait` away: the learnt window for the wait's
    /// length (`spin_window` when there are no learnt ones), and for a wait in the shortest
    /// bucket never less than the floor (`spin_window`): such a wait mostly follows a late
    /// event, its bucket keeps a narrow window (half its shortest wait, so that it keeps
    /// blocking and learning), and blocking until it would make the next event late as well.
    /// Longer waits keep their own learnt windows, which may be narrower than the floor (a
    /// named precision's 1 µs where plain wake-ups are precise enough).
    pub fn window_for(&self, wait: Span) -> Span {
        self.windows.map_or(self.spin_window, |w| {
            let learnt = w.window_for(wait);
            if w.is_shortest(wait) {
                learnt.max(self.spin_window)
            } else {
                learnt
            }
        })
    }

    /// A timed block of `wait` woke `late` after its timeout. With learnt
    /// [`windows`](Self::windows), they take it in, and the floor under them
    /// ([`spin_window`](Self::spin_window): a wait within it is spun, not blocked) becomes
    /// their window before a wait of `short_wait`, so that it follows the loop's own
    /// wake-ups as the windows do (a floor fixed from a probe that met the host in a slow
    /// spell would keep every wait spinning longer than the wake-ups ask, for good). A
    /// policy without windows keeps its fixed window. `short_wait` is in the policy's ticks:
    /// the loop passes [`SHORT_WAIT`](crate::SHORT_WAIT) on its clock.
    ///
    /// ```
    /// use softtimer::Span;
    /// use softtimer_rt::{IdlePolicy, WakeupWindows};
    ///
    /// let us = |n: u64| Span::from_ticks(n * 1_000); // a 1 GHz clock
    /// let windows = WakeupWindows::new(us(64), |_| us(30), us(1), us(2), us(200));
    /// // Started from a probe that read 42 µs.
    /// let mut policy = IdlePolicy { spin_window: us(42), spin_slice: us(20), windows: Some(windows) };
    /// // Blocks of 100 µs keep waking 10 µs late: the windows and the floor come down.
    /// for _ in 0..2_000 {
    ///     policy.learn(us(100), us(10), us(100));
    /// }
    /// assert!(policy.spin_window < us(15));
    /// assert_eq!(policy.spin_window, policy.window_for(us(100)));
    /// ```
    pub fn learn(&mut self, wait: Span, late: Span, short_wait: Span) {
        if let Some(windows) = &mut self.windows {
            windows.observe(wait, late);
            self.spin_window = windows.window_for(short_wait);
        }
    }
}

/// The adaptive backstop's arming rule, for when the helper can only share the loop's CPU
/// ([`HelperPlacement::LoopCpu`]; elsewhere the [`BackstopWatch`] needs no timer): a one-shot
/// timer, armed only while events are pending, at the later of the next due time and the last
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

/// The backstop's watch (the paper's interrupt clock, moved off the loop's core): a helper
/// thread on another CPU that reads the earliest time at which the loop's trigger states have
/// work, which the loop publishes anyway for its own fast path, and the earliest deadline, and
/// sleeps until the first of:
///
/// * the **late line**, `interval − margin` past the earliest due time: an event still pending
///   then has waited for a trigger state almost `X`, so the loop is stuck (computing, or
///   descheduled) and the watch fires every due event itself. `margin` is the helper's own
///   expected wake-up lateness, so that it fires by `X` rather than `X` plus a wake-up;
/// * the earliest **deadline** (Section 5.9), at which it fires the events whose deadline has
///   passed, and only those.
///
/// While the loop keeps passing trigger states it fires each event long before the late line,
/// so the watch wakes, sees a later due time, and sleeps again: at most once per `X` while
/// events are pending, on its own CPU, and never while nothing is pending. Unlike the adaptive
/// one-shot timer ([`BackstopPlan`]), the loop programs no timer and makes no system call for
/// it; it wakes the watch (one `write`) only when it publishes a time earlier than the one the
/// watch sleeps until ([`wake_needed`]), which a loop whose new events fall due after the
/// earliest pending one never does.
///
/// ```
/// use softtimer::{Instant, Span};
/// use softtimer_rt::{BackstopWatch, WatchAction};
///
/// let watch = BackstopWatch { interval: Span::from_ticks(1000), margin: Span::from_ticks(50), late_line: true };
/// let t = Instant::from_ticks;
/// // An event due at 100: sleep until its late line, 100 + 1000 − 50.
/// assert_eq!(watch.decide(t(100), Some(t(100)), None), WatchAction::Sleep { until: Some(t(1050)) });
/// // Still pending at 1050: the loop is stuck, fire it.
/// assert_eq!(watch.decide(t(1050), Some(t(100)), None), WatchAction::FireOverdue);
/// // Nothing pending: sleep until woken.
/// assert_eq!(watch.decide(t(1050), None, None), WatchAction::Sleep { until: None });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackstopWatch {
    /// `X`: the longest a due event may wait for a trigger state.
    pub interval: Span,
    /// How much before `X` the watch fires (its own wake-up lateness), at most `X / 4`.
    pub margin: Span,
    /// Whether the watch enforces the delay bound (it does unless the backstop is off, or a
    /// one-shot timer on the loop's CPU enforces it instead); deadlines it always watches.
    pub late_line: bool,
}

/// What the backstop's watch does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchAction {
    /// An event has waited past the late line: fire everything due.
    FireOverdue,
    /// A deadline has passed: fire the events whose deadlines have.
    EnforceDeadlines,
    /// Nothing to do before `until` (`None`: before the loop publishes something new).
    Sleep {
        /// When to look again.
        until: Option<Instant>,
    },
}

impl BackstopWatch {
    /// A watch for a backstop of period `interval`, firing `margin` early (clamped to
    /// `interval / 4`, so that the loop always has three quarters of `X` to fire an event).
    pub fn new(interval: Span, margin: Span, late_line: bool) -> Self {
        BackstopWatch {
            interval,
            margin: margin.min(Span::from_ticks(interval.ticks() / 4)),
            late_line,
        }
    }

    /// When an event due at `due`, still pending, is left to the watch.
    pub fn late_line(&self, due: Instant) -> Instant {
        due + (self.interval - self.margin)
    }

    /// When the watch must look next, given the earliest time the loop's trigger states have
    /// work (`next_trigger`) and the earliest deadline; `None`: nothing to watch.
    pub fn alarm(
        &self,
        next_trigger: Option<Instant>,
        next_deadline: Option<Instant>,
    ) -> Option<Instant> {
        let late = next_trigger
            .filter(|_| self.late_line)
            .map(|t| self.late_line(t));
        match (late, next_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What to do at `now`.
    pub fn decide(
        &self,
        now: Instant,
        next_trigger: Option<Instant>,
        next_deadline: Option<Instant>,
    ) -> WatchAction {
        if next_deadline.is_some_and(|d| d <= now) {
            return WatchAction::EnforceDeadlines;
        }
        if self.late_line && next_trigger.is_some_and(|t| self.late_line(t) <= now) {
            return WatchAction::FireOverdue;
        }
        WatchAction::Sleep {
            until: self.alarm(next_trigger, next_deadline),
        }
    }
}

/// Whether the loop, having published a new alarm for the watch, must wake it: only when the
/// watch sleeps until later than that (`sleeping_until`; `None`: with no alarm at all). A
/// watch that is awake looks again before it sleeps, so it is never woken.
///
/// ```
/// use softtimer::Instant;
/// use softtimer_rt::wake_needed;
/// let t = Instant::from_ticks;
/// assert!(wake_needed(Some(None), Some(t(10))));
/// assert!(wake_needed(Some(Some(t(20))), Some(t(10))));
/// assert!(!wake_needed(Some(Some(t(20))), Some(t(30))));
/// assert!(!wake_needed(None, Some(t(10))));
/// ```
pub fn wake_needed(sleeping_until: Option<Option<Instant>>, alarm: Option<Instant>) -> bool {
    match (sleeping_until, alarm) {
        (None, _) | (_, None) => false,
        (Some(None), Some(_)) => true,
        (Some(Some(until)), Some(alarm)) => alarm < until,
    }
}

/// Where the backstop's helper thread runs, and so who enforces the delay bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "cpu")]
pub enum HelperPlacement {
    /// Pinned to a CPU the loop thread may not use: the watch ([`BackstopWatch`]) enforces the
    /// bound, and the loop's core pays nothing for it.
    OtherCpu(usize),
    /// Where the loop thread may also run (the loop may use several CPUs, or the helper was
    /// placed on one of them; on that CPU when one is given): the watch still enforces the
    /// bound, but its wake-ups may land on the loop's core, and are counted as if they did.
    MayShare(Option<usize>),
    /// On the loop's only CPU (no other is usable, or the lazy-timerfd deadline design, the
    /// first design, kept whole): the adaptive one-shot timer ([`BackstopPlan`]), armed by the
    /// loop, enforces the bound, and the helper serves it at real-time priority so that it
    /// preempts a computing loop thread like an interrupt. The loop's core pays the timer's
    /// programming (up to `2 / X` system calls a second while busy) and its expiries.
    LoopCpu,
}

impl HelperPlacement {
    /// Whether the helper may run on the loop's CPU.
    pub fn shares_loop_cpu(self) -> bool {
        !matches!(self, HelperPlacement::OtherCpu(_))
    }

    /// Whether the watch enforces the delay bound (else the one-shot timer does).
    pub fn watches(self) -> bool {
        self != HelperPlacement::LoopCpu
    }
}

/// Where to put the backstop's helper, given the CPUs the loop thread may use, the CPUs online,
/// the CPU asked for (if any), and whether the lazy-timerfd deadline design is in use (it keeps
/// the whole first design, on the loop's CPU).
///
/// ```
/// use softtimer_rt::{HelperPlacement, place_helper};
/// // A loop pinned to CPU 1 of two: the helper goes to CPU 0.
/// assert_eq!(place_helper(&[1], &[0, 1], None, false), HelperPlacement::OtherCpu(0));
/// // Nowhere else to go: the adaptive timer on the loop's CPU.
/// assert_eq!(place_helper(&[0], &[0], None, false), HelperPlacement::LoopCpu);
/// // A loop that may run anywhere: the helper may share its CPU.
/// assert_eq!(place_helper(&[0, 1], &[0, 1], None, false), HelperPlacement::MayShare(None));
/// ```
pub fn place_helper(
    loop_cpus: &[usize],
    online: &[usize],
    requested: Option<usize>,
    lazy_timerfd: bool,
) -> HelperPlacement {
    if lazy_timerfd {
        return HelperPlacement::LoopCpu;
    }
    match (requested, loop_cpus) {
        (Some(cpu), [only]) if cpu == *only => HelperPlacement::LoopCpu,
        (Some(cpu), _) if loop_cpus.contains(&cpu) => HelperPlacement::MayShare(Some(cpu)),
        (Some(cpu), _) => HelperPlacement::OtherCpu(cpu),
        (None, [_]) => online
            .iter()
            .find(|c| !loop_cpus.contains(c))
            .map_or(HelperPlacement::LoopCpu, |&c| HelperPlacement::OtherCpu(c)),
        (None, _) => HelperPlacement::MayShare(None),
    }
}

/// Where the helper is when it could not be pinned where [`place_helper`] said: with the loop
/// (it inherited the loop thread's CPUs).
pub fn unpinned_placement(loop_cpus: &[usize]) -> HelperPlacement {
    if loop_cpus.len() == 1 {
        HelperPlacement::LoopCpu
    } else {
        HelperPlacement::MayShare(None)
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

    fn spin(until: Instant) -> IdleAction {
        IdleAction::Spin { until }
    }

    /// Blocking for at most `t` ticks.
    fn block(t: u64) -> IdleAction {
        IdleAction::Block {
            timeout: Some(span(t)),
        }
    }

    const POLICY: IdlePolicy = IdlePolicy {
        spin_window: Span::from_ticks(20),
        spin_slice: Span::from_ticks(15),
        windows: None,
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
            spin(now + span(10))
        );
        // Due in 18 (inside the window of 20), but a slice is 15: spin 15, then look again.
        assert_eq!(
            POLICY.decide(now, Some(now + span(18))),
            spin(now + span(15))
        );
    }

    #[test]
    fn an_event_due_later_blocks_until_the_window_before_it() {
        let clock = SimClock::new(1_000_000);
        let now = clock.now();
        assert_eq!(POLICY.decide(now, Some(now + span(1000))), block(980));
        // After the block, the clock reads the window's start: now spin to the due time.
        clock.advance(980);
        assert_eq!(
            POLICY.decide(clock.now(), Some(now + span(1000))),
            spin(clock.now() + span(15))
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
    fn a_long_wait_blocks_until_its_own_window_and_a_short_one_keeps_the_short_window() {
        let windows = WakeupWindows::new(
            span(64),
            |wait| {
                if wait < span(1_000) {
                    span(10)
                } else {
                    span(40)
                }
            },
            span(1),
            span(2),
            span(200),
        );
        let policy = IdlePolicy {
            spin_window: span(10),
            spin_slice: span(1_000),
            windows: Some(windows),
        };
        let now = Instant::from_ticks(5);
        assert_eq!(policy.decide(now, Some(now + span(100))), block(90));
        assert_eq!(policy.decide(now, Some(now + span(5_000))), block(4_960));
        // A wait within its window is spun.
        assert_eq!(policy.decide(now, Some(now + span(8))), spin(now + span(8)));
    }

    /// The floor under learnt windows starts where it was set (a probe's figure, given by
    /// `EventLoop::set_idle_policy`) and then follows the short wait's window, down where the
    /// wake-ups come early and up where they come late; a fixed window never moves.
    #[test]
    fn the_floor_under_learnt_windows_follows_the_short_waits_window() {
        let windows = WakeupWindows::new(span(64), |_| span(30), span(1), span(2), span(200));
        let mut learnt = IdlePolicy {
            spin_window: span(42),
            spin_slice: span(20),
            windows: Some(windows),
        };
        let now = Instant::from_ticks(0);
        // As probed: a wait of 40 is spun (a slice at a time); one of 100 blocks until its
        // bucket's window (30), one of 50 until the floor, above its bucket's 16.
        assert_eq!(
            learnt.decide(now, Some(now + span(40))),
            spin(now + span(20))
        );
        assert_eq!(learnt.decide(now, Some(now + span(100))), block(70));
        assert_eq!(learnt.decide(now, Some(now + span(50))), block(8));
        for _ in 0..2_000 {
            learnt.learn(span(100), span(10), span(100));
        }
        let floor = learnt.spin_window;
        assert_eq!(floor, learnt.window_for(span(100)));
        assert!(floor < span(15), "{floor:?}");
        // Now a wait of 40 blocks too, until its own bucket's window (16: half that bucket's
        // typical wait), and one of 100 until the learnt window.
        assert_eq!(learnt.decide(now, Some(now + span(40))), block(24));
        assert_eq!(
            learnt.decide(now, Some(now + span(100))),
            block(100 - floor.ticks())
        );
        // Wake-ups 40 late: back up, but never past half the short bucket's shortest wait.
        for _ in 0..2_000 {
            learnt.learn(span(100), span(40), span(100));
        }
        let floor = learnt.spin_window;
        assert_eq!(floor, span(32));
        // The shorter bucket's window is still 16; a wait there blocks until the floor.
        assert_eq!(
            learnt.decide(now, Some(now + span(50))),
            block(50 - floor.ticks())
        );
        let mut fixed = IdlePolicy {
            windows: None,
            ..learnt
        };
        let before = fixed;
        fixed.learn(span(100), span(90), span(100));
        assert_eq!(fixed, before);
    }

    /// A named precision's windows before long waits come down to 1 µs where the wake-ups
    /// are precise enough, whatever the floor for short waits.
    #[test]
    fn long_waits_keep_their_own_learnt_windows_below_the_floor() {
        let windows = WakeupWindows::new(span(64), |_| span(29), Span::ZERO, span(1), span(200))
            .aiming_at(100, span(3));
        let mut policy = IdlePolicy {
            spin_window: span(29),
            spin_slice: span(20),
            windows: Some(windows),
        };
        for _ in 0..20_000 {
            policy.learn(span(1_000), span(2), span(100));
        }
        assert_eq!(policy.window_for(span(1_000)), span(1));
        assert_eq!(policy.spin_window, span(29), "no 100 µs wait was seen");
        let now = Instant::from_ticks(0);
        assert_eq!(policy.decide(now, Some(now + span(1_000))), block(999));
    }

    #[test]
    fn without_a_window_the_loop_only_blocks() {
        let never = IdlePolicy {
            spin_window: Span::ZERO,
            spin_slice: span(15),
            windows: None,
        };
        let now = Instant::from_ticks(7);
        assert_eq!(never.decide(now, Some(now + span(1))), block(1));
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

    const WATCH: BackstopWatch = BackstopWatch {
        interval: Span::from_ticks(1000),
        margin: Span::from_ticks(40),
        late_line: true,
    };

    #[test]
    fn the_watch_sleeps_until_the_late_line_and_fires_what_is_left_there() {
        let clock = SimClock::new(1_000_000);
        let due = clock.now() + span(100);
        assert_eq!(
            WATCH.decide(clock.now(), Some(due), None),
            WatchAction::Sleep {
                until: Some(due + span(960))
            }
        );
        // The loop keeps up: at the late line the earliest due time has moved on.
        clock.advance(1060);
        let later = due + span(30);
        assert_eq!(
            WATCH.decide(clock.now(), Some(later), None),
            WatchAction::Sleep {
                until: Some(later + span(960))
            }
        );
        // The loop is stuck: the event due at `due` is still the earliest.
        assert_eq!(
            WATCH.decide(clock.now(), Some(due), None),
            WatchAction::FireOverdue
        );
        // With nothing pending the watch sleeps until woken.
        assert_eq!(
            WATCH.decide(clock.now(), None, None),
            WatchAction::Sleep { until: None }
        );
    }

    #[test]
    fn the_watch_fires_within_the_bound_and_leaves_the_loop_most_of_it() {
        // Wherever the event falls due, the watch looks by X after it (the bound) and not
        // before 3X/4 (the loop's share), whatever margin it was given.
        for margin in [0, 40, 250, 400, 10_000] {
            let watch = BackstopWatch::new(span(1000), span(margin), true);
            for due in [0u64, 1, 999, 123_456] {
                let due = Instant::from_ticks(due);
                let line = watch.late_line(due);
                assert!(
                    line <= due + span(1000) && line >= due + span(750),
                    "{margin}"
                );
                assert_eq!(
                    watch.decide(line, Some(due), None),
                    WatchAction::FireOverdue
                );
                assert_ne!(
                    watch.decide(line - span(1), Some(due), None),
                    WatchAction::FireOverdue
                );
            }
        }
    }

    #[test]
    fn deadlines_come_first_and_are_watched_without_the_late_line() {
        let t = Instant::from_ticks;
        // The deadline at 300 is before the late line at 1060.
        assert_eq!(
            WATCH.decide(t(0), Some(t(100)), Some(t(300))),
            WatchAction::Sleep {
                until: Some(t(300))
            }
        );
        assert_eq!(
            WATCH.decide(t(300), Some(t(100)), Some(t(300))),
            WatchAction::EnforceDeadlines
        );
        // Past both: deadlines first, then (next look) the late line.
        assert_eq!(
            WATCH.decide(t(5000), Some(t(100)), Some(t(300))),
            WatchAction::EnforceDeadlines
        );
        // Without the late line (the timer on the loop's CPU enforces the bound) only
        // deadlines wake the watch.
        let deadlines_only = BackstopWatch {
            late_line: false,
            ..WATCH
        };
        assert_eq!(
            deadlines_only.decide(t(5000), Some(t(100)), None),
            WatchAction::Sleep { until: None }
        );
        assert_eq!(
            deadlines_only.decide(t(5000), Some(t(100)), Some(t(6000))),
            WatchAction::Sleep {
                until: Some(t(6000))
            }
        );
    }

    #[test]
    fn the_loop_wakes_the_watch_only_for_an_earlier_alarm() {
        let t = Instant::from_ticks;
        // A busy loop: each event fires and the next falls due later, so the alarm only
        // moves out and the sleeping watch is never woken.
        let mut sleeping_until = WATCH.alarm(Some(t(100)), None);
        for due in (110..10_000).step_by(10) {
            assert!(!wake_needed(
                Some(sleeping_until),
                WATCH.alarm(Some(t(due)), None)
            ));
        }
        // An event scheduled before the earliest pending one: the alarm comes in.
        assert!(wake_needed(
            Some(sleeping_until),
            WATCH.alarm(Some(t(50)), None)
        ));
        // A watch with nothing to watch sleeps until woken: the first event wakes it.
        sleeping_until = None;
        assert!(wake_needed(
            Some(sleeping_until),
            WATCH.alarm(Some(t(50)), None)
        ));
        // An awake watch is never woken.
        assert!(!wake_needed(None, WATCH.alarm(Some(t(50)), None)));
        // Nothing pending any more: nothing to wake for.
        assert!(!wake_needed(Some(Some(t(10))), WATCH.alarm(None, None)));
    }

    #[test]
    fn the_helper_goes_where_the_loop_is_not() {
        use HelperPlacement::*;
        // Pinned loop, other CPUs online: the lowest other one.
        assert_eq!(place_helper(&[2], &[0, 1, 2, 3], None, false), OtherCpu(0));
        assert_eq!(place_helper(&[0], &[0, 1], None, false), OtherCpu(1));
        // The loop's only CPU, or the only CPU there is: the one-shot timer on it.
        assert_eq!(place_helper(&[0], &[0], None, false), LoopCpu);
        assert_eq!(place_helper(&[1], &[0, 1], Some(1), false), LoopCpu);
        // Asked for another CPU: there; for one of the loop's several: maybe shared.
        assert_eq!(place_helper(&[1], &[0, 1], Some(0), false), OtherCpu(0));
        assert_eq!(
            place_helper(&[0, 1], &[0, 1], Some(1), false),
            MayShare(Some(1))
        );
        // A loop free to run anywhere, or whose CPUs are unknown.
        assert_eq!(place_helper(&[0, 1], &[0, 1], None, false), MayShare(None));
        assert_eq!(place_helper(&[], &[0, 1], None, false), MayShare(None));
        // The lazy-timerfd design keeps the first design whole, on the loop's CPU.
        assert_eq!(place_helper(&[1], &[0, 1], None, true), LoopCpu);
        // A helper that could not be pinned stayed with the loop.
        assert_eq!(unpinned_placement(&[1]), LoopCpu);
        assert_eq!(unpinned_placement(&[0, 1]), MayShare(None));
        assert!(!OtherCpu(0).shares_loop_cpu() && OtherCpu(0).watches());
        assert!(MayShare(None).shares_loop_cpu() && MayShare(None).watches());
        assert!(LoopCpu.shares_loop_cpu() && !LoopCpu.watches());
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
