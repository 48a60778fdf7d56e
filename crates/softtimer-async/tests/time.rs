//! The timers on a simulated clock: deterministic, and checked against the facility itself.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use softtimer::{Clock, SimClock};
use softtimer_async::time::{self, MissedTickBehavior, interval, sleep, sleep_until, timeout};
use softtimer_async::{Handle, Runtime};

/// A runtime on a 1 GHz simulated clock (1 tick = 1 ns).
fn sim_runtime() -> (Runtime, SimClock) {
    let clock = SimClock::new(1_000_000_000);
    let rt = Runtime::builder().simulated(clock.clone()).build().unwrap();
    (rt, clock)
}

/// Runs the future `test` makes of the runtime's handle and clock on [`sim_runtime`].
fn simulated<F: Future>(test: impl FnOnce(Handle, SimClock) -> F) -> F::Output {
    let (rt, clock) = sim_runtime();
    rt.block_on(test(rt.handle(), clock))
}

#[test]
fn a_sleep_never_completes_before_its_deadline() {
    simulated(|_, _| async {
        for micros in [1, 7, 100, 999, 1_000, 12_345] {
            let deadline = time::now() + Duration::from_micros(micros);
            sleep_until(deadline).await;
            let now = time::now();
            assert!(now >= deadline, "woke {:?} early", deadline - now);
            // On a simulated clock nothing else runs: it wakes exactly at the deadline.
            assert_eq!(now, deadline);
        }
    });
}

#[test]
fn a_dropped_sleep_cancels_its_event() {
    simulated(|handle, _| async move {
        let mut long = Box::pin(sleep(Duration::from_secs(10)));
        // Polled once: its event is scheduled.
        assert!(futures_poll_once(long.as_mut()).is_pending());
        assert_eq!(handle.pending_timers(), 1);
        drop(long);
        assert_eq!(handle.pending_timers(), 0);
        // One that was never polled scheduled nothing.
        let unpolled = sleep(Duration::from_secs(10));
        assert_eq!(handle.pending_timers(), 0);
        drop(unpolled);
    });
}

/// Polls a future once with a waker that does nothing.
fn futures_poll_once<F: std::future::Future + ?Sized>(
    f: std::pin::Pin<&mut F>,
) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    f.poll(&mut cx)
}

#[test]
fn a_reset_moves_the_one_event_in_place() {
    simulated(|handle, _| async move {
        let start = time::now();
        let mut s = Box::pin(sleep(Duration::from_millis(10)));
        assert!(futures_poll_once(s.as_mut()).is_pending());
        // Earlier: moved at once, still one event.
        s.as_mut().reset(start + Duration::from_millis(2));
        assert_eq!(handle.pending_timers(), 1);
        // Later: the event stays where it is, and re-arms when it fires.
        s.as_mut().reset(start + Duration::from_millis(5));
        assert_eq!(handle.pending_timers(), 1);
        s.await;
        assert_eq!(time::now(), start + Duration::from_millis(5));
        assert_eq!(handle.pending_timers(), 0);
    });
}

#[test]
fn zero_past_and_unrepresentable_deadlines() {
    simulated(|handle, clock| async move {
        let t0 = clock.now();
        sleep(Duration::ZERO).await;
        sleep_until(time::now() - Duration::from_millis(1)).await;
        assert_eq!(clock.now(), t0, "a zero or past deadline completes at once");
        // Duration::MAX: no overflow, no event, never completes.
        let mut never = Box::pin(sleep(Duration::MAX));
        assert_eq!(never.deadline(), None);
        assert!(futures_poll_once(never.as_mut()).is_pending());
        assert_eq!(handle.pending_timers(), 0);
        assert!(timeout(Duration::from_secs(3600), never).await.is_err());
        assert_eq!(handle.pending_timers(), 0);
    });
}

#[test]
fn a_timeout_fires_once_and_cancels_its_event_when_the_future_wins() {
    simulated(|handle, _| async move {
        let start = time::now();
        let polls = Rc::new(RefCell::new(0));
        let counted = {
            let polls = Rc::clone(&polls);
            std::future::poll_fn(move |_| {
                *polls.borrow_mut() += 1;
                std::task::Poll::<()>::Pending
            })
        };
        let result = timeout(Duration::from_micros(300), counted).await;
        assert!(result.is_err());
        assert_eq!(time::now(), start + Duration::from_micros(300));
        // Polled once at the start and once when the one event fired.
        assert_eq!(*polls.borrow(), 2);
        assert_eq!(handle.pending_timers(), 0);
        let won = timeout(Duration::from_secs(1), sleep(Duration::from_micros(10))).await;
        assert!(won.is_ok());
        assert_eq!(handle.pending_timers(), 0);
        // As tokio's: the future inside it, and its error as an I/O error (`?` in a
        // function returning `io::Result`).
        let deadline = time::now() + Duration::from_micros(50);
        let mut wrapped = timeout(Duration::from_micros(1), time::sleep_until(deadline));
        assert_eq!(wrapped.get_ref().deadline(), Some(deadline));
        let later = deadline + Duration::from_micros(50);
        wrapped.get_mut().reset(later);
        // Out of the timeout, the sleep runs past the 1 µs that would have cut it short.
        wrapped.into_inner().await;
        assert_eq!(time::now(), later);
        let elapsed = timeout(Duration::from_micros(5), std::future::pending::<()>()).await;
        let io = std::io::Error::from(elapsed.unwrap_err());
        assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
    });
}

/// Ticks of an interval of 1 ms whose task is busy for 3.5 ms after its second tick.
fn ticks_with_a_stall(behavior: MissedTickBehavior) -> Vec<u64> {
    simulated(|_, clock| async move {
        let start = time::now();
        let mut ticks = interval(Duration::from_millis(1));
        ticks.set_missed_tick_behavior(behavior);
        let mut taken = Vec::new();
        for i in 0..7 {
            ticks.tick().await;
            taken.push((time::now() - start).as_micros() as u64);
            if i == 1 {
                clock.advance(3_500_000); // the task computes for 3.5 ms
            }
        }
        taken
    })
}

#[test]
fn intervals_burst_delay_or_skip_after_missed_ticks() {
    // Burst catches up keeping the schedule; Delay starts again from the late tick; Skip
    // keeps the schedule, skipping the missed ticks.
    for (behavior, ticks) in [
        (
            MissedTickBehavior::Burst,
            [0, 1_000, 4_500, 4_500, 4_500, 5_000, 6_000],
        ),
        (
            MissedTickBehavior::Delay,
            [0, 1_000, 4_500, 5_500, 6_500, 7_500, 8_500],
        ),
        (
            MissedTickBehavior::Skip,
            [0, 1_000, 4_500, 5_000, 6_000, 7_000, 8_000],
        ),
    ] {
        assert_eq!(ticks_with_a_stall(behavior), ticks, "{behavior:?}");
    }
}

#[test]
fn many_timers_fire_in_deadline_order_on_a_simulated_clock() {
    let order = simulated(|_, _| async {
        let order = Rc::new(RefCell::new(Vec::new()));
        let start = time::now();
        let tasks: Vec<_> = [5u64, 1, 4, 2, 3]
            .into_iter()
            .map(|ms| {
                let order = Rc::clone(&order);
                softtimer_async::spawn_local(async move {
                    sleep_until(start + Duration::from_millis(ms)).await;
                    order
                        .borrow_mut()
                        .push((ms, (time::now() - start).as_millis() as u64));
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        Rc::try_unwrap(order).unwrap().into_inner()
    });
    assert_eq!(order, [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]);
}

#[test]
fn tasks_that_sleep_again_and_again_wake_at_their_deadlines_and_leave_no_event() {
    // Spawned tasks are polled in the loop's batches, whose time is read once per batch:
    // each sleep must still end exactly at its deadline on a simulated clock, a sleep whose
    // deadline the batch shows passed must complete at once, and an event left to fire
    // after its timer completed must not outlive the run.
    let (rt, _clock) = sim_runtime();
    let handle = rt.handle();
    let woke = rt.block_on(async move {
        let tasks: Vec<_> = (0..200u64)
            .map(|i| {
                softtimer_async::spawn_local(async move {
                    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    let mut woke = 0;
                    for _ in 0..50 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let deadline = time::now() + Duration::from_micros(x % 2_000);
                        sleep_until(deadline).await;
                        assert_eq!(time::now(), deadline, "task {i} woke off its deadline");
                        woke += 1;
                    }
                    woke
                })
            })
            .collect();
        let mut woke = 0;
        for t in tasks {
            woke += t.await.unwrap();
        }
        // Events that fire after their timers completed are gone once the clock passes them.
        sleep(Duration::from_millis(5)).await;
        woke
    });
    assert_eq!(woke, 200 * 50);
    assert_eq!(handle.pending_timers(), 0);
}

#[test]
fn a_timer_whose_event_fires_during_a_batch_completes_in_it() {
    // One batch of task polls: `a` arms a sleep; `b` moves the clock past it, so that the
    // trigger state after `b`'s poll fires `a`'s event and `a` is polled again in the same
    // batch, whose time (read as it began) still shows the deadline ahead; and `b` starts
    // `c`, first polled in that batch after the clock moved. Both must complete (neither
    // taken for still pending by the batch's time), neither before its deadline.
    // On a thread of its own, so that a timer taken for pending fails the test, not hangs it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (rt, clock) = sim_runtime();
        let _ = tx.send(rt.block_on(batch_of_three(clock)));
    });
    let (a_woke, c_woke) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a timer whose event fired during the batch never completed");
    // `a` woke at the time `b` set. `c`, first polled in a batch that began before its
    // deadline, armed an event for it, which fires at the next trigger state: on a simulated
    // clock with nothing else to do, one tick (1 ns) later.
    assert_eq!(a_woke, Duration::from_micros(20));
    assert!(
        c_woke >= Duration::from_micros(20) && c_woke <= Duration::from_nanos(20_001),
        "{c_woke:?}"
    );
}

/// The three tasks of the test above; how long after the start `a` and `c` woke.
async fn batch_of_three(clock: SimClock) -> (Duration, Duration) {
    let start = time::now();
    let a_deadline = start + Duration::from_micros(10);
    let a = softtimer_async::spawn_local(async move {
        sleep_until(a_deadline).await;
        time::now()
    });
    let c_deadline = start + Duration::from_micros(15);
    let b = softtimer_async::spawn_local(async move {
        clock.set(clock.now().ticks() + 20_000);
        // Handed back in a tuple: `c` is awaited by the main task, not by `b`.
        (softtimer_async::spawn_local(async move {
            sleep_until(c_deadline).await;
            time::now()
        }),)
    });
    let (c,) = b.await.unwrap();
    let (a_woke, c_woke) = (a.await.unwrap(), c.await.unwrap());
    assert!(a_woke >= a_deadline && c_woke >= c_deadline);
    (a_woke - start, c_woke - start)
}

#[test]
fn time_outside_a_runtime_is_the_system_clock() {
    let before = Instant::now();
    assert!(time::now() >= before);
    assert!(Handle::try_current().is_none());
}

#[test]
fn a_deadline_just_passed_in_a_batch_completes_at_its_first_poll() {
    let (rt, clock) = sim_runtime();
    let ready = rt.block_on(async move {
        softtimer_async::spawn(async move {
            // Time moves on while the task runs (as it does on a real clock): the batch's
            // time is now 10 µs behind the clock.
            clock.advance(10_000);
            let mut just_passed = Box::pin(sleep_until(time::now()));
            futures_poll_once(just_passed.as_mut()).is_ready()
        })
        .await
        .unwrap()
    });
    assert!(ready, "armed a timer for a deadline that had passed");
    assert_eq!(rt.handle().pending_timers(), 0);
}

/// Checks that `now`, an adapter's clock made for a runtime on a simulated clock, reads that
/// runtime's time from a thread outside it: an hour's jump of the clock shows, exactly.
#[cfg(any(feature = "hyper", feature = "quinn"))]
fn reads_its_runtimes_clock_from_any_thread<T: Send + 'static>(
    adapter: impl FnOnce(Handle) -> T,
    now: fn(&T) -> Instant,
) {
    let (rt, clock) = sim_runtime();
    let adapter = adapter(rt.handle());
    let before = now(&adapter);
    clock.advance(3_600 * 1_000_000_000);
    let after = std::thread::spawn(move || now(&adapter)).join().unwrap();
    assert_eq!(after.duration_since(before), Duration::from_secs(3_600));
}

/// hyper's timer reads the time of the runtime it was made for, from any thread: hyper
/// compares that reading with the deadlines of the timer's own sleeps.
#[cfg(feature = "hyper")]
#[test]
fn a_hyper_timer_reads_its_runtimes_clock_from_any_thread() {
    use hyper::rt::Timer;
    reads_its_runtimes_clock_from_any_thread(softtimer_async::hyper::HyperTimer::new, |t| t.now());
}

/// quinn's runtime likewise: its `now` is the runtime's, whichever thread asks.
#[cfg(feature = "quinn")]
#[test]
fn a_quinn_runtime_reads_its_runtimes_clock_from_any_thread() {
    use quinn::Runtime as _;
    reads_its_runtimes_clock_from_any_thread(softtimer_async::quinn::SoftRuntime::new, |q| q.now());
}
