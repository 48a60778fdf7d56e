//! Stock quinn on soft timers: [`SoftRuntime`] implements quinn 0.11's `Runtime`.
//!
//! Every timer quinn asks for (its one timer per connection: loss detection, the ACK delay,
//! the idle timeout, pacing) is a soft event with `reset` moved in place; its sockets go
//! through quinn-udp's `UdpSocketState` (GSO, GRO, ECN where the kernel has them) on the
//! loop's epoll set, each `sendmsg` and `recvmmsg` a trigger state; its tasks run on the
//! runtime's loops. A program that uses unchanged `quinn` runs on soft timers by passing one
//! runtime to `Endpoint::new`:
//!
//! ```no_run
//! use std::sync::Arc;
//! use softtimer_async::{Runtime, quinn::SoftRuntime};
//!
//! let rt = Runtime::new().unwrap();
//! rt.block_on(async {
//!     let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
//!     let endpoint = quinn::Endpoint::new(
//!         quinn::EndpointConfig::default(),
//!         None,
//!         socket,
//!         Arc::new(SoftRuntime::current()),
//!     )
//!     .unwrap();
//!     # drop(endpoint);
//! });
//! ```
//!
//! quinn's own `Endpoint::server` and `Endpoint::client` (there with one of quinn's
//! `runtime-*` features) look for a tokio, smol or async-std runtime, and on this one fail
//! with "no async runtime found": make the endpoint with `Endpoint::new`, as above, binding
//! the socket yourself (a std socket bound to `[::]:0` takes IPv4 peers too where
//! `net.ipv6.bindv6only` is 0, Linux's default, as quinn's `client` does).
//!
//! What it gives and what it does not: quinn's timers fire on time (µs after their
//! deadline, not up to a millisecond); quinn's pacer still releases its private bursts (2 ms
//! worth at a time), so the runtime does not make quinn's pacing finer.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use ::quinn::udp::{RecvMeta, Transmit};
use ::quinn::{AsyncTimer, AsyncUdpSocket, UdpPoller};

use crate::executor::LoopShared;
use crate::net::udp::UdpSocket;
use crate::runtime::Handle;
use crate::time::Sleep;

/// quinn's `Runtime` on a [`Runtime`](crate::Runtime): timers, sockets and tasks on the
/// calling thread's loop when it runs one of the runtime's; otherwise on one loop chosen when
/// the `SoftRuntime` is made (a worker loop, where there are any), so that an endpoint's
/// socket and its driver task, which quinn makes from the caller's thread, share a loop.
#[derive(Clone)]
pub struct SoftRuntime {
    handle: Handle,
    home: Arc<LoopShared>,
}

impl SoftRuntime {
    /// quinn on the runtime `handle` belongs to.
    pub fn new(handle: Handle) -> SoftRuntime {
        // Not loop 0 where there are workers: it runs only inside `block_on`.
        let home = handle.next_loop();
        SoftRuntime { handle, home }
    }

    /// The loop for what is made here: this thread's, or the home loop.
    fn here(&self) -> Arc<LoopShared> {
        self.handle
            .this_threads_loop()
            .unwrap_or_else(|| Arc::clone(&self.home))
    }

    /// quinn on the runtime whose loop this thread runs.
    ///
    /// # Panics
    ///
    /// Outside a runtime thread.
    #[track_caller]
    pub fn current() -> SoftRuntime {
        SoftRuntime::new(Handle::current())
    }
}

impl fmt::Debug for SoftRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftRuntime")
            .field("threads", &self.handle.threads())
            .finish()
    }
}

impl ::quinn::Runtime for SoftRuntime {
    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn AsyncTimer>> {
        Box::pin(Sleep::on(self.here(), Some(deadline)))
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        drop(crate::task::spawn_onto(&self.here(), future));
    }

    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        let socket = UdpSocket::on(self.here(), socket, true)?;
        Ok(Arc::new(QuinnSocket(socket)))
    }

    fn now(&self) -> Instant {
        self.handle.now()
    }
}

impl AsyncTimer for Sleep {
    fn reset(self: Pin<&mut Self>, deadline: Instant) {
        Sleep::reset(self.get_mut(), deadline);
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Future::poll(self, cx)
    }
}

/// A UDP socket as quinn sees it.
#[derive(Debug)]
struct QuinnSocket(UdpSocket);

impl AsyncUdpSocket for QuinnSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable(self))
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        self.0.try_send_transmit(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_recv_segments(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.0.max_gso_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.0.gro_segments()
    }

    fn may_fragment(&self) -> bool {
        self.0.may_fragment()
    }
}

/// One task's wait for the socket to be writable (each poller keeps its own waker).
#[derive(Debug)]
struct Writable(Arc<QuinnSocket>);

impl UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.0.poll_writable(cx)
    }
}
