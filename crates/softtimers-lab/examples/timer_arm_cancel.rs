//! What a far timer armed and dropped costs, as a server's per-request timeout (hyper's
//! header-read timeout) arms one and drops it: a 30 s sleep polled once and dropped, two
//! million times in a task on one pinned thread with 32 far sleeps pending, yielding to the
//! runtime every 32 arms as a server's task goes back to its reactor between requests; on
//! the soft runtime and on tokio `current_thread`, three rounds. The same loop with the
//! yields and no timers is timed too, on each runtime, and taken off: the two runtimes'
//! yields cost differently (tokio's turns its driver, the soft runtime's only queues the
//! task).
//!
//! `cargo run --release -p softtimers-lab --example timer_arm_cancel`
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::{Duration, Instant};

const ITERATIONS: u32 = 2_000_000;
/// Arms between two yields.
const YIELD_EVERY: u32 = 32;

/// Polls `sleep` once (arming its timer) and moves on.
async fn poll_once<S: Future>(sleep: Pin<&mut S>) {
    let mut sleep = sleep;
    std::future::poll_fn(|cx| {
        let _ = sleep.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
}

/// Arms and drops `ITERATIONS` sleeps made by `make` (none with `make` `None`: the loop and
/// its yields alone), with 32 far ones pending; ns an iteration.
async fn arm_and_drop<S: Future, Y: Future<Output = ()>>(
    make: Option<impl Fn(Duration) -> S>,
    yield_now: impl Fn() -> Y,
) -> f64 {
    let mut pending = Vec::new();
    if let Some(make) = &make {
        for i in 0..32 {
            let mut far = Box::pin(make(Duration::from_secs(29) + Duration::from_millis(i)));
            poll_once(far.as_mut()).await;
            pending.push(far);
        }
    }
    let start = Instant::now();
    for i in 0..ITERATIONS {
        if let Some(make) = &make {
            let sleep = pin!(make(Duration::from_secs(30)));
            poll_once(sleep).await;
        }
        if i % YIELD_EVERY == YIELD_EVERY - 1 {
            // Without it tokio's driver never parks, so never learns its next wake-up, and
            // every arm wakes it (an `eventfd` write), which no server's does.
            yield_now().await;
        }
        std::hint::black_box(i);
    }
    start.elapsed().as_nanos() as f64 / f64::from(ITERATIONS)
}

/// The soft runtime: ns per arm and drop, and of that the loop and its yields.
fn soft(timers: bool) -> anyhow::Result<f64> {
    let make = timers.then_some(softtimer_async::time::sleep);
    Ok(softtimer_async::Runtime::new()?.block_on(async move {
        softtimer_async::spawn(arm_and_drop(make, softtimer_async::task::yield_now))
            .await
            .expect("the probe does not panic")
    }))
}

/// tokio `current_thread`, likewise.
fn tokio(timers: bool) -> anyhow::Result<f64> {
    let make = timers.then_some(tokio::time::sleep);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(rt.block_on(async move { tokio::spawn(arm_and_drop(make, tokio::task::yield_now)).await })?)
}

fn main() -> anyhow::Result<()> {
    let _pin = softtimers_tools::cpu::pin_to(softtimers_tools::cpu::server_cpu());
    for round in 1..=3 {
        let (soft_all, soft_loop) = (soft(true)?, soft(false)?);
        let (tokio_all, tokio_loop) = (tokio(true)?, tokio(false)?);
        println!(
            "round {round}: arm and drop a 30 s sleep in a task: soft {:.1} ns ({soft_all:.1} \
             less {soft_loop:.1} for the loop and its yields), tokio {:.1} ns ({tokio_all:.1} \
             less {tokio_loop:.1})",
            soft_all - soft_loop,
            tokio_all - tokio_loop,
        );
    }
    Ok(())
}
