//! The loop's step form (`poll_io`, `park`), its waker and its handle: what an async
//! runtime's executor and futures use.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use softtimer::Clock;
use softtimer_rt::{EventLoop, Interest, LoopConfig, SpinWindow};

fn counting_loop(config: LoopConfig) -> (EventLoop<u32>, Arc<AtomicUsize>) {
    let fired = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&fired);
    let ev = EventLoop::new(config, move |_, _| {
        count.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    (ev, fired)
}

#[test]
fn a_park_blocks_once_then_spins_to_the_event() {
    let config = LoopConfig {
        spin_window: SpinWindow::Fixed(Duration::from_micros(200)),
        ..LoopConfig::default()
    };
    let (mut ev, fired) = counting_loop(config);
    let t = ev.span(Duration::from_millis(2));
    let scheduled = ev.clock().now();
    ev.cx().schedule_soft_event(t, 1).unwrap();
    let (mut blocked, mut parks) = (0, 0);
    let start = Instant::now();
    while fired.load(Ordering::Relaxed) == 0 && start.elapsed() < Duration::from_secs(5) {
        let parked = ev.park(|_, _| {}).unwrap();
        parks += 1;
        blocked += usize::from(parked.blocked);
    }
    assert_eq!(fired.load(Ordering::Relaxed), 1);
    assert!(ev.clock().now().saturating_since(scheduled) > t);
    // Blocked for the long part of the wait, once or, interrupted, a few times; never
    // once per spin slice.
    assert!(
        (1..=3).contains(&blocked),
        "blocked {blocked} times in {parks} parks"
    );
}

#[test]
fn a_waker_from_another_thread_ends_a_blocked_park() {
    let (mut ev, _) = counting_loop(LoopConfig::default());
    let waker = ev.waker();
    assert!(!ev.take_wake());
    let thread = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        waker.wake();
    });
    let start = Instant::now();
    // Nothing pending: the park blocks with no timeout until the wake.
    let parked = ev.park(|_, _| {}).unwrap();
    assert!(parked.blocked);
    assert!(ev.take_wake());
    assert!(!ev.take_wake(), "a wake is taken once");
    assert!(start.elapsed() < Duration::from_secs(5));
    thread.join().unwrap();
    // A wake that came before the park: it does not block at all.
    ev.waker().wake();
    let parked = ev.park(|_, _| {}).unwrap();
    assert!(!parked.blocked);
    assert!(ev.take_wake());
}

#[test]
fn poll_io_and_park_hand_ready_descriptors_over_edge_triggered() {
    let (mut ev, _) = counting_loop(LoopConfig::default());
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    ev.handle()
        .register(&socket, Interest::READABLE.edge(), 9)
        .unwrap();
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.send_to(b"x", socket.local_addr().unwrap()).unwrap();
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.is_empty() && start.elapsed() < Duration::from_secs(5) {
        ev.park(|_, ready| seen.push(ready.token)).unwrap();
    }
    assert_eq!(seen, [9]);
    // Edge-triggered: not reported again while the datagram stays unread.
    assert_eq!(ev.poll_io(|_, ready| seen.push(ready.token)).unwrap(), 0);
}

#[test]
fn a_handle_schedules_and_cancels_from_another_thread() {
    let (mut ev, fired) = counting_loop(LoopConfig::default());
    let handle = ev.handle();
    let keep = handle.clone();
    std::thread::spawn(move || {
        let t = keep.span(Duration::from_micros(300));
        keep.schedule_soft_event(t, 1).unwrap();
        let gone = keep.schedule_soft_event(t, 2).unwrap();
        assert_eq!(keep.cancel(gone), Some(2));
    })
    .join()
    .unwrap();
    // The cancelled one is gone; the other waits, or (on a loaded machine, past its time
    // and the backstop's interval) the backstop has fired it already.
    assert_eq!(handle.pending() + fired.load(Ordering::Relaxed), 1);
    let start = Instant::now();
    while fired.load(Ordering::Relaxed) == 0 && start.elapsed() < Duration::from_secs(5) {
        ev.park(|_, _| {}).unwrap();
    }
    assert_eq!(fired.load(Ordering::Relaxed), 1);
    assert_eq!(handle.pending(), 0);
}

/// An event scheduled for a time already past when the loop was built (a reading taken
/// before it) fires at the next trigger state, with no backstop to fall back on: it is not
/// taken for one due at the far end of the clock.
#[test]
fn an_event_due_before_the_loop_was_built_fires_at_once() {
    let before = softtimer::SystemClock::new().now();
    let (mut ev, fired) = counting_loop(LoopConfig {
        backstop: false,
        ..LoopConfig::default()
    });
    ev.cx()
        .schedule_at(before + softtimer::Span::from_ticks(1), 7)
        .unwrap();
    let start = Instant::now();
    while fired.load(Ordering::Relaxed) == 0 && start.elapsed() < Duration::from_secs(2) {
        ev.park(|_, _| {}).unwrap();
    }
    assert_eq!(
        fired.load(Ordering::Relaxed),
        1,
        "the past event never fired"
    );
}

/// An event scheduled through a handle by a closure that then panics is still seen by the
/// loop's trigger states (the change is published however the closure ends): it fires, with
/// no backstop to fall back on.
#[test]
fn an_event_scheduled_before_a_panic_under_the_lock_still_fires() {
    let (mut ev, fired) = counting_loop(LoopConfig {
        backstop: false,
        ..LoopConfig::default()
    });
    let handle = ev.handle();
    let soon = ev.clock().now() + ev.span(Duration::from_micros(100));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handle.with_timers(|t| {
            t.schedule_at(soon, 1).unwrap();
            panic!("after scheduling");
        })
    }));
    assert!(panicked.is_err());
    // Wakes the loop now and then, so that a park blocked for want of the event ends (the
    // test then fails instead of hanging).
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let nudger = {
        let (done, waker) = (Arc::clone(&done), ev.waker());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                waker.wake();
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let start = Instant::now();
    while fired.load(Ordering::Relaxed) == 0 && start.elapsed() < Duration::from_secs(2) {
        ev.park(|_, _| {}).unwrap();
        ev.take_wake();
    }
    done.store(true, Ordering::Relaxed);
    nudger.join().unwrap();
    assert_eq!(fired.load(Ordering::Relaxed), 1, "the event was never seen");
}
