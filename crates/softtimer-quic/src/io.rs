//! The I/O shell: a [`Driver`] on a UDP socket in a `softtimer-rt` loop the application
//! owns. Datagrams go in and out through quinn-udp's socket state (GSO, GRO and ECN exactly
//! as stock quinn uses them), each send and receive is a trigger state, and the driver's next
//! timeout is one soft event in the loop. On a loop whose backend is io_uring
//! ([`IoBackend::Uring`](softtimer_rt::IoBackend)), the same datagrams (with their GSO segment
//! size, ECN codepoint and source address) go through the loop's ring instead: queued and
//! submitted with the loop's next wait, and received by a multishot `recvmsg` into provided
//! buffers, each completion reaped a trigger state.

use std::io::{self, IoSliceMut};
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use quinn_proto::ServerConfig;
use softtimer::{Clock, EventId, Instant, SystemClock, TriggerSource};
use softtimer_rt::{Interest, IoBackend, LoopCx, Ready, RingFd, RingRecv, RtError, SendOptions};

use crate::{App, Driver, DriverConfig, QuicError, Transmit};

/// Datagrams taken from the socket per `recvmmsg` call.
const RECV_BATCH: usize = 32;
/// Room per received message: with GRO, several datagrams arrive in one.
const RECV_SLOT: usize = 64 * 1024;
/// Receive calls per ready event before the loop looks at its timers again.
const RECV_CALLS_PER_PASS: usize = 8;
/// Provided buffers of [`RECV_SLOT`] bytes for the ring's multishot receive (4 MiB).
const RING_BUFFERS: u16 = 64;

/// What caused datagrams to leave: a packet that arrived (an ACK, a request), a soft event
/// fired at a trigger state, one fired by the backstop, or the application.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransmitCauses {
    /// Datagrams sent in a pass that received datagrams.
    pub packet: u64,
    /// Datagrams sent after a soft event fired at a trigger state.
    pub trigger_state: u64,
    /// Datagrams sent after a soft event fired by the backstop.
    pub backstop: u64,
    /// Datagrams sent after the application acted (a write, a new request).
    pub app: u64,
}

/// The socket's counters.
#[derive(Clone, Debug, Default)]
pub struct IoStats {
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// `sendmsg` calls (through a ring: sends queued in it, submitted together with the
    /// loop's wait).
    pub send_calls: u64,
    /// Sends refused with `EAGAIN` (retried when writable); through a ring, sends dropped
    /// because no slot freed within a second.
    pub send_would_block: u64,
    /// Why datagrams left.
    pub causes: TransmitCauses,
}

/// Where the loop's soft-event handler notes that the socket's wake-up fired, and how (it
/// runs at a trigger state, possibly on the backstop thread, and cannot reach the socket).
/// Only the attribution of [`TransmitCauses`] needs it.
#[derive(Debug, Default)]
pub struct FireNotes {
    fired: AtomicU64,
    backstop: AtomicU64,
}

impl FireNotes {
    /// Notes one firing of the socket's wake-up event, from `source`.
    pub fn note(&self, source: TriggerSource) {
        self.fired.fetch_add(1, Ordering::Relaxed);
        if source == TriggerSource::Backstop {
            self.backstop.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn read(&self) -> (u64, u64) {
        (
            self.fired.load(Ordering::Relaxed),
            self.backstop.load(Ordering::Relaxed),
        )
    }
}

fn udp_ecn(ecn: quinn_proto::EcnCodepoint) -> quinn_udp::EcnCodepoint {
    match ecn {
        quinn_proto::EcnCodepoint::Ect0 => quinn_udp::EcnCodepoint::Ect0,
        quinn_proto::EcnCodepoint::Ect1 => quinn_udp::EcnCodepoint::Ect1,
        quinn_proto::EcnCodepoint::Ce => quinn_udp::EcnCodepoint::Ce,
    }
}

fn proto_ecn(ecn: quinn_udp::EcnCodepoint) -> quinn_proto::EcnCodepoint {
    match ecn {
        quinn_udp::EcnCodepoint::Ect0 => quinn_proto::EcnCodepoint::Ect0,
        quinn_udp::EcnCodepoint::Ect1 => quinn_proto::EcnCodepoint::Ect1,
        quinn_udp::EcnCodepoint::Ce => quinn_proto::EcnCodepoint::Ce,
    }
}

/// One received message, from quinn-udp or from the ring: with GRO, several datagrams of
/// `stride` bytes each (the last may be shorter).
struct Message<'a> {
    from: std::net::SocketAddr,
    dst_ip: Option<std::net::IpAddr>,
    ecn: Option<quinn_proto::EcnCodepoint>,
    data: &'a [u8],
    stride: usize,
}

impl Message<'_> {
    /// Hands each datagram to the driver and counts it; whether there was any.
    fn deliver<C: Clock + Clone>(
        &self,
        now: Instant,
        driver: &mut Driver<C>,
        stats: &mut IoStats,
    ) -> bool {
        let mut any = false;
        for datagram in self.data.chunks(self.stride.max(1)) {
            stats.datagrams_received += 1;
            any = true;
            driver.handle_datagram(now, self.from, self.dst_ip, self.ecn, datagram);
        }
        any
    }
}

/// A [`Driver`] on a UDP socket, for a `softtimer-rt` loop that also runs the application's
/// other sockets, timers and work.
///
/// The application registers it ([`register`](Self::register)) under a token of its choice,
/// hands it the readiness of that token ([`on_ready`](Self::on_ready)) and gives it a turn
/// at the end of every pass of its loop ([`poll`](Self::poll)), with a soft-event payload the
/// socket schedules its next timeout with (the application's handler notes it in
/// [`FireNotes`], or ignores it). [`QuicLoop`](crate::QuicLoop) does all this on a loop of
/// its own; `examples/quic_and_echo.rs` does it beside a plain UDP echo.
pub struct QuicSocket<C: Clock + Clone = SystemClock> {
    driver: Driver<C>,
    socket: UdpSocket,
    udp: quinn_udp::UdpSocketState,
    /// The socket in the loop's io_uring, where the loop has one.
    ring: Option<RingFd>,
    /// A send the ring refused for a reason other than a full socket, for `poll` to return.
    ring_error: Option<QuicError>,
    token: u64,
    recv_buf: Vec<u8>,
    send_buf: Vec<u8>,
    /// A send refused with `EAGAIN`, sent again when the socket is writable.
    blocked: Option<(Transmit, Vec<u8>)>,
    wake: Option<(EventId, Instant)>,
    /// The idle-spin decision last written to the loop.
    spin: Option<bool>,
    pub(crate) watching_writable: bool,
    /// Whether the socket is in the loop's epoll set.
    token_registered: bool,
    notes: Arc<FireNotes>,
    seen: (u64, u64),
    received_in_pass: bool,
    stats: IoStats,
}

impl<C: Clock + Clone> QuicSocket<C> {
    /// A driver on `socket` (made non-blocking), on `clock` (the loop's); a server when
    /// `server` is given. `config`'s GSO batch sizes are capped by what the socket supports.
    pub fn new(
        socket: UdpSocket,
        mut config: DriverConfig,
        server: Option<ServerConfig>,
        clock: C,
    ) -> Result<QuicSocket<C>, QuicError> {
        socket
            .set_nonblocking(true)
            .map_err(|e| QuicError::io("making the socket non-blocking", e))?;
        let udp = quinn_udp::UdpSocketState::new((&socket).into())
            .map_err(|e| QuicError::io("preparing the UDP socket", e))?;
        if let Some(bytes) = config.socket_buffer {
            // Best effort, as quinn's users do: the kernel caps it at net.core.*mem_max.
            let _ = udp.set_send_buffer_size((&socket).into(), bytes);
            let _ = udp.set_recv_buffer_size((&socket).into(), bytes);
        }
        // As quinn's endpoint: MTU discovery where the socket sets don't-fragment.
        config.allow_mtu_discovery = !udp.may_fragment();
        let gso = udp.max_gso_segments().max(1);
        if config.max_datagrams > 0 {
            config.max_datagrams = config.max_datagrams.min(gso);
        }
        if config.datagrams_per_departure > 0 {
            config.datagrams_per_departure = config.datagrams_per_departure.min(gso);
        }
        let mut driver = Driver::new(clock, config, server)?;
        let local = socket
            .local_addr()
            .map_err(|e| QuicError::io("reading the socket's address", e))?;
        driver.set_socket_family(local.is_ipv6());
        Ok(QuicSocket {
            driver,
            socket,
            udp,
            ring: None,
            ring_error: None,
            token: 0,
            recv_buf: vec![0; RECV_BATCH * RECV_SLOT],
            send_buf: Vec::with_capacity(64 * 1024),
            blocked: None,
            wake: None,
            spin: None,
            watching_writable: false,
            token_registered: false,
            notes: Arc::new(FireNotes::default()),
            seen: (0, 0),
            received_in_pass: false,
            stats: IoStats::default(),
        })
    }

    /// Takes `notes` as the place the loop's handler notes the socket's wake-ups.
    pub fn with_fire_notes(mut self, notes: Arc<FireNotes>) -> Self {
        self.notes = notes;
        self
    }

    /// Where the loop's handler notes the socket's wake-ups.
    pub fn fire_notes(&self) -> Arc<FireNotes> {
        Arc::clone(&self.notes)
    }

    /// The driver, to connect, work streams, and read counters.
    pub fn driver(&mut self) -> &mut Driver<C> {
        &mut self.driver
    }

    /// The socket's counters.
    pub fn stats(&self) -> &IoStats {
        &self.stats
    }

    /// The socket.
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> Result<std::net::SocketAddr, QuicError> {
        self.socket
            .local_addr()
            .map_err(|e| QuicError::io("reading the local address", e))
    }

    /// Registers the socket in the loop under `token`: in its epoll set, or, where the loop's
    /// backend is io_uring, attached to its ring (sends and receives through the ring). A
    /// socket registered before is taken out of the loop first.
    pub fn register<E>(&mut self, cx: &mut LoopCx<'_, E, C>, token: u64) -> Result<(), QuicError> {
        self.deregister(cx);
        if cx.io_backend() == IoBackend::Epoll {
            cx.register(&self.socket, Interest::READABLE, token)
                .map_err(QuicError::Loop)?;
            self.token_registered = true;
        } else {
            let recv = RingRecv::Datagrams {
                buffers: RING_BUFFERS,
                size: RECV_SLOT as u32,
            };
            let fd = cx
                .attach(&self.socket, token, recv)
                .map_err(QuicError::Loop)?;
            self.ring = Some(fd);
        }
        self.token = token;
        self.watching_writable = false;
        self.spin = None;
        Ok(())
    }

    /// Forgets the idle-spin decision last written to the loop: a loop's run restores the
    /// spin when it ends, so call this before the loop runs again.
    pub fn run_starts(&mut self) {
        self.spin = None;
    }

    /// Takes the socket out of the loop: out of its epoll set, or detached from its ring,
    /// which otherwise keeps the socket open (its port bound) and its receive buffers in use
    /// until the loop is dropped. Call it before dropping a socket the loop outlives.
    pub fn deregister<E>(&mut self, cx: &mut LoopCx<'_, E, C>) {
        if let Some(fd) = self.ring.take() {
            cx.detach(fd);
        } else if self.token_registered {
            let _ = cx.deregister(&self.socket);
        }
        self.token_registered = false;
        self.watching_writable = false;
    }

    /// Whether the socket sends and receives through the loop's io_uring.
    pub fn uses_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// Takes a readiness event; returns whether it was the socket's.
    pub fn on_ready<E>(&mut self, cx: &mut LoopCx<'_, E, C>, ready: Ready) -> bool {
        if ready.token != self.token {
            return false;
        }
        if let Some(fd) = self.ring {
            self.receive_ring(cx, fd);
            return true;
        }
        if ready.writable
            && let Some((t, bytes)) = self.blocked.take()
        {
            self.send(cx, t, bytes);
        }
        if ready.readable || ready.closed {
            self.receive(cx);
        }
        true
    }

    /// The socket's turn, at the end of a pass of the loop: the driver's due timers, its
    /// events to `app` and `app`'s turn, everything due to send, and its next timeout
    /// scheduled as a soft event carrying `wake`. Returns whether anything was done.
    ///
    /// It tells the loop whether its idle policy may spin ([`LoopCx::set_idle_spin`]) when
    /// that decision changes; see [`run_starts`](Self::run_starts).
    pub fn poll<E, A: App<C>>(
        &mut self,
        cx: &mut LoopCx<'_, E, C>,
        app: &mut A,
        wake: E,
    ) -> Result<bool, QuicError> {
        if let Some(fd) = self.ring {
            // Whatever the loop reaped since the socket's last readiness.
            self.receive_ring(cx, fd);
        }
        let now = cx.now();
        self.driver.handle_timeout(now);
        let mut did = self.driver.dispatch(app);
        did |= self.flush(cx);
        self.schedule(cx, wake);
        if let Some(e) = self.ring_error.take() {
            return Err(e);
        }
        let want_writable = self.blocked.is_some();
        if self.ring.is_none() && want_writable != self.watching_writable {
            let interest = if want_writable {
                Interest::BOTH
            } else {
                Interest::READABLE
            };
            cx.reregister(&self.socket, interest, self.token)
                .map_err(QuicError::Loop)?;
            self.watching_writable = want_writable;
        }
        Ok(did)
    }

    /// Reads every datagram waiting (a bounded number of calls) and hands them to the driver.
    fn receive<E>(&mut self, cx: &mut LoopCx<'_, E, C>) {
        let mut buf = std::mem::take(&mut self.recv_buf);
        let mut metas = [quinn_udp::RecvMeta::default(); RECV_BATCH];
        for _ in 0..RECV_CALLS_PER_PASS {
            let result = {
                let mut iovs: Vec<IoSliceMut<'_>> =
                    buf.chunks_mut(RECV_SLOT).map(IoSliceMut::new).collect();
                self.udp.recv((&self.socket).into(), &mut iovs, &mut metas)
            };
            cx.trigger(TriggerSource::Recv);
            let n = match result {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier send (a peer gone): quinn learns of it by its
                // timers, as stock quinn does.
                Err(_) => continue,
            };
            let now = cx.now();
            for (meta, slot) in metas.iter().zip(buf.chunks(RECV_SLOT)).take(n) {
                let message = Message {
                    from: meta.addr,
                    dst_ip: meta.dst_ip,
                    ecn: meta.ecn.map(proto_ecn),
                    data: &slot[..meta.len],
                    stride: meta.stride,
                };
                self.received_in_pass |= message.deliver(now, &mut self.driver, &mut self.stats);
            }
        }
        self.recv_buf = buf;
    }

    /// Hands the driver every datagram the loop's ring has received for the socket (no
    /// system call: the loop reaped them).
    fn receive_ring<E>(&mut self, cx: &mut LoopCx<'_, E, C>, fd: RingFd) {
        let now = cx.now();
        let (driver, stats) = (&mut self.driver, &mut self.stats);
        let mut any = false;
        cx.received(fd, usize::MAX, |m| {
            // A datagram longer than a buffer (64 KiB) is not QUIC's: drop it.
            let Some(from) = m.from.filter(|_| !m.truncated) else {
                return;
            };
            let message = Message {
                from,
                dst_ip: m.dst_ip,
                ecn: m.ecn.and_then(quinn_proto::EcnCodepoint::from_bits),
                data: m.data,
                stride: m.segment_size.unwrap_or(m.data.len()),
            };
            any |= message.deliver(now, driver, stats);
        });
        self.received_in_pass |= any;
    }

    /// Sends everything the driver has due; stops at a full socket.
    fn flush<E>(&mut self, cx: &mut LoopCx<'_, E, C>) -> bool {
        let mut sent = false;
        if self.blocked.is_none() {
            let now = cx.now();
            // quinn-udp turns GSO off for good when the kernel refuses a segmented send it
            // had accepted at set-up (EIO, EINVAL: a device without the offload): batches
            // are then sized by what it says now, as stock quinn asks before each.
            self.driver.cap_segments(self.udp.max_gso_segments());
            let mut buf = std::mem::take(&mut self.send_buf);
            while let Some(t) = self.driver.poll_transmit(now, &mut buf) {
                let bytes = std::mem::take(&mut buf);
                match self.send(cx, t, bytes) {
                    Some(back) => {
                        buf = back;
                        sent = true;
                    }
                    None => break,
                }
            }
            self.send_buf = buf;
        }
        self.seen = self.notes.read();
        self.received_in_pass = false;
        sent
    }

    /// Sends one transmit; gives its buffer back, or keeps the transmit if the socket is full.
    fn send<E>(
        &mut self,
        cx: &mut LoopCx<'_, E, C>,
        t: Transmit,
        bytes: Vec<u8>,
    ) -> Option<Vec<u8>> {
        if let Some(fd) = self.ring {
            return Some(self.send_ring(cx, fd, t, bytes));
        }
        let transmit = quinn_udp::Transmit {
            destination: t.destination,
            ecn: t.ecn.map(udp_ecn),
            contents: &bytes[..t.size],
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        };
        self.stats.send_calls += 1;
        let result = self.udp.send((&self.socket).into(), &transmit);
        cx.trigger(TriggerSource::Send);
        match result {
            Ok(()) => {
                self.count_sent(&t);
                Some(bytes)
            }
            Err(_) => {
                // quinn-udp reports only EAGAIN; anything else it logged and dropped.
                self.stats.send_would_block += 1;
                self.blocked = Some((t, bytes));
                None
            }
        }
    }

    /// Queues one transmit in the loop's ring (which copies it, and sends it again itself
    /// when the socket's buffer is full); gives the buffer back.
    fn send_ring<E>(
        &mut self,
        cx: &mut LoopCx<'_, E, C>,
        fd: RingFd,
        t: Transmit,
        bytes: Vec<u8>,
    ) -> Vec<u8> {
        let options = SendOptions {
            to: Some(t.destination),
            segment_size: t.segment_size.and_then(|s| u16::try_from(s).ok()),
            ecn: t.ecn.map(|e| e as u8),
            src_ip: t.src_ip,
        };
        self.stats.send_calls += 1;
        match cx.send_ring(fd, &[&bytes[..t.size]], &options) {
            Ok(()) => self.count_sent(&t),
            // No slot freed within a second (the ring waited for one, sending what it
            // held): dropped, as quinn-udp drops what the kernel refuses; QUIC's loss
            // recovery sends it again.
            Err(RtError::Io { source, .. }) if source.kind() == io::ErrorKind::WouldBlock => {
                self.stats.send_would_block += 1;
            }
            // The ring itself failed: the socket's turn reports it.
            Err(e) => {
                self.ring_error.get_or_insert(QuicError::Loop(e));
            }
        }
        bytes
    }

    /// Sends what the driver has due before a run ends, so that a last CONNECTION_CLOSE
    /// leaves: through the ring, [`flush_ring`](Self::flush_ring); on the socket itself,
    /// the send a full socket held back and then the driver's others, waiting (up to
    /// `limit` in all) for the socket to take them. Returns whether everything left.
    pub fn flush_before_end<E>(
        &mut self,
        cx: &mut LoopCx<'_, E, C>,
        limit: std::time::Duration,
    ) -> Result<bool, QuicError> {
        if self.ring.is_some() {
            return self.flush_ring(cx, limit);
        }
        let end = std::time::Instant::now() + limit;
        loop {
            // Bounded however the sends go (a driver that keeps finding more to send).
            if std::time::Instant::now() >= end {
                return Ok(self.blocked.is_none());
            }
            if let Some((t, bytes)) = self.blocked.take()
                && self.send(cx, t, bytes).is_none()
            {
                let left = end.saturating_duration_since(std::time::Instant::now());
                let timeout = rustix::event::Timespec::try_from(left).unwrap_or_default();
                let mut fds = [rustix::event::PollFd::new(
                    &self.socket,
                    rustix::event::PollFlags::OUT,
                )];
                // Writable, interrupted or out of time: the loop's next turn looks at the time
                // first.
                let _ = rustix::event::poll(&mut fds, Some(&timeout));
                continue;
            }
            self.flush(cx);
            if self.blocked.is_none() {
                return Ok(true);
            }
        }
    }

    /// Where the socket sends through the loop's ring: submits what is queued and waits, up
    /// to `limit`, until every send has completed (the ring's part of
    /// [`flush_before_end`](Self::flush_before_end)). Returns whether they all did; true
    /// without a ring.
    pub fn flush_ring<E>(
        &mut self,
        cx: &mut LoopCx<'_, E, C>,
        limit: std::time::Duration,
    ) -> Result<bool, QuicError> {
        if self.ring.is_none() {
            return Ok(true);
        }
        cx.flush_ring(limit).map_err(QuicError::Loop)
    }

    /// Counts a transmit the socket or the ring took, and why it left.
    fn count_sent(&mut self, t: &Transmit) {
        let count = t.datagrams() as u64;
        self.stats.datagrams_sent += count;
        self.count_cause(count);
    }

    fn count_cause(&mut self, count: u64) {
        let (fired, backstop) = self.notes.read();
        let causes = &mut self.stats.causes;
        if backstop != self.seen.1 {
            causes.backstop += count;
        } else if fired != self.seen.0 {
            causes.trigger_state += count;
        } else if self.received_in_pass {
            causes.packet += count;
        } else {
            causes.app += count;
        }
    }

    /// Schedules the driver's next timeout as the socket's one soft event, and tells the
    /// loop whether its idle policy may spin before it.
    fn schedule<E>(&mut self, cx: &mut LoopCx<'_, E, C>, wake: E) {
        self.driver.set_send_blocked(self.blocked.is_some());
        let timeout = self.driver.poll_timeout();
        match (timeout.map(|t| t.at), self.wake) {
            // Still to come: the event scheduled for it stands. (One due already may have
            // fired, and its time be asked again: it is scheduled anew.)
            (Some(t), Some((_, at))) if t == at && t.is_after(cx.now()) => {}
            (next, current) => {
                if let Some((id, _)) = current {
                    cx.cancel(id);
                }
                self.wake = None;
                if let Some(t) = next
                    && let Ok(id) = cx.schedule_at(t, wake)
                {
                    self.wake = Some((id, t));
                }
            }
        }
        let spin = timeout.is_none_or(|t| t.spin);
        if self.spin != Some(spin) {
            cx.set_idle_spin(spin);
            self.spin = Some(spin);
        }
    }

    /// Watches the socket for reads only again (a run ends with a send still blocked).
    pub(crate) fn unwatch_writable<E>(&mut self, cx: &mut LoopCx<'_, E, C>) {
        if self.watching_writable {
            let _ = cx.reregister(&self.socket, Interest::READABLE, self.token);
            self.watching_writable = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_codepoints_cross_the_ring_as_quinn_udp_sends_them() {
        use quinn_proto::EcnCodepoint as Proto;
        for e in [Proto::Ect0, Proto::Ect1, Proto::Ce] {
            // Sent: the two bits the ring puts in the TOS, as quinn-udp would.
            let bits = e as u8;
            assert_eq!(quinn_udp::EcnCodepoint::from_bits(bits), Some(udp_ecn(e)));
            // Received: the bits the ring reports, back to quinn-proto's codepoint.
            assert_eq!(Proto::from_bits(bits), Some(e));
            assert_eq!(proto_ecn(udp_ecn(e)), e);
        }
        // Not-ECT (0) is no codepoint.
        assert_eq!(Proto::from_bits(0), None);
    }
}
