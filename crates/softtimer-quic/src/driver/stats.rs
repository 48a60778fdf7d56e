//! The driver's counters ([`Driver::stats`](super::Driver::stats)).

use super::ClosedStats;
#[cfg(doc)]
use super::{Driver, DriverConfig};

/// The driver's counters.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct DriverStats {
    /// Datagrams handed to [`Driver::handle_datagram`].
    pub datagrams_received: u64,
    /// Datagrams quinn-proto's endpoint took without a connection event or a response:
    /// malformed, for an unknown connection that gets no reset, or buffered for a
    /// connection being accepted; and those for a connection closed just then under an ID
    /// its record does not keep.
    pub datagrams_ignored: u64,
    /// Transmits handed out by [`Driver::poll_transmit`].
    pub transmits: u64,
    /// quinn-proto timeouts handled.
    pub timeouts: u64,
    /// Tail-loss probes sent ([`DriverConfig::tail_probe`]). A probe with nothing lost
    /// (the peer was only delaying its ACK) costs one PING.
    pub tail_probes: u64,
    /// Tail-loss probes after which quinn-proto declared packets lost before the connection
    /// next sent data: the probes that found a loss.
    pub tail_probes_finding_loss: u64,
    /// Stateless resets quinn-proto's endpoint sent (answers to short-header packets for
    /// connections it does not know).
    pub stateless_resets: u64,
    /// New connections refused at [`DriverConfig::max_connections`].
    pub connections_refused: u64,
    /// Retry packets sent to unvalidated addresses ([`DriverConfig::validate_addresses`]):
    /// one per Initial datagram from such an address (a client whose first flight is two
    /// datagrams draws two).
    pub retries: u64,
    /// Paced datagrams not sent because their connection ended (closed by either side,
    /// timed out, reset, or freed) while they waited for their departure time: a closed
    /// connection sends nothing but its CONNECTION_CLOSE.
    pub paced_dropped_after_close: u64,
    /// The closed-connection records.
    pub closed: ClosedStats,
}
