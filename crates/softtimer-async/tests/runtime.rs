//! The executor: panics, wakes from other threads, several loops.

use std::future::poll_fn;
use std::sync::mpsc;
use std::task::Poll;
use std::time::Duration;

use softtimer_async::time::{sleep, timeout};
use softtimer_async::{Handle, Runtime};

const BOUND: Duration = Duration::from_secs(10);

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
        assert!(err.into_panic().is_some());
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
    // I/O objects outside a runtime thread: an error, not a panic.
    let err = softtimer_async::UdpSocket::bind("127.0.0.1:0").unwrap_err();
    assert!(err.to_string().contains("runtime thread"), "{err}");
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
    let pending = rt.spawn(async move {
        let _guard = guard;
        sleep(Duration::from_secs(3600)).await;
    });
    // Until the task is asleep (it runs when block_on does).
    let asleep = rt.block_on({
        let handle = handle.clone();
        async move {
            let wait = async {
                while handle.pending_timers() == 0 {
                    sleep(Duration::from_micros(50)).await;
                }
            };
            timeout(BOUND, wait).await.is_ok()
        }
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
