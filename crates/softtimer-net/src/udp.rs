//! UDP I/O for paced senders and measuring receivers: the header a paced datagram carries,
//! and a receiver that takes datagrams in batches (`recvmmsg`) with the kernel's receive
//! timestamp of each (`SO_TIMESTAMPNS`) and the kernel's drop counter (`SO_RXQ_OVFL`).
//!
//! The batched I/O itself is `softtimer-rt`'s, the workspace's one copy: [`RecvBatch`]
//! (`recvmmsg` with the control messages) under this receiver, and
//! [`softtimer_rt::send_all`] (`sendmmsg` of datagrams made of parts) for senders. UDP GSO
//! ([`set_udp_segment`]) is for datagrams meant to leave together: a GSO super-packet leaves
//! the host as one back-to-back burst, which is what pacing exists to avoid, so a paced
//! sender uses it only for a batch it chose to send at once (`pace --per-wakeup`; the QUIC
//! layer sends through quinn-udp, stock quinn's own I/O, which uses it for a departure's
//! datagrams).
//!
//! What stays here is socket options `rustix` does not name (`SO_TIMESTAMPNS`,
//! `SO_RXQ_OVFL`, `SO_RCVBUFFORCE`), set with `libc`; the `unsafe` block says why it is
//! sound.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use softtimer_rt::RecvBatch;
use std::time::Duration;

/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;

/// The header every datagram of `softtimers pace` starts with, in network byte order:
/// magic, flow, sequence number, send time (ns of `CLOCK_REALTIME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketHeader {
    /// The sender's flow number.
    pub flow: u32,
    /// The datagram's number within its flow, from 0.
    pub seq: u64,
    /// When it was sent, ns since the Unix epoch (`CLOCK_REALTIME`, comparable with the
    /// receiver's kernel timestamps on the same host).
    pub sent_ns: u64,
}

/// Why a datagram is not one of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Shorter than the header.
    #[error("a datagram of {0} bytes is shorter than the {len}-byte header", len = PacketHeader::LEN)]
    Short(usize),
    /// The magic number is wrong: another sender's traffic.
    #[error("not a softtimers datagram (wrong magic number)")]
    Foreign,
}

impl PacketHeader {
    /// The header's length in bytes; the smallest datagram `pace` sends.
    pub const LEN: usize = 24;
    const MAGIC: u32 = 0x5354_504b; // "STPK"

    /// Writes the header into the first [`PacketHeader::LEN`] bytes of `out`.
    ///
    /// ```
    /// use softtimer_net::udp::PacketHeader;
    /// let h = PacketHeader { flow: 3, seq: 42, sent_ns: 7 };
    /// let mut buf = [0u8; 64];
    /// h.write(&mut buf);
    /// assert_eq!(PacketHeader::read(&buf), Ok(h));
    /// assert!(PacketHeader::read(&buf[..10]).is_err());
    /// ```
    pub fn write(&self, out: &mut [u8]) {
        let out = &mut out[..Self::LEN];
        out[0..4].copy_from_slice(&Self::MAGIC.to_be_bytes());
        out[4..8].copy_from_slice(&self.flow.to_be_bytes());
        out[8..16].copy_from_slice(&self.seq.to_be_bytes());
        out[16..24].copy_from_slice(&self.sent_ns.to_be_bytes());
    }

    /// Reads a header, or says why `data` does not start with one.
    pub fn read(data: &[u8]) -> Result<PacketHeader, HeaderError> {
        if data.len() < Self::LEN {
            return Err(HeaderError::Short(data.len()));
        }
        let u32_at = |i: usize| u32::from_be_bytes(data[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_be_bytes(data[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(0) != Self::MAGIC {
            return Err(HeaderError::Foreign);
        }
        Ok(PacketHeader {
            flow: u32_at(4),
            seq: u64_at(8),
            sent_ns: u64_at(16),
        })
    }
}

pub use softtimer_rt::Datagram;

/// A UDP socket that receives in batches, with a kernel timestamp on every datagram.
///
/// ```no_run
/// use softtimer_net::udp::TimestampedReceiver;
/// use std::time::Duration;
///
/// let mut rx = TimestampedReceiver::bind("127.0.0.1:9000".parse().unwrap(), 64, 2048).unwrap();
/// rx.set_timeout(Duration::from_millis(100)).unwrap();
/// let n = rx.recv_batch().unwrap();
/// for i in 0..n {
///     let d = rx.get(i).unwrap();
///     println!("{} bytes at {:?} ns", d.data.len(), d.kernel_ns);
/// }
/// ```
pub struct TimestampedReceiver {
    socket: OwnedFd,
    batch: RecvBatch,
    /// Whether [`TimestampedReceiver::recv_up_to`] waits for a first datagram.
    wait: bool,
}

impl TimestampedReceiver {
    /// Binds `addr` and readies room for `batch` datagrams (1 ..= 1024) of up to `size`
    /// bytes (1 ..= [`MAX_DATAGRAM`]). Asks for an 8 MB receive buffer (the kernel caps it
    /// at `net.core.rmem_max`).
    pub fn bind(addr: SocketAddr, batch: usize, size: usize) -> io::Result<TimestampedReceiver> {
        check_batch(batch, size)?;
        let socket = OwnedFd::from(UdpSocket::bind(addr)?);
        Self::from_socket(socket, batch, size)
    }

    /// Like [`TimestampedReceiver::bind`], but without kernel timestamps (a router or a
    /// drain that does not time packets saves their cost) and non-blocking:
    /// [`TimestampedReceiver::recv_up_to`] returns `Ok(0)` at once when nothing waits.
    pub fn bind_untimed(
        addr: SocketAddr,
        batch: usize,
        size: usize,
    ) -> io::Result<TimestampedReceiver> {
        check_batch(batch, size)?;
        let socket = OwnedFd::from(UdpSocket::bind(addr)?);
        let mut rx = Self::from_socket(socket, batch, size)?;
        set_int_option(
            rx.socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            0,
        )?;
        rustix::io::ioctl_fionbio(&rx.socket, true)?;
        rx.wait = false;
        Ok(rx)
    }

    /// The socket, to register with epoll.
    pub fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Wraps a bound datagram socket of any family (UDP, or an `AF_PACKET` socket for
    /// [`crate::capture`]): turns on kernel timestamps and the drop counter, asks for an 8 MB
    /// receive buffer, and readies room for `batch` datagrams of up to `size` bytes.
    pub(crate) fn from_socket(
        socket: OwnedFd,
        batch: usize,
        size: usize,
    ) -> io::Result<TimestampedReceiver> {
        check_batch(batch, size)?;
        let fd = socket.as_raw_fd();
        set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        set_int_option(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)?;
        // Root may exceed rmem_max; others get what the limit allows.
        if set_int_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20).is_err() {
            set_int_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20)?;
        }
        Ok(TimestampedReceiver {
            socket,
            batch: RecvBatch::with_kernel_stamps(batch, size),
            wait: true,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        SocketAddr::try_from(rustix::net::getsockname(&self.socket)?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not an IP socket"))
    }

    /// How long [`TimestampedReceiver::recv_batch`] waits for a first datagram.
    pub fn set_timeout(&self, timeout: Duration) -> io::Result<()> {
        rustix::net::sockopt::set_socket_timeout(
            &self.socket,
            rustix::net::sockopt::Timeout::Recv,
            Some(timeout.max(Duration::from_micros(1))),
        )?;
        Ok(())
    }

    /// Datagrams the kernel dropped on this socket because its buffer was full, as of the
    /// last datagram received.
    pub fn kernel_drops(&self) -> u64 {
        self.batch.kernel_drops().unwrap_or(0)
    }

    /// Waits (up to the timeout) for at least one datagram, then takes every datagram
    /// waiting, up to the batch size. `Ok(0)` on timeout or interruption.
    pub fn recv_batch(&mut self) -> io::Result<usize> {
        self.recv_up_to(usize::MAX)
    }

    /// [`TimestampedReceiver::recv_batch`], taking at most `max` datagrams (a quota).
    pub fn recv_up_to(&mut self, max: usize) -> io::Result<usize> {
        match self.batch.recv(self.socket.as_fd(), max, self.wait) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            other => other,
        }
    }

    /// Datagram `i` of the last batch; `None` past the number received.
    pub fn get(&self, i: usize) -> Option<Datagram<'_>> {
        self.batch.datagram(i)
    }
}

fn check_batch(batch: usize, size: usize) -> io::Result<()> {
    if (1..=1024).contains(&batch) && (1..=MAX_DATAGRAM).contains(&size) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "a batch of {batch} datagrams of {size} bytes: want 1..=1024 of 1..={MAX_DATAGRAM}"
        ),
    ))
}

/// The most datagrams one send may carry with UDP segmentation on ([`set_udp_segment`]).
pub const MAX_SEGMENTS: usize = 64;

/// Turns on UDP generic segmentation offload (`UDP_SEGMENT`, Linux 4.18 and later) for
/// `socket`: a send longer than `segment` bytes leaves as datagrams of `segment` bytes (the
/// last may be shorter), cut by the kernel from one buffer after one pass through the stack,
/// so that `n` datagrams cost one `sendmsg`. A send of at most `segment` bytes is one
/// datagram, as before, as long as `segment` fits the path's MTU: the kernel refuses every
/// send of a socket whose segment does not (`EMSGSIZE` or `EINVAL`), where without the
/// option a datagram that large would leave in IP fragments. One send carries at most
/// [`MAX_SEGMENTS`] and 64 KB. `segment` 0 turns it off.
///
/// ```
/// use std::net::UdpSocket;
/// let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
/// let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
/// tx.connect(rx.local_addr().unwrap()).unwrap();
/// softtimer_net::udp::set_udp_segment(&tx, 100).unwrap();
/// tx.send(&[7u8; 300]).unwrap();
/// let mut buf = [0u8; 1000];
/// for _ in 0..3 {
///     assert_eq!(rx.recv(&mut buf).unwrap(), 100);
/// }
/// ```
pub fn set_udp_segment(socket: impl AsFd, segment: u16) -> io::Result<()> {
    set_int_option(
        socket.as_fd().as_raw_fd(),
        libc::SOL_UDP,
        libc::UDP_SEGMENT,
        i32::from(segment),
    )
}

pub(crate) fn set_int_option(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live `c_int` and the length passed is its size.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `CLOCK_REALTIME` now, ns since the Unix epoch: the clock the kernel's receive timestamps
/// use, so that a sender and a receiver on one host compare.
pub fn realtime_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receives_with_kernel_timestamps_and_flags_truncation() {
        let mut rx = TimestampedReceiver::bind("127.0.0.1:0".parse().unwrap(), 8, 64).unwrap();
        rx.set_timeout(Duration::from_millis(500)).unwrap();
        let to = rx.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = realtime_ns();
        let mut buf = [0u8; 100];
        PacketHeader {
            flow: 1,
            seq: 9,
            sent_ns: before,
        }
        .write(&mut buf);
        tx.send_to(&buf[..40], to).unwrap();
        tx.send_to(&buf, to).unwrap(); // 100 bytes into a 64-byte buffer: truncated
        tx.send_to(&[0xAB; 30], to).unwrap(); // another sender's traffic
        let mut got = Vec::new();
        while got.len() < 3 {
            let n = rx.recv_batch().unwrap();
            assert!(n > 0, "timed out with {} of 3", got.len());
            for i in 0..n {
                let d = rx.get(i).unwrap();
                got.push((
                    d.data.len(),
                    d.truncated,
                    d.kernel_ns,
                    PacketHeader::read(d.data),
                    d.from,
                ));
            }
        }
        let after = realtime_ns();
        assert_eq!(got[0].0, 40);
        assert!(!got[0].1);
        assert_eq!(got[0].3.unwrap().seq, 9);
        assert_eq!(got[0].4, Some(tx.local_addr().unwrap()));
        assert_eq!((got[1].0, got[1].1), (64, true));
        assert_eq!(got[2].3, Err(HeaderError::Foreign));
        for (_, _, ts, _, _) in &got {
            let ts = ts.expect("a kernel timestamp");
            assert!(before <= ts && ts <= after, "{before} <= {ts} <= {after}");
        }
        assert!(rx.get(3).is_none());
        assert_eq!(rx.kernel_drops(), 0);
    }

    #[test]
    fn refuses_bad_sizes_and_times_out_cleanly() {
        let any = "127.0.0.1:0".parse().unwrap();
        assert!(TimestampedReceiver::bind(any, 0, 100).is_err());
        assert!(TimestampedReceiver::bind(any, 8, MAX_DATAGRAM + 1).is_err());
        let mut rx = TimestampedReceiver::bind(any, 8, 100).unwrap();
        rx.set_timeout(Duration::from_millis(20)).unwrap();
        assert_eq!(rx.recv_batch().unwrap(), 0);
        assert_eq!(PacketHeader::read(&[0u8; 5]), Err(HeaderError::Short(5)));
    }
}
