//! `Handle::block_on`: async code run from synchronous code on a thread that runs no loop
//! (a blocking task's, a thread of the program's own), served by a worker loop.

use std::time::{Duration, Instant};

use softtimer_async::time::sleep;
use softtimer_async::{Handle, Runtime, UdpSocket};

/// On a blocking task's thread: a timer, a UDP echo through sockets made there, and a task
/// spawned there, each served by a worker loop; the timer neither early nor held for the
/// backstop.
#[test]
fn a_blocking_task_runs_timers_sockets_and_spawns_through_its_handle() {
    let rt = unpinned(2);
    let (late, echoed, spawned) = rt
        .block_on(rt.spawn_blocking(|| {
            Handle::current().block_on(async {
                let mut late = Vec::new();
                for _ in 0..20 {
                    let t = Instant::now();
                    sleep(Duration::from_micros(300)).await;
                    late.push(t.elapsed());
                }
                let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                a.send_to(b"ping", b.local_addr().unwrap()).await.unwrap();
                let mut buf = [0u8; 8];
                let (n, from) = b.recv_from(&mut buf).await.unwrap();
                assert_eq!(from, a.local_addr().unwrap());
                let spawned = softtimer_async::spawn(async { 6 * 7 }).await.unwrap();
                (late, buf[..n].to_vec(), spawned)
            })
        }))
        .unwrap();
    assert!(
        late.iter().all(|&d| d >= Duration::from_micros(300)),
        "{late:?}"
    );
    let mut late = late;
    late.sort();
    // The median, well under the backstop's 1 ms interval: the serving loop is woken to
    // wait for a timer armed from this thread, not left blocked until the backstop fires
    // it (a stray slow wake-up on a shared host is not the point).
    assert!(
        late[late.len() / 2] < Duration::from_micros(300 + 400),
        "{late:?}"
    );
    assert_eq!(echoed, b"ping");
    assert_eq!(spawned, 42);
}

/// A runtime of `threads` loops, not pinned (the tests share the host's CPUs).
fn unpinned(threads: usize) -> Runtime {
    Runtime::builder()
        .threads(threads)
        .pin(false)
        .build()
        .unwrap()
}

/// A blocking task's thread has the runtime's context outside `Handle::block_on` too, as
/// tokio's has: a future made before entering it (`timeout` makes its timer at once), a
/// task spawned and a socket made there all belong to the runtime.
#[test]
fn a_blocking_task_makes_timers_tasks_and_sockets_outside_block_on() {
    for threads in [1, 2] {
        let rt = unpinned(threads);
        let (timed_out, spawned, echoed) = rt
            .block_on(rt.spawn_blocking(|| {
                let timed = softtimer_async::time::timeout(
                    Duration::from_millis(2),
                    sleep(Duration::from_secs(10)),
                );
                let spawned = softtimer_async::spawn(async { 6 * 7 });
                let std_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                std_socket.set_nonblocking(true).unwrap();
                let socket = UdpSocket::from_std(std_socket).unwrap();
                Handle::current().block_on(async move {
                    let timed_out = timed.await.is_err();
                    let to = socket.local_addr().unwrap();
                    socket.send_to(b"self", to).await.unwrap();
                    let mut buf = [0u8; 8];
                    let (n, _) = socket.recv_from(&mut buf).await.unwrap();
                    (timed_out, spawned.await.unwrap(), buf[..n].to_vec())
                })
            }))
            .unwrap();
        assert!(timed_out, "threads {threads}");
        assert_eq!((spawned, echoed.as_slice()), (42, &b"self"[..]));
    }
}

/// On a thread of the program's own, with a handle it was given; a runtime of one loop
/// serves it while another thread runs `Runtime::block_on`.
#[test]
fn a_thread_of_its_own_runs_async_code_through_a_handle() {
    for threads in [1, 2] {
        let rt = unpinned(threads);
        let handle = rt.handle();
        let other = std::thread::spawn(move || {
            handle.block_on(async {
                let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                let to = socket.local_addr().unwrap();
                socket.send_to(b"self", to).await.unwrap();
                let mut buf = [0u8; 8];
                let (n, _) = socket.recv_from(&mut buf).await.unwrap();
                sleep(Duration::from_millis(1)).await;
                n
            })
        });
        let n = rt.block_on(async {
            while !other.is_finished() {
                sleep(Duration::from_millis(1)).await;
            }
            other.join().unwrap()
        });
        assert_eq!(n, 4, "threads {threads}");
    }
}

/// Refused, with a message saying why, inside a task and inside another `Handle::block_on`
/// (each would stop a loop); `spawn_local` in one is refused too (no loop runs there).
#[test]
fn handle_block_on_is_refused_where_it_would_block_a_loop() {
    let rt = unpinned(2);
    let message = |r: std::thread::Result<()>| {
        let e = r.unwrap_err();
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap()
    };
    let in_task =
        rt.block_on(async { std::panic::catch_unwind(|| Handle::current().block_on(async {})) });
    assert!(message(in_task).contains("Handle::block_on called on a thread that runs a loop"));
    let handle = rt.handle();
    let nested = std::thread::spawn(move || {
        let inner = handle.clone();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            handle.block_on(async move { inner.block_on(async {}) })
        }))
    })
    .join()
    .unwrap();
    assert!(message(nested).contains("another Handle::block_on"));
    let handle = rt.handle();
    let local = std::thread::spawn(move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            handle.block_on(async {
                drop(softtimer_async::spawn_local(async {}));
            })
        }))
    })
    .join()
    .unwrap();
    assert!(message(local).contains("spawn_local called outside a runtime thread"));
}

/// A paced send scheduled from a thread in `Handle::block_on` leaves at its time: the
/// serving loop is woken to wait for the departure, not left blocked until the backstop.
#[test]
fn a_send_at_from_a_thread_of_its_own_leaves_on_time() {
    let rt = unpinned(2);
    let handle = rt.handle();
    let mut late = std::thread::spawn(move || {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let to = rx.local_addr().unwrap();
        let socket = handle.block_on(UdpSocket::bind("127.0.0.1:0")).unwrap();
        let mut late = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            handle
                .block_on(socket.send_at(b"x", to, t + Duration::from_micros(300)))
                .unwrap();
            let mut buf = [0u8; 8];
            rx.recv(&mut buf).unwrap();
            late.push(t.elapsed());
        }
        late
    })
    .join()
    .unwrap();
    drop(rt);
    late.sort();
    assert!(late[0] >= Duration::from_micros(300), "{late:?}");
    // The median well under the backstop's 1 ms interval.
    assert!(
        late[late.len() / 2] < Duration::from_micros(300 + 400),
        "{late:?}"
    );
}
