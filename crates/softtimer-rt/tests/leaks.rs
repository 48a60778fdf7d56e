//! Stopping and dropping loops leaves no thread, POSIX timer or descriptor behind. This
//! file holds one test so that it has its process to itself (parallel tests would change
//! the counts).

use std::time::Duration;

use softtimer_rt::{EventLoop, LoopConfig, TimerMode};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// The entry count of `dir` once it reads `expected`, or after 1 s what it reads then: a
/// joined thread's entry can outlive the join by a moment, since the kernel reaps it after
/// the thread has told its joiner it is done.
fn settled(dir: &str, expected: usize) -> usize {
    let end = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        let n = count(dir);
        if n == expected || std::time::Instant::now() > end {
            return n;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The entry count of `dir` once two reads 20 ms apart agree (at most 1 s).
fn quiet_count(dir: &str) -> usize {
    let end = std::time::Instant::now() + Duration::from_secs(1);
    let mut last = count(dir);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let n = count(dir);
        if n == last || std::time::Instant::now() > end {
            return n;
        }
        last = n;
    }
}

fn posix_timers() -> usize {
    std::fs::read_to_string("/proc/self/timers")
        .map(|s| s.lines().filter(|l| l.starts_with("ID:")).count())
        .unwrap_or(0)
}

#[test]
fn stopping_leaves_nothing_behind() {
    // Warm up once (the clock calibration and the signal handler install are one-time).
    drop(EventLoop::<()>::new(LoopConfig::default(), |_, _| {}).unwrap());
    // The warm-up loop's helper has been joined; its entry goes with the harness's own
    // threads' count once the kernel has reaped it.
    let (fds, threads, timers) = (
        count("/proc/self/fd"),
        quiet_count("/proc/self/task"),
        posix_timers(),
    );

    for round in 0..3 {
        for mode in [
            Some(TimerMode::Soft),
            Some(TimerMode::timerfd(Duration::from_micros(200)).unwrap()),
            Some(TimerMode::Off),
            None,
        ] {
            let config = LoopConfig {
                mode: mode.unwrap_or_default(),
                ..LoopConfig::default()
            };
            let mut ev: EventLoop<()> = match mode {
                Some(_) => EventLoop::new(config, |_, _| {}).unwrap(),
                // SAFETY: the handler does nothing, which is async-signal-safe.
                #[allow(unsafe_code)]
                None => unsafe {
                    EventLoop::with_timer_signal(config, Duration::from_micros(200), |_, _| {})
                }
                .unwrap(),
            };
            if mode != Some(TimerMode::Off) {
                let t = ev.span(Duration::from_micros(100));
                ev.cx().schedule_soft_event(t, ()).unwrap();
            }
            let stop = ev.stop_handle();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                stop.stop();
            });
            ev.run(|_, _| {}).unwrap();
            t.join().unwrap();
            // While it lives, a soft loop has exactly one extra thread: its helper (the
            // backstop and the deadline service); the baselines and the reference have none.
            let expected = threads + usize::from(ev.mode_name() == "soft");
            assert_eq!(
                settled("/proc/self/task", expected),
                expected,
                "round {round}, {}",
                ev.mode_name()
            );
            drop(ev);
        }
    }
    assert_eq!(count("/proc/self/fd"), fds, "descriptors left open");
    assert_eq!(
        settled("/proc/self/task", threads),
        threads,
        "threads left running"
    );
    assert_eq!(posix_timers(), timers, "POSIX timers left armed");
}
