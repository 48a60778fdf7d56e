//! The HTTP server and the load generator, over real sockets on loopback.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use softtimer_rt::{EventLoop, LoopConfig, StopHandle};
use softtimers_tools::http::{FILE_SIZE, HttpServer, ServerCounters, run_load};

struct Server {
    addr: SocketAddr,
    stop: StopHandle,
    counters: Arc<ServerCounters>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// What a test needs of a server started on another thread: its address, its loop's stop
/// handle and its counters.
type Handles = (SocketAddr, StopHandle, Arc<ServerCounters>);

fn handles(server: &HttpServer, ev: &EventLoop<()>) -> Handles {
    (
        server.local_addr().unwrap(),
        ev.stop_handle(),
        server.counters(),
    )
}

fn server(idle: Duration) -> Server {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mut server = HttpServer::bind("127.0.0.1:0".parse().unwrap(), idle).unwrap();
        let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
        server.register(&mut ev.cx()).unwrap();
        tx.send(handles(&server, &ev)).unwrap();
        ev.run(|cx, ready| server.on_ready(cx, ready)).unwrap();
    });
    let (addr, stop, counters) = rx.recv().unwrap();
    Server {
        addr,
        stop,
        counters,
        thread: Some(thread),
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Reads one response: (status line, headers, body).
fn read_response(s: &mut TcpStream, head_only: bool) -> (String, Vec<(String, String)>, Vec<u8>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "connection closed mid-head");
        buf.push(byte[0]);
    }
    let text = String::from_utf8(buf).unwrap();
    let mut lines = text.split("\r\n");
    let status = lines.next().unwrap().to_string();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once(": ").unwrap();
            (k.to_ascii_lowercase(), v.to_string())
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap();
    let mut body = vec![0u8; if head_only { 0 } else { length }];
    s.read_exact(&mut body).unwrap();
    (status, headers, body)
}

fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0))
}

#[test]
fn get_head_keep_alive_and_pipelining() {
    let srv = server(Duration::from_secs(10));
    let mut s = connect(srv.addr);
    s.write_all(b"GET /6k HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (status, headers, body) = read_response(&mut s, false);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(headers.contains(&("connection".into(), "keep-alive".into())));
    assert_eq!(body.len(), FILE_SIZE);
    // Keep-alive: the same connection serves HEAD next (headers, no body).
    s.write_all(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (status, headers, _) = read_response(&mut s, true);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(headers.contains(&("content-length".into(), FILE_SIZE.to_string())));
    // Pipelining: three requests in one write, answered in order.
    s.write_all(b"GET /6k HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, false).0, "HTTP/1.1 200 OK");
    assert_eq!(read_response(&mut s, false).0, "HTTP/1.1 404 Not Found");
    let (status, headers, body) = read_response(&mut s, false);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(headers.contains(&("connection".into(), "close".into())));
    assert_eq!(body.len(), FILE_SIZE);
    assert!(closed(&mut s), "Connection: close is honoured");
    assert_eq!(srv.counters.ok.load(Ordering::Relaxed), 4);
    assert_eq!(srv.counters.errors.load(Ordering::Relaxed), 1);
}

#[test]
fn bad_requests_get_errors_and_the_server_survives() {
    let srv = server(Duration::from_secs(10));
    // Malformed: 400, then the connection is closed.
    let mut s = connect(srv.addr);
    s.write_all(b"GARBAGE\x01\x02 / HTTP/9\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).0, "HTTP/1.1 400 Bad Request");
    assert!(closed(&mut s));
    // Unsupported method: 501; a body is skipped by its Content-Length.
    let mut s = connect(srv.addr);
    s.write_all(b"POST /6k HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /6k HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_response(&mut s, false).0,
        "HTTP/1.1 501 Not Implemented"
    );
    assert_eq!(read_response(&mut s, false).0, "HTTP/1.1 200 OK");
    // HTTP/1.0 closes by default.
    let mut s = connect(srv.addr);
    s.write_all(b"GET /6k HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).0, "HTTP/1.1 200 OK");
    assert!(closed(&mut s));
    // A client that disconnects mid-request, and one that resets.
    let mut s = connect(srv.addr);
    s.write_all(b"GET /6k HTT").unwrap();
    s.shutdown(Shutdown::Both).unwrap();
    drop(s);
    let s = connect(srv.addr);
    rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
    drop(s); // an RST instead of a FIN
    // Still serving.
    let mut s = connect(srv.addr);
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).0, "HTTP/1.1 200 OK");
}

#[test]
fn idle_connections_are_closed() {
    let srv = server(Duration::from_millis(100));
    let mut s = connect(srv.addr);
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    read_response(&mut s, false);
    // Silent for longer than the timeout: the server closes it.
    assert!(closed(&mut s), "the idle connection was not closed");
    assert!(srv.counters.idle_closed.load(Ordering::Relaxed) >= 1);
}

#[test]
fn curl_gets_the_file() {
    let Some(curl) = common::tool(softtimers_tools::process::CURL) else {
        return;
    };
    let srv = server(Duration::from_secs(10));
    let url = format!("http://{}/6k", srv.addr);
    let out = std::process::Command::new(&curl)
        .args(["-s", "-S", "-f", "--max-time", "5", &url, &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.stdout.len(),
        2 * FILE_SIZE,
        "two transfers over one connection"
    );
    let out = std::process::Command::new(&curl)
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
        ])
        .arg(format!("http://{}/missing", srv.addr))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "404");
}

/// The generator counts exactly the responses the server sent, with and without keep-alive.
#[test]
fn the_load_generator_counts_what_the_server_served() {
    for keep_alive in [true, false] {
        let srv = server(Duration::from_secs(10));
        let result = run_load(srv.addr, 8, keep_alive, Duration::from_millis(300)).unwrap();
        assert!(result.responses > 50, "{result:?}");
        assert_eq!(result.errors, 0);
        let addr = srv.addr;
        let counters = Arc::clone(&srv.counters);
        drop(srv); // stops and joins the server
        // The server may have answered requests the client had not read when it stopped:
        // at most one per connection.
        let served = counters.ok.load(Ordering::Relaxed);
        assert!(
            served >= result.responses && served <= result.responses + 8,
            "keep_alive {keep_alive}: client counted {}, server served {served} ({addr})",
            result.responses
        );
    }
}

#[test]
fn a_client_that_cannot_connect_is_an_error() {
    // Bind and drop to find a port nobody listens on.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = run_load(addr, 1, true, Duration::from_millis(50)).unwrap_err();
    assert!(format!("{err:#}").contains("cannot connect"), "{err:#}");
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err = HttpServer::bind(taken.local_addr().unwrap(), Duration::from_secs(1))
        .err()
        .expect("the port is taken");
    assert!(format!("{err:#}").contains("cannot listen"), "{err:#}");
}

/// The server with its sockets taken by soft-timer polling: every request is answered, a
/// lone request on an idle server is answered at once (readiness is armed while the loop
/// sleeps), and under load the polls find several sockets at a time.
#[test]
fn the_polled_server_answers_everything_and_polls_under_load() {
    use softtimer_net::poll::PollerConfig;
    use softtimer_rt::LoopTurn;
    use std::sync::atomic::AtomicBool;

    for keep_alive in [true, false] {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let due = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&due);
            let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), move |_, _| {
                flag.store(true, Ordering::Relaxed);
            })
            .unwrap();
            let hz = softtimer::Clock::resolution_hz(ev.clock());
            let mut server =
                HttpServer::bind("127.0.0.1:0".parse().unwrap(), Duration::from_secs(5)).unwrap();
            server
                .poll_with(PollerConfig::new(5).unwrap(), hz, due)
                .unwrap();
            server.register(&mut ev.cx()).unwrap();
            tx.send(handles(&server, &ev)).unwrap();
            let server = std::cell::RefCell::new(server);
            ev.run_with(
                |cx, ready| server.borrow_mut().on_ready(cx, ready),
                |cx, turn: LoopTurn| server.borrow_mut().on_turn(cx, turn),
            )
            .unwrap();
            server.into_inner().poll_counts().unwrap()
        });
        let (addr, stop, counters) = rx.recv().unwrap();
        // One request on an idle server: answered well within the sweep period, by the
        // readiness armed before the loop blocked.
        let mut s = connect(addr);
        let started = std::time::Instant::now();
        s.write_all(b"GET /6k HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let (status, _, body) = read_response(&mut s, false);
        assert!(status.contains("200"), "{status}");
        assert_eq!(body.len(), FILE_SIZE);
        assert!(started.elapsed() < Duration::from_millis(50));
        drop(s);
        let result = run_load(addr, 16, keep_alive, Duration::from_millis(400)).unwrap();
        stop.stop();
        let counts = thread.join().unwrap();
        assert_eq!(result.errors, 0, "keep-alive {keep_alive}");
        assert!(
            result.responses > 100,
            "keep-alive {keep_alive}: {result:?}"
        );
        // The server may have answered requests the load generator stopped waiting for.
        assert!(
            counters.ok.load(Ordering::Relaxed) > result.responses,
            "keep-alive {keep_alive}"
        );
        assert!(counts.polls > 0 && counts.interrupts > 0, "{counts:?}");
        // Every request was found by a poll: its connection readable (and, without
        // keep-alive, accepted) once at least.
        assert!(
            counts.found >= result.responses,
            "keep-alive {keep_alive}: {counts:?} for {result:?}"
        );
    }
}
