//! Paced sends, which no other runtime has: datagrams leave at their departure times from a
//! soft-event handler, at a trigger state, without waking the task that queued them.
//!
//! A socket's [`Departures`] keep softtimer-net's [`DepartureQueue`] (a ring of coarse slots
//! over an exact heap) and one soft event at the earliest departure. The handler sends what
//! is due and arms the next departure itself; the sending task is woken only when a full
//! queue has drained to half (backpressure), and when a [`PacedSender::flush`] waits for it
//! to empty. [`PacedSender`] stamps each datagram `bytes / rate` after the one before
//! (softtimer-net's [`FlowStamper`]), so the rate is exact over any run.
//!
//! Lock order: the handler runs with the facility's lock held and takes the queue's; a task
//! never holds the queue's lock while it calls into the facility.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant as StdInstant};

use softtimer::{Clock, Instant, SoftTimers, Span};
use softtimer_net::Rate;
use softtimer_net::departure::{DepartureQueue, FlowStamper};

use crate::clock::RuntimeClock;
use crate::executor::{LoopShared, TimerEvent, lock};
use crate::net::udp::{UdpInner, UdpSocket};
use crate::reactor::Waiters;

/// Datagrams a departure queue holds before a sender waits (default).
pub(crate) const DEFAULT_QUEUE: usize = 256;
/// How soon a departure refused by a full socket buffer is tried again.
const RETRY: Duration = Duration::from_micros(50);
/// Width of the departure ring's slots, and how many (a 10 ms horizon).
const SLOT: Duration = Duration::from_micros(10);
const SLOTS: usize = 1024;

/// One datagram as it left: when the scheduler said it should, and when the handler sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Departure {
    /// Its departure time, since the queue was made.
    pub scheduled: Duration,
    /// When the handler that sent it ran (a trigger state at or after `scheduled`).
    pub sent: Duration,
    /// Its length.
    pub bytes: usize,
}

struct Packet {
    buf: Vec<u8>,
    to: SocketAddr,
}

struct PaceState {
    queue: DepartureQueue<Packet>,
    stamper: Option<FlowStamper>,
    capacity: usize,
    /// The earliest departure a scheduled soft event is known to be for.
    armed: Option<Instant>,
    /// The senders waiting for room (a socket's clones and a shared sender's tasks share
    /// the queue: every one of them is woken).
    room: Waiters,
    /// The flushes waiting for the queue to empty.
    empty: Waiters,
    /// The error of a departure, for the next call.
    error: Option<io::Error>,
    /// Buffers of sent datagrams, for the next ones (no allocation per datagram).
    free: Vec<Vec<u8>>,
    log: Option<(usize, Vec<Departure>)>,
    sent: u64,
}

/// A socket's departure queue and its soft event.
pub(crate) struct Departures {
    socket: Arc<std::net::UdpSocket>,
    shared: Arc<LoopShared>,
    start: Instant,
    state: Mutex<PaceState>,
}

impl Departures {
    pub(crate) fn new(udp: &UdpInner, capacity: usize, rate: Option<Rate>) -> Arc<Departures> {
        let shared = Arc::clone(udp.reg.shared());
        let clock = shared.time.clock();
        let start = clock.now();
        let queue = DepartureQueue::new(start, clock.span(SLOT).max(Span::from_ticks(1)), SLOTS)
            .expect("a 10 ms ring fits any clock");
        let stamper = rate.map(|rate| {
            let mut stamper = FlowStamper::new(clock.resolution_hz());
            stamper.set_rate(rate);
            stamper
        });
        Arc::new(Departures {
            socket: Arc::clone(&udp.socket),
            shared,
            start,
            state: Mutex::new(PaceState {
                queue,
                stamper,
                capacity: capacity.max(1),
                armed: None,
                room: Waiters::default(),
                empty: Waiters::default(),
                error: None,
                free: Vec::new(),
                log: None,
                sent: 0,
            }),
        })
    }

    fn clock(&self) -> &RuntimeClock {
        self.shared.time.clock()
    }

    /// Queues `buf` for `to` at `at` (a `std` time).
    pub(crate) async fn send_at(
        self: &Arc<Self>,
        buf: &[u8],
        to: SocketAddr,
        at: StdInstant,
    ) -> io::Result<()> {
        let due = self.shared.time.due_time(at);
        self.enqueue(buf, to, |_, _| due).await
    }

    /// Queues `buf` for `to`, stamped at the queue's rate (or now, without one).
    pub(crate) async fn send_paced(self: &Arc<Self>, buf: &[u8], to: SocketAddr) -> io::Result<()> {
        let len = buf.len() as u64;
        self.enqueue(buf, to, |stamper, now| match stamper {
            Some(stamper) => stamper.stamp(now, len),
            None => now,
        })
        .await
    }

    /// Waits for room, then queues the datagram at the time `stamp` gives (from the stamper
    /// and the time it is queued at), and schedules a soft event for it if it is the
    /// earliest.
    async fn enqueue(
        self: &Arc<Self>,
        buf: &[u8],
        to: SocketAddr,
        stamp: impl FnOnce(&mut Option<FlowStamper>, Instant) -> Instant,
    ) -> io::Result<()> {
        let mut stamp = Some(stamp);
        let arm = poll_fn(|cx| {
            let mut st = lock(&self.state);
            if let Some(e) = st.error.take() {
                return Poll::Ready(Err(e));
            }
            if self.shared.is_closed() {
                return Poll::Ready(Err(runtime_gone()));
            }
            if st.queue.len() >= st.capacity {
                st.room.add(cx.waker());
                return Poll::Pending;
            }
            let now = self.clock().now();
            let at = (stamp.take().expect("queued once"))(&mut st.stamper, now);
            let mut packet = st.free.pop().unwrap_or_default();
            packet.clear();
            packet.extend_from_slice(buf);
            st.queue.push(at, Packet { buf: packet, to });
            let earliest = st.armed.is_none_or(|armed| at < armed);
            let previous = st.armed;
            if earliest {
                st.armed = Some(at);
            }
            Poll::Ready(Ok::<_, io::Error>(earliest.then_some((at, previous))))
        })
        .await?;
        if let Some((at, previous)) = arm {
            // Outside the queue's lock (see the lock order).
            let event = TimerEvent::Depart(Arc::clone(self));
            if let Err(e) = self.shared.timers.schedule_at(at, event) {
                // The departure armed before (if any) stays armed and takes this datagram
                // along when it fires; with none, nothing can send it (the loop's timers are
                // off), and a flush says so rather than wait for ever.
                let mut st = lock(&self.state);
                if st.armed == Some(at) {
                    st.armed = previous;
                }
                return Err(io::Error::other(e));
            }
            if self.shared.is_closed() {
                // Scheduled into a loop that shut down meanwhile (a sender on another
                // thread): the event never fires, so wake whoever waits, to find it closed.
                self.wake_waiters();
            }
            // Armed off the loop's thread (a `Handle::block_on`, another runtime's task):
            // the loop may be blocked past it; woken, it waits for this departure too.
            if !crate::executor::is_current(Arc::as_ptr(&self.shared)) {
                self.shared.wake();
            }
        }
        Ok(())
    }

    /// Wakes the sends waiting for room and the flushes waiting for the queue to drain (the
    /// loop has shut down: they find it so).
    pub(crate) fn wake_waiters(&self) {
        let (room, empty) = {
            let mut st = lock(&self.state);
            (st.room.take(), st.empty.take())
        };
        room.wake();
        empty.wake();
    }

    /// Waits until every queued datagram has left; the error of one that failed, if any.
    pub(crate) async fn flush(&self) -> io::Result<()> {
        poll_fn(|cx| {
            let mut st = lock(&self.state);
            if let Some(e) = st.error.take() {
                return Poll::Ready(Err(e));
            }
            if st.queue.is_empty() {
                return Poll::Ready(Ok(()));
            }
            if self.shared.is_closed() {
                return Poll::Ready(Err(runtime_gone()));
            }
            if st.armed.is_none() {
                return Poll::Ready(Err(io::Error::other(
                    "paced datagrams are queued but no departure could be scheduled",
                )));
            }
            st.empty.add(cx.waker());
            Poll::Pending
        })
        .await
    }

    /// The soft event fired: send what is due, arm the next departure, and wake a waiting
    /// sender when the queue has drained to half (a flush when it is empty).
    pub(crate) fn on_departure(
        self: Arc<Self>,
        timers: &mut SoftTimers<TimerEvent, RuntimeClock>,
        now: Instant,
    ) {
        let mut st = lock(&self.state);
        if st.armed.is_some_and(|armed| armed <= now) {
            st.armed = None;
        }
        let mut retry = false;
        while let Some((departure, packet)) = st.queue.pop_due(now) {
            match self.socket.send_to(&packet.buf, packet.to) {
                Ok(_) => {
                    st.sent += 1;
                    let bytes = packet.buf.len();
                    if let Some((limit, log)) = &mut st.log
                        && log.len() < *limit
                    {
                        let since =
                            |t: Instant| self.clock().duration(t.saturating_since(self.start));
                        log.push(Departure {
                            scheduled: since(departure),
                            sent: since(now),
                            bytes,
                        });
                    }
                    st.free.push(packet.buf);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The socket's buffer is full: it keeps its place and is tried again.
                    st.queue.requeue(departure, packet);
                    retry = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    st.queue.requeue(departure, packet);
                }
                Err(e) => {
                    st.error.get_or_insert(e);
                    st.free.push(packet.buf);
                }
            }
        }
        let next = if retry {
            Some(now + self.clock().span(RETRY))
        } else {
            st.queue.next_departure()
        };
        if let Some(next) = next
            && st.armed.is_none_or(|armed| next < armed)
        {
            match timers.schedule_at(next, TimerEvent::Depart(Arc::clone(&self))) {
                Ok(_) => st.armed = Some(next),
                Err(e) => {
                    st.error.get_or_insert(io::Error::other(e));
                }
            }
        }
        let room = (st.queue.len() <= st.capacity / 2).then(|| st.room.take());
        let empty = (st.queue.is_empty() || st.error.is_some()).then(|| st.empty.take());
        drop(st);
        room.into_iter().chain(empty).for_each(Waiters::wake);
    }
}

/// The error of a paced send or flush after the runtime was dropped.
fn runtime_gone() -> io::Error {
    io::Error::other("the runtime this paced sender belongs to has shut down")
}

/// Sends datagrams from a [`UdpSocket`] at a rate: each leaves `bytes / rate` after the one
/// before it, from a soft-event handler at a trigger state, and the task that sends is not
/// woken per datagram (only when a full queue has drained to half).
///
/// The queue keeps the socket open, and its port bound, until the last datagram queued has
/// left, even once every handle to the socket and the sender is dropped.
///
/// ```
/// use std::time::Instant;
/// use softtimer_async::{PacedSender, Runtime, UdpSocket};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let sink = UdpSocket::bind("127.0.0.1:0").await.unwrap();
///     let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
///     // 100 Mbit/s: a 1250-byte datagram every 100 µs.
///     let paced = PacedSender::new(&socket, "100M".parse().unwrap());
///     let start = Instant::now();
///     for _ in 0..20 {
///         paced.send_to(&[0u8; 1250], sink.local_addr().unwrap()).await.unwrap();
///     }
///     paced.flush().await.unwrap();
///     // The 20th left 19 gaps after the first.
///     assert!(start.elapsed().as_micros() >= 1_900);
/// });
/// ```
pub struct PacedSender {
    departures: Arc<Departures>,
    peer: Option<SocketAddr>,
}

impl PacedSender {
    /// Paces `socket`'s datagrams at `rate`, with room for 256 queued datagrams.
    pub fn new(socket: &UdpSocket, rate: Rate) -> PacedSender {
        Self::with_queue(socket, rate, DEFAULT_QUEUE)
    }

    /// As [`PacedSender::new`], with room for `capacity` datagrams (at least 1) before a
    /// send waits.
    pub fn with_queue(socket: &UdpSocket, rate: Rate, capacity: usize) -> PacedSender {
        PacedSender {
            departures: Departures::new(&socket.inner, capacity, Some(rate)),
            peer: socket.peer_addr().ok(),
        }
    }

    /// Queues a copy of `buf` for `to`, stamped at the rate.
    ///
    /// # Errors
    ///
    /// A departure that failed since the last call (say, refused by the peer's port on a
    /// connected socket): this call then queues nothing, and `buf` may be sent again. The
    /// runtime's "shut down" error once it has been dropped.
    pub async fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<()> {
        self.departures.send_paced(buf, to).await
    }

    /// Queues a copy of `buf` for the peer the socket was connected to when this sender was
    /// made (a later `connect` of the socket does not change it: make a new sender).
    ///
    /// # Errors
    ///
    /// `NotConnected` if the socket had no peer then; as [`send_to`](Self::send_to)'s
    /// otherwise.
    pub async fn send(&self, buf: &[u8]) -> io::Result<()> {
        let to = self.peer.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotConnected,
                "the socket has no peer: use send_to",
            )
        })?;
        self.send_to(buf, to).await
    }

    /// Waits until every queued datagram has left.
    pub async fn flush(&self) -> io::Result<()> {
        self.departures.flush().await
    }

    /// Changes the rate, from the next datagram queued: that one still leaves the gap the
    /// datagram before it was charged at the old rate (as the kernel's pacing keeps a
    /// departure it has computed), the ones after it the new rate's gaps. After a very slow
    /// rate, a sender that wants the new rate at once makes a new `PacedSender`.
    pub fn set_rate(&self, rate: Rate) {
        if let Some(stamper) = &mut lock(&self.departures.state).stamper {
            stamper.set_rate(rate);
        }
    }

    /// Datagrams queued.
    pub fn queued(&self) -> usize {
        lock(&self.departures.state).queue.len()
    }

    /// Datagrams sent.
    pub fn sent(&self) -> u64 {
        lock(&self.departures.state).sent
    }

    /// Records the next `limit` departures (for tests and measurements; nothing is
    /// recorded by default). Room for them is taken as they come, from at most 64 Ki at
    /// once, so a huge `limit` is a bound, not an allocation.
    pub fn record_departures(&self, limit: usize) {
        let log = Vec::with_capacity(limit.min(1 << 16));
        lock(&self.departures.state).log = Some((limit, log));
    }

    /// The departures recorded so far.
    pub fn departures(&self) -> Vec<Departure> {
        lock(&self.departures.state)
            .log
            .as_ref()
            .map(|(_, log)| log.clone())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for PacedSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacedSender")
            .field("queued", &self.queued())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Departures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Departures").finish_non_exhaustive()
    }
}
