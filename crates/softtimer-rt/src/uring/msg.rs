//! Reading what the kernel wrote before a received datagram in a provided buffer: the
//! sender's address and the control messages (GRO's segment size, ECN, packet info), as
//! plain bytes (no `unsafe`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use super::Received;

/// The sender's address from a `sockaddr` the kernel wrote (`len` bytes of it).
pub(super) fn parse_sockaddr(name: &[u8], len: usize) -> Option<SocketAddr> {
    let name = &name[..len.min(name.len())];
    let family = u16::from_ne_bytes(name.get(0..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(name.get(2..4)?.try_into().ok()?);
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = name.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
        }
        libc::AF_INET6 => {
            let flow = u32::from_ne_bytes(name.get(4..8)?.try_into().ok()?);
            let ip: [u8; 16] = name.get(8..24)?.try_into().ok()?;
            let scope = u32::from_ne_bytes(name.get(24..28)?.try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                flow,
                scope,
            )))
        }
        _ => None,
    }
}

/// Reads GRO's segment size, the TOS or traffic class and the packet info from the control
/// messages the kernel wrote (walked as bytes: length, level, type, data, 8-byte aligned).
pub(super) fn parse_control(mut control: &[u8], m: &mut Received<'_>) {
    const HEADER: usize = 16;
    while control.len() >= HEADER {
        let len = usize::from_ne_bytes(control[0..8].try_into().unwrap_or_default());
        let level = i32::from_ne_bytes(control[8..12].try_into().unwrap_or_default());
        let kind = i32::from_ne_bytes(control[12..16].try_into().unwrap_or_default());
        if len < HEADER || len > control.len() {
            return;
        }
        let data = &control[HEADER..len];
        let int = || {
            data.get(0..4)
                .map(|b| i32::from_ne_bytes(b.try_into().unwrap_or_default()))
        };
        match (level, kind) {
            (libc::SOL_UDP, libc::UDP_GRO) => m.segment_size = int().map(|s| s as usize),
            (libc::IPPROTO_IP, libc::IP_TOS) | (libc::IPPROTO_IP, libc::IP_RECVTOS) => {
                m.ecn = data.first().map(|b| b & 3);
            }
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => m.ecn = int().map(|t| (t & 3) as u8),
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                // struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr; }
                if let Some(b) = data.get(8..12) {
                    let ip: [u8; 4] = b.try_into().unwrap_or_default();
                    m.dst_ip = Some(IpAddr::V4(Ipv4Addr::from(ip)));
                }
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                if let Some(b) = data.get(0..16) {
                    let ip: [u8; 16] = b.try_into().unwrap_or_default();
                    m.dst_ip = Some(IpAddr::V6(Ipv6Addr::from(ip)));
                }
            }
            _ => {}
        }
        control = &control[len.next_multiple_of(8).min(control.len())..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_are_read_as_the_kernel_lays_them_out() {
        let mut buf = Vec::new();
        let mut push = |level: i32, kind: i32, payload: &[u8]| {
            let len = 16 + payload.len();
            buf.extend_from_slice(&len.to_ne_bytes());
            buf.extend_from_slice(&level.to_ne_bytes());
            buf.extend_from_slice(&kind.to_ne_bytes());
            buf.extend_from_slice(payload);
            buf.resize(buf.len().next_multiple_of(8), 0);
        };
        push(libc::SOL_UDP, libc::UDP_GRO, &1200i32.to_ne_bytes());
        push(libc::IPPROTO_IP, libc::IP_TOS, &[0b10]);
        let mut info = [0u8; 12];
        info[8..12].copy_from_slice(&[127, 0, 0, 2]);
        push(libc::IPPROTO_IP, libc::IP_PKTINFO, &info);
        let mut m = Received {
            data: &[],
            from: None,
            segment_size: None,
            ecn: None,
            dst_ip: None,
            truncated: false,
        };
        parse_control(&buf, &mut m);
        assert_eq!(m.segment_size, Some(1200));
        assert_eq!(m.ecn, Some(2));
        assert_eq!(m.dst_ip, Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))));
        // A length past the end stops the walk instead of reading beyond it.
        let mut bad = 64usize.to_ne_bytes().to_vec();
        bad.extend_from_slice(&[0; 8]);
        parse_control(&bad, &mut m);
    }

    #[test]
    fn socket_addresses_parse_from_kernel_bytes() {
        let mut v4 = vec![0u8; 16];
        v4[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&4433u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(
            parse_sockaddr(&v4, 16),
            Some("127.0.0.1:4433".parse().unwrap())
        );
        assert_eq!(parse_sockaddr(&v4, 4), None);
    }
}
