//! Stock quinn and hyper on the runtime, over loopback: the examples' own code, run as tests.

use std::time::Duration;

use softtimer_async::Runtime;
use softtimer_async::time::timeout;

#[allow(dead_code)]
#[path = "../examples/quinn_echo.rs"]
mod quinn_echo;

#[allow(dead_code)]
#[path = "../examples/hyper_hello.rs"]
mod hyper_hello;

const BOUND: Duration = Duration::from_secs(20);

#[test]
fn a_quinn_round_trip_on_soft_runtime() {
    let rt = Runtime::new().unwrap();
    let times = rt
        .block_on(async { timeout(BOUND, quinn_echo::echo(4, 3000)).await })
        .expect("the echo took too long")
        .unwrap();
    assert_eq!(times.len(), 4);
    // quinn's timers were soft events, and none outlived the connections.
    assert_eq!(rt.handle().pending_timers(), 0);
}

#[test]
fn quinn_on_two_loops() {
    let rt = Runtime::builder().threads(2).pin(false).build().unwrap();
    let handle = rt.handle();
    let times = rt
        .block_on(async move {
            // The whole exchange on the worker loop.
            let on_worker =
                handle.spawn_on(1, async { timeout(BOUND, quinn_echo::echo(3, 100)).await });
            on_worker.await
        })
        .unwrap()
        .expect("the echo took too long")
        .unwrap();
    assert_eq!(times.len(), 3);
}

#[test]
fn hyper_requests_on_one_keep_alive_connection() {
    let rt = Runtime::new().unwrap();
    let times = rt
        .block_on(async { timeout(BOUND, hyper_hello::hello(20)).await })
        .expect("the requests took too long")
        .unwrap();
    assert_eq!(times.len(), 20);
}
