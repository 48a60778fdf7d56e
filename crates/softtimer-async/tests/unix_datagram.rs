//! Unix-domain datagrams on the runtime: an echo between bound sockets, a full receiver that
//! makes its senders wait without losing a datagram, unbound and connected sockets, and the
//! errors of bad paths and gone peers.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use softtimer_async::time::timeout;
use softtimer_async::{Runtime, UnixDatagram};

mod common;
use common::{Dir, foreign_block_on};

const BOUND: Duration = Duration::from_secs(10);

#[test]
fn an_echo_between_bound_sockets_keeps_every_datagram_whole_and_in_order() {
    let dir = Dir::new("dg-echo");
    let server_path = dir.0.join("server.sock");
    let client_path = dir.0.join("client.sock");
    Runtime::new().unwrap().block_on(async {
        let server = UnixDatagram::bind(&server_path).unwrap();
        assert_eq!(
            server.local_addr().unwrap().as_pathname(),
            Some(&*server_path)
        );
        let echo = softtimer_async::spawn_local(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let (n, from) = server.recv_from(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                let to = from.as_pathname().unwrap().to_owned();
                server.send_to(&buf[..n], to).await.unwrap();
            }
        });
        let client = UnixDatagram::bind(&client_path).unwrap();
        let mut buf = vec![0u8; 4096];
        for i in 1..=200usize {
            let sent: Vec<u8> = (0..i * 17 % 4000 + 1).map(|j| (i + j) as u8).collect();
            client.send_to(&sent, &server_path).await.unwrap();
            let (n, from) = timeout(BOUND, client.recv_from(&mut buf))
                .await
                .expect("no echo in time")
                .unwrap();
            assert_eq!(from.as_pathname(), Some(&*server_path));
            assert_eq!(&buf[..n], &sent[..], "datagram {i}");
        }
        client.send_to(&[], &server_path).await.unwrap();
        timeout(BOUND, echo).await.unwrap().unwrap();
    });
}

/// Sends numbered datagrams from a task of their own (with `send`, or `send_to` when `to` is
/// given) and checks the receiver gets every one, in order, though far fewer fit (the
/// receiver's queue, `net.unix.max_dgram_qlen`, 10 by default; for a pair, the sender's
/// buffer, made small here so that the host's default cannot hold them all): the sender must
/// wait for room, and be woken when the receiver makes some.
async fn every_datagram_through_a_full_queue(
    tx: UnixDatagram,
    rx: UnixDatagram,
    to: Option<PathBuf>,
) {
    const COUNT: u32 = 2_000;
    rustix::net::sockopt::set_socket_send_buffer_size(&tx, 8 * 1024).unwrap();
    let sent = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let sender = softtimer_async::spawn_local({
        let sent = std::rc::Rc::clone(&sent);
        async move {
            for i in 0..COUNT {
                match &to {
                    Some(path) => tx.send_to(&i.to_be_bytes(), path).await.unwrap(),
                    None => tx.send(&i.to_be_bytes()).await.unwrap(),
                };
                sent.set(i + 1);
            }
        }
    });
    // Nothing is read for a while: the sender fills the queue and waits.
    softtimer_async::time::sleep(Duration::from_millis(20)).await;
    let waiting_at = sent.get();
    assert!(
        (1..COUNT).contains(&waiting_at),
        "the sender should have filled the queue and waited: {waiting_at} sent"
    );
    let mut buf = [0u8; 8];
    for want in 0..COUNT {
        let n = timeout(BOUND, rx.recv(&mut buf))
            .await
            .expect("a sender waiting for room was never woken")
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!(u32::from_be_bytes(buf[..4].try_into().unwrap()), want);
    }
    timeout(BOUND, sender).await.unwrap().unwrap();
}

#[test]
fn a_full_receiver_makes_a_connected_sender_wait_and_loses_nothing() {
    Runtime::new().unwrap().block_on(async {
        let (tx, rx) = UnixDatagram::pair().unwrap();
        every_datagram_through_a_full_queue(tx, rx, None).await;
    });
}

#[test]
fn a_full_receiver_makes_an_unconnected_sender_wait_and_loses_nothing() {
    let dir = Dir::new("dg-full");
    let path = dir.0.join("rx.sock");
    Runtime::new().unwrap().block_on(async {
        let rx = UnixDatagram::bind(&path).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        every_datagram_through_a_full_queue(tx, rx, Some(path.clone())).await;
    });
}

/// Sends with `try_send` until it says `WouldBlock`; returns how many went.
fn fill(mut try_send: impl FnMut() -> io::Result<usize>) -> usize {
    let mut queued = 0;
    loop {
        match try_send() {
            Ok(_) => queued += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return queued,
            Err(e) => panic!("{e}"),
        }
        assert!(queued < 100_000, "the queue never filled");
    }
}

/// Reads the `queued` datagrams the first sender left, then, within [`BOUND`], the second
/// sender's, which was waiting for that room.
async fn read_the_first_then_the_second(rx: &UnixDatagram, queued: usize) {
    let mut buf = [0u8; 16];
    for _ in 0..queued {
        let n = rx.recv(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"first");
    }
    let n = timeout(BOUND, rx.recv(&mut buf))
        .await
        .expect("the second sender was left waiting")
        .unwrap();
    assert_eq!(&buf[..n], b"second");
}

/// Linux wakes an unconnected sender for room at a receiver only when its own datagrams are
/// read, and each refused send reports the sender writable again at once: a sender whose
/// receiver another sender filled must neither spin on that nor wait for ever.
#[test]
fn a_sender_behind_another_senders_datagrams_waits_without_spinning() {
    let dir = Dir::new("behind");
    let path = dir.0.join("rx.sock");
    let mut config = softtimer_async::Builder::default_loop_config();
    config.stats = true;
    let rt = Runtime::builder().loop_config(config).build().unwrap();
    let sends = || {
        rt.trigger_stats()
            .unwrap()
            .triggers(softtimer::TriggerSource::Send)
    };
    rt.block_on(async {
        let rx = UnixDatagram::bind(&path).unwrap();
        let first = UnixDatagram::unbound().unwrap();
        let queued = fill(|| first.try_send_to(b"first", &path));
        let second = UnixDatagram::unbound().unwrap();
        let waiting = softtimer_async::spawn_local({
            let path = path.clone();
            async move { second.send_to(b"second", &path).await.unwrap() }
        });
        let before = sends();
        softtimer_async::time::sleep(Duration::from_millis(20)).await;
        // Its tries back off (20 µs, doubling to 1 ms): about twenty in 20 ms, where a
        // sender spinning on its writability makes thousands.
        let tries = sends() - before;
        assert!(
            tries < 200,
            "{tries} sends in 20 ms: the waiting sender spins"
        );
        // Room now, and the first sender sends nothing more to prompt a wake-up.
        read_the_first_then_the_second(&rx, queued).await;
        assert_eq!(waiting.await.unwrap(), 6);
    });
}

/// A sender awaited by another executor, on a thread with no loop: its tries back off on a
/// timer of its socket's loop (the thread has none), and its datagram goes once there is room.
#[test]
fn a_sender_on_another_executors_thread_waits_on_its_sockets_loop() {
    let dir = Dir::new("foreign");
    let path = dir.0.join("rx.sock");
    Runtime::new().unwrap().block_on(async {
        let rx = UnixDatagram::bind(&path).unwrap();
        let first = UnixDatagram::unbound().unwrap();
        let queued = fill(|| first.try_send_to(b"first", &path));
        let second = UnixDatagram::unbound().unwrap();
        // The receiver's queue, not the first sender's buffer, must be what filled (a
        // system whose `net.unix.max_dgram_qlen` is larger than a sender's buffer holds).
        match second.try_send_to(b"probe", &path) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Ok(_) => {
                eprintln!("skipped: the receiver's queue did not fill before the sender's buffer");
                return;
            }
            Err(e) => panic!("{e}"),
        }
        let sender = std::thread::spawn({
            let path = path.clone();
            move || foreign_block_on(second.send_to(b"second", &path))
        });
        // Refused at least once before there is room (the thread starts and tries within
        // this; a try on a full queue backs off rather than fail).
        softtimer_async::time::sleep(Duration::from_millis(20)).await;
        assert!(!sender.is_finished(), "the send did not wait for room");
        read_the_first_then_the_second(&rx, queued).await;
        assert_eq!(sender.join().unwrap().unwrap(), 6);
    });
}

#[test]
fn try_send_says_when_the_queue_is_full_and_writable_when_there_is_room() {
    Runtime::new().unwrap().block_on(async {
        let (tx, rx) = UnixDatagram::pair().unwrap();
        let queued = fill(|| tx.try_send(b"x"));
        // The reader drains the queue after a while (a pair's sender turns writable again
        // once what it has queued falls to a quarter of its buffer, not at the first read).
        let reader = softtimer_async::spawn_local(async move {
            softtimer_async::time::sleep(Duration::from_millis(5)).await;
            let mut buf = [0u8; 1];
            for _ in 0..queued {
                rx.recv(&mut buf).await.unwrap();
                assert_eq!(&buf, b"x");
            }
            rx
        });
        timeout(BOUND, tx.writable())
            .await
            .expect("never writable")
            .unwrap();
        tx.try_send(b"y").unwrap();
        let rx = timeout(BOUND, reader).await.unwrap().unwrap();
        let mut buf = [0u8; 1];
        timeout(BOUND, rx.recv(&mut buf)).await.unwrap().unwrap();
        assert_eq!(&buf, b"y");
    });
}

#[test]
fn unbound_and_connected_sockets() {
    let dir = Dir::new("dg-connect");
    let path = dir.0.join("rx.sock");
    Runtime::new().unwrap().block_on(async {
        let rx = UnixDatagram::bind(&path).unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        assert!(tx.local_addr().unwrap().is_unnamed());
        assert_eq!(
            tx.peer_addr().unwrap_err().kind(),
            io::ErrorKind::NotConnected
        );
        let err = tx.send(b"x").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotConnected, "{err}");

        tx.send_to(b"anonymous", &path).await.unwrap();
        let mut buf = [0u8; 32];
        let (n, from) = rx.recv_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"anonymous");
        assert!(from.is_unnamed());

        tx.connect(&path).unwrap();
        assert_eq!(tx.peer_addr().unwrap().as_pathname(), Some(&*path));
        tx.send(b"connected").await.unwrap();
        rx.readable().await.unwrap();
        let n = rx.try_recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"connected");
        assert_eq!(
            rx.try_recv(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );

        // A socket shut for writing sends nothing; one shut for reading takes nothing.
        tx.shutdown(std::net::Shutdown::Write).unwrap();
        let err = tx.send(b"late").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
        rx.shutdown(std::net::Shutdown::Read).unwrap();
        // A receive on it waits (no end of stream for a datagram socket), without spinning
        // through the readiness the shutdown reported.
        assert!(
            timeout(Duration::from_millis(20), rx.recv(&mut buf))
                .await
                .is_err()
        );
        let other = UnixDatagram::unbound().unwrap();
        let err = other.send_to(b"late", &path).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
    });
}

#[test]
fn its_futures_are_send() {
    fn sendable<T: Send>(t: T) -> T {
        t
    }
    Runtime::new().unwrap().block_on(async {
        let (a, _b) = UnixDatagram::pair().unwrap();
        let mut buf = [0u8; 8];
        drop(sendable(a.recv(&mut buf)));
        drop(sendable(a.recv_from(&mut buf)));
        drop(sendable(a.send(b"x")));
        drop(sendable(a.send_to(b"x", "/nowhere")));
        drop(sendable(a.readable()));
        drop(sendable(a.writable()));
    });
}

#[test]
fn bad_paths_and_gone_peers_say_what_is_wrong() {
    let dir = Dir::new("dg-errors");
    Runtime::new().unwrap().block_on(async {
        let tx = UnixDatagram::unbound().unwrap();
        let missing = dir.0.join("nothing-here.sock");
        let err = tx.send_to(b"x", &missing).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        let err = tx.connect(&missing).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");

        // A socket file whose socket is gone refuses, and binding it again says it exists.
        let stale = dir.0.join("stale.sock");
        drop(UnixDatagram::bind(&stale).unwrap());
        let err = tx.send_to(b"x", &stale).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
        let err = UnixDatagram::bind(&stale).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");

        let too_long = dir.0.join("x".repeat(200));
        let err = UnixDatagram::bind(&too_long).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("107"), "{err}");
        let err = tx.send_to(b"x", &too_long).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");

        // A connected socket whose peer is gone: the send is refused, not lost in silence.
        let (a, b) = UnixDatagram::pair().unwrap();
        drop(b);
        let err = a.send(b"x").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
    });
    // Outside a runtime there is no loop to register with, and a bind leaves no file.
    let outside = dir.0.join("outside.sock");
    let err = UnixDatagram::bind(&outside).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Other, "{err}");
    assert!(!outside.exists(), "the failed bind left its socket file");
    assert_eq!(
        UnixDatagram::pair().unwrap_err().kind(),
        io::ErrorKind::Other
    );
    assert_eq!(
        UnixDatagram::unbound().unwrap_err().kind(),
        io::ErrorKind::Other
    );
}
