//! Networking on the runtime: UDP (batched, offloaded, paced), TCP, Unix-domain streams and
//! datagrams, and name lookup that does not block the loop. The socket types are also at the
//! crate's root; a stream's split halves are in its module ([`tcp`], [`unix`]), as tokio's
//! (TCP's are here too).
//!
//! A socket belongs to the loop it was registered with. Used by another runtime's task (or
//! another executor) after its own runtime has been dropped, every operation on it returns
//! an error ("… has shut down") rather than wait for ever; so does
//! [`io::AsyncFd`](crate::io::AsyncFd).

pub(crate) mod addr;
pub(crate) mod split;
pub(crate) mod stream;
pub mod tcp;
pub(crate) mod udp;
pub mod unix;

pub use addr::{ToSocketAddrs, lookup_host};
pub use tcp::{
    OwnedReadHalf, OwnedWriteHalf, ReadHalf, ReuniteError, TcpListener, TcpStream, WriteHalf,
};
pub use udp::UdpSocket;
pub use unix::{UnixDatagram, UnixListener, UnixStream};

/// `Drop` for a socket type that owns its `std` socket (`self.socket`) and its registration
/// (`self.reg`): the descriptor leaves the loop's epoll set at once, as tokio's do. Closing
/// it would not take it out while a duplicate lives (one made before `from_std`, or
/// inherited by a child), and its readiness would wake the loop under a token another
/// socket gets next.
macro_rules! deregister_on_drop {
    ($socket:ty) => {
        impl Drop for $socket {
            fn drop(&mut self) {
                self.reg.deregister(std::os::fd::AsFd::as_fd(&self.socket));
            }
        }
    };
}
pub(crate) use deregister_on_drop;

/// `AsFd` and `AsRawFd` for a socket type, from the `std` socket at `self.$path`: its
/// descriptor, for socket options (e.g. through `rustix` or `socket2`).
macro_rules! socket_descriptor {
    ($socket:ty, $($path:ident).+) => {
        impl std::os::fd::AsFd for $socket {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.$($path).+.as_fd()
            }
        }

        impl std::os::fd::AsRawFd for $socket {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                std::os::fd::AsFd::as_fd(self).as_raw_fd()
            }
        }
    };
}
pub(crate) use socket_descriptor;
