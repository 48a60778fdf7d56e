//! The runtime's sockets used by another executor, on a thread in no runtime's context.

use std::io::Write;
use std::time::Duration;

use futures_io::AsyncRead;
use softtimer_async::time::timeout;
use softtimer_async::{Runtime, TcpListener, UdpSocket};

mod common;
use common::foreign_block_on;

const BOUND: Duration = Duration::from_secs(10);

/// A socket of the runtime used by another executor, on a thread in no runtime's context:
/// an address written out is parsed there, as a typed one is taken; a host name, which
/// needs the runtime's blocking pool, is refused with an error, not a panic.
#[test]
fn send_to_a_literal_address_works_from_another_executors_thread() {
    let rt = Runtime::new().unwrap();
    let (sender, receiver) = rt.block_on(async {
        let sender = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let receiver = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        (sender, receiver)
    });
    let to = receiver.local_addr().unwrap();
    let (written, refused) = std::thread::spawn(move || {
        foreign_block_on(async {
            let written = sender.send_to(b"literal", to.to_string()).await;
            let pair = sender.send_to(b"pair", ("127.0.0.1", to.port())).await;
            let refused = sender.send_to(b"name", ("localhost", to.port())).await;
            (written.and(pair), refused)
        })
    })
    .join()
    .unwrap();
    assert_eq!(written.unwrap(), 4);
    let err = refused.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::Other, "{err}");
    rt.block_on(async {
        let mut buf = [0u8; 16];
        for want in [&b"literal"[..], b"pair"] {
            let (n, _) = timeout(BOUND, receiver.recv_from(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&buf[..n], want);
        }
    });
}

/// A listener of the runtime accepting on another executor's thread: the connection is
/// registered with the listener's loop, not dropped for want of one on the accepting thread,
/// and reads there.
#[test]
fn a_listener_accepts_on_another_executors_thread() {
    let rt = Runtime::new().unwrap();
    let listener = rt.block_on(async { TcpListener::bind("127.0.0.1:0").await.unwrap() });
    let at = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(at).unwrap();
        c.write_all(b"hello").unwrap();
        c
    });
    let got = std::thread::spawn(move || {
        foreign_block_on(async move {
            let (mut stream, peer) = listener.accept().await.unwrap();
            let mut buf = [0u8; 5];
            let mut n = 0;
            while n < buf.len() {
                let read = std::future::poll_fn(|cx| {
                    std::pin::Pin::new(&mut stream).poll_read(cx, &mut buf[n..])
                })
                .await
                .unwrap();
                assert!(read > 0, "the connection was closed");
                n += read;
            }
            (peer, buf)
        })
    });
    // The listener's loop runs meanwhile, as it would in a program that uses both.
    let (peer, buf) = rt.block_on(async {
        let deadline = std::time::Instant::now() + BOUND;
        while !got.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "the accepted connection read nothing within {BOUND:?}"
            );
            softtimer_async::time::sleep(Duration::from_millis(1)).await;
        }
        got.join().unwrap()
    });
    let c = client.join().unwrap();
    assert_eq!(peer, c.local_addr().unwrap());
    assert_eq!(&buf, b"hello");
}
