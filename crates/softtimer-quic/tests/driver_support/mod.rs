//! What the driver's end-to-end tests share: a server on a loop of its own, a client loop,
//! a bounded run.
#![allow(dead_code)] // not every test binary uses every helper

use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use softtimer_quic::perf::{ClientPlan, ClientReport, PerfClient, PerfServer, ServerReport};
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
use softtimer_quic::{App, ConnId, DriverConfig, DriverStats, IoStats, QuicLoop};

/// A driver's counters and its socket's.
#[derive(Debug)]
pub struct Stats {
    pub driver: DriverStats,
    pub io: IoStats,
}

pub struct Server {
    pub addr: SocketAddr,
    pub stop: softtimer_rt::StopHandle,
    /// The server's report and its driver's counters, once stopped.
    pub done: thread::JoinHandle<(ServerReport, Stats)>,
}

pub fn start_server(identity: &Identity, tuning: Tuning, config: DriverConfig) -> Server {
    start_server_until(identity, tuning, config, None)
}

/// A server that stops by itself once `connections` have closed (see
/// [`PerfServer::stop_after_connections`]).
pub fn start_server_until(
    identity: &Identity,
    tuning: Tuning,
    config: DriverConfig,
    connections: Option<u64>,
) -> Server {
    let config_server = server_config(identity, &tuning).unwrap();
    let (tx, rx) = mpsc::channel();
    let done = thread::spawn(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut quic =
            QuicLoop::new(Default::default(), socket, config, Some(config_server)).unwrap();
        let addr = quic.socket().local_addr().unwrap();
        tx.send((addr, quic.stop_handle())).unwrap();
        let mut app = PerfServer::new(connections);
        quic.run(&mut app).unwrap();
        let stats = Stats {
            driver: quic.driver().stats(),
            io: quic.stats().clone(),
        };
        (app.report, stats)
    });
    let (addr, stop) = rx.recv().unwrap();
    Server { addr, stop, done }
}

/// A server with the default configuration and a fresh self-signed certificate.
pub fn default_server() -> Server {
    let identity = Identity::self_signed(&["localhost"]).unwrap();
    start_server(&identity, Tuning::default(), DriverConfig::default())
}

/// A client loop with the default configuration, connecting to `to` and trusting any
/// certificate.
pub fn client_loop(to: SocketAddr, tuning: &Tuning) -> (QuicLoop, ConnId) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut quic =
        QuicLoop::new(Default::default(), socket, DriverConfig::default(), None).unwrap();
    let client = client_config(&Trust::Insecure, tuning).unwrap();
    let conn = quic.driver().connect(client, to, "localhost").unwrap();
    (quic, conn)
}

/// Runs `quic` with `app` until the app stops it, or stops it after 10 s (so that an app
/// waiting for what never comes fails its test instead of hanging it).
pub fn run_bounded(quic: &mut QuicLoop, app: &mut impl App) {
    let stop = quic.stop_handle();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let bound = thread::spawn(move || {
        if done_rx.recv_timeout(Duration::from_secs(10)).is_err() {
            stop.stop();
        }
    });
    quic.run(app).unwrap();
    let _ = done_tx.send(());
    bound.join().unwrap();
}

/// A perf client's run against `to`, to its end.
pub fn run_client(
    to: SocketAddr,
    trust: Trust,
    tuning: Tuning,
    config: DriverConfig,
    plan: ClientPlan,
) -> ClientReport {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut quic = QuicLoop::new(Default::default(), socket, config, None).unwrap();
    let client = client_config(&trust, &tuning).unwrap();
    let now = quic.driver().now();
    let conn = quic.driver().connect(client, to, "localhost").unwrap();
    let mut app = PerfClient::new(plan, conn, now);
    quic.run(&mut app).unwrap();
    app.report
}

/// [`run_client`] with the default configuration.
pub fn default_client(to: SocketAddr, trust: Trust, plan: ClientPlan) -> ClientReport {
    run_client(to, trust, Tuning::default(), DriverConfig::default(), plan)
}
