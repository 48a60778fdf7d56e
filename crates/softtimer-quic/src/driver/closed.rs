//! Closed connections in compact form: what a closing or draining connection needs, as the
//! TCP paper keeps TIME_WAIT outside the socket.
//!
//! RFC 9000 §10.2 asks little of a closed connection for the three PTOs it lingers: in the
//! *closing* state (we sent CONNECTION_CLOSE) it answers a packet of the connection with the
//! close again, at a limited rate, and in the *draining* state (the peer closed) it sends
//! nothing. Neither needs the connection's streams, keys, congestion state or sent-packet
//! record, which quinn-proto's `Connection` keeps until its drain ends. A [`Record`] keeps only
//! the destination connection ID the peer used, the peer's address, the datagram that carried
//! our CONNECTION_CLOSE (sent again byte for byte: RFC 9000 §10.2.1 allows repeating the
//! packet), a late-packet count for the rate limit, and the soft event that ends it. Records
//! sit in one chunked slab and one hash index from the connection ID to the slab entry.
//!
//! The rate limit answers the 1st, 2nd, 4th, 8th, … late packet of a record (a doubling
//! backoff by count: no clock needed, and a peer that keeps sending gets ever fewer answers).
//!
//! What a record does not keep, and why: the stateless-reset token, because quinn-proto's
//! endpoint derives it from its reset key and the connection ID (an HMAC) whenever it needs
//! one, so storing it would add 16 bytes for nothing; and our other connection IDs, because
//! a late packet carries the one the peer was using when the connection closed. A packet on
//! another of them finds no record and gets quinn-proto's stateless reset, which RFC 9000
//! §10.3 allows for any packet an endpoint cannot place: the peer learns the connection is
//! gone either way.

use std::collections::HashMap;
use std::net::SocketAddr;

/// The longest connection ID (RFC 9000).
pub(crate) const MAX_CID: usize = 20;

/// A connection ID, inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Cid {
    len: u8,
    bytes: [u8; MAX_CID],
}

impl std::fmt::Debug for Cid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.as_slice() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl Cid {
    pub fn new(bytes: &[u8]) -> Option<Cid> {
        if bytes.len() > MAX_CID {
            return None;
        }
        let mut cid = Cid {
            len: bytes.len() as u8,
            bytes: [0; MAX_CID],
        };
        cid.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(cid)
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The index key: the ID's bytes folded into 64 bits (our IDs are random, so their first
    /// eight bytes already spread well; the map's own hasher mixes again).
    fn key(&self) -> u64 {
        let mut key = [0u8; 8];
        for (i, b) in self.as_slice().iter().enumerate() {
            key[i % 8] ^= b.rotate_left((i / 8) as u32);
        }
        u64::from_le_bytes(key) ^ u64::from(self.len)
    }

    /// The destination connection ID of a datagram, from the version-independent header
    /// invariants (RFC 8999): a long header says its length, a short header's is our own
    /// (`short_len`). `None` for a datagram too short to hold one, and for an empty one: a
    /// zero-length ID (a client's usual choice) names no connection, since every datagram of
    /// every connection carries it, so nothing is kept or looked up under it.
    pub fn destination(datagram: &[u8], short_len: usize) -> Option<Cid> {
        let first = *datagram.first()?;
        let bytes = if first & 0x80 != 0 {
            let len = *datagram.get(5)? as usize;
            datagram.get(6..6 + len)?
        } else {
            datagram.get(1..1 + short_len)?
        };
        if bytes.is_empty() {
            return None;
        }
        Cid::new(bytes)
    }
}

/// The CONNECTION_CLOSE datagram, inline when it is short (a close with a short reason is
/// about 40 bytes), on the heap otherwise.
enum CloseBytes {
    Inline { len: u8, bytes: [u8; INLINE_CLOSE] },
    Heap(Box<[u8]>),
}

/// Bytes of a close datagram kept inline.
const INLINE_CLOSE: usize = 46;

impl CloseBytes {
    fn new(datagram: &[u8]) -> CloseBytes {
        if datagram.len() <= INLINE_CLOSE {
            let mut bytes = [0; INLINE_CLOSE];
            bytes[..datagram.len()].copy_from_slice(datagram);
            CloseBytes::Inline {
                len: datagram.len() as u8,
                bytes,
            }
        } else {
            CloseBytes::Heap(datagram.into())
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            CloseBytes::Inline { len, bytes } => &bytes[..*len as usize],
            CloseBytes::Heap(b) => b,
        }
    }
}

/// A socket address in 23 bytes (std's `SocketAddr` takes 32): a v6 address keeps its scope
/// (a link-local peer's interface, without which it cannot be answered), not its flow label,
/// which says nothing about who the peer is.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Addr {
    ip: [u8; 16],
    port: [u8; 2],
    scope: [u8; 4],
    v6: bool,
}

impl Addr {
    fn new(addr: SocketAddr) -> Addr {
        let (ip, scope, v6) = match addr {
            SocketAddr::V4(a) => (a.ip().to_ipv6_mapped().octets(), 0, false),
            SocketAddr::V6(a) => (a.ip().octets(), a.scope_id(), true),
        };
        Addr {
            ip,
            port: addr.port().to_le_bytes(),
            scope: scope.to_le_bytes(),
            v6,
        }
    }

    fn get(self) -> SocketAddr {
        let v6 = std::net::Ipv6Addr::from(self.ip);
        let port = u16::from_le_bytes(self.port);
        match (self.v6, v6.to_ipv4_mapped()) {
            (false, Some(v4)) => SocketAddr::new(std::net::IpAddr::V4(v4), port),
            _ => SocketAddr::V6(std::net::SocketAddrV6::new(
                v6,
                port,
                0,
                u32::from_le_bytes(self.scope),
            )),
        }
    }
}

/// A closed connection, compact.
pub(crate) struct Record {
    cid: Cid,
    peer: Addr,
    /// The close to repeat (closing); `None` while draining (the peer closed: send nothing).
    close: Option<CloseBytes>,
    /// Late packets seen.
    late: u32,
}

/// What a late packet for a closed connection gets.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Late<'a> {
    /// The close again, to this address.
    Answer(&'a [u8], SocketAddr),
    /// Nothing (draining, rate-limited, or from another address).
    Drop,
    /// No record: the endpoint's business.
    Unknown,
}

/// Counters of the closed-connection records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClosedStats {
    /// Connections replaced by a compact record.
    pub compacted: u64,
    /// Records expired at the end of their drain period.
    pub expired: u64,
    /// Late packets answered with the close again.
    pub late_answered: u64,
    /// Late packets dropped: draining, rate-limited, or from an address that is not the peer's.
    pub late_dropped: u64,
}

/// Entries per chunk of the record slab: it grows by a chunk, never by doubling, so the
/// memory held follows the records held.
const CHUNK: usize = 1024;

enum Entry {
    Used(Record),
    Free(u32),
}

const NIL: u32 = u32::MAX;

/// The closed-connection records, their index by connection ID, and their counters.
pub(crate) struct ClosedTable {
    chunks: Vec<Vec<Entry>>,
    free: u32,
    held: usize,
    index: HashMap<u64, u32>,
    pub stats: ClosedStats,
}

impl Default for ClosedTable {
    fn default() -> Self {
        ClosedTable {
            chunks: Vec::new(),
            free: NIL,
            held: 0,
            index: HashMap::new(),
            stats: ClosedStats::default(),
        }
    }
}

impl ClosedTable {
    /// Records held.
    pub fn len(&self) -> usize {
        self.held
    }

    fn entry(&mut self, i: u32) -> &mut Entry {
        let i = i as usize;
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }

    /// Where the next record will go: the caller schedules the soft event that ends it with
    /// this index before it [`insert`](Self::insert)s it.
    pub fn next_index(&self) -> u32 {
        if self.free != NIL {
            return self.free;
        }
        match self.chunks.last() {
            None => 0,
            Some(last) => ((self.chunks.len() - 1) * CHUNK + last.len()) as u32,
        }
    }

    /// Keeps a record, at [`next_index`](Self::next_index), for a closed connection whose
    /// peer used `cid` and whose close, if we sent one, is `close`.
    pub fn insert(&mut self, cid: Cid, peer: SocketAddr, close: Option<&[u8]>) {
        let record = Record {
            cid,
            peer: Addr::new(peer),
            close: close.map(CloseBytes::new),
            late: 0,
        };
        let index = if self.free != NIL {
            let i = self.free;
            let Entry::Free(next) = *self.entry(i) else {
                unreachable!("the free list holds free entries")
            };
            self.free = next;
            *self.entry(i) = Entry::Used(record);
            i
        } else {
            if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
                self.chunks.push(Vec::with_capacity(CHUNK));
            }
            let chunk = self.chunks.len() - 1;
            self.chunks[chunk].push(Entry::Used(record));
            (chunk * CHUNK + self.chunks[chunk].len() - 1) as u32
        };
        // A later record with the same key takes the index over; the earlier one still
        // expires on time.
        self.index.insert(cid.key(), index);
        self.held += 1;
        self.stats.compacted += 1;
    }

    /// Ends record `index` (its drain period is over).
    pub fn expire(&mut self, index: u32) {
        let next = self.free;
        let Entry::Used(record) = std::mem::replace(self.entry(index), Entry::Free(next)) else {
            debug_assert!(false, "expired a free record");
            return;
        };
        self.free = index;
        let key = record.cid.key();
        if self.index.get(&key) == Some(&index) {
            self.index.remove(&key);
        }
        self.held -= 1;
        self.stats.expired += 1;
    }

    /// A datagram to `cid` from `from` arrived: what it gets.
    pub fn on_packet(&mut self, cid: &Cid, from: SocketAddr) -> Late<'_> {
        let Some(&index) = self.index.get(&cid.key()) else {
            return Late::Unknown;
        };
        let i = index as usize;
        let Entry::Used(record) = &mut self.chunks[i / CHUNK][i % CHUNK] else {
            return Late::Unknown;
        };
        if record.cid != *cid {
            return Late::Unknown;
        }
        record.late = record.late.saturating_add(1);
        match &record.close {
            Some(close) if Addr::new(from) == record.peer && record.late.is_power_of_two() => {
                self.stats.late_answered += 1;
                Late::Answer(close.as_slice(), record.peer.get())
            }
            _ => {
                self.stats.late_dropped += 1;
                Late::Drop
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cid(b: u8) -> Cid {
        Cid::new(&[b; 8]).unwrap()
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:4433".parse().unwrap()
    }

    #[test]
    fn addresses_survive_their_compact_form() {
        for a in [
            "127.0.0.1:4433",
            "[::1]:1",
            "[::ffff:10.0.0.1]:80",
            "0.0.0.0:0",
        ] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(Addr::new(a).get(), a);
        }
        // A link-local peer keeps its interface; a flow label is not part of who it is.
        let scoped = SocketAddr::V6(std::net::SocketAddrV6::new(
            "fe80::1".parse().unwrap(),
            4433,
            0,
            3,
        ));
        assert_eq!(Addr::new(scoped).get(), scoped);
        let labelled = SocketAddr::V6(std::net::SocketAddrV6::new(
            "fe80::1".parse().unwrap(),
            4433,
            0x1234,
            3,
        ));
        assert!(Addr::new(labelled) == Addr::new(scoped));
    }

    #[test]
    fn a_link_local_peer_is_answered_at_its_interface() {
        let scoped = |scope| {
            SocketAddr::V6(std::net::SocketAddrV6::new(
                "fe80::1".parse().unwrap(),
                4433,
                0,
                scope,
            ))
        };
        let close = [0x40u8; 30];
        let mut t = ClosedTable::default();
        t.insert(cid(1), scoped(3), Some(&close));
        assert_eq!(
            t.on_packet(&cid(1), scoped(3)),
            Late::Answer(&close, scoped(3))
        );
        // The same address on another interface is another host.
        assert_eq!(t.on_packet(&cid(1), scoped(4)), Late::Drop);
    }

    #[test]
    fn a_record_is_small() {
        assert!(
            std::mem::size_of::<Entry>() <= 96,
            "{} bytes",
            std::mem::size_of::<Entry>()
        );
    }

    #[test]
    fn late_packets_get_the_close_at_a_doubling_interval_and_only_from_the_peer() {
        let mut t = ClosedTable::default();
        let close = [0x40u8; 30];
        t.insert(cid(1), peer(), Some(&close));
        let answered: Vec<bool> = (0..9)
            .map(|_| matches!(t.on_packet(&cid(1), peer()), Late::Answer(b, to) if b == close && to == peer()))
            .collect();
        assert_eq!(
            answered,
            [true, true, false, true, false, false, false, true, false]
        );
        let stranger: SocketAddr = "127.0.0.2:1".parse().unwrap();
        let mut t2 = ClosedTable::default();
        t2.insert(cid(2), peer(), Some(&close));
        assert_eq!(t2.on_packet(&cid(2), stranger), Late::Drop);
        assert_eq!(t.on_packet(&cid(3), peer()), Late::Unknown);
        assert_eq!((t.stats.late_answered, t.stats.late_dropped), (4, 5));
    }

    #[test]
    fn a_draining_record_drops_and_an_expired_one_is_unknown() {
        let mut t = ClosedTable::default();
        let long = [9u8; 200];
        t.insert(cid(1), peer(), None);
        t.insert(cid(2), peer(), Some(&long));
        assert_eq!(t.on_packet(&cid(1), peer()), Late::Drop);
        assert_eq!(t.on_packet(&cid(2), peer()), Late::Answer(&long, peer()));
        assert_eq!(t.len(), 2);
        t.expire(0);
        assert_eq!(t.on_packet(&cid(1), peer()), Late::Unknown);
        // The freed entry is taken again.
        assert_eq!(t.next_index(), 0);
        t.insert(cid(3), peer(), None);
        assert_eq!(t.len(), 2);
        assert_eq!(t.stats.expired, 1);
    }

    #[test]
    fn destination_ids_follow_the_header_invariants() {
        let mut short = vec![0x41];
        short.extend_from_slice(&[7; 8]);
        short.extend_from_slice(&[0; 20]);
        assert_eq!(Cid::destination(&short, 8), Some(cid(7)));
        let mut long = vec![0xc0, 0, 0, 0, 1, 8];
        long.extend_from_slice(&[5; 8]);
        long.push(0);
        assert_eq!(Cid::destination(&long, 8), Some(cid(5)));
        assert_eq!(Cid::destination(&[], 8), None);
        assert_eq!(Cid::destination(&[0x40, 1, 2], 8), None);
        assert_eq!(Cid::destination(&[0xc0, 0, 0, 0, 1, 30, 1], 8), None);
        // Zero-length IDs (every datagram of a client that chose them): no key, so that
        // one closed connection's record does not take every other connection's datagrams.
        assert_eq!(Cid::destination(&short, 0), None);
        assert_eq!(Cid::destination(&[0xc0, 0, 0, 0, 1, 0, 8, 1], 8), None);
    }
}
