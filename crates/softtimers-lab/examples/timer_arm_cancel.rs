//! What a far timer armed and dropped costs, as a server's per-request timeout (hyper's
//! header-read timeout) arms one and drops it: a 30 s sleep polled once and dropped, two
//! million times in a task on one pinned thread with 32 far sleeps pending, on the soft
//! runtime and on tokio `current_thread`, three rounds.
//!
//! `cargo run --release -p softtimers-lab --example timer_arm_cancel`
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::{Duration, Instant};

const ITERATIONS: u32 = 2_000_000;

/// Polls `sleep` once (arming its timer) and moves on.
async fn poll_once<S: Future>(sleep: Pin<&mut S>) {
    let mut sleep = sleep;
    std::future::poll_fn(|cx| {
        let _ = sleep.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
}

/// Arms and drops `ITERATIONS` sleeps made by `make`, with 32 far ones pending; ns each.
async fn arm_and_drop<S: Future, Y: Future<Output = ()>>(
    make: impl Fn(Duration) -> S,
    yield_now: impl Fn() -> Y,
) -> f64 {
    let mut pending = Vec::new();
    for i in 0..32 {
        let mut far = Box::pin(make(Duration::from_secs(29) + Duration::from_millis(i)));
        poll_once(far.as_mut()).await;
        pending.push(far);
    }
    let start = Instant::now();
    for i in 0..ITERATIONS {
        let sleep = pin!(make(Duration::from_secs(30)));
        poll_once(sleep).await;
        if i % 32 == 31 {
            // A server's loop goes back to its reactor between requests: tokio's driver
            // learns its next wake-up there, and without it every arm wakes the driver.
            yield_now().await;
        }
    }
    start.elapsed().as_nanos() as f64 / f64::from(ITERATIONS)
}

fn main() -> anyhow::Result<()> {
    let _pin = softtimers_tools::cpu::pin_to(softtimers_tools::cpu::server_cpu());
    for round in 1..=3 {
        // In a spawned task, as a server's connection task arms its timeouts: tokio's
        // `block_on` future is not a task, and there each arm also wakes tokio's driver (an
        // `eventfd` write), which a task's does not.
        let soft = softtimer_async::Runtime::new()?.block_on(async {
            softtimer_async::spawn(arm_and_drop(
                softtimer_async::time::sleep,
                softtimer_async::task::yield_now,
            ))
            .await
            .expect("the probe does not panic")
        });
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async {
                tokio::spawn(arm_and_drop(tokio::time::sleep, tokio::task::yield_now)).await
            })?;
        println!(
            "round {round}: arm and drop a 30 s sleep in a task: soft {soft:.1} ns, tokio {tokio:.1} ns"
        );
    }
    Ok(())
}
