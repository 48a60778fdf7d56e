//! Blocking work on the runtime's pool: off the loop, in parallel up to the pool's size,
//! panics reported, queued work cancelled at shutdown.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use softtimer_async::time::{interval, timeout};
use softtimer_async::{Handle, JoinHandle, Runtime, spawn_blocking};

const BOUND: Duration = Duration::from_secs(10);

/// A closure on `handle`'s pool that has started and waits (up to [`BOUND`]) for a message
/// on the sender returned; the receiver hears when it has finished.
fn held_closure(handle: &Handle) -> (JoinHandle<()>, mpsc::Sender<()>, mpsc::Receiver<()>) {
    let (started_tx, started) = mpsc::channel::<()>();
    let (release, wait) = mpsc::channel::<()>();
    let (finished_tx, finished) = mpsc::channel::<()>();
    let running = handle.spawn_blocking(move || {
        started_tx.send(()).unwrap();
        let _ = wait.recv_timeout(BOUND);
        finished_tx.send(()).unwrap();
    });
    started.recv_timeout(BOUND).unwrap();
    (running, release, finished)
}

#[test]
fn blocking_work_runs_off_the_loop_while_its_timers_keep_firing() {
    let rt = Runtime::new().unwrap();
    let loop_thread = std::thread::current().id();
    let ran_on = rt.block_on(async {
        let (release, wait) = mpsc::channel::<()>();
        let work = spawn_blocking(move || {
            // Blocks until the loop has ticked 20 times: were it on the loop's thread, no
            // tick would come and the wait would end only at its bound.
            let released = wait.recv_timeout(BOUND).is_ok();
            (released, std::thread::current().id())
        });
        let mut ticks = interval(Duration::from_micros(200));
        for _ in 0..20 {
            ticks.tick().await;
        }
        release.send(()).unwrap();
        let (released, ran_on) = timeout(BOUND, work).await.unwrap().unwrap();
        assert!(released, "the closure was never released");
        ran_on
    });
    assert_ne!(ran_on, loop_thread);
}

#[test]
fn a_panicking_closure_is_reported_by_its_handle() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let err = spawn_blocking(|| -> u32 { panic!("blocking bug") })
            .await
            .unwrap_err();
        assert!(err.is_panic());
        assert_eq!(err.panic_message(), Some("blocking bug"));
        // The pool goes on.
        assert_eq!(spawn_blocking(|| 3).await.unwrap(), 3);
    });
}

#[test]
fn the_pool_grows_a_thread_for_work_that_finds_none_idle() {
    // Eight closures that each wait, up to the bound, for all eight to be running at once.
    const N: usize = 8;
    let rt = Runtime::new().unwrap();
    let gate = Arc::new((Mutex::new(0usize), Condvar::new()));
    let met = rt.block_on(async {
        let waiting: Vec<_> = (0..N)
            .map(|_| {
                let gate = Arc::clone(&gate);
                spawn_blocking(move || {
                    let (count, arrived) = &*gate;
                    let mut count = count.lock().unwrap();
                    *count += 1;
                    arrived.notify_all();
                    let (count, _) = arrived
                        .wait_timeout_while(count, BOUND, |c| *c < N)
                        .unwrap();
                    *count >= N
                })
            })
            .collect();
        let mut met = 0;
        for w in waiting {
            met += usize::from(w.await.unwrap());
        }
        met
    });
    assert_eq!(met, N);
}

#[test]
fn the_pool_never_runs_more_closures_at_once_than_its_size() {
    let rt = Runtime::builder().max_blocking_threads(2).build().unwrap();
    // (running now, the most seen running at once)
    let running = Arc::new(Mutex::new((0usize, 0usize)));
    rt.block_on(async {
        let work: Vec<_> = (0..6)
            .map(|_| {
                let running = Arc::clone(&running);
                spawn_blocking(move || {
                    {
                        let mut r = running.lock().unwrap();
                        r.0 += 1;
                        r.1 = r.1.max(r.0);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    running.lock().unwrap().0 -= 1;
                })
            })
            .collect();
        for w in work {
            w.await.unwrap();
        }
    });
    let most = running.lock().unwrap().1;
    assert!((1..=2).contains(&most), "{most} at once");
}

#[test]
fn dropping_the_runtime_cancels_queued_blocking_work_and_lets_running_work_finish() {
    let rt = Runtime::builder().max_blocking_threads(1).build().unwrap();
    let handle = rt.handle();
    let (running, release, finished) = held_closure(&handle);
    // Behind it in the queue: the pool's only thread is busy.
    let queued = handle.spawn_blocking(|| 1);
    drop(rt);
    // The queued closure never runs: its handle is finished, cancelled.
    assert!(queued.is_finished());
    let rt2 = Runtime::new().unwrap();
    let err = rt2.block_on(queued).unwrap_err();
    assert!(err.is_cancelled());
    // The running one was not waited for, and finishes once released.
    assert!(!running.is_finished());
    release.send(()).unwrap();
    finished.recv_timeout(BOUND).unwrap();
    assert!(rt2.block_on(running).is_ok());
    // And work sent through a handle that outlived its runtime is cancelled, not lost in a
    // queue nobody takes.
    let late = handle.spawn_blocking(|| 2);
    assert!(rt2.block_on(late).unwrap_err().is_cancelled());
}

#[test]
fn idle_pool_threads_exit_after_the_keep_alive() {
    let rt = Runtime::builder()
        .blocking_keep_alive(Duration::from_millis(50))
        .build()
        .unwrap();
    rt.block_on(async {
        let work: Vec<_> = (0..4)
            .map(|_| spawn_blocking(|| std::thread::sleep(Duration::from_millis(5))))
            .collect();
        for w in work {
            w.await.unwrap();
        }
    });
    let start = std::time::Instant::now();
    while rt.stats().blocking_threads > 0 {
        assert!(start.elapsed() < BOUND, "idle threads never left");
        std::thread::sleep(Duration::from_millis(5));
    }
    // And the pool starts threads again for new work.
    assert_eq!(rt.block_on(rt.handle().spawn_blocking(|| 4)).unwrap(), 4);
}

#[test]
fn blocking_work_can_reach_its_runtime() {
    let rt = Runtime::builder().threads(2).pin(false).build().unwrap();
    let n = rt.block_on(async {
        let spawned = spawn_blocking(|| {
            let handle = softtimer_async::Handle::current();
            // A task on a loop and more blocking work, from a blocking thread.
            (handle.spawn(async { 5 }), spawn_blocking(|| 6))
        });
        let (task, more) = spawned.await.unwrap();
        task.await.unwrap() + more.await.unwrap()
    });
    assert_eq!(n, 11);
    assert!(softtimer_async::Handle::try_current().is_none());
}

#[test]
fn a_keep_alive_too_long_to_represent_keeps_threads_for_ever_without_overflowing() {
    let rt = Runtime::builder()
        .blocking_keep_alive(Duration::MAX)
        .build()
        .unwrap();
    let handle = rt.handle();
    // Twice, so that the first closure's thread has gone idle with its endless keep-alive
    // and is woken for the second.
    for i in 0..2 {
        let work = handle.spawn_blocking(move || i);
        let done = rt.block_on(async { timeout(BOUND, work).await });
        assert_eq!(done.expect("the closure never ran").unwrap(), i);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(rt.stats().blocking_threads, 1);
    }
    // And the runtime's drop does not hang on it.
    drop(rt);
}

#[test]
fn shutdown_timeout_waits_for_running_blocking_work_up_to_its_bound() {
    // Within the bound: the closure returns and its thread is joined before the call does.
    let rt = Runtime::new().unwrap();
    let handle = rt.handle();
    let (running, release, finished) = held_closure(&handle);
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        release.send(()).unwrap();
    });
    let start = std::time::Instant::now();
    rt.shutdown_timeout(BOUND);
    assert!(
        finished.try_recv().is_ok(),
        "returned before the closure did"
    );
    // Woken by the thread's exit, not by the bound.
    assert!(start.elapsed() < BOUND / 2, "waited {:?}", start.elapsed());
    assert!(running.is_finished());
    releaser.join().unwrap();

    // No bound at all (a timeout too long to represent): the same, without overflowing.
    let rt = Runtime::new().unwrap();
    let (done_tx, done) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel::<()>();
    let work = rt.handle().spawn_blocking(move || {
        started_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        done_tx.send(()).unwrap();
    });
    started.recv_timeout(BOUND).unwrap();
    rt.shutdown_timeout(Duration::MAX);
    assert!(done.try_recv().is_ok() && work.is_finished());

    // Past the bound: the call returns while the closure still runs.
    let rt = Runtime::new().unwrap();
    let (running, release, finished) = held_closure(&rt.handle());
    rt.shutdown_timeout(Duration::from_millis(5));
    assert!(finished.try_recv().is_err() && !running.is_finished());
    release.send(()).unwrap();
    finished.recv_timeout(BOUND).unwrap();
}

#[test]
fn a_join_set_takes_blocking_work_cancels_it_while_queued_and_joins_all() {
    use softtimer_async::JoinSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    let rt = Runtime::builder().max_blocking_threads(1).build().unwrap();
    let handle = rt.handle();
    rt.block_on(async {
        // The pool's one thread is held: what the set queues behind it waits.
        let (running, release, _finished) = held_closure(&handle);
        let mut set = JoinSet::new();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let queued = set.spawn_blocking(move || {
            flag.store(true, Ordering::SeqCst);
            0u32
        });
        set.spawn_blocking_on(|| 7u32, &handle);
        assert_eq!(set.len(), 2);
        queued.abort();
        release.send(()).unwrap();
        timeout(BOUND, running).await.unwrap().unwrap();
        let (mut outputs, mut cancelled) = (Vec::new(), 0);
        while let Some(out) = timeout(BOUND, set.join_next()).await.unwrap() {
            match out {
                Ok(n) => outputs.push(n),
                Err(e) => {
                    assert!(e.is_cancelled(), "{e}");
                    cancelled += 1;
                }
            }
        }
        assert_eq!((outputs, cancelled), (vec![7], 1));
        assert!(
            !ran.load(Ordering::SeqCst),
            "aborted while queued, yet it ran"
        );

        // join_all: every output, in the order the tasks finished. The blocking member is
        // released only once the other has finished.
        let mut set = JoinSet::new();
        let (go, wait) = mpsc::channel::<()>();
        set.spawn_blocking(move || {
            let _ = wait.recv_timeout(BOUND);
            "slow"
        });
        let fast = set.spawn(async { "fast" });
        softtimer_async::spawn(async move {
            while !fast.is_finished() {
                softtimer_async::yield_now().await;
            }
            go.send(()).unwrap();
        });
        let all = timeout(BOUND, set.join_all()).await.unwrap();
        assert_eq!(all, ["fast", "slow"]);
    });
}

#[test]
fn join_all_resumes_a_members_panic_and_aborts_the_rest() {
    use softtimer_async::JoinSet;
    struct DropsOn(mpsc::Sender<()>);
    impl Drop for DropsOn {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    let rt = Runtime::new().unwrap();
    let (tx, dropped) = mpsc::channel();
    rt.block_on(async move {
        let joining = softtimer_async::spawn(async move {
            let mut set = JoinSet::new();
            let guard = DropsOn(tx);
            set.spawn(async move {
                let _guard = guard;
                softtimer_async::time::sleep(Duration::from_secs(3600)).await;
            });
            set.spawn_blocking(|| panic!("a blocking member's bug"));
            set.join_all().await
        });
        // The task that called join_all panicked with the member's own payload.
        let err = timeout(BOUND, joining).await.unwrap().unwrap_err();
        assert_eq!(err.panic_message(), Some("a blocking member's bug"));
        // And the other member was aborted, while the runtime runs on: its future is
        // dropped (a runtime's drop would drop it anyway, so this is checked before).
        let waited = timeout(BOUND, async {
            while dropped.try_recv().is_err() {
                softtimer_async::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "the other member was not aborted");
    });
}

/// On a simulated clock, time does not jump past blocking work under way: a timeout of 5 s
/// around 10 ms of blocking work is not reached (the clock jumped to it at once before).
#[test]
fn a_simulated_clock_waits_for_blocking_work_before_it_jumps() {
    let sim = softtimer_async::SimClock::new(1_000_000_000);
    let rt = Runtime::builder().simulated(sim).build().unwrap();
    let work = rt
        .handle()
        .spawn_blocking(|| std::thread::sleep(Duration::from_millis(10)));
    let outcome = rt.block_on(async { timeout(Duration::from_secs(5), work).await });
    outcome
        .expect("the simulated clock jumped past blocking work under way")
        .unwrap();
}

/// Blocking work left to run on its own (its handle dropped) while a task sleeps an hour of
/// simulated time: the pool wakes the simulated loop when the work drains, and the hour
/// passes at once (without the wake, the loop parked for an hour of real time).
#[test]
fn a_simulated_clock_jumps_once_detached_blocking_work_is_done() {
    let (done_tx, done_rx) = mpsc::channel();
    // On a thread of its own, so that a loop parked for the hour fails the test, not hangs it.
    std::thread::spawn(move || {
        let sim = softtimer_async::SimClock::new(1_000_000_000);
        let rt = Runtime::builder().simulated(sim).build().unwrap();
        drop(
            rt.handle()
                .spawn_blocking(|| std::thread::sleep(Duration::from_millis(20))),
        );
        rt.block_on(async {
            softtimer_async::time::sleep(Duration::from_secs(3600)).await;
        });
        let _ = done_tx.send(());
    });
    assert!(
        done_rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the simulated hour took more than 10 s of real time"
    );
}
