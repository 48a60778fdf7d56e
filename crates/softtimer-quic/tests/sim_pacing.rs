//! Per-packet pacing on a simulated clock: datagrams leave at their departure times, and a
//! connection that closes sends nothing it had queued after its close.

use std::time::Duration;

use softtimer::Instant;
mod sim_support;

use sim_support::{HZ, paced_server, perf_net, seeded};
use softtimer_quic::perf::{ClientPlan, PerfClient, PerfServer};
use softtimer_quic::sim::{From, LinkConfig, Net, Sent};
use softtimer_quic::tls::Tuning;

/// One request for `bytes` from a server that paces every packet, over a path with a
/// 10 ms RTT.
fn paced_download(bytes: u64) -> Net<PerfClient, PerfServer> {
    let plan = ClientPlan {
        download: bytes,
        requests: 1,
        ..ClientPlan::default()
    };
    let link = LinkConfig {
        delay: Duration::from_millis(5),
        ..LinkConfig::default()
    };
    perf_net(plan, seeded(1), paced_server(), &Tuning::default(), link)
}

#[test]
fn paced_datagrams_leave_at_their_departure_times_spaced_by_the_pacing_rate() {
    let mut net = paced_download(1_000_000);
    // The rate in force after each step, by time: a datagram pushed in that step was spaced
    // at it.
    let mut rates: Vec<(Instant, Option<u64>)> = Vec::new();
    let done = net.run_for(Duration::from_secs(10), |n| {
        let conn = n.b.driver.connection_ids().first().copied();
        rates.push((n.now(), conn.and_then(|c| n.b.driver.pacing_rate(c))));
        n.a.stopped
    });
    assert!(done && net.a.app.succeeded());
    let rate_at = |t: Instant| {
        rates
            .iter()
            .rev()
            .find(|(at, _)| !at.is_after(t))
            .and_then(|(_, r)| *r)
    };
    let server: Vec<&Sent> = net
        .transcript
        .iter()
        .filter(|s| s.from == From::B)
        .collect();
    let mut checked = 0;
    let mut exact = 0;
    for w in server.windows(3) {
        let (prev, this, next) = (w[0], w[1], w[2]);
        // Every datagram left within a tick of its departure time.
        assert!(this.at.saturating_since(this.departure).ticks() <= 1);
        if !next.departure.is_after(this.at) || this.size < 1000 {
            continue;
        }
        // `next` was stamped one gap of `this`'s size after it, at the rate in force when
        // `this` was pushed: when `prev` left, or later if quinn-proto had nothing to send
        // then. A gap may be longer (quinn-proto had nothing to send when it was due).
        let gap = next.departure.saturating_since(this.departure).ticks() as f64;
        let expected: Vec<f64> = [rate_at(prev.at), rate_at(this.at)]
            .into_iter()
            .flatten()
            .map(|rate| this.size as f64 * 8.0 * HZ as f64 / rate as f64)
            .collect();
        let Some(shortest) = expected.iter().copied().reduce(f64::min) else {
            continue;
        };
        assert!(
            gap >= shortest - 1.0,
            "gap {gap} ns, expected {expected:?} ns"
        );
        checked += 1;
        exact += usize::from(expected.iter().any(|e| (gap - e).abs() <= 1.0));
    }
    assert!(
        exact * 10 >= checked * 9,
        "{exact} of {checked} gaps within a tick of the rate's spacing"
    );
    assert!(checked > 100, "only {checked} paced gaps checked");
    assert_eq!(net.b.driver.release_lateness().max(), 1);
}

/// A paced connection closed with a departure still waiting for its time (the pacer holds
/// one per connection): its close leaves at once, and what waited never does (nothing may
/// follow a CONNECTION_CLOSE); it is counted.
#[test]
fn a_paced_connection_closed_mid_flight_sends_nothing_it_had_queued_after_its_close() {
    let mut net = paced_download(5_000_000);
    assert!(
        net.run_for(Duration::from_secs(10), |n| {
            let paced = n.b.driver.connection_ids().first().copied();
            n.b.driver.paced_datagrams() > 0
                && paced.is_some_and(|c| n.b.driver.pacing_rate(c).is_some())
        }),
        "the pacer never held a datagram"
    );
    let queued = net.b.driver.paced_datagrams() as u64;
    let conn = net.b.driver.connection_ids()[0];
    net.b
        .driver
        .close(conn, softtimer_quic::VarInt::from_u32(7), b"enough")
        .unwrap();
    let sent_before = net.transcript.len();
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    // What the server sent from then on: its close, and the closes it repeats to packets
    // still arriving; no datagram of the download (full-sized).
    let after: Vec<usize> = net
        .transcript
        .iter()
        .skip(sent_before)
        .filter(|s| s.from == From::B)
        .map(|s| s.size)
        .collect();
    assert!(!after.is_empty(), "the close was not sent");
    assert!(after.iter().all(|&size| size < 200), "{after:?}");
    assert_eq!(net.b.driver.stats().paced_dropped_after_close, queued);
    assert_eq!(net.b.driver.paced_datagrams(), 0);
}
