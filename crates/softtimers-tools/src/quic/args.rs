//! `softtimers quic server|client` on the command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use softtimer_quic::perf::ClientPlan;
use softtimer_rt::{IoBackend, SpinWindow};

use super::{
    AfterIdleArg, ClientOptions, ClientRun, Common, ServerOptions, ServerRun, Stack, client, server,
};
use crate::output::WithJson;
use crate::parse::{parse_bytes, parse_duration, parse_spin_window};

/// Options both QUIC sides take.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// The stack: quinn-proto on soft timers (`soft`, `soft-paced` with per-packet pacing,
    /// `soft-1ms` with timers rounded up to 1 ms), stock quinn on tokio (`quinn-tokio` with
    /// the lab's transport settings and its timers measured, `quinn-plain` with quinn's
    /// defaults), the same unchanged quinn on `softtimer-async` (`quinn-async`: the settings
    /// and measurement of `quinn-tokio`), or kernel TCP.
    #[arg(long, value_enum, default_value = "soft")]
    pub stack: Stack,
    /// Flow-control windows (bytes; k, M suffixes): at least twice the path's BDP.
    #[arg(long, default_value = "16M", value_parser = parse_bytes)]
    pub window: u64,
    /// What the congestion controller (CUBIC) does after an idle period.
    #[arg(long, value_enum, default_value = "keep")]
    pub after_idle: AfterIdleArg,
    /// Ask the peer to acknowledge only every N ack-eliciting packets (ACK frequency).
    #[arg(long, value_name = "N")]
    pub ack_every: Option<u32>,
    /// The largest ACK delay to ask the peer for (ACK frequency; alone or with --ack-every).
    #[arg(long, value_parser = parse_duration)]
    pub max_ack_delay: Option<Duration>,
    /// How long the soft-timer loop spins before a due event instead of sleeping through
    /// it (the soft stacks): a duration up to 1s, or `calibrated` (this machine's typical
    /// wake-up lateness; the default). `0` never spins: cheaper, and events run a wake-up
    /// late.
    #[arg(long, value_parser = parse_spin_window)]
    pub spin: Option<SpinWindow>,
    /// How the soft stacks' loop does its I/O: `epoll` (quinn-udp's `sendmsg`/`recvmmsg`,
    /// as stock quinn), `uring` (the same datagrams queued in an io_uring and submitted with
    /// the loop's next wait, received by a multishot `recvmsg`) or `uring-sqpoll` (a kernel
    /// thread polls the ring: fewer system calls, but it costs a core).
    #[arg(long, default_value = "epoll")]
    pub io: IoBackend,
    /// With `--stack soft-paced`: datagrams that leave together (one GSO send) at each
    /// departure time. 1 spaces every datagram; 2 halves the system calls and wake-ups.
    #[arg(long, default_value_t = 1)]
    pub per_departure: usize,
    /// Turn off the soft-timer driver's tail-loss probe (a PING two smoothed RTTs, and an
    /// allowance learned from the peer's late ACKs, after the last data or ACK while data is
    /// unacknowledged, which finds a lost last packet in about an RTT instead of quinn's
    /// probe timeout of 25 ms and more).
    #[arg(long)]
    pub no_tail_probe: bool,
    /// Run path MTU discovery, as quinn does by default (the QUIC stacks but quinn-plain,
    /// which always does; off: every datagram is 1200 bytes, as in the lab's path runs).
    #[arg(long)]
    pub mtu_discovery: bool,
    /// Close a connection after this long without a packet from the peer (the QUIC stacks;
    /// the smaller of the two sides' values applies). A server whose client's close was lost
    /// exits after this long. Default: 30 s.
    #[arg(long, value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
}

impl CommonArgs {
    /// The settings these arguments stand for.
    pub fn common(&self) -> Common {
        Common {
            stack: self.stack,
            window: self.window,
            after_idle: self.after_idle,
            ack_every: self.ack_every,
            max_ack_delay: self.max_ack_delay,
            spin: self.spin,
            io: self.io,
            per_departure: self.per_departure,
            tail_probe: !self.no_tail_probe,
            idle_timeout: self.idle_timeout,
            mtu_discovery: self.mtu_discovery,
        }
    }
}

/// `softtimers quic`: the two sides.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum QuicCommand {
    /// Serve the perf protocol: answer each stream with the number of bytes it asks for.
    Server(WithJson<ServerArgs>),
    /// Ask a perf-protocol server for data and report goodput, handshake time, request
    /// latency and losses.
    Client(WithJson<ClientArgs>),
}

/// `softtimers quic server`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// Where to listen (`host:port`).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Exit after this many connections have closed (default: serve until Ctrl-C).
    #[arg(long)]
    pub connections: Option<u64>,
    /// Write the server's self-signed certificate (DER) here, for a client's --cert.
    #[arg(long)]
    pub cert_out: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl ServerArgs {
    /// The server these arguments ask for.
    pub fn options(&self) -> ServerOptions {
        ServerOptions {
            listen: self.listen,
            common: self.common.common(),
            connections: self.connections,
            cert_out: self.cert_out.clone(),
        }
    }
}

/// `softtimers quic client`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// The server (`host:port`).
    #[arg(long)]
    pub to: SocketAddr,
    /// Bytes to download per request (k, M, G suffixes).
    #[arg(long, value_parser = parse_bytes)]
    pub download: u64,
    /// Bytes to upload per request.
    #[arg(long, default_value = "0", value_parser = parse_bytes)]
    pub upload: u64,
    /// Requests, one after another on one connection.
    #[arg(long, default_value_t = 1)]
    pub requests: u64,
    /// Start request k at k × this after the first (an application-limited sender).
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// Before the requests, download this many bytes and then stay idle for --idle.
    #[arg(long, value_parser = parse_bytes, requires = "idle")]
    pub warmup: Option<u64>,
    /// The idle period after --warmup.
    #[arg(long, value_parser = parse_duration, requires = "warmup")]
    pub idle: Option<Duration>,
    /// Accept any server certificate.
    #[arg(long, conflicts_with = "cert")]
    pub insecure: bool,
    /// Trust exactly this certificate (DER, as `quic server --cert-out` writes it).
    #[arg(long)]
    pub cert: Option<PathBuf>,
    /// The name the server's certificate must carry.
    #[arg(long, default_value = "localhost")]
    pub server_name: String,
    /// Give up if the handshake has not completed in this time.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Do not check the bytes received against the perf pattern (for other servers).
    #[arg(long)]
    pub no_verify: bool,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl ClientArgs {
    /// The client these arguments ask for.
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            to: self.to,
            server_name: self.server_name.clone(),
            common: self.common.common(),
            plan: ClientPlan {
                download: self.download,
                upload: self.upload,
                requests: self.requests,
                interval: self.interval,
                warmup: self.warmup.zip(self.idle),
                verify: !self.no_verify,
                connect_timeout: self.connect_timeout,
            },
            insecure: self.insecure,
            cert: self.cert.clone(),
        }
    }
}

crate::program! {
    ServerArgs => ServerRun, |args| server(&args.options());
    ClientArgs => ClientRun, |args| client(&args.options());
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn common(args: &[&str]) -> Common {
        Cli::try_parse_from(std::iter::once("quic").chain(args.iter().copied()))
            .unwrap()
            .common
            .common()
    }

    #[test]
    fn quinn_plain_takes_quinns_defaults_and_refuses_the_lab_s_tuning() {
        assert_eq!(common(&[]).window, super::super::DEFAULT_WINDOW);
        assert!(common(&["--stack", "quinn-plain"]).tuning().is_ok());
        for flags in [
            &["--window", "1M"][..],
            &["--mtu-discovery"],
            &["--ack-every", "4"],
            &["--idle-timeout", "3s"],
            &["--spin", "0"],
            &["--no-tail-probe"],
        ] {
            let mut args = vec!["--stack", "quinn-plain"];
            args.extend_from_slice(flags);
            let err = common(&args).tuning().unwrap_err().to_string();
            assert!(err.contains(flags[0]), "{flags:?}: {err}");
        }
        assert!(
            common(&["--stack", "quinn-tokio", "--mtu-discovery"])
                .tuning()
                .unwrap()
                .mtu_discovery
        );
        assert!(
            common(&["--stack", "kernel-tcp", "--mtu-discovery"])
                .tuning()
                .is_err()
        );
    }
}
