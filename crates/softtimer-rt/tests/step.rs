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
    assert_eq!(handle.pending(), 1);
    let start = Instant::now();
    while fired.load(Ordering::Relaxed) == 0 && start.elapsed() < Duration::from_secs(5) {
        ev.park(|_, _| {}).unwrap();
    }
    assert_eq!(fired.load(Ordering::Relaxed), 1);
    assert_eq!(handle.pending(), 0);
}
