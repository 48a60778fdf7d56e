//! Any descriptor on the runtime: `AsyncFd` over pipes and an eventfd, readiness and its
//! clearing, descriptors handed back, and the errors of descriptors it cannot watch.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::time::Duration;

use softtimer_async::Runtime;
use softtimer_async::io::{AsyncFd, Interest};
use softtimer_async::time::timeout;

const BOUND: Duration = Duration::from_secs(10);

/// A pipe, both ends non-blocking.
fn pipe() -> (OwnedFd, OwnedFd) {
    let (rx, tx) = std::io::pipe().unwrap();
    let (rx, tx) = (OwnedFd::from(rx), OwnedFd::from(tx));
    rustix::io::ioctl_fionbio(&rx, true).unwrap();
    rustix::io::ioctl_fionbio(&tx, true).unwrap();
    (rx, tx)
}

#[test]
fn a_megabyte_through_a_pipe_whose_writer_waits_for_room() {
    Runtime::new().unwrap().block_on(async {
        let (rx, tx) = pipe();
        let (rx, tx) = (AsyncFd::new(rx).unwrap(), AsyncFd::new(tx).unwrap());
        let sent: Vec<u8> = (0..1_000_000u32).map(|i| (i % 249) as u8).collect();
        let writer = softtimer_async::spawn({
            let sent = sent.clone();
            async move {
                let mut rest = &sent[..];
                let mut waits = 0;
                while !rest.is_empty() {
                    let mut guard = tx.writable().await.unwrap();
                    match guard.try_io(|fd| Ok(rustix::io::write(fd.get_ref(), rest)?)) {
                        Ok(written) => rest = &rest[written.unwrap()..],
                        Err(_would_block) => waits += 1,
                    }
                }
                waits
            }
        });
        let mut got = Vec::with_capacity(sent.len());
        let mut buf = vec![0u8; 8192];
        while got.len() < sent.len() {
            let n = timeout(
                BOUND,
                rx.async_io(Interest::READABLE, |fd| Ok(rustix::io::read(fd, &mut buf)?)),
            )
            .await
            .expect("the reader was never woken")
            .unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, sent);
        let waits = timeout(BOUND, writer).await.unwrap().unwrap();
        // A pipe holds 64 KiB: the writer must have found it full and waited.
        assert!(waits > 0, "the writer never waited for room");
    });
}

#[test]
fn readiness_stays_until_a_call_says_would_block() {
    Runtime::new().unwrap().block_on(async {
        let (rx, tx) = pipe();
        let rx = AsyncFd::new(rx).unwrap();
        rustix::io::write(&tx, b"abc").unwrap();
        let mut buf = [0u8; 2];
        // A guard that does not clear keeps the readiness: the next wait returns at once.
        let _kept = rx.readable().await.unwrap();
        let mut guard = rx.readable().await.unwrap();
        let n = guard
            .try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut buf)?))
            .expect("data was there")
            .unwrap();
        assert_eq!(&buf[..n], b"ab");
        let n = guard
            .try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut buf)?))
            .expect("data was there")
            .unwrap();
        assert_eq!(&buf[..n], b"c");
        assert!(
            guard
                .try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut buf)?))
                .is_err(),
            "an empty pipe says WouldBlock"
        );
        // Cleared: the next wait waits, until more is written.
        assert!(
            timeout(Duration::from_millis(20), rx.readable())
                .await
                .is_err(),
            "readiness was not cleared by WouldBlock"
        );
        rustix::io::write(&tx, b"d").unwrap();
        let mut guard = timeout(BOUND, rx.readable()).await.unwrap().unwrap();
        guard.clear_ready();
        // Cleared by hand while data is there: stale until the next change, as tokio's.
        assert!(
            timeout(Duration::from_millis(20), rx.readable())
                .await
                .is_err()
        );
    });
}

#[test]
fn an_eventfd_written_from_another_thread_wakes_its_task() {
    Runtime::new().unwrap().block_on(async {
        let efd = rustix::event::eventfd(0, rustix::event::EventfdFlags::NONBLOCK).unwrap();
        let writer = efd.try_clone().unwrap();
        let efd = AsyncFd::new(efd).unwrap();
        let thread = std::thread::spawn(move || {
            for _ in 0..5 {
                std::thread::sleep(Duration::from_millis(2));
                rustix::io::write(&writer, &1u64.to_ne_bytes()).unwrap();
            }
        });
        let mut total = 0u64;
        while total < 5 {
            let mut count = [0u8; 8];
            timeout(
                BOUND,
                efd.async_io(Interest::READABLE, |fd| {
                    Ok(rustix::io::read(fd, &mut count)?)
                }),
            )
            .await
            .expect("the eventfd's task was never woken")
            .unwrap();
            total += u64::from_ne_bytes(count);
        }
        assert_eq!(total, 5);
        thread.join().unwrap();
    });
}

#[test]
fn a_descriptor_handed_back_or_borrowed_can_be_watched_again() {
    Runtime::new().unwrap().block_on(async {
        let (rx, tx) = pipe();
        // Handed back: out of the epoll set (a second registration would say it exists).
        let rx = AsyncFd::new(rx).unwrap().into_inner();
        let rx = AsyncFd::new(rx).unwrap();
        // Borrowed: dropping the AsyncFd leaves the descriptor open and unwatched.
        let borrowed = AsyncFd::new(&tx).unwrap();
        drop(borrowed);
        let tx = AsyncFd::new(tx).unwrap();
        tx.async_io(Interest::WRITABLE, |fd| {
            Ok(rustix::io::write(fd, b"again")?)
        })
        .await
        .unwrap();
        let mut buf = [0u8; 8];
        let n = timeout(
            BOUND,
            rx.async_io(Interest::READABLE, |fd| Ok(rustix::io::read(fd, &mut buf)?)),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(&buf[..n], b"again");
    });
}

#[test]
fn descriptors_it_cannot_watch_say_why() {
    let file = std::env::temp_dir().join(format!("st-asyncfd-{}", std::process::id()));
    Runtime::new().unwrap().block_on(async {
        let (rx, _tx) = std::io::pipe().unwrap();
        let err = AsyncFd::new(rx).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("non-blocking"), "{err}");

        // A regular file or a directory, blocking or not: epoll cannot watch it, said first.
        std::fs::File::create(&file)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        let err = AsyncFd::new(std::fs::File::open(&file).unwrap()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert!(err.to_string().contains("regular file"), "{err}");
        let dir = std::fs::File::open(std::env::temp_dir()).unwrap();
        let err = AsyncFd::new(dir).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");

        let (rx, _tx) = pipe();
        let rx = AsyncFd::new(rx).unwrap();
        let err = rx.async_io(Interest::BOTH, |_| Ok(())).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
    });
    let _ = std::fs::remove_file(&file);
    let (rx, _tx) = pipe();
    let err = AsyncFd::new(rx).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Other, "{err}");
}

/// A descriptor that is always ready does not keep its loop's other tasks from running: its
/// waits count against the task's budget, as the runtime's sockets' do.
#[test]
fn an_always_ready_descriptor_lets_other_tasks_run() {
    Runtime::new().unwrap().block_on(async {
        let (rx, tx) = pipe();
        rustix::io::write(&tx, b"never read").unwrap();
        let rx = AsyncFd::new(rx).unwrap();
        let ran = std::rc::Rc::new(std::cell::Cell::new(false));
        softtimer_async::spawn_local({
            let ran = std::rc::Rc::clone(&ran);
            async move { ran.set(true) }
        });
        let mut waits = 0u32;
        while !ran.get() {
            let _ready = rx.readable().await.unwrap();
            waits += 1;
            assert!(waits < 1_000_000, "the other task never ran");
        }
    });
}

#[test]
fn its_futures_are_send() {
    fn sendable<T: Send>(t: T) -> T {
        t
    }
    Runtime::new().unwrap().block_on(async {
        let (rx, _tx) = pipe();
        let rx = AsyncFd::new(rx).unwrap();
        drop(sendable(rx.readable()));
        drop(sendable(rx.writable()));
        let mut buf = [0u8; 4];
        drop(sendable(rx.async_io(Interest::READABLE, |fd| {
            Ok(rustix::io::read(fd, &mut buf)?)
        })));
    });
}
