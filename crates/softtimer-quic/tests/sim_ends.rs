//! How connections and servers end, on a simulated clock: a server told to stop after some
//! connections, and what an ended connection refuses.

use std::time::Duration;

use softtimer::SimClock;
mod sim_support;

use sim_support::{identity, insecure_net, seeded, server_addr, sim_net};
use softtimer_quic::perf::{ClientPlan, PerfClient, PerfServer};
use softtimer_quic::sim::LinkConfig;
use softtimer_quic::tls::{Trust, Tuning, client_config, server_config};
use softtimer_quic::{App, ConnId, Driver, QuicError, QuicEvent, VarInt};

/// A server application that does nothing.
struct Quiet;

impl App<SimClock> for Quiet {
    fn on_event(&mut self, _: &mut Driver<SimClock>, _: QuicEvent) {}
}

/// Two perf clients on one client driver, the second connecting in the turn the first
/// closes: its Initial travels with the first's close.
struct OneAfterTheOther {
    first: PerfClient,
    second: Option<(ConnId, PerfClient)>,
    tls: quinn_proto::ClientConfig,
}

impl App<SimClock> for OneAfterTheOther {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        match &mut self.second {
            Some((conn, second)) if event_conn(&event) == Some(*conn) => {
                second.on_event(driver, event)
            }
            _ => self.first.on_event(driver, event),
        }
    }
    fn on_turn(&mut self, driver: &mut Driver<SimClock>) -> bool {
        let mut did = self.first.on_turn(driver);
        if let Some((_, second)) = &mut self.second {
            did |= second.on_turn(driver);
        } else if self.first.report.requests == 1 {
            let conn = driver
                .connect(self.tls.clone(), server_addr(), "localhost")
                .unwrap();
            let plan = ClientPlan {
                download: 10_000,
                ..ClientPlan::default()
            };
            self.second = Some((conn, PerfClient::new(plan, conn, driver.latest())));
            did = true;
        }
        did
    }
}

fn event_conn(event: &QuicEvent) -> Option<ConnId> {
    match *event {
        QuicEvent::Connected(c)
        | QuicEvent::StreamOpened(c, _)
        | QuicEvent::Readable(c, _)
        | QuicEvent::Writable(c, _)
        | QuicEvent::Finished(c, _)
        | QuicEvent::Stopped(c, _, _)
        | QuicEvent::DatagramReceived(c)
        | QuicEvent::StreamsAvailable(c, _)
        | QuicEvent::DatagramsUnblocked(c)
        | QuicEvent::Lost(c, _) => Some(c),
        _ => None,
    }
}

/// A server told to stop after one connection waits for one still in its handshake when
/// the first closes (it counted only connections whose handshake was done, and stopped
/// with the second client's handshake half made).
#[test]
fn a_server_stopping_after_one_connection_waits_for_one_in_its_handshake() {
    let tuning = Tuning::default();
    let trust = Trust::Cert(identity().cert.clone());
    let tls = client_config(&trust, &tuning).unwrap();
    let mut net = sim_net(
        (seeded(1), tls.clone()),
        (seeded(2), server_config(identity(), &tuning).unwrap()),
        (
            |conn, now| OneAfterTheOther {
                first: PerfClient::new(
                    ClientPlan {
                        download: 10_000,
                        ..ClientPlan::default()
                    },
                    conn,
                    now,
                ),
                second: None,
                tls,
            },
            PerfServer::new(Some(1)),
        ),
        LinkConfig::default(),
    );
    assert!(net.run_for(Duration::from_secs(10), |n| n.b.stopped));
    let (_, second) = net
        .a
        .app
        .second
        .as_ref()
        .expect("the second client connected");
    assert_eq!(
        (second.report.requests, second.report.error.as_deref()),
        (1, None),
        "the server stopped before the second client was served"
    );
    assert_eq!(net.b.app.report.connections, 2);
}

/// A client that, once connected, opens a stream, closes the connection, and then tries
/// new streams, a write on the old one and a datagram.
#[derive(Default)]
struct AfterItsEnd {
    refused: Vec<String>,
}

impl App<SimClock> for AfterItsEnd {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        if let QuicEvent::Connected(c) = event {
            let stream = driver.open_bi(c).unwrap().expect("room for a stream");
            driver.close(c, VarInt::from_u32(0), b"done").unwrap();
            for refused in [
                driver.open_bi(c).map(|_| 0),
                driver.open_uni(c).map(|_| 0),
                driver.write(c, stream, b"late"),
                driver
                    .send_datagram(c, bytes::Bytes::from_static(b"late"), false)
                    .map(|()| 0),
            ] {
                match refused {
                    Err(QuicError::ConnectionEnded(id)) if id == c => self
                        .refused
                        .push(QuicError::ConnectionEnded(id).to_string()),
                    other => panic!("not refused as ended: {other:?}"),
                }
            }
            driver.stop();
        }
    }
}

/// A connection that has ended opens no stream and takes no write, with an error that says
/// so: quinn-proto answers both as it answers a stream limit or flow control (`None`, 0),
/// and the event that would say "try again" never comes.
#[test]
fn an_ended_connection_refuses_new_streams_and_writes() {
    let mut net = insecure_net(&Tuning::default(), seeded(2), AfterItsEnd::default(), Quiet);
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    assert_eq!(net.a.app.refused.len(), 4);
    assert!(
        net.a.app.refused[0].contains("has ended"),
        "{:?}",
        net.a.app.refused
    );
}
