//! What the kernel's TCP says of one connection (`TCP_INFO`): the segments it sent and
//! retransmitted, for the kernel-TCP rows beside QUIC's own loss counts.

use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Segments a TCP connection sent, and how many of them were retransmissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpCounts {
    /// Segments sent (`tcpi_segs_out`, TSO segments counted one by one).
    pub segments_out: u64,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub retransmitted: u64,
}

/// Reads `stream`'s counts; `None` if the kernel refuses (not a TCP socket).
///
/// ```
/// use std::net::{TcpListener, TcpStream};
/// use softtimers_tools::tcp_info::counts;
///
/// let listener = TcpListener::bind("127.0.0.1:0").unwrap();
/// let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
/// let c = counts(&stream).unwrap();
/// assert_eq!(c.retransmitted, 0);
/// ```
pub fn counts(stream: &TcpStream) -> Option<TcpCounts> {
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a writable buffer of `len` bytes that outlives the call, and the
    // kernel writes at most `len` bytes into it and stores the length it wrote in `len`.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: zero-initialised and then filled by the kernel: every field is a plain integer,
    // so any bytes are a valid `tcp_info` (fields a kernel older than the struct does not
    // know stay zero).
    #[allow(unsafe_code)]
    let info = unsafe { info.assume_init() };
    Some(TcpCounts {
        segments_out: u64::from(info.tcpi_segs_out),
        retransmitted: u64::from(info.tcpi_total_retrans),
    })
}
