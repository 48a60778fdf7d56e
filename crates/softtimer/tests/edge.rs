//! Edge cases and bad input of the facility, on a simulated clock.

use std::cell::RefCell;
use std::rc::Rc;

use softtimer::{Config, ConfigError, EventId, ScheduleError, SimClock, SoftTimers, TriggerSource};

mod common;
use common::{at, sp, ticks};

const HZ: u64 = 1_000_000;

fn facility<E>(start: u64) -> (SimClock, SoftTimers<E, SimClock>) {
    let clock = SimClock::starting_at(start, HZ);
    let timers = SoftTimers::new(clock.clone()).unwrap();
    (clock, timers)
}

/// A facility whose wheel slots are `slot_ticks` wide, on a clock starting at `start`.
fn facility_with_slot<E>(start: u64, slot_ticks: u64) -> (SimClock, SoftTimers<E, SimClock>) {
    let clock = SimClock::starting_at(start, HZ);
    let config = Config {
        slot_ticks: Some(slot_ticks),
        ..Config::default()
    };
    let timers = SoftTimers::with_config(clock.clone(), config).unwrap();
    (clock, timers)
}

fn fire_all<E>(timers: &mut SoftTimers<E, SimClock>) -> Vec<E> {
    let mut out = Vec::new();
    timers.trigger(TriggerSource::User, |_, ev| out.push(ev.event));
    out
}

#[test]
fn t_zero_fires_after_one_tick_not_before() {
    let (clock, mut timers) = facility(100);
    timers.schedule_soft_event(sp(0), 'a').unwrap();
    assert!(
        fire_all(&mut timers).is_empty(),
        "T = 0 is not due in the same tick"
    );
    clock.advance(1);
    assert_eq!(fire_all(&mut timers), ['a']);
}

#[test]
fn t_one_fires_after_two_ticks() {
    let (clock, mut timers) = facility(0);
    timers.schedule_soft_event(sp(1), 'b').unwrap();
    clock.advance(1);
    assert!(fire_all(&mut timers).is_empty());
    clock.advance(1);
    assert_eq!(fire_all(&mut timers), ['b']);
}

#[test]
fn far_future_events_wait_their_turn() {
    let (clock, mut timers) = facility(0);
    // The longest delay taken: 2^63 - 2 ticks, two short of half the clock's circle.
    let far = u64::MAX / 2 - 1;
    timers.schedule_soft_event(sp(far), "far").unwrap();
    timers.schedule_soft_event(sp(10), "near").unwrap();
    clock.advance(11);
    assert_eq!(fire_all(&mut timers), ["near"]);
    clock.advance(far - 11);
    assert!(fire_all(&mut timers).is_empty());
    assert_eq!(timers.next_expiry().map(ticks), Some(far + 1));
    clock.advance(1);
    assert_eq!(fire_all(&mut timers), ["far"]);
}

#[test]
fn clock_near_wrap() {
    let (clock, mut timers) = facility(u64::MAX - 5);
    timers.schedule_soft_event(sp(10), 1).unwrap();
    timers.schedule_soft_event(sp(3), 0).unwrap();
    assert_eq!(
        timers.next_expiry().map(ticks),
        Some((u64::MAX - 5).wrapping_add(4))
    );
    clock.advance(4);
    assert_eq!(fire_all(&mut timers), [0]);
    clock.advance(7); // now wraps past zero
    assert_eq!(clock_now(&clock), 5);
    assert_eq!(fire_all(&mut timers), [1]);
}

fn clock_now(c: &SimClock) -> u64 {
    use softtimer::Clock;
    c.now().ticks()
}

#[test]
fn overflowing_delay_is_an_error_not_a_panic() {
    let (_, mut timers) = facility::<()>(0);
    assert_eq!(
        timers.schedule_soft_event(sp(u64::MAX), ()),
        Err(ScheduleError::DelayOverflow { ticks: u64::MAX })
    );
    // Half the clock's circle or more ahead would read as behind (to the facility's next
    // due time and to a runtime comparing it with the clock): refused.
    assert_eq!(
        timers.schedule_soft_event(sp(1 << 63), ()),
        Err(ScheduleError::DelayOverflow { ticks: 1 << 63 })
    );
    assert!(timers.schedule_soft_event(sp(i64::MAX as u64), ()).is_err());
    let far = timers
        .schedule_soft_event(sp(i64::MAX as u64 - 1), ())
        .unwrap();
    assert!(
        timers
            .next_expiry()
            .unwrap()
            .is_after(timers.measure_time())
    );
    assert!(
        timers
            .next_trigger_time()
            .unwrap()
            .is_after(timers.measure_time())
    );
    timers.cancel(far);
    assert!(
        timers
            .schedule_with_deadline(sp(10), sp(1 << 63), ())
            .is_err()
    );
    assert_eq!(
        timers.schedule_with_deadline(sp(10), sp(5), ()),
        Err(ScheduleError::DeadlineBeforeDelay {
            delay: 10,
            deadline: 5
        })
    );
}

#[test]
fn cancel_after_fire_twice_and_unknown_ids_are_no_ops() {
    let (clock, mut timers) = facility(0);
    let a = timers.schedule_soft_event(sp(5), 'a').unwrap();
    clock.advance(6);
    assert_eq!(fire_all(&mut timers), ['a']);
    // The slot is reused by the next event; the stale id must not touch it.
    let b = timers.schedule_soft_event(sp(5), 'b').unwrap();
    assert_eq!(timers.cancel(a), None);
    assert!(timers.is_pending(b));
    assert_eq!(timers.cancel(b), Some('b'));
    assert_eq!(timers.cancel(b), None);
    assert_eq!(
        timers.cancel(EventId::from_u64(0xdead_beef_0000_1234)),
        None
    );
    assert_eq!(timers.pending(), 0);
}

#[test]
fn cancel_from_inside_a_handler() {
    let (clock, mut timers) = facility(0);
    let ids: Rc<RefCell<Vec<EventId>>> = Rc::default();
    for i in 0..4 {
        let id = timers.schedule_soft_event(sp(10), i).unwrap();
        ids.borrow_mut().push(id);
    }
    let later = timers.schedule_soft_event(sp(100), 99).unwrap();
    clock.advance(11);
    let mut fired = vec![];
    timers.trigger(TriggerSource::Recv, |timers, ev| {
        fired.push(ev.event);
        if ev.event == 0 {
            // Cancel a sibling due in this same pass, our own (already fired) id, and a
            // later event.
            assert_eq!(timers.cancel(ids.borrow()[2]), Some(2));
            assert_eq!(timers.cancel(ev.id), None);
            assert_eq!(timers.cancel(later), Some(99));
        }
    });
    assert_eq!(fired, [0, 1, 3]);
    assert_eq!(timers.pending(), 0);
}

#[test]
fn handler_reschedules_itself_without_looping() {
    let (clock, mut timers) = facility(0);
    timers.schedule_soft_event(sp(0), 0u32).unwrap();
    let mut runs = 0;
    for _ in 0..100 {
        clock.advance(1);
        let n = timers.trigger(TriggerSource::Loop, |timers, ev| {
            runs += 1;
            // T = 0 from inside the handler: due at the next tick, not in this pass.
            timers.schedule_from(ev.now, sp(0), ev.event + 1).unwrap();
        });
        assert_eq!(n, 1);
    }
    assert_eq!(runs, 100);
    assert_eq!(timers.pending(), 1);
}

#[test]
fn schedule_at_in_the_past_fires_at_the_next_trigger() {
    let (clock, mut timers) = facility(1_000);
    clock.advance(50);
    fire_all::<u8>(&mut timers);
    timers.schedule_at(at(10), 7u8).unwrap();
    assert_eq!(fire_all(&mut timers), [7]);
    // A handler scheduling in the past does not loop within one pass.
    timers.schedule_at(at(0), 1).unwrap();
    clock.advance(1);
    let mut count = 0;
    timers.trigger(TriggerSource::Loop, |timers, _| {
        count += 1;
        timers.schedule_at(at(0), 2).unwrap();
    });
    assert_eq!(count, 1);
    assert_eq!(timers.pending(), 1);
}

#[test]
fn a_handler_re_arming_at_the_passs_own_now_fires_at_the_next_trigger() {
    // Linux defers a timer armed for a time already passed to the next tick; a pass that
    // fired a re-armed event again would never end for a handler that always does this.
    let (clock, mut timers) = facility(1_000);
    timers.schedule_at(at(1_005), 0u32).unwrap();
    clock.advance(10);
    for pass in 0..3u32 {
        let mut fired = Vec::new();
        timers.trigger(TriggerSource::Loop, |timers, ev| {
            fired.push(ev.event);
            timers.schedule_at(ev.now, ev.event + 1).unwrap();
        });
        assert_eq!(fired, [pass], "pass {pass}");
        assert_eq!(timers.pending(), 1);
        clock.advance(1);
    }
}

#[test]
fn a_million_pending_events_fire_in_order() {
    let (clock, mut timers) = facility(0);
    let n: u64 = 1_000_000;
    // A permutation of delays (multiplicative hashing) so that insertion order is not time order.
    for i in 0..n {
        let t = (i * 7_919) % n;
        timers.schedule_soft_event(sp(t), t).unwrap();
    }
    assert_eq!(timers.pending(), n as usize);
    let mut last = None;
    let mut count = 0u64;
    let mut step = 0;
    while timers.pending() > 0 {
        step += 997;
        clock.set(step);
        timers.trigger(TriggerSource::Syscall, |_, ev| {
            assert!(last.is_none_or(|l| ev.event > l), "out of order");
            assert!(ev.now.ticks() > ev.event, "early");
            last = Some(ev.event);
            count += 1;
        });
    }
    assert_eq!(count, n);
}

#[test]
fn deadlines_are_tracked_exactly() {
    let (clock, mut timers) = facility(0);
    assert_eq!(timers.next_deadline().map(ticks), None);
    let a = timers
        .schedule_with_deadline(sp(100), sp(5_000), 'a')
        .unwrap();
    timers
        .schedule_with_deadline(sp(200), sp(300), 'b')
        .unwrap();
    timers.schedule_soft_event(sp(1), 'c').unwrap();
    assert_eq!(timers.next_deadline().map(ticks), Some(301));
    assert_eq!(timers.next_expiry().map(ticks), Some(2));
    clock.advance(250);
    assert_eq!(fire_all(&mut timers), ['c', 'a', 'b']);
    assert_eq!(timers.next_deadline().map(ticks), None);
    assert_eq!(timers.cancel(a), None);
    let d = timers
        .schedule_with_deadline(sp(10), sp(70_000), 'd')
        .unwrap();
    assert_eq!(timers.next_deadline().map(ticks), Some(250 + 70_001));
    timers.cancel(d);
    assert_eq!(timers.next_deadline().map(ticks), None);
}

#[test]
fn bad_configurations_are_errors() {
    let clock = SimClock::new(HZ);
    let cfg = |hz| Config {
        interrupt_clock_hz: hz,
        ..Config::default()
    };
    assert!(matches!(
        SoftTimers::<(), _>::with_config(clock.clone(), cfg(0)),
        Err(ConfigError::InterruptClockOutOfRange { hz: 0, .. })
    ));
    assert!(matches!(
        SoftTimers::<(), _>::with_config(clock.clone(), cfg(100_001)),
        Err(ConfigError::InterruptClockOutOfRange { .. })
    ));
    assert!(matches!(
        SoftTimers::<(), _>::with_config(SimClock::new(10_000), cfg(20_000)),
        Err(ConfigError::InterruptFasterThanMeasure { .. })
    ));
    // SimClock treats 0 Hz as 1 Hz; a clock that really says 0 is refused.
    struct Broken;
    impl softtimer::Clock for Broken {
        fn now(&self) -> softtimer::Instant {
            softtimer::Instant::from_ticks(0)
        }
        fn resolution_hz(&self) -> u64 {
            0
        }
    }
    assert!(matches!(
        SoftTimers::<(), _>::new(Broken),
        Err(ConfigError::ZeroMeasureResolution)
    ));
}

#[test]
fn stats_count_sources_and_delays() {
    let clock = SimClock::new(HZ);
    let mut timers = SoftTimers::with_config(
        clock.clone(),
        Config {
            stats: true,
            ..Config::default()
        },
    )
    .unwrap();
    timers.schedule_soft_event(sp(9), ()).unwrap();
    clock.advance(15); // due at 10, fires 5 µs late
    timers.trigger(TriggerSource::Recv, |_, _| {});
    timers.trigger(TriggerSource::Send, |_, _| {});
    timers.backstop_tick(|_, _| {});
    let stats = timers.stats().unwrap();
    assert_eq!(stats.triggers(TriggerSource::Recv), 1);
    assert_eq!(stats.triggers(TriggerSource::Backstop), 1);
    assert_eq!(stats.total_triggers(), 3);
    assert_eq!(stats.fired(), 1);
    assert!(stats.delays_ns().equivalent(stats.delays_ns().max(), 5_000));
    timers.set_stats(false);
    assert!(timers.stats().is_none());
}

#[test]
fn expired_deadlines_fire_alone_and_in_deadline_order() {
    let (clock, mut timers) = facility(0);
    timers.schedule_with_deadline(sp(10), sp(500), 'a').unwrap(); // due 11, deadline 501
    timers.schedule_with_deadline(sp(20), sp(100), 'b').unwrap(); // due 21, deadline 101
    timers.schedule_soft_event(sp(5), 'c').unwrap(); // due 6, no deadline
    timers
        .schedule_with_deadline(sp(30), sp(1_000), 'd')
        .unwrap(); // due 31, deadline 1001
    clock.advance(600);
    let mut fired = vec![];
    let n = timers.fire_expired_deadlines(at(600), TriggerSource::Deadline, |_, ev| {
        fired.push(ev.event)
    });
    assert_eq!(n, 2);
    assert_eq!(
        fired,
        ['b', 'a'],
        "only expired deadlines, earliest deadline first"
    );
    assert_eq!(timers.next_deadline().map(ticks), Some(1_001));
    // The rest are due and fire at the next trigger state, in due order.
    assert_eq!(fire_all(&mut timers), ['c', 'd']);
    assert_eq!(timers.pending_deadlines(), 0);
}

#[test]
fn slot_widths_the_wheel_cannot_do_are_refused() {
    let cfg = |ticks| Config {
        slot_ticks: Some(ticks),
        ..Config::default()
    };
    for bad in [
        0,
        3,
        6,
        1000,
        (1 << 32) - 1,
        (1 << 32) + 1,
        3 << 31,
        1 << 33,
        1 << 63,
        u64::MAX,
    ] {
        assert!(
            matches!(
                SoftTimers::<(), _>::with_config(SimClock::new(1_000_000), cfg(bad)),
                Err(ConfigError::SlotWidth { ticks }) if ticks == bad
            ),
            "{bad}"
        );
    }
    for good in [1, 2, 64, 1 << 31, 1 << 32] {
        assert!(SoftTimers::<(), _>::with_config(SimClock::new(1_000_000), cfg(good)).is_ok());
    }
}

#[test]
fn pop_expired_deadline_takes_only_expired_deadlines_in_order() {
    let clock = SimClock::new(1_000_000);
    let mut timers = SoftTimers::new(clock.clone()).unwrap();
    timers.schedule_with_deadline(sp(10), sp(500), 'a').unwrap(); // due 11, deadline 501
    timers.schedule_with_deadline(sp(20), sp(100), 'b').unwrap(); // due 21, deadline 101
    timers.schedule_soft_event(sp(5), 'c').unwrap(); // due 6, no deadline
    // Due 31, deadline 1001: due at 600 but within its deadline.
    timers
        .schedule_with_deadline(sp(30), sp(1_000), 'd')
        .unwrap();
    // Due 701, deadline 801: not even due at 600.
    timers
        .schedule_with_deadline(sp(700), sp(800), 'e')
        .unwrap();
    assert_eq!(timers.next_deadline().map(ticks), Some(101));
    // Every event but 'e' is due at 100, but no deadline has passed: nothing is taken.
    assert!(
        timers
            .pop_expired_deadline(at(100), TriggerSource::Deadline)
            .is_none()
    );
    assert_eq!(timers.pending(), 5);
    // A deadline at `now` has expired.
    let b = timers
        .pop_expired_deadline(at(101), TriggerSource::Deadline)
        .unwrap();
    assert_eq!(
        (b.event, b.due, b.now, b.source, b.late()),
        ('b', at(21), at(101), TriggerSource::Deadline, sp(80))
    );
    assert!(
        timers
            .pop_expired_deadline(at(101), TriggerSource::Deadline)
            .is_none()
    );
    clock.advance(600);
    let now = clock_instant(&clock);
    let mut order = vec![];
    while let Some(f) = timers.pop_expired_deadline(now, TriggerSource::Deadline) {
        order.push(f.event);
    }
    assert_eq!(order, ['a']);
    assert_eq!(timers.pending(), 3);
    assert_eq!(timers.pending_deadlines(), 2);
    assert_eq!(timers.next_deadline().map(ticks), Some(801));
    assert_eq!(timers.next_expiry().map(ticks), Some(6));
    // The events due but within their deadline are left for a trigger state, in due order.
    assert_eq!(fire_all(&mut timers), ['c', 'd']);
    assert_eq!(timers.pending_deadlines(), 1);
    assert_eq!(timers.next_deadline().map(ticks), Some(801));
    // 'e' is due at 701 but nothing triggers; its deadline timer takes it at 801.
    clock.advance(201);
    let e = timers
        .pop_expired_deadline(clock_instant(&clock), TriggerSource::Deadline)
        .unwrap();
    assert_eq!((e.event, e.due, e.late()), ('e', at(701), sp(100)));
    assert_eq!(timers.pending(), 0);
    assert_eq!(timers.next_deadline(), None);
}

#[test]
fn schedule_at_across_the_wrap_fires_in_order() {
    let clock = SimClock::starting_at(u64::MAX - 20, 1_000_000);
    let mut timers = SoftTimers::new(clock.clone()).unwrap();
    let base = clock_instant(&clock);
    timers.schedule_at(base + sp(30), 3).unwrap(); // past the wrap
    timers.schedule_at(base + sp(10), 1).unwrap();
    timers.schedule_at(base + sp(21), 2).unwrap(); // at the wrap
    clock.advance(40);
    let mut fired = vec![];
    timers.trigger(TriggerSource::User, |_, ev| fired.push(ev.event));
    assert_eq!(fired, [1, 2, 3]);
}

/// Events placed with `schedule_at` on both sides of the counter's wrap (and exactly at
/// `u64::MAX` and 0), mixed with relative ones: with a trigger state at every tick, each
/// fires at exactly its instant, in order, and `next_expiry` names it beforehand.
#[test]
fn schedule_at_across_the_wrap_fires_each_event_at_its_instant() {
    for slot_ticks in [1, 16, 1 << 32] {
        for pull in [false, true] {
            let (clock, mut timers) = facility_with_slot(u64::MAX - 20, slot_ticks);
            let base = clock_instant(&clock);
            timers.schedule_at(at(8), "after the wrap").unwrap();
            timers.schedule_at(at(u64::MAX), "at u64::MAX").unwrap();
            timers
                .schedule_at(base + sp(10), "before the wrap")
                .unwrap();
            timers.schedule_at(at(0), "at 0").unwrap();
            timers
                .schedule_soft_event(sp(24), "relative, at 4")
                .unwrap();
            timers
                .schedule_at(at(u64::MAX - 1), "at u64::MAX - 1")
                .unwrap();
            timers.schedule_at(at(8), "after the wrap, second").unwrap();
            let expected = [
                (base + sp(10), "before the wrap"),
                (at(u64::MAX - 1), "at u64::MAX - 1"),
                (at(u64::MAX), "at u64::MAX"),
                (at(0), "at 0"),
                (at(4), "relative, at 4"),
                (at(8), "after the wrap"),
                (at(8), "after the wrap, second"),
            ];
            let mut fired = vec![];
            for _ in 0..40 {
                let next = timers.next_expiry();
                let expect_next = expected.get(fired.len()).map(|e| e.0);
                assert_eq!(next, expect_next, "slot {slot_ticks}, pull {pull}");
                clock.advance(1);
                let now = clock_instant(&clock);
                if pull {
                    while let Some(ev) = timers.pop_due(now, TriggerSource::User) {
                        fired.push((ev.due, ev.event, ev.now));
                    }
                } else {
                    timers.trigger(TriggerSource::User, |_, ev| {
                        fired.push((ev.due, ev.event, ev.now))
                    });
                }
            }
            let got: Vec<_> = fired.iter().map(|&(due, name, _)| (due, name)).collect();
            assert_eq!(got, expected, "slot {slot_ticks}, pull {pull}");
            for (due, name, now) in fired {
                assert_eq!(now, due, "{name} did not fire at its instant");
            }
            assert_eq!(timers.pending(), 0);
        }
    }
}

/// After the wrap, an instant just before it is in the past (not 2^64 ticks ahead), and one
/// far ahead of it is in the future.
#[test]
fn schedule_at_an_instant_before_the_wrap_from_after_it() {
    let (clock, mut timers) = facility(u64::MAX - 5);
    timers.schedule_soft_event(sp(8), 0u8).unwrap(); // due at 3, after the wrap
    clock.advance(10); // now 4
    assert_eq!(fire_all(&mut timers), [0]);
    timers.schedule_at(at(u64::MAX - 2), 1).unwrap();
    // Due one tick after the latest trigger pass.
    assert_eq!(timers.next_expiry(), Some(at(5)));
    let far = clock_instant(&clock) + sp(1 << 62);
    timers.schedule_at(far, 2).unwrap();
    clock.advance(1);
    assert_eq!(fire_all(&mut timers), [1]);
    assert_eq!(timers.next_expiry(), Some(far));
    clock.set(far.ticks() - 1);
    assert!(fire_all(&mut timers).is_empty());
    clock.advance(1);
    assert_eq!(fire_all(&mut timers), [2]);
}

/// Deadlines on both sides of the wrap are tracked and expire in deadline order.
#[test]
fn deadlines_across_the_wrap() {
    let (clock, mut timers) = facility(u64::MAX - 10);
    timers.schedule_with_deadline(sp(2), sp(15), 'a').unwrap(); // due MAX - 7, deadline 5
    timers.schedule_with_deadline(sp(1), sp(5), 'b').unwrap(); // due MAX - 8, deadline MAX - 4
    assert_eq!(timers.next_deadline(), Some(at(u64::MAX - 4)));
    clock.advance(20); // now 9
    let now = clock_instant(&clock);
    let mut order = vec![];
    while let Some(f) = timers.pop_expired_deadline(now, TriggerSource::Deadline) {
        order.push((f.event, f.due));
    }
    assert_eq!(order, [('b', at(u64::MAX - 8)), ('a', at(u64::MAX - 7))]);
    assert_eq!(timers.next_deadline(), None);
}

/// A clock value read before the facility was built (an unordered read, a value cached by
/// the caller) is behind every event: it fires nothing and leaves the facility usable. On
/// the raw counter it is about 2^64 ticks after the facility's start.
#[test]
fn a_clock_value_from_before_the_facility_fires_nothing() {
    for start in [1_000, 3, u64::MAX - 2] {
        let (clock, mut timers) = facility(start);
        let before = clock_instant(&clock) - sp(5);
        timers.schedule_soft_event(sp(100), 'a').unwrap();
        timers.schedule_with_deadline(sp(10), sp(20), 'b').unwrap();
        let n = timers.trigger_at(before, TriggerSource::User, |_, ev| {
            panic!("{} fired at {before:?}, before it was scheduled", ev.event)
        });
        assert_eq!(n, 0);
        assert_eq!(timers.fire_due(before, TriggerSource::User, |_, _| {}), 0);
        assert!(timers.pop_due(before, TriggerSource::User).is_none());
        assert!(
            timers
                .pop_expired_deadline(before, TriggerSource::Deadline)
                .is_none()
        );
        assert_eq!(timers.pending(), 2);
        // Still usable: scheduling works and events fire at their time.
        timers.schedule_soft_event(sp(0), 'c').unwrap();
        clock.advance(1);
        assert_eq!(fire_all(&mut timers), ['c']);
        clock.advance(10);
        assert_eq!(fire_all(&mut timers), ['b']);
        clock.advance(90);
        assert_eq!(fire_all(&mut timers), ['a']);
    }
}

/// Scheduling from a clock value read before the facility was built counts from the
/// facility's first tick, as firing does: no overflow error, and the event fires on time.
#[test]
fn scheduling_from_a_clock_value_before_the_facility_counts_from_its_start() {
    for start in [1_000, 3, u64::MAX - 2] {
        let (clock, mut timers) = facility(start);
        let before = clock_instant(&clock) - sp(5);
        timers.schedule_from(before, sp(10), 'a').unwrap();
        clock.advance(10);
        assert_eq!(fire_all(&mut timers), Vec::<char>::new());
        clock.advance(1);
        assert_eq!(fire_all(&mut timers), ['a']);
    }
}

/// With its last event cancelled, the facility has nothing to check for.
#[test]
fn next_trigger_time_is_none_after_the_last_cancel() {
    let (_clock, mut timers) = facility::<u32>(1_000);
    let a = timers.schedule_soft_event(sp(50), 1).unwrap();
    let b = timers.schedule_soft_event(sp(5_000_000), 2).unwrap();
    assert!(timers.next_trigger_time().is_some());
    timers.cancel(a).unwrap();
    assert!(timers.next_trigger_time().is_some(), "one event is left");
    timers.cancel(b).unwrap();
    assert_eq!(timers.next_trigger_time(), None);
    assert_eq!(timers.next_expiry(), None);
}

/// The narrowest and the widest slots still fire every event at exactly its tick.
#[test]
fn extreme_slot_widths_fire_at_the_exact_tick() {
    for slot_ticks in [1, 1 << 32] {
        for start in [0, u64::MAX - 1_000] {
            let (clock, mut timers) = facility_with_slot(start, slot_ticks);
            let delays = [
                70,
                5,
                (1 << 32) + 7,
                0,
                (1 << 32) - 1,
                1 << 33,
                5,
                1 << 32,
                3 << 40,
            ];
            for (i, &t) in delays.iter().enumerate() {
                timers.schedule_soft_event(sp(t), i).unwrap();
            }
            let mut dues: Vec<u64> = delays.iter().map(|t| t + 1).collect();
            dues.sort();
            dues.dedup();
            for due in dues {
                clock.set(start.wrapping_add(due - 1));
                assert!(
                    fire_all(&mut timers).is_empty(),
                    "slot {slot_ticks}: fired before {due}"
                );
                assert_eq!(timers.next_expiry(), Some(at(start.wrapping_add(due))));
                clock.set(start.wrapping_add(due));
                let expected: Vec<usize> = (0..delays.len())
                    .filter(|&i| delays[i] + 1 == due)
                    .collect();
                assert_eq!(
                    fire_all(&mut timers),
                    expected,
                    "slot {slot_ticks}, due {due}"
                );
            }
            assert_eq!(timers.pending(), 0);
        }
    }
}

fn clock_instant(c: &SimClock) -> softtimer::Instant {
    use softtimer::Clock;
    c.now()
}
