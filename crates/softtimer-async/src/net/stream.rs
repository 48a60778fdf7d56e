//! What TCP and Unix-domain streams share: their reads, writes and shutdowns through the
//! loop's readiness, each system call followed by a trigger state. One macro writes the
//! methods into both types (each has a `socket`, a std stream, and a `reg`, its
//! [`Registration`](crate::reactor::Registration)), so that the two cannot drift apart.

use std::io;
use std::os::fd::BorrowedFd;
use std::task::{Context, Poll};

use softtimer::TriggerSource;

use crate::net::udp::syscall;
use crate::reactor::{Registration, wait_fn};

/// `read_exact` of a stream whose `poll_read` is given: fills `buf`, or `UnexpectedEof`
/// when the stream ends first (what was read stays in `buf`).
pub(crate) async fn read_exact_with(
    buf: &mut [u8],
    mut poll_read: impl FnMut(&mut Context<'_>, &mut [u8]) -> Poll<io::Result<usize>>,
) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match wait_fn(|cx| poll_read(cx, &mut buf[filled..])).await? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => filled += n,
        }
    }
    Ok(buf.len())
}

/// `write_all` of a stream whose `poll_write` is given: `WriteZero` if it takes nothing.
pub(crate) async fn write_all_with(
    mut buf: &[u8],
    mut poll_write: impl FnMut(&mut Context<'_>, &[u8]) -> Poll<io::Result<usize>>,
) -> io::Result<()> {
    while !buf.is_empty() {
        match wait_fn(|cx| poll_write(cx, buf)).await? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => buf = &buf[n..],
        }
    }
    Ok(())
}

/// Shuts a stream's write direction (`shutdown`, a trigger state after it); one already
/// shut, or reset by its peer, counts as shut.
pub(crate) fn shut_write(shutdown: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    match syscall(TriggerSource::Syscall, shutdown) {
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        other => other,
    }
}

/// The stream methods of a type with a `socket` (a std stream: `Read` and `Write` on a
/// shared reference, `shutdown`) and a `reg` (its
/// [`Registration`](crate::reactor::Registration)). Its paths are absolute, so that it
/// needs no import where it is used.
/// The most slices one `writev` takes (Linux's `UIO_MAXIOV`; std passes no more).
pub(crate) const IOV_MAX: usize = 1024;

macro_rules! stream_io {
    () => {
        /// Shuts the write direction down: the peer reads end of stream once it has read what
        /// was written (what tokio's `AsyncWriteExt::shutdown` does, and what a call of
        /// `stream.shutdown()` resolves to with that trait in scope; a stream already shut, or
        /// reset by its peer, counts as shut). To shut the read direction too, see
        /// [`shutdown_direction`](Self::shutdown_direction).
        ///
        /// # Errors
        ///
        /// The `shutdown` system call's, but `NotConnected`.
        pub async fn shutdown(&self) -> ::std::io::Result<()> {
            $crate::reactor::wait_fn(|_| self.poll_shutdown_write()).await
        }

        /// Shuts down the read direction, the write direction, or both, at once (std's
        /// `shutdown`).
        ///
        /// # Errors
        ///
        /// The `shutdown` system call's (`NotConnected` on a stream not connected any more).
        pub fn shutdown_direction(&self, how: ::std::net::Shutdown) -> ::std::io::Result<()> {
            self.socket.shutdown(how)
        }

        /// Waits until the stream may be readable: bytes, the end of the stream or an error are
        /// probably there (readiness can be stale: a [`try_read`](Self::try_read) that says
        /// `WouldBlock` clears it, and the next `readable` waits).
        ///
        /// # Errors
        ///
        /// An error (`Other`) once the runtime the stream belongs to has shut down.
        pub async fn readable(&self) -> ::std::io::Result<()> {
            $crate::reactor::wait_fn(|cx| self.reg.poll_ready($crate::reactor::Direction::Read, cx))
                .await
        }

        /// Waits until the stream may be writable (see [`readable`](Self::readable)).
        ///
        /// # Errors
        ///
        /// An error (`Other`) once the runtime the stream belongs to has shut down.
        pub async fn writable(&self) -> ::std::io::Result<()> {
            $crate::reactor::wait_fn(|cx| {
                self.reg.poll_ready($crate::reactor::Direction::Write, cx)
            })
            .await
        }

        /// Reads what is there into `buf` without waiting: `Ok(0)` at the end of the stream,
        /// `WouldBlock` if nothing is there yet.
        ///
        /// # Errors
        ///
        /// `WouldBlock` when nothing is there yet; the read's error otherwise.
        pub fn try_read(&self, buf: &mut [u8]) -> ::std::io::Result<usize> {
            self.reg.try_io($crate::reactor::Direction::Read, || {
                $crate::net::udp::syscall(::softtimer::TriggerSource::Recv, || {
                    ::std::io::Read::read(&mut &self.socket, buf)
                })
            })
        }

        /// Writes what the stream takes of `buf` now, without waiting: `WouldBlock` if its
        /// buffer is full.
        ///
        /// # Errors
        ///
        /// `WouldBlock` when the stream's buffer is full; the write's error otherwise.
        pub fn try_write(&self, buf: &[u8]) -> ::std::io::Result<usize> {
            self.reg.try_io($crate::reactor::Direction::Write, || {
                $crate::net::udp::syscall(::softtimer::TriggerSource::Send, || {
                    ::std::io::Write::write(&mut &self.socket, buf)
                })
            })
        }

        /// Reads into `buf`; `Ok(0)` at the end of the stream.
        pub async fn read(&self, buf: &mut [u8]) -> ::std::io::Result<usize> {
            $crate::reactor::wait_fn(|cx| self.poll_read_buf(cx, buf)).await
        }

        /// Fills `buf` and returns its length, as tokio's `read_exact` does.
        ///
        /// # Errors
        ///
        /// `UnexpectedEof` when the stream ends first (what was read stays in `buf`); the read's
        /// error otherwise.
        pub async fn read_exact(&self, buf: &mut [u8]) -> ::std::io::Result<usize> {
            $crate::net::stream::read_exact_with(buf, |cx, rest| self.poll_read_buf(cx, rest)).await
        }

        /// Writes some of `buf`.
        pub async fn write(&self, buf: &[u8]) -> ::std::io::Result<usize> {
            $crate::reactor::wait_fn(|cx| self.poll_write_buf(cx, buf)).await
        }

        /// Writes all of `buf`.
        pub async fn write_all(&self, buf: &[u8]) -> ::std::io::Result<()> {
            $crate::net::stream::write_all_with(buf, |cx, rest| self.poll_write_buf(cx, rest)).await
        }

        pub(crate) fn poll_read_buf(
            &self,
            cx: &mut ::std::task::Context<'_>,
            buf: &mut [u8],
        ) -> ::std::task::Poll<::std::io::Result<usize>> {
            let want = buf.len();
            self.reg
                .poll_io_partial($crate::reactor::Direction::Read, cx, want, || {
                    $crate::net::udp::syscall(::softtimer::TriggerSource::Recv, || {
                        ::std::io::Read::read(&mut &self.socket, &mut *buf)
                    })
                })
        }

        /// Reads into uninitialised memory (hyper's buffers); returns how many bytes it filled.
        #[cfg(feature = "hyper")]
        pub(crate) fn poll_read_uninit(
            &self,
            cx: &mut ::std::task::Context<'_>,
            buf: &mut [::std::mem::MaybeUninit<u8>],
        ) -> ::std::task::Poll<::std::io::Result<usize>> {
            let want = buf.len();
            self.reg
                .poll_io_partial($crate::reactor::Direction::Read, cx, want, || {
                    // `recv`, not `read`: a socket's own call skips the file layer's
                    // (`read` takes the file's position lock and the generic read path), as
                    // std's `Read` for a socket does.
                    $crate::net::udp::syscall(::softtimer::TriggerSource::Recv, || {
                        ::rustix::net::recv(
                            &self.socket,
                            &mut *buf,
                            ::rustix::net::RecvFlags::empty(),
                        )
                        .map(|((filled, _), _)| filled.len())
                        .map_err(::std::io::Error::from)
                    })
                })
        }

        pub(crate) fn poll_write_buf(
            &self,
            cx: &mut ::std::task::Context<'_>,
            buf: &[u8],
        ) -> ::std::task::Poll<::std::io::Result<usize>> {
            self.reg
                .poll_io_partial($crate::reactor::Direction::Write, cx, buf.len(), || {
                    $crate::net::udp::syscall(::softtimer::TriggerSource::Send, || {
                        ::std::io::Write::write(&mut &self.socket, buf)
                    })
                })
        }

        pub(crate) fn poll_write_vectored_buf(
            &self,
            cx: &mut ::std::task::Context<'_>,
            bufs: &[::std::io::IoSlice<'_>],
        ) -> ::std::task::Poll<::std::io::Result<usize>> {
            // `writev` takes at most `IOV_MAX` slices a call: bytes beyond them are not asked
            // for, and a call that takes every byte asked for has not filled the socket.
            let want = bufs
                .iter()
                .take($crate::net::stream::IOV_MAX)
                .map(|b| b.len())
                .sum();
            self.reg
                .poll_io_partial($crate::reactor::Direction::Write, cx, want, || {
                    $crate::net::udp::syscall(::softtimer::TriggerSource::Send, || {
                        ::std::io::Write::write_vectored(&mut &self.socket, bufs)
                    })
                })
        }

        pub(crate) fn poll_shutdown_write(&self) -> ::std::task::Poll<::std::io::Result<()>> {
            ::std::task::Poll::Ready($crate::net::stream::shut_write(|| {
                self.socket.shutdown(::std::net::Shutdown::Write)
            }))
        }
    };
}
pub(crate) use stream_io;

/// `socket` made non-blocking (`FIONBIO`, as std's `set_nonblocking`) and registered with the
/// calling thread's loop.
pub(crate) fn register_nonblocking(socket: BorrowedFd<'_>) -> io::Result<Registration> {
    rustix::io::ioctl_fionbio(socket, true)?;
    Registration::current(socket)
}

/// A socket accepted (non-blocking already) on `listener`, registered with the loop of the
/// thread that accepts it, or, on a thread with none (another executor's), with the
/// listener's: a connection accepted is not dropped for want of a loop.
pub(crate) fn register_accepted(
    socket: BorrowedFd<'_>,
    listener: &Registration,
) -> io::Result<Registration> {
    let shared = crate::executor::context_shared()
        .unwrap_or_else(|| std::sync::Arc::clone(listener.shared()));
    Registration::new(shared, socket)
}

/// The write half of an I/O trait (futures-io's, tokio's or hyper's) on a stream: each
/// one's methods are the stream's own, and only the name of the closing method (`close:`)
/// differs. `vectored` adds `is_write_vectored` where the trait has it. Paths are absolute,
/// so that the macro needs no import where it is used.
macro_rules! write_trait {
    ($trait_:path, $stream:ty, close: $close:ident $(, $vectored:ident)?) => {
        impl $trait_ for $stream {
            fn poll_write(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &[u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                self.poll_write_buf(cx, buf)
            }

            fn poll_write_vectored(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                bufs: &[::std::io::IoSlice<'_>],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                self.poll_write_vectored_buf(cx, bufs)
            }

            $(
                fn $vectored(&self) -> bool {
                    true
                }
            )?

            fn poll_flush(
                self: ::std::pin::Pin<&mut Self>,
                _: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::task::Poll::Ready(Ok(()))
            }

            fn $close(
                self: ::std::pin::Pin<&mut Self>,
                _: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                self.poll_shutdown_write()
            }
        }
    };
}
pub(crate) use write_trait;

/// `futures-io`'s `AsyncRead` for a type with the stream's `poll_read_buf`.
macro_rules! futures_io_read {
    ($reader:ty) => {
        impl futures_io::AsyncRead for $reader {
            fn poll_read(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &mut [u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                self.poll_read_buf(cx, buf)
            }
        }
    };
}
pub(crate) use futures_io_read;

/// tokio's `AsyncRead` for a type with the stream's `poll_read_buf`.
#[cfg(feature = "tokio-io")]
macro_rules! tokio_read {
    ($reader:ty) => {
        impl tokio::io::AsyncRead for $reader {
            fn poll_read(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                let n = ::std::task::ready!(self.poll_read_buf(cx, buf.initialize_unfilled()))?;
                buf.advance(n);
                ::std::task::Poll::Ready(Ok(()))
            }
        }
    };
}
#[cfg(feature = "tokio-io")]
pub(crate) use tokio_read;
