//! What outlives a loop: timers and sockets awaited by another runtime's task after their
//! own runtime is dropped, and work sent to a worker whose thread a panic ended. The waiter
//! hears of it (a socket's error, a timer's panic, as tokio's; a cancelled task) instead of
//! waiting for ever. Each test bounds its wait on the other runtime's timer, so that the bug
//! it guards against fails the test rather than hanging it.

use std::time::Duration;

use softtimer_async::time::{sleep, timeout};
use softtimer_async::{Runtime, UdpSocket};

/// A receive pending in runtime B on a socket of runtime A ends in an error when A is
/// dropped, and a datagram sent after does not revive it; a send on the socket says the
/// same.
#[test]
fn a_socket_of_a_dropped_runtime_returns_an_error_to_its_waiter() {
    let a = Runtime::new().unwrap();
    let b = Runtime::new().unwrap();
    let socket = {
        let _a = a.enter();
        UdpSocket::from_std(std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).unwrap()
    };
    let to = socket.local_addr().unwrap();
    let (received, sent) = b.block_on(async move {
        let socket = std::sync::Arc::new(socket);
        let receiver = std::sync::Arc::clone(&socket);
        let recv = softtimer_async::spawn(async move {
            let mut buf = [0u8; 8];
            receiver.recv_from(&mut buf).await.map(|(n, _)| n)
        });
        // The receive waits in A's reactor by now.
        sleep(Duration::from_millis(5)).await;
        drop(a);
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.send_to(b"late", to).unwrap();
        let received = timeout(Duration::from_secs(5), recv).await;
        let sent = timeout(Duration::from_secs(5), socket.send_to(b"x", to)).await;
        (received, sent)
    });
    let received = received
        .expect("the receive was never told its runtime had gone")
        .unwrap();
    let e = received.unwrap_err();
    assert!(e.to_string().contains("has shut down"), "{e}");
    let e = sent.expect("the send waited for ever").unwrap_err();
    assert!(e.to_string().contains("has shut down"), "{e}");
}

/// A sleep made in runtime A and awaited by a task of runtime B (on another thread) panics
/// in that task when A is dropped before the deadline, and the panic reaches the task's
/// handle; a sleep whose deadline has passed completes as usual.
#[test]
fn a_timer_of_a_dropped_runtime_panics_in_its_waiter_instead_of_hanging() {
    let a = Runtime::new().unwrap();
    let b = Runtime::builder().threads(2).pin(false).build().unwrap();
    let (long, short) = {
        let _a = a.enter();
        (
            sleep(Duration::from_secs(3600)),
            sleep(Duration::from_millis(1)),
        )
    };
    let handle = b.handle();
    let waiter = handle.spawn_on(1, long);
    std::thread::sleep(Duration::from_millis(20));
    drop(a);
    let outcome = b.block_on(async move {
        let long = timeout(Duration::from_secs(5), waiter).await;
        let short = timeout(Duration::from_secs(5), short).await;
        (long, short)
    });
    let joined = outcome
        .0
        .expect("the sleep's task was never told its runtime had gone");
    let panic = joined.unwrap_err();
    assert!(panic.is_panic(), "{panic:?}");
    let payload = panic.into_panic();
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(message.contains("after its loop shut down"), "{message}");
    outcome.1.expect("a passed deadline completes");
}

/// A panic that escapes a worker's loop (here the documented misuse: a context guard of
/// another runtime held across an `.await` in one of its tasks) ends the worker's thread
/// and closes its loop: a task sent to that loop afterwards comes back cancelled, where it
/// used to wait in a queue nobody drained.
#[test]
fn work_sent_to_a_worker_that_a_panic_ended_comes_back_cancelled() {
    let rt = Runtime::builder().threads(2).pin(false).build().unwrap();
    let handle = rt.handle();
    let misuse = handle.spawn_on(1, async {
        softtimer_async::spawn_local(async {
            let other = Runtime::new().unwrap();
            let _context = other.enter();
            softtimer_async::yield_now().await;
            // Never reached: the loop's check after the poll panics first.
            drop(other);
        });
    });
    let outcome = rt.block_on(async move {
        let _ = timeout(Duration::from_secs(5), misuse).await;
        // Let the worker's batch end and the check fire.
        sleep(Duration::from_millis(50)).await;
        timeout(Duration::from_secs(5), handle.spawn_on(1, async { 1 })).await
    });
    let joined = outcome.expect("work sent to the dead worker waited for ever");
    assert!(joined.unwrap_err().is_cancelled());
}
