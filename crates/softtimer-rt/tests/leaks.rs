//! Stopping and dropping loops leaves no thread, POSIX timer or descriptor behind. This
//! file holds one test so that it has its process to itself (parallel tests would change
//! the counts).

use std::time::Duration;

use softtimer_rt::{EventLoop, LoopConfig, TimerMode};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
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
    let (fds, threads, timers) = (
        count("/proc/self/fd"),
        count("/proc/self/task"),
        posix_timers(),
    );

    for round in 0..3 {
        // SAFETY: the handler does nothing, which is async-signal-safe.
        #[allow(unsafe_code)]
        let signal = unsafe { TimerMode::signal(Duration::from_micros(200)) }.unwrap();
        for mode in [
            TimerMode::soft(),
            TimerMode::timerfd(Duration::from_micros(200)).unwrap(),
            signal,
        ] {
            let mut ev: EventLoop<()> = EventLoop::new(
                LoopConfig {
                    mode,
                    ..LoopConfig::default()
                },
                |_, _| {},
            )
            .unwrap();
            let t = ev.micros_to_ticks(100);
            ev.cx().schedule_soft_event(t, ()).unwrap();
            let stop = ev.stop_handle();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                stop.stop();
            });
            ev.run(|_, _| {}).unwrap();
            t.join().unwrap();
            // While it lives, a soft loop has exactly one extra thread: its backstop.
            let expected = threads + usize::from(ev.mode_name() == "soft");
            assert_eq!(
                count("/proc/self/task"),
                expected,
                "round {round}, {}",
                ev.mode_name()
            );
            drop(ev);
        }
    }
    assert_eq!(count("/proc/self/fd"), fds, "descriptors left open");
    assert_eq!(count("/proc/self/task"), threads, "threads left running");
    assert_eq!(posix_timers(), timers, "POSIX timers left armed");
}
