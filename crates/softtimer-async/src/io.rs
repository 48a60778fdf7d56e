//! Any pollable descriptor on the loop: [`AsyncFd`] for what the runtime has no type of its
//! own for (a TUN device, a pipe, an eventfd, a netlink or raw socket, a serial line), as
//! tokio's `AsyncFd`.
//!
//! The descriptor joins the loop's epoll set, edge-triggered; a task waits for readiness,
//! makes its system call, and clears the readiness when the call says `WouldBlock`. Every
//! call made through [`AsyncFd::async_io`] or [`AsyncFdReadyGuard::try_io`] is followed by a
//! trigger state, as the runtime's own sockets' are.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::task::{Context, Poll};

use softtimer::TriggerSource;

pub use softtimer_rt::Interest;

use crate::net::udp::syscall;
use crate::reactor::{Direction, Registration, wait_fn};

/// A descriptor `T` watched by the loop of the thread that made it.
///
/// The descriptor must be non-blocking (`O_NONBLOCK`; [`AsyncFd::new`] refuses one that is
/// not) and pollable (a socket, pipe, eventfd, timerfd, TUN device, or a character device
/// whose driver supports poll; not a regular file or a directory, which epoll refuses). It is
/// taken out of the epoll set when the `AsyncFd` is dropped (then `T` is dropped, which
/// usually closes it) or [`into_inner`](AsyncFd::into_inner) hands it back.
///
/// Both directions start out ready (the first call is simply tried), and writability is
/// watched only once a write has had to wait, so that a socket whose every sent packet
/// reports it writable again (raw, netlink, UDP) does not wake the loop per packet. A task's
/// waits and calls through it count against its budget, as the runtime's sockets' do, so a
/// descriptor that is always ready does not keep the loop's other tasks from running.
///
/// ```
/// use std::io;
/// use softtimer_async::Runtime;
/// use softtimer_async::io::{AsyncFd, Interest};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     // A pipe whose read end is non-blocking: one task writes, this one waits and reads.
///     let (rx, mut tx) = std::io::pipe().unwrap();
///     rustix::io::ioctl_fionbio(&rx, true).unwrap();
///     let rx = AsyncFd::new(rx).unwrap();
///     softtimer_async::spawn(async move {
///         softtimer_async::time::sleep(std::time::Duration::from_millis(1)).await;
///         io::Write::write_all(&mut tx, b"hello").unwrap();
///     });
///     let mut buf = [0u8; 16];
///     let n = rx
///         .async_io(Interest::READABLE, |fd| Ok(rustix::io::read(fd, &mut buf)?))
///         .await
///         .unwrap();
///     assert_eq!(&buf[..n], b"hello");
/// });
/// ```
#[derive(Debug)]
pub struct AsyncFd<T: AsFd> {
    /// `None` only between [`AsyncFd::into_inner`] taking it and the drop that follows.
    inner: Option<T>,
    reg: Registration,
}

impl<T: AsFd> AsyncFd<T> {
    /// Watches `inner` on the calling thread's loop: its readability, and its writability
    /// once a write has had to wait.
    ///
    /// # Errors
    ///
    /// `PermissionDenied` for a regular file or a directory (epoll cannot watch them; read
    /// them on the blocking pool), and the `EPERM` of a descriptor whose driver has no poll;
    /// `InvalidInput` for a blocking descriptor (a read or write through it would stop the
    /// loop); an `Other` error outside a runtime thread.
    pub fn new(inner: T) -> io::Result<AsyncFd<T>> {
        let fd = inner.as_fd();
        let kind = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode);
        if matches!(
            kind,
            rustix::fs::FileType::RegularFile | rustix::fs::FileType::Directory
        ) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "epoll cannot watch a regular file or a directory (it is always ready): read \
                 it on the blocking pool instead",
            ));
        }
        let flags = rustix::fs::fcntl_getfl(fd)?;
        if !flags.contains(rustix::fs::OFlags::NONBLOCK) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AsyncFd needs a non-blocking descriptor (set O_NONBLOCK first)",
            ));
        }
        let shared = crate::executor::context_shared().ok_or_else(crate::reactor::no_runtime)?;
        let reg = Registration::new_read_only(shared, fd)?;
        Ok(AsyncFd {
            inner: Some(inner),
            reg,
        })
    }

    /// The descriptor's owner.
    pub fn get_ref(&self) -> &T {
        self.inner.as_ref().expect("present until into_inner")
    }

    /// The descriptor's owner, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.as_mut().expect("present until into_inner")
    }

    /// Takes the descriptor out of the loop's epoll set and hands its owner back (still
    /// open, still non-blocking).
    pub fn into_inner(mut self) -> T {
        self.deregister();
        self.inner.take().expect("present until into_inner")
    }

    /// Waits until the descriptor may be readable: the guard's [`try_io`] makes the call
    /// and clears the readiness if it says `WouldBlock` (readiness can be stale).
    ///
    /// [`try_io`]: AsyncFdReadyGuard::try_io
    ///
    /// # Errors
    ///
    /// An error (`Other`) once the runtime the socket belongs to has shut down.
    pub async fn readable(&self) -> io::Result<AsyncFdReadyGuard<'_, T>> {
        wait_fn(|cx| self.poll_read_ready(cx)).await
    }

    /// Waits until the descriptor may be writable (see [`readable`](Self::readable)).
    ///
    /// # Errors
    ///
    /// An error (`Other`) once the runtime the socket belongs to has shut down.
    pub async fn writable(&self) -> io::Result<AsyncFdReadyGuard<'_, T>> {
        wait_fn(|cx| self.poll_write_ready(cx)).await
    }

    /// Polls for read readiness (see [`readable`](Self::readable)).
    pub fn poll_read_ready(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<AsyncFdReadyGuard<'_, T>>> {
        self.poll_ready(Direction::Read, cx)
    }

    /// Polls for write readiness (see [`writable`](Self::writable)).
    pub fn poll_write_ready(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<AsyncFdReadyGuard<'_, T>>> {
        self.poll_ready(Direction::Write, cx)
    }

    fn poll_ready(
        &self,
        dir: Direction,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<AsyncFdReadyGuard<'_, T>>> {
        if !crate::executor::has_budget(cx) {
            return Poll::Pending;
        }
        let ready = match dir {
            Direction::Read => self.reg.poll_ready_tick(dir, cx),
            Direction::Write => self.reg.poll_send_ready(self.get_ref().as_fd(), cx),
        };
        ready.map_ok(|tick| {
            crate::executor::spend_budget();
            AsyncFdReadyGuard {
                fd: self,
                dir,
                tick,
            }
        })
    }

    /// Runs `f` (a non-blocking call on the descriptor) once `interest`'s direction is
    /// ready, until it does not say `WouldBlock`: each `WouldBlock` clears the readiness and
    /// waits for the next. Each call is followed by a trigger state.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an interest of both directions (wait with
    /// [`readable`](Self::readable) and [`writable`](Self::writable) for that); `f`'s error
    /// otherwise (`Interrupted` is retried).
    pub async fn async_io<R>(
        &self,
        interest: Interest,
        mut f: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        let dir = direction(interest)?;
        let inner = self.get_ref();
        let mut call = || syscall(TriggerSource::Syscall, || f(inner));
        wait_fn(|cx| match dir {
            Direction::Read => self.reg.poll_io(dir, cx, &mut call),
            Direction::Write => self.reg.poll_send(inner.as_fd(), cx, &mut call),
        })
        .await
    }
}

/// The one direction of `interest`.
fn direction(interest: Interest) -> io::Result<Direction> {
    if interest == Interest::READABLE {
        Ok(Direction::Read)
    } else if interest == Interest::WRITABLE {
        Ok(Direction::Write)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "AsyncFd::async_io takes Interest::READABLE or Interest::WRITABLE",
        ))
    }
}

impl<T: AsFd> AsyncFd<T> {
    fn deregister(&self) {
        if let Some(inner) = &self.inner {
            self.reg.deregister(inner.as_fd());
        }
    }
}

impl<T: AsFd> Drop for AsyncFd<T> {
    fn drop(&mut self) {
        // Out of the epoll set before `T` goes: a `T` that does not close the descriptor
        // (or one with duplicates) would leave it watched under a freed token.
        self.deregister();
    }
}

impl<T: AsFd> AsFd for AsyncFd<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.get_ref().as_fd()
    }
}

impl<T: AsFd> AsRawFd for AsyncFd<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// Readiness of an [`AsyncFd`] in one direction, from [`AsyncFd::readable`] or
/// [`AsyncFd::writable`]. Dropping it keeps the readiness (the next wait returns at once);
/// [`try_io`](Self::try_io) and [`clear_ready`](Self::clear_ready) clear it.
#[derive(Debug)]
pub struct AsyncFdReadyGuard<'a, T: AsFd> {
    fd: &'a AsyncFd<T>,
    dir: Direction,
    /// The readiness change it saw: clearing is ignored if another came in since.
    tick: u64,
}

/// The call given to [`AsyncFdReadyGuard::try_io`] said `WouldBlock`; the readiness is
/// cleared, so the next wait waits for the descriptor.
#[derive(Debug)]
pub struct TryIoError(());

impl std::fmt::Display for TryIoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the descriptor was not ready after all (WouldBlock)")
    }
}

impl std::error::Error for TryIoError {}

impl<'a, T: AsFd> AsyncFdReadyGuard<'a, T> {
    /// The `AsyncFd` this readiness is of.
    pub fn get_ref(&self) -> &'a AsyncFd<T> {
        self.fd
    }

    /// The descriptor's owner.
    pub fn get_inner(&self) -> &'a T {
        self.fd.get_ref()
    }

    /// Marks the direction not ready: the next wait waits for the loop to see the
    /// descriptor ready again. Call it after a call said `WouldBlock` (or use
    /// [`try_io`](Self::try_io), which does).
    pub fn clear_ready(&mut self) {
        self.fd.reg.clear(self.dir, self.tick);
    }

    /// Keeps the readiness (what dropping the guard does too).
    pub fn retain_ready(&mut self) {}

    /// Makes the call `f`, followed by a trigger state: `Err(TryIoError)` if it said
    /// `WouldBlock` (the readiness is then cleared: wait again), its result otherwise.
    ///
    /// # Errors
    ///
    /// [`TryIoError`] when `f` said `WouldBlock`.
    pub fn try_io<R>(
        &mut self,
        f: impl FnOnce(&'a AsyncFd<T>) -> io::Result<R>,
    ) -> Result<io::Result<R>, TryIoError> {
        let fd = self.fd;
        match syscall(TriggerSource::Syscall, || f(fd)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.clear_ready();
                Err(TryIoError(()))
            }
            result => Ok(result),
        }
    }
}
