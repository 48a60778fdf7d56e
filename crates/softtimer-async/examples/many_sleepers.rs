//! Many tasks each sleeping a random 100 µs–10 ms in a loop on one runtime thread: how many
//! timers fired and the CPU per fire.
//!
//! ```sh
//! cargo run --release -p softtimer-async --example many_sleepers -- 10000 2
//! ```
//!
//! Arguments (optional): tasks (default 10,000), seconds (default 2).

use std::time::{Duration, Instant};

use softtimer_async::Runtime;
use softtimer_async::time::sleep_until;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tasks: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let seconds: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let rt = Runtime::new().expect("a runtime");
    let cpu_before = process_cpu();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            rt.spawn_local(async move {
                // A small xorshift: the sleeps differ per task and per round.
                let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut fires = 0u64;
                loop {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let deadline = Instant::now() + Duration::from_micros(100 + x % 9_901);
                    if deadline > end {
                        return fires;
                    }
                    sleep_until(deadline).await;
                    fires += 1;
                }
            })
        })
        .collect();
    let fires: u64 = rt.block_on(async move {
        let mut sum = 0;
        for h in handles {
            sum += h.await.unwrap();
        }
        sum
    });
    let cpu = process_cpu() - cpu_before;
    let stats = rt.stats();
    println!(
        "{tasks} tasks, {fires} fires in {seconds} s: CPU {:.0} ns per fire; {:.3} polls, {:.4} parks, {:.4} blocked parks per fire",
        cpu.as_nanos() as f64 / fires as f64,
        stats.polls as f64 / fires as f64,
        stats.parks as f64 / fires as f64,
        stats.blocked_parks as f64 / fires as f64,
    );
}

/// CPU time of the whole process.
fn process_cpu() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
