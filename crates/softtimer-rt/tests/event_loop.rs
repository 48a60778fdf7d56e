//! The event loop on the real clock and real sockets.

use std::io::Write;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use softtimer::{Clock, Fired, SoftTimers, Span, SystemClock, TriggerSource};
use softtimer_rt::{
    DeadlineDesign, EventLoop, IdlePolicy, Interest, LoopConfig, RecvBatch, RtError, SpinWindow,
    TimerMode,
};

fn config() -> LoopConfig {
    LoopConfig {
        stats: true,
        ..LoopConfig::default()
    }
}

/// Stops `ev` from another thread after `after`, so that no test can hang.
fn stop_after<E: Send + 'static>(ev: &EventLoop<E>, after: Duration) {
    let stop = ev.stop_handle();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        stop.stop();
    });
}

/// Stops `ev` as soon as `flag` is set (watched from another thread), or after 2 s at most.
fn stop_once_set<E: Send + 'static>(ev: &EventLoop<E>, flag: &Arc<AtomicU64>) {
    let stop = ev.stop_handle();
    let watched = Arc::clone(flag);
    std::thread::spawn(move || {
        let start = Instant::now();
        while watched.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.stop();
    });
}

#[test]
fn every_io_helper_is_a_trigger_state_of_its_source() {
    let mut ev: EventLoop<()> = EventLoop::new(config(), |_, _| {}).unwrap();
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    a.connect(b_addr).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();

    let before = |ev: &EventLoop<()>, s| ev.stats().unwrap().triggers(s);
    let check =
        |ev: &mut EventLoop<()>, source, f: &mut dyn FnMut(&mut softtimer_rt::LoopCx<'_, ()>)| {
            let n = before(ev, source);
            f(&mut ev.cx());
            assert_eq!(before(ev, source), n + 1, "{source}");
        };
    let mut buf = [0u8; 64];
    check(&mut ev, TriggerSource::Send, &mut |cx| {
        assert_eq!(cx.send(&a, b"one").unwrap(), 3);
    });
    check(&mut ev, TriggerSource::Send, &mut |cx| {
        assert_eq!(cx.send_to(&b, b"two", a_addr).unwrap(), 3);
    });
    check(&mut ev, TriggerSource::Send, &mut |cx| {
        assert_eq!(
            cx.sendmmsg(&b, &[(b"3", a_addr), (b"4", a_addr)]).unwrap(),
            2
        );
    });
    std::thread::sleep(Duration::from_millis(20));
    check(&mut ev, TriggerSource::Recv, &mut |cx| {
        assert_eq!(cx.recv(&b, &mut buf).unwrap(), 3);
    });
    check(&mut ev, TriggerSource::Recv, &mut |cx| {
        let (n, from) = cx.recv_from(&a, &mut buf).unwrap();
        assert_eq!((n, from), (3, Some(b_addr)));
    });
    let mut batch = RecvBatch::new(8, 64);
    check(&mut ev, TriggerSource::Recv, &mut |cx| {
        assert_eq!(cx.recvmmsg(&a, &mut batch).unwrap(), 2);
    });
    assert_eq!(batch.get(1).unwrap().0, b"4");
    check(&mut ev, TriggerSource::Recv, &mut |cx| {
        // Nothing waiting: the trigger state still happens.
        assert_eq!(
            cx.recv(&a, &mut buf).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
    });
    check(&mut ev, TriggerSource::Accept, &mut |cx| {
        cx.accept(&listener).unwrap();
    });
    let (mut pipe_r, mut pipe_w) = std::io::pipe().unwrap();
    check(&mut ev, TriggerSource::Send, &mut |cx| {
        assert_eq!(cx.write(pipe_w.as_fd(), b"xy").unwrap(), 2);
    });
    check(&mut ev, TriggerSource::Recv, &mut |cx| {
        assert_eq!(cx.read(pipe_r.as_fd(), &mut buf).unwrap(), 2);
    });
    check(&mut ev, TriggerSource::Syscall, &mut |cx| {
        cx.syscall(std::process::id);
    });
    let _ = (&mut pipe_r, pipe_w.flush());
}

#[test]
fn a_blocked_loop_wakes_for_a_soft_event_and_never_fires_early() {
    let fired_at = Arc::new(AtomicU64::new(0));
    let record = Arc::clone(&fired_at);
    let clock = SystemClock::new();
    let mut ev: EventLoop<u64> = EventLoop::new(config(), move |_, ev: Fired<u64>| {
        record.store(clock.now().ticks(), Ordering::SeqCst);
        assert!(ev.now >= ev.due);
    })
    .unwrap();
    stop_once_set(&ev, &fired_at);
    let t = ev.span(Duration::from_micros(5_000));
    let scheduled = clock.now().ticks();
    ev.cx().schedule_soft_event(t, 1).unwrap();
    ev.run(|_, _| {}).unwrap();
    let at = fired_at.load(Ordering::SeqCst);
    assert!(at > 0, "the event never fired");
    assert!(at - scheduled > t.ticks(), "fired early");
    assert_eq!(ev.counters().fired_total(), 1);
}

#[test]
fn an_idle_loop_wakes_once_per_event_not_at_the_wheels_cascades() {
    // Events 117 µs and 5 ms ahead sit in coarse levels of the wheel, whose next cascade is
    // a lower bound of their due time: a loop that blocked only until the cascade would wake,
    // find nothing due, and block again. It blocks until the event itself: one wake-up.
    for ahead_us in [117, 5_000] {
        let fired_at = Arc::new(AtomicU64::new(0));
        let record = Arc::clone(&fired_at);
        let config = LoopConfig {
            spin_window: SpinWindow::Fixed(Duration::ZERO),
            ..config()
        };
        let mut ev: EventLoop<u64> = EventLoop::new(config, move |_, _| {
            record.store(1, Ordering::SeqCst);
        })
        .unwrap();
        // A stop_once_set that would also wake the loop would be counted: stop from the
        // handler's flag only after the count, with a bound on the wait.
        let t = ev.span(Duration::from_micros(ahead_us));
        ev.cx().schedule_soft_event(t, 1).unwrap();
        let stop = ev.stop_handle();
        let watched = Arc::clone(&fired_at);
        std::thread::spawn(move || {
            let start = Instant::now();
            while watched.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.stop();
        });
        ev.run(|_, _| {}).unwrap();
        assert_eq!(ev.counters().fired_total(), 1);
        let stats = ev.stats().unwrap();
        // The first look at the descriptors, the one wake-up for the event, and the wake-up
        // for the stop; a wake-up at a cascade would add one per level.
        let wakes = stats.triggers(TriggerSource::Syscall);
        assert!(
            wakes <= 3,
            "{ahead_us} µs ahead: {wakes} system-call trigger states"
        );
    }
}

#[test]
fn an_event_the_application_lets_run_late_costs_no_spin() {
    for allowed in [true, false] {
        let fired = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&fired);
        let config = LoopConfig {
            spin_window: SpinWindow::Fixed(Duration::from_millis(5)),
            ..config()
        };
        let mut ev: EventLoop<u32> = EventLoop::new(config, move |_, _| {
            count.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        stop_once_set(&ev, &fired);
        let mut cx = ev.cx();
        cx.set_idle_spin(allowed);
        // Due in 3 ms, inside the 5 ms window: a loop allowed to spin spins all of it.
        let t = cx.span(Duration::from_millis(3));
        cx.schedule_soft_event(t, 1).unwrap();
        ev.run(|_, _| {}).unwrap();
        assert_eq!(fired.load(Ordering::SeqCst), 1, "allowed {allowed}");
        let spun = ev.counters().idle_spin_ns;
        if allowed {
            assert!(spun >= 1_000_000, "spun {spun} ns");
        } else {
            assert_eq!(spun, 0, "blocked until the event instead");
        }
    }
}

#[test]
fn due_events_fire_in_order() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&order);
    let mut ev: EventLoop<(u64, u32)> =
        EventLoop::new(config(), move |_, ev: Fired<(u64, u32)>| {
            sink.lock().unwrap().push(ev.event);
        })
        .unwrap();
    // Due times from one base 100 ms ahead (so that none is due before all are scheduled,
    // even on a slow, loaded machine), in a scrambled schedule order.
    let base = ev.clock().now() + ev.span(Duration::from_micros(100_000));
    let mut expected = Vec::new();
    for i in 0..200u32 {
        let us = u64::from((i * 7_919) % 2_000);
        let at = base + ev.span(Duration::from_micros(us));
        ev.cx().schedule_at(at, (us, i)).unwrap();
        expected.push((us, i));
    }
    let (watched, stop) = (Arc::clone(&order), ev.stop_handle());
    std::thread::spawn(move || {
        let start = Instant::now();
        while watched.lock().unwrap().len() < 200 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(2));
        }
        stop.stop();
    });
    ev.run(|_, _| {}).unwrap();
    expected.sort();
    assert_eq!(*order.lock().unwrap(), expected);
}

#[test]
fn a_handler_sends_on_a_socket_and_reschedules_itself() {
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver.set_nonblocking(true).unwrap();
    let sender = Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
    sender.connect(receiver.local_addr().unwrap()).unwrap();
    let tx = Arc::clone(&sender);
    let sent = Arc::new(AtomicU32::new(0));
    let count = Arc::clone(&sent);
    let period = SystemClock::new().span(Duration::from_micros(100));
    let mut ev: EventLoop<u32> = EventLoop::new(
        config(),
        move |timers: &mut SoftTimers<u32>, ev: Fired<u32>| {
            tx.send(&ev.event.to_be_bytes()).unwrap();
            count.fetch_add(1, Ordering::Relaxed);
            if ev.event < 19 {
                timers.schedule_at(ev.due + period, ev.event + 1).unwrap();
            }
        },
    )
    .unwrap();
    ev.cx().register(&receiver, Interest::READABLE, 7).unwrap();
    ev.cx().schedule_soft_event(period, 0).unwrap();
    stop_after(&ev, Duration::from_secs(5));
    let mut got = Vec::new();
    ev.run(|cx, ready| {
        assert_eq!(ready.token, 7);
        let mut buf = [0u8; 4];
        while let Ok(4) = cx.recv(&receiver, &mut buf) {
            got.push(u32::from_be_bytes(buf));
        }
        if got.len() == 20 {
            cx.stop();
        }
    })
    .unwrap();
    assert_eq!(got, (0..20).collect::<Vec<_>>());
    assert_eq!(sent.load(Ordering::Relaxed), 20);
}

/// When trigger states come first, deadlines cost no arming beyond the first: each new
/// deadline is later than the armed one, so the timer is left alone (lazily).
#[test]
fn deadlines_met_by_trigger_states_cost_no_rearming_on_the_loop() {
    for design in DeadlineDesign::ALL {
        met_deadlines_cost_nothing(design);
    }
}

fn met_deadlines_cost_nothing(design: DeadlineDesign) {
    let fired = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&fired);
    let stop_at = 100;
    let cfg = LoopConfig {
        deadlines: design,
        ..config()
    };
    let mut ev: EventLoop<u32> = EventLoop::new(cfg, move |timers, ev: Fired<u32>| {
        count.fetch_add(1, Ordering::Relaxed);
        if ev.event < stop_at {
            let hz = timers.measure_resolution();
            // 50 µs ahead, deadline 200 ms: the idle loop's trigger states come far sooner
            // (the margin covers being descheduled for a while on a busy machine, as when
            // the whole test suite runs on two cores). The spans round as `ev.span` does, so
            // every deadline is later than the one before (truncating ticks per µs would
            // make the second deadline earlier than the first on some clock rates).
            timers
                .schedule_with_deadline_from(
                    ev.now,
                    Span::from_micros(50, hz),
                    Span::from_micros(200_000, hz),
                    ev.event + 1,
                )
                .unwrap();
        }
    })
    .unwrap();
    let (t, deadline) = (
        ev.span(Duration::from_micros(50)),
        ev.span(Duration::from_millis(200)),
    );
    ev.cx().schedule_with_deadline(t, deadline, 0).unwrap();
    stop_after(&ev, Duration::from_millis(300));
    ev.run(|_, _| {}).unwrap();
    assert_eq!(fired.load(Ordering::Relaxed), stop_at as usize + 1);
    let c = ev.counters();
    assert_eq!(
        c.deadline_enforced, 0,
        "{design:?}: the loop stalled past a deadline"
    );
    match design {
        // Every later deadline was later than the armed one: one arm in all.
        DeadlineDesign::LazyTimerfd => assert_eq!(c.deadline_arms, 1),
        // The first deadline wakes a watcher that had none (unless the watcher thread had not
        // gone to sleep yet, as when the other tests keep both cores busy: then it finds the
        // deadline when it does); every later one is later than the one it sleeps until: at
        // most one nudge in all, as the lazy timer has one arm in all.
        DeadlineDesign::Watcher => assert!(c.watcher_nudges <= 1, "{design:?}: {c:?}"),
        DeadlineDesign::WatcherSpin => assert_eq!(c.watcher_nudges, 0, "{design:?}"),
    }
    assert_eq!(c.deadline_enforced, 0, "{design:?}");
    assert_eq!(
        c.fired(TriggerSource::Deadline),
        0,
        "no event needed the deadline timer"
    );
}

#[test]
fn a_handler_can_stop_the_loop_from_any_thread() {
    let mut ev: EventLoop<()> = EventLoop::new(config(), |_, _| {}).unwrap();
    let stop = ev.stop_handle();
    let mut ev2: EventLoop<()> = EventLoop::new(config(), move |_, _| stop.stop()).unwrap();
    ev2.cx().schedule_soft_event(Span::ZERO, ()).unwrap();
    // `ev2`'s handler stops `ev`; run `ev2` briefly to fire it.
    stop_after(&ev2, Duration::from_millis(20));
    ev2.run(|_, _| {}).unwrap();
    // A safety stop at 10 s turns a broken cross-loop stop into a failure, not a hang.
    stop_after(&ev, Duration::from_secs(10));
    let start = Instant::now();
    ev.run(|_, _| {}).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the stop requested from another loop's handler was lost"
    );
}

/// Soft timers and both baselines fire the same events in the same order. The handler only
/// stores into preallocated atomics, so it is async-signal-safe, as the signal baseline
/// requires.
#[test]
fn baselines_fire_the_same_events_in_the_same_order() {
    const N: usize = 60;
    let run = |mode: Option<TimerMode>| -> Vec<u32> {
        let slots: Arc<Vec<AtomicU32>> =
            Arc::new((0..N).map(|_| AtomicU32::new(u32::MAX)).collect());
        let next = Arc::new(AtomicUsize::new(0));
        let (s, n) = (Arc::clone(&slots), Arc::clone(&next));
        let cfg = LoopConfig {
            mode: mode.unwrap_or_default(),
            capacity: 2 * N,
            ..LoopConfig::default()
        };
        let handler = move |_: &mut SoftTimers<u32>, ev: Fired<u32>| {
            let i = n.fetch_add(1, Ordering::Relaxed);
            if i < N {
                s[i].store(ev.event, Ordering::Relaxed);
            }
        };
        let mut ev: EventLoop<u32> = match mode {
            Some(_) => EventLoop::new(cfg, handler).unwrap(),
            // SAFETY: the handler only does atomic stores into preallocated memory, and the
            // facility has room for every event (no allocation), so it is async-signal-safe.
            #[allow(unsafe_code)]
            None => unsafe {
                EventLoop::with_timer_signal(cfg, Duration::from_micros(50), handler).unwrap()
            },
        };
        let base = ev.clock().now();
        for i in 0..N as u32 {
            // Due 1 … 12 ms from `base`, 200 µs apart, scheduled out of order.
            let k = (i * 37) % N as u32;
            let at = base + ev.span(Duration::from_micros(1_000 + u64::from(k) * 200));
            ev.cx().schedule_at(at, k).unwrap();
        }
        let watched = Arc::clone(&next);
        let stop = ev.stop_handle();
        std::thread::spawn(move || {
            let start = Instant::now();
            while watched.load(Ordering::Relaxed) < N && start.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(2));
            }
            stop.stop();
        });
        ev.run(|_, _| {}).unwrap();
        slots.iter().map(|s| s.load(Ordering::Relaxed)).collect()
    };
    let soft = run(Some(TimerMode::Soft));
    assert_eq!(soft, (0..N as u32).collect::<Vec<_>>());
    let timerfd = run(Some(TimerMode::timerfd(Duration::from_micros(50)).unwrap()));
    assert_eq!(timerfd, soft, "timerfd baseline");
    let signal = run(None);
    assert_eq!(signal, soft, "signal baseline");
}

#[test]
fn bad_input_is_a_clear_error() {
    assert!(matches!(
        TimerMode::timerfd(Duration::ZERO),
        Err(RtError::Period(_))
    ));
    assert!(matches!(
        TimerMode::timerfd(Duration::from_secs(3601)),
        Err(RtError::Period(_))
    ));
    for hz in [0, 100_001] {
        let cfg = LoopConfig {
            interrupt_clock_hz: hz,
            ..LoopConfig::default()
        };
        let err = EventLoop::<()>::new(cfg, |_, _| {}).err().expect("refused");
        assert!(matches!(err, RtError::Config(_)), "{err}");
    }
    let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
    // A regular file cannot be watched by epoll.
    let file = std::fs::File::open("/proc/self/status").unwrap();
    let err = ev.cx().register(&file, Interest::READABLE, 1).unwrap_err();
    assert!(matches!(err, RtError::Register { .. }), "{err}");
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    assert!(matches!(
        ev.cx().register(&sock, Interest::READABLE, u64::MAX - 1),
        Err(RtError::ReservedToken(_))
    ));
    // Registering twice is epoll's EEXIST, reported, not a panic.
    ev.cx().register(&sock, Interest::READABLE, 1).unwrap();
    assert!(ev.cx().register(&sock, Interest::READABLE, 2).is_err());
    assert!(ev.cx().schedule_soft_event(Span::MAX, ()).is_err());
    // One signal-mode loop per thread: the signal is addressed to the thread.
    // SAFETY: the handlers do nothing, which is async-signal-safe.
    #[allow(unsafe_code)]
    let signal_loop = || unsafe {
        EventLoop::<()>::with_timer_signal(
            LoopConfig::default(),
            Duration::from_millis(1),
            |_, _| {},
        )
    };
    let first = signal_loop().unwrap();
    assert!(matches!(signal_loop(), Err(RtError::SignalLoopExists)));
    drop(first);
    // Once the first is gone, the thread may have another.
    assert!(signal_loop().is_ok());
    // A deadline nobody would enforce is refused, not silently ignored.
    let mut baseline: EventLoop<()> = EventLoop::new(
        LoopConfig {
            mode: TimerMode::timerfd(Duration::from_millis(1)).unwrap(),
            ..LoopConfig::default()
        },
        |_, _| {},
    )
    .unwrap();
    assert!(matches!(
        baseline
            .cx()
            .schedule_with_deadline(Span::from_ticks(10), Span::from_ticks(20), ()),
        Err(RtError::DeadlinesNotEnforced)
    ));
    // The reference without timers schedules nothing.
    let mut off: EventLoop<()> = EventLoop::new(
        LoopConfig {
            mode: TimerMode::Off,
            ..LoopConfig::default()
        },
        |_, _| {},
    )
    .unwrap();
    assert!(matches!(
        off.cx().schedule_soft_event(Span::from_ticks(10), ()),
        Err(RtError::TimersOff)
    ));
}

/// A timer-signal loop whose handler is slower than the signal period spends all its time
/// in signal context, like a machine in receive livelock; a stop request must still end it.
#[test]
fn a_signal_loop_swamped_by_a_slow_handler_still_stops() {
    let cfg = LoopConfig {
        capacity: 16,
        ..LoopConfig::default()
    };
    // SAFETY: the handler spins on the clock and re-arms itself in a facility with room
    // reserved: no allocation, no lock, so it is async-signal-safe.
    #[allow(unsafe_code)]
    let mut ev: EventLoop<()> = unsafe {
        EventLoop::with_timer_signal(cfg, Duration::from_micros(20), |timers, ev| {
            let until = Instant::now() + Duration::from_micros(200);
            while Instant::now() < until {}
            // Due at once, but after this pass: the next signal, already pending, fires it.
            let _ = timers.schedule_at(ev.now + Span::from_ticks(1), ());
        })
        .unwrap()
    };
    let stop = ev.stop_handle();
    let asked = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let noted = Arc::clone(&asked);
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        *noted.lock().unwrap() = Some(Instant::now());
        stop.stop();
    });
    // The slow event starts on the loop's first turn: from then on the thread lives in the
    // signal handler.
    let mut started = false;
    ev.run_with(
        |_, _| {},
        |cx, _| {
            if !started {
                started = true;
                let now = cx.now();
                cx.schedule_at(now, ()).unwrap();
            }
            false
        },
    )
    .unwrap();
    let asked = asked.lock().unwrap().expect("stopped before it was asked");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "took {:?} to stop",
        asked.elapsed()
    );
}

/// The calling thread's timer slack, ns.
fn timer_slack_ns() -> u64 {
    rustix::thread::current_timer_slack().expect("PR_GET_TIMERSLACK")
}

/// A soft-timer loop sets its thread's timer slack to 1 ns while it lives, and the thread gets
/// its own back when the last loop on it is dropped, whatever the order; a loop that does
/// not block on precise timeouts (timerfd mode) leaves the slack alone.
#[test]
fn a_loop_gives_its_thread_its_timer_slack_back() {
    std::thread::spawn(|| {
        let stock = std::num::NonZeroU64::new(50_000);
        rustix::thread::set_current_timer_slack(stock).unwrap();
        let timerfd: EventLoop<()> = EventLoop::new(
            LoopConfig {
                mode: TimerMode::timerfd(Duration::from_millis(1)).unwrap(),
                ..config()
            },
            |_, _| {},
        )
        .unwrap();
        assert_eq!(timer_slack_ns(), 50_000, "a timerfd loop leaves the slack");
        let first: EventLoop<()> = EventLoop::new(config(), |_, _| {}).unwrap();
        assert_eq!(timer_slack_ns(), 1);
        let second: EventLoop<()> = EventLoop::new(config(), |_, _| {}).unwrap();
        drop(first);
        assert_eq!(
            timer_slack_ns(),
            1,
            "the second loop still blocks on precise timeouts"
        );
        drop(second);
        assert_eq!(timer_slack_ns(), 50_000, "the thread's own slack is back");
        drop(timerfd);
        assert_eq!(timer_slack_ns(), 50_000);
        // A thread started now inherits the usual slack, not the loops'.
        let child = std::thread::spawn(timer_slack_ns).join().unwrap();
        assert_eq!(child, 50_000);
    })
    .join()
    .unwrap();
}

/// A named precision gives the soft loop windows of its own, per wait length, that start
/// from the calibrated ones less the precision and learn from the loop's wake-ups aimed at
/// its allowance (never the probe's 99th percentile as a fixed window); the other timer
/// modes keep the up-front plan.
#[test]
fn a_named_precision_learns_its_windows_from_the_loops_own_wake_ups() {
    let with = |spin_window, mode| {
        let ev: EventLoop<()> = EventLoop::new(
            LoopConfig {
                spin_window,
                mode,
                ..config()
            },
            |_, _| {},
        )
        .unwrap();
        (ev.idle_policy(), *ev.clock())
    };
    let (calibrated, clock) = with(SpinWindow::Calibrated, TimerMode::Soft);
    let precision = SpinWindow::Precision(Duration::from_micros(3));
    let (within, _) = with(precision, TimerMode::Soft);
    let (coarse, _) = with(
        SpinWindow::Precision(Duration::from_secs(1)),
        TimerMode::Soft,
    );
    let mut windows = within.windows.expect("a named precision keeps windows");
    let us = |n: u64| clock.span(Duration::from_micros(n));
    // Its floor for short waits is its own starting window, not the probe's plan; the
    // calibrated policy's likewise, not the probe's figure (which may be past the short
    // bucket's bound: half its shortest wait, 32 µs).
    assert_eq!(within.spin_window, windows.window_for(us(100)));
    let calibrated_start = calibrated.windows.expect("calibrated windows");
    assert_eq!(calibrated.spin_window, calibrated_start.window_for(us(100)));
    // Before waits of 8 ms and more the calibrated policy spins the widest window (it aims
    // at the lateness's tail there); a named precision keeps its own rule.
    assert_eq!(calibrated.window_for(us(20_000)), us(200));
    assert!(windows.window_for(us(20_000)) < us(200));
    assert_eq!(coarse.window_for(us(20_000)), us(1));
    for wait in [us(100), us(1_000), us(5_000)] {
        let calibrated = calibrated.window_for(wait);
        let start = windows.window_for(wait);
        // Less the precision, or less where a bound or the floor holds both.
        assert!(
            start <= calibrated,
            "{wait:?}: {start:?} against {calibrated:?}"
        );
        assert!(
            start + us(4) >= calibrated,
            "{wait:?}: {start:?} against {calibrated:?}"
        );
        assert_eq!(
            coarse.window_for(wait),
            us(1),
            "a coarse precision spins 1 µs at most"
        );
    }
    // Wake-ups 2 µs late are within a 3 µs precision: its window shrinks to the floor,
    // where the calibrated aim would keep one that covers them.
    let mut calibrated_windows = calibrated.windows.expect("calibrated windows");
    for _ in 0..20_000 {
        windows.observe(us(1_000), us(2));
        calibrated_windows.observe(us(1_000), us(2));
    }
    assert_eq!(windows.window_for(us(1_000)), us(1));
    assert!(calibrated_windows.window_for(us(1_000)) > us(2));
    let (timerfd, _) = with(
        precision,
        TimerMode::timerfd(Duration::from_millis(1)).unwrap(),
    );
    assert!(timerfd.windows.is_none());
    assert_eq!(clock.duration(timerfd.spin_window), precision.resolve());
}

/// A calibrated loop whose floor was set from a probe that read the host in a slow spell
/// (42 µs, past the 100 µs waits' bound of 32) takes the learnt short-wait window as its
/// floor once it has blocked and woken by a timeout (the loop's blocks are wired to
/// `IdlePolicy::learn`), while the wake-up lateness a driver reads stays the probe's.
#[test]
fn a_calibrated_loops_floor_follows_its_own_wake_ups() {
    let clock = SystemClock::new();
    let us = |n: u64| clock.span(Duration::from_micros(n));
    let period = us(200);
    let mut ev: EventLoop<()> = EventLoop::new(config(), move |t, f| {
        let _ = t.schedule_at(f.due + period, ());
    })
    .unwrap();
    let (floor, bound) = (us(42), us(32));
    let policy = ev.idle_policy();
    ev.set_idle_policy(IdlePolicy {
        spin_window: floor,
        ..policy
    });
    assert_eq!(ev.idle_policy().window_for(us(50)), floor);
    ev.cx().schedule_soft_event(period, ()).unwrap();
    stop_after(&ev, Duration::from_millis(100));
    ev.run(|_, _| {}).unwrap();
    let learnt = ev.idle_policy();
    let windows = learnt.windows.expect("calibrated windows");
    assert!(learnt.spin_window <= bound, "{:?}", learnt.spin_window);
    assert_eq!(learnt.spin_window, windows.window_for(us(100)));
    assert_eq!(ev.wake_lateness(), softtimer_rt::wakeup_lateness());
}

/// A stop asked for in `on_turn` ends the run although `on_turn` says it changed nothing:
/// the idle loop does not block (with nothing pending, for ever) first.
#[test]
fn a_stop_from_on_turn_ends_an_idle_run() {
    use softtimer_rt::LoopTurn;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        let mut ev: EventLoop<()> = EventLoop::new(config(), |_, _| {}).unwrap();
        stop_tx.send(ev.stop_handle()).unwrap();
        let result = ev.run_with(
            |_, _| {},
            |cx, turn| {
                if turn == LoopTurn::BeforeBlock {
                    cx.stop();
                }
                false
            },
        );
        done_tx.send(result.is_ok()).unwrap();
    });
    let stop = stop_rx.recv().unwrap();
    let ended = done_rx.recv_timeout(Duration::from_secs(5));
    // Ends a run that blocked regardless, so that the test ends either way.
    stop.stop();
    runner.join().unwrap();
    assert_eq!(ended, Ok(true), "the run blocked after on_turn stopped it");
}

/// A batch whose buffer length overflows is refused before anything is allocated or handed
/// to the kernel (release builds check no arithmetic on their own).
#[test]
#[should_panic(expected = "overflow usize")]
fn a_receive_batch_too_large_to_address_is_refused() {
    let _ = RecvBatch::new(2, usize::MAX / 2 + 1);
}
