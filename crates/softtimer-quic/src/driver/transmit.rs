//! Transmits out: endpoint responses, paced departures, and what quinn-proto's connections
//! have to send, with the tail-loss probe fed on the way and each connection's
//! CONNECTION_CLOSE kept for its closed record.

use std::net::{IpAddr, SocketAddr};

use quinn_proto::EcnCodepoint;
use softtimer::{Clock, Instant, Span};

use super::{ClosedState, Datagram, Driver, Pacing};

/// A datagram (or a GSO batch of them) to send, in the buffer given to
/// [`Driver::poll_transmit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where to.
    pub destination: SocketAddr,
    /// Its ECN codepoint.
    pub ecn: Option<EcnCodepoint>,
    /// Bytes in the buffer.
    pub size: usize,
    /// With several datagrams in the buffer (GSO), the size of each but the last.
    pub segment_size: Option<usize>,
    /// The local address to send from, when it matters.
    pub src_ip: Option<IpAddr>,
    /// When it was due to leave: its departure time when paced, else the `now` it was
    /// polled at.
    pub departure: Instant,
}

impl Transmit {
    /// Datagrams in it.
    pub fn datagrams(&self) -> usize {
        self.segment_size
            .map_or(1, |s| self.size.div_ceil(s.max(1)))
    }
}

impl<C: Clock + Clone> Driver<C> {
    /// Caps the datagrams one send may carry (GSO batches, and a departure's) at
    /// `segments` from now on: what the socket can still send as one (at least 1).
    pub fn cap_segments(&mut self, segments: usize) {
        let segments = segments.max(1);
        self.config.max_datagrams = self.config.max_datagrams.min(segments);
        self.config.datagrams_per_departure = self.config.datagrams_per_departure.min(segments);
    }

    /// The next datagram to send at `now`, into `buf` (replaced: it holds exactly the
    /// datagram afterwards), or `None` when nothing is due. Call it until `None` after every
    /// other call; a paced datagram not yet due waits for its time ([`Driver::poll_timeout`]).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.advance(now);
        self.settle();
        if let Some(d) = self.responses.pop_front() {
            return Some(self.hand_out(d, now, buf));
        }
        if let Some(t) = self.next_released(now, buf) {
            return Some(t);
        }
        while let Some(&slot) = self.sendable.front() {
            let paced = self.config.pacing == Pacing::PerPacket;
            let (Some(id), Some(c)) = (self.conns.id(slot), self.conns.at(slot)) else {
                self.sendable.pop_front();
                continue;
            };
            let closing = c.conn.is_closed();
            if paced && !closing && self.pacer.queued(id) > 0 {
                // It is asked again when its queue empties.
                c.sendable = false;
                self.sendable.pop_front();
                continue;
            }
            let max = if paced {
                self.config.datagrams_per_departure
            } else {
                self.config.max_datagrams
            };
            let Some(d) = self.poll_connection(slot, now, max) else {
                self.sendable.pop_front();
                self.flushed(slot);
                continue;
            };
            if !paced || closing {
                return Some(self.hand_out(d, now, buf));
            }
            let len = d.bytes.len() as u64;
            self.pacer.push(id, now, len, d);
            if let Some(t) = self.next_released(now, buf) {
                return Some(t);
            }
        }
        None
    }

    /// Asks the connection in `slot` for a datagram, and notes what it carried.
    fn poll_connection(&mut self, slot: u32, now: Instant, max: usize) -> Option<Datagram> {
        let now_std = self.map.to_std(now);
        let hz = self.map.hz;
        let compact = self.config.closed_state == ClosedState::Compact;
        let paced = self.config.pacing == Pacing::PerPacket;
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        let id = self.conns.id(slot)?;
        let c = self.conns.at(slot)?;
        let Some(t) = c.conn.poll_transmit(now_std, max, &mut bytes) else {
            self.spare.push(bytes);
            return None;
        };
        bytes.truncate(t.size);
        if c.conn.is_closed() {
            if compact {
                c.ending.close_datagram = Some(bytes.clone());
            }
        } else {
            let stats = c.conn.stats();
            if self.config.tail_probe && c.observe_sent(now, now_std, &stats, hz) {
                self.stats.tail_probes_finding_loss += 1;
            }
            if paced {
                if c.connected {
                    let srtt = Span::from_duration(stats.path.rtt, hz);
                    self.pacer.set_window(id, stats.path.cwnd, srtt);
                } else {
                    // No RTT sample yet: like the kernel before its first sample, do not
                    // pace the handshake.
                    self.pacer.clear_rate(id);
                }
            }
        }
        Some(Datagram {
            destination: t.destination,
            ecn: t.ecn,
            src_ip: t.src_ip,
            bytes,
            segment_size: t.segment_size,
        })
    }

    /// A connection has nothing more to send for now: its timers may have moved (quinn's
    /// pacer), and a closed one has its close out.
    fn flushed(&mut self, slot: u32) {
        let Some(c) = self.conns.at(slot) else {
            return;
        };
        c.sendable = false;
        if c.conn.is_closed() {
            c.ending.flushed = true;
        }
        if !c.unsettled {
            c.unsettled = true;
            self.unsettled.push(slot);
        }
    }

    /// The next paced datagram due at `now`, if any.
    fn next_released(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.released.is_empty() {
            let mut due = Vec::new();
            if self.pacer.release(now, &mut due) == 0 {
                return None;
            }
            for (id, d, stamp) in due {
                if self.pacer.queued(id) == 0 {
                    self.make_sendable(id.slot);
                }
                let late = now.saturating_since(stamp).as_nanos(self.map.hz);
                let _ = self.release_lateness.record(late.max(1));
                self.released.push_back((id, d, stamp));
            }
        }
        while let Some((id, d, stamp)) = self.released.pop_front() {
            // Its connection has ended since it was queued (a closed one sends nothing but
            // its CONNECTION_CLOSE), or is gone and its slot perhaps taken by another.
            if self.conns.get(id).is_none_or(|c| c.conn.is_closed()) {
                self.stats.paced_dropped_after_close += 1;
                let mut bytes = d.bytes;
                if self.spare.len() < 64 {
                    bytes.clear();
                    self.spare.push(bytes);
                }
                continue;
            }
            let mut t = self.hand_out(d, now, buf);
            t.departure = stamp;
            return Some(t);
        }
        None
    }

    fn make_sendable(&mut self, slot: u32) {
        if let Some(c) = self.conns.at(slot)
            && !c.sendable
        {
            c.sendable = true;
            self.sendable.push_back(slot);
        }
    }

    /// Puts `d` into `buf` (the buffer `buf` held is kept for later datagrams).
    fn hand_out(&mut self, d: Datagram, now: Instant, buf: &mut Vec<u8>) -> Transmit {
        let mut old = std::mem::replace(buf, d.bytes);
        old.clear();
        if old.capacity() > 0 && self.spare.len() < 64 {
            self.spare.push(old);
        }
        self.stats.transmits += 1;
        Transmit {
            destination: d.destination,
            ecn: d.ecn,
            size: buf.len(),
            segment_size: d.segment_size,
            src_ip: d.src_ip,
            departure: now,
        }
    }
}
