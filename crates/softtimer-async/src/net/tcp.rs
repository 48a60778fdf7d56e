//! TCP on the runtime: a listener, a stream with the `futures-io` traits (and tokio's and
//! hyper's behind their features), and the stream's halves ([`TcpStream::into_split`],
//! [`TcpStream::split`]).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::task::{Context, Poll};

use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};
use softtimer::TriggerSource;

use crate::net::addr::first_that_opens;
use crate::net::stream::{register_accepted, register_nonblocking};
use crate::net::udp::syscall;
use crate::reactor::{Direction, Registration, take_socket_error, wait_fn};

/// A close-on-exec TCP socket (with `flags` besides) of `addr`'s address family.
fn tcp_socket(addr: &SocketAddr, flags: SocketFlags) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let flags = SocketFlags::CLOEXEC | flags;
    let socket = rustix::net::socket_with(family, SocketType::STREAM, flags, None)?;
    Ok(socket)
}

/// A listening socket on `addr` with `SO_REUSEADDR` (and `SO_REUSEPORT` if `reuse_port`),
/// its backlog [`TcpListener::LISTEN_BACKLOG`].
fn listen(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::TcpListener> {
    let fd = tcp_socket(&addr, SocketFlags::empty())?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    if reuse_port {
        sockopt::set_socket_reuseport(&fd, true)?;
    }
    rustix::net::bind(&fd, &addr)?;
    rustix::net::listen(&fd, TcpListener::LISTEN_BACKLOG)?;
    Ok(std::net::TcpListener::from(fd))
}

/// A TCP listener registered with the loop of the thread that made it; the streams it
/// accepts are registered with the loop of the task that accepts them.
///
/// ```
/// use softtimer_async::{Runtime, TcpListener, TcpStream};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let addr = listener.local_addr().unwrap();
///     softtimer_async::spawn(async move {
///         let (stream, _) = listener.accept().await.unwrap();
///         let mut buf = [0u8; 5];
///         stream.read_exact(&mut buf).await.unwrap();
///         stream.write_all(&buf).await.unwrap();
///     });
///     let stream = TcpStream::connect(addr).await.unwrap();
///     stream.write_all(b"hello").await.unwrap();
///     let mut buf = [0u8; 5];
///     stream.read_exact(&mut buf).await.unwrap();
///     assert_eq!(&buf, b"hello");
/// });
/// ```
#[derive(Debug)]
pub struct TcpListener {
    socket: std::net::TcpListener,
    reg: Registration,
}

super::socket_descriptor!(TcpListener, socket);
super::deregister_on_drop!(TcpListener);

impl TcpListener {
    /// Binds and listens on `addr`, on the calling thread's loop: the first of its
    /// addresses that binds (a host name is looked up as
    /// [`lookup_host`](crate::net::lookup_host) does, off the loop; a literal address binds
    /// at once). Async and with `SO_REUSEADDR` set (a restarted server rebinds a port whose
    /// old connections linger in `TIME_WAIT`), as tokio's; unlike std's and tokio's (128), its
    /// backlog is [`LISTEN_BACKLOG`](Self::LISTEN_BACKLOG): a burst of connects past the
    /// backlog has its SYNs dropped and waits a second for the client to send them again.
    /// In synchronous code, bind a std listener and hand it over with
    /// [`TcpListener::from_std`] on a runtime thread (inside `block_on`, a task, or
    /// [`Runtime::enter`](crate::Runtime::enter)'s context).
    ///
    /// A name that resolves to both families binds the first address that binds, so with
    /// a fixed port taken in one family it listens in the other only (as std's and tokio's
    /// do); bind each address to listen on both.
    ///
    /// # Errors
    ///
    /// The last address's bind error when none binds; the resolver's error for a name it
    /// cannot resolve; `InvalidInput` for an address string that is not `host:port` and for
    /// a name that resolves to no address (or an empty slice); an `Other` error outside a
    /// runtime thread, or if the lookup could not run (the runtime shutting down).
    pub async fn bind(addr: impl crate::net::ToSocketAddrs) -> io::Result<TcpListener> {
        let listener = first_that_opens(addr, |addr| {
            std::future::ready(syscall(TriggerSource::Syscall, || listen(addr, false)))
        })
        .await?;
        Self::from_std(listener)
    }

    /// The backlog [`bind`](Self::bind) and [`bind_reuse_port`](Self::bind_reuse_port)
    /// listen with (the kernel caps it at `net.core.somaxconn`, 4096 by default): room for
    /// a burst of connects a loop has not accepted yet, where std's and tokio's 128 (mio's
    /// since 1.1) drop the rest's SYNs. nginx listens with 511, Go with `somaxconn`.
    pub const LISTEN_BACKLOG: i32 = 1024;

    /// Binds with `SO_REUSEPORT` as well, so that each loop of a thread-per-core server can
    /// have a listener of its own on one port (the kernel spreads connections over them).
    ///
    /// # Errors
    ///
    /// The socket's, the bind's or the listen's error (`AddrInUse` when a listener without
    /// `SO_REUSEPORT`, or another user's, has the port); an `Other` error outside a runtime
    /// thread.
    pub fn bind_reuse_port(addr: SocketAddr) -> io::Result<TcpListener> {
        Self::from_std(listen(addr, true)?)
    }

    /// Takes over a listening std socket (made non-blocking), on the calling thread's loop.
    ///
    /// # Errors
    ///
    /// An `Other` error outside a runtime thread; the `ioctl` or the loop's `epoll_ctl`'s
    /// error if the socket cannot be made non-blocking or watched.
    pub fn from_std(socket: std::net::TcpListener) -> io::Result<TcpListener> {
        let reg = register_nonblocking(socket.as_fd())?;
        Ok(TcpListener { socket, reg })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Accepts a connection (`accept4`, a trigger state after it).
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        wait_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls to accept a connection.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        let accepted = self.reg.poll_io(Direction::Read, cx, || {
            syscall(TriggerSource::Accept, || {
                rustix::net::acceptfrom_with(
                    &self.socket,
                    SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
                )
                .map_err(io::Error::from)
            })
        });
        let Poll::Ready(accepted) = accepted else {
            return Poll::Pending;
        };
        Poll::Ready(accepted.and_then(|(fd, addr)| {
            let socket = std::net::TcpStream::from(fd);
            let reg = register_accepted(socket.as_fd(), &self.reg)?;
            let stream = TcpStream { socket, reg };
            let peer = match addr.and_then(|a| SocketAddr::try_from(a).ok()) {
                Some(peer) => peer,
                None => stream.peer_addr()?,
            };
            Ok((stream, peer))
        }))
    }
}

/// A TCP stream registered with the loop of the thread that made it (or accepted it).
///
/// It implements `futures-io`'s `AsyncRead` and `AsyncWrite` (for itself and for `&TcpStream`,
/// so one task may read while another writes), tokio's with the `tokio-io` feature, and
/// hyper's `rt::Read` and `rt::Write` with the `hyper` feature. Every `read`, `write` and
/// `writev` is followed by a trigger state.
///
/// Reading without waiting: [`try_read`](Self::try_read) when
/// [`readable`](Self::readable) says bytes may be there.
///
/// ```
/// use softtimer_async::{Runtime, TcpListener, TcpStream};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
///     let (server, _) = listener.accept().await.unwrap();
///     let mut buf = [0u8; 16];
///     let nothing = server.try_read(&mut buf).unwrap_err();
///     assert_eq!(nothing.kind(), std::io::ErrorKind::WouldBlock);
///     client.writable().await.unwrap();
///     assert_eq!(client.try_write(b"hi").unwrap(), 2);
///     let n = loop {
///         server.readable().await.unwrap();
///         match server.try_read(&mut buf) {
///             Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
///             read => break read.unwrap(),
///         }
///     };
///     assert_eq!(&buf[..n], b"hi");
/// });
/// ```
#[derive(Debug)]
pub struct TcpStream {
    socket: std::net::TcpStream,
    reg: Registration,
}

super::socket_descriptor!(TcpStream, socket);
super::deregister_on_drop!(TcpStream);

impl TcpStream {
    /// Connects to `addr`: a socket address (or a slice of them), or a `"host:port"` string
    /// (or a host and a port) whose host may be a name, resolved off the loop
    /// ([`lookup_host`]). Each of its
    /// addresses is tried in turn (non-blocking `connect`, waiting for the handshake) until
    /// one connects; the error is the last address's.
    ///
    /// ```
    /// use softtimer_async::{Runtime, TcpListener, TcpStream};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let port = listener.local_addr().unwrap().port();
    ///     let stream = TcpStream::connect(("localhost", port)).await.unwrap();
    ///     let (_, peer) = listener.accept().await.unwrap();
    ///     assert_eq!(peer, stream.local_addr().unwrap());
    /// });
    /// ```
    ///
    /// The addresses are tried one after another, each until the kernel gives up on it (a
    /// silent one, for minutes): bound the whole with [`timeout`](crate::time::timeout).
    ///
    /// # Errors
    ///
    /// What [`lookup_host`] says of a bad address or an unknown name, `InvalidInput` for an
    /// empty slice, and the connect error of the last address tried (`ConnectionRefused`
    /// where nothing listens); an `Other` error outside a runtime thread.
    ///
    /// [`lookup_host`]: crate::net::lookup_host
    pub async fn connect(addr: impl crate::net::ToSocketAddrs) -> io::Result<TcpStream> {
        first_that_opens(addr, TcpStream::connect_addr).await
    }

    async fn connect_addr(addr: SocketAddr) -> io::Result<TcpStream> {
        let fd = tcp_socket(&addr, SocketFlags::NONBLOCK)?;
        match syscall(TriggerSource::Syscall, || rustix::net::connect(&fd, &addr)) {
            Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
            Err(e) => return Err(e.into()),
        }
        let stream = TcpStream::from_std(std::net::TcpStream::from(fd))?;
        wait_fn(|cx| {
            stream.reg.poll_io(Direction::Write, cx, || {
                take_socket_error(&stream.socket)?;
                match stream.socket.peer_addr() {
                    Ok(_) => Ok(()),
                    // Not connected yet: wait for the next writability.
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                        Err(io::ErrorKind::WouldBlock.into())
                    }
                    Err(e) => Err(e),
                }
            })
        })
        .await?;
        Ok(stream)
    }

    /// Takes over a connected std stream (made non-blocking), on the calling thread's loop.
    ///
    /// # Errors
    ///
    /// As [`TcpListener::from_std`]'s.
    pub fn from_std(socket: std::net::TcpStream) -> io::Result<TcpStream> {
        let reg = register_nonblocking(socket.as_fd())?;
        Ok(TcpStream { socket, reg })
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket.peer_addr()
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.socket.set_nodelay(nodelay)
    }

    crate::net::stream::stream_io!();

    /// Splits the stream into a read half and a write half that can move to different tasks
    /// and be dropped separately; [`OwnedReadHalf::reunite`]
    /// puts them back together. Dropping the write half shuts the write direction down (the
    /// peer reads end of stream), as closing it through the I/O traits does. To share the
    /// stream without moving it, `&TcpStream` has `futures-io`'s traits too.
    ///
    /// ```
    /// use softtimer_async::{Runtime, TcpListener, TcpStream};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (server, _) = listener.accept().await.unwrap();
    ///     let (rx, tx) = server.into_split();
    ///     // The write half echoes from another task.
    ///     let echo = softtimer_async::spawn_local(async move {
    ///         tx.write_all(b"ping").await.unwrap();
    ///         tx
    ///     });
    ///     let mut got = [0u8; 4];
    ///     client.read_exact(&mut got).await.unwrap();
    ///     assert_eq!(&got, b"ping");
    ///     client.write_all(b"pong").await.unwrap();
    ///     rx.read_exact(&mut got).await.unwrap();
    ///     assert_eq!(&got, b"pong");
    ///     let stream = rx.reunite(echo.await.unwrap()).unwrap();
    ///     assert_eq!(stream.peer_addr().unwrap(), client.local_addr().unwrap());
    /// });
    /// ```
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.owned_halves()
    }

    /// Splits the stream into a read half and a write half borrowed from it, for two
    /// futures of one task (a copy each way, a `select!`), as tokio's `split`; halves that
    /// move to different tasks come from [`into_split`](Self::into_split). Dropping this
    /// write half leaves the stream as it is; closing it through an I/O trait shuts the
    /// write direction down.
    ///
    /// ```
    /// use softtimer_async::{Runtime, TcpListener, TcpStream};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (mut server, _) = listener.accept().await.unwrap();
    ///     let (reader, writer) = server.split();
    ///     client.write_all(b"ping").await.unwrap();
    ///     let mut got = [0u8; 4];
    ///     reader.read_exact(&mut got).await.unwrap();
    ///     writer.write_all(&got).await.unwrap();
    ///     client.read_exact(&mut got).await.unwrap();
    ///     assert_eq!(&got, b"ping");
    /// });
    /// ```
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        self.borrowed_halves()
    }
}

crate::net::split::split_halves!(TcpStream, SocketAddr);
