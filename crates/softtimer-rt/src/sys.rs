//! The thin Linux layer: the calls `rustix` does not cover (POSIX per-thread timer signals,
//! `sigaction`, real-time scheduling, `recvmmsg`/`sendmmsg`) wrapped once here, so that the
//! rest of the crate is safe code. Every `unsafe` block of the crate is in this module.
#![allow(unsafe_code)]

use std::io;
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

fn std_to_sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid `sockaddr_storage`.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: `sockaddr_storage` is large and aligned enough for `sockaddr_in`.
            let out = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
            out.sin_family = libc::AF_INET as libc::sa_family_t;
            out.sin_port = a.port().to_be();
            out.sin_addr = libc::in_addr {
                s_addr: u32::from(*a.ip()).to_be(),
            };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for `sockaddr_in6`.
            let out = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
            out.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            out.sin6_port = a.port().to_be();
            out.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            out.sin6_flowinfo = a.flowinfo();
            out.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// Buffers for receiving up to `capacity` datagrams with one `recvmmsg`.
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
    received: usize,
}

// SAFETY: the raw pointers inside `iov` and `hdrs` point into the batch's own vectors and
// are rebuilt before every use; nothing else refers to them.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Room for `capacity` datagrams (at least 1) of up to `size` bytes (at least 1) each.
    pub fn new(capacity: usize, size: usize) -> Self {
        let (capacity, size) = (capacity.max(1), size.max(1));
        // SAFETY: all-zero `sockaddr_storage`, `iovec` and `mmsghdr` are valid (null
        // pointers, zero lengths); they are filled in before every call.
        let zero_addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let zero_iov: libc::iovec = unsafe { std::mem::zeroed() };
        let zero_hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        RecvBatch {
            data: vec![0; capacity * size],
            size,
            addrs: vec![zero_addr; capacity],
            iov: vec![zero_iov; capacity],
            hdrs: vec![zero_hdr; capacity],
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
        if i >= self.received {
            return None;
        }
        let hdr = &self.hdrs[i];
        let len = (hdr.msg_len as usize).min(self.size);
        let data = &self.data[i * self.size..i * self.size + len];
        Some((
            data,
            sockaddr_to_std(&self.addrs[i], hdr.msg_hdr.msg_namelen),
        ))
    }

    /// One non-blocking `recvmmsg` on `fd`, for code outside the loop's callbacks (which
    /// use [`LoopCx::recvmmsg`](crate::LoopCx::recvmmsg), a trigger state included). `Ok(0)`
    /// when nothing is waiting; an interrupted call is `Interrupted`.
    pub fn recv(&mut self, fd: impl AsFd) -> io::Result<usize> {
        self.recv_from(fd.as_fd())
    }

    /// One non-blocking `recvmmsg` on `fd`. `Ok(0)` when nothing is waiting.
    pub(crate) fn recv_from(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        self.received = 0;
        let base = self.data.as_mut_ptr();
        for i in 0..self.hdrs.len() {
            self.iov[i] = libc::iovec {
                // SAFETY: `i * size` is inside `data`, which is `capacity * size` long.
                iov_base: unsafe { base.add(i * self.size) }.cast(),
                iov_len: self.size,
            };
            let hdr = &mut self.hdrs[i].msg_hdr;
            hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_iov = &mut self.iov[i];
            hdr.msg_iovlen = 1;
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
            hdr.msg_flags = 0;
        }
        // SAFETY: every header points into this batch's own buffers, which outlive the
        // call and are not otherwise borrowed; `vlen` is the number of headers.
        let n = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let err = last_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(err);
        }
        self.received = n as usize;
        Ok(self.received)
    }
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
    let mut addrs: Vec<(libc::sockaddr_storage, libc::socklen_t)> =
        messages.iter().map(|(_, a)| std_to_sockaddr(a)).collect();
    let mut iov: Vec<libc::iovec> = messages
        .iter()
        .map(|(data, _)| libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        })
        .collect();
    let mut hdrs: Vec<libc::mmsghdr> = (0..messages.len())
        .map(|i| {
            // SAFETY: an all-zero `mmsghdr` is valid; the pointer fields are set below.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (&mut addrs[i].0 as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = addrs[i].1;
            h.msg_hdr.msg_iov = &mut iov[i];
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect();
    // SAFETY: the headers point into `addrs`, `iov` and the caller's payloads, all alive
    // and unmodified for the duration of the call (the kernel only reads them).
    let n = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            hdrs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let err = last_error();
        if err.kind() == io::ErrorKind::WouldBlock {
            return Ok(0);
        }
        return Err(err);
    }
    Ok(n as usize)
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
/// by default) to every blocking timeout, which would make a precise timeout that late.
pub(crate) fn minimal_timer_slack() -> io::Result<()> {
    rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1)).map_err(io::Error::from)
}

/// The calling thread's timer slack in ns.
pub(crate) fn timer_slack() -> io::Result<u64> {
    rustix::thread::current_timer_slack().map_err(io::Error::from)
}

/// Pins the calling thread to `cpu` (ignored if the CPU does not exist or is not allowed).
pub(crate) fn pin_current_thread(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    let _ = rustix::thread::sched_setaffinity(None, &set);
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
