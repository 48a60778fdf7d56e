//! Sockets on the runtime: UDP echo and batches, TCP, errors, and paced sends.

use std::net::SocketAddr;
use std::time::Duration;

use softtimer::SimClock;
use softtimer_async::time::timeout;
use softtimer_async::{PacedSender, Runtime, TcpListener, TcpStream, UdpSocket};
use softtimer_rt::RecvBatch;

const BOUND: Duration = Duration::from_secs(10);

/// Runs `test` on a fresh runtime.
fn on_runtime<F: Future>(test: F) -> F::Output {
    Runtime::new().unwrap().block_on(test)
}

/// A UDP socket on the runtime, bound to a free loopback port.
async fn loopback() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.unwrap()
}

/// What `f` gives, which must come within [`BOUND`].
async fn bounded<T>(f: impl Future<Output = T>) -> T {
    timeout(BOUND, f).await.unwrap()
}

#[test]
fn udp_echo_single_and_batched() {
    on_runtime(async {
        let echo = loopback().await;
        let to = echo.local_addr().unwrap();
        let server = softtimer_async::spawn(async move {
            let mut batch = RecvBatch::new(16, 2048);
            let mut echoed = 0;
            while echoed < 20 {
                let n = echo.recv_batch(&mut batch).await.unwrap();
                let replies: Vec<(&[u8], SocketAddr)> = (0..n)
                    .map(|i| {
                        let (data, from) = batch.get(i).unwrap();
                        (data, from.unwrap())
                    })
                    .collect();
                echoed += echo.send_batch(&replies).await.unwrap();
            }
            echoed
        });
        let client = loopback().await;
        client.send_to(b"one", to).await.unwrap();
        let mut buf = [0u8; 2048];
        let (n, from) = bounded(client.recv_from(&mut buf)).await.unwrap();
        assert_eq!((&buf[..n], from), (&b"one"[..], to));
        let messages: Vec<Vec<u8>> = (0..19u8).map(|i| vec![i; 100 + usize::from(i)]).collect();
        let batch: Vec<(&[u8], SocketAddr)> = messages.iter().map(|m| (m.as_slice(), to)).collect();
        assert_eq!(client.send_batch(&batch).await.unwrap(), 19);
        let mut got = Vec::new();
        while got.len() < 19 {
            let (n, _) = bounded(client.recv_from(&mut buf)).await.unwrap();
            got.push(buf[..n].to_vec());
        }
        got.sort();
        assert!(got == messages);
        assert_eq!(bounded(server).await.unwrap(), 20);
    });
}

#[test]
fn a_socket_error_reaches_the_task_as_an_io_error() {
    on_runtime(async {
        // A port nobody listens on: the kernel answers with port unreachable.
        let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let nobody = closed.local_addr().unwrap();
        drop(closed);
        let socket = loopback().await;
        socket.connect(nobody).await.unwrap();
        socket.send(b"anyone?").await.unwrap();
        let mut buf = [0u8; 16];
        let err = bounded(socket.recv(&mut buf)).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
        // The same for TCP.
        let err = bounded(TcpStream::connect(nobody)).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
        // Offload calls on a socket made without offload: a clear error.
        let err = socket.recv_segments(&mut [], &mut []).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
    });
}

#[test]
fn tcp_connects_by_name_and_refuses_bad_addresses() {
    on_runtime(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // "localhost" may resolve to ::1 first, where nothing listens: the next address is
        // tried.
        let stream = bounded(TcpStream::connect(format!("localhost:{port}")))
            .await
            .unwrap();
        let (_, peer) = bounded(listener.accept()).await.unwrap();
        assert_eq!(peer, stream.local_addr().unwrap());
        let by_pair = bounded(TcpStream::connect(("127.0.0.1", port))).await;
        assert!(by_pair.is_ok());
        for bad in ["localhost", "localhost:http", "127.0.0.1:99999"] {
            let err = TcpStream::connect(bad).await.unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{bad}: {err}");
        }
    });
}

#[test]
fn sockets_bind_and_connect_by_name_off_the_loop_and_refuse_bad_addresses() {
    on_runtime(async {
        let pool_threads = || softtimer_async::Handle::current().stats().blocking_threads;
        // A literal address binds at once, on the loop; a name is looked up on the blocking
        // pool (which starts a thread for it). "localhost" is in every /etc/hosts.
        let literal = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        assert_eq!(pool_threads(), 0, "a literal address went to the resolver");
        drop(literal);
        let listener = bounded(TcpListener::bind("localhost:0")).await.unwrap();
        assert!(
            pool_threads() >= 1,
            "the name was not looked up on the pool"
        );
        assert!(listener.local_addr().unwrap().ip().is_loopback());
        let server = bounded(UdpSocket::bind(("localhost", 0))).await.unwrap();
        let server_addr = server.local_addr().unwrap();
        assert!(server_addr.ip().is_loopback());
        // Connect by name: the client is bound in the server's family, the family
        // localhost's first address has (both lookups give the same order), so that one
        // connects.
        let family = if server_addr.is_ipv4() {
            "127.0.0.1:0"
        } else {
            "[::1]:0"
        };
        let client = UdpSocket::bind(family).await.unwrap();
        bounded(client.connect(format!("localhost:{}", server_addr.port())))
            .await
            .unwrap();
        assert_eq!(client.peer_addr().unwrap(), server_addr);
        client.send(b"by name").await.unwrap();
        let mut buf = [0u8; 16];
        let (n, from) = bounded(server.recv_from(&mut buf)).await.unwrap();
        assert_eq!(
            (&buf[..n], from),
            (&b"by name"[..], client.local_addr().unwrap())
        );
        // Bad strings are refused before any lookup; a taken port is the bind's own error.
        for bad in ["localhost", "localhost:http", "127.0.0.1:99999", "::1:80"] {
            let err = TcpListener::bind(bad).await.unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{bad}: {err}");
            let err = UdpSocket::bind(bad).await.unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{bad}: {err}");
        }
        let taken = listener.local_addr().unwrap();
        let err = TcpListener::bind(taken).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
        // When no address connects, the last one's error comes back: an IPv4 socket
        // cannot connect to an IPv6 address.
        let v4 = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        assert!(v4.connect("[::1]:9").await.is_err());
        assert!(v4.peer_addr().is_err(), "connected after a failed connect");
    });
}

#[test]
fn a_list_binds_its_first_free_address_and_a_listener_queues_a_burst_of_connects() {
    on_runtime(async {
        // A slice is tried in order, as std's and tokio's are: a taken port, then two free
        // ones (freed just now), of which the first binds.
        let first = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let taken = first.local_addr().unwrap();
        let freed = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
        };
        let (free_a, free_b) = (freed(), freed());
        let second = TcpListener::bind(&[taken, free_a, free_b][..])
            .await
            .unwrap();
        assert_eq!(second.local_addr().unwrap(), free_a);
        let free: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let udp = UdpSocket::bind(&&[free][..]).await.unwrap();
        assert!(udp.local_addr().unwrap().ip().is_loopback());
        let none: &[SocketAddr] = &[];
        for err in [
            TcpListener::bind(none).await.unwrap_err(),
            UdpSocket::bind(none).await.unwrap_err(),
            TcpStream::connect(none).await.unwrap_err(),
        ] {
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
        }
        assert!(
            softtimer_async::net::lookup_host(none)
                .await
                .unwrap()
                .is_empty()
        );
        // 300 connects before any accept: a backlog of 128 (std's and tokio's) would drop
        // the SYNs past it (the client sends them again a second later, past the connects'
        // bound); 1024 queues them all, where the kernel's cap allows (it is 4096 unless
        // lowered).
        let cap: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4096);
        let burst = cap.min(300);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let clients = softtimer_async::spawn_blocking(move || {
            (0..burst)
                .map(|_| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(900)))
                .collect::<std::io::Result<Vec<_>>>()
        });
        let clients = bounded(clients).await.unwrap();
        let clients = clients.expect("a connect of the burst was not queued");
        for _ in 0..burst {
            bounded(listener.accept()).await.unwrap();
        }
        drop(clients);
    });
}

#[test]
fn udp_without_waiting_readiness_and_send_to_by_name() {
    on_runtime(async {
        let rx = loopback().await;
        let tx = loopback().await;
        let to = rx.local_addr().unwrap();
        let mut buf = [0u8; 16];
        // Nothing waits yet: WouldBlock, not a wait.
        let err = rx.try_recv_from(&mut buf).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
        bounded(tx.writable()).await.unwrap();
        assert_eq!(tx.try_send_to(b"one", to).unwrap(), 3);
        let (n, from) = loop {
            bounded(rx.readable()).await.unwrap();
            match rx.try_recv_from(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                got => break got.unwrap(),
            }
        };
        assert_eq!((&buf[..n], from), (&b"one"[..], tx.local_addr().unwrap()));
        // Connected: try_send and try_recv; send_to by name (looked up) and by a list.
        tx.connect(to).await.unwrap();
        assert_eq!(tx.try_send(b"two").unwrap(), 3);
        let n = loop {
            bounded(rx.readable()).await.unwrap();
            match rx.try_recv(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                got => break got.unwrap(),
            }
        };
        assert_eq!(&buf[..n], b"two");
        // By name, to the family of localhost's first address (the one send_to takes).
        let first = softtimer_async::net::lookup_host(("localhost", 0))
            .await
            .unwrap()[0];
        let family = if first.is_ipv4() {
            "127.0.0.1:0"
        } else {
            "[::1]:0"
        };
        let (named_rx, sender) = (
            UdpSocket::bind(family).await.unwrap(),
            UdpSocket::bind(family).await.unwrap(),
        );
        let by_name = format!("localhost:{}", named_rx.local_addr().unwrap().port());
        let sent = bounded(sender.send_to(b"three", by_name.as_str())).await;
        assert_eq!(sent.unwrap(), 5);
        let (n, _) = bounded(named_rx.recv_from(&mut buf)).await.unwrap();
        assert_eq!(&buf[..n], b"three");
        let none: &[SocketAddr] = &[];
        let err = sender.send_to(b"four", none).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    });
}

#[test]
fn a_borrowed_split_copies_a_stream_back_with_tokios_copy() {
    on_runtime(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = softtimer_async::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let (mut reader, mut writer) = stream.split();
            // Until the client's end of stream, then the write direction shut.
            let copied = tokio::io::copy(&mut reader, &mut writer).await.unwrap();
            tokio::io::AsyncWriteExt::shutdown(&mut writer)
                .await
                .unwrap();
            copied
        });
        let client = bounded(TcpStream::connect(addr)).await.unwrap();
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 253) as u8).collect();
        client.write_all(&data).await.unwrap();
        bounded(client.shutdown()).await.unwrap();
        let mut back = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match bounded(client.read(&mut buf)).await.unwrap() {
                0 => break,
                n => back.extend_from_slice(&buf[..n]),
            }
        }
        assert!(back == data, "{} bytes back of {}", back.len(), data.len());
        assert_eq!(bounded(server).await.unwrap(), data.len() as u64);
    });
}

#[test]
fn tcp_echo_with_the_futures_io_and_tokio_traits() {
    on_runtime(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = softtimer_async::spawn(async move {
            let (stream, peer) = listener.accept().await.unwrap();
            assert_eq!(peer, stream.peer_addr().unwrap());
            let mut total = 0;
            let mut buf = vec![0u8; 4096];
            loop {
                let n = stream.read(&mut buf).await.unwrap();
                if n == 0 {
                    break total;
                }
                stream.write_all(&buf[..n]).await.unwrap();
                total += n;
            }
        });
        let mut stream = bounded(TcpStream::connect(addr)).await.unwrap();
        // 64 KB (well inside loopback's socket buffers, so that the echo need not be read
        // while it is written) through the tokio traits, as a codec writes, then read back
        // through futures-io's.
        let data: Vec<u8> = (0..65_536u32).map(|i| (i % 251) as u8).collect();
        use tokio::io::AsyncWriteExt;
        bounded(AsyncWriteExt::write_all(&mut stream, &data))
            .await
            .unwrap();
        // The stream's own `shutdown` has tokio's shape (async, the write direction): with
        // tokio's trait in scope the call compiles as a tokio user writes it.
        bounded(stream.shutdown()).await.unwrap();
        let mut back = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let read = std::future::poll_fn(|cx| {
                futures_io::AsyncRead::poll_read(std::pin::Pin::new(&mut &stream), cx, &mut buf)
            });
            let n = bounded(read).await.unwrap();
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
        assert!(back == data);
        assert_eq!(bounded(server).await.unwrap(), data.len());
    });
}

/// Tasks sharing one paced queue (an `Arc<PacedSender>`) each wait for room and for the
/// flush: every waiter is woken (the queue kept one waker for room and one for the flush, so
/// the first task to wait was forgotten when the second did, and waited for ever).
#[test]
fn tasks_sharing_a_paced_queue_are_all_woken_for_room_and_flush() {
    let rt = Runtime::new().unwrap();
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap();
    let done = rt.block_on(async move {
        let socket = loopback().await;
        // 125 bytes at 1 Mbit/s: one every millisecond, four queued at most.
        let paced = std::sync::Arc::new(PacedSender::with_queue(&socket, "1M".parse().unwrap(), 4));
        let sender = |paced: std::sync::Arc<PacedSender>| async move {
            for _ in 0..12 {
                paced.send_to(&[0; 125], to).await.unwrap();
            }
            paced.flush().await.unwrap();
        };
        let a = softtimer_async::spawn(sender(std::sync::Arc::clone(&paced)));
        let b = softtimer_async::spawn(sender(std::sync::Arc::clone(&paced)));
        let both = async { (a.await.unwrap(), b.await.unwrap()) };
        let done = timeout(Duration::from_secs(10), both).await.is_ok();
        (done, paced.sent())
    });
    assert_eq!(done, (true, 24), "a task sharing the queue was never woken");
}

#[test]
fn paced_departures_are_spaced_exactly_by_the_rate() {
    // On a simulated clock: the departures the scheduler chose, not the wall clock's.
    let clock = SimClock::new(1_000_000_000);
    let rt = Runtime::builder().simulated(clock).build().unwrap();
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_read_timeout(Some(BOUND)).unwrap();
    let to = sink.local_addr().unwrap();
    let departures = rt.block_on(async move {
        let socket = loopback().await;
        // 100 Mbit/s of 1472-byte datagrams: one every 117.76 µs.
        let paced = PacedSender::with_queue(&socket, "100M".parse().unwrap(), 8);
        paced.record_departures(64);
        for i in 0..50u8 {
            paced.send_to(&[i; 1472], to).await.unwrap();
        }
        paced.flush().await.unwrap();
        assert_eq!(paced.sent(), 50);
        assert_eq!(paced.queued(), 0);
        paced.departures()
    });
    assert_eq!(departures.len(), 50);
    for pair in departures.windows(2) {
        assert_eq!(
            pair[1].scheduled - pair[0].scheduled,
            Duration::from_nanos(117_760)
        );
    }
    for d in &departures {
        assert!(d.sent >= d.scheduled, "a datagram left before its time");
        assert_eq!(d.bytes, 1472);
    }
    // Every datagram arrived, in order.
    let mut buf = [0u8; 2048];
    for i in 0..50u8 {
        let n = sink.recv(&mut buf).unwrap();
        assert_eq!((n, buf[0]), (1472, i));
    }
}

#[test]
fn send_at_leaves_at_its_time_and_reports_a_failed_departure() {
    on_runtime(async {
        let rx = loopback().await;
        let tx = loopback().await;
        let to = rx.local_addr().unwrap();
        let start = std::time::Instant::now();
        // Queued out of order: they leave in departure order.
        tx.send_at(b"second", to, start + Duration::from_micros(600))
            .await
            .unwrap();
        tx.send_at(b"first", to, start + Duration::from_micros(300))
            .await
            .unwrap();
        let mut buf = [0u8; 16];
        for expected in [&b"first"[..], b"second"] {
            let (n, _) = bounded(rx.recv_from(&mut buf)).await.unwrap();
            assert_eq!(&buf[..n], expected);
        }
        assert!(start.elapsed() >= Duration::from_micros(600));
        // A datagram too long for UDP fails at its departure; the next call says so.
        tx.send_at(&vec![0u8; 70_000], to, std::time::Instant::now())
            .await
            .unwrap();
        softtimer_async::time::sleep(Duration::from_micros(200)).await;
        let err = tx
            .send_at(b"x", to, std::time::Instant::now())
            .await
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EMSGSIZE));
    });
}

#[test]
fn offloaded_sockets_send_segments_in_one_call() {
    on_runtime(async {
        let rx = UdpSocket::bind_with_offload("127.0.0.1:0").await.unwrap();
        let tx = UdpSocket::bind_with_offload("127.0.0.1:0").await.unwrap();
        let segments = tx.max_gso_segments().min(4);
        let contents = vec![7u8; 1000 * segments];
        let transmit = quinn_udp::Transmit {
            destination: rx.local_addr().unwrap(),
            ecn: None,
            contents: &contents,
            segment_size: (segments > 1).then_some(1000),
            src_ip: None,
        };
        // Twice, so that two receives wait: with room for one description only, one
        // buffer of the two is filled at a time.
        tx.send_transmit(&transmit).await.unwrap();
        tx.send_transmit(&transmit).await.unwrap();
        let mut received = 0;
        while received < 2 * contents.len() {
            let (mut first, mut second) = (vec![0u8; 65_536], vec![0u8; 65_536]);
            let mut bufs = [
                std::io::IoSliceMut::new(&mut first),
                std::io::IoSliceMut::new(&mut second),
            ];
            let mut meta = [quinn_udp::RecvMeta::default()];
            let n = bounded(rx.recv_segments(&mut bufs, &mut meta))
                .await
                .unwrap();
            assert_eq!(n, 1);
            assert_eq!(meta[0].stride, 1000, "segments keep their size");
            received += meta[0].len;
        }
        assert_eq!(received, 2 * contents.len());
    });
}

/// A receive with more buffers than quinn-udp takes in one call (a batch, 32) reads a full
/// batch and leaves the rest readable: the readiness was cleared as if the socket were
/// drained, and the rest waited for another datagram. A transmit the kernel refuses says so
/// (quinn-udp's `send` passed `EMSGSIZE` over as sent).
#[test]
fn offloaded_receives_past_a_batch_and_refused_transmits() {
    on_runtime(async {
        let rx = UdpSocket::bind_with_offload("127.0.0.1:0").await.unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let count = quinn_udp::BATCH_SIZE + 8;
        for i in 0..count {
            tx.send_to(&[i as u8; 100], rx.local_addr().unwrap())
                .unwrap();
        }
        let mut storage = vec![[0u8; 2048]; 2 * quinn_udp::BATCH_SIZE];
        let mut received = 0;
        while received < count {
            let mut bufs: Vec<_> = storage
                .iter_mut()
                .map(|b| std::io::IoSliceMut::new(b))
                .collect();
            let mut meta = vec![quinn_udp::RecvMeta::default(); bufs.len()];
            let n = bounded(rx.recv_segments(&mut bufs, &mut meta))
                .await
                .unwrap();
            assert!(n <= quinn_udp::BATCH_SIZE);
            received += meta[..n]
                .iter()
                .map(|m| m.len / m.stride.max(1))
                .sum::<usize>();
        }
        assert_eq!(received, count);
        let contents = vec![0u8; 70_000];
        let too_big = quinn_udp::Transmit {
            destination: rx.local_addr().unwrap(),
            ecn: None,
            contents: &contents,
            segment_size: None,
            src_ip: None,
        };
        let err = rx.send_transmit(&too_big).await.unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EMSGSIZE));
    });
}

/// Whether any epoll set of this process watches the socket whose inode is `ino` (from
/// `/proc/self/fdinfo`: an epoll descriptor lists each watched file's inode).
fn watched_by_an_epoll_set(ino: u64) -> bool {
    let needle = format!("ino:{ino:x} ");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .any(|fd| {
            let is_epoll = std::fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy().contains("eventpoll"));
            let info = format!("/proc/self/fdinfo/{}", fd.file_name().to_string_lossy());
            is_epoll && std::fs::read_to_string(info).is_ok_and(|text| text.contains(&needle))
        })
}

/// A socket (UDP, a TCP listener) dropped while its descriptor lives on elsewhere (a
/// duplicate made before `from_std`) leaves the loop's epoll set at once: closing its own
/// descriptor does not take it out while a duplicate is open, and its readiness went on
/// waking the loop.
#[test]
fn a_dropped_socket_leaves_the_epoll_set_although_a_duplicate_lives() {
    use std::os::fd::AsFd;
    let rt = Runtime::new().unwrap();
    let std_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let duplicate = std_socket.try_clone().unwrap();
    let ino = rustix::fs::fstat(duplicate.as_fd()).unwrap().st_ino;
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listener_duplicate = std_listener.try_clone().unwrap();
    let listener_ino = rustix::fs::fstat(listener_duplicate.as_fd())
        .unwrap()
        .st_ino;
    rt.block_on(async move {
        let socket = UdpSocket::from_std(std_socket).unwrap();
        let listener = TcpListener::from_std(std_listener).unwrap();
        assert!(watched_by_an_epoll_set(ino), "registered");
        assert!(watched_by_an_epoll_set(listener_ino), "registered");
        drop((socket, listener));
        assert!(
            !watched_by_an_epoll_set(ino),
            "UDP: still watched after the drop"
        );
        assert!(
            !watched_by_an_epoll_set(listener_ino),
            "TCP: still watched after the drop"
        );
    });
    drop((duplicate, listener_duplicate));
}

#[test]
fn a_paced_sender_outliving_its_runtime_says_so_and_never_hangs_a_flush() {
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    let rt = Runtime::new().unwrap();
    let (paced, to) = rt.block_on(async {
        let sink = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        // 1 kbit/s: 1000-byte datagrams 8 s apart, so the later ones are still queued.
        let paced = PacedSender::new(&socket, "1k".parse().unwrap());
        let to = sink.local_addr().unwrap();
        for _ in 0..3 {
            paced.send_to(&[0u8; 1000], to).await.unwrap();
        }
        (paced, to)
    });
    // The runtime is gone, and with it the queued datagrams' departures.
    drop(rt);
    let mut cx = Context::from_waker(Waker::noop());
    let mut flush = pin!(paced.flush());
    match flush.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) => assert!(e.to_string().contains("shut down"), "{e}"),
        other => panic!("a flush of datagrams that can never leave: {other:?}"),
    }
    let mut send = pin!(paced.send_to(b"after the runtime", to));
    match send.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) => assert!(e.to_string().contains("shut down"), "{e}"),
        Poll::Ready(Ok(())) => panic!("a datagram that cannot depart was accepted"),
        Poll::Pending => panic!("the send waits for a runtime that is gone"),
    }
}

#[test]
fn a_udp_socket_clone_is_the_same_socket_and_its_descriptor_takes_options() {
    use std::os::fd::{AsFd, AsRawFd};
    on_runtime(async {
        let server = loopback().await;
        let sender = loopback().await;
        let clone = server.clone();
        assert_eq!(clone.as_raw_fd(), server.as_raw_fd());
        // Within the kernel's stock limit (rmem_max, 208 KiB), which doubles what it is given.
        rustix::net::sockopt::set_socket_recv_buffer_size(server.as_fd(), 64 << 10).unwrap();
        let size = rustix::net::sockopt::socket_recv_buffer_size(clone.as_fd()).unwrap();
        assert_eq!(
            size,
            128 << 10,
            "the clone's descriptor has the option set on the original"
        );
        let to = server.local_addr().unwrap();
        sender.send_to(b"to either", to).await.unwrap();
        let mut buf = [0u8; 16];
        let (n, _) = timeout(BOUND, clone.recv_from(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"to either");
    });
}

#[test]
fn a_flush_waiting_when_the_runtime_shuts_down_is_woken_and_told() {
    use std::pin::pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll, Wake, Waker};
    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let rt = Runtime::new().unwrap();
    let paced = rt.block_on(async {
        let sink = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let paced = PacedSender::new(&socket, "1k".parse().unwrap());
        for _ in 0..3 {
            paced
                .send_to(&[0u8; 1000], sink.local_addr().unwrap())
                .await
                .unwrap();
        }
        paced
    });
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(Arc::clone(&flag));
    let mut cx = Context::from_waker(&waker);
    let mut flush = pin!(paced.flush());
    assert!(
        flush.as_mut().poll(&mut cx).is_pending(),
        "datagrams 8 s apart are queued"
    );
    drop(rt);
    assert!(
        flag.0.load(Ordering::SeqCst),
        "the waiting flush was not woken"
    );
    match flush.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) => assert!(e.to_string().contains("shut down"), "{e}"),
        other => panic!("flush after the shutdown: {other:?}"),
    }
}

#[test]
fn a_split_stream_reads_and_writes_from_two_tasks_and_its_write_half_closes_on_drop() {
    use futures_io::{AsyncRead, AsyncWrite};
    use std::pin::Pin;
    on_runtime(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = bounded(TcpStream::connect(addr)).await.unwrap();
        let (server, _) = bounded(listener.accept()).await.unwrap();
        let (mut rx, mut tx) = server.into_split();
        // The reader waits in its own task before anything is written.
        let reader = softtimer_async::spawn(async move {
            let mut got = [0u8; 5];
            let mut filled = 0;
            while filled < got.len() {
                let n =
                    std::future::poll_fn(|cx| Pin::new(&mut rx).poll_read(cx, &mut got[filled..]))
                        .await
                        .unwrap();
                assert!(n > 0, "end of stream before the bytes");
                filled += n;
            }
            (got, rx)
        });
        softtimer_async::yield_now().await;
        client.write_all(b"hello").await.unwrap();
        let (got, rx) = bounded(reader).await.unwrap();
        assert_eq!(&got, b"hello");
        // The write half through futures-io, from this task.
        std::future::poll_fn(|cx| Pin::new(&mut tx).poll_write(cx, b"back"))
            .await
            .unwrap();
        let mut back = [0u8; 4];
        let n = bounded(client.read_exact(&mut back)).await.unwrap();
        assert_eq!(n, back.len(), "read_exact gives the length, as tokio's");
        assert_eq!(&back, b"back");
        // Halves of different streams are refused and handed back.
        let other = bounded(TcpStream::connect(addr)).await.unwrap();
        let (other_rx, other_tx) = other.into_split();
        let err = rx.reunite(other_tx).unwrap_err();
        let (rx, _other_tx) = (err.0, err.1);
        drop(other_rx);
        // Dropping the write half: the peer reads end of stream; the read half still reads.
        drop(tx);
        let mut buf = [0u8; 8];
        assert_eq!(bounded(client.read(&mut buf)).await.unwrap(), 0);
        client.write_all(b"!").await.unwrap();
        assert_eq!(bounded(rx.read(&mut buf)).await.unwrap(), 1);
    });
}

/// A TCP peer's last bytes and its FIN reach the loop as one edge while the reader waits:
/// the reader gets both (a short read must not make it wait for another edge).
#[test]
fn an_end_of_stream_that_comes_with_the_last_bytes_is_read() {
    on_runtime(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        for _ in 0..20 {
            let mut client = TcpStream::connect(addr).await.unwrap();
            let (server, _) = listener.accept().await.unwrap();
            softtimer_async::spawn_local(async move {
                server.write_all(b"last words").await.unwrap();
                server.shutdown().await.unwrap();
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

/// Counts the wakes of a waker made from it.
struct WakeCount(std::sync::atomic::AtomicUsize);

impl std::task::Wake for WakeCount {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Receives given up before anything came (as a `timeout` around `recv_from` on a quiet
/// socket gives them up, by one task after another) leave no waker in the socket's list:
/// each waker, and the task it would keep alive, is released when its future is dropped.
#[test]
fn a_receive_given_up_leaves_no_waker_behind() {
    use std::sync::Arc;
    use std::task::{Context, Waker};
    on_runtime(async {
        let socket = loopback().await;
        let counts: Vec<Arc<WakeCount>> = (0..100).map(|_| Arc::new(WakeCount(0.into()))).collect();
        for count in &counts {
            let waker = Waker::from(Arc::clone(count));
            let mut buf = [0u8; 16];
            let mut recv = std::pin::pin!(socket.recv_from(&mut buf));
            assert!(
                recv.as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_pending()
            );
        }
        for count in &counts {
            assert_eq!(
                Arc::strong_count(count),
                1,
                "a given-up wait's waker was kept"
            );
        }
    });
}

/// Two receives of one task wait with the same waker; dropping one leaves the other's wait
/// in place: the datagram that comes wakes the task and the other receive takes it.
#[test]
fn a_wait_given_up_leaves_another_of_the_same_task_waiting() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::task::{Context, Poll, Waker};
    on_runtime(async {
        let socket = loopback().await;
        let to = socket.local_addr().unwrap();
        let count = Arc::new(WakeCount(0.into()));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let (mut a_buf, mut b_buf) = ([0u8; 16], [0u8; 16]);
        let mut kept = Box::pin(socket.recv_from(&mut b_buf));
        {
            let mut given_up = std::pin::pin!(socket.recv_from(&mut a_buf));
            assert!(given_up.as_mut().poll(&mut cx).is_pending());
            assert!(kept.as_mut().poll(&mut cx).is_pending());
        }
        let sender = loopback().await;
        sender.send_to(b"hello", to).await.unwrap();
        bounded(async {
            while count.0.load(Ordering::SeqCst) == 0 {
                softtimer_async::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        match kept.as_mut().poll(&mut cx) {
            Poll::Ready(Ok((5, from))) => assert_eq!(from, sender.local_addr().unwrap()),
            other => panic!("the waiting receive: {other:?}"),
        }
    });
}

/// A loop over `readable()` that never drains the socket (a flood, read by `try_*` calls
/// that keep up with none of it) lets the loop's other tasks run: each readiness takes a
/// unit of the task's budget, as tokio's does. It kept its task running for ever.
#[test]
fn a_readable_loop_over_a_socket_never_drained_lets_other_tasks_run() {
    on_runtime(async {
        let udp = loopback().await;
        let peer = loopback().await;
        peer.send_to(b"never read", udp.local_addr().unwrap())
            .await
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        client.writable().await.unwrap();
        assert_eq!(client.try_write(b"never read").unwrap(), 10);
        let (udp, server) = (&udp, &server);
        let ready = |round| async move {
            match round {
                0 => udp.readable().await.unwrap(),
                1 => udp.writable().await.unwrap(),
                _ => server.readable().await.unwrap(),
            }
        };
        for round in 0..3 {
            // Ready already, as the loop has seen it.
            ready(round).await;
            let ran = std::rc::Rc::new(std::cell::Cell::new(false));
            softtimer_async::spawn_local({
                let ran = std::rc::Rc::clone(&ran);
                async move { ran.set(true) }
            });
            let mut waits = 0u32;
            while !ran.get() {
                ready(round).await;
                waits += 1;
                assert!(waits < 1_000_000, "round {round}: the other task never ran");
            }
        }
    });
}
