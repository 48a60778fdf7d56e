//! The thin Linux layer: the calls `rustix` does not cover (POSIX per-thread timer signals,
//! `sigaction`, real-time scheduling, `recvmmsg` with its control messages) wrapped once
//! here, each `unsafe` block with the reason it is sound; and the workspace's one batched
//! UDP I/O ([`RecvBatch`], [`send_all`]), which `softtimer-net` and the tools build on. The
//! crate's other `unsafe` code is the timer-signal path: the signal handler (`signal.rs`)
//! and the loop's constructor that installs it (`event_loop.rs`).
#![allow(unsafe_code)]

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::OnceLock;
use std::time::Duration;

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// The calling thread's kernel thread id.
pub(crate) fn gettid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// Makes the calling thread `SCHED_FIFO` at `priority` (1 ..= 99).
pub(crate) fn set_realtime_priority(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid `sched_param` for the duration of the call; pid 0 means
    // the calling thread. The call has no memory effects beyond reading `param`.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 { Ok(()) } else { Err(last_error()) }
}

/// The real-time signal used by the timer-signal baseline.
pub(crate) fn timer_signal() -> i32 {
    libc::SIGRTMIN() + 3
}

/// Installs `handler` for the timer-signal baseline's signal, once per process.
pub(crate) fn install_signal_handler(handler: extern "C" fn(i32)) -> io::Result<()> {
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let result = INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed `sigaction` is a valid empty action; we then set the handler and
        // an empty mask. `SA_RESTART` makes interrupted system calls restart where they
        // can, so the signal disturbs the interrupted code as little as a hardware
        // interrupt would. `sigaction` reads the struct only during the call.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(timer_signal(), &action, std::ptr::null_mut()) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
            }
        }
    });
    result.map_err(io::Error::from_raw_os_error)
}

/// A POSIX per-process timer whose expirations are delivered as a signal to one thread
/// (`SIGEV_THREAD_ID`): the user-space analogue of a hardware timer interrupt.
#[derive(Debug)]
pub(crate) struct ThreadSignalTimer {
    id: libc::timer_t,
}

// SAFETY: `timer_t` is an opaque kernel handle (a pointer-sized id); the timer calls are
// thread-safe, so the handle may be moved to and used from any thread.
unsafe impl Send for ThreadSignalTimer {}

impl ThreadSignalTimer {
    /// A timer on `CLOCK_MONOTONIC` that signals thread `tid` with `signo`, disarmed.
    pub(crate) fn new(tid: i32, signo: i32) -> io::Result<Self> {
        // SAFETY: a zeroed `sigevent` is valid; we fill in the notification fields. The
        // kernel writes the new id into `id` on success only.
        unsafe {
            let mut event: libc::sigevent = std::mem::zeroed();
            event.sigev_notify = libc::SIGEV_THREAD_ID;
            event.sigev_signo = signo;
            event.sigev_notify_thread_id = tid;
            let mut id: libc::timer_t = std::ptr::null_mut();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut id) != 0 {
                return Err(last_error());
            }
            Ok(ThreadSignalTimer { id })
        }
    }

    /// Arms the timer to expire every `period`, the first time one period from now.
    pub(crate) fn set_periodic(&self, period: Duration) -> io::Result<()> {
        let ts = libc::timespec {
            tv_sec: period.as_secs() as libc::time_t,
            tv_nsec: period.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: ts,
            it_value: ts,
        };
        // SAFETY: `self.id` is a live timer (deleted only in Drop); `spec` is valid for the
        // call; the old value is not requested.
        let rc = unsafe { libc::timer_settime(self.id, 0, &spec, std::ptr::null_mut()) };
        if rc == 0 { Ok(()) } else { Err(last_error()) }
    }
}

impl Drop for ThreadSignalTimer {
    fn drop(&mut self) {
        // SAFETY: `self.id` came from `timer_create` and is deleted exactly once, here.
        unsafe {
            libc::timer_delete(self.id);
        }
    }
}

fn sockaddr_to_std(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a `sockaddr_in`, and it is at least
            // that long; `sockaddr_storage` is aligned for every address type.
            let a = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for `sockaddr_in6`.
            let a = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Control-message room per datagram: a `timespec` and a `u32` drop counter, with headers.
const CONTROL_LEN: usize = 128;

/// One datagram of a [`RecvBatch`].
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// What was received (at most the batch's datagram size).
    pub data: &'a [u8],
    /// Whether the datagram was longer than the buffer and cut.
    pub truncated: bool,
    /// The kernel's receive time, ns since the Unix epoch (`CLOCK_REALTIME`), where the
    /// batch asked for it and the kernel gave one.
    pub kernel_ns: Option<u64>,
    /// The sender, for an IP socket.
    pub from: Option<SocketAddr>,
}

/// Buffers for receiving up to `capacity` datagrams with one `recvmmsg`, and, made with
/// [`RecvBatch::with_kernel_stamps`], the kernel's receive timestamp of each and its count
/// of datagrams dropped on the socket (the control messages of `SO_TIMESTAMPNS` and
/// `SO_RXQ_OVFL`, which the socket must have turned on). The one receive path of the
/// workspace: the loop's [`LoopCx::recvmmsg`](crate::LoopCx::recvmmsg), and
/// `softtimer-net`'s timestamped receiver, capture and forwarder.
///
/// ```
/// use softtimer_rt::RecvBatch;
/// let batch = RecvBatch::new(32, 2048);
/// assert_eq!(batch.capacity(), 32);
/// assert_eq!(batch.len(), 0);
/// ```
pub struct RecvBatch {
    data: Vec<u8>,
    size: usize,
    addrs: Vec<libc::sockaddr_storage>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// `CONTROL_LEN` bytes per datagram, or empty: no control messages asked for.
    control: Vec<u8>,
    stamps: Vec<Option<u64>>,
    drops: Option<u64>,
    received: usize,
}

// SAFETY: the raw pointers inside `iov` and `hdrs` point into the batch's own vectors and
// are rebuilt before every use; nothing else refers to them.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Room for `capacity` datagrams (at least 1) of up to `size` bytes (at least 1) each.
    ///
    /// # Panics
    ///
    /// If the buffer's length, `capacity × size`, overflows `usize` (as a `Vec` of that
    /// many bytes would).
    pub fn new(capacity: usize, size: usize) -> Self {
        Self::build(capacity, size, false)
    }

    /// [`RecvBatch::new`], with room for each datagram's kernel timestamp and the socket's
    /// drop counter.
    ///
    /// # Panics
    ///
    /// As [`RecvBatch::new`].
    pub fn with_kernel_stamps(capacity: usize, size: usize) -> Self {
        Self::build(capacity, size, true)
    }

    fn build(capacity: usize, size: usize, stamps: bool) -> Self {
        let (capacity, size) = (capacity.max(1), size.max(1));
        // Checked even where overflow checks are off: the pointers handed to the kernel are
        // computed from these lengths.
        let overflow = || panic!("RecvBatch: {capacity} datagrams of {size} bytes overflow usize");
        let data_len = capacity.checked_mul(size).unwrap_or_else(overflow);
        let control_len = capacity.checked_mul(CONTROL_LEN).unwrap_or_else(overflow);
        // SAFETY: all-zero `sockaddr_storage`, `iovec` and `mmsghdr` are valid (null
        // pointers, zero lengths); they are filled in before every call.
        let (zero_addr, zero_iov, zero_hdr) = unsafe {
            (
                std::mem::zeroed::<libc::sockaddr_storage>(),
                std::mem::zeroed::<libc::iovec>(),
                std::mem::zeroed::<libc::mmsghdr>(),
            )
        };
        RecvBatch {
            data: vec![0; data_len],
            size,
            addrs: vec![zero_addr; capacity],
            iov: vec![zero_iov; capacity],
            hdrs: vec![zero_hdr; capacity],
            control: vec![0; if stamps { control_len } else { 0 }],
            stamps: vec![None; capacity],
            drops: None,
            received: 0,
        }
    }

    /// How many datagrams one call can receive.
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// How many datagrams the last call received.
    pub fn len(&self) -> usize {
        self.received
    }

    /// Whether the last call received nothing.
    pub fn is_empty(&self) -> bool {
        self.received == 0
    }

    /// Datagram `i` of the last call and its sender; `None` past [`RecvBatch::len`].
    pub fn get(&self, i: usize) -> Option<(&[u8], Option<SocketAddr>)> {
        self.datagram(i).map(|d| (d.data, d.from))
    }

    /// Datagram `i` of the last call, with what the kernel said of it; `None` past
    /// [`RecvBatch::len`].
    pub fn datagram(&self, i: usize) -> Option<Datagram<'_>> {
        if i >= self.received {
            return None;
        }
        let hdr = &self.hdrs[i];
        let len = (hdr.msg_len as usize).min(self.size);
        Some(Datagram {
            data: &self.data[i * self.size..i * self.size + len],
            truncated: hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            kernel_ns: self.stamps[i],
            from: sockaddr_to_std(&self.addrs[i], hdr.msg_hdr.msg_namelen),
        })
    }

    /// The socket's count of datagrams the kernel dropped (its buffer was full), as of the
    /// last datagram that carried it; `None` before any did.
    pub fn kernel_drops(&self) -> Option<u64> {
        self.drops
    }

    /// One `recvmmsg` of at most `max` datagrams on `fd`: without waiting (`wait` false:
    /// `Ok(0)` when nothing is waiting), or waiting for a first datagram up to the socket's
    /// receive timeout and then taking what else is waiting (`Ok(0)` on the timeout).
    pub fn recv(&mut self, fd: BorrowedFd<'_>, max: usize, wait: bool) -> io::Result<usize> {
        self.received = 0;
        let batch = self.hdrs.len().min(max);
        if batch == 0 {
            return Ok(0);
        }
        let data = self.data.as_mut_ptr();
        let control = self.control.as_mut_ptr();
        let with_control = !self.control.is_empty();
        for i in 0..batch {
            self.iov[i] = libc::iovec {
                // SAFETY: `i * size` is inside `data`, which is `capacity * size` long.
                iov_base: unsafe { data.add(i * self.size) }.cast(),
                iov_len: self.size,
            };
            let hdr = &mut self.hdrs[i].msg_hdr;
            hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_iov = &mut self.iov[i];
            hdr.msg_iovlen = 1;
            (hdr.msg_control, hdr.msg_controllen) = if with_control {
                // SAFETY: `i * CONTROL_LEN` is inside `control`, `capacity * CONTROL_LEN`
                // long.
                (
                    unsafe { control.add(i * CONTROL_LEN) }.cast(),
                    CONTROL_LEN as _,
                )
            } else {
                (std::ptr::null_mut(), 0)
            };
            hdr.msg_flags = 0;
        }
        let flags = if wait {
            libc::MSG_WAITFORONE
        } else {
            libc::MSG_DONTWAIT
        };
        // SAFETY: every header points into this batch's own buffers, which outlive the
        // call and are not otherwise borrowed; `vlen` is at most the number of headers.
        let n = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                batch as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let err = last_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Ok(0),
                _ => Err(err),
            };
        }
        let n = n as usize;
        for i in 0..n {
            let (stamp, drops) = if with_control {
                self.control_of(i)
            } else {
                (None, None)
            };
            self.stamps[i] = stamp;
            if drops.is_some() {
                self.drops = drops;
            }
        }
        self.received = n;
        Ok(n)
    }

    /// The timestamp and drop counter in datagram `i`'s control messages.
    fn control_of(&self, i: usize) -> (Option<u64>, Option<u64>) {
        let hdr = &self.hdrs[i].msg_hdr;
        let (mut stamp, mut drops) = (None, None);
        // SAFETY: `hdr` was filled by the kernel in the last `recvmmsg`; its control pointer
        // and length describe this batch's control buffer, so the CMSG macros walk inside
        // it, and every message read is checked for its level, type and length first.
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
                        stamp = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
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
        (stamp, drops)
    }
}

/// What sending a batch of datagrams did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchSent {
    /// Datagrams the kernel accepted.
    pub sent: usize,
    /// Datagrams it refused (a full buffer without waiting, an unreachable port), skipped.
    pub refused: usize,
    /// System calls made.
    pub calls: usize,
    /// The last refusal's `errno` (`std::io::Error::from_raw_os_error` says what it was:
    /// `ECONNREFUSED` for a port nothing listens on, `EMSGSIZE` for a datagram or GSO
    /// batch too large for the path, `EAGAIN` for a full buffer without waiting).
    pub last_error: Option<i32>,
}

/// Sends every datagram of `datagrams` on the connected socket `fd`, each made of its parts
/// in order (a header and a payload leave from their own buffers, without a copy): one
/// `sendmsg` for one datagram, one `sendmmsg` per run of the rest, as many calls as it
/// takes. A datagram the kernel refuses is skipped and counted, and the rest go on. `wait`:
/// block while the socket's buffer is full (a sender that must not lose its own datagrams),
/// or refuse at once (a router, which drops). The one batched send of the workspace for
/// connected sockets: `softtimers pace`, the flood, and `softtimer-net`'s forwarder.
///
/// ```
/// use std::io::IoSlice;
/// let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
/// let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
/// tx.connect(rx.local_addr().unwrap()).unwrap();
/// let (header, payload) = ([1u8; 4], [0u8; 60]);
/// let parts = [IoSlice::new(&header), IoSlice::new(&payload)];
/// let sent = softtimer_rt::send_all(&tx, &[&parts[..], &parts[..]], true);
/// assert_eq!((sent.sent, sent.refused, sent.calls), (2, 0, 1));
/// let mut buf = [0u8; 128];
/// assert_eq!(rx.recv(&mut buf).unwrap(), 64);
/// ```
pub fn send_all(fd: impl AsFd, datagrams: &[&[IoSlice<'_>]], wait: bool) -> BatchSent {
    let flags = if wait {
        rustix::net::SendFlags::empty()
    } else {
        rustix::net::SendFlags::DONTWAIT
    };
    let mut out = BatchSent::default();
    if let [parts] = datagrams {
        out.calls = 1;
        let sent = loop {
            match rustix::net::sendmsg(
                &fd,
                parts,
                &mut rustix::net::SendAncillaryBuffer::default(),
                flags,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other,
            }
        };
        match sent {
            Ok(_) => out.sent = 1,
            Err(e) => (out.refused, out.last_error) = (1, Some(e.raw_os_error())),
        }
        return out;
    }
    let mut controls: Vec<rustix::net::SendAncillaryBuffer<'_, '_, '_>> =
        datagrams.iter().map(|_| Default::default()).collect();
    let mut messages: Vec<rustix::net::MMsgHdr<'_>> = datagrams
        .iter()
        .zip(controls.iter_mut())
        .map(|(parts, control)| rustix::net::MMsgHdr::new(parts, control))
        .collect();
    let mut done = 0;
    while done < messages.len() {
        out.calls += 1;
        match rustix::net::sendmmsg(&fd, &mut messages[done..], flags) {
            Ok(n) if n > 0 => {
                done += n;
                out.sent += n;
            }
            Err(rustix::io::Errno::INTR) => {}
            // The first datagram left was refused: skip it and go on.
            refused => {
                done += 1;
                out.refused += 1;
                if let Err(e) = refused {
                    out.last_error = Some(e.raw_os_error());
                }
            }
        }
    }
    out
}

/// Sends each `(payload, destination)` with one non-blocking `sendmmsg`; returns how many
/// were sent (`Ok(0)` when the socket's buffer is full). For code outside the loop's
/// callbacks, which use [`LoopCx::sendmmsg`](crate::LoopCx::sendmmsg).
///
/// ```
/// use std::net::UdpSocket;
/// let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
/// let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
/// let to = rx.local_addr().unwrap();
/// let sent = softtimer_rt::send_batch(&tx, &[(b"a".as_slice(), to), (b"b".as_slice(), to)]);
/// assert_eq!(sent.unwrap(), 2);
/// ```
pub fn send_batch(fd: impl AsFd, messages: &[(&[u8], SocketAddr)]) -> io::Result<usize> {
    let fd = fd.as_fd();
    if messages.is_empty() {
        return Ok(0);
    }
    let addrs: Vec<rustix::net::SocketAddrAny> =
        messages.iter().map(|(_, to)| (*to).into()).collect();
    let iovs: Vec<[IoSlice<'_>; 1]> = messages.iter().map(|(d, _)| [IoSlice::new(d)]).collect();
    let mut controls: Vec<rustix::net::SendAncillaryBuffer<'_, '_, '_>> =
        messages.iter().map(|_| Default::default()).collect();
    let mut hdrs: Vec<rustix::net::MMsgHdr<'_>> = addrs
        .iter()
        .zip(&iovs)
        .zip(controls.iter_mut())
        .map(|((to, iov), control)| rustix::net::MMsgHdr::new_with_addr(to, iov, control))
        .collect();
    match rustix::net::sendmmsg(fd, &mut hdrs, rustix::net::SendFlags::DONTWAIT) {
        Ok(n) => Ok(n),
        Err(rustix::io::Errno::AGAIN) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Whether `fd` is an open descriptor (so that registering a closed one is a clear error).
pub(crate) fn is_open(fd: impl AsFd) -> bool {
    rustix::io::fcntl_getfd(fd).is_ok()
}

/// Reads the 8-byte expiration count of a readable timerfd or eventfd.
pub(crate) fn read_counter(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [MaybeUninit::<u8>::uninit(); 8];
    match rustix::io::read(fd, &mut buf) {
        Ok((bytes, _)) if bytes.len() == 8 => {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(bytes);
            Ok(u64::from_ne_bytes(raw))
        }
        Ok(_) => Ok(0),
        Err(rustix::io::Errno::AGAIN) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Sets the calling thread's timer slack to its minimum (1 ns). Linux adds the slack (50 µs
/// by default) to every blocking timeout, which would make a precise timeout that late. For
/// a thread of the crate's own (the helper, a probe); a loop on a caller's thread takes a
/// [`PreciseTimeouts`] instead, which gives the slack back.
pub(crate) fn minimal_timer_slack() -> io::Result<()> {
    rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1)).map_err(io::Error::from)
}

thread_local! {
    /// The loops alive on this thread that asked for precise timeouts, and the timer slack
    /// the thread had before the first of them (0: unknown, left as it is).
    static PRECISE_TIMEOUTS: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// The calling thread's timer slack at its minimum for as long as any of these lives on it;
/// the slack it had before comes back when the last is dropped, in whatever order they are.
/// A loop made on a caller's thread holds one, so that the thread (and every thread and
/// process it starts later) does not keep a 1 ns slack once the loop is gone.
pub(crate) struct PreciseTimeouts {
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl PreciseTimeouts {
    #[must_use = "the slack is given back when this is dropped"]
    pub(crate) fn begin() -> PreciseTimeouts {
        PRECISE_TIMEOUTS.with(|state| {
            let (holders, before) = state.get();
            let before = if holders == 0 {
                rustix::thread::current_timer_slack().unwrap_or(0)
            } else {
                before
            };
            // Set even when another loop holds it: something may have changed it since.
            let _ = minimal_timer_slack();
            state.set((holders + 1, before));
        });
        PreciseTimeouts {
            _thread_bound: std::marker::PhantomData,
        }
    }
}

impl Drop for PreciseTimeouts {
    fn drop(&mut self) {
        PRECISE_TIMEOUTS.with(|state| {
            let (holders, before) = state.get();
            state.set((holders.saturating_sub(1), before));
            if holders == 1 && before > 0 {
                let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(before));
            }
        });
    }
}

/// Pins the calling thread to `cpu`; whether it is now pinned there (not when the CPU does not
/// exist or is not allowed, as in a container confined to other CPUs).
pub(crate) fn pin_current_thread(cpu: usize) -> bool {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return false;
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok() && allowed_cpus() == [cpu]
}

/// The CPUs the calling thread may run on.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// CPUs online in the system (not only this thread's affinity).
pub(crate) fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let mut ends = part.split('-').filter_map(|x| x.parse::<usize>().ok());
        if let Some(a) = ends.next() {
            let b = ends.next().unwrap_or(a);
            cpus.extend(a..=b);
        }
    }
    cpus
}

/// CPU time the calling thread has used, in ns.
pub(crate) fn thread_cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
