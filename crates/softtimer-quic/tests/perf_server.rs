//! The perf-protocol server as its peers see it: concurrent streams, requests reset, cut
//! short or too short, answers of the wrong length, and a server that stops after a number
//! of connections.

use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

mod driver_support;

use driver_support::{client_loop, default_client, default_server};

use softtimer_quic::perf::{ClientPlan, ClientReport, PerfClient, ServerReport};
use softtimer_quic::tls::{Identity, Trust, Tuning, server_config};
use softtimer_quic::{
    App, ConnId, ConnectionError, Driver, DriverConfig, QuicEvent, QuicLoop, VarInt,
};

struct Concurrent {
    conn: ConnId,
    streams: usize,
    opened: bool,
    done: usize,
    received: std::collections::HashMap<softtimer_quic::StreamId, u64>,
}

impl App for Concurrent {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        match event {
            QuicEvent::Connected(_) if !self.opened => {
                self.opened = true;
                for _ in 0..self.streams {
                    let s = driver.open_bi(self.conn).unwrap().unwrap();
                    assert_eq!(
                        driver
                            .write(self.conn, s, &50_000u64.to_be_bytes())
                            .unwrap(),
                        8
                    );
                    driver.finish(self.conn, s).unwrap();
                    self.received.insert(s, 0);
                }
            }
            QuicEvent::Readable(c, s) => {
                if self.received.get(&s) == Some(&50_000) {
                    return; // a late event for a stream read to its end
                }
                let mut n = 0;
                let status = driver.read(c, s, |d| n += d.len() as u64).unwrap();
                *self.received.get_mut(&s).unwrap() += n;
                if status == softtimer_quic::ReadStatus::Finished {
                    self.done += 1;
                    if self.done == self.streams {
                        driver.close(c, VarInt::from_u32(0), b"done").unwrap();
                        driver.stop();
                    }
                }
            }
            QuicEvent::Lost(_, why) if why != ConnectionError::LocallyClosed => {
                panic!("lost: {why}")
            }
            _ => {}
        }
    }
}

/// Runs the client `app` makes of its connection (a [`client_loop`]'s) against a
/// [`default_server`], to its end: the app, and what the server reports.
fn run_app<A: App>(app: impl FnOnce(ConnId) -> A) -> (A, ServerReport) {
    let server = default_server();
    let (mut quic, conn) = client_loop(server.addr, &Tuning::default());
    let mut app = app(conn);
    quic.run(&mut app).unwrap();
    server.stop.stop();
    let (served, _) = server.done.join().unwrap();
    (app, served)
}

#[test]
fn many_concurrent_streams_are_all_answered() {
    let (app, _) = run_app(|conn| Concurrent {
        conn,
        streams: 64,
        opened: false,
        done: 0,
        received: Default::default(),
    });
    assert_eq!(app.done, 64);
    assert!(app.received.values().all(|&n| n == 50_000));
}

/// A server running `app` with the default configuration, on its own thread: its address,
/// its stop handle and the thread.
fn start_app_server(
    mut app: impl App + Send + 'static,
) -> (SocketAddr, softtimer_rt::StopHandle, thread::JoinHandle<()>) {
    let identity = Identity::self_signed(&["localhost"]).unwrap();
    let server_cfg = server_config(&identity, &Tuning::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut quic = QuicLoop::new(
            Default::default(),
            socket,
            DriverConfig::default(),
            Some(server_cfg),
        )
        .unwrap();
        tx.send((quic.socket().local_addr().unwrap(), quic.stop_handle()))
            .unwrap();
        quic.run(&mut app).unwrap();
    });
    let (addr, stop) = rx.recv().unwrap();
    (addr, stop, server)
}

/// A [`default_client`] with `plan`, trusting any certificate, against a server running
/// `app` ([`start_app_server`]): the client's report.
fn against_app_server(app: impl App + Send + 'static, plan: ClientPlan) -> ClientReport {
    let (addr, stop, server) = start_app_server(app);
    let report = default_client(addr, Trust::Insecure, plan);
    stop.stop();
    server.join().unwrap();
    report
}

/// Closes the connection as soon as it is up, from the server side.
struct Closer;
impl App for Closer {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        if let QuicEvent::Connected(c) = event {
            driver.close(c, VarInt::from_u32(7), b"go away").unwrap();
        }
    }
}

#[test]
fn a_connection_closed_by_the_peer_is_reported_with_its_reason() {
    let report = against_app_server(Closer, ClientPlan::default());
    let error = report.error.expect("the close is reported");
    assert!(error.contains("closed by peer"), "{error}");
    assert!(error.contains("go away"), "{error}");
}

/// A server that refuses every request: it asks the client to stop sending and resets its
/// own side of the stream with code 42.
struct Refuser;
impl App for Refuser {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        if let QuicEvent::StreamOpened(c, softtimer_quic::Dir::Bi) = event {
            while let Ok(Some(stream)) = driver.accept_bi(c) {
                driver.stop_sending(c, stream, VarInt::from_u32(9)).unwrap();
                driver.reset(c, stream, VarInt::from_u32(42)).unwrap();
            }
        }
    }
}

#[test]
fn a_stream_reset_by_the_server_fails_the_request_with_its_code() {
    let started = Instant::now();
    let plan = ClientPlan {
        download: 1_000_000,
        requests: 3,
        ..ClientPlan::default()
    };
    let report = against_app_server(Refuser, plan);
    let error = report.error.expect("the reset is reported");
    assert!(error.contains("reset the stream (code 42)"), "{error}");
    assert_eq!(report.requests, 0, "no request completed");
    // Reported when the reset arrives, not at an idle timeout.
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A server that answers every request with ten bytes, whatever was asked.
struct ShortAnswerer;
impl App for ShortAnswerer {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        if let QuicEvent::StreamOpened(c, softtimer_quic::Dir::Bi) = event {
            while let Ok(Some(stream)) = driver.accept_bi(c) {
                assert_eq!(driver.write(c, stream, &[0; 10]).unwrap(), 10);
                driver.finish(c, stream).unwrap();
            }
        }
    }
}

#[test]
fn a_response_of_the_wrong_length_fails_the_run_verified_or_not() {
    for verify in [true, false] {
        let plan = ClientPlan {
            download: 1_000,
            requests: 3,
            verify,
            ..ClientPlan::default()
        };
        let report = against_app_server(ShortAnswerer, plan);
        let error = report.error.expect("the short answer is reported");
        assert!(
            error.contains("answered 10 bytes where 1000 were asked"),
            "{error}"
        );
        assert_eq!(report.requests, 0, "verify {verify}");
    }
}

/// A client that abandons one request half-way through its header, then makes a whole one.
struct Abandoner {
    whole: Option<softtimer_quic::StreamId>,
    got: u64,
    done: bool,
}
impl App for Abandoner {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        match event {
            QuicEvent::Connected(c) => {
                let half = driver.open_bi(c).unwrap().unwrap();
                assert_eq!(driver.write(c, half, &[0, 0, 0, 0]).unwrap(), 4);
                driver.reset(c, half, VarInt::from_u32(5)).unwrap();
                let whole = driver.open_bi(c).unwrap().unwrap();
                assert_eq!(driver.write(c, whole, &1000u64.to_be_bytes()).unwrap(), 8);
                driver.finish(c, whole).unwrap();
                self.whole = Some(whole);
            }
            // A late event for the stream already read to its end: nothing to do.
            QuicEvent::Readable(c, stream) if Some(stream) == self.whole && !self.done => {
                let mut got = 0;
                let status = driver.read(c, stream, |d| got += d.len() as u64).unwrap();
                self.got += got;
                if status == softtimer_quic::ReadStatus::Finished {
                    self.done = true;
                    driver.close(c, VarInt::from_u32(0), b"done").unwrap();
                    driver.stop();
                }
            }
            QuicEvent::Lost(..) => driver.stop(),
            _ => {}
        }
    }
}

#[test]
fn a_request_reset_by_the_client_is_counted_and_the_next_one_answered() {
    let (app, served) = run_app(|_| Abandoner {
        whole: None,
        got: 0,
        done: false,
    });
    assert!(app.done, "the whole request was answered");
    assert_eq!(app.got, 1000);
    assert_eq!(served.aborted, 1, "{served:?}");
    assert_eq!(served.requests, 1, "{served:?}");
}

/// A client that makes requests too short for the perf protocol (4 of its 8 header bytes),
/// one after another, each once the previous one's stream was reset.
struct ShortRequests {
    left: u32,
    current: Option<softtimer_quic::StreamId>,
    resets: Vec<VarInt>,
}
impl ShortRequests {
    fn next(&mut self, driver: &mut Driver, c: ConnId) {
        if self.left == 0 {
            driver.close(c, VarInt::from_u32(0), b"done").unwrap();
            driver.stop();
            return;
        }
        self.left -= 1;
        let s = driver
            .open_bi(c)
            .unwrap()
            .expect("the server gave the stream credit of the requests it reset back");
        assert_eq!(driver.write(c, s, &[0, 0, 0, 0]).unwrap(), 4);
        driver.finish(c, s).unwrap();
        self.current = Some(s);
    }
}
impl App for ShortRequests {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        match event {
            QuicEvent::Connected(c) => self.next(driver, c),
            QuicEvent::Readable(c, s) if Some(s) == self.current => {
                match driver.read(c, s, |d| panic!("{} bytes answered", d.len())) {
                    Err(softtimer_quic::QuicError::Stream(
                        softtimer_quic::StreamError::Reset { code, .. },
                    )) => {
                        self.resets.push(code);
                        self.current = None;
                        self.next(driver, c);
                    }
                    other => assert!(
                        matches!(other, Ok(softtimer_quic::ReadStatus::Blocked)),
                        "{other:?}"
                    ),
                }
            }
            QuicEvent::Lost(_, why) if why != ConnectionError::LocallyClosed => {
                panic!("lost: {why}")
            }
            _ => {}
        }
    }
}

#[test]
fn a_request_too_short_is_reset_at_once_and_its_stream_credit_returns() {
    // More than the 100 concurrent streams the server allows: each one's credit must come
    // back, and each reset must come at once, not at the 30 s idle timeout.
    let started = Instant::now();
    let (app, served) = run_app(|_| ShortRequests {
        left: 150,
        current: None,
        resets: Vec::new(),
    });
    assert_eq!(app.resets.len(), 150);
    let code = VarInt::from_u32(softtimer_quic::perf::ABORT_CODE);
    assert!(app.resets.iter().all(|&c| c == code), "{:?}", app.resets);
    assert_eq!(served.aborted, 150, "{served:?}");
    assert_eq!(served.requests, 0, "{served:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// A perf client that tells `started` when its download's first bytes arrive.
struct Downloading {
    client: PerfClient,
    started: Option<mpsc::Sender<()>>,
}
impl App for Downloading {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        if matches!(event, QuicEvent::Readable(..))
            && let Some(started) = self.started.take()
        {
            let _ = started.send(());
        }
        self.client.on_event(driver, event);
    }
    fn on_turn(&mut self, driver: &mut Driver) -> bool {
        self.client.on_turn(driver)
    }
}

#[test]
fn a_server_stopping_after_one_connection_lets_another_open_one_finish() {
    let identity = Identity::self_signed(&["localhost"]).unwrap();
    let server = driver_support::start_server_until(
        &identity,
        Tuning::default(),
        DriverConfig::default(),
        Some(1),
    );
    let (started_tx, started_rx) = mpsc::channel();
    let to = server.addr;
    // A client under way when a second one comes and goes is served to its end.
    let long = thread::spawn(move || {
        let (mut quic, conn) = client_loop(to, &Tuning::default());
        // Two requests a second apart: the connection is still open, whatever the host's
        // speed, when the short client closes.
        let plan = ClientPlan {
            download: 1_000_000,
            requests: 2,
            interval: Some(Duration::from_secs(1)),
            ..ClientPlan::default()
        };
        let now = quic.driver().now();
        let mut app = Downloading {
            client: PerfClient::new(plan, conn, now),
            started: Some(started_tx),
        };
        quic.run(&mut app).unwrap();
        app.client.report
    });
    started_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the download starts");
    let short = default_client(
        to,
        Trust::Insecure,
        ClientPlan {
            download: 1_000,
            ..ClientPlan::default()
        },
    );
    assert_eq!((short.requests, short.error.as_deref()), (1, None));
    let long = long.join().unwrap();
    assert_eq!(long.error, None, "{long:?}");
    assert_eq!((long.requests, long.download_bytes), (2, 2_000_000));
    // And the server stops once both have closed.
    let (served, _) = server.done.join().unwrap();
    assert_eq!((served.connections, served.requests), (2, 3), "{served:?}");
}
