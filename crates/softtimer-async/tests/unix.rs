//! Unix-domain streams on the runtime: an echo through a listener, a pair, tokio's I/O
//! traits, halves owned and borrowed, hyper over a socket file, and the errors of bad paths.

use std::convert::Infallible;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, Response};
use softtimer_async::hyper::HyperTimer;
use softtimer_async::time::timeout;
use softtimer_async::{Runtime, UnixListener, UnixStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::Dir;

const BOUND: Duration = Duration::from_secs(10);

#[test]
fn an_echo_through_a_socket_file_with_many_clients() {
    let dir = Dir::new("echo");
    let path = dir.0.join("echo.sock");
    Runtime::new().unwrap().block_on(async {
        let listener = UnixListener::bind(&path).unwrap();
        assert_eq!(listener.local_addr().unwrap().as_pathname(), Some(&*path));
        let server = softtimer_async::spawn_local(async move {
            loop {
                let (mut stream, peer) = listener.accept().await.unwrap();
                assert!(peer.is_unnamed());
                softtimer_async::spawn_local(async move {
                    // A request is a length byte and that many bytes; the answer, the same.
                    loop {
                        let Ok(len) = stream.read_u8().await else {
                            return;
                        };
                        let mut body = vec![0u8; usize::from(len)];
                        stream.read_exact(&mut body).await.unwrap();
                        stream.write_u8(len).await.unwrap();
                        AsyncWriteExt::write_all(&mut stream, &body).await.unwrap();
                    }
                });
            }
        });
        let clients: Vec<_> = (0..20u8)
            .map(|i| {
                let path = path.clone();
                softtimer_async::spawn_local(async move {
                    let mut stream = UnixStream::connect(&path).await.unwrap();
                    for round in 0..50u8 {
                        let body = vec![i ^ round; usize::from(i) * 10];
                        stream.write_u8(body.len() as u8).await.unwrap();
                        AsyncWriteExt::write_all(&mut stream, &body).await.unwrap();
                        let len = stream.read_u8().await.unwrap();
                        let mut back = vec![0u8; usize::from(len)];
                        AsyncReadExt::read_exact(&mut stream, &mut back)
                            .await
                            .unwrap();
                        assert_eq!(back, body);
                    }
                    stream.shutdown().await.unwrap();
                })
            })
            .collect();
        timeout(BOUND, async {
            for client in clients {
                client.await.unwrap();
            }
        })
        .await
        .expect("the clients took too long");
        server.abort();
    });
}

/// Its futures move between threads, as `spawn` needs (made here, never polled).
#[test]
fn its_futures_are_send() {
    fn sendable<T: Send>(t: T) -> T {
        t
    }
    let dir = Dir::new("send");
    Runtime::new().unwrap().block_on(async {
        let (a, _b) = UnixStream::pair().unwrap();
        let listener = UnixListener::bind(dir.0.join("s.sock")).unwrap();
        let mut buf = [0u8; 8];
        drop(sendable(a.read_exact(&mut buf)));
        drop(sendable(a.read(&mut buf)));
        drop(sendable(a.write_all(b"x")));
        drop(sendable(a.write(b"x")));
        drop(sendable(a.readable()));
        drop(sendable(a.writable()));
        drop(sendable(a.shutdown()));
        drop(sendable(UnixStream::connect("/nowhere")));
        drop(sendable(listener.accept()));
        let (rx, tx) = a.into_split();
        drop(sendable(rx.read(&mut buf)));
        drop(sendable(rx.read_exact(&mut buf)));
        drop(sendable(tx.write(b"x")));
        drop(sendable(tx.write_all(b"x")));
    });
}

#[test]
fn a_pair_shuts_down_and_reads_without_waiting() {
    Runtime::new().unwrap().block_on(async {
        let (a, b) = UnixStream::pair().unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(
            b.try_read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        a.write_all(b"last").await.unwrap();
        a.shutdown().await.unwrap();
        assert_eq!(b.read_exact(&mut buf[..4]).await.unwrap(), 4);
        assert_eq!(&buf[..4], b"last");
        assert_eq!(
            b.read(&mut buf).await.unwrap(),
            0,
            "end of stream after the shutdown"
        );
        assert_eq!(
            b.read_exact(&mut buf).await.unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    });
}

#[test]
fn halves_copy_on_their_own_tasks_and_come_back_together() {
    Runtime::new().unwrap().block_on(async {
        let (client, server) = UnixStream::pair().unwrap();
        let (mut rx, mut tx) = server.into_split();
        // Halves on their own task: the echo copies until the client's end of stream,
        // then drops its write half, which ends the client's stream in turn.
        let echo = softtimer_async::spawn(async move {
            let copied = tokio::io::copy(&mut rx, &mut tx).await.unwrap();
            drop(tx);
            (copied, rx)
        });
        let sent: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let (mut client_rx, mut client_tx) = client.into_split();
        let writer = softtimer_async::spawn(async move {
            AsyncWriteExt::write_all(&mut client_tx, &sent)
                .await
                .unwrap();
            AsyncWriteExt::shutdown(&mut client_tx).await.unwrap();
            (sent, client_tx)
        });
        let mut got = Vec::new();
        timeout(BOUND, client_rx.read_to_end(&mut got))
            .await
            .expect("the echo's end of stream never came")
            .unwrap();
        let (sent, client_tx) = writer.await.unwrap();
        assert_eq!(got, sent);
        let (copied, _rx) = echo.await.unwrap();
        assert_eq!(copied, 20_000);

        // Halves of different streams are refused and handed back; a stream's own rejoin.
        let (other, _peer) = UnixStream::pair().unwrap();
        let (other_rx, other_tx) = other.into_split();
        let err = client_rx.reunite(other_tx).unwrap_err();
        assert_eq!(err.to_string(), "the halves are not of the same UnixStream");
        let softtimer_async::net::unix::ReuniteError(client_rx, _other_tx) = err;
        drop(other_rx);
        let client = client_rx.reunite(client_tx).unwrap();
        assert!(client.peer_addr().unwrap().is_unnamed());
    });
}

#[test]
fn borrowed_halves_copy_within_one_task() {
    Runtime::new().unwrap().block_on(async {
        let (client, mut server) = UnixStream::pair().unwrap();
        let sent: Vec<u8> = (0..50_000u32).map(|i| (i % 253) as u8).collect();
        let talking = softtimer_async::spawn_local({
            let sent = sent.clone();
            async move {
                let mut client = client;
                AsyncWriteExt::write_all(&mut client, &sent).await.unwrap();
                client.shutdown().await.unwrap();
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                got
            }
        });
        let (mut reader, mut writer) = server.split();
        let copied = timeout(BOUND, tokio::io::copy(&mut reader, &mut writer))
            .await
            .expect("the copy did not finish")
            .unwrap();
        AsyncWriteExt::shutdown(&mut writer).await.unwrap();
        let got = timeout(BOUND, talking).await.unwrap().unwrap();
        assert_eq!(copied, sent.len() as u64);
        assert_eq!(got, sent);
    });
}

#[test]
fn hyper_serves_over_a_socket_file() {
    let dir = Dir::new("hyper");
    let path = dir.0.join("http.sock");
    Runtime::new().unwrap().block_on(async {
        let listener = UnixListener::bind(&path).unwrap();
        let server = softtimer_async::spawn_local(async move {
            while let Ok((stream, _)) = listener.accept().await {
                softtimer_async::spawn_local(async move {
                    let service = hyper::service::service_fn(|request: Request<_>| async move {
                        let body = format!("hello {}", request.uri().path());
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(HyperTimer::current())
                        .serve_connection(stream, service)
                        .await;
                });
            }
        });
        let stream = UnixStream::connect(&path).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(stream).await.unwrap();
        let driving = softtimer_async::spawn_local(connection);
        for name in ["a", "bc"] {
            let request = Request::builder()
                .uri(format!("/{name}"))
                .header(hyper::header::HOST, "localhost")
                .body(Empty::<Bytes>::new())
                .unwrap();
            let response = timeout(BOUND, sender.send_request(request))
                .await
                .expect("no answer in time")
                .unwrap();
            assert!(response.status().is_success());
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, format!("hello /{name}").as_bytes());
        }
        drop(sender);
        driving.await.unwrap().unwrap();
        server.abort();
    });
}

#[test]
fn bad_paths_say_what_is_wrong() {
    let dir = Dir::new("errors");
    Runtime::new().unwrap().block_on(async {
        let missing = dir.0.join("nothing-here.sock");
        let err = UnixStream::connect(&missing).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");

        // A socket file whose listener is gone refuses.
        let stale = dir.0.join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        let err = UnixStream::connect(&stale).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");

        // The file stays, so binding it again says so.
        let err = UnixListener::bind(&stale).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");

        let too_long = dir.0.join("x".repeat(200));
        let err = UnixListener::bind(&too_long).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        let err = UnixListener::bind(dir.0.join("no-dir/a.sock")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    });
    // Outside a runtime there is no loop to register with, and a bind leaves no file.
    let err = UnixStream::pair().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Other, "{err}");
    let outside = dir.0.join("outside.sock");
    let err = UnixListener::bind(&outside).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Other, "{err}");
    assert!(!outside.exists(), "the failed bind left its socket file");
}

/// The peer's last bytes and its end of stream reach the loop as one edge, while the reader
/// waits: the reader gets both (a short read must not make it wait for another edge).
#[test]
fn an_end_of_stream_that_comes_with_the_last_bytes_is_read() {
    Runtime::new().unwrap().block_on(async {
        for _ in 0..20 {
            let (mut client, server) = UnixStream::pair().unwrap();
            let (_rx, tx) = server.into_split();
            softtimer_async::spawn_local(async move {
                tx.write_all(b"last words").await.unwrap();
                // Dropping the write half ends the stream.
            });
            let mut got = Vec::new();
            timeout(
                BOUND,
                tokio::io::AsyncReadExt::read_to_end(&mut client, &mut got),
            )
            .await
            .expect("the end of the stream was never read")
            .unwrap();
            assert_eq!(got, b"last words");
        }
    });
}
