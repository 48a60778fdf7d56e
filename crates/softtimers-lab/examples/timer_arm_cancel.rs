//! What a far timer armed and dropped costs, as a server's per-request timeout (hyper's
//! header-read timeout) arms one and drops it: a 30 s sleep polled once and dropped, two
//! million times on one pinned thread with 32 far sleeps pending, on the soft runtime and on
//! tokio `current_thread`, three rounds.
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
async fn arm_and_drop<S: Future>(make: impl Fn(Duration) -> S) -> f64 {
    let mut pending = Vec::new();
    for i in 0..32 {
        let mut far = Box::pin(make(Duration::from_secs(29) + Duration::from_millis(i)));
        poll_once(far.as_mut()).await;
        pending.push(far);
    }
    let start = Instant::now();
    for _ in 0..ITERATIONS {
        let sleep = pin!(make(Duration::from_secs(30)));
        poll_once(sleep).await;
    }
    start.elapsed().as_nanos() as f64 / f64::from(ITERATIONS)
}

fn main() -> anyhow::Result<()> {
    let _pin = softtimers_tools::cpu::pin_to(softtimers_tools::cpu::server_cpu());
    for round in 1..=3 {
        let soft =
            softtimer_async::Runtime::new()?.block_on(arm_and_drop(softtimer_async::time::sleep));
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(arm_and_drop(tokio::time::sleep));
        println!(
            "round {round}: arm and drop a 30 s sleep: soft {soft:.1} ns, tokio {tokio:.1} ns"
        );
    }
    Ok(())
}
