//! The driver end to end at its edges: zero-length connection IDs, path MTU discovery, a
//! dual-stack socket, a connection limit (two soft-timer loops on two threads, over loopback).

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

mod driver_support;

use driver_support::{client_loop, default_server, run_bounded, start_server};
use softtimer_quic::perf::{ClientPlan, PerfClient};
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config};
use softtimer_quic::{
    App, ConnId, ConnectionError, Driver, DriverConfig, QuicEvent, QuicLoop, VarInt,
};

/// A client of two connections that closes the first as soon as it is up and then, a few
/// turns after (its close sent, its record made), asks for 20 KB on the second.
struct CloseOneUseOther {
    first: ConnId,
    second: ConnId,
    /// Loop turns since the first was closed.
    since_close: Option<u32>,
    second_up: bool,
    asked: bool,
    received: u64,
}

impl App for CloseOneUseOther {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        match event {
            QuicEvent::Connected(c) if c == self.first => {
                driver.close(c, VarInt::from_u32(0), b"first").unwrap();
                self.since_close = Some(0);
            }
            QuicEvent::Connected(c) if c == self.second => self.second_up = true,
            QuicEvent::Lost(c, why) if c == self.second && self.received < 20_000 => {
                panic!("second lost: {why}")
            }
            QuicEvent::Readable(c, s) if c == self.second && self.received < 20_000 => {
                let mut n = 0;
                let status = driver.read(c, s, |d| n += d.len() as u64).unwrap();
                self.received += n;
                if status == softtimer_quic::ReadStatus::Finished {
                    driver.close(c, VarInt::from_u32(0), b"done").unwrap();
                    driver.stop();
                }
            }
            _ => {}
        }
    }

    fn on_turn(&mut self, driver: &mut Driver) -> bool {
        let Some(turns) = self.since_close.as_mut() else {
            return false;
        };
        *turns += 1;
        if *turns < 4 || !self.second_up || self.asked {
            return !self.asked;
        }
        self.asked = true;
        let s = driver.open_bi(self.second).unwrap().unwrap();
        driver
            .write(self.second, s, &20_000u64.to_be_bytes())
            .unwrap();
        driver.finish(self.second, s).unwrap();
        true
    }
}

/// With zero-length connection IDs (a client's usual choice, each connection to a server of
/// its own), a connection closed and held for its drain period does not take the datagrams
/// of the client's other connection: the other still gets its answer.
#[test]
fn a_closed_connection_with_an_empty_id_leaves_the_others_datagrams_alone() {
    let (server, other_server) = (default_server(), default_server());
    let config = DriverConfig {
        cid_generator: Some(std::sync::Arc::new(|| {
            Box::new(quinn_proto::RandomConnectionIdGenerator::new(0))
        })),
        drain_period: Some(Duration::from_secs(10)),
        ..DriverConfig::default()
    };
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut quic = QuicLoop::new(Default::default(), socket, config, None).unwrap();
    let tls = client_config(&Trust::Insecure, &Tuning::default()).unwrap();
    let first = quic
        .driver()
        .connect(tls.clone(), server.addr, "localhost")
        .unwrap();
    let second = quic
        .driver()
        .connect(tls, other_server.addr, "localhost")
        .unwrap();
    let mut app = CloseOneUseOther {
        first,
        second,
        since_close: None,
        second_up: false,
        asked: false,
        received: 0,
    };
    // Bounded: a second connection whose answer never comes fails the test.
    run_bounded(&mut quic, &mut app);
    for server in [server, other_server] {
        server.stop.stop();
        server.done.join().unwrap();
    }
    assert!(
        app.asked,
        "first closed {:?}, second up {}",
        app.since_close, app.second_up
    );
    assert_eq!(
        app.received, 20_000,
        "no full answer on the second connection"
    );
}

/// Asks for 2 MB on one stream and notes the path MTU when the answer is in.
struct MtuProbe {
    conn: ConnId,
    asked: bool,
    received: u64,
    mtu: Option<u16>,
}

impl App for MtuProbe {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        match event {
            QuicEvent::Connected(c) if !self.asked => {
                self.asked = true;
                let s = driver.open_bi(c).unwrap().unwrap();
                driver.write(c, s, &2_000_000u64.to_be_bytes()).unwrap();
                driver.finish(c, s).unwrap();
            }
            QuicEvent::Readable(c, s) if self.mtu.is_none() => {
                let mut n = 0;
                let status = driver.read(c, s, |d| n += d.len() as u64).unwrap();
                self.received += n;
                if status == softtimer_quic::ReadStatus::Finished {
                    self.mtu = driver
                        .connection_stats(self.conn)
                        .map(|s| s.path.current_mtu);
                    driver.close(c, VarInt::from_u32(0), b"done").unwrap();
                    driver.stop();
                }
            }
            _ => {}
        }
    }
}

/// With MTU discovery asked for on both sides, a driver on a socket that sets
/// don't-fragment (as `QuicSocket` makes every one) finds loopback's larger MTU, as stock
/// quinn does: the socket's `may_fragment` reaches quinn-proto's endpoint.
#[test]
fn mtu_discovery_runs_where_the_transport_asks_for_it() {
    let tuning = Tuning {
        mtu_discovery: true,
        ..Tuning::default()
    };
    let identity = Identity::self_signed(&["localhost"]).unwrap();
    let server = start_server(&identity, tuning.clone(), DriverConfig::default());
    let (mut quic, conn) = client_loop(server.addr, &tuning);
    let mut app = MtuProbe {
        conn,
        asked: false,
        received: 0,
        mtu: None,
    };
    quic.run(&mut app).unwrap();
    server.stop.stop();
    server.done.join().unwrap();
    assert_eq!(app.received, 2_000_000);
    let mtu = app.mtu.expect("the connection's stats");
    assert!(mtu > 1200, "the path MTU stayed at {mtu}");
}

/// A client on a dual-stack socket (`[::]`, quinn's habit) reaches a server at an IPv4
/// address: the address is written as the socket reports its peers (IPv4-mapped), so the
/// handshake's replies match it. An IPv6 address on an IPv4 socket is refused at once.
#[test]
fn a_dual_stack_client_reaches_an_ipv4_server_and_a_v4_socket_refuses_v6() {
    let Ok(socket) = UdpSocket::bind("[::]:0") else {
        eprintln!("skipped: no IPv6 socket here");
        return;
    };
    let server = default_server();
    let mut quic =
        QuicLoop::new(Default::default(), socket, DriverConfig::default(), None).unwrap();
    let client = client_config(&Trust::Insecure, &Tuning::default()).unwrap();
    let now = quic.driver().now();
    let conn = quic
        .driver()
        .connect(client.clone(), server.addr, "localhost")
        .unwrap();
    let plan = ClientPlan {
        requests: 3,
        ..ClientPlan::default()
    };
    let mut app = PerfClient::new(plan, conn, now);
    run_bounded(&mut quic, &mut app);
    server.stop.stop();
    server.done.join().unwrap();
    assert_eq!(app.report.requests, 3, "{:?}", app.report);

    let v4 = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut quic = QuicLoop::new(Default::default(), v4, DriverConfig::default(), None).unwrap();
    let refused = quic
        .driver()
        .connect(client, "[2001:db8::1]:4433".parse().unwrap(), "localhost");
    assert!(refused.is_err());
}

/// Notes how each of two connections ended up.
struct TwoAttempts {
    conns: [ConnId; 2],
    connected: [bool; 2],
    lost: [Option<ConnectionError>; 2],
}

impl App for TwoAttempts {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        let which = |c| self.conns.iter().position(|&x| x == c);
        match event {
            QuicEvent::Connected(c) => {
                if let Some(i) = which(c) {
                    self.connected[i] = true;
                }
            }
            QuicEvent::Lost(c, why) => {
                if let Some(i) = which(c) {
                    self.lost[i] = Some(why);
                }
            }
            _ => {}
        }
        if self.connected[0] && self.lost[1].is_some() {
            driver.stop();
        }
    }
}

/// A server at its connection limit refuses the next handshake at once (CONNECTION_REFUSED),
/// keeping nothing for it, and counts it; the connection it holds goes on.
#[test]
fn a_server_at_its_connection_limit_refuses_the_next() {
    let identity = Identity::self_signed(&["localhost"]).unwrap();
    let config = DriverConfig {
        max_connections: Some(1),
        ..DriverConfig::default()
    };
    let server = start_server(&identity, Tuning::default(), config);
    let (mut quic, first) = client_loop(server.addr, &Tuning::default());
    let tls = client_config(&Trust::Insecure, &Tuning::default()).unwrap();
    let mut app = TwoAttempts {
        conns: [first, first],
        connected: [false; 2],
        lost: [None, None],
    };
    // The second once the first is up, so that the limit is reached.
    struct Second<'a>(
        &'a mut TwoAttempts,
        Option<quinn_proto::ClientConfig>,
        SocketAddr,
    );
    impl App for Second<'_> {
        fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
            let up = matches!(event, QuicEvent::Connected(c) if c == self.0.conns[0]);
            self.0.on_event(driver, event);
            if up && let Some(tls) = self.1.take() {
                self.0.conns[1] = driver.connect(tls, self.2, "localhost").unwrap();
            }
        }
    }
    run_bounded(&mut quic, &mut Second(&mut app, Some(tls), server.addr));
    server.stop.stop();
    let (_, stats) = server.done.join().unwrap();
    assert!(
        app.connected[0] && app.lost[0].is_none(),
        "the first: {:?}",
        app.lost[0]
    );
    assert!(
        matches!(app.lost[1], Some(ConnectionError::ConnectionClosed(_))),
        "the second: {:?}",
        app.lost[1]
    );
    assert_eq!(stats.driver.connections_refused, 1);
}
