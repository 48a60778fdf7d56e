//! UDP I/O for paced senders and measuring receivers: the header a paced datagram carries,
//! and a receiver that takes datagrams in batches (`recvmmsg`) with the kernel's receive
//! timestamp of each (`SO_TIMESTAMPNS`) and the kernel's drop counter (`SO_RXQ_OVFL`).
//!
//! Batched sending is [`softtimer_rt::LoopCx::sendmmsg`]; a paced sender sends one datagram
//! per event with `send` on a connected socket, since pacing means the datagrams are *not*
//! due together. UDP GSO is not used: a GSO super-packet leaves the host as one back-to-back
//! burst, which is what pacing exists to avoid.
//!
//! The system-call layer here is `libc` (rustix has no `recvmmsg` nor the timestamp control
//! messages); every `unsafe` block says why it is sound.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
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

/// One received datagram.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// What was received (at most the receiver's buffer size).
    pub data: &'a [u8],
    /// Whether the datagram was longer than the buffer and cut.
    pub truncated: bool,
    /// The kernel's receive time, ns since the Unix epoch, when the kernel gave one.
    pub kernel_ns: Option<u64>,
    /// The sender.
    pub from: Option<SocketAddr>,
}

/// Control-message room per datagram: a `timespec` and a `u32` drop counter, with headers.
const CONTROL_LEN: usize = 128;

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
    size: usize,
    data: Vec<u8>,
    control: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    received: usize,
    timestamps: Vec<Option<u64>>,
    drops: u64,
}

// SAFETY: the raw pointers inside `iov` and `hdrs` point into the receiver's own vectors and
// are rebuilt before every call; nothing else refers to them.
#[allow(unsafe_code)]
unsafe impl Send for TimestampedReceiver {}

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
        let rx = Self::from_socket(socket, batch, size)?;
        set_int_option(
            rx.socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            0,
        )?;
        rustix::io::ioctl_fionbio(&rx.socket, true)?;
        Ok(rx)
    }

    /// The socket, to register with epoll.
    pub fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
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
        // SAFETY: all-zero `sockaddr_storage`, `iovec` and `mmsghdr` are valid values (null
        // pointers, zero lengths); they are filled in before every call.
        #[allow(unsafe_code)]
        let (zero_addr, zero_iov, zero_hdr) = unsafe {
            (
                std::mem::zeroed::<libc::sockaddr_storage>(),
                std::mem::zeroed::<libc::iovec>(),
                std::mem::zeroed::<libc::mmsghdr>(),
            )
        };
        Ok(TimestampedReceiver {
            socket,
            size,
            data: vec![0; batch * size],
            control: vec![0; batch * CONTROL_LEN],
            addrs: vec![zero_addr; batch],
            iov: vec![zero_iov; batch],
            hdrs: vec![zero_hdr; batch],
            received: 0,
            timestamps: vec![None; batch],
            drops: 0,
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
        self.drops
    }

    /// Waits (up to the timeout) for at least one datagram, then takes every datagram
    /// waiting, up to the batch size. `Ok(0)` on timeout or interruption.
    pub fn recv_batch(&mut self) -> io::Result<usize> {
        self.recv_up_to(self.hdrs.len())
    }

    /// [`TimestampedReceiver::recv_batch`], taking at most `max` datagrams (a quota).
    pub fn recv_up_to(&mut self, max: usize) -> io::Result<usize> {
        self.received = 0;
        let batch = self.hdrs.len().min(max);
        if batch == 0 {
            return Ok(0);
        }
        let data = self.data.as_mut_ptr();
        let control = self.control.as_mut_ptr();
        for i in 0..batch {
            self.iov[i] = libc::iovec {
                // SAFETY: `i * size` is inside `data`, which is `batch * size` long.
                iov_base: {
                    #[allow(unsafe_code)]
                    unsafe {
                        data.add(i * self.size)
                    }
                }
                .cast(),
                iov_len: self.size,
            };
            let hdr = &mut self.hdrs[i].msg_hdr;
            hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_iov = &mut self.iov[i];
            hdr.msg_iovlen = 1;
            // SAFETY: `i * CONTROL_LEN` is inside `control`, which is `batch * CONTROL_LEN`
            // long.
            hdr.msg_control = {
                #[allow(unsafe_code)]
                unsafe {
                    control.add(i * CONTROL_LEN)
                }
            }
            .cast();
            hdr.msg_controllen = CONTROL_LEN as _;
            hdr.msg_flags = 0;
        }
        // SAFETY: every header points into this receiver's own buffers, which outlive the
        // call and are not otherwise borrowed; `vlen` is the number of headers.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                batch as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(err),
            };
        }
        let n = n as usize;
        for i in 0..n {
            let (ts, drops) = self.parse_control(i);
            self.timestamps[i] = ts;
            if let Some(d) = drops {
                self.drops = d;
            }
        }
        self.received = n;
        Ok(n)
    }

    /// The timestamp and drop counter in datagram `i`'s control messages.
    fn parse_control(&self, i: usize) -> (Option<u64>, Option<u64>) {
        let hdr = &self.hdrs[i].msg_hdr;
        let (mut ts, mut drops) = (None, None);
        // SAFETY: `hdr` was filled by the kernel in the last `recvmmsg`; its control pointer
        // and length describe this receiver's control buffer, so the CMSG macros walk inside
        // it, and every message read is checked for its level, type and length first.
        #[allow(unsafe_code)]
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
            while !cmsg.is_null() {
                let c = &*cmsg;
                let payload = c.cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                if c.cmsg_level == libc::SOL_SOCKET {
                    if c.cmsg_type == libc::SCM_TIMESTAMPNS
                        && payload >= std::mem::size_of::<libc::timespec>()
                    {
                        let t: libc::timespec =
                            std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                        ts = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                    } else if c.cmsg_type == libc::SO_RXQ_OVFL
                        && payload >= std::mem::size_of::<u32>()
                    {
                        let d: u32 = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                        drops = Some(u64::from(d));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
            }
        }
        (ts, drops)
    }

    /// Datagram `i` of the last batch; `None` past the number received.
    pub fn get(&self, i: usize) -> Option<Datagram<'_>> {
        if i >= self.received {
            return None;
        }
        let hdr = &self.hdrs[i];
        let len = (hdr.msg_len as usize).min(self.size);
        Some(Datagram {
            data: &self.data[i * self.size..i * self.size + len],
            truncated: hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            kernel_ns: self.timestamps[i],
            from: sockaddr_to_std(&self.addrs[i]),
        })
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

fn sockaddr_to_std(addr: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(addr.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a `sockaddr_in`, which fits in it.
            #[allow(unsafe_code)]
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read_unaligned((addr as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::from((
                u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a `sockaddr_in6`, which fits in it.
            #[allow(unsafe_code)]
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read_unaligned((addr as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::from((
                a.sin6_addr.s6_addr,
                u16::from_be(a.sin6_port),
            )))
        }
        _ => None,
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
