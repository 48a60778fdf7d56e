//! CPU per task spawned and awaited, and per poll of a task that yields: what a task costs
//! the runtime, apart from any timer or socket. Five rounds on one loop, printed each.
//!
//! `cargo run --release -p softtimer-async --example spawn_cost` (pin it, e.g. with
//! `taskset -c 1`, to compare builds).

use rustix::time::{ClockId, clock_gettime};

/// The process's CPU time, ns.
fn cpu_ns() -> u64 {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn main() {
    println!(
        "a JoinHandle<u64> is {} bytes",
        std::mem::size_of::<softtimer_async::JoinHandle<u64>>()
    );
    let rt = softtimer_async::Runtime::builder()
        .pin(false)
        .build()
        .expect("a runtime");
    const TASKS: u64 = 200_000;
    const POLLS: u64 = 2_000_000;
    for round in 0..5 {
        let start = cpu_ns();
        rt.block_on(async {
            // In batches of a thousand, as a server spawns a task per connection.
            let mut handles = Vec::with_capacity(1000);
            for i in 0..TASKS {
                handles.push(softtimer_async::spawn(async move { i }));
                if handles.len() == 1000 {
                    for h in handles.drain(..) {
                        h.await.expect("a task that returns");
                    }
                }
            }
            for h in handles.drain(..) {
                h.await.expect("a task that returns");
            }
        });
        let spawn_ns = (cpu_ns() - start) as f64 / TASKS as f64;
        let start = cpu_ns();
        rt.block_on(async {
            softtimer_async::spawn(async {
                for _ in 0..POLLS {
                    softtimer_async::yield_now().await;
                }
            })
            .await
            .expect("a task that returns");
        });
        let poll_ns = (cpu_ns() - start) as f64 / POLLS as f64;
        println!(
            "round {round}: {spawn_ns:.1} ns per task spawned and awaited, {poll_ns:.1} ns per poll"
        );
    }
}
