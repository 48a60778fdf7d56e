//! Many tasks each sleeping in a loop on one runtime thread: how many timers fired, the CPU
//! per fire and the lateness.
//!
//! ```sh
//! cargo run --release -p softtimer-async --example many_sleepers -- 10000 2
//! cargo run --release -p softtimer-async --example many_sleepers -- 4000 3 10000
//! cargo run --release -p softtimer-async --example many_sleepers -- 10000 2 0 coarse
//! ```
//!
//! Arguments (optional): tasks (default 10,000), seconds (default 2), a period in µs (0, the
//! default: none), and the runtime's precision (`coarse`, `calibrated` (the default) or
//! `busy`). Without a period each task sleeps a random 100 µs–10 ms at a time; with one, every
//! task sleeps until `start + k × period` for k = 1, 2, …, so that all their timers fall due
//! together (a task that falls behind takes the deadlines it missed at once). The CPU per fire
//! is printed with the part of it the loop spent spinning for the next due timer.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use softtimer_async::time::sleep_until;
use softtimer_async::{Precision, Runtime};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tasks: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let seconds: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let period: Option<Duration> = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .filter(|&us: &u64| us > 0)
        .map(Duration::from_micros);
    let precision = match args.get(3).map(String::as_str) {
        None | Some("calibrated") => Precision::Calibrated,
        Some("coarse") => Precision::Coarse,
        Some("busy") => Precision::Busy,
        Some(other) => {
            eprintln!("precision: coarse, calibrated or busy, not {other:?}");
            std::process::exit(2);
        }
    };
    let rt = Runtime::builder()
        .precision(precision)
        .build()
        .expect("a runtime");
    // Every fire's lateness in one buffer with room for the run, paged in before it: a
    // buffer per task, growing, costs each fire a cache miss of the benchmark's own.
    let room = (tasks as f64 * seconds * 1e6 / period.map_or(5_050.0, |p| p.as_micros() as f64)
        * 1.5) as usize;
    let fired = Rc::new(RefCell::new(vec![Duration::ZERO; room]));
    fired.borrow_mut().clear();
    let cpu_before = process_cpu();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let fired = Rc::clone(&fired);
            rt.spawn_local(async move {
                // A small xorshift: without a period, the sleeps differ per task and round.
                let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                for round in 1u32.. {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let deadline = match period {
                        Some(p) => start + p * round,
                        None => Instant::now() + Duration::from_micros(100 + x % 9_901),
                    };
                    if deadline > end {
                        break;
                    }
                    sleep_until(deadline).await;
                    fired.borrow_mut().push(Instant::now() - deadline);
                }
            })
        })
        .collect();
    rt.block_on(async move {
        for h in handles {
            h.await.unwrap();
        }
    });
    let cpu = process_cpu() - cpu_before;
    let mut late = fired.take();
    let stats = rt.stats();
    let fires = late.len();
    let per_fire = fires.max(1) as f64;
    late.sort_unstable();
    println!(
        "{tasks} tasks, {fires} fires in {seconds} s: CPU {:.0} ns per fire ({:.0} of it spinning); late p50 {:?}, p99 {:?}; {:.3} polls, {:.4} parks, {:.4} blocked parks per fire",
        cpu.as_nanos() as f64 / per_fire,
        stats.idle_spin.as_nanos() as f64 / per_fire,
        late.get(fires / 2).copied().unwrap_or_default(),
        late.get(fires * 99 / 100).copied().unwrap_or_default(),
        stats.polls as f64 / per_fire,
        stats.parks as f64 / per_fire,
        stats.blocked_parks as f64 / per_fire,
    );
}

/// CPU time of the whole process.
fn process_cpu() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
