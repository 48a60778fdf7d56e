//! What the simulated-clock tests share: the certificate, seeded configurations, the two
//! sides' addresses, a client and server driver joined by an in-memory link, and a perf
//! client and server on them.
#![allow(dead_code)] // not every test binary uses every helper

use std::sync::OnceLock;

use softtimer::{Instant, SimClock};
use softtimer_quic::perf::{ClientPlan, PerfClient, PerfServer};
use softtimer_quic::sim::{LinkConfig, Net, Side};
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
use softtimer_quic::{App, ConnId, Driver, DriverConfig, Pacing};

pub const HZ: u64 = 1_000_000_000;

pub fn identity() -> &'static Identity {
    static ID: OnceLock<Identity> = OnceLock::new();
    ID.get_or_init(|| Identity::self_signed_ed25519(&["localhost"]).unwrap())
}

pub fn seeded(seed: u8) -> DriverConfig {
    DriverConfig {
        rng_seed: Some([seed; 32]),
        ..DriverConfig::default()
    }
}

pub fn client_addr() -> std::net::SocketAddr {
    "10.0.0.1:5000".parse().unwrap()
}

pub fn server_addr() -> std::net::SocketAddr {
    "10.0.0.2:4433".parse().unwrap()
}

/// A client driver (side `a`, configured `client`) connected with `client_tls` to a server
/// driver (side `b`, configured `server`) presenting `server_tls`, over `link` on a fresh
/// simulated clock. `apps` are theirs, the client's made of its connection and time.
pub fn sim_net<A: App<SimClock>, B: App<SimClock>>(
    (client, client_tls): (DriverConfig, quinn_proto::ClientConfig),
    (server, server_tls): (DriverConfig, quinn_proto::ServerConfig),
    apps: (impl FnOnce(ConnId, Instant) -> A, B),
    link: LinkConfig,
) -> Net<A, B> {
    let clock = SimClock::new(HZ);
    let server = Driver::new(clock.clone(), server, Some(server_tls)).unwrap();
    let mut client = Driver::new(clock.clone(), client, None).unwrap();
    let conn = client
        .connect(client_tls, server_addr(), "localhost")
        .unwrap();
    let a = (apps.0)(conn, client.latest());
    Net::new(
        clock,
        Side::new(client, a, client_addr()),
        Side::new(server, apps.1, server_addr()),
        link,
    )
}

/// [`sim_net`] on a clean link of a client configured `seeded(1)` that trusts any
/// certificate, running `a`, and a server configured `server`, running `b`, both with
/// `tuning`.
pub fn insecure_net<A: App<SimClock>, B: App<SimClock>>(
    tuning: &Tuning,
    server: DriverConfig,
    a: A,
    b: B,
) -> Net<A, B> {
    sim_net(
        (seeded(1), client_config(&Trust::Insecure, tuning).unwrap()),
        (server, server_config(identity(), tuning).unwrap()),
        (|_, _| a, b),
        LinkConfig::default(),
    )
}

/// A perf client (side `a`) and server (side `b`) over `link`.
pub fn perf_net(
    plan: ClientPlan,
    client: DriverConfig,
    server: DriverConfig,
    tuning: &Tuning,
    link: LinkConfig,
) -> Net<PerfClient, PerfServer> {
    let trust = Trust::Cert(identity().cert.clone());
    sim_net(
        (client, client_config(&trust, tuning).unwrap()),
        (server, server_config(identity(), tuning).unwrap()),
        (
            |conn, now| PerfClient::new(plan, conn, now),
            PerfServer::new(None),
        ),
        link,
    )
}

/// A server configuration that paces every packet.
pub fn paced_server() -> DriverConfig {
    DriverConfig {
        pacing: Pacing::PerPacket,
        ..seeded(2)
    }
}
