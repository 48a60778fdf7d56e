//! `softtimers quic server|client` on the command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use softtimer_quic::perf::ClientPlan;

use super::{ClientOptions, ClientRun, Common, ServerOptions, ServerRun, client, server};
use crate::output::WithJson;
use crate::parse::{parse_bytes, parse_duration};

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
    /// Where to listen (an IP address and a port: `0.0.0.0:4433`, `[::]:4433`).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Exit after this many connections have closed and no other is open (on the soft
    /// stacks, none in its handshake either); stock quinn accepts this many and exits once
    /// they have closed (default: serve until Ctrl-C, which ends the run with its report; a
    /// second Ctrl-C quits at once).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections: Option<u64>,
    /// Write the server's self-signed certificate (DER) here, for a client's --cert.
    #[arg(long)]
    pub cert_out: Option<PathBuf>,
    /// Validate each client's address with a Retry before its handshake (RFC 9000 §8.1.2:
    /// one round trip more, no state kept for an address that does not answer); the report
    /// counts them. QUIC stacks only.
    #[arg(long)]
    pub retry: bool,
    #[command(flatten)]
    pub common: Common,
}

impl ServerArgs {
    /// The server these arguments ask for.
    pub fn options(&self) -> ServerOptions {
        ServerOptions {
            listen: self.listen,
            common: self.common.clone(),
            connections: self.connections,
            cert_out: self.cert_out.clone(),
            retry: self.retry,
        }
    }
}

/// `softtimers quic client`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// The server (an IP address and a port; name its certificate with --server-name).
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
    /// Give up if the handshake has not completed in this time (1 ms to 1 hour).
    #[arg(long, default_value = "5s", value_parser = parse_connect_timeout)]
    pub connect_timeout: Duration,
    /// Do not check the bytes received against the perf pattern (for other servers).
    #[arg(long)]
    pub no_verify: bool,
    #[command(flatten)]
    pub common: Common,
}

impl ClientArgs {
    /// The client these arguments ask for.
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            to: self.to,
            server_name: self.server_name.clone(),
            common: self.common.clone(),
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

/// `--connect-timeout`: a duration from 1 ms (a handshake takes at least a round trip) to
/// an hour.
fn parse_connect_timeout(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < Duration::from_millis(1) || d > Duration::from_secs(3600) {
        return Err(format!("{text}: want 1 ms to 1 hour"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: Common,
    }

    fn common(args: &[&str]) -> Common {
        Cli::try_parse_from(std::iter::once("quic").chain(args.iter().copied()))
            .unwrap()
            .common
    }

    #[test]
    fn quinn_plain_takes_quinns_defaults_and_refuses_the_lab_s_tuning() {
        assert_eq!(common(&[]).window, super::super::DEFAULT_WINDOW);
        assert!(common(&[]).tail_probe, "on unless --no-tail-probe");
        assert!(!common(&["--no-tail-probe"]).tail_probe);
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
