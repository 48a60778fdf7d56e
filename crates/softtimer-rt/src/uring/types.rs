//! The backend's public options, counters and errors, which the loop's configuration and
//! its callers name.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Why the loop cannot use io_uring here.
///
/// # Example
///
/// Falling back to epoll where the kernel refuses the ring:
///
/// ```
/// use softtimer_rt::{EventLoop, IoBackend, LoopConfig, RtError};
///
/// let uring = LoopConfig { io_backend: IoBackend::Uring, ..LoopConfig::default() };
/// let _ev: EventLoop<()> = match EventLoop::new(uring, |_, _| {}) {
///     Ok(ev) => ev,
///     Err(RtError::Uring(why)) => {
///         eprintln!("no io_uring ({why}); using epoll");
///         EventLoop::new(LoopConfig::default(), |_, _| {})?
///     }
///     Err(e) => return Err(e.into()),
/// };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UringUnavailable {
    /// `io_uring_setup` does not exist: a kernel before 5.1, one built without io_uring, or a
    /// seccomp filter (as containers' default profiles have) that refuses it with `ENOSYS`.
    #[error(
        "this kernel has no io_uring_setup (ENOSYS): a kernel before 5.1 or built without io_uring, or a seccomp filter refuses the call"
    )]
    NoSyscall,
    /// The `kernel.io_uring_disabled` sysctl refuses it: 2 for every process, 1 for those
    /// outside `kernel.io_uring_group`.
    #[error(
        "io_uring is disabled by the sysctl kernel.io_uring_disabled = {0} (2: for everyone; 1: for processes outside kernel.io_uring_group)"
    )]
    Disabled(u8),
    /// `EPERM` without the sysctl: a seccomp filter or a security module refuses it.
    #[error(
        "io_uring_setup is not permitted (EPERM): a seccomp filter or security module refuses it"
    )]
    NotPermitted,
    /// The ring's memory could not be locked or mapped (`RLIMIT_MEMLOCK` before 5.12).
    #[error("io_uring_setup could not get the ring's memory (ENOMEM; RLIMIT_MEMLOCK?)")]
    NoMemory,
    /// Another failure of `io_uring_setup`.
    #[error("io_uring_setup failed: {}", std::io::Error::from_raw_os_error(*.0))]
    Setup(i32),
    /// The kernel's io_uring lacks a feature the loop uses.
    #[error("this kernel's io_uring lacks {0}, which the loop uses (Linux {1} or later)")]
    Missing(&'static str, &'static str),
}

/// What an attached descriptor receives through the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingRecv {
    /// Nothing: the ring only sends on it.
    None,
    /// Datagrams, by a multishot `recvmsg` into `buffers` (a power of two, at most 32768)
    /// provided buffers of `size` bytes of payload each (with GRO on the socket, a message
    /// holds several datagrams: make room for 64 KiB). Each comes with its sender, and GRO's
    /// segment size, ECN bits and destination address where the socket gives them.
    Datagrams {
        /// Provided buffers.
        buffers: u16,
        /// Payload bytes per buffer; a longer datagram is truncated, and flagged
        /// ([`Received::truncated`]).
        size: u32,
    },
    /// Whatever the descriptor reads (a TUN device, a pipe), by a multishot `read` into
    /// `buffers` buffers of `size` bytes.
    Reads {
        /// Provided buffers.
        buffers: u16,
        /// Bytes per buffer.
        size: u32,
    },
}

/// A message received through the ring, as [`LoopCx::received`](crate::LoopCx::received)
/// hands it over.
#[derive(Clone, Copy, Debug)]
pub struct Received<'a> {
    /// Its bytes (with GRO, several datagrams of [`segment_size`](Self::segment_size) each,
    /// the last possibly shorter).
    pub data: &'a [u8],
    /// The sender.
    pub from: Option<SocketAddr>,
    /// With GRO, the size of each datagram in `data`.
    pub segment_size: Option<usize>,
    /// The ECN bits of its TOS or traffic class, where the socket reports them.
    pub ecn: Option<u8>,
    /// The local address it was sent to, where the socket reports it.
    pub dst_ip: Option<IpAddr>,
    /// The datagram was longer than the buffer: `data` is its start only.
    pub truncated: bool,
}

/// What the ring did for one attached descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingCounters {
    /// Datagrams (or writes) the kernel took (a GSO send counts its datagrams).
    pub sent: u64,
    /// Sends refused with an error other than a full buffer, dropped.
    pub refused: u64,
    /// Bytes of the sends in `sent`, as queued (a GSO send's whole buffer; a short write to
    /// a descriptor that is not a socket counts whole), so that a caller that counted bytes
    /// as it queued them can take out those that did not leave.
    pub sent_bytes: u64,
    /// Bytes of the sends in `refused`, as queued.
    pub refused_bytes: u64,
    /// Sends refused because the socket's buffer was full, sent again when it had room.
    pub would_block: u64,
    /// Messages received.
    pub received: u64,
    /// Messages longer than a provided buffer, received truncated.
    pub truncated: u64,
    /// Completions whose message could not be read back from its buffer (a header the kernel
    /// wrote that does not parse): dropped, and counted here rather than lost silently.
    pub malformed: u64,
    /// Times the multishot receive ended (no free buffer, an error) and was armed again.
    pub rearmed: u64,
    /// What ended the receive for good (the negated `errno`, or 0 for end of file), after it
    /// ended that many times in a row without a message; `None` while it runs.
    pub recv_error: Option<i32>,
}

impl RingCounters {
    /// A send of `datagrams` datagrams and `bytes` bytes that did not and will not leave.
    pub(crate) fn count_refused(&mut self, datagrams: u32, bytes: u32) {
        self.refused += u64::from(datagrams);
        self.refused_bytes += u64::from(bytes);
    }
}

/// What the loop's ring did, in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// `io_uring_enter` calls (to submit, to wait, or both in one).
    pub enters: u64,
    /// Completions reaped, each a trigger state.
    pub completions: u64,
    /// Times a send found every slot in use and waited for one.
    pub slot_waits: u64,
}

/// How the ring is set up and waits ([`LoopConfig::uring`](crate::LoopConfig::uring)).
///
/// # Example
///
/// A ring whose waits gather up to 16 completions, holding the first back at most 20 µs
/// (Linux 6.12's `min_timeout`; before it, a wait returns at the first):
///
/// ```
/// use std::time::Duration;
/// use softtimer_rt::{IoBackend, LoopConfig, UringOptions};
///
/// let config = LoopConfig {
///     io_backend: IoBackend::Uring,
///     uring: UringOptions {
///         wait_batch: 16,
///         min_wait: Some(Duration::from_micros(20)),
///         ..UringOptions::default()
///     },
///     ..LoopConfig::default()
/// };
/// assert_eq!(config.uring.entries, UringOptions::default().entries);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UringOptions {
    /// Submission-queue entries (a power of two; the completion queue has 16 times as many,
    /// at least 4096).
    pub entries: u32,
    /// Send slots: sends in flight at once (each owns a copy of its datagram). A send that
    /// finds them all in use submits and waits for one (backpressure, nothing dropped).
    pub send_slots: usize,
    /// Descriptors that can be attached at once (the fixed-file table; 1 to 65,536).
    pub files: u32,
    /// Completions (besides the loop's own sends) a wait asks for before it returns; with
    /// [`min_wait`](Self::min_wait), the wait returns at the first completion once that
    /// has passed. 1 (the default) returns at the first.
    pub wait_batch: u32,
    /// The wait's `min_timeout` (Linux 6.12+; ignored before): how long a wait may hold a
    /// completion back to gather [`wait_batch`](Self::wait_batch). Never past the idle
    /// policy's timeout, which bounds the wait.
    pub min_wait: Option<Duration>,
    /// With SQPOLL, how long the kernel's submission thread polls after the last submission
    /// before it sleeps (it costs a core while it polls).
    pub sqpoll_idle: Duration,
}

impl Default for UringOptions {
    fn default() -> Self {
        UringOptions {
            entries: 256,
            send_slots: 512,
            files: 64,
            wait_batch: 1,
            min_wait: None,
            sqpoll_idle: Duration::from_millis(2),
        }
    }
}
