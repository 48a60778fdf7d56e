//! `#[softtimer_async::test]` and `#[softtimer_async::main]` on real runtimes: each test
//! here is itself an attribute's expansion.
#![cfg(feature = "macros")]

use std::time::{Duration, Instant};

use softtimer_async::time::{self, sleep, timeout};
use softtimer_async::{Handle, UdpSocket};

#[softtimer_async::test]
async fn no_reply_within_a_millisecond() {
    let slow = time::sleep(Duration::from_secs(5));
    assert!(timeout(Duration::from_millis(1), slow).await.is_err());
}

#[softtimer_async::test(simulated)]
async fn an_hour_on_a_simulated_clock() {
    let start = time::now();
    let wall = Instant::now();
    sleep(Duration::from_secs(3600)).await;
    // Exactly at the deadline: nothing else ran, so the clock jumped to it.
    assert_eq!(time::now() - start, Duration::from_secs(3600));
    // And the test did not wait an hour of the machine's time.
    assert!(wall.elapsed() < Duration::from_secs(60));
}

#[softtimer_async::test]
async fn the_body_runs_on_the_runtime_it_built() {
    // Inside a runtime: a handle, sockets and spawned tasks work as under block_on.
    assert_eq!(Handle::current().threads(), 1);
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let to = socket.local_addr().unwrap();
    let echo = softtimer_async::spawn(async move {
        let mut buf = [0u8; 16];
        let (n, _) = socket.recv_from(&mut buf).await.unwrap();
        buf[..n].to_vec()
    });
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.send_to(b"ping", to).await.unwrap();
    assert_eq!(echo.await.unwrap(), b"ping");
}

#[softtimer_async::test(threads = 2, precision = "window-20us")]
async fn options_reach_the_builder() {
    let handle = Handle::current();
    assert_eq!(handle.threads(), 2);
    let on = handle
        .spawn_on(1, async { std::thread::current().name().map(String::from) })
        .await
        .unwrap();
    assert_eq!(on.as_deref(), Some("softtimer-async-1"));
}

#[softtimer_async::test]
async fn a_result_and_question_marks() -> std::io::Result<()> {
    let socket = UdpSocket::bind("127.0.0.1:0").await?;
    socket.local_addr()?;
    Ok(())
}

#[softtimer_async::test]
#[should_panic(expected = "the body's own panic")]
async fn a_panic_in_the_body_fails_the_test() {
    sleep(Duration::from_micros(10)).await;
    panic!("the body's own panic");
}

/// A `main` is a plain function: callable, as the test harness calls tests.
#[softtimer_async::main(precision = "coarse")]
async fn main_like() -> Result<u32, std::num::ParseIntError> {
    sleep(Duration::from_micros(50)).await;
    let n: u32 = "41".parse()?;
    Ok(n + 1)
}

#[test]
fn a_main_runs_its_body_to_the_end_and_leaves_no_runtime() {
    assert_eq!(main_like(), Ok(42));
    assert!(Handle::try_current().is_none());
    // It can run again: each call builds a runtime of its own and drops it.
    assert_eq!(main_like(), Ok(42));
}
