//! A loop whose only work is one event re-armed every P µs: how late it fires, and how much
//! CPU the loop uses, under the idle policy's spin windows (calibrated, none, 10, 30, 100 and
//! 200 µs, and 2 ms), pinned to CPU 1. `cargo run --release -p softtimer-rt --example idle_probe --
//! [SECONDS [PERIOD_US ...]]` (2 s a run, periods 100 and 1000 µs by default). Each line
//! ends with how many events were more than 5 µs late in each tenth of the run, which tells
//! a learning phase (late events early on) from the host's spells (late events anywhere).
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
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<f64>().expect("a number"));
    let secs = args.next().unwrap_or(2.0);
    let periods: Vec<u64> = args.map(|p| p as u64).collect();
    let periods = if periods.is_empty() {
        vec![100, 1000]
    } else {
        periods
    };
    let windows = [0, 10, 30, 100, 200, 2000].map(|us| Some(Duration::from_micros(us)));
    for window in std::iter::once(None).chain(windows) {
        for &period_us in &periods {
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
                std::thread::sleep(Duration::from_secs_f64(secs));
                stop.stop();
            });
            let (c0, t0) = (cpu_ns(), std::time::Instant::now());
            ev.run(|_, _| {}).unwrap();
            let cpu = (cpu_ns() - c0) as f64 / t0.elapsed().as_nanos() as f64 * 100.0;
            let raw = late.lock().unwrap().clone();
            let tenth = raw.len().div_ceil(10).max(1);
            let late_by_tenth: Vec<usize> = raw
                .chunks(tenth)
                .map(|c| c.iter().filter(|&&ns| ns > 5_000).count())
                .collect();
            let mut later_half = raw[raw.len() / 2..].to_vec();
            later_half.sort();
            let mut v = raw;
            v.sort();
            let at = |v: &[u64], q: f64| v[((v.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
            let pct = |q: f64| at(&v, q);
            // The window before a wait of the period, as the run left it (a learnt one's).
            let learnt = clock.duration(ev.idle_policy().window_for(p));
            println!(
                "window {:>12} P {:>5} µs: n {:>6} late p50 {:6.2} p99 {:6.2} (later half {:6.2}) max {:8.2} µs, cpu {:5.1} %, backstop wakeups {}, arms {}, fired by the backstop {}, late >5 µs per tenth {:?}",
                format!("{learnt:.1?}"),
                period_us,
                v.len(),
                pct(0.5),
                pct(0.99),
                at(&later_half, 0.99),
                pct(1.0),
                cpu,
                ev.counters().backstop_wakeups,
                ev.counters().backstop_arms,
                ev.counters().fired(softtimer::TriggerSource::Backstop),
                late_by_tenth,
            );
        }
    }
}
