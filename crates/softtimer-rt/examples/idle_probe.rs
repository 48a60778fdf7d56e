//! A loop whose only work is one event re-armed every P µs: how late it fires, and how much
//! CPU the loop uses, under the idle policy's spin windows. `cargo run --release -p
//! softtimer-rt --example idle_probe`
use std::sync::{Arc, Mutex};
use std::time::Duration;

use softtimer::{Clock, Span};
use softtimer_rt::{EventLoop, LoopConfig, SpinWindow};

fn cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let mut set = rustix::thread::CpuSet::new();
    set.set(1);
    let _ = rustix::thread::sched_setaffinity(None, &set);
    println!(
        "calibrated wake-up lateness: {:?}",
        softtimer_rt::wakeup_lateness()
    );
    for window in [None, Some(Duration::ZERO), Some(Duration::from_millis(2))] {
        for period_us in [100u64, 1000] {
            let late = Arc::new(Mutex::new(Vec::with_capacity(100_000)));
            let l2 = Arc::clone(&late);
            let clock = softtimer::SystemClock::new();
            let hz = clock.resolution_hz();
            let p = Span::from_micros(period_us, hz);
            let config = LoopConfig {
                spin_window: window.map_or(SpinWindow::Calibrated, SpinWindow::Fixed),
                backstop: std::env::var("NO_BACKSTOP").is_err(),
                ..LoopConfig::default()
            };
            let mut ev: EventLoop<()> = EventLoop::new(config, move |t, f| {
                l2.lock().unwrap().push(f.late().as_nanos(hz));
                let _ = t.schedule_at(f.due + p, ());
            })
            .unwrap();
            let stop = ev.stop_handle();
            ev.cx().schedule_soft_event(p, ()).unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(2));
                stop.stop();
            });
            let (c0, t0) = (cpu_ns(), std::time::Instant::now());
            ev.run(|_, _| {}).unwrap();
            let cpu = (cpu_ns() - c0) as f64 / t0.elapsed().as_nanos() as f64 * 100.0;
            let mut v = late.lock().unwrap().clone();
            v.sort();
            let pct = |q: f64| v[((v.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
            println!(
                "window {:>12} P {:>5} µs: n {:>6} late p50 {:6.2} p99 {:6.2} max {:8.2} µs, cpu {:5.1} %, backstop wakeups {}, arms {}, fired by the backstop {}",
                format!(
                    "{:?}",
                    window.map_or(softtimer_rt::wakeup_lateness(), |w| w)
                ),
                period_us,
                v.len(),
                pct(0.5),
                pct(0.99),
                pct(1.0),
                cpu,
                ev.counters().backstop_wakeups,
                ev.counters().backstop_arms,
                ev.counters().fired(softtimer::TriggerSource::Backstop),
            );
        }
    }
}
