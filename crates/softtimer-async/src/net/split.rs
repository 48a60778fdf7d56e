//! A stream's halves, TCP's and Unix's alike: owned halves that move to different tasks
//! (put back together by `reunite`), and borrowed ones for two futures of one task, each
//! with the stream's read or write methods and I/O traits. One macro writes them into the
//! stream's module, so that the two streams' halves cannot drift apart.

/// The halves of `$stream` (a type with the methods of
/// [`stream_io!`](crate::net::stream::stream_io)) whose addresses are `$addr`, written into
/// the calling module as tokio names them there (`OwnedReadHalf`, `OwnedWriteHalf`,
/// `ReadHalf`, `WriteHalf`, `ReuniteError`), with `$stream::owned_halves` and
/// `$stream::borrowed_halves`, which the stream's documented `into_split` and `split` call.
/// Paths are absolute, so that it needs no import where it is used.
macro_rules! split_halves {
    ($stream:ident, $addr:ty) => {
        impl $stream {
            fn owned_halves(self) -> (OwnedReadHalf, OwnedWriteHalf) {
                let stream = ::std::sync::Arc::new(self);
                let write = OwnedWriteHalf {
                    stream: ::std::sync::Arc::clone(&stream),
                    shutdown_on_drop: true,
                };
                (OwnedReadHalf { stream }, write)
            }

            fn borrowed_halves(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
                let stream: &$stream = self;
                (ReadHalf { stream }, WriteHalf { stream })
            }
        }

        #[doc = concat!("The read half of a [`", stringify!($stream), "`]")]
        #[doc = concat!("([`", stringify!($stream), "::into_split`]):")]
        /// `futures-io`'s `AsyncRead` (and tokio's with the `tokio-io` feature), the
        /// stream's `read` and `read_exact`, and its addresses.
        #[derive(Debug)]
        pub struct OwnedReadHalf {
            stream: ::std::sync::Arc<$stream>,
        }

        #[doc = concat!("The write half of a [`", stringify!($stream), "`]")]
        #[doc = concat!("([`", stringify!($stream), "::into_split`]):")]
        /// `futures-io`'s `AsyncWrite` (and tokio's with the `tokio-io` feature), the
        /// stream's `write` and `write_all`, and its addresses. Dropping it shuts the
        /// stream's write direction down.
        #[derive(Debug)]
        pub struct OwnedWriteHalf {
            stream: ::std::sync::Arc<$stream>,
            shutdown_on_drop: bool,
        }

        /// The halves given to [`OwnedReadHalf::reunite`] came from different streams; they
        /// are handed back.
        #[derive(Debug)]
        pub struct ReuniteError(pub OwnedReadHalf, pub OwnedWriteHalf);

        impl ::std::fmt::Display for ReuniteError {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(concat!(
                    "the halves are not of the same ",
                    stringify!($stream)
                ))
            }
        }

        impl ::std::error::Error for ReuniteError {}

        impl OwnedReadHalf {
            /// The stream again, from this half and its own write half.
            ///
            /// # Errors
            ///
            /// [`ReuniteError`], with both halves, when `write` is another stream's.
            pub fn reunite(self, mut write: OwnedWriteHalf) -> Result<$stream, ReuniteError> {
                if !::std::sync::Arc::ptr_eq(&self.stream, &write.stream) {
                    return Err(ReuniteError(self, write));
                }
                write.shutdown_on_drop = false;
                drop(write);
                Ok(::std::sync::Arc::into_inner(self.stream).expect("both halves were given back"))
            }

            $crate::net::split::half_methods!(read, $stream, $addr);
        }

        impl OwnedWriteHalf {
            $crate::net::split::half_methods!(write, $stream, $addr);
        }

        #[doc = concat!("The read half of a [`", stringify!($stream), "`] borrowed from it")]
        #[doc = concat!("([`", stringify!($stream), "::split`]):")]
        /// `futures-io`'s `AsyncRead` (and tokio's with the `tokio-io` feature), the
        /// stream's `read` and `read_exact`, and its addresses.
        #[derive(Debug, Clone, Copy)]
        pub struct ReadHalf<'a> {
            stream: &'a $stream,
        }

        #[doc = concat!("The write half of a [`", stringify!($stream), "`] borrowed from it")]
        #[doc = concat!("([`", stringify!($stream), "::split`]):")]
        /// `futures-io`'s `AsyncWrite` (and tokio's with the `tokio-io` feature), the
        /// stream's `write` and `write_all`, and its addresses.
        #[derive(Debug, Clone, Copy)]
        pub struct WriteHalf<'a> {
            stream: &'a $stream,
        }

        impl ReadHalf<'_> {
            $crate::net::split::half_methods!(read, $stream, $addr);
        }

        impl WriteHalf<'_> {
            $crate::net::split::half_methods!(write, $stream, $addr);
        }

        $crate::net::split::as_stream!($stream, ReadHalf<'_>, self => self.stream);
        $crate::net::split::as_stream!($stream, WriteHalf<'_>, self => self.stream);
        $crate::net::split::as_stream!($stream, OwnedReadHalf, self => &self.stream);
        $crate::net::split::as_stream!($stream, OwnedWriteHalf, self => &self.stream);

        impl Drop for OwnedWriteHalf {
            fn drop(&mut self) {
                if self.shutdown_on_drop {
                    let _ = self.stream.poll_shutdown_write();
                }
            }
        }

        // The stream, a shared reference to one (so that one task may read while another
        // writes), and its halves, owned and borrowed.
        $crate::net::stream::futures_io_read!($stream);
        $crate::net::stream::futures_io_read!(&$stream);
        $crate::net::stream::futures_io_read!(OwnedReadHalf);
        $crate::net::stream::futures_io_read!(ReadHalf<'_>);
        $crate::net::stream::write_trait!(futures_io::AsyncWrite, $stream, close: poll_close);
        $crate::net::stream::write_trait!(futures_io::AsyncWrite, &$stream, close: poll_close);
        $crate::net::stream::write_trait!(futures_io::AsyncWrite, OwnedWriteHalf, close: poll_close);
        $crate::net::stream::write_trait!(futures_io::AsyncWrite, WriteHalf<'_>, close: poll_close);

        #[cfg(feature = "tokio-io")]
        mod tokio_io {
            use super::{$stream, OwnedReadHalf, OwnedWriteHalf, ReadHalf, WriteHalf};
            use $crate::net::stream::{tokio_read, write_trait};

            tokio_read!($stream);
            tokio_read!(OwnedReadHalf);
            tokio_read!(ReadHalf<'_>);
            write_trait!(tokio::io::AsyncWrite, $stream, close: poll_shutdown, is_write_vectored);
            write_trait!(tokio::io::AsyncWrite, OwnedWriteHalf, close: poll_shutdown, is_write_vectored);
            write_trait!(tokio::io::AsyncWrite, WriteHalf<'_>, close: poll_shutdown, is_write_vectored);
        }
    };
}
pub(crate) use split_halves;

/// `AsRef<$stream>` for a half, for the stream's socket options and descriptor.
macro_rules! as_stream {
    ($stream:ident, $half:ty, $self_:ident => $get:expr) => {
        /// The whole stream, for its socket options and its descriptor.
        impl AsRef<$stream> for $half {
            fn as_ref(&$self_) -> &$stream {
                $get
            }
        }
    };
}
pub(crate) use as_stream;

/// A half's methods, the stream's own (`self.stream` derefs to it): an owned half's and a
/// borrowed one's are the same.
macro_rules! half_methods {
    (read, $stream:ident, $addr:ty) => {
        /// Reads some bytes into `buf` (0 at end of stream).
        pub async fn read(&self, buf: &mut [u8]) -> ::std::io::Result<usize> {
            self.stream.read(buf).await
        }

        /// Fills `buf` and returns its length
        #[doc = concat!("([`", stringify!($stream), "::read_exact`]).")]
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($stream), "::read_exact`]'s.")]
        pub async fn read_exact(&self, buf: &mut [u8]) -> ::std::io::Result<usize> {
            self.stream.read_exact(buf).await
        }

        $crate::net::split::half_methods!(addrs, $addr);

        fn poll_read_buf(
            &self,
            cx: &mut ::std::task::Context<'_>,
            buf: &mut [u8],
        ) -> ::std::task::Poll<::std::io::Result<usize>> {
            self.stream.poll_read_buf(cx, buf)
        }
    };
    (write, $stream:ident, $addr:ty) => {
        /// Writes some of `buf`.
        pub async fn write(&self, buf: &[u8]) -> ::std::io::Result<usize> {
            self.stream.write(buf).await
        }

        /// Writes all of `buf`.
        pub async fn write_all(&self, buf: &[u8]) -> ::std::io::Result<()> {
            self.stream.write_all(buf).await
        }

        $crate::net::split::half_methods!(addrs, $addr);

        fn poll_write_buf(
            &self,
            cx: &mut ::std::task::Context<'_>,
            buf: &[u8],
        ) -> ::std::task::Poll<::std::io::Result<usize>> {
            self.stream.poll_write_buf(cx, buf)
        }

        fn poll_write_vectored_buf(
            &self,
            cx: &mut ::std::task::Context<'_>,
            bufs: &[::std::io::IoSlice<'_>],
        ) -> ::std::task::Poll<::std::io::Result<usize>> {
            self.stream.poll_write_vectored_buf(cx, bufs)
        }

        fn poll_shutdown_write(&self) -> ::std::task::Poll<::std::io::Result<()>> {
            self.stream.poll_shutdown_write()
        }
    };
    (addrs, $addr:ty) => {
        /// The stream's peer.
        pub fn peer_addr(&self) -> ::std::io::Result<$addr> {
            self.stream.peer_addr()
        }

        /// The stream's local address.
        pub fn local_addr(&self) -> ::std::io::Result<$addr> {
            self.stream.local_addr()
        }
    };
}
pub(crate) use half_methods;
