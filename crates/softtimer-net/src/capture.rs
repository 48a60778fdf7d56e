//! Observing a UDP port without owning it: an `AF_PACKET` capture on one interface, with the
//! kernel's receive timestamp of every packet, so that traffic from any sender (`iperf3 -u`,
//! a QUIC stack, `softtimers pace`) is measured by the same code and the same clock.
//!
//! A UDP socket gets each datagram's timestamp from the same place a capture does: the
//! kernel stamps the packet once, when the interface hands it to the stack. So a sink that
//! owns the port and a sink that observes it measure the same arrival times; observing only
//! adds the capture's own copy.
//!
//! The capture is filtered in the kernel (a classic BPF program: IPv4 or IPv6, UDP,
//! destination port, not a later fragment), ignores packets this host sends
//! (`PACKET_IGNORE_OUTGOING`: on loopback every packet would otherwise be seen twice), and
//! keeps the first [`PortObserver::SNAP`] bytes of each packet: enough for the IP and UDP
//! headers and the start of the payload. Opening one needs `CAP_NET_RAW` (root).
//!
//! [`parse_udp`] is the sans-IO part: it reads an IP packet's addresses and UDP header and
//! says why a packet is not one it can read.

use crate::udp::{TimestampedReceiver, set_int_option};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A UDP datagram read out of a captured IP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpPacket<'a> {
    /// The sender.
    pub from: SocketAddr,
    /// The destination.
    pub to: SocketAddr,
    /// The UDP payload's length, from the UDP header (the whole datagram, captured or not).
    pub len: usize,
    /// The part of the payload that was captured (at most `len` bytes).
    pub payload: &'a [u8],
}

/// Why a captured packet is not a UDP datagram [`parse_udp`] can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Shorter than its IP and UDP headers.
    #[error("a packet of {0} bytes is shorter than its IP and UDP headers")]
    Short(usize),
    /// Not IPv4 or IPv6.
    #[error("IP version {0} is neither 4 nor 6")]
    Version(u8),
    /// Not UDP (or UDP behind IPv6 extension headers).
    #[error("protocol {0} is not UDP")]
    NotUdp(u8),
    /// A later fragment of a fragmented datagram: it has no UDP header.
    #[error("a later fragment carries no UDP header")]
    Fragment,
    /// The UDP length field is below the header's 8 bytes.
    #[error("UDP length {0} is below the 8-byte header")]
    BadLength(u16),
}

/// Reads the addresses and UDP header of an IPv4 or IPv6 packet (network header first, as
/// an `AF_PACKET` `SOCK_DGRAM` socket delivers it).
///
/// ```
/// use softtimer_net::capture::parse_udp;
///
/// // IPv4, 20-byte header, UDP 10.0.0.1:1000 -> 10.0.0.2:2000, 3 payload bytes.
/// let mut p = vec![0x45, 0, 0, 31, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
/// p.extend_from_slice(&[0x03, 0xe8, 0x07, 0xd0, 0, 11, 0, 0, b'a', b'b', b'c']);
/// let udp = parse_udp(&p).unwrap();
/// assert_eq!(udp.to, "10.0.0.2:2000".parse().unwrap());
/// assert_eq!((udp.len, udp.payload), (3, &b"abc"[..]));
/// assert!(parse_udp(&p[..10]).is_err());
/// ```
pub fn parse_udp(packet: &[u8]) -> Result<UdpPacket<'_>, PacketError> {
    let short = || PacketError::Short(packet.len());
    let first = *packet.first().ok_or_else(short)?;
    let u16_at = |p: &[u8], i: usize| u16::from_be_bytes([p[i], p[i + 1]]);
    let (src, dst, udp) = match first >> 4 {
        4 => {
            let header = usize::from(first & 0x0f) * 4;
            if header < 20 || packet.len() < header + 8 {
                return Err(short());
            }
            if packet[9] != 17 {
                return Err(PacketError::NotUdp(packet[9]));
            }
            if u16_at(packet, 6) & 0x1fff != 0 {
                return Err(PacketError::Fragment);
            }
            let v4 = |i: usize| {
                IpAddr::V4(Ipv4Addr::new(
                    packet[i],
                    packet[i + 1],
                    packet[i + 2],
                    packet[i + 3],
                ))
            };
            (v4(12), v4(16), &packet[header..])
        }
        6 => {
            if packet.len() < 48 {
                return Err(short());
            }
            if packet[6] != 17 {
                return Err(PacketError::NotUdp(packet[6]));
            }
            let v6 = |i: usize| {
                let octets: [u8; 16] = packet[i..i + 16].try_into().expect("16 bytes");
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            (v6(8), v6(24), &packet[40..])
        }
        version => return Err(PacketError::Version(version)),
    };
    let udp_len = u16_at(udp, 4);
    if udp_len < 8 {
        return Err(PacketError::BadLength(udp_len));
    }
    let len = usize::from(udp_len) - 8;
    Ok(UdpPacket {
        from: SocketAddr::new(src, u16_at(udp, 0)),
        to: SocketAddr::new(dst, u16_at(udp, 2)),
        len,
        payload: &udp[8..udp.len().min(8 + len)],
    })
}

/// One instruction of a classic BPF program (`struct sock_filter`).
const fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The kernel-side filter: accept UDP datagrams (not later fragments) to `port`, over IPv4 or
/// IPv6 without extension headers; the packet starts at its IP header.
fn port_filter(port: u16) -> [libc::sock_filter; 17] {
    const LDB_ABS: u16 = 0x30; // A = byte at k
    const LDH_ABS: u16 = 0x28; // A = u16 at k
    const LDH_IND: u16 = 0x48; // A = u16 at X + k
    const LDXB_MSH: u16 = 0xb1; // X = 4 * (byte at k & 0xf): the IPv4 header length
    const RSH: u16 = 0x74; // A >>= k
    const JEQ: u16 = 0x15; // if A == k
    const JSET: u16 = 0x45; // if A & k
    const RET: u16 = 0x06;
    let port = u32::from(port);
    // Jumps are relative to the next instruction; 15 accepts, 16 rejects.
    [
        op(LDB_ABS, 0, 0, 0),    // 0: version and header length
        op(RSH, 0, 0, 4),        // 1: the version
        op(JEQ, 0, 7, 4),        // 2: IPv4, else to 10
        op(LDB_ABS, 0, 0, 9),    // 3: protocol
        op(JEQ, 0, 11, 17),      // 4: UDP, else reject
        op(LDH_ABS, 0, 0, 6),    // 5: flags and fragment offset
        op(JSET, 9, 0, 0x1fff),  // 6: a later fragment: reject
        op(LDXB_MSH, 0, 0, 0),   // 7: X = header length
        op(LDH_IND, 0, 0, 2),    // 8: UDP destination port
        op(JEQ, 5, 6, port),     // 9: accept or reject
        op(JEQ, 0, 5, 6),        // 10: IPv6, else reject
        op(LDB_ABS, 0, 0, 6),    // 11: next header
        op(JEQ, 0, 3, 17),       // 12: UDP, else reject
        op(LDH_ABS, 0, 0, 42),   // 13: UDP destination port
        op(JEQ, 0, 1, port),     // 14: accept or reject
        op(RET, 0, 0, u32::MAX), // 15: accept (the socket's buffer cuts it)
        op(RET, 0, 0, 0),        // 16: reject
    ]
}

/// A capture of the UDP datagrams arriving at one port of one interface, in batches, with
/// the kernel's receive timestamp of each.
///
/// ```no_run
/// use softtimer_net::capture::PortObserver;
/// use std::time::Duration;
///
/// // Watch iperf3's data arriving on loopback (needs CAP_NET_RAW).
/// let mut observer = PortObserver::open("lo", 5201, 256).unwrap();
/// observer.set_timeout(Duration::from_millis(100)).unwrap();
/// let n = observer.recv_batch().unwrap();
/// for i in 0..n {
///     if let Some((Ok(udp), at)) = observer.get(i) {
///         println!("{} bytes from {} at {:?} ns", udp.len, udp.from, at);
///     }
/// }
/// ```
pub struct PortObserver {
    rx: TimestampedReceiver,
}

impl PortObserver {
    /// How many bytes of each packet are kept: IP and UDP headers and the payload's start.
    pub const SNAP: usize = 256;

    /// Starts capturing datagrams to `port` arriving on `interface` (`lo`, a veth end),
    /// taking up to `batch` (1 ..= 1024) per call.
    ///
    /// Fails with `PermissionDenied` without `CAP_NET_RAW`, and `NotFound` for an unknown
    /// interface, each saying so.
    pub fn open(interface: &str, port: u16, batch: usize) -> io::Result<PortObserver> {
        // SAFETY: plain `socket(2)`; the descriptor is owned at once below.
        #[allow(unsafe_code)]
        let raw = unsafe {
            // Protocol 0 receives nothing until bound, so no packet slips past the filter.
            libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
        };
        if raw < 0 {
            let err = io::Error::last_os_error();
            return Err(if err.kind() == io::ErrorKind::PermissionDenied {
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "observing a port captures packets, which needs CAP_NET_RAW (run as root)",
                )
            } else {
                err
            });
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        #[allow(unsafe_code)]
        let socket = unsafe { OwnedFd::from_raw_fd(raw) };
        let index = rustix::net::netdevice::name_to_index(&socket, interface).map_err(|e| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no network interface named {interface:?} ({e})"),
            )
        })?;
        let filter = port_filter(port);
        let program = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr().cast_mut(),
        };
        // SAFETY: `program` points at `filter`, both live through the call, which copies them.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&program as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        set_int_option(
            socket.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            1,
        )?;
        // SAFETY: an all-zero `sockaddr_ll` is valid; the fields that matter are set below.
        #[allow(unsafe_code)]
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = index as i32;
        // SAFETY: `addr` is a live `sockaddr_ll` and the length passed is its size.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::bind(
                socket.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PortObserver {
            rx: TimestampedReceiver::from_socket(socket, batch, Self::SNAP)?,
        })
    }

    /// How long [`PortObserver::recv_batch`] waits for a first packet.
    pub fn set_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.rx.set_timeout(timeout)
    }

    /// Packets the kernel dropped on the capture because its buffer was full.
    pub fn kernel_drops(&self) -> u64 {
        self.rx.kernel_drops()
    }

    /// Waits (up to the timeout) for at least one packet, then takes every packet waiting,
    /// up to the batch size. `Ok(0)` on timeout or interruption.
    pub fn recv_batch(&mut self) -> io::Result<usize> {
        self.rx.recv_batch()
    }

    /// Packet `i` of the last batch, read as UDP, with its kernel timestamp (ns since the
    /// Unix epoch); `None` past the number received.
    pub fn get(&self, i: usize) -> Option<(Result<UdpPacket<'_>, PacketError>, Option<u64>)> {
        let d = self.rx.get(i)?;
        Some((parse_udp(d.data), d.kernel_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ipv4_udp(src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let total = (20 + 8 + payload.len()) as u16;
        let mut p = vec![0x45, 0];
        p.extend_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]); // don't fragment
        p.extend_from_slice(&[127, 0, 0, 1, 127, 0, 0, 2]);
        p.extend_from_slice(&src_port.to_be_bytes());
        p.extend_from_slice(&dst_port.to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn reads_ipv4_with_options_and_ipv6() {
        let p = ipv4_udp(1000, 2000, b"hello");
        let u = parse_udp(&p).unwrap();
        assert_eq!(u.from, "127.0.0.1:1000".parse().unwrap());
        assert_eq!(u.to, "127.0.0.2:2000".parse().unwrap());
        assert_eq!((u.len, u.payload), (5, &b"hello"[..]));

        // A 24-byte IPv4 header (one option word).
        let mut opt = p[..20].to_vec();
        opt[0] = 0x46;
        opt.extend_from_slice(&[1, 1, 1, 1]);
        opt.extend_from_slice(&p[20..]);
        assert_eq!(parse_udp(&opt).unwrap().to.port(), 2000);

        // A capture cut inside the payload still reports the datagram's whole length.
        assert_eq!(parse_udp(&p[..30]).unwrap().len, 5);
        assert_eq!(parse_udp(&p[..30]).unwrap().payload, b"he");

        let mut v6 = vec![0x60, 0, 0, 0, 0, 12, 17, 64];
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&[0x1f, 0x90, 0x23, 0x28, 0, 12, 0, 0, 1, 2, 3, 4]);
        let u = parse_udp(&v6).unwrap();
        assert_eq!(u.from, "[::1]:8080".parse().unwrap());
        assert_eq!(u.to, "[::1]:9000".parse().unwrap());
        assert_eq!(u.payload, &[1, 2, 3, 4]);
    }

    #[test]
    fn says_why_a_packet_is_not_readable() {
        let p = ipv4_udp(1, 2, b"x");
        assert_eq!(parse_udp(&[]), Err(PacketError::Short(0)));
        assert_eq!(parse_udp(&p[..27]), Err(PacketError::Short(27)));
        let mut tcp = p.clone();
        tcp[9] = 6;
        assert_eq!(parse_udp(&tcp), Err(PacketError::NotUdp(6)));
        let mut fragment = p.clone();
        fragment[7] = 0x10;
        assert_eq!(parse_udp(&fragment), Err(PacketError::Fragment));
        let mut bad = p.clone();
        bad[24..26].copy_from_slice(&[0, 3]);
        assert_eq!(parse_udp(&bad), Err(PacketError::BadLength(3)));
        assert_eq!(parse_udp(&[0x20; 60]), Err(PacketError::Version(2)));
        let mut short_header = p;
        short_header[0] = 0x44; // IHL 16 bytes
        assert_eq!(parse_udp(&short_header), Err(PacketError::Short(29)));
    }

    proptest! {
        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(u) = parse_udp(&bytes) {
                prop_assert!(u.payload.len() <= u.len);
            }
        }
    }

    /// Root only (CAP_NET_RAW); elsewhere it says why it did not run.
    #[test]
    fn observes_only_its_port_once_per_datagram_with_kernel_timestamps() {
        let target = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = target.local_addr().unwrap().port();
        let mut observer = match PortObserver::open("lo", port, 64) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                eprintln!("skipped: {e}");
                return;
            }
            other => other.unwrap(),
        };
        observer.set_timeout(Duration::from_millis(300)).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = crate::udp::realtime_ns();
        for len in [10usize, 1000, 1472] {
            tx.send_to(&vec![7u8; len], other.local_addr().unwrap())
                .unwrap();
            tx.send_to(&vec![9u8; len], target.local_addr().unwrap())
                .unwrap();
        }
        let mut seen = Vec::new();
        loop {
            let n = observer.recv_batch().unwrap();
            if n == 0 {
                break;
            }
            for i in 0..n {
                let (udp, at) = observer.get(i).unwrap();
                let udp = udp.unwrap();
                assert_eq!(udp.to.port(), port);
                assert_eq!(udp.from, tx.local_addr().unwrap());
                assert!(udp.payload.iter().all(|&b| b == 9));
                seen.push((udp.len, at.expect("a kernel timestamp")));
            }
        }
        let lens: Vec<usize> = seen.iter().map(|s| s.0).collect();
        assert_eq!(lens, [10, 1000, 1472], "each datagram once, in order");
        assert!(seen.iter().all(|&(_, at)| at >= before));

        // IPv6: the filter's second branch.
        let target6 = std::net::UdpSocket::bind("[::1]:0").unwrap();
        let port6 = target6.local_addr().unwrap().port();
        let mut observer6 = PortObserver::open("lo", port6, 8).unwrap();
        observer6.set_timeout(Duration::from_millis(300)).unwrap();
        let tx6 = std::net::UdpSocket::bind("[::1]:0").unwrap();
        tx6.send_to(&[1u8; 33], target6.local_addr().unwrap())
            .unwrap();
        assert_eq!(observer6.recv_batch().unwrap(), 1);
        let (udp, _) = observer6.get(0).unwrap();
        assert_eq!(udp.unwrap().to, target6.local_addr().unwrap());
        assert_eq!(udp.unwrap().len, 33);

        assert!(matches!(
            PortObserver::open("no-such-if0", 1, 8).map_err(|e| e.kind()),
            Err(io::ErrorKind::NotFound)
        ));
    }
}
