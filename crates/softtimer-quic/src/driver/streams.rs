//! What an application does through the driver: streams, close, statistics, wake-ups.

use std::net::SocketAddr;

use bytes::Bytes;
use hdrhistogram::Histogram;
use quinn_proto::{Dir, StreamId, VarInt};
use softtimer::{Clock, Instant};

use super::conn::Conn;
use super::{ConnId, Driver, DriverStats, ReadStatus, Timer};
use crate::error::{DatagramError, QuicError, StreamError};

impl<C: Clock + Clone> Driver<C> {
    fn conn(&mut self, id: ConnId) -> Result<&mut Conn, QuicError> {
        let c = self
            .conns
            .get_mut(id)
            .ok_or(QuicError::UnknownConnection(id))?;
        if !c.unsettled {
            c.unsettled = true;
            self.unsettled.push(id.slot);
        }
        if !c.sendable {
            c.sendable = true;
            self.sendable.push_back(id.slot);
        }
        Ok(c)
    }

    /// The connection, for a write to `stream`: refused for the peer's unidirectional
    /// streams (quinn-proto would panic).
    fn conn_sending(&mut self, id: ConnId, stream: StreamId) -> Result<&mut Conn, QuicError> {
        let c = self.conn(id)?;
        if stream.dir() == Dir::Uni && stream.initiator() != c.conn.side() {
            return Err(StreamError::WrongDirection { stream }.into());
        }
        Ok(c)
    }

    /// The connection, for a read of `stream`: refused for this side's unidirectional
    /// streams (quinn-proto would panic).
    fn conn_receiving(&mut self, id: ConnId, stream: StreamId) -> Result<&mut Conn, QuicError> {
        let c = self.conn(id)?;
        if stream.dir() == Dir::Uni && stream.initiator() == c.conn.side() {
            return Err(StreamError::WrongDirection { stream }.into());
        }
        Ok(c)
    }

    /// The connection, for a new stream or a write: refused once it has ended (quinn-proto
    /// answers those as it answers a stream limit or flow control, and the event that would
    /// say "try again" never comes).
    fn conn_live(&mut self, id: ConnId) -> Result<&mut Conn, QuicError> {
        let c = self.conn(id)?;
        if c.conn.is_closed() {
            return Err(QuicError::ConnectionEnded(id));
        }
        Ok(c)
    }

    /// Opens a bidirectional stream; `None` while the peer's stream limit is reached (a
    /// [`QuicEvent::StreamsAvailable`](crate::QuicEvent::StreamsAvailable) follows when it
    /// rises) or, on a client, before the handshake has brought the peer's limits (try
    /// again at [`QuicEvent::Connected`](crate::QuicEvent::Connected)). An ended connection
    /// is [`QuicError::ConnectionEnded`].
    pub fn open_bi(&mut self, id: ConnId) -> Result<Option<StreamId>, QuicError> {
        Ok(self.conn_live(id)?.conn.streams().open(Dir::Bi))
    }

    /// Takes a bidirectional stream the peer opened, if any is waiting.
    pub fn accept_bi(&mut self, id: ConnId) -> Result<Option<StreamId>, QuicError> {
        Ok(self.conn(id)?.conn.streams().accept(Dir::Bi))
    }

    /// Opens a unidirectional stream (this side writes, the peer reads); `None` while the
    /// peer's limit is reached, which is always unless the peer's transport settings give
    /// unidirectional streams ([`Tuning::uni_streams`](crate::tls::Tuning::uni_streams)),
    /// and as [`open_bi`](Self::open_bi) says.
    pub fn open_uni(&mut self, id: ConnId) -> Result<Option<StreamId>, QuicError> {
        Ok(self.conn_live(id)?.conn.streams().open(Dir::Uni))
    }

    /// Takes a unidirectional stream the peer opened, if any is waiting: it is read with
    /// [`read`](Self::read), and takes no writes.
    pub fn accept_uni(&mut self, id: ConnId) -> Result<Option<StreamId>, QuicError> {
        Ok(self.conn(id)?.conn.streams().accept(Dir::Uni))
    }

    /// Sends `data` as an unreliable datagram (RFC 9221): it leaves with the connection's
    /// next packets, is not sent again if lost, and reaches the peer whole or not at all.
    /// Both sides' transport settings must take datagrams
    /// ([`Tuning::datagrams`](crate::tls::Tuning::datagrams)). With the send buffer full,
    /// `drop_oldest` makes room by discarding the oldest datagrams not yet sent; without it
    /// the datagram comes back in [`DatagramError::Blocked`]. An ended connection is
    /// [`QuicError::ConnectionEnded`].
    ///
    /// An application that echoes every datagram, on a server whose settings take them:
    ///
    /// ```
    /// use softtimer_quic::tls::{Identity, Tuning, server_config};
    /// use softtimer_quic::{App, Driver, DriverConfig, QuicEvent};
    ///
    /// struct Echo;
    /// impl App for Echo {
    ///     fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
    ///         if let QuicEvent::DatagramReceived(conn) = event {
    ///             while let Ok(Some(d)) = driver.read_datagram(conn) {
    ///                 // Newest first: a full buffer drops the oldest not yet sent.
    ///                 let _ = driver.send_datagram(conn, d, true);
    ///             }
    ///         }
    ///     }
    /// }
    ///
    /// let tuning = Tuning { datagrams: true, ..Tuning::default() };
    /// let identity = Identity::self_signed(&["localhost"]).unwrap();
    /// let tls = server_config(&identity, &tuning).unwrap();
    /// let clock = softtimer::SystemClock::new();
    /// let driver = Driver::new(clock, DriverConfig::default(), Some(tls)).unwrap();
    /// # let _ = (driver, Echo);
    /// ```
    ///
    /// [`DatagramError::Blocked`]: crate::DatagramError::Blocked
    pub fn send_datagram(
        &mut self,
        id: ConnId,
        data: Bytes,
        drop_oldest: bool,
    ) -> Result<(), QuicError> {
        let size = data.len();
        let mut datagrams = self.conn_live(id)?.conn.datagrams();
        datagrams.send(data, drop_oldest).map_err(|e| {
            QuicError::Datagram(match e {
                quinn_proto::SendDatagramError::Disabled => DatagramError::Disabled,
                quinn_proto::SendDatagramError::UnsupportedByPeer => {
                    DatagramError::UnsupportedByPeer
                }
                quinn_proto::SendDatagramError::TooLarge => DatagramError::TooLarge {
                    size,
                    max: datagrams.max_size(),
                },
                quinn_proto::SendDatagramError::Blocked(data) => DatagramError::Blocked(data),
            })
        })
    }

    /// Takes the oldest datagram received and not yet taken, if any.
    pub fn read_datagram(&mut self, id: ConnId) -> Result<Option<Bytes>, QuicError> {
        Ok(self.conn(id)?.conn.datagrams().recv())
    }

    /// The largest datagram the peer takes now, bytes (it follows the path's MTU); `None`
    /// where the peer does not take datagrams (or has not said yet) or the connection is
    /// gone. It reads the peer's side only: with datagrams off here,
    /// [`send_datagram`](Self::send_datagram) still fails with
    /// [`DatagramError::Disabled`](crate::DatagramError::Disabled).
    pub fn max_datagram_size(&mut self, id: ConnId) -> Option<usize> {
        self.conns.get_mut(id)?.conn.datagrams().max_size()
    }

    /// Writes what the stream takes of `data`, which may be less than all of it; 0 when it
    /// is blocked by flow control or congestion. A [`QuicEvent::Writable`](crate::QuicEvent::Writable)
    /// is certain to follow a write that returned 0, not one that took part: write on
    /// until one returns 0 or takes the rest. A stream the peer stopped is [`StreamError::Stopped`] (reset it:
    /// the stream and the peer's credit for it are kept until both halves are closed), an
    /// ended connection [`QuicError::ConnectionEnded`].
    pub fn write(&mut self, id: ConnId, stream: StreamId, data: &[u8]) -> Result<usize, QuicError> {
        self.conn_sending(id, stream)?;
        match self.conn_live(id)?.conn.send_stream(stream).write(data) {
            Ok(n) => Ok(n),
            Err(quinn_proto::WriteError::Blocked) => Ok(0),
            Err(quinn_proto::WriteError::Stopped(code)) => {
                Err(StreamError::Stopped { stream, code }.into())
            }
            Err(quinn_proto::WriteError::ClosedStream) => {
                Err(StreamError::Closed { stream }.into())
            }
        }
    }

    /// Ends the stream: the peer reads to its end once everything written has arrived.
    pub fn finish(&mut self, id: ConnId, stream: StreamId) -> Result<(), QuicError> {
        match self
            .conn_sending(id, stream)?
            .conn
            .send_stream(stream)
            .finish()
        {
            Ok(()) => Ok(()),
            Err(quinn_proto::FinishError::Stopped(code)) => {
                Err(StreamError::Stopped { stream, code }.into())
            }
            Err(quinn_proto::FinishError::ClosedStream) => {
                Err(StreamError::Closed { stream }.into())
            }
        }
    }

    /// Abandons the sending side of `stream`: the peer's reads fail with
    /// [`StreamError::Reset`] and this `code`; what was written and not yet acknowledged is
    /// not sent again.
    pub fn reset(&mut self, id: ConnId, stream: StreamId, code: VarInt) -> Result<(), QuicError> {
        self.conn_sending(id, stream)?
            .conn
            .send_stream(stream)
            .reset(code)
            .map_err(|_| StreamError::Closed { stream }.into())
    }

    /// Asks the peer to stop sending on `stream` with `code` (the peer sees
    /// [`QuicEvent::Stopped`](crate::QuicEvent::Stopped)); data still arriving on it is discarded.
    pub fn stop_sending(
        &mut self,
        id: ConnId,
        stream: StreamId,
        code: VarInt,
    ) -> Result<(), QuicError> {
        self.conn_receiving(id, stream)?
            .conn
            .recv_stream(stream)
            .stop(code)
            .map_err(|_| StreamError::Closed { stream }.into())
    }

    /// Hands every chunk of `stream` available now to `sink`, in order, and says whether
    /// more may come. A stream the peer reset fails with [`StreamError::Reset`]; one already
    /// read to its end (or never opened) with [`StreamError::Closed`].
    pub fn read(
        &mut self,
        id: ConnId,
        stream: StreamId,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<ReadStatus, QuicError> {
        let c = self.conn_receiving(id, stream)?;
        let mut recv = c.conn.recv_stream(stream);
        let mut chunks = recv.read(true).map_err(|e| match e {
            quinn_proto::ReadableError::ClosedStream => StreamError::Closed { stream },
            quinn_proto::ReadableError::IllegalOrderedRead => {
                StreamError::IllegalOrderedRead { stream }
            }
        })?;
        let status = loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => sink(&chunk.bytes),
                Ok(None) => break Ok(ReadStatus::Finished),
                Err(quinn_proto::ReadError::Blocked) => break Ok(ReadStatus::Blocked),
                Err(quinn_proto::ReadError::Reset(code)) => {
                    break Err(StreamError::Reset { stream, code }.into());
                }
            }
        };
        // Whether flow-control credit must be sent: the connection is polled anyway.
        let _ = chunks.finalize();
        status
    }

    /// Closes the connection with an application error `code` and `reason`; a
    /// [`QuicEvent::Lost`](crate::QuicEvent::Lost) with [`ConnectionError::LocallyClosed`](crate::ConnectionError::LocallyClosed) follows.
    ///
    /// The close is immediate, as quinn's is: stream data written and not yet sent or
    /// acknowledged is abandoned, and the peer's reads of it fail. To have it delivered,
    /// [`finish`](Self::finish) the streams and close on their
    /// [`QuicEvent::Finished`](crate::QuicEvent::Finished) (or, for the peer's, after reading
    /// them to their end).
    pub fn close(&mut self, id: ConnId, code: VarInt, reason: &[u8]) -> Result<(), QuicError> {
        let now = self.map.to_std(self.latest);
        self.conn(id)?
            .conn
            .close(now, code, Bytes::copy_from_slice(reason));
        Ok(())
    }

    /// The connection's statistics (RTT, congestion window, losses, datagrams and bytes).
    pub fn connection_stats(&self, id: ConnId) -> Option<quinn_proto::ConnectionStats> {
        self.conns.get(id).map(|c| c.conn.stats())
    }

    /// The rate the connection's datagrams are paced at now, bit/s ([`Pacing::PerPacket`]
    /// only; `None` before its first RTT sample).
    ///
    /// [`Pacing::PerPacket`]: crate::Pacing::PerPacket
    pub fn pacing_rate(&self, id: ConnId) -> Option<u64> {
        self.conns.get(id)?;
        self.pacer.rate(id).map(u64::from)
    }

    /// The connection's peer address.
    pub fn remote_address(&self, id: ConnId) -> Option<SocketAddr> {
        self.conns.get(id).map(Conn::peer)
    }

    /// The connections the driver holds as quinn-proto connections (open, or closed and not
    /// yet freed or compacted).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The connections not yet ended: in their handshake or up, and not yet seen by the
    /// driver to end (once it has, a [`QuicEvent::Lost`](crate::QuicEvent::Lost) for it is
    /// queued or given, and it is no longer counted, also while that event is handled).
    /// What a server that stops after some connections waits for, so that it does not cut
    /// off one still in its handshake.
    pub fn live_connections(&self) -> usize {
        self.conns
            .iter()
            .filter(|(_, c)| c.ending.lost.is_none())
            .count()
    }

    /// The ids of the connections the driver holds (see [`Driver::connections`]).
    pub fn connection_ids(&self) -> Vec<ConnId> {
        self.conns.iter().map(|(id, _)| id).collect()
    }

    /// Closed connections held as compact records.
    pub fn closed_held(&self) -> usize {
        self.closed.len()
    }

    /// Departures waiting in the pacer (datagrams, or GSO batches of
    /// [`DriverConfig::datagrams_per_departure`](crate::DriverConfig::datagrams_per_departure)); always 0 under [`Pacing::Quinn`](crate::Pacing::Quinn). An
    /// application that wants its last data to leave before it stops the loop waits for this
    /// to reach 0; a connection's close never waits here.
    pub fn paced_datagrams(&self) -> usize {
        self.pacer.len() + self.released.len()
    }

    /// The driver's counters.
    pub fn stats(&self) -> DriverStats {
        DriverStats {
            closed: self.closed.stats,
            ..self.stats.clone()
        }
    }

    /// How late quinn-proto's timeouts were handled past the time it asked for, ns.
    pub fn timer_lateness(&self) -> &Histogram<u64> {
        &self.timer_lateness
    }

    /// How late paced datagrams left past their departure times, ns.
    pub fn release_lateness(&self) -> &Histogram<u64> {
        &self.release_lateness
    }

    /// Asks for a [`handle_timeout`](Self::handle_timeout) at `at` (an application timer);
    /// the earliest asked for wins until it has passed.
    pub fn wake_at(&mut self, at: Instant) {
        if let Some((event, t)) = self.app_timer {
            if !t.is_after(at) {
                return;
            }
            self.timers.cancel(event);
        }
        self.app_timer = self
            .timers
            .schedule_at(at, Timer::App)
            .ok()
            .map(|event| (event, at));
    }
}
