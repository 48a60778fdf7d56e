//! Model-based tests: the facility against a sorted map, on a simulated clock.
//!
//! The reference fires every event whose due time (`scheduled_at + T + 1`) has been reached,
//! in (due time, schedule order); handlers may reschedule and cancel. The facility must fire
//! the same events in the same order, never early.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use softtimer::{Config, EventId, SimClock, SoftTimers, TriggerSource};

#[allow(dead_code)]
fn sp(t: u64) -> softtimer::Span {
    softtimer::Span::from_ticks(t)
}
#[allow(dead_code)]
fn at(t: u64) -> softtimer::Instant {
    softtimer::Instant::from_ticks(t)
}
#[allow(dead_code)]
fn ticks(i: softtimer::Instant) -> u64 {
    i.ticks()
}

#[derive(Clone, Debug)]
enum Op {
    Schedule(u64),
    ScheduleWithDeadline(u64, u64),
    Cancel(usize),
    Advance(u64),
    /// A trigger state; each handler may reschedule a new event and cancel an earlier one.
    Trigger {
        reschedule: Option<u64>,
        cancel: Option<usize>,
    },
    Backstop,
}

fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..8,
        4 => 0u64..300,
        3 => 0u64..100_000,
        1 => 0u64..(1 << 40),
        1 => (1u64 << 62)..(1u64 << 63),
    ]
}

/// Finest-slot widths: exact ticks, and coarse slots whose events must still fire in exact
/// order.
fn slot_ticks() -> impl Strategy<Value = u64> {
    prop_oneof![Just(1u64), Just(16), Just(1024), Just(1 << 20)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => delay().prop_map(Op::Schedule),
        1 => (delay(), 0u64..1000).prop_map(|(t, extra)| Op::ScheduleWithDeadline(t, extra)),
        2 => any::<usize>().prop_map(Op::Cancel),
        4 => prop_oneof![0u64..4, 0u64..500, 0u64..200_000, 0u64..(1 << 41)].prop_map(Op::Advance),
        3 => (proptest::option::of(delay()), proptest::option::of(any::<usize>()))
            .prop_map(|(reschedule, cancel)| Op::Trigger { reschedule, cancel }),
        1 => Just(Op::Backstop),
    ]
}

/// The reference: pending events keyed by (due, sequence number).
#[derive(Default)]
struct Reference {
    pending: BTreeMap<(u64, u64), usize>,
    key_of: HashMap<usize, (u64, u64)>,
    seq: u64,
}

impl Reference {
    fn schedule(&mut self, due: u64, name: usize) {
        self.seq += 1;
        let key = (due, self.seq);
        self.pending.insert(key, name);
        self.key_of.insert(name, key);
    }
    fn cancel(&mut self, name: usize) -> bool {
        match self.key_of.remove(&name) {
            Some(key) => self.pending.remove(&key).is_some(),
            None => false,
        }
    }
    fn pop_due(&mut self, now: u64) -> Option<(u64, usize)> {
        let (&key, &name) = self.pending.iter().next()?;
        if key.0 > now {
            return None;
        }
        self.pending.remove(&key);
        self.key_of.remove(&name);
        Some((key.0, name))
    }
}

fn run_model(start: u64, slot_ticks: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let clock = SimClock::starting_at(start, 1_000_000);
    let mut timers: SoftTimers<usize, SimClock> = SoftTimers::with_config(
        clock.clone(),
        Config {
            stats: true,
            slot_ticks: Some(slot_ticks),
            ..Config::default()
        },
    )
    .unwrap();
    let mut reference = Reference::default();
    // Every event ever scheduled, by name: (id, scheduled_at, T).
    let mut events: Vec<(EventId, u64, u64)> = Vec::new();
    let mut now = start;

    for op in ops {
        match op {
            Op::Schedule(t) | Op::ScheduleWithDeadline(t, _) => {
                let name = events.len();
                let id = match op {
                    Op::ScheduleWithDeadline(_, extra) => timers
                        .schedule_with_deadline(sp(t), sp(t + extra), name)
                        .unwrap(),
                    _ => timers.schedule_soft_event(sp(t), name).unwrap(),
                };
                prop_assert!(timers.is_pending(id));
                events.push((id, now, t));
                reference.schedule(now.wrapping_sub(start) + t + 1, name);
            }
            Op::Cancel(pick) => {
                if events.is_empty() {
                    continue;
                }
                let name = pick % events.len();
                let got = timers.cancel(events[name].0);
                let expected = reference.cancel(name);
                prop_assert_eq!(got.is_some(), expected, "cancel of event {}", name);
                if let Some(payload) = got {
                    prop_assert_eq!(payload, name);
                }
                prop_assert!(!timers.is_pending(events[name].0));
            }
            Op::Advance(d) => {
                clock.advance(d);
                now = now.wrapping_add(d);
            }
            Op::Trigger { .. } | Op::Backstop => {
                let (reschedule, cancel) = match op {
                    Op::Trigger { reschedule, cancel } => (reschedule, cancel),
                    _ => (None, None),
                };
                let source = match op {
                    Op::Backstop => TriggerSource::Backstop,
                    _ => TriggerSource::Loop,
                };
                let rel_now = now.wrapping_sub(start);
                let mut fired: Vec<(usize, u64)> = Vec::new();
                let mut expected: Vec<usize> = Vec::new();
                let mut failure = None;
                // The reference is driven from inside the dispatch so that handler effects
                // (reschedule, cancel) apply to both at the same moment.
                timers.trigger(source, |timers, ev| {
                    let Some((due, name)) = reference.pop_due(rel_now) else {
                        failure = Some(format!(
                            "facility fired {} but reference has none due",
                            ev.event
                        ));
                        return;
                    };
                    expected.push(name);
                    fired.push((ev.event, ev.due.ticks()));
                    if ev.due.ticks().wrapping_sub(start) != due {
                        failure = Some(format!(
                            "due {} vs reference {}",
                            ev.due.ticks().wrapping_sub(start),
                            due
                        ));
                    }
                    if let Some(t) = reschedule {
                        let new_name = events.len();
                        let id = timers.schedule_from(ev.now, sp(t), new_name).unwrap();
                        events.push((id, now, t));
                        reference.schedule(rel_now + t + 1, new_name);
                    }
                    if let Some(pick) = cancel {
                        let victim = pick % events.len();
                        let got = timers.cancel(events[victim].0).is_some();
                        if got != reference.cancel(victim) {
                            failure = Some(format!("cancel of {victim} from a handler disagrees"));
                        }
                    }
                });
                if let Some(f) = failure {
                    return Err(TestCaseError::fail(f));
                }
                let names: Vec<usize> = fired.iter().map(|f| f.0).collect();
                prop_assert_eq!(&names, &expected);
                prop_assert!(
                    reference.pop_due(rel_now).is_none(),
                    "reference still has due events"
                );
                for (name, due) in fired {
                    let (_, sched, t) = events[name];
                    // Never early: now − scheduled_at ≥ T + 1.
                    prop_assert!(now.wrapping_sub(sched) > t, "event {} fired early", name);
                    prop_assert!(due.wrapping_sub(start) <= rel_now);
                }
            }
        }
        prop_assert_eq!(timers.pending(), reference.pending.len());
        let expected_next = reference
            .pending
            .keys()
            .next()
            .map(|k| k.0.wrapping_add(start));
        prop_assert_eq!(timers.next_expiry().map(ticks), expected_next);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn facility_matches_sorted_map(
        slot_ticks in slot_ticks(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        run_model(12_345, slot_ticks, ops)?;
    }

    #[test]
    fn facility_matches_sorted_map_across_clock_wrap(
        back in 0u64..1_000_000,
        slot_ticks in slot_ticks(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        run_model(u64::MAX - back, slot_ticks, ops)?;
    }

    /// With a backstop tick every X ticks and trigger states at random times in between,
    /// every event fires with T < actual < T + X + 1.
    #[test]
    fn delay_bound_holds_with_backstop(
        hz in prop_oneof![Just(1_000u64), Just(250), Just(10_000), 1u64..100_000],
        steps in proptest::collection::vec((0u64..3_000, 0u64..2_000, any::<bool>(), any::<bool>()), 1..300),
        start in prop_oneof![Just(0u64), Just(u64::MAX - 5_000), any::<u64>()],
        slot_ticks in slot_ticks(),
    ) {
        let clock = SimClock::starting_at(start, 1_000_000);
        let mut timers: SoftTimers<(u64, u64), SimClock> = SoftTimers::with_config(
            clock.clone(),
            Config { interrupt_clock_hz: hz, slot_ticks: Some(slot_ticks), ..Config::default() },
        ).unwrap();
        let x = timers.backstop_interval().ticks();
        let mut next_backstop = x;
        let mut elapsed = 0u64; // since start
        let mut violations = Vec::new();
        let mut check = |now: u64, (sched, t): (u64, u64)| {
            let actual = now - sched;
            if !(t < actual && actual < t + x + 1) {
                violations.push((sched, t, actual));
            }
        };
        for (t, advance, trigger_first, trigger_after) in steps {
            if trigger_first {
                let now = elapsed;
                timers.trigger(TriggerSource::Syscall, |_, ev| check(now, ev.event));
            }
            timers.schedule_soft_event(sp(t), (elapsed, t)).unwrap();
            // Advance, stopping at every backstop tick on the way.
            let target = elapsed + advance;
            while next_backstop <= target {
                clock.advance(next_backstop - elapsed);
                elapsed = next_backstop;
                let now = elapsed;
                timers.backstop_tick(|_, ev| check(now, ev.event));
                next_backstop += x;
            }
            clock.advance(target - elapsed);
            elapsed = target;
            if trigger_after {
                let now = elapsed;
                timers.trigger(TriggerSource::Recv, |_, ev| check(now, ev.event));
            }
        }
        prop_assert!(violations.is_empty(), "X = {}: violations {:?}", x, &violations[..violations.len().min(5)]);
    }
}
