//! Random and mutated datagrams into a driver with a live connection, on the simulated
//! clock: never a panic, every bad datagram dropped or answered, and the connection goes on;
//! and settings out of range refused.

use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use softtimer::SimClock;
use softtimer_quic::perf::{ClientPlan, PerfClient, PerfServer};
use softtimer_quic::sim::{LinkConfig, Net, Side};
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
use softtimer_quic::{Driver, DriverConfig};

fn identity() -> &'static Identity {
    static ID: OnceLock<Identity> = OnceLock::new();
    ID.get_or_init(|| Identity::self_signed_ed25519(&["localhost"]).unwrap())
}

/// What to do to a datagram.
#[derive(Clone, Debug)]
enum Bad {
    /// Random bytes.
    Random(Vec<u8>),
    /// A datagram the link carried, with one byte changed.
    Flip { pick: usize, at: usize, xor: u8 },
    /// A datagram the link carried, cut short.
    Truncate { pick: usize, len: usize },
    /// A datagram the link carried, its first byte replaced (header form, type, bits).
    First { pick: usize, byte: u8 },
    /// A datagram the link carried, unchanged (a replay).
    Replay { pick: usize },
}

fn bad() -> impl Strategy<Value = Bad> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..1500).prop_map(Bad::Random),
        (any::<usize>(), any::<usize>(), 1..=255u8).prop_map(|(pick, at, xor)| Bad::Flip {
            pick,
            at,
            xor
        }),
        (any::<usize>(), any::<usize>()).prop_map(|(pick, len)| Bad::Truncate { pick, len }),
        (any::<usize>(), any::<u8>()).prop_map(|(pick, byte)| Bad::First { pick, byte }),
        any::<usize>().prop_map(|pick| Bad::Replay { pick }),
    ]
}

fn apply(bad: &Bad, carried: &[Vec<u8>]) -> Vec<u8> {
    let pick = |i: usize| carried[i % carried.len()].clone();
    match bad {
        Bad::Random(bytes) => bytes.clone(),
        Bad::Flip { pick: p, at, xor } => {
            let mut d = pick(*p);
            let i = at % d.len();
            d[i] ^= xor;
            d
        }
        Bad::Truncate { pick: p, len } => {
            let mut d = pick(*p);
            d.truncate(len % d.len());
            d
        }
        Bad::First { pick: p, byte } => {
            let mut d = pick(*p);
            d[0] = *byte;
            d
        }
        Bad::Replay { pick: p } => pick(*p),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn bad_datagrams_are_dropped_and_the_connection_goes_on(
        bads in proptest::collection::vec((bad(), any::<bool>(), any::<bool>()), 1..40)
    ) {
        let clock = SimClock::new(1_000_000_000);
        let tuning = Tuning::default();
        let server_tls = server_config(identity(), &tuning).unwrap();
        let server = Driver::new(clock.clone(), DriverConfig::default(), Some(server_tls)).unwrap();
        let mut client = Driver::new(clock.clone(), DriverConfig::default(), None).unwrap();
        let server_addr = "10.0.0.2:4433".parse().unwrap();
        let client_addr = "10.0.0.1:5000".parse().unwrap();
        let tls = client_config(&Trust::Insecure, &tuning).unwrap();
        let conn = client.connect(tls, server_addr, "localhost").unwrap();
        let plan = ClientPlan {
            download: 20_000,
            upload: 5_000,
            requests: 2,
            interval: Some(Duration::from_millis(100)),
            ..ClientPlan::default()
        };
        let app = PerfClient::new(plan, conn, client.latest());
        let mut net = Net::new(
            clock,
            Side::new(client, app, client_addr),
            Side::new(server, PerfServer::new(None), server_addr),
            LinkConfig::default(),
        );
        net.keep_bytes = true;
        prop_assert!(net.run_for(Duration::from_secs(5), |n| n.a.app.report.requests == 1));
        let carried: Vec<Vec<u8>> = net
            .transcript
            .iter()
            .filter_map(|s| s.bytes.clone())
            .filter(|b| !b.is_empty())
            .collect();
        let stranger = "10.9.9.9:9".parse().unwrap();
        for (bad, to_server, from_peer) in &bads {
            let datagram = apply(bad, &carried);
            let now = net.now();
            let (driver, peer) = if *to_server {
                (&mut net.b.driver, client_addr)
            } else {
                (&mut net.a.driver, server_addr)
            };
            let from = if *from_peer { peer } else { stranger };
            driver.handle_datagram(now, from, None, None, &datagram);
            // Whatever it answers (a reset, a version negotiation) goes nowhere.
            let mut buf = Vec::new();
            while driver.poll_transmit(now, &mut buf).is_some() {}
        }
        prop_assert!(net.run_for(Duration::from_secs(10), |n| n.a.stopped));
        let report = &net.a.app.report;
        prop_assert_eq!(report.error.clone(), None);
        prop_assert_eq!(report.requests, 2);
        prop_assert_eq!(report.verified, Some(true));
    }
}

/// Settings out of range are refused with what is wrong, not taken (a drain period or a
/// timer granularity past the clock's range used to wrap into the past: a drain that ended
/// at once, every timer due on every pass).
#[test]
fn settings_out_of_range_are_refused_with_what_is_wrong() {
    use softtimer_quic::{ConfigError, Driver, DriverConfig, QuicError};
    let clock = softtimer::SimClock::new(1_000_000_000);
    let refused = |config: DriverConfig| match Driver::new(clock.clone(), config, None) {
        Err(QuicError::Config(e)) => e,
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("taken"),
    };
    let long = std::time::Duration::MAX;
    let e = refused(DriverConfig {
        drain_period: Some(long),
        ..DriverConfig::default()
    });
    assert!(matches!(e, ConfigError::DrainPeriod(d) if d == long), "{e}");
    let e = refused(DriverConfig {
        timer_granularity: Some(long),
        ..DriverConfig::default()
    });
    assert!(matches!(e, ConfigError::Granularity(_)), "{e}");
    assert!(e.to_string().contains("at most a second"));
    let e = refused(DriverConfig {
        max_datagrams: 0,
        ..DriverConfig::default()
    });
    assert!(matches!(e, ConfigError::ZeroMaxDatagrams), "{e}");
    // A wake lateness past a second wrapped a departure's deadline and turned its spin
    // advice over.
    let e = refused(DriverConfig {
        wake_lateness: long,
        ..DriverConfig::default()
    });
    assert!(
        matches!(e, ConfigError::WakeLateness(d) if d == long),
        "{e}"
    );
    assert!(Driver::new(clock, DriverConfig::default(), None).is_ok());
}
