//! hyper 1.x on the runtime: `rt::Read` and `rt::Write` on [`TcpStream`] and
//! [`UnixStream`], a timer whose sleeps are soft events ([`HyperTimer`], `reset` in place),
//! and an executor ([`HyperExecutor`]).
//!
//! ```no_run
//! use softtimer_async::hyper::{HyperExecutor, HyperTimer};
//! use softtimer_async::{Runtime, TcpListener};
//!
//! let rt = Runtime::new().unwrap();
//! rt.block_on(async {
//!     let listener = TcpListener::bind("127.0.0.1:8080").await.unwrap();
//!     loop {
//!         let (stream, _) = listener.accept().await.unwrap();
//!         let service = hyper::service::service_fn(|_req| async {
//!             Ok::<_, std::convert::Infallible>(hyper::Response::new(String::from("hello")))
//!         });
//!         softtimer_async::spawn(async move {
//!             let _ = hyper::server::conn::http1::Builder::new()
//!                 .timer(HyperTimer::current())
//!                 .serve_connection(stream, service)
//!                 .await;
//!         });
//!     }
//! });
//! # let _ = HyperExecutor::current();
//! ```

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use ::hyper::rt::{self, ReadBufCursor};

use crate::net::tcp::TcpStream;
use crate::net::unix::UnixStream;
use crate::runtime::Handle;
use crate::time::Sleep;

/// hyper's `rt::Read` and `rt::Write` for a stream with `poll_read_uninit` and the write
/// methods [`crate::net::stream::write_trait`] calls.
macro_rules! hyper_io {
    ($stream:ty) => {
        impl rt::Read for $stream {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                mut buf: ReadBufCursor<'_>,
            ) -> Poll<io::Result<()>> {
                // SAFETY: `read` only writes into the memory it is given, so no byte hyper
                // had initialised is uninitialised again.
                #[allow(unsafe_code)]
                let unfilled = unsafe { buf.as_mut() };
                let n = ready!(self.poll_read_uninit(cx, unfilled))?;
                // SAFETY: `read` initialised the first `n` bytes of the unfilled part.
                #[allow(unsafe_code)]
                unsafe {
                    buf.advance(n)
                };
                Poll::Ready(Ok(()))
            }
        }

        crate::net::stream::write_trait!(rt::Write, $stream, close: poll_shutdown, is_write_vectored);
    };
}

hyper_io!(TcpStream);
hyper_io!(UnixStream);

/// hyper's timer on the runtime: each sleep one soft event, `reset` moved in place.
#[derive(Clone, Debug)]
pub struct HyperTimer {
    handle: Handle,
}

impl HyperTimer {
    /// Timers on the runtime `handle` belongs to.
    pub fn new(handle: Handle) -> HyperTimer {
        HyperTimer { handle }
    }

    /// Timers on the runtime whose loop this thread runs.
    ///
    /// # Panics
    ///
    /// Outside a runtime thread.
    #[track_caller]
    pub fn current() -> HyperTimer {
        HyperTimer::new(Handle::current())
    }
}

impl rt::Sleep for Sleep {}

impl rt::Timer for HyperTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn rt::Sleep>> {
        let shared = self.handle.loop_here();
        let deadline = shared.time.now().checked_add(duration);
        Box::pin(Sleep::on(shared, deadline))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn rt::Sleep>> {
        Box::pin(Sleep::on(self.handle.loop_here(), Some(deadline)))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Sleep>() {
            Some(ours) => ours.get_mut().reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }

    fn now(&self) -> Instant {
        self.handle.now()
    }
}

/// hyper's executor on the runtime: spawns onto the calling thread's loop (see
/// [`Handle::spawn`]).
#[derive(Clone, Debug)]
pub struct HyperExecutor {
    handle: Handle,
}

impl HyperExecutor {
    /// Spawns onto the runtime `handle` belongs to.
    pub fn new(handle: Handle) -> HyperExecutor {
        HyperExecutor { handle }
    }

    /// Spawns onto the runtime whose loop this thread runs.
    ///
    /// # Panics
    ///
    /// Outside a runtime thread.
    #[track_caller]
    pub fn current() -> HyperExecutor {
        HyperExecutor::new(Handle::current())
    }
}

impl<F> rt::Executor<F> for HyperExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        drop(self.handle.spawn(future));
    }
}
