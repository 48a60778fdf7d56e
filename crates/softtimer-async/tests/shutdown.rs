//! A runtime with a thousand tasks (and blocking work done on its pool) shuts down leaving no
//! thread, descriptor or pending event behind. Alone in its test binary, because it counts the
//! process's threads.

use std::time::Duration;

use softtimer_async::time::{sleep, timeout};
use softtimer_async::{Runtime, TcpListener, UdpSocket};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

fn run_and_drop(tasks: usize) -> softtimer_async::Handle {
    let rt = Runtime::builder().threads(2).pin(false).build().unwrap();
    let handle = rt.handle();
    let spawner = handle.clone();
    rt.block_on(async move {
        let mut finished = Vec::new();
        for i in 0..tasks {
            let task = spawner.spawn(async move {
                match i % 4 {
                    // Asleep for an hour: a pending soft event.
                    0 => sleep(Duration::from_secs(3600)).await,
                    // Waiting for a datagram that never comes: a registered socket.
                    1 => {
                        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                        let mut buf = [0u8; 8];
                        let _ = socket.recv_from(&mut buf).await;
                    }
                    // A listener nobody connects to.
                    2 => {
                        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                        let _ = listener.accept().await;
                    }
                    // Done after a closure on the blocking pool, whose thread is idle
                    // when the runtime is dropped.
                    _ => softtimer_async::spawn_blocking(|| ()).await.unwrap(),
                }
            });
            if i % 4 == 3 {
                finished.push(task);
            }
        }
        for task in finished {
            timeout(Duration::from_secs(10), task)
                .await
                .unwrap()
                .unwrap();
        }
        // Let every task reach its wait.
        sleep(Duration::from_millis(20)).await;
    });
    assert!(handle.pending_timers() >= tasks / 4);
    drop(rt);
    handle
}

#[test]
fn a_thousand_tasks_leave_no_thread_fd_or_pending_event() {
    // Once first, so that what the process sets up once (clock calibration) is not counted.
    drop(run_and_drop(8));
    let (fds, threads) = (count("/proc/self/fd"), count("/proc/self/task"));
    let handle = run_and_drop(1000);
    assert_eq!(
        handle.pending_timers(),
        0,
        "a soft event outlived its runtime"
    );
    drop(handle);
    // Every thread is joined by then; a joined thread may stay listed for a moment.
    let start = std::time::Instant::now();
    while count("/proc/self/task") != threads && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        count("/proc/self/task"),
        threads,
        "a thread outlived its runtime"
    );
    assert_eq!(
        count("/proc/self/fd"),
        fds,
        "a descriptor outlived its runtime"
    );
}
