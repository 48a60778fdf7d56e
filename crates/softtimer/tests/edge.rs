//! Edge cases and bad input of the facility, on a simulated clock.

use std::cell::RefCell;
use std::rc::Rc;

use softtimer::{Config, ConfigError, EventId, ScheduleError, SimClock, SoftTimers, TriggerSource};

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

const HZ: u64 = 1_000_000;

fn facility<E>(start: u64) -> (SimClock, SoftTimers<E, SimClock>) {
    let clock = SimClock::starting_at(start, HZ);
    let timers = SoftTimers::new(clock.clone()).unwrap();
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
    let far = u64::MAX / 2;
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
    // now + T + 1 must stay below u64::MAX (the facility's "never").
    assert!(timers.schedule_soft_event(sp(u64::MAX - 1), ()).is_err());
    assert!(timers.schedule_soft_event(sp(u64::MAX - 2), ()).is_ok());
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
    for bad in [0, 3, 1000, 1 << 33] {
        assert!(
            matches!(
                SoftTimers::<(), _>::with_config(SimClock::new(1_000_000), cfg(bad)),
                Err(ConfigError::SlotWidth { ticks }) if ticks == bad
            ),
            "{bad}"
        );
    }
    for good in [1, 64, 1 << 32] {
        assert!(SoftTimers::<(), _>::with_config(SimClock::new(1_000_000), cfg(good)).is_ok());
    }
}

#[test]
fn pop_expired_deadline_takes_only_expired_deadlines_in_order() {
    let clock = SimClock::new(1_000_000);
    let mut timers = SoftTimers::new(clock.clone()).unwrap();
    timers.schedule_with_deadline(sp(10), sp(500), 'a').unwrap(); // deadline 501
    timers.schedule_with_deadline(sp(20), sp(100), 'b').unwrap(); // deadline 101
    timers.schedule_soft_event(sp(5), 'c').unwrap();
    clock.advance(600);
    let now = clock_instant(&clock);
    let mut order = vec![];
    while let Some(f) = timers.pop_expired_deadline(now, TriggerSource::Deadline) {
        order.push(f.event);
    }
    assert_eq!(order, ['b', 'a']);
    let mut rest = vec![];
    while let Some(f) = timers.pop_due(now, TriggerSource::User) {
        rest.push(f.event);
    }
    assert_eq!(rest, ['c']);
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

fn clock_instant(c: &SimClock) -> softtimer::Instant {
    use softtimer::Clock;
    c.now()
}
