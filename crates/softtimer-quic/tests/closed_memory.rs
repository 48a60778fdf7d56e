//! Memory held per closed connection, compact records against quinn-proto's `Connection`,
//! counted by a counting allocator (this file holds one test, so nothing else allocates
//! meanwhile). Many short connections on a simulated clock: the server closes each as soon
//! as it is up and holds it for an hour; the client's own side drains at once.

use std::time::Duration;

use quinn_proto::ClientConfig;
use softtimer::SimClock;
use softtimer_quic::sim::{LinkConfig, Net, Side};
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
use softtimer_quic::{App, ClosedState, Driver, DriverConfig, QuicEvent, VarInt};
use softtimer_rt::alloc_count::{CountingAlloc, live_bytes};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// Closes every connection as soon as it is up.
struct Closer;
impl App<SimClock> for Closer {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        if let QuicEvent::Connected(c) = event {
            driver.close(c, VarInt::from_u32(0), b"bye").unwrap();
        }
    }
}

/// Keeps `parallel` connections going until `target` have been started.
struct Churn {
    tls: ClientConfig,
    started: usize,
    live: usize,
    target: usize,
    parallel: usize,
}

impl App<SimClock> for Churn {
    fn on_event(&mut self, _: &mut Driver<SimClock>, event: QuicEvent) {
        if let QuicEvent::Lost(..) = event {
            self.live -= 1;
        }
    }
    fn on_turn(&mut self, driver: &mut Driver<SimClock>) -> bool {
        let mut did = false;
        while self.live < self.parallel && self.started < self.target {
            let to = "10.0.0.2:4433".parse().unwrap();
            driver.connect(self.tls.clone(), to, "localhost").unwrap();
            self.started += 1;
            self.live += 1;
            did = true;
        }
        did
    }
}

/// Runs until the server holds `target` closed connections and the client has nothing
/// left; the bytes allocated then.
fn settle(net: &mut Net<Churn, Closer>, target: usize, design: ClosedState) -> isize {
    net.a.app.target = target;
    let held = |n: &Net<Churn, Closer>| match design {
        ClosedState::Compact => n.b.driver.closed_held(),
        ClosedState::Full => n.b.driver.connections(),
    };
    let done = net.run_for(Duration::from_secs(600), |n| {
        held(n) == target && n.a.app.live == 0 && n.a.driver.connections() == 0
    });
    assert!(done, "{} held of {target}", held(net));
    // The client's own closed records drain.
    net.run_for(Duration::from_millis(10), |_| false);
    assert_eq!(net.a.driver.closed_held(), 0);
    assert_eq!(held(net), target);
    live_bytes().expect("the counting allocator is installed")
}

/// Bytes allocated per closed connection held with `design`, over `more` connections after
/// `first`.
fn bytes_per_closed(design: ClosedState, first: usize, more: usize) -> f64 {
    let clock = SimClock::new(1_000_000_000);
    let identity = Identity::self_signed_ed25519(&["localhost"]).unwrap();
    let tuning = Tuning::default();
    let mut server_tls = server_config(&identity, &tuning).unwrap();
    // No address-validation tokens: quinn-proto's server logs every token a client
    // presents (its `BloomTokenLog`, a set until it is large), a cost per connection that
    // both designs pay alike and that is not the closed state's.
    let mut tokens = quinn_proto::ValidationTokenConfig::default();
    tokens.sent(0);
    server_tls.validation_token_config(tokens);
    let server_config = DriverConfig {
        closed_state: design,
        drain_period: Some(Duration::from_secs(3600)),
        rng_seed: Some([2; 32]),
        ..DriverConfig::default()
    };
    let server = Driver::new(clock.clone(), server_config, Some(server_tls)).unwrap();
    // The client's own closed connections drain at once, so that the memory it holds does
    // not grow with the rate of closes (its tables keep their high-water capacity).
    let client_config_ = DriverConfig {
        drain_period: Some(Duration::from_millis(1)),
        rng_seed: Some([1; 32]),
        ..DriverConfig::default()
    };
    let client = Driver::new(clock.clone(), client_config_, None).unwrap();
    let churn = Churn {
        tls: client_config(&Trust::Insecure, &tuning).unwrap(),
        started: 0,
        live: 0,
        target: 0,
        parallel: 16,
    };
    let mut net = Net::new(
        clock,
        Side::new(client, churn, "10.0.0.1:5000".parse().unwrap()),
        Side::new(server, Closer, "10.0.0.2:4433".parse().unwrap()),
        LinkConfig::default(),
    );
    net.keep_transcript = false;
    let before = settle(&mut net, first, design);
    let after = settle(&mut net, first + more, design);
    (after - before) as f64 / more as f64
}

#[test]
fn a_compact_closed_connection_holds_at_most_256_bytes_and_20_times_less_than_quinns() {
    // Over 3000 closes, so that the tables that grow by doubling (the facility's events, the
    // index) are counted at their average slack, not at one doubling.
    let compact = bytes_per_closed(ClosedState::Compact, 300, 3000);
    let full = bytes_per_closed(ClosedState::Full, 64, 256);
    eprintln!("bytes per closed connection held: compact {compact:.0}, full {full:.0}");
    assert!(
        compact <= 256.0,
        "compact: {compact:.0} bytes per closed connection"
    );
    assert!(
        full >= 20.0 * compact,
        "full {full:.0} bytes against compact {compact:.0}"
    );
}
