//! A live connection as the driver keeps it: quinn-proto's `Connection`, its timers as soft
//! events, its tail-loss probe and flight record, and what its close has reached.

use std::net::SocketAddr;

use quinn_proto::{ConnectionError, ConnectionHandle, Event, StreamEvent};
use softtimer::{EventId, Instant, Span};

use super::closed::Cid;
use crate::QuicEvent;
use crate::probe::{Progress, TailProbe};

/// A connection of the driver: quinn-proto's handle and a generation, so that an id kept
/// after its connection is gone never names the next connection in the same slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}.{}", self.slot, self.generation)
    }
}

/// What the driver derives of a connection's flight from what passes through it (quinn-proto
/// 0.11 does not say how many bytes are unacknowledged): the frames it sent, the ACK frames it
/// processed, and where quinn-proto's own loss-detection timer stood after the latest data.
#[derive(Default)]
pub(crate) struct Flight {
    /// Ack-eliciting frames other than PING sent, as last seen.
    pub data_frames: u64,
    /// ACK frames received, as last seen.
    pub acks: u64,
    /// When data last left, in quinn-proto's time.
    pub last_data: Option<std::time::Instant>,
    /// quinn-proto's next timeout right after that data left: with data in flight and no ACK
    /// owed, its loss-detection timer (the last ack-eliciting packet plus the PTO).
    pub loss_timer: Option<std::time::Instant>,
    /// quinn's lost-packet count when the last probe went out, until data is sent again.
    pub lost_at_probe: Option<u64>,
    /// `loss_timer` on the soft-event clock: when quinn-proto's own probe would come (or
    /// another of its timers, if earlier; the probe tells them apart).
    pub quinn_probe_at: Option<Instant>,
}

impl Flight {
    /// Whether ack-eliciting data is still unacknowledged after an ACK, judged from
    /// quinn-proto's next timeout `next`. quinn-proto arms its loss-detection timer exactly
    /// while such data is in flight, at the last ack-eliciting packet plus one PTO, and stops
    /// it once an ACK leaves nothing outstanding; then its next timer is the idle timer, at
    /// least three PTOs after the ACK. So a next timeout within twice the distance from the
    /// last data to the timer seen then means data is still out. The error, where there is one,
    /// is on the side of a probe too many: another timer of quinn-proto's (a keep-alive, an
    /// ACK it owes) earlier than that reads as data outstanding.
    pub fn outstanding_after_ack(&self, next: Option<std::time::Instant>) -> bool {
        let Some(next) = next else {
            return false;
        };
        match (self.last_data, self.loss_timer) {
            (Some(sent), Some(timer)) => {
                let armed = timer.saturating_duration_since(sent);
                next.saturating_duration_since(sent) <= armed * 2
            }
            _ => true,
        }
    }

    /// Ack-eliciting frames sent, other than PING (a probe's own).
    pub fn data_frames(f: &quinn_proto::FrameStats) -> u64 {
        f.stream
            + f.crypto
            + f.reset_stream
            + f.stop_sending
            + f.max_data
            + f.max_stream_data
            + f.max_streams_bidi
            + f.max_streams_uni
            + f.data_blocked
            + f.stream_data_blocked
            + f.streams_blocked_bidi
            + f.streams_blocked_uni
            + f.new_connection_id
            + f.retire_connection_id
            + f.new_token
            + f.datagram
            + f.path_challenge
            + f.path_response
            + f.ack_frequency
            + f.immediate_ack
            + u64::from(f.handshake_done)
    }
}

/// How far a connection's end has come.
#[derive(Default)]
pub(crate) struct Ending {
    /// The reason given to the application in [`QuicEvent::Lost`], once given.
    pub lost: Option<ConnectionError>,
    /// The application has taken the `Lost` event: the driver may now free or compact it.
    pub reported: bool,
    /// When the driver first saw it closed.
    pub closed_at: Option<Instant>,
    /// The datagram that carried our CONNECTION_CLOSE, as sent (kept to repeat it).
    pub close_datagram: Option<Vec<u8>>,
    /// quinn-proto has polled nothing more since it closed: its close is out.
    pub flushed: bool,
    /// quinn-proto said it is drained (the event is held until the driver frees the slot,
    /// so that quinn-proto does not give the handle to a new connection before then).
    pub drained: bool,
    /// The drain-period override's end (full design): the connection is held until then.
    pub hold: Option<EventId>,
    /// The override has ended.
    pub hold_over: bool,
}

impl Ending {
    /// Whether its close is out, as the compact design needs it before it keeps a record in
    /// place of the connection: quinn-proto has polled nothing more since it closed, and a
    /// close that was ours to send (we closed it, or found the peer at fault) was seen
    /// leaving. A server's close during the handshake may wait on the peer's
    /// anti-amplification limit, quinn-proto polling nothing meanwhile: such a connection
    /// stays whole until its close leaves or quinn-proto drains it.
    pub fn close_is_out(&self) -> bool {
        let ours = matches!(
            self.lost,
            Some(
                ConnectionError::LocallyClosed
                    | ConnectionError::TransportError(_)
                    | ConnectionError::CidsExhausted
            )
        );
        self.flushed && (!ours || self.close_datagram.is_some())
    }
}

/// A connection of the driver.
pub(crate) struct Conn {
    pub conn: quinn_proto::Connection,
    pub connected: bool,
    /// quinn-proto's next timeout as a soft event, and the time quinn-proto asked for.
    pub timer: Option<(EventId, std::time::Instant)>,
    pub probe: TailProbe,
    pub probe_timer: Option<(EventId, Instant)>,
    pub flight: Flight,
    /// In the driver's list of connections to settle (events, timers, close).
    pub unsettled: bool,
    /// In the driver's list of connections to ask for datagrams.
    pub sendable: bool,
    /// The destination connection ID the peer last used towards us.
    pub dcid: Option<Cid>,
    pub ending: Ending,
}

impl Conn {
    pub fn new(conn: quinn_proto::Connection) -> Conn {
        Conn {
            conn,
            connected: false,
            timer: None,
            probe: TailProbe::default(),
            probe_timer: None,
            flight: Flight::default(),
            unsettled: false,
            sendable: false,
            dcid: None,
            ending: Ending::default(),
        }
    }

    pub fn peer(&self) -> SocketAddr {
        self.conn.remote_address()
    }

    /// Takes quinn-proto's application events as the driver's, in order.
    pub fn take_events(&mut self, id: ConnId, out: &mut std::collections::VecDeque<QuicEvent>) {
        while let Some(event) = self.conn.poll() {
            let event = match event {
                Event::Connected => {
                    self.connected = true;
                    QuicEvent::Connected(id)
                }
                Event::ConnectionLost { reason } => {
                    if self.ending.lost.is_some() {
                        continue;
                    }
                    self.ending.lost = Some(reason.clone());
                    QuicEvent::Lost(id, reason)
                }
                Event::Stream(StreamEvent::Opened { dir }) => QuicEvent::StreamOpened(id, dir),
                Event::DatagramReceived => QuicEvent::DatagramReceived(id),
                Event::DatagramsUnblocked => QuicEvent::DatagramsUnblocked(id),
                Event::Stream(StreamEvent::Available { dir }) => {
                    QuicEvent::StreamsAvailable(id, dir)
                }
                Event::Stream(StreamEvent::Readable { id: s }) => QuicEvent::Readable(id, s),
                Event::Stream(StreamEvent::Writable { id: s }) => QuicEvent::Writable(id, s),
                Event::Stream(StreamEvent::Finished { id: s }) => QuicEvent::Finished(id, s),
                Event::Stream(StreamEvent::Stopped { id: s, error_code }) => {
                    QuicEvent::Stopped(id, s, error_code)
                }
                _ => continue,
            };
            out.push_back(event);
        }
    }

    /// Feeds the tail-loss probe an ACK (or not) seen since the last look, at `now`.
    /// Returns whether anything changed.
    pub fn observe_acks(&mut self, now: Instant, hz: u64) -> bool {
        if !self.connected {
            return false;
        }
        let stats = self.conn.stats();
        if stats.frame_rx.acks == self.flight.acks {
            return false;
        }
        self.flight.acks = stats.frame_rx.acks;
        let outstanding = self.flight.outstanding_after_ack(self.conn.poll_timeout());
        let progress = Progress {
            data_sent: false,
            acked: true,
            outstanding,
        };
        let srtt = Span::from_duration(stats.path.rtt, hz);
        self.probe
            .observe(now, progress, srtt, self.flight.quinn_probe_at);
        true
    }

    /// Notes a datagram quinn-proto just produced at `now` (`now_std` in its time): whether
    /// it carried data, for the probe. Returns whether a probe found a loss.
    pub fn observe_sent(
        &mut self,
        now: Instant,
        now_std: std::time::Instant,
        stats: &quinn_proto::ConnectionStats,
        hz: u64,
    ) -> bool {
        let data = Flight::data_frames(&stats.frame_tx);
        if data <= self.flight.data_frames {
            return false;
        }
        self.flight.data_frames = data;
        self.flight.last_data = Some(now_std);
        self.flight.loss_timer = self.conn.poll_timeout();
        self.flight.quinn_probe_at = self
            .flight
            .loss_timer
            .map(|t| now + Span::from_duration(t.saturating_duration_since(now_std), hz));
        let srtt = Span::from_duration(stats.path.rtt, hz);
        let outcome = self
            .flight
            .lost_at_probe
            .take()
            .map(|lost| stats.path.lost_packets > lost);
        if let Some(found) = outcome {
            let max = Span::from_duration(crate::probe::MAX_ALLOWANCE, hz);
            self.probe.outcome(found, srtt, max);
        }
        if self.connected {
            self.probe
                .observe(now, Progress::DATA_SENT, srtt, self.flight.quinn_probe_at);
        }
        outcome == Some(true)
    }
}

/// The driver's connections by quinn-proto handle, each slot with the generation of its
/// latest tenant.
#[derive(Default)]
pub(crate) struct Slots {
    slots: Vec<(u32, Option<Box<Conn>>)>,
    live: usize,
}

impl Slots {
    pub fn insert(&mut self, handle: ConnectionHandle, conn: quinn_proto::Connection) -> ConnId {
        let slot = handle.0;
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || (0, None));
        }
        let entry = &mut self.slots[slot];
        debug_assert!(entry.1.is_none(), "quinn-proto reused a live handle");
        entry.0 = entry.0.wrapping_add(1);
        entry.1 = Some(Box::new(Conn::new(conn)));
        self.live += 1;
        ConnId {
            slot: slot as u32,
            generation: entry.0,
        }
    }

    /// The connection `id` names, if it is still there.
    pub fn get(&self, id: ConnId) -> Option<&Conn> {
        match self.slots.get(id.slot as usize) {
            Some((g, Some(c))) if *g == id.generation => Some(c),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        match self.slots.get_mut(id.slot as usize) {
            Some((g, Some(c))) if *g == id.generation => Some(c),
            _ => None,
        }
    }

    /// The connection in `slot`, whatever its generation.
    pub fn at(&mut self, slot: u32) -> Option<&mut Conn> {
        self.slots.get_mut(slot as usize)?.1.as_deref_mut()
    }

    pub fn id(&self, slot: u32) -> Option<ConnId> {
        match self.slots.get(slot as usize) {
            Some((g, Some(_))) => Some(ConnId {
                slot,
                generation: *g,
            }),
            _ => None,
        }
    }

    pub fn remove(&mut self, slot: u32) -> Option<Box<Conn>> {
        let conn = self.slots.get_mut(slot as usize)?.1.take();
        if conn.is_some() {
            self.live -= 1;
        }
        conn
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn iter(&self) -> impl Iterator<Item = (ConnId, &Conn)> {
        self.slots.iter().enumerate().filter_map(|(i, (g, c))| {
            c.as_deref().map(|c| {
                (
                    ConnId {
                        slot: i as u32,
                        generation: *g,
                    },
                    c,
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_close_of_ours_is_out_only_once_it_was_seen_leaving() {
        let ending = |lost, flushed, sent: bool| Ending {
            lost: Some(lost),
            flushed,
            close_datagram: sent.then(|| vec![0x40; 30]),
            ..Ending::default()
        };
        // Ours to send: quinn-proto polling nothing (an anti-amplification limit) is not
        // enough.
        assert!(!ending(ConnectionError::LocallyClosed, true, false).close_is_out());
        assert!(ending(ConnectionError::LocallyClosed, true, true).close_is_out());
        assert!(!ending(ConnectionError::LocallyClosed, false, true).close_is_out());
        // None owed: the peer closed, or the connection timed out.
        assert!(ending(ConnectionError::TimedOut, true, false).close_is_out());
        assert!(ending(ConnectionError::Reset, true, false).close_is_out());
        assert!(!ending(ConnectionError::TimedOut, false, false).close_is_out());
    }

    #[test]
    fn the_loss_timer_still_armed_after_an_ack_means_data_outstanding() {
        let t0 = std::time::Instant::now();
        let flight = Flight {
            last_data: Some(t0),
            loss_timer: Some(t0 + Duration::from_millis(26)),
            ..Flight::default()
        };
        // The ACK left data out: quinn-proto's timer is still about one PTO after the data.
        assert!(flight.outstanding_after_ack(Some(t0 + Duration::from_millis(27))));
        // A loss-time timer, earlier still.
        assert!(flight.outstanding_after_ack(Some(t0 + Duration::from_millis(2))));
        // Everything acknowledged: the idle timer, 30 s on.
        assert!(!flight.outstanding_after_ack(Some(t0 + Duration::from_secs(30))));
        assert!(!flight.outstanding_after_ack(None));
        // Nothing seen of the data: assume it is out.
        assert!(Flight::default().outstanding_after_ack(Some(t0)));
    }
}
