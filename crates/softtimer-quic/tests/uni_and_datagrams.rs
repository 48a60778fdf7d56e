//! Unidirectional streams and unreliable datagrams (RFC 9221) through the driver, on a
//! simulated clock: each arrives and is read where both sides' transport settings have
//! them on, and each is refused with its reason where they do not.

use std::time::Duration;

use bytes::Bytes;
use softtimer::SimClock;
use softtimer_quic::sim::{LinkConfig, Net};
use softtimer_quic::tls::{Trust, Tuning, client_config, server_config};
use softtimer_quic::{
    App, ConnId, DatagramError, Dir, Driver, QuicError, QuicEvent, ReadStatus, StreamError,
    StreamId,
};

mod sim_support;

use sim_support::{identity, insecure_net, seeded, sim_net};

/// Uni streams and datagrams on.
fn both_on() -> Tuning {
    Tuning {
        uni_streams: 4,
        datagrams: true,
        ..Tuning::default()
    }
}

/// A client that, once connected, sends one unidirectional stream and one datagram, and
/// waits for the server's datagram in answer.
#[derive(Default)]
struct Client {
    sent: bool,
    max_datagram: Option<usize>,
    answer: Option<Bytes>,
    /// A read of its own unidirectional stream, which it cannot read.
    own_stream_read: Option<Result<ReadStatus, String>>,
}

impl App<SimClock> for Client {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        match event {
            QuicEvent::Connected(c) => {
                let s = driver
                    .open_uni(c)
                    .unwrap()
                    .expect("the server gives uni streams");
                assert_eq!(driver.write(c, s, b"one way").unwrap(), 7);
                driver.finish(c, s).unwrap();
                self.own_stream_read = Some(driver.read(c, s, |_| {}).map_err(|e| e.to_string()));
                self.max_datagram = driver.max_datagram_size(c);
                driver
                    .send_datagram(c, Bytes::from_static(b"ping"), false)
                    .unwrap();
                self.sent = true;
            }
            QuicEvent::DatagramReceived(c) => {
                self.answer = driver.read_datagram(c).unwrap();
                driver.stop();
            }
            QuicEvent::Lost(_, why) => panic!("client lost: {why}"),
            _ => {}
        }
    }
}

/// A server that reads unidirectional streams and answers each datagram with one.
#[derive(Default)]
struct Server {
    opened: Vec<Dir>,
    stream: Vec<u8>,
    finished: bool,
    datagrams: Vec<Bytes>,
    /// A write to the client's unidirectional stream, which it cannot write.
    write_back: Option<Result<usize, String>>,
}

impl Server {
    fn read(&mut self, driver: &mut Driver<SimClock>, c: ConnId, s: softtimer_quic::StreamId) {
        let status = driver
            .read(c, s, |d| self.stream.extend_from_slice(d))
            .unwrap();
        self.finished |= status == ReadStatus::Finished;
    }
}

impl App<SimClock> for Server {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        match event {
            QuicEvent::StreamOpened(c, dir) => {
                self.opened.push(dir);
                assert_eq!(driver.accept_bi(c).unwrap(), None, "no bidirectional one");
                while let Some(s) = driver.accept_uni(c).unwrap() {
                    self.write_back = Some(driver.write(c, s, b"x").map_err(|e| e.to_string()));
                    self.read(driver, c, s);
                }
            }
            QuicEvent::Readable(c, s) => self.read(driver, c, s),
            QuicEvent::DatagramReceived(c) => {
                while let Some(d) = driver.read_datagram(c).unwrap() {
                    self.datagrams.push(d);
                    driver
                        .send_datagram(c, Bytes::from_static(b"pong"), false)
                        .unwrap();
                }
            }
            _ => {}
        }
    }
}

#[test]
fn a_unidirectional_stream_and_datagrams_arrive_where_both_sides_take_them() {
    let tuning = both_on();
    let mut net = insecure_net(&tuning, seeded(2), Client::default(), Server::default());
    let done = net.run_for(Duration::from_secs(5), |n| n.a.stopped && n.b.app.finished);
    assert!(
        done,
        "client sent {}, server {:?}",
        net.a.app.sent, net.b.app.opened
    );
    let (client, server) = (&net.a.app, &net.b.app);
    assert_eq!(server.opened, vec![Dir::Uni]);
    assert_eq!(server.stream, b"one way");
    assert_eq!(server.datagrams, vec![Bytes::from_static(b"ping")]);
    assert_eq!(client.answer.as_deref(), Some(&b"pong"[..]));
    // Each side of a unidirectional stream is refused the other's half.
    assert!(
        server
            .write_back
            .as_ref()
            .is_some_and(|r| r.as_ref().is_err_and(|e| e.contains("the other way"))),
        "{:?}",
        server.write_back
    );
    assert!(
        client
            .own_stream_read
            .as_ref()
            .is_some_and(|r| r.as_ref().is_err_and(|e| e.contains("the other way"))),
        "{:?}",
        client.own_stream_read
    );
    // A datagram fits in one packet: under the 1200-byte minimum path MTU, well above 1000.
    let max = client.max_datagram.expect("a size once connected");
    assert!((1000..1200).contains(&max), "{max}");
}

/// A client that tries, once connected, what its and its peer's settings refuse.
#[derive(Default)]
struct Refused {
    open_uni: Option<Option<softtimer_quic::StreamId>>,
    small: Option<Result<(), QuicError>>,
    large: Option<Result<(), QuicError>>,
    max: Option<usize>,
}

impl App<SimClock> for Refused {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        if let QuicEvent::Connected(c) = event {
            self.open_uni = Some(driver.open_uni(c).unwrap());
            self.max = driver.max_datagram_size(c);
            self.small = Some(driver.send_datagram(c, Bytes::from_static(b"hi"), false));
            self.large = Some(driver.send_datagram(c, Bytes::from(vec![0u8; 1500]), false));
            driver.stop();
        }
    }
}

fn datagram_error(r: &Option<Result<(), QuicError>>) -> DatagramError {
    match r {
        Some(Err(QuicError::Datagram(e))) => e.clone(),
        other => panic!("not a datagram error: {other:?}"),
    }
}

/// A client with `client` settings running `a`, a server with `server` settings running
/// `b`.
fn net_of<A: App<SimClock>, B: App<SimClock>>(
    client: &Tuning,
    server: &Tuning,
    a: A,
    b: B,
) -> Net<A, B> {
    sim_net(
        (seeded(1), client_config(&Trust::Insecure, client).unwrap()),
        (seeded(2), server_config(identity(), server).unwrap()),
        (|_, _| a, b),
        LinkConfig::default(),
    )
}

#[test]
fn what_either_sides_settings_leave_off_is_refused_with_its_reason() {
    // The server has both off (the default), the client both on: no stream credit, and
    // the peer takes no datagrams.
    let mut net = net_of(
        &both_on(),
        &Tuning::default(),
        Refused::default(),
        Server::default(),
    );
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    let client = &net.a.app;
    assert_eq!(client.open_uni, Some(None), "no credit for a uni stream");
    assert_eq!(client.max, None);
    assert_eq!(
        datagram_error(&client.small),
        DatagramError::UnsupportedByPeer
    );

    // This side off, the peer on: refused before anything is asked of the peer.
    let mut net = net_of(
        &Tuning::default(),
        &both_on(),
        Refused::default(),
        Server::default(),
    );
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    assert_eq!(datagram_error(&net.a.app.small), DatagramError::Disabled);
    // The size reads the peer's side only: it has one, though this side sends none.
    assert!(net.a.app.max.is_some());

    // Both sides on: a datagram too large for the path is refused with the size that fits.
    let mut net = net_of(
        &both_on(),
        &both_on(),
        Refused::default(),
        Server::default(),
    );
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    let client = &net.a.app;
    assert!(client.open_uni.is_some_and(|s| s.is_some()));
    assert!(client.small.as_ref().is_some_and(Result::is_ok));
    let max = client.max.expect("datagrams on both sides");
    assert_eq!(
        datagram_error(&client.large),
        DatagramError::TooLarge {
            size: 1500,
            max: Some(max)
        }
    );
}

/// A client that, once connected, fills the datagram send buffer without letting the driver
/// send, then waits for the room to come back.
#[derive(Default)]
struct Filler {
    accepted: usize,
    blocked: Option<Bytes>,
    dropping_oldest_ok: bool,
    unblocked: bool,
}

impl App<SimClock> for Filler {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        match event {
            QuicEvent::Connected(c) => {
                let size = driver.max_datagram_size(c).expect("on");
                for i in 0u32.. {
                    let mut d = vec![0u8; size];
                    d[..4].copy_from_slice(&i.to_be_bytes());
                    match driver.send_datagram(c, Bytes::from(d), false) {
                        Ok(()) => self.accepted += 1,
                        Err(QuicError::Datagram(DatagramError::Blocked(back))) => {
                            self.blocked = Some(back);
                            break;
                        }
                        Err(e) => panic!("{e}"),
                    }
                    assert!(i < 100_000, "never blocked");
                }
                // Displacing the oldest instead never refuses.
                self.dropping_oldest_ok = (0..10).all(|_| {
                    driver
                        .send_datagram(c, Bytes::from(vec![1u8; size]), true)
                        .is_ok()
                });
            }
            QuicEvent::DatagramsUnblocked(_) => {
                self.unblocked = true;
                driver.stop();
            }
            _ => {}
        }
    }
}

#[test]
fn a_full_datagram_send_buffer_gives_the_datagram_back_and_says_when_there_is_room() {
    let mut net = insecure_net(&both_on(), seeded(2), Filler::default(), Server::default());
    assert!(net.run_for(Duration::from_secs(10), |n| n.a.stopped));
    let filler = &net.a.app;
    // quinn-proto's send buffer is 1 MiB: hundreds of full-size datagrams, then one back.
    assert!(filler.accepted > 500, "{}", filler.accepted);
    let back = filler.blocked.as_ref().expect("blocked");
    assert_eq!(&back[..4], &(filler.accepted as u32).to_be_bytes());
    assert!(filler.dropping_oldest_ok);
    assert!(filler.unblocked);
    // The server gets datagrams (not all: the oldest were displaced, and a datagram may be
    // dropped on the way). The client learnt of the room as its sends made it, before any
    // had arrived: the event no longer waited for the next packet or timer.
    assert!(net.b.app.datagrams.is_empty());
    assert!(net.run_for(Duration::from_secs(1), |n| !n.b.app.datagrams.is_empty()));
}

/// A client that, once connected, names unidirectional streams by number the wrong way
/// round (with uni streams off, as by default): each call is refused.
#[derive(Default)]
struct WrongWay {
    errors: Vec<String>,
}

impl App<SimClock> for WrongWay {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        if let QuicEvent::Connected(c) = event {
            // 3: the server's first unidirectional stream; 2: the client's.
            let id = |n: u32| StreamId::from(softtimer_quic::VarInt::from_u32(n));
            let (theirs, ours) = (id(3), id(2));
            let code = softtimer_quic::VarInt::from_u32(1);
            let results = [
                driver.write(c, theirs, b"x").map(|_| ()),
                driver.finish(c, theirs),
                driver.reset(c, theirs, code),
                driver.read(c, ours, |_| {}).map(|_| ()),
                driver.stop_sending(c, ours, code),
            ];
            for r in results {
                match r {
                    Err(QuicError::Stream(e)) => {
                        assert!(matches!(e, StreamError::WrongDirection { .. }), "{e}");
                        self.errors.push(e.to_string());
                    }
                    other => panic!("{other:?}"),
                }
            }
            driver.stop();
        }
    }
}

#[test]
fn a_stream_named_the_wrong_way_round_is_refused_not_a_panic() {
    let tuning = Tuning::default();
    let mut net = insecure_net(&tuning, seeded(2), WrongWay::default(), Server::default());
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    assert_eq!(net.a.app.errors.len(), 5);
    assert_eq!(
        net.a.app.errors[0],
        "server unidirectional stream 0 carries data the other way"
    );
}

/// A client allowed one unidirectional stream at a time: the second waits for the
/// server's credit, which `StreamsAvailable` announces once the first is read.
#[derive(Default)]
struct OneAtATime {
    second_refused: bool,
    available: Vec<Dir>,
    second: Option<StreamId>,
}

impl App<SimClock> for OneAtATime {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        match event {
            QuicEvent::Connected(c) => {
                let s = driver.open_uni(c).unwrap().expect("one allowed");
                driver.write(c, s, b"first").unwrap();
                driver.finish(c, s).unwrap();
                self.second_refused = driver.open_uni(c).unwrap().is_none();
            }
            QuicEvent::StreamsAvailable(c, dir) => {
                self.available.push(dir);
                if dir == Dir::Uni && self.second.is_none() {
                    self.second = driver.open_uni(c).unwrap();
                    driver.stop();
                }
            }
            _ => {}
        }
    }
}

#[test]
fn a_stream_refused_at_the_peers_limit_can_be_opened_once_streams_are_available() {
    let tuning = Tuning {
        uni_streams: 1,
        ..Tuning::default()
    };
    let mut net = insecure_net(&tuning, seeded(2), OneAtATime::default(), Server::default());
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    let client = &net.a.app;
    assert!(client.second_refused, "the limit is one");
    assert_eq!(net.b.app.stream, b"first");
    assert!(
        client.available.contains(&Dir::Uni),
        "{:?}",
        client.available
    );
    assert!(client.second.is_some());
}
