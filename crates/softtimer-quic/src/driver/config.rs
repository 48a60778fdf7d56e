//! How a [`Driver`](super::Driver) runs its connections: pacing, timers, GSO batches,
//! closed-connection state, limits.

use std::sync::Arc;
use std::time::Duration;

use quinn_proto::ConnectionIdGenerator;

/// quinn's own cap on the datagrams of one GSO send (quinn 0.11 `MAX_TRANSMIT_SEGMENTS`).
pub const DEFAULT_MAX_DATAGRAMS: usize = 10;

/// How the datagrams of a connection are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Pacing {
    /// quinn-proto's own pacer: bursts of 10 to 256 datagrams every 2 ms, its pacing timer a
    /// soft event.
    #[default]
    Quinn,
    /// Every datagram (or every [`DriverConfig::datagrams_per_departure`] of them, sent
    /// together) gets its own departure time at 1.25 × cwnd / srtt and leaves from the
    /// departure-time scheduler ([`PacketPacer`](crate::pacing::PacketPacer)), as Linux's `fq` paces the kernel's TCP.
    /// A closed connection's CONNECTION_CLOSE leaves at once: like quinn-proto, the driver
    /// does not pace what is not congestion controlled.
    PerPacket,
}

/// What the driver keeps of a connection once it has closed, for the drain period
/// RFC 9000 §10.2 asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ClosedState {
    /// A compact record (its connection ID, the peer's address, the close datagram to
    /// repeat, one soft event), quinn-proto's `Connection` freed at once; see
    /// [`ClosedStats`](crate::ClosedStats).
    #[default]
    Compact,
    /// quinn-proto's `Connection` itself, until its drain ends.
    Full,
}

/// The coarsest [`DriverConfig::timer_granularity`]: a second (coarser rounds every timer
/// past any use, and far enough wraps the clock).
pub const MAX_GRANULARITY: Duration = Duration::from_secs(1);

/// The largest [`DriverConfig::wake_lateness`]: a second (a loop that wakes later than that
/// is not one to pace on, and far more would wrap the clock's arithmetic).
pub const MAX_WAKE_LATENESS: Duration = Duration::from_secs(1);

/// The longest [`DriverConfig::drain_period`]: a day.
pub const MAX_DRAIN_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// A factory of connection-ID generators (quinn-proto's `EndpointConfig::cid_generator`).
pub type CidGeneratorFactory = Arc<dyn Fn() -> Box<dyn ConnectionIdGenerator> + Send + Sync>;

/// How the driver runs its connections.
#[derive(Clone)]
pub struct DriverConfig {
    /// Per-packet pacing or quinn's own.
    pub pacing: Pacing,
    /// Round every timer quinn-proto asks for up to this granularity (from the driver's
    /// start), the way tokio's 1 ms wheel rounds: to separate timer precision from everything
    /// else that differs between runtimes. `None`: fire at the time asked.
    pub timer_granularity: Option<Duration>,
    /// The most datagrams of one GSO send (quinn's pacer path only; the I/O layer caps it
    /// by what its socket supports).
    pub max_datagrams: usize,
    /// With [`Pacing::PerPacket`], how many datagrams leave together at each departure
    /// time, as one GSO send. 1 spaces every datagram (a system call and, on an idle loop, a
    /// wake-up per datagram); 2 is the smallest burst Linux's TCP sends under pacing
    /// (`tcp_min_tso_segs`), at half the system calls, with pairs back to back. The I/O
    /// layer caps it by what its socket supports (1 without GSO).
    pub datagrams_per_departure: usize,
    /// `SO_SNDBUF` and `SO_RCVBUF` to ask for (the I/O layer's).
    pub socket_buffer: Option<usize>,
    /// Send a tail-loss probe (a PING) two smoothed RTTs, and what the peer's late ACKs
    /// have taught, after the latest data or ACK while data is unacknowledged, once per
    /// flight ([`probe`](crate::probe)): the peer's immediate ACK of it lets quinn-proto find
    /// a lost last packet about one RTT later, instead of after its probe timeout (which
    /// includes the peer's 25 ms ACK delay). Works with any congestion controller.
    pub tail_probe: bool,
    /// What a closed connection is kept as during its drain period.
    pub closed_state: ClosedState,
    /// Hold closed connections this long instead of quinn-proto's three PTOs (to make many
    /// pile up, for a measurement). `None`: quinn-proto's own period.
    pub drain_period: Option<Duration>,
    /// How late a wake-up of the loop running the driver may be: a paced departure alone
    /// tolerates that much, an event that needs precision does not
    /// ([`Timeout::spin`](crate::Timeout::spin)). [`QuicLoop::new`](crate::QuicLoop::new) sets it from its
    /// loop; a driver run by a [`QuicSocket`](crate::QuicSocket) on a loop of the caller's
    /// takes what the caller sets (its loop's `wake_lateness()`). At most
    /// [`MAX_WAKE_LATENESS`].
    pub wake_lateness: Duration,
    /// Seed for quinn-proto's endpoint random numbers (`None`: from the system). With a seed
    /// and a simulated clock, a run's transcript of times and sizes is reproducible.
    pub rng_seed: Option<[u8; 32]>,
    /// The connection-ID generator (quinn-proto's random 8-byte IDs by default). Its ID
    /// length is how the driver reads short headers to find closed connections.
    pub cid_generator: Option<CidGeneratorFactory>,
    /// The most connections the driver holds at once (open or closing, not compacted)
    /// before it refuses new ones: a peer past it gets CONNECTION_REFUSED at once, with no
    /// connection state kept for it (a flood of handshakes otherwise builds one connection,
    /// with its TLS state, per packet, each held until its idle timeout). `None`: no limit.
    pub max_connections: Option<usize>,
    /// Whether the socket refuses to fragment (quinn-udp's `!may_fragment()`), which path
    /// MTU discovery needs: without it quinn-proto never probes, whatever the transport
    /// configuration asks. [`QuicSocket`](crate::QuicSocket) sets it from its socket, as
    /// quinn's endpoint does; `false` for a driver whose I/O is the caller's until the caller
    /// says.
    pub allow_mtu_discovery: bool,
    /// Answer every new connection whose address is not yet validated with a Retry (RFC
    /// 9000 §8.1.2), as quinn's example server does with `--stateless-retry`: the client
    /// repeats its Initial with the token, which costs it a round trip, and the server keeps
    /// no state, and sends no more than the Retry, for a spoofed address. Off by default.
    ///
    /// ```
    /// use softtimer_quic::DriverConfig;
    ///
    /// // A server facing the open Internet: a connection limit (checked first: past it a
    /// // new connection is refused, not retried), and a Retry for every unvalidated address.
    /// let config = DriverConfig {
    ///     validate_addresses: true,
    ///     max_connections: Some(10_000),
    ///     ..DriverConfig::default()
    /// };
    /// # let _ = config;
    /// ```
    pub validate_addresses: bool,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            pacing: Pacing::Quinn,
            timer_granularity: None,
            max_datagrams: DEFAULT_MAX_DATAGRAMS,
            datagrams_per_departure: 1,
            socket_buffer: Some(8 << 20),
            tail_probe: true,
            closed_state: ClosedState::Compact,
            drain_period: None,
            wake_lateness: Duration::ZERO,
            rng_seed: None,
            cid_generator: None,
            max_connections: None,
            allow_mtu_discovery: false,
            validate_addresses: false,
        }
    }
}

impl std::fmt::Debug for DriverConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverConfig")
            .field("pacing", &self.pacing)
            .field("timer_granularity", &self.timer_granularity)
            .field("max_datagrams", &self.max_datagrams)
            .field("datagrams_per_departure", &self.datagrams_per_departure)
            .field("socket_buffer", &self.socket_buffer)
            .field("tail_probe", &self.tail_probe)
            .field("closed_state", &self.closed_state)
            .field("drain_period", &self.drain_period)
            .field("wake_lateness", &self.wake_lateness)
            .field("rng_seed", &self.rng_seed.is_some())
            .field("max_connections", &self.max_connections)
            .field("allow_mtu_discovery", &self.allow_mtu_discovery)
            .field("validate_addresses", &self.validate_addresses)
            .finish_non_exhaustive()
    }
}
