//! [`QuicLoop`]: a [`QuicSocket`] on a `softtimer-rt` loop of its own, with hooks for the
//! application's other sockets and work.

use std::net::UdpSocket;
use std::sync::Arc;

use quinn_proto::ServerConfig;
use softtimer::{Clock, Fired, SystemClock};
use softtimer_rt::{EventLoop, LoopConfig, LoopCx, LoopTurn, Ready, StopHandle};

use crate::io::{FireNotes, IoStats, QuicSocket};
use crate::{Driver, DriverConfig, QuicError, QuicEvent};

/// The payload of the QUIC socket's soft event in a [`QuicLoop`]: "look at the timers".
#[derive(Clone, Copy, Debug)]
pub struct Wake;

/// The token of the QUIC socket in a [`QuicLoop`]'s loop; the application's own sockets
/// (in [`QuicLoop::run_with`]) take others.
pub const QUIC_TOKEN: u64 = 0;

/// What the application does with the driver's events, on the loop thread.
pub trait App<C: Clock + Clone = SystemClock> {
    /// An event of a connection or stream.
    fn on_event(&mut self, driver: &mut Driver<C>, event: QuicEvent);
    /// Once per turn of the loop, after the events and before the driver sends: the place
    /// to start work that is not an answer to an event (a request on a timer). Returns
    /// whether it did anything.
    fn on_turn(&mut self, driver: &mut Driver<C>) -> bool {
        let _ = driver;
        false
    }
}

/// A [`QuicSocket`] and the soft-timer event loop that runs it, on the calling thread.
///
/// An echo server: every stream a client opens gets back what the client sent on it, once the
/// client has finished it; a stream that cannot be read closes its connection.
///
/// ```no_run
/// use std::net::UdpSocket;
/// use softtimer_quic::{
///     App, ConnId, Dir, Driver, DriverConfig, QuicEvent, QuicLoop, ReadStatus, StreamId,
///     VarInt,
/// };
/// use softtimer_quic::tls::{Identity, Tuning, server_config};
///
/// #[derive(Default)]
/// struct Echo {
///     // What each stream has sent so far (a real server would bound this).
///     pending: std::collections::HashMap<(ConnId, StreamId), Vec<u8>>,
///     // Replies not yet written whole, and how much of each is.
///     replies: std::collections::HashMap<(ConnId, StreamId), (Vec<u8>, usize)>,
/// }
/// impl Echo {
///     /// Reads what `stream` has; answers it once the client has finished it.
///     fn read(&mut self, driver: &mut Driver, conn: ConnId, stream: StreamId) {
///         // A stream already answered may still be reported readable: skip it.
///         let Some(buf) = self.pending.get_mut(&(conn, stream)) else {
///             return;
///         };
///         match driver.read(conn, stream, |chunk| buf.extend_from_slice(chunk)) {
///             Ok(ReadStatus::Finished) => {
///                 let data = self.pending.remove(&(conn, stream)).unwrap_or_default();
///                 self.replies.insert((conn, stream), (data, 0));
///                 self.write(driver, conn, stream);
///             }
///             Ok(ReadStatus::Blocked) => {}
///             Err(_) => {
///                 self.pending.remove(&(conn, stream));
///                 let _ = driver.close(conn, VarInt::from_u32(1), b"bad stream");
///             }
///         }
///     }
///     /// Writes what the stream takes of its reply, and finishes it once all is written:
///     /// a write that takes nothing is followed by a Writable event, one that takes part
///     /// is not.
///     fn write(&mut self, driver: &mut Driver, conn: ConnId, stream: StreamId) {
///         let Some((data, sent)) = self.replies.get_mut(&(conn, stream)) else {
///             return;
///         };
///         while *sent < data.len() {
///             match driver.write(conn, stream, &data[*sent..]) {
///                 Ok(0) => return,
///                 Ok(n) => *sent += n,
///                 // Stopped by the client, or the connection ended.
///                 Err(_) => break,
///             }
///         }
///         if *sent == data.len() {
///             let _ = driver.finish(conn, stream);
///         }
///         self.replies.remove(&(conn, stream));
///     }
/// }
/// impl App for Echo {
///     fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
///         match event {
///             QuicEvent::StreamOpened(conn, Dir::Bi) => {
///                 // Take the new streams and read them at once: data that came with a
///                 // stream's opening is not reported again as Readable.
///                 while let Ok(Some(stream)) = driver.accept_bi(conn) {
///                     self.pending.insert((conn, stream), Vec::new());
///                     self.read(driver, conn, stream);
///                 }
///             }
///             QuicEvent::Readable(conn, stream) => self.read(driver, conn, stream),
///             QuicEvent::Writable(conn, stream) => self.write(driver, conn, stream),
///             // The client wants no more: reset the stream, which also frees it.
///             QuicEvent::Stopped(conn, stream, _) => {
///                 self.replies.remove(&(conn, stream));
///                 let _ = driver.reset(conn, stream, VarInt::from_u32(0));
///             }
///             QuicEvent::Lost(conn, _) => {
///                 self.pending.retain(|(c, _), _| *c != conn);
///                 self.replies.retain(|(c, _), _| *c != conn);
///             }
///             _ => {}
///         }
///     }
/// }
///
/// let identity = Identity::self_signed(&["localhost"]).unwrap();
/// let server = server_config(&identity, &Tuning::default()).unwrap();
/// let socket = UdpSocket::bind("127.0.0.1:4433").unwrap();
/// let mut quic = QuicLoop::new(Default::default(), socket, DriverConfig::default(), Some(server)).unwrap();
/// quic.run(&mut Echo::default()).unwrap();
/// ```
pub struct QuicLoop {
    ev: EventLoop<Wake>,
    quic: QuicSocket,
}

impl QuicLoop {
    /// A loop on `socket`; a server when `server` is given (a client can still connect).
    /// The driver's [`wake_lateness`](DriverConfig::wake_lateness) is the loop's
    /// ([`EventLoop::wake_lateness`]).
    pub fn new(
        loop_config: LoopConfig,
        socket: UdpSocket,
        mut config: DriverConfig,
        server: Option<ServerConfig>,
    ) -> Result<QuicLoop, QuicError> {
        let notes = Arc::new(FireNotes::default());
        let handler_notes = Arc::clone(&notes);
        let mut ev = EventLoop::new(loop_config, move |_, fired: Fired<Wake>| {
            handler_notes.note(fired.source);
        })
        .map_err(QuicError::Loop)?;
        // A loop that spins for more than the driver takes wakes within it anyway.
        config.wake_lateness = ev.wake_lateness().min(crate::MAX_WAKE_LATENESS);
        let mut quic = QuicSocket::new(socket, config, server, *ev.clock())?.with_fire_notes(notes);
        quic.register(&mut ev.cx(), QUIC_TOKEN)?;
        Ok(QuicLoop { ev, quic })
    }

    /// The driver, to connect or look at counters between runs.
    pub fn driver(&mut self) -> &mut Driver {
        self.quic.driver()
    }

    /// The QUIC socket (its counters, its address).
    pub fn socket(&self) -> &QuicSocket {
        &self.quic
    }

    /// The socket's counters.
    pub fn stats(&self) -> &IoStats {
        self.quic.stats()
    }

    /// The event loop (its counters and trigger statistics).
    pub fn event_loop(&self) -> &EventLoop<Wake> {
        &self.ev
    }

    /// The event loop, to register the application's own sockets (under tokens other than
    /// [`QUIC_TOKEN`]) or schedule its own [`Wake`] events before [`run_with`](Self::run_with).
    pub fn event_loop_mut(&mut self) -> &mut EventLoop<Wake> {
        &mut self.ev
    }

    /// Stops [`run`](Self::run) from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.ev.stop_handle()
    }

    /// Runs the loop, handing events to `app`, until the app calls [`Driver::stop`] or the
    /// loop is stopped.
    pub fn run<A: App>(&mut self, app: &mut A) -> Result<(), QuicError> {
        self.run_with(app, |_, _| {}, |_| false)
    }

    /// As [`run`](Self::run), with the application's own work on the same loop:
    /// `on_ready` gets the readiness of every token but [`QUIC_TOKEN`], and `on_turn` is
    /// called at the end of every pass, after the QUIC socket's turn (it returns whether it
    /// did anything).
    pub fn run_with<A, R, T>(
        &mut self,
        app: &mut A,
        mut on_ready: R,
        mut on_turn: T,
    ) -> Result<(), QuicError>
    where
        A: App,
        R: FnMut(&mut LoopCx<'_, Wake>, Ready),
        T: FnMut(&mut LoopCx<'_, Wake>) -> bool,
    {
        let QuicLoop { ev, quic } = self;
        let _ = quic.driver().take_stop();
        quic.run_starts();
        // Both callbacks need the socket; the loop never runs them at once.
        let cell = std::cell::RefCell::new(&mut *quic);
        let mut loop_error: Option<QuicError> = None;
        let result = ev.run_with(
            |cx, ready: Ready| {
                if !cell.borrow_mut().on_ready(cx, ready) {
                    on_ready(cx, ready);
                }
            },
            |cx, turn| {
                if matches!(turn, LoopTurn::BeforeBlock) {
                    return false;
                }
                let mut quic = cell.borrow_mut();
                let did = match quic.poll(cx, app, Wake) {
                    Ok(did) => did,
                    Err(e) => {
                        loop_error = Some(e);
                        cx.stop();
                        return false;
                    }
                };
                if quic.driver().take_stop() {
                    cx.stop();
                }
                drop(quic);
                on_turn(cx) | did
            },
        );
        let _ = cell.into_inner();
        quic.unwatch_writable(&mut ev.cx());
        // Sends still due (a last CONNECTION_CLOSE, held back by a full socket or queued in a
        // ring) leave before the run ends, as far as they do within 100 ms; the run's own
        // error comes first.
        let flushed = quic.flush_before_end(&mut ev.cx(), std::time::Duration::from_millis(100));
        result.map_err(QuicError::Loop)?;
        if let Some(e) = loop_error {
            return Err(e);
        }
        flushed.map(|_| ())
    }
}
