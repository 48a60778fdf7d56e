//! Unix-domain sockets on the runtime: a listener and a stream with the same I/O traits as
//! TCP's (`futures-io`'s, and tokio's and hyper's behind their features) and the same halves
//! ([`UnixStream::into_split`], [`UnixStream::split`]), for a local server (a control
//! socket, a sidecar, hyper behind a reverse proxy); and datagrams ([`UnixDatagram`]).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::SocketAddr;
use std::path::Path;
use std::task::{Context, Poll};

use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use softtimer::TriggerSource;

use crate::net::stream::{register_accepted, register_nonblocking};
use crate::net::udp::syscall;
use crate::reactor::{Direction, Registration, wait_fn};

mod datagram;
pub use datagram::UnixDatagram;

/// A close-on-exec Unix-domain socket of `kind` (with `flags` besides).
fn unix_socket(kind: SocketType, flags: SocketFlags) -> io::Result<OwnedFd> {
    let flags = SocketFlags::CLOEXEC | flags;
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        kind,
        flags,
        None,
    )?)
}

/// An `Other` error outside a runtime thread, before any system call.
fn require_runtime() -> io::Result<()> {
    crate::executor::context_shared()
        .map(drop)
        .ok_or_else(crate::reactor::no_runtime)
}

/// The socket address of `path`; a path too long for one is `InvalidInput`, saying so.
fn socket_addr(path: &Path) -> io::Result<SocketAddrUnix> {
    // `sun_path` holds 108 bytes, the last a terminating NUL.
    const MAX: usize = 107;
    SocketAddrUnix::new(path).map_err(|e| {
        let len = path.as_os_str().len();
        if len > MAX {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a Unix socket path holds at most {MAX} bytes; {} has {len}",
                    path.display()
                ),
            )
        } else {
            e.into()
        }
    })
}

/// A Unix-domain listener registered with the loop of the thread that made it; the streams
/// it accepts are registered with the loop of the task that accepts them.
///
/// ```
/// use softtimer_async::{Runtime, UnixListener, UnixStream};
///
/// let dir = std::env::temp_dir().join(format!("softtimer-doc-uds-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("echo.sock");
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let listener = UnixListener::bind(&path).unwrap();
///     softtimer_async::spawn_local(async move {
///         let (stream, _) = listener.accept().await.unwrap();
///         let mut buf = [0u8; 5];
///         stream.read_exact(&mut buf).await.unwrap();
///         stream.write_all(&buf).await.unwrap();
///     });
///     let stream = UnixStream::connect(&path).await.unwrap();
///     stream.write_all(b"hello").await.unwrap();
///     let mut buf = [0u8; 5];
///     stream.read_exact(&mut buf).await.unwrap();
///     assert_eq!(&buf, b"hello");
/// });
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct UnixListener {
    socket: std::os::unix::net::UnixListener,
    reg: Registration,
}

super::socket_descriptor!(UnixListener, socket);
super::deregister_on_drop!(UnixListener);

impl UnixListener {
    /// Binds and listens on `path` (a file the bind makes; it stays after the listener is
    /// dropped, as with std's and tokio's: remove it to bind the path again), on the calling
    /// thread's loop, with the backlog of [`TcpListener::LISTEN_BACKLOG`].
    ///
    /// # Errors
    ///
    /// `AddrInUse` when the file exists; the bind's other errors (a missing directory, a
    /// path too long for a socket address: `InvalidInput`); an `Other` error outside a
    /// runtime thread.
    ///
    /// [`TcpListener::LISTEN_BACKLOG`]: crate::TcpListener::LISTEN_BACKLOG
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        // Before the bind: it makes the file, which a failure after it would leave.
        require_runtime()?;
        let addr = socket_addr(path.as_ref())?;
        let fd = unix_socket(SocketType::STREAM, SocketFlags::empty())?;
        syscall(TriggerSource::Syscall, || {
            rustix::net::bind(&fd, &addr)?;
            rustix::net::listen(&fd, crate::TcpListener::LISTEN_BACKLOG)
        })?;
        Self::from_std(std::os::unix::net::UnixListener::from(fd))
    }

    /// Takes over a listening std socket, on the calling thread's loop; it makes the socket
    /// non-blocking itself.
    ///
    /// # Errors
    ///
    /// An `Other` error outside a runtime thread; the `ioctl` or the loop's `epoll_ctl`'s
    /// error if the socket cannot be made non-blocking or watched.
    pub fn from_std(socket: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        let reg = register_nonblocking(socket.as_fd())?;
        Ok(UnixListener { socket, reg })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Accepts a connection (`accept4`, a trigger state after it), with the peer's address
    /// (unnamed, unless the peer bound its socket to a path).
    pub async fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        wait_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls to accept a connection.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(UnixStream, SocketAddr)>> {
        let accepted = self.reg.poll_io(Direction::Read, cx, || {
            syscall(TriggerSource::Accept, || {
                rustix::net::accept_with(&self.socket, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)
                    .map_err(io::Error::from)
            })
        });
        let Poll::Ready(accepted) = accepted else {
            return Poll::Pending;
        };
        Poll::Ready(accepted.and_then(|fd| {
            let socket = std::os::unix::net::UnixStream::from(fd);
            let reg = register_accepted(socket.as_fd(), &self.reg)?;
            let stream = UnixStream { socket, reg };
            // std makes no unnamed address but through a socket: the peer's, asked for.
            let peer = syscall(TriggerSource::Syscall, || stream.peer_addr())?;
            Ok((stream, peer))
        }))
    }
}

/// A Unix-domain stream registered with the loop of the thread that made it (or accepted
/// it).
///
/// It implements `futures-io`'s `AsyncRead` and `AsyncWrite` (for itself and for
/// `&UnixStream`, so one task may read while another writes), tokio's with the `tokio-io`
/// feature, and hyper's `rt::Read` and `rt::Write` with the `hyper` feature. Every `read`,
/// `write` and `writev` is followed by a trigger state.
///
/// ```
/// use softtimer_async::{Runtime, UnixStream};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let (a, b) = UnixStream::pair().unwrap();
///     a.write_all(b"ping").await.unwrap();
///     let mut got = [0u8; 4];
///     b.read_exact(&mut got).await.unwrap();
///     assert_eq!(&got, b"ping");
/// });
/// ```
#[derive(Debug)]
pub struct UnixStream {
    socket: std::os::unix::net::UnixStream,
    reg: Registration,
}

super::socket_descriptor!(UnixStream, socket);
super::deregister_on_drop!(UnixStream);

impl UnixStream {
    /// Connects to the listener at `path`: a non-blocking `connect`, which on Linux either
    /// connects at once (the connection waits in the listener's backlog until accepted) or
    /// fails. Async as tokio's, though it never waits.
    ///
    /// # Errors
    ///
    /// `NotFound` when nothing is at `path`, `ConnectionRefused` when what is there does not
    /// listen, `WouldBlock` when the listener's backlog is full (as tokio's: try again
    /// later), `InvalidInput` for a path too long for a socket address; an `Other` error
    /// outside a runtime thread.
    pub async fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        require_runtime()?;
        let addr = socket_addr(path.as_ref())?;
        let fd = unix_socket(SocketType::STREAM, SocketFlags::NONBLOCK)?;
        syscall(TriggerSource::Syscall, || rustix::net::connect(&fd, &addr))?;
        UnixStream::from_std(std::os::unix::net::UnixStream::from(fd))
    }

    /// Two streams connected to each other (`socketpair`), on the calling thread's loop.
    ///
    /// # Errors
    ///
    /// The `socketpair` system call's; an `Other` error outside a runtime thread.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        Ok((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
    }

    /// Takes over a connected std stream, on the calling thread's loop; it makes the socket
    /// non-blocking itself (tokio's wants that done first).
    ///
    /// # Errors
    ///
    /// As [`UnixListener::from_std`]'s.
    pub fn from_std(socket: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        let reg = register_nonblocking(socket.as_fd())?;
        Ok(UnixStream { socket, reg })
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket.peer_addr()
    }

    crate::net::stream::stream_io!();

    /// Splits the stream into a read half and a write half that can move to different tasks
    /// and be dropped separately; [`OwnedReadHalf::reunite`] puts them back together.
    /// Dropping the write half shuts the stream's write direction down (the peer reads end
    /// of stream), as closing it through the I/O traits does. To share the stream without
    /// moving it, `&UnixStream` has `futures-io`'s traits too.
    ///
    /// ```
    /// use softtimer_async::{Runtime, UnixStream};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let (client, server) = UnixStream::pair().unwrap();
    ///     let (rx, tx) = server.into_split();
    ///     // The write half answers from another task, then goes away: end of stream.
    ///     softtimer_async::spawn_local(async move { tx.write_all(b"ping").await.unwrap() });
    ///     let mut got = Vec::new();
    ///     let mut buf = [0u8; 16];
    ///     loop {
    ///         match client.read(&mut buf).await.unwrap() {
    ///             0 => break,
    ///             n => got.extend_from_slice(&buf[..n]),
    ///         }
    ///     }
    ///     assert_eq!(got, b"ping");
    ///     client.write_all(b"pong").await.unwrap();
    ///     let mut pong = [0u8; 4];
    ///     rx.read_exact(&mut pong).await.unwrap();
    ///     assert_eq!(&pong, b"pong");
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
    /// use softtimer_async::{Runtime, UnixStream};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let (client, mut server) = UnixStream::pair().unwrap();
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

crate::net::split::split_halves!(UnixStream, SocketAddr);
