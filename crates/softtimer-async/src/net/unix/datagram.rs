//! Unix-domain datagram sockets on the runtime: each datagram whole, in order, and never
//! dropped for want of room (a full receiver makes the sender wait instead).

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustix::net::{SendFlags, SocketAddrUnix, SocketFlags, SocketType};
use softtimer::TriggerSource;

use super::{require_runtime, socket_addr, unix_socket};
use crate::net::udp::syscall;
use crate::reactor::{Direction, Registration, wait_fn};
use crate::time::Sleep;

/// The first wait before a [`UnixDatagram::send_to`] to a full receiver tries again, and the
/// longest (the wait doubles): readiness cannot tell it when there is room (see there).
const RETRY_FIRST: Duration = Duration::from_micros(20);
const RETRY_MAX: Duration = Duration::from_millis(1);

/// A Unix-domain datagram socket registered with the loop of the thread that made it.
///
/// A datagram arrives whole or not at all, in the order it was sent, and is never dropped
/// for want of room: a send to a full receiver waits for room (`try_send` says
/// `WouldBlock`). The limit is the receiver's queue (`net.unix.max_dgram_qlen` datagrams),
/// or for two sockets connected to each other (a [`pair`](Self::pair)) the sender's
/// `SO_SNDBUF`. Datagrams can still be lost as on any Unix datagram socket: those queued at
/// a receiver that closes, and those queued at a socket when it connects elsewhere. Every
/// send and receive is followed by a trigger state; all its methods take `&self`, so tasks
/// may send and receive on one socket at once. Its `poll_recv` and `poll_recv_from` take a
/// `&mut [u8]`, as this crate's [`UdpSocket`](crate::UdpSocket)'s do, where tokio's take a
/// `ReadBuf`.
///
/// ```
/// use softtimer_async::{Runtime, UnixDatagram};
///
/// let dir = std::env::temp_dir().join(format!("softtimer-doc-udg-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("echo.sock");
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let echo = UnixDatagram::bind(&path).unwrap();
///     softtimer_async::spawn_local(async move {
///         let mut buf = [0u8; 64];
///         let (n, from) = echo.recv_from(&mut buf).await.unwrap();
///         let to = from.as_pathname().expect("the client bound a path").to_owned();
///         echo.send_to(&buf[..n], to).await.unwrap();
///     });
///     let client = UnixDatagram::bind(dir.join("client.sock")).unwrap();
///     client.send_to(b"hello", &path).await.unwrap();
///     let mut buf = [0u8; 64];
///     let n = client.recv(&mut buf).await.unwrap();
///     assert_eq!(&buf[..n], b"hello");
/// });
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct UnixDatagram {
    socket: std::os::unix::net::UnixDatagram,
    reg: Registration,
}

crate::net::socket_descriptor!(UnixDatagram, socket);
crate::net::deregister_on_drop!(UnixDatagram);

impl UnixDatagram {
    /// A socket bound to `path` (a file the bind makes; it stays after the socket is
    /// dropped, as with std's and tokio's), on the calling thread's loop.
    ///
    /// # Errors
    ///
    /// `AddrInUse` when the file exists; the bind's other errors (a missing directory, a
    /// path too long for a socket address: `InvalidInput`); an `Other` error outside a
    /// runtime thread.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixDatagram> {
        // Before the bind: it makes the file, which a failure after it would leave.
        require_runtime()?;
        let addr = socket_addr(path.as_ref())?;
        let fd = unix_socket(SocketType::DGRAM, SocketFlags::NONBLOCK)?;
        syscall(TriggerSource::Syscall, || rustix::net::bind(&fd, &addr))?;
        Self::registered(std::os::unix::net::UnixDatagram::from(fd))
    }

    /// A socket bound to no path: it sends with [`send_to`](Self::send_to) (or, once
    /// connected, [`send`](Self::send)) but gets no answers, its address being unnamed.
    ///
    /// # Errors
    ///
    /// The `socket` system call's; an `Other` error outside a runtime thread.
    pub fn unbound() -> io::Result<UnixDatagram> {
        require_runtime()?;
        let fd = unix_socket(SocketType::DGRAM, SocketFlags::NONBLOCK)?;
        Self::registered(std::os::unix::net::UnixDatagram::from(fd))
    }

    /// Two sockets connected to each other (`socketpair`), on the calling thread's loop.
    ///
    /// ```
    /// use softtimer_async::{Runtime, UnixDatagram};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let (a, b) = UnixDatagram::pair().unwrap();
    ///     a.send(b"one").await.unwrap();
    ///     a.send(b"two").await.unwrap();
    ///     let mut buf = [0u8; 16];
    ///     assert_eq!(b.recv(&mut buf).await.unwrap(), 3);
    ///     assert_eq!(&buf[..3], b"one");
    ///     assert_eq!(b.try_recv(&mut buf).unwrap(), 3);
    ///     assert_eq!(&buf[..3], b"two");
    /// });
    /// ```
    ///
    /// # Errors
    ///
    /// The `socketpair` system call's; an `Other` error outside a runtime thread.
    pub fn pair() -> io::Result<(UnixDatagram, UnixDatagram)> {
        require_runtime()?;
        let (a, b) = std::os::unix::net::UnixDatagram::pair()?;
        Ok((UnixDatagram::from_std(a)?, UnixDatagram::from_std(b)?))
    }

    /// Takes over a std socket, on the calling thread's loop; it makes the socket
    /// non-blocking itself.
    ///
    /// # Errors
    ///
    /// An `Other` error outside a runtime thread; the `ioctl` or the loop's `epoll_ctl`'s
    /// error if the socket cannot be made non-blocking or watched.
    pub fn from_std(socket: std::os::unix::net::UnixDatagram) -> io::Result<UnixDatagram> {
        require_runtime()?;
        rustix::io::ioctl_fionbio(&socket, true)?;
        Self::registered(socket)
    }

    /// A non-blocking socket registered with the calling thread's loop.
    fn registered(socket: std::os::unix::net::UnixDatagram) -> io::Result<UnixDatagram> {
        let shared = crate::executor::context_shared().ok_or_else(crate::reactor::no_runtime)?;
        // Watching writability only once a send has had to wait, as UDP's does: a datagram
        // socket turns writable again as each sent datagram is read.
        let reg = Registration::new_read_only(shared, socket.as_fd())?;
        Ok(UnixDatagram { socket, reg })
    }

    /// Connects the socket to the one bound at `path`: [`send`](Self::send) goes there,
    /// and new datagrams come from there only. Those already queued are still received,
    /// unless the socket was connected to another peer: then the kernel drops its whole
    /// queue.
    ///
    /// # Errors
    ///
    /// `NotFound` when nothing is at `path`, `ConnectionRefused` when no socket is bound
    /// there any more, `PermissionDenied` when that socket is connected to another,
    /// `InvalidInput` for a path too long for a socket address.
    pub fn connect(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let addr = socket_addr(path.as_ref())?;
        syscall(TriggerSource::Syscall, || {
            rustix::net::connect(&self.socket, &addr)
        })?;
        Ok(())
    }

    /// The address it is bound to (unnamed if it is not).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The address of the socket it is connected to.
    ///
    /// # Errors
    ///
    /// `NotConnected` when it is not connected.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket.peer_addr()
    }

    /// Receives one datagram, with its sender's address (unnamed if the sender is not
    /// bound). A datagram longer than `buf` is cut to its length; the rest is lost, as
    /// with any datagram socket.
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        wait_fn(|cx| self.poll_recv_from(cx, buf)).await
    }

    /// Polls to receive one datagram, with its sender's address.
    pub fn poll_recv_from(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<(usize, SocketAddr)>> {
        self.reg.poll_io(Direction::Read, cx, || {
            syscall(TriggerSource::Recv, || self.socket.recv_from(buf))
        })
    }

    /// Receives one datagram (from the connected peer, on a connected socket).
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        wait_fn(|cx| self.poll_recv(cx, buf)).await
    }

    /// Polls to receive one datagram.
    pub fn poll_recv(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.reg.poll_io(Direction::Read, cx, || {
            syscall(TriggerSource::Recv, || self.socket.recv(buf))
        })
    }

    /// Sends one datagram to the socket bound at `path`, waiting while its queue is full.
    ///
    /// Readiness cannot say when such a receiver has room: Linux wakes a sender for room at
    /// a receiver it is not connected to only when the sender's own queued datagrams are
    /// read, and each refused send reports the sender writable again at once (the refused
    /// datagram's buffer is freed). Waiting on it would spin, or wait for ever behind other
    /// senders' datagrams. So a refused `send_to` tries again on a soft timer instead, after
    /// 20 µs, doubling to 1 ms: one system call a try, and about a millisecond at most after
    /// room appears, if no other sender (a blocking one, woken by the kernel) takes it
    /// first. A connected socket's [`send`](Self::send) is woken by the kernel when its peer
    /// has room.
    ///
    /// # Errors
    ///
    /// `NotFound` when nothing is at `path`, `ConnectionRefused` when no socket is bound
    /// there any more, `PermissionDenied` when that socket is connected to another,
    /// `InvalidInput` for a path too long for a socket address, and the send's other errors
    /// (`EMSGSIZE` for a datagram larger than the socket's buffer).
    pub async fn send_to(&self, buf: &[u8], path: impl AsRef<Path>) -> io::Result<usize> {
        let addr = socket_addr(path.as_ref())?;
        let mut retry = RETRY_FIRST;
        loop {
            // The task's budget, as every socket operation keeps it: a sender that never
            // waits still lets the loop's other tasks run.
            wait_fn(|cx| {
                if crate::executor::has_budget(cx) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            match self.send_to_once(buf, &addr) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                result => {
                    crate::executor::spend_budget();
                    return result;
                }
            }
            // On the socket's own loop and its time (a simulated clock's, perhaps): the
            // caller may be another executor's thread, with no loop of its own. A shutdown
            // meanwhile ends the wait with the runtime's error.
            let shared = self.reg.shared();
            let mut backoff = Sleep::on(Arc::clone(shared), shared.time.now().checked_add(retry));
            std::future::poll_fn(|cx| backoff.poll_unless_shut(cx)).await?;
            retry = (retry * 2).min(RETRY_MAX);
        }
    }

    /// One `sendto`, followed by a trigger state.
    fn send_to_once(&self, buf: &[u8], addr: &SocketAddrUnix) -> io::Result<usize> {
        syscall(TriggerSource::Send, || {
            rustix::net::sendto(&self.socket, buf, SendFlags::NOSIGNAL, addr)
                .map_err(io::Error::from)
        })
    }

    /// Sends one datagram to the connected peer, waiting while its queue is full (Linux wakes
    /// a connected sender when there is room).
    ///
    /// # Errors
    ///
    /// `NotConnected` on a socket not connected; `ConnectionRefused` when the peer is gone
    /// (the kernel then disconnects the socket: later sends say `NotConnected`); the send's
    /// other errors. A receive whose peer is gone waits: a datagram socket hears no hang-up.
    pub async fn send(&self, buf: &[u8]) -> io::Result<usize> {
        wait_fn(|cx| self.poll_send(cx, buf)).await
    }

    /// Polls to send one datagram to the connected peer.
    pub fn poll_send(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.reg.poll_send(self.socket.as_fd(), cx, || {
            syscall(TriggerSource::Send, || self.socket.send(buf))
        })
    }

    /// Receives one datagram if one is waiting, without waiting: `WouldBlock` if none is.
    ///
    /// # Errors
    ///
    /// `WouldBlock` when nothing is waiting; the receive's error otherwise.
    pub fn try_recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.reg.try_io(Direction::Read, || {
            syscall(TriggerSource::Recv, || self.socket.recv_from(buf))
        })
    }

    /// Receives one datagram if one is waiting (see [`try_recv_from`](Self::try_recv_from)).
    ///
    /// # Errors
    ///
    /// As [`try_recv_from`](Self::try_recv_from)'s.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.reg.try_io(Direction::Read, || {
            syscall(TriggerSource::Recv, || self.socket.recv(buf))
        })
    }

    /// Sends one datagram to the connected peer if it takes it now: `WouldBlock` if its
    /// queue is full (then [`writable`](Self::writable) waits for room).
    ///
    /// # Errors
    ///
    /// `WouldBlock` when the peer's queue is full; as [`send`](Self::send)'s otherwise.
    pub fn try_send(&self, buf: &[u8]) -> io::Result<usize> {
        self.reg.try_send(self.socket.as_fd(), || {
            syscall(TriggerSource::Send, || self.socket.send(buf))
        })
    }

    /// Sends one datagram to the socket bound at `path` if it takes it now (see
    /// [`try_send`](Self::try_send)). After a `WouldBlock`, [`writable`](Self::writable)
    /// does not say when the receiver has room (it comes back at once): to wait for room,
    /// use [`send_to`](Self::send_to).
    ///
    /// # Errors
    ///
    /// `WouldBlock` when the receiver's queue is full; as [`send_to`](Self::send_to)'s
    /// otherwise.
    pub fn try_send_to(&self, buf: &[u8], path: impl AsRef<Path>) -> io::Result<usize> {
        let addr = socket_addr(path.as_ref())?;
        self.send_to_once(buf, &addr)
    }

    /// Waits until a datagram is probably waiting (readiness can be stale: a
    /// [`try_recv`](Self::try_recv) that says `WouldBlock` clears it, and the next
    /// `readable` waits).
    ///
    /// # Errors
    ///
    /// An error (`Other`) once the runtime the socket belongs to has shut down.
    pub async fn readable(&self) -> io::Result<()> {
        wait_fn(|cx| self.reg.poll_ready(Direction::Read, cx)).await
    }

    /// Waits until a send may go (see [`readable`](Self::readable)): for a connected
    /// socket, until its peer has room; for another, only until its own buffer has (see
    /// [`try_send_to`](Self::try_send_to)).
    ///
    /// # Errors
    ///
    /// An error (`Other`) once the runtime the socket belongs to has shut down.
    pub async fn writable(&self) -> io::Result<()> {
        wait_fn(|cx| self.reg.poll_writable(self.socket.as_fd(), cx)).await
    }

    /// Shuts down the read direction, the write direction, or both (std's `shutdown`): a
    /// send from a socket shut for writing, and a send to one shut for reading, is
    /// `BrokenPipe`. A receive on a socket shut for reading takes what was queued, then
    /// waits (a blocking std `recv` would return 0 there instead).
    ///
    /// # Errors
    ///
    /// The `shutdown` system call's.
    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        syscall(TriggerSource::Syscall, || self.socket.shutdown(how))
    }

    /// The socket's pending error (`SO_ERROR`), taken.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.socket.take_error()
    }
}
