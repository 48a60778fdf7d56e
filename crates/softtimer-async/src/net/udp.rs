//! UDP on the runtime: single datagrams, batches (`recvmmsg`, `sendmmsg`), segmentation
//! offload (GSO and GRO through quinn-udp, where the kernel has them), and paced sends.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use softtimer::TriggerSource;
use softtimer_rt::RecvBatch;

use crate::executor::{self, LoopShared};
use crate::net::ToSocketAddrs;
use crate::net::addr::first_that_opens;
use crate::pace::Departures;
use crate::reactor::{Direction, Registration, wait_fn};

/// A UDP socket registered with the loop of the thread that made it.
///
/// Every send and receive it makes is followed by a trigger state of the calling thread's
/// loop.
/// It is cheap to share (`&self` everywhere, and a clone is the same socket: several tasks
/// may send and receive at once), its descriptor is there for socket options ([`AsFd`]),
/// and [`UdpSocket::send_at`] and [`PacedSender`](crate::PacedSender) send from it at chosen
/// times.
///
/// ```
/// use softtimer_async::{Runtime, UdpSocket};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let echo = UdpSocket::bind("127.0.0.1:0").await.unwrap();
///     let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
///     let to = echo.local_addr().unwrap();
///     softtimer_async::spawn(async move {
///         let mut buf = [0u8; 1500];
///         let (n, from) = echo.recv_from(&mut buf).await.unwrap();
///         echo.send_to(&buf[..n], from).await.unwrap();
///     });
///     client.send_to(b"ping", to).await.unwrap();
///     let mut buf = [0u8; 16];
///     let (n, _) = client.recv_from(&mut buf).await.unwrap();
///     assert_eq!(&buf[..n], b"ping");
/// });
/// ```
#[derive(Clone, Debug)]
pub struct UdpSocket {
    pub(crate) inner: Arc<UdpInner>,
}

super::socket_descriptor!(UdpSocket, inner.socket);

#[derive(Debug)]
pub(crate) struct UdpInner {
    pub socket: Arc<std::net::UdpSocket>,
    pub reg: Registration,
    /// Segmentation offload and ECN, when asked for.
    offload: Option<UdpSocketState>,
    /// The departure queue of [`UdpSocket::send_at`], made on first use.
    departures: OnceLock<Arc<Departures>>,
}

impl Drop for UdpInner {
    /// Takes the socket out of the loop's epoll set now: its descriptor may outlive it (a
    /// paced departure still queued holds it, or a duplicate made before `from_std`), and
    /// its readiness would otherwise wake the loop under a token another socket gets next.
    fn drop(&mut self) {
        self.reg.deregister(self.socket.as_fd());
    }
}

impl UdpSocket {
    /// Binds `addr` on the calling thread's loop: the first of its addresses that binds (a
    /// host name is looked up as [`lookup_host`](crate::net::lookup_host) does, off the
    /// loop; a literal address binds at once). Async, as tokio's: in synchronous code, bind
    /// a std socket and hand it over with [`UdpSocket::from_std`] on a runtime thread
    /// (inside `block_on`, a task, or [`Runtime::enter`](crate::Runtime::enter)'s context).
    ///
    /// # Errors
    ///
    /// The last address's bind error when none binds; the resolver's error for a name it
    /// cannot resolve; `InvalidInput` for an address string that is not `host:port`, for
    /// a name that resolves to no address and for an empty slice; an `Other` error outside
    /// a runtime thread, or if the lookup could not run (the runtime shutting down).
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        Self::from_std(first_that_opens(addr, bind_std).await?)
    }

    /// As [`UdpSocket::bind`], with segmentation offload (GSO on send, GRO on receive) and
    /// ECN through quinn-udp where the kernel has them: send with
    /// [`UdpSocket::send_transmit`], receive with [`UdpSocket::recv_segments`] (GRO hands
    /// several datagrams over as one buffer that plain `recv_from` cannot split).
    ///
    /// # Errors
    ///
    /// As [`UdpSocket::bind`]'s, and quinn-udp's if it cannot set the socket up.
    pub async fn bind_with_offload(addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        Self::from_std_with_offload(first_that_opens(addr, bind_std).await?)
    }

    /// Takes over a bound std socket (made non-blocking), on the calling thread's loop.
    ///
    /// # Errors
    ///
    /// An `Other` error outside a runtime thread; the error of making the socket
    /// non-blocking or of the loop's `epoll_ctl` otherwise.
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        let shared = executor::context_shared().ok_or_else(crate::reactor::no_runtime)?;
        Self::on(shared, socket, false)
    }

    /// Takes over a bound std socket, with segmentation offload (see
    /// [`UdpSocket::bind_with_offload`]).
    ///
    /// # Errors
    ///
    /// As [`UdpSocket::from_std`]'s, and quinn-udp's if it cannot set the socket up.
    pub fn from_std_with_offload(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        let shared = executor::context_shared().ok_or_else(crate::reactor::no_runtime)?;
        Self::on(shared, socket, true)
    }

    pub(crate) fn on(
        shared: Arc<LoopShared>,
        socket: std::net::UdpSocket,
        offload: bool,
    ) -> io::Result<UdpSocket> {
        socket.set_nonblocking(true)?;
        let offload = if offload {
            Some(UdpSocketState::new((&socket).into())?)
        } else {
            None
        };
        let reg = Registration::new_read_only(shared, socket.as_fd())?;
        Ok(UdpSocket {
            inner: Arc::new(UdpInner {
                socket: Arc::new(socket),
                reg,
                offload,
                departures: OnceLock::new(),
            }),
        })
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.socket.local_addr()
    }

    /// The peer it is connected to.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.socket.peer_addr()
    }

    /// Connects it to `addr` (the first of its addresses that connects; a host name is
    /// looked up off the loop, as [`lookup_host`](crate::net::lookup_host) does):
    /// [`UdpSocket::send`] and [`UdpSocket::recv`] then go to and come from that peer only,
    /// and errors the peer reports (ICMP port unreachable) come back from them as
    /// `io::Error`s.
    ///
    /// # Errors
    ///
    /// The last address's connect error when none connects (an address of the other
    /// family than the socket's, for one); otherwise as [`UdpSocket::bind`]'s.
    pub async fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<()> {
        let socket = &self.inner.socket;
        first_that_opens(addr, |addr| {
            std::future::ready(syscall(TriggerSource::Syscall, || socket.connect(addr)))
        })
        .await
    }

    /// Sends one datagram to `to`: a socket address (sent at once), or anything else
    /// [`ToSocketAddrs`] takes, whose first address it goes to (a host name looked up off
    /// the loop first, as tokio's `send_to` does; look a name up once with
    /// [`lookup_host`](crate::net::lookup_host) to send to it often).
    ///
    /// # Errors
    ///
    /// The send's error (a socket error the kernel queued for an earlier datagram, such as
    /// `ConnectionRefused`, comes back here too); as [`UdpSocket::bind`]'s for an address
    /// that gives none (`InvalidInput`, the resolver's error, or `Other` for a host name
    /// outside a runtime thread; a socket address, typed or a literal string, needs none).
    pub async fn send_to(&self, buf: &[u8], to: impl ToSocketAddrs) -> io::Result<usize> {
        let to = crate::net::addr::first_address(to).await?;
        wait_fn(|cx| self.poll_send_to(cx, buf, to)).await
    }

    /// Polls to send one datagram to `to`.
    pub fn poll_send_to(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
        to: SocketAddr,
    ) -> Poll<io::Result<usize>> {
        let socket = &self.inner.socket;
        self.poll_write_io(cx, || {
            syscall(TriggerSource::Send, || socket.send_to(buf, to))
        })
    }

    /// Runs a send once the socket may be writable; a send that has to wait makes the loop
    /// watch the socket's writability (see [`Registration::new_read_only`]).
    fn poll_write_io<R>(
        &self,
        cx: &mut Context<'_>,
        op: impl FnMut() -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.inner.reg.poll_send(self.inner.socket.as_fd(), cx, op)
    }

    /// Waits until the socket may be readable: a datagram is probably waiting (readiness
    /// can be stale: a [`try_recv_from`](Self::try_recv_from) that says `WouldBlock`
    /// clears it, and the next `readable` waits).
    ///
    /// ```
    /// use softtimer_async::{Runtime, UdpSocket};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let rx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     let tx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     tx.send_to(b"hi", rx.local_addr().unwrap()).await.unwrap();
    ///     let mut buf = [0u8; 16];
    ///     loop {
    ///         rx.readable().await.unwrap();
    ///         match rx.try_recv_from(&mut buf) {
    ///             Ok((n, _)) => break assert_eq!(&buf[..n], b"hi"),
    ///             Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
    ///             Err(e) => panic!("{e}"),
    ///         }
    ///     }
    /// });
    /// ```
    ///
    /// # Errors
    ///
    /// An error (`Other`) once the runtime the socket belongs to has shut down.
    pub async fn readable(&self) -> io::Result<()> {
        wait_fn(|cx| self.inner.reg.poll_ready(Direction::Read, cx)).await
    }

    /// Waits until the socket may be writable (see [`readable`](Self::readable)).
    ///
    /// # Errors
    ///
    /// An error (`Other`) once the runtime the socket belongs to has shut down.
    pub async fn writable(&self) -> io::Result<()> {
        wait_fn(|cx| self.poll_writable(cx)).await
    }

    /// Receives one datagram if one is waiting, without waiting: `WouldBlock` if none is.
    ///
    /// # Errors
    ///
    /// `WouldBlock` when nothing is waiting; the receive's error otherwise.
    pub fn try_recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let socket = &self.inner.socket;
        self.inner.reg.try_io(Direction::Read, || {
            syscall(TriggerSource::Recv, || socket.recv_from(buf))
        })
    }

    /// Receives one datagram from the connected peer if one is waiting (see
    /// [`try_recv_from`](Self::try_recv_from)).
    ///
    /// # Errors
    ///
    /// As [`try_recv_from`](Self::try_recv_from)'s.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let socket = &self.inner.socket;
        self.inner.reg.try_io(Direction::Read, || {
            syscall(TriggerSource::Recv, || socket.recv(buf))
        })
    }

    /// Sends one datagram to `to` if the socket takes it now: `WouldBlock` if its buffer is
    /// full (then [`writable`](Self::writable) waits for room).
    ///
    /// # Errors
    ///
    /// `WouldBlock` when the socket's buffer is full; the send's error otherwise.
    pub fn try_send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        let socket = &self.inner.socket;
        self.try_write_io(|| syscall(TriggerSource::Send, || socket.send_to(buf, to)))
    }

    /// Sends one datagram to the connected peer if the socket takes it now (see
    /// [`try_send_to`](Self::try_send_to)).
    ///
    /// # Errors
    ///
    /// As [`try_send_to`](Self::try_send_to)'s.
    pub fn try_send(&self, buf: &[u8]) -> io::Result<usize> {
        let socket = &self.inner.socket;
        self.try_write_io(|| syscall(TriggerSource::Send, || socket.send(buf)))
    }

    /// A send tried once; one that says `WouldBlock` makes the loop watch writability.
    fn try_write_io<R>(&self, op: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        self.inner.reg.try_send(self.inner.socket.as_fd(), op)
    }

    /// Receives one datagram, with its sender.
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        wait_fn(|cx| self.poll_recv_from(cx, buf)).await
    }

    /// Polls to receive one datagram.
    pub fn poll_recv_from(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<(usize, SocketAddr)>> {
        let socket = &self.inner.socket;
        self.inner.reg.poll_io(Direction::Read, cx, || {
            syscall(TriggerSource::Recv, || socket.recv_from(buf))
        })
    }

    /// Sends one datagram to the connected peer.
    pub async fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let socket = &self.inner.socket;
        wait_fn(|cx| self.poll_write_io(cx, || syscall(TriggerSource::Send, || socket.send(buf))))
            .await
    }

    /// Receives one datagram from the connected peer.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let socket = &self.inner.socket;
        wait_fn(|cx| {
            self.inner.reg.poll_io(Direction::Read, cx, || {
                syscall(TriggerSource::Recv, || socket.recv(&mut *buf))
            })
        })
        .await
    }

    /// Receives a batch of datagrams with one `recvmmsg` (softtimer-rt's [`RecvBatch`]):
    /// waits until at least one is there, then takes as many as are waiting, up to the
    /// batch's capacity.
    pub async fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        let socket = &self.inner.socket;
        let room = batch.capacity();
        wait_fn(|cx| {
            self.inner
                .reg
                .poll_io_partial(Direction::Read, cx, room, || {
                    match syscall(TriggerSource::Recv, || {
                        batch.recv(socket.as_fd(), usize::MAX, false)
                    }) {
                        Ok(0) => Err(io::ErrorKind::WouldBlock.into()),
                        other => other,
                    }
                })
        })
        .await
    }

    /// Sends `(payload, destination)` datagrams with `sendmmsg`, as many per call as the
    /// socket's buffer takes, until all are sent; returns how many were.
    ///
    /// # Errors
    ///
    /// The error of the first call, when it sent nothing. An error after some were sent
    /// ends the batch with their count instead, as `sendmmsg` itself does, so that a retry
    /// from there sends none twice: an error of a datagram (too large, no route) comes back
    /// when the rest is sent again; an error of the socket (an ICMP error queued on a
    /// connected one) is lost, as `sendmmsg` loses it.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: dropped while it waits for room (a `timeout`, a `select!`), it has
    /// sent the datagrams before that wait and says nothing of how many. Where it may be
    /// cancelled, send with [`send_to`](Self::send_to), one datagram a call, or give the
    /// batch its own task and await that.
    pub async fn send_batch(&self, messages: &[(&[u8], SocketAddr)]) -> io::Result<usize> {
        let socket = &self.inner.socket;
        let mut sent = 0;
        while sent < messages.len() {
            let rest = &messages[sent..];
            let result = wait_fn(|cx| {
                self.poll_write_io(cx, || {
                    match syscall(TriggerSource::Send, || {
                        softtimer_rt::send_batch(&**socket, rest)
                    }) {
                        Ok(0) => Err(io::ErrorKind::WouldBlock.into()),
                        other => other,
                    }
                })
            })
            .await;
            match result {
                Ok(n) => sent += n,
                Err(_) if sent > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(sent)
    }

    fn offload(&self) -> io::Result<&UdpSocketState> {
        self.inner.offload.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "segmentation offload is on for sockets made with bind_with_offload only",
            )
        })
    }

    /// How many datagrams one [`Transmit`] may carry (1 where the kernel has no GSO).
    pub fn max_gso_segments(&self) -> usize {
        self.inner
            .offload
            .as_ref()
            .map_or(1, UdpSocketState::max_gso_segments)
    }

    /// How many datagrams one received buffer may hold (1 where the kernel has no GRO).
    pub fn gro_segments(&self) -> usize {
        self.inner
            .offload
            .as_ref()
            .map_or(1, UdpSocketState::gro_segments)
    }

    /// Sends a [`Transmit`]: with `segment_size`, its contents are several datagrams of that
    /// size (the last may be shorter) handed to the kernel in one call (GSO).
    ///
    /// # Errors
    ///
    /// `Unsupported` on a socket made without offload; the send's error otherwise
    /// (`EMSGSIZE` for a datagram larger than the path allows, `ENETUNREACH`, …). quinn's
    /// own sends, through [`quinn::SoftRuntime`](crate::quinn::SoftRuntime), pass those over
    /// as quinn's other runtimes do (UDP's loss is the transport's to handle).
    pub async fn send_transmit(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        let state = self.offload()?;
        let socket = &self.inner.socket;
        wait_fn(|cx| {
            self.poll_write_io(cx, || {
                syscall(TriggerSource::Send, || {
                    state.try_send((&**socket).into(), transmit)
                })
            })
        })
        .await
    }

    /// Receives into `bufs`, describing each in `meta` (sender, length, the stride of the
    /// datagrams GRO coalesced into it, ECN): the number of buffers filled, at most the
    /// shorter of the two slices' lengths and [`quinn_udp::BATCH_SIZE`] (32 on Linux).
    ///
    /// # Errors
    ///
    /// `Unsupported` on a socket made without offload; the receive's error otherwise.
    pub async fn recv_segments(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        wait_fn(|cx| self.poll_recv_segments(cx, bufs, meta)).await
    }

    pub(crate) fn poll_recv_segments(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let state = match self.offload() {
            Ok(state) => state,
            Err(e) => return Poll::Ready(Err(e)),
        };
        let socket = &self.inner.socket;
        // Fewer datagrams than there was room for: the socket is drained, and the next call
        // waits for readiness instead of asking the kernel to say `WouldBlock`. quinn-udp
        // takes at most a batch a call, so room beyond it would read a full batch as drained.
        let room = meta.len().min(bufs.len()).min(quinn_udp::BATCH_SIZE);
        self.inner
            .reg
            .poll_io_partial(Direction::Read, cx, room, || {
                // quinn-udp fills a `meta` for every buffer it receives into.
                syscall(TriggerSource::Recv, || {
                    state.recv((&**socket).into(), &mut bufs[..room], &mut meta[..room])
                })
            })
    }

    /// Sends a transmit if the socket may be writable, without waiting: `WouldBlock` if not.
    #[cfg(feature = "quinn")] // the quinn runtime's
    pub(crate) fn try_send_transmit(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        let state = self.offload()?;
        let socket = &self.inner.socket;
        self.try_write_io(|| {
            syscall(TriggerSource::Send, || {
                state.send((&**socket).into(), transmit)
            })
        })
    }

    pub(crate) fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let fd = self.inner.socket.as_fd();
        self.inner.reg.poll_writable(fd, cx)
    }

    #[cfg(feature = "quinn")] // the quinn runtime's
    pub(crate) fn may_fragment(&self) -> bool {
        self.inner
            .offload
            .as_ref()
            .is_none_or(UdpSocketState::may_fragment)
    }

    /// Sends a copy of `buf` to `to` at `at`: the datagram is queued in the socket's
    /// departure queue and leaves from a soft-event handler at the first trigger state at
    /// or after `at`, without waking this task (softtimer-net's departure-time scheduler).
    /// Returns once it is queued; waits only while the queue is full. A departure that fails
    /// is reported by the next call, which then queues nothing (send that datagram again).
    /// The queue keeps the socket open, and its port bound, until its last datagram has
    /// left, handles dropped or not. `at` is mapped to the runtime's clock when queued and
    /// not checked against `std::time::Instant` again (a timer is): after a long wait a
    /// datagram may leave before `at` by `std::time::Instant`, by the two clocks' difference
    /// in rate (parts per million of the wait).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use softtimer_async::{Runtime, UdpSocket};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let rx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     let tx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     let to = rx.local_addr().unwrap();
    ///     let at = Instant::now() + Duration::from_micros(300);
    ///     tx.send_at(b"later", to, at).await.unwrap();
    ///     let mut buf = [0u8; 8];
    ///     let (n, _) = rx.recv_from(&mut buf).await.unwrap();
    ///     assert!(Instant::now() >= at && &buf[..n] == b"later");
    /// });
    /// ```
    pub async fn send_at(&self, buf: &[u8], to: SocketAddr, at: Instant) -> io::Result<()> {
        let departures = self
            .inner
            .departures
            .get_or_init(|| Departures::new(&self.inner, crate::pace::DEFAULT_QUEUE, None));
        departures.send_at(buf, to, at).await
    }
}

/// A std socket bound to `addr`, the `bind` a trigger state.
async fn bind_std(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    syscall(TriggerSource::Syscall, || std::net::UdpSocket::bind(addr))
}

/// Runs a non-blocking system call, then a trigger state of the calling thread's loop.
#[inline]
pub(crate) fn syscall<R>(source: TriggerSource, call: impl FnOnce() -> R) -> R {
    let result = call();
    executor::trigger(source);
    result
}
