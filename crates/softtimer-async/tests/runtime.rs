//! The executor: panics, wakes from other threads, several loops.

use std::future::poll_fn;
use std::sync::mpsc;
use std::task::Poll;
use std::time::Duration;

use softtimer_async::time::{sleep, timeout};
use softtimer_async::{Handle, Runtime};

const BOUND: Duration = Duration::from_secs(10);

/// Whether `task` ends (within [`BOUND`]) cancelled.
async fn ends_cancelled<T>(task: softtimer_async::JoinHandle<T>) -> bool {
    timeout(BOUND, task)
        .await
        .unwrap()
        .is_err_and(|e| e.is_cancelled())
}

#[test]
fn a_panicking_task_is_reported_by_its_handle_and_the_runtime_goes_on() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let bad = softtimer_async::spawn(async {
            sleep(Duration::from_micros(10)).await;
            panic!("the task's own bug")
        });
        // A detached task that panics takes nothing down either.
        drop(softtimer_async::spawn(async { panic!("nobody listens") }));
        let local = softtimer_async::spawn_local(async { panic!("local too") });
        let err = timeout(BOUND, bad).await.unwrap().unwrap_err();
        assert!(err.is_panic() && !err.is_cancelled());
        assert_eq!(err.panic_message(), Some("the task's own bug"));
        let payload = err.into_panic();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the task's own bug"));
        // As an I/O error (tokio's conversion), and a cancelled task's error handed back.
        let io = std::io::Error::from(
            timeout(BOUND, softtimer_async::spawn(async { panic!("as io") }))
                .await
                .unwrap()
                .unwrap_err(),
        );
        assert_eq!(io.kind(), std::io::ErrorKind::Other);
        assert_eq!(io.to_string(), "task panicked: as io");
        let asleep = softtimer_async::spawn(sleep(Duration::from_secs(3600)));
        asleep.abort();
        let cancelled = timeout(BOUND, asleep).await.unwrap().unwrap_err();
        assert!(cancelled.try_into_panic().unwrap_err().is_cancelled());
        assert!(local.await.unwrap_err().is_panic());
        // The loop still runs tasks and timers.
        let fine = softtimer_async::spawn(async {
            sleep(Duration::from_micros(50)).await;
            5
        });
        assert_eq!(timeout(BOUND, fine).await.unwrap().unwrap(), 5);
    });
    // And block_on again on the same runtime.
    assert_eq!(rt.block_on(async { 1 }), 1);
}

#[test]
fn a_waker_sent_to_another_thread_wakes_a_parked_loop() {
    let rt = Runtime::new().unwrap();
    let before = rt.stats();
    let (tx, rx) = mpsc::channel::<std::task::Waker>();
    let waker_thread = std::thread::spawn(move || {
        let waker = rx.recv().unwrap();
        // Long enough for the loop to park (it has nothing else to do).
        std::thread::sleep(Duration::from_millis(30));
        waker.wake();
    });
    let woken = rt.block_on(async move {
        let mut sent = Some(tx);
        let wait = poll_fn(move |cx| match sent.take() {
            Some(tx) => {
                tx.send(cx.waker().clone()).unwrap();
                Poll::Pending
            }
            None => Poll::Ready(()),
        });
        // Bounded: a lost wake fails the test instead of hanging it.
        timeout(BOUND, wait).await.is_ok()
    });
    waker_thread.join().unwrap();
    assert!(woken, "the wake from another thread was lost");
    let after = rt.stats();
    assert!(
        after.blocked_parks > before.blocked_parks,
        "the loop never blocked"
    );
}

#[test]
fn a_task_woken_from_another_thread_runs_on_its_own_loop() {
    let rt = Runtime::new().unwrap();
    let loop_thread = std::thread::current().id();
    let (tx, rx) = mpsc::channel::<std::task::Waker>();
    std::thread::spawn(move || {
        if let Ok(waker) = rx.recv() {
            std::thread::sleep(Duration::from_millis(10));
            waker.wake();
        }
    });
    let ran_on = rt.block_on(async move {
        let task = softtimer_async::spawn(async move {
            let mut sent = Some(tx);
            poll_fn(move |cx| match sent.take() {
                Some(tx) => {
                    tx.send(cx.waker().clone()).unwrap();
                    Poll::Pending
                }
                None => Poll::Ready(()),
            })
            .await;
            std::thread::current().id()
        });
        timeout(BOUND, task).await.unwrap().unwrap()
    });
    assert_eq!(ran_on, loop_thread);
    assert!(rt.stats().remote_wakes >= 1);
}

#[test]
fn tasks_stay_on_the_loop_they_were_spawned_onto() {
    let rt = Runtime::builder().threads(2).pin(false).build().unwrap();
    let handle = rt.handle();
    assert_eq!(handle.threads(), 2);
    let names = rt.block_on(async move {
        let mut names = Vec::new();
        for i in 0..4 {
            let task = handle.spawn_on(i, async move {
                let before = std::thread::current().id();
                sleep(Duration::from_micros(100)).await;
                // Spawned from a loop thread: the child stays on it too.
                let child = softtimer_async::spawn(async { std::thread::current().id() });
                let child = child.await.unwrap();
                assert_eq!(child, before);
                assert_eq!(std::thread::current().id(), before);
                std::thread::current().name().map(String::from)
            });
            names.push(timeout(BOUND, task).await.unwrap().unwrap());
        }
        names
    });
    let worker = Some("softtimer-async-1".to_string());
    assert_eq!(names[1], worker);
    assert_eq!(names[3], worker);
    assert_ne!(names[0], worker);
}

#[test]
fn a_handle_spawns_from_a_thread_that_runs_no_loop() {
    let rt = Runtime::new().unwrap();
    let handle = rt.handle();
    let task = std::thread::spawn(move || {
        assert!(Handle::try_current().is_none());
        handle.spawn(async {
            sleep(Duration::from_micros(20)).await;
            "done"
        })
    })
    .join()
    .unwrap();
    assert_eq!(
        rt.block_on(async { timeout(BOUND, task).await })
            .unwrap()
            .unwrap(),
        "done"
    );
}

#[test]
fn bad_input_is_refused_with_a_clear_error() {
    let err = Runtime::builder().threads(0).build().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let sim = softtimer_async::SimClock::new(1_000_000_000);
    let err = Runtime::builder()
        .simulated(sim)
        .threads(2)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("one loop"), "{err}");
    // I/O objects outside a runtime thread: an error, not a panic.
    let std_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let err = softtimer_async::UdpSocket::from_std(std_socket).unwrap_err();
    assert!(err.to_string().contains("runtime thread"), "{err}");
    // Binding or connecting outside one, polled by some other executor: the same error at
    // the first poll, for a name (whose lookup needs the runtime's pool) as for an address.
    let first_poll = |bind: std::pin::Pin<
        &mut dyn std::future::Future<Output = std::io::Result<()>>,
    >| {
        match bind.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            Poll::Ready(Err(err)) => err,
            Poll::Ready(Ok(())) => panic!("bound outside a runtime"),
            Poll::Pending => panic!("pending outside a runtime"),
        }
    };
    for addr in ["127.0.0.1:0", "localhost:0"] {
        let udp = async { softtimer_async::UdpSocket::bind(addr).await.map(drop) };
        let err = first_poll(std::pin::pin!(udp));
        assert!(err.to_string().contains("runtime thread"), "{addr}: {err}");
        let tcp = async { softtimer_async::TcpListener::bind(addr).await.map(drop) };
        let err = first_poll(std::pin::pin!(tcp));
        assert!(err.to_string().contains("runtime thread"), "{addr}: {err}");
        let stream = async { softtimer_async::TcpStream::connect(addr).await.map(drop) };
        let err = first_poll(std::pin::pin!(stream));
        assert!(err.to_string().contains("runtime thread"), "{addr}: {err}");
    }
    // A socket made on the runtime, sending to a name from outside it: the same error (the
    // name's lookup needs the runtime's pool).
    let rt = Runtime::new().unwrap();
    let socket = rt
        .block_on(softtimer_async::UdpSocket::bind("127.0.0.1:0"))
        .unwrap();
    let send = async { socket.send_to(b"x", "localhost:9").await.map(drop) };
    let err = first_poll(std::pin::pin!(send));
    assert!(err.to_string().contains("runtime thread"), "{err}");
}

#[test]
fn entering_a_runtime_lets_synchronous_code_make_sockets_and_spawn_before_block_on() {
    let rt = Runtime::new().unwrap();
    assert!(Handle::try_current().is_none());
    let context = rt.enter();
    assert!(Handle::try_current().is_some());
    // What sync set-up code does with tokio's guard: a socket from std, a task, a timer.
    let std_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let socket = softtimer_async::UdpSocket::from_std(std_socket).unwrap();
    let to = socket.local_addr().unwrap();
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&ran);
    let task = softtimer_async::spawn(async move {
        sleep(Duration::from_micros(100)).await;
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        "slept"
    });
    // Nothing runs outside block_on.
    std::thread::sleep(Duration::from_millis(2));
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    // block_on inside the guard runs the loop in place, the task and the socket with it;
    // entering again inside it changes nothing.
    let (said, got) = rt.block_on(async {
        let again = rt.enter();
        drop(again);
        socket.send_to(b"made before", to).await.unwrap();
        let mut buf = [0u8; 16];
        let (n, _) = timeout(BOUND, socket.recv_from(&mut buf))
            .await
            .unwrap()
            .unwrap();
        (
            timeout(BOUND, task).await.unwrap().unwrap(),
            buf[..n].to_vec(),
        )
    });
    assert_eq!((said, &got[..]), ("slept", &b"made before"[..]));
    assert!(
        Handle::try_current().is_some(),
        "still in the context after block_on"
    );
    // Another runtime's block_on inside this context sets it aside and gives it back.
    let other = Runtime::new().unwrap();
    assert_eq!(other.block_on(async { 5 }), 5);
    assert!(Handle::try_current().is_some());
    drop(context);
    assert!(Handle::try_current().is_none());
    let err =
        softtimer_async::UdpSocket::from_std(std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .unwrap_err();
    assert!(err.to_string().contains("runtime thread"), "{err}");
}

#[test]
#[should_panic(expected = "dropped out of order")]
fn context_guards_dropped_out_of_order_are_refused() {
    let (first, second) = (Runtime::new().unwrap(), Runtime::new().unwrap());
    let outer = first.enter();
    let inner = second.enter();
    drop(outer);
    drop(inner);
}

#[test]
fn a_context_guard_dropped_inside_a_later_block_on_is_refused_and_leaves_nothing_behind() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let rt = Runtime::new().unwrap();
    let guard = rt.enter();
    let refused = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(async move {
            drop(guard);
        })
    }));
    let message = refused.unwrap_err();
    let message = message.downcast_ref::<&str>().copied().unwrap_or_default();
    assert!(message.contains("dropped out of order"), "{message}");
    // Dropping the runtime shuts its loop down and takes the thread out of its context.
    drop(rt);
    assert!(Handle::try_current().is_none());
    let rt = Runtime::new().unwrap();
    assert_eq!(rt.block_on(async { 3 }), 3);
}

#[test]
#[should_panic(expected = "EnterGuard held across an .await")]
fn a_context_guard_held_across_an_await_in_a_task_is_caught() {
    let (running, other) = (Runtime::new().unwrap(), Runtime::new().unwrap());
    running.block_on(async {
        let task = softtimer_async::spawn_local(async move {
            let _context = other.enter();
            softtimer_async::yield_now().await;
        });
        let _ = task.await;
    });
}

#[test]
#[should_panic(expected = "EnterGuard held across an .await")]
fn a_context_guard_held_across_an_await_is_caught() {
    let (running, other) = (Runtime::new().unwrap(), Runtime::new().unwrap());
    running.block_on(async {
        let _context = other.enter();
        softtimer_async::yield_now().await;
    });
}

#[test]
#[should_panic(expected = "cannot block on a runtime from a thread that already runs one")]
fn block_on_inside_a_runtime_is_refused() {
    let rt = Runtime::new().unwrap();
    let inner = Runtime::new().unwrap();
    rt.block_on(async move { inner.block_on(async {}) });
}

#[test]
fn dropping_a_runtime_cancels_its_tasks() {
    let rt = Runtime::new().unwrap();
    let handle = rt.handle();
    let (tx, rx) = mpsc::channel::<()>();
    struct Dropped(mpsc::Sender<()>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    let guard = Dropped(tx);
    let polled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pending = rt.spawn({
        let polled = std::sync::Arc::clone(&polled);
        async move {
            let _guard = guard;
            // Set in the poll that arms the sleep below.
            polled.store(true, std::sync::atomic::Ordering::SeqCst);
            sleep(Duration::from_secs(3600)).await;
        }
    });
    // Until the task is asleep (it runs when block_on does). Not by counting pending
    // timers: this future's own timeout is one of them.
    let asleep = rt.block_on(async move {
        let wait = async {
            while !polled.load(std::sync::atomic::Ordering::SeqCst) {
                sleep(Duration::from_micros(50)).await;
            }
        };
        timeout(BOUND, wait).await.is_ok()
    });
    assert!(asleep);
    assert_eq!(handle.pending_timers(), 1);
    drop(rt);
    // Its future was dropped (on its loop), its event with it.
    rx.recv_timeout(BOUND).unwrap();
    assert_eq!(handle.pending_timers(), 0);
    let other = Runtime::new().unwrap();
    assert!(other.block_on(pending).unwrap_err().is_cancelled());
}

#[test]
fn a_handle_spawns_from_outside_onto_workers_that_run_without_block_on() {
    // Loop 0 runs only inside block_on: a spawn from outside must not land there, or it
    // would wait until someone calls block_on.
    let rt = Runtime::builder().threads(3).pin(false).build().unwrap();
    let (tx, rx) = mpsc::channel();
    for i in 0..4 {
        let tx = tx.clone();
        drop(rt.handle().spawn(async move {
            sleep(Duration::from_micros(50)).await;
            let _ = tx.send((i, std::thread::current().name().map(String::from)));
        }));
    }
    let mut names = Vec::new();
    for _ in 0..4 {
        let (_, name) = rx
            .recv_timeout(BOUND)
            .expect("a task spawned from outside ran");
        names.push(name.expect("worker threads are named"));
    }
    names.sort();
    assert_eq!(
        names,
        [
            "softtimer-async-1",
            "softtimer-async-1",
            "softtimer-async-2",
            "softtimer-async-2"
        ]
    );
}

#[test]
fn the_building_thread_gets_its_cpus_back_when_the_runtime_is_dropped() {
    let before = rustix::thread::sched_getaffinity(None).unwrap();
    if before.count() < 2 {
        eprintln!("skipped: this thread may use only one CPU, so the runtime pins nothing");
        return;
    }
    let rt = Runtime::builder().threads(2).build().unwrap();
    let pinned = rustix::thread::sched_getaffinity(None).unwrap();
    assert_eq!(
        pinned.count(),
        1,
        "loop 0's thread is pinned while the runtime lives"
    );
    drop(rt);
    assert_eq!(rustix::thread::sched_getaffinity(None).unwrap(), before);
}

#[test]
fn zero_and_passed_deadlines_and_a_first_tick_complete_at_their_first_poll_inside_a_task() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let task = softtimer_async::spawn(async {
            // Time passes in the batch of polls this task runs in.
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_micros(20) {
                std::hint::spin_loop();
            }
            let mut ready = Vec::new();
            let mut zero = std::pin::pin!(sleep(Duration::ZERO));
            let mut passed = std::pin::pin!(softtimer_async::time::sleep_until(
                std::time::Instant::now() - Duration::from_secs(1)
            ));
            let mut ticks = softtimer_async::time::interval(Duration::from_secs(1));
            poll_fn(|cx| {
                ready.push(zero.as_mut().poll(cx).is_ready());
                ready.push(passed.as_mut().poll(cx).is_ready());
                ready.push(ticks.poll_tick(cx).is_ready());
                Poll::Ready(())
            })
            .await;
            ready
        });
        let ready = timeout(BOUND, task).await.unwrap().unwrap();
        assert_eq!(
            ready,
            [true, true, true],
            "sleep(0), sleep_until(past), first tick"
        );
    });
    assert_eq!(
        rt.handle().pending_timers(),
        0,
        "none of them armed an event"
    );
}

#[test]
fn a_task_that_always_finds_its_socket_ready_or_its_timer_passed_yields_to_the_others() {
    use std::cell::Cell;
    use std::rc::Rc;
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let socket = softtimer_async::UdpSocket::bind("127.0.0.1:0")
            .await
            .unwrap();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..200 {
            sender
                .send_to(b"ready", socket.local_addr().unwrap())
                .unwrap();
        }
        let ran = Rc::new(Cell::new(false));
        let (flag, seen) = (Rc::clone(&ran), Rc::clone(&ran));
        let busy = softtimer_async::spawn_local(async move {
            let mut buf = [0u8; 16];
            socket.recv_from(&mut buf).await.unwrap();
            // Ready to run from now on; it runs only if this task yields.
            drop(softtimer_async::spawn_local(async move { flag.set(true) }));
            let mut received = 1;
            while !seen.get() && received < 200 {
                socket.recv_from(&mut buf).await.unwrap();
                received += 1;
            }
            let after_socket = received;
            seen.set(false);
            let flag = Rc::clone(&seen);
            drop(softtimer_async::spawn_local(async move { flag.set(true) }));
            let mut slept = 0;
            while !seen.get() && slept < 1_000 {
                sleep(Duration::ZERO).await;
                slept += 1;
            }
            (after_socket, slept)
        });
        let (received, slept) = timeout(BOUND, busy).await.unwrap().unwrap();
        assert!(
            received < 200,
            "the other task ran only after all 200 datagrams"
        );
        assert!(
            slept < 1_000,
            "the other task ran only after 1,000 zero sleeps"
        );
    });
}

#[test]
fn yield_now_lets_the_other_ready_tasks_run_first() {
    let rt = Runtime::new().unwrap();
    let (tx, rx) = mpsc::channel();
    rt.block_on(async move {
        let tx2 = tx.clone();
        let first = softtimer_async::spawn(async move {
            tx.send("first").unwrap();
            softtimer_async::yield_now().await;
            tx.send("first again").unwrap();
        });
        let second = softtimer_async::spawn(async move { tx2.send("second").unwrap() });
        first.await.unwrap();
        second.await.unwrap();
    });
    let order: Vec<_> = rx.try_iter().collect();
    assert_eq!(order, ["first", "second", "first again"]);
}

#[test]
fn a_timeout_fires_while_the_future_it_bounds_spends_every_poll_s_budget() {
    // On a thread of its own, so that a timeout that never fires fails the test, not hangs it.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = Runtime::new().unwrap();
        let result = rt.block_on(async {
            // Never pending for a reason of its own: it yields only when its budget is spent.
            let busy = async {
                loop {
                    sleep(Duration::ZERO).await;
                }
            };
            timeout(Duration::from_millis(2), busy).await
        });
        let _ = tx.send(result.is_err());
    });
    assert_eq!(rx.recv_timeout(BOUND), Ok(true), "the timeout elapsed");
}

#[test]
fn the_budget_is_unlimited_again_after_a_runtime_s_poll() {
    let rt = Runtime::new().unwrap();
    let passed = rt.block_on(async {
        // Spend this poll's whole budget and more.
        for _ in 0..300 {
            sleep(Duration::ZERO).await;
        }
        let past = std::time::Instant::now() - Duration::from_secs(1);
        (0..200)
            .map(|_| Box::pin(softtimer_async::time::sleep_until(past)))
            .collect::<Vec<_>>()
    });
    // Polled by hand outside the runtime's polls: never told to yield.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let ready = passed
        .into_iter()
        .map(|mut s| s.as_mut().poll(&mut cx).is_ready())
        .filter(|&r| r)
        .count();
    assert_eq!(ready, 200);
}

#[test]
fn a_soft_runtime_keeps_what_quinn_makes_from_outside_on_one_worker_loop() {
    use quinn::Runtime as _;
    let rt = Runtime::builder().threads(3).pin(false).build().unwrap();
    let soft = softtimer_async::quinn::SoftRuntime::new(rt.handle());
    let (tx, rx) = mpsc::channel();
    // As quinn does for an endpoint made on this thread: its driver, then more.
    for _ in 0..2 {
        let tx = tx.clone();
        soft.spawn(Box::pin(async move {
            let _ = tx.send(std::thread::current().name().map(String::from));
        }));
    }
    let first = rx.recv_timeout(BOUND).unwrap().unwrap();
    let second = rx.recv_timeout(BOUND).unwrap().unwrap();
    assert_eq!(first, second, "one endpoint's work on two loops");
    assert!(
        first.starts_with("softtimer-async-"),
        "on {first}, not a worker loop"
    );
}

#[test]
fn the_stats_count_the_idle_spin_of_a_spinning_precision_not_of_a_blocking_one() {
    use softtimer_async::Precision;
    let spun = |precision| {
        let rt = Runtime::builder().precision(precision).build().unwrap();
        let start = std::time::Instant::now();
        rt.block_on(async {
            for _ in 0..4 {
                sleep(Duration::from_micros(500)).await;
            }
        });
        let elapsed = start.elapsed();
        let spin = rt.stats().idle_spin;
        // Measured on the loop's clock, whose rate may differ from the wall's by parts per
        // million (a part in a hundred allowed).
        assert!(spin <= elapsed + elapsed / 100, "{spin:?} of {elapsed:?}");
        spin
    };
    // A busy loop spins through every wait shorter than its backstop interval: about 2 ms
    // here (less a sleep the thread was held off for until it was due).
    let busy = spun(Precision::Busy);
    assert!(busy >= Duration::from_micros(400), "{busy:?}");
    // A coarse one blocks instead, spinning only the µs after a wake-up a hair early: were
    // its blocks counted, it would be near busy's 2 ms.
    let coarse = spun(Precision::Coarse);
    assert!(coarse * 4 < busy, "coarse {coarse:?}, busy {busy:?}");
}

#[test]
fn the_idle_spin_is_summed_over_the_loops() {
    use softtimer_async::Precision;
    let rt = Runtime::builder()
        .threads(2)
        .pin(false)
        .precision(Precision::Busy)
        .build()
        .unwrap();
    let handle = rt.handle();
    // Loop 1 sleeps; loop 0 (block_on) only waits for it, with no timer of its own, so it
    // blocks rather than spins: the spin counted is loop 1's.
    let sleeper = handle.spawn_on(1, async {
        for _ in 0..4 {
            sleep(Duration::from_micros(500)).await;
        }
    });
    rt.block_on(async { timeout(BOUND, sleeper).await.unwrap().unwrap() });
    let spin = rt.stats().idle_spin;
    // About 2 ms, less any sleep the thread was held off for until it was due.
    assert!(spin >= Duration::from_micros(400), "{spin:?}");
}

/// Records the thread its value is dropped on.
struct DropsOn(mpsc::Sender<std::thread::ThreadId>);

impl Drop for DropsOn {
    fn drop(&mut self) {
        let _ = self.0.send(std::thread::current().id());
    }
}

#[test]
fn abort_by_reference_or_from_another_thread_drops_the_future_on_its_loop() {
    let rt = Runtime::builder().threads(2).build().unwrap();
    let handle = rt.handle();
    let (tx, dropped) = mpsc::channel();
    let (loop_tx, on_loop) = mpsc::channel();
    // A task on loop 1 that would sleep for an hour, holding a value that reports its drop.
    let guard = DropsOn(tx);
    let task = handle.spawn_on(1, async move {
        let _guard = guard;
        let _ = loop_tx.send(std::thread::current().id());
        sleep(Duration::from_secs(3600)).await;
    });
    let loop_thread = on_loop.recv_timeout(BOUND).unwrap();
    let stop = task.abort_handle();
    assert!(!stop.is_finished() && !task.is_finished());
    // From this thread, which runs no loop: the future is dropped on its own, and the
    // handle completes only once it has been (what it held is free by then).
    std::thread::spawn(move || stop.abort()).join().unwrap();
    let err = rt
        .block_on(async { timeout(BOUND, task).await })
        .unwrap()
        .unwrap_err();
    assert!(err.is_cancelled() && !err.is_panic());
    assert_eq!(dropped.try_recv().unwrap(), loop_thread);

    // An AbortHandle outliving its JoinHandle still cancels; a finished task's output stays
    // for a handle that never made an AbortHandle.
    let (tx, dropped) = mpsc::channel();
    let guard = DropsOn(tx);
    let orphan = handle.spawn_on(1, async move {
        let _guard = guard;
        sleep(Duration::from_secs(3600)).await;
    });
    let stop = orphan.abort_handle();
    drop(orphan);
    stop.abort();
    dropped.recv_timeout(BOUND).unwrap();
    let mut waited = Duration::ZERO;
    while !stop.is_finished() {
        assert!(waited < BOUND, "an aborted task never counted as finished");
        std::thread::sleep(Duration::from_millis(1));
        waited += Duration::from_millis(1);
    }

    rt.block_on(async {
        // By reference, on the same loop, a local task too; the handle stays usable.
        let local = softtimer_async::spawn_local(sleep(Duration::from_secs(3600)));
        local.abort();
        let local = timeout(BOUND, local).await.unwrap();
        assert!(local.unwrap_err().is_cancelled());
        // A handle polled while its aborted task is being cancelled, then left: it still
        // comes to say it has finished.
        let mut left = softtimer_async::spawn(sleep(Duration::from_secs(3600)));
        left.abort();
        let _ = timeout(Duration::from_nanos(1), &mut left).await;
        let mut turns = 0;
        while !left.is_finished() {
            assert!(turns < 100_000, "an aborted, polled handle never finished");
            softtimer_async::yield_now().await;
            turns += 1;
        }
        assert!(left.await.unwrap_err().is_cancelled());
        // A task that finished before the abort keeps its output, with or without an
        // AbortHandle.
        let plain = softtimer_async::spawn(async { 6 });
        while !plain.is_finished() {
            softtimer_async::yield_now().await;
        }
        plain.abort();
        assert_eq!(plain.await.unwrap(), 6);
        let done = softtimer_async::spawn(async { 7 });
        let stop = done.abort_handle();
        while !done.is_finished() {
            softtimer_async::yield_now().await;
        }
        assert!(stop.is_finished());
        done.abort();
        assert_eq!(done.await.unwrap(), 7);
        // A task aborted before it ever ran never runs.
        let (ran_tx, ran) = mpsc::channel::<()>();
        let never = softtimer_async::spawn(async move { ran_tx.send(()).unwrap() });
        never.abort();
        assert!(ends_cancelled(never).await);
        assert!(ran.try_recv().is_err());
    });
}

fn member_with_a_bug() -> Result<u32, ()> {
    panic!("a member's bug")
}

#[test]
fn a_join_set_gives_outputs_as_tasks_finish_on_any_loop_and_aborts_what_it_drops() {
    use softtimer_async::JoinSet;
    let rt = Runtime::builder().threads(2).build().unwrap();
    let handle = rt.handle();
    let main = std::thread::current().id();
    let (tx, dropped) = mpsc::channel();
    let mut set = JoinSet::new();
    // From outside the loops: onto the worker loop, another thread.
    set.spawn_on(
        async move {
            sleep(Duration::from_millis(2)).await;
            assert_ne!(std::thread::current().id(), main);
            Ok(2)
        },
        &handle,
    );
    rt.block_on(async move {
        assert_eq!(set.len(), 1);
        // On this loop: a panic, and a task aborted through its handle.
        set.spawn(async { member_with_a_bug() });
        let stop = set.spawn(async {
            sleep(Duration::from_secs(3600)).await;
            Ok(0)
        });
        set.spawn_local(async { Ok(1) });
        assert_eq!(set.len(), 4);
        stop.abort();
        let (mut outputs, mut panics, mut cancelled) = (Vec::new(), 0, 0);
        while let Some(out) = timeout(BOUND, set.join_next()).await.unwrap() {
            match out {
                Ok(Ok(n)) => outputs.push(n),
                Ok(Err(())) => unreachable!(),
                Err(e) if e.is_panic() => panics += 1,
                Err(e) => {
                    assert!(e.is_cancelled());
                    cancelled += 1
                }
            }
        }
        outputs.sort();
        assert_eq!((outputs, panics, cancelled), (vec![1, 2], 1, 1));
        assert!(set.is_empty());

        // Tasks that all finish before the set is looked at come back in the order they
        // finished (here, the order they ran).
        for i in 0..5 {
            set.spawn(async move { Ok(i) });
        }
        softtimer_async::yield_now().await;
        let mut order = Vec::new();
        while let Some(out) = set.try_join_next() {
            order.push(out.unwrap().unwrap());
        }
        assert_eq!(order, [0, 1, 2, 3, 4]);

        // A join_next dropped while it waits (its timeout first) loses nothing.
        set.spawn(async {
            sleep(Duration::from_millis(5)).await;
            Ok(5)
        });
        assert!(
            timeout(Duration::from_micros(10), set.join_next())
                .await
                .is_err()
        );
        assert!(set.try_join_next().is_none());
        assert_eq!(
            timeout(BOUND, set.join_next())
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
            Ok(5)
        );

        // Dropping the set aborts its tasks (their futures are dropped); detached ones run on,
        // and a set detached from its tasks is empty and usable.
        let mut set = JoinSet::new();
        let guard = DropsOn(tx);
        set.spawn(async move {
            let _guard = guard;
            sleep(Duration::from_secs(3600)).await;
        });
        let mut detached = JoinSet::new();
        let (ran_tx, ran) = mpsc::channel();
        detached.spawn(async move {
            sleep(Duration::from_millis(1)).await;
            ran_tx.send(()).unwrap();
        });
        detached.detach_all();
        assert!(detached.is_empty() && detached.join_next().await.is_none());
        detached.spawn(async {});
        assert!(
            timeout(BOUND, detached.join_next())
                .await
                .unwrap()
                .unwrap()
                .is_ok()
        );
        drop(detached);
        drop(set);
        // The aborted member's future is dropped when this loop next runs its tasks.
        softtimer_async::yield_now().await;
        let mut waited = Duration::ZERO;
        while ran.try_recv().is_err() {
            assert!(waited < BOUND, "a detached task did not run");
            sleep(Duration::from_millis(1)).await;
            waited += Duration::from_millis(1);
        }
    });
    dropped.recv_timeout(BOUND).unwrap();
}

#[test]
fn abort_reaches_a_running_local_task_from_another_thread_and_queued_blocking_work() {
    let rt = Runtime::builder().max_blocking_threads(1).build().unwrap();
    let handle = rt.handle();
    rt.block_on(async move {
        // A local task that has run and waits: aborted from a thread that runs no loop.
        let (polled_tx, polled) = mpsc::channel();
        let local = softtimer_async::spawn_local(async move {
            polled_tx.send(()).unwrap();
            sleep(Duration::from_secs(3600)).await;
        });
        softtimer_async::yield_now().await;
        polled.try_recv().unwrap();
        let stop = local.abort_handle();
        std::thread::spawn(move || stop.abort()).join().unwrap();
        assert!(ends_cancelled(local).await);

        // Blocking work queued behind the pool's only thread: aborted, it never runs.
        let (release, wait) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel::<()>();
        let busy = handle.spawn_blocking(move || {
            started_tx.send(()).unwrap();
            let _ = wait.recv_timeout(BOUND);
        });
        started.recv_timeout(BOUND).unwrap();
        let (ran_tx, ran) = mpsc::channel::<()>();
        let queued = handle.spawn_blocking(move || ran_tx.send(()).unwrap());
        queued.abort();
        release.send(()).unwrap();
        assert!(timeout(BOUND, busy).await.unwrap().is_ok());
        assert!(ends_cancelled(queued).await);
        assert!(ran.try_recv().is_err());
    });
}
