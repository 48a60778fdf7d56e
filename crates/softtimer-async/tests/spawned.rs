//! The sockets' common async calls (UDP and TCP, by address and by name), awaited inside
//! `spawn`ed tasks, whose futures must be `Send`: a call whose future is not `Send` fails to
//! compile here, as it would in a user's program, instead of in the user's hands.

use std::net::SocketAddr;
use std::time::Duration;

use softtimer_async::net::lookup_host;
use softtimer_async::time::{sleep, timeout};
use softtimer_async::{JoinSet, PacedSender, Rate, Runtime, TcpListener, TcpStream, UdpSocket};

const BOUND: Duration = Duration::from_secs(10);

#[test]
fn udp_calls_work_inside_spawned_tasks() {
    Runtime::new().unwrap().block_on(async {
        let echo = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = echo.local_addr().unwrap();
        let server = softtimer_async::spawn(async move {
            let mut buf = [0u8; 64];
            for _ in 0..3 {
                let (n, from) = echo.recv_from(&mut buf).await.unwrap();
                echo.send_to(&buf[..n], from).await.unwrap();
            }
        });
        let client = softtimer_async::spawn(async move {
            // By address and by name, each looked up inside the task (`localhost` may give
            // `::1` first: an IPv4 socket's connect to it fails and the next address is tried).
            let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            socket.connect(to).await.unwrap();
            socket.send(b"one").await.unwrap();
            let mut buf = [0u8; 64];
            let n = timeout(BOUND, socket.recv(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&buf[..n], b"one");
            socket.connect(("localhost", to.port())).await.unwrap();
            socket.send_to(b"two", to).await.unwrap();
            let n = timeout(BOUND, socket.recv(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&buf[..n], b"two");
            let rate = Rate::from_bits_per_sec(10_000_000).unwrap();
            let paced = PacedSender::new(&socket, rate);
            paced.send_to(b"three", to).await.unwrap();
            paced.flush().await.unwrap();
            let n = timeout(BOUND, socket.recv(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&buf[..n], b"three");
        });
        timeout(BOUND, client).await.unwrap().unwrap();
        timeout(BOUND, server).await.unwrap().unwrap();
    });
}

#[test]
fn tcp_calls_and_name_lookups_work_inside_spawned_tasks() {
    Runtime::new().unwrap().block_on(async {
        let mut tasks = JoinSet::new();
        let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
        tasks.spawn(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 5];
            tokio::io::AsyncReadExt::read_exact(&mut stream, &mut buf)
                .await
                .unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut stream, &buf)
                .await
                .unwrap();
        });
        // The listener's task runs when this one waits: poll for its address, never block.
        let at = loop {
            match rx.try_recv() {
                Ok(at) => break at,
                Err(_) => sleep(Duration::from_millis(1)).await,
            }
        };
        tasks.spawn(async move {
            let found = lookup_host(("localhost", at.port())).await.unwrap();
            assert!(found.into_iter().any(|a| a.port() == at.port()));
            let mut stream = TcpStream::connect(("localhost", at.port())).await.unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut stream, b"hello")
                .await
                .unwrap();
            let mut buf = [0u8; 5];
            tokio::io::AsyncReadExt::read_exact(&mut stream, &mut buf)
                .await
                .unwrap();
            assert_eq!(&buf, b"hello");
        });
        while let Some(done) = timeout(BOUND, tasks.join_next()).await.unwrap() {
            done.unwrap();
        }
    });
}
