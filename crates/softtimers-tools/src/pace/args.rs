//! `softtimers pace` and `softtimers sink` on the command line.

use std::net::SocketAddr;
use std::time::Duration;

use softtimer_net::Rate;
use softtimer_rt::{IoBackend, SpinWindow};

use super::{
    BatchSend, MAX_PER_WAKEUP, PaceOptions, PaceReport, PaceTimer, Scheduler, SinkOptions,
    SinkReport, SinkTarget, pace, sink,
};
use crate::parse::{parse_duration, parse_spin_window};

/// `softtimers pace`: send UDP datagrams at a rate, paced by the timer chosen.
#[derive(clap::Args, Debug, Clone)]
pub struct PaceArgs {
    /// Where to send (an IP address and a port: `10.0.0.2:9000`, `[::1]:9000`).
    #[arg(long)]
    pub to: SocketAddr,
    /// The rate, bits per second with an optional k, M, G or T suffix (for example 500M).
    #[arg(long)]
    pub rate: Rate,
    /// UDP payload bytes per datagram (24 ..= 65507).
    #[arg(long, default_value_t = 1472)]
    pub size: usize,
    /// Flows, each paced at rate / flows.
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    /// How long to send (10s, 500ms, ...).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// What paces the datagrams.
    #[arg(long, value_enum, default_value = "soft")]
    pub timer: PaceTimer,
    /// The soft pacer's burst rate, at which a flow that fell behind catches up (default:
    /// twice --rate).
    #[arg(long)]
    pub burst: Option<Rate>,
    /// With `--timer soft`: how long before a send the idle loop stops blocking and spins
    /// (`0`: never spin, block until each send, the default and the cheapest; `calibrated`:
    /// this machine's measured wake-up lateness; or a duration such as `20us`). More
    /// spinning is more precise and costs more CPU.
    #[arg(long, default_value = "0", value_parser = parse_spin_window)]
    pub spin_window: SpinWindow,
    /// Datagrams of a flow sent back to back per wake-up, every that many intervals (soft
    /// timers or a timerfd): fewer wake-ups, in bursts.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PER_WAKEUP)))]
    pub per_wakeup: u32,
    /// How datagrams that leave at once are sent: one GSO send (`gso`) or one `sendmmsg`.
    #[arg(long, value_enum, default_value = "gso")]
    pub batch_send: BatchSend,
    /// The p99 departure error wanted (such as `50us`): as many datagrams per wake-up as it
    /// allows, and with soft timers the narrowest spin window that keeps one wake-up in a
    /// hundred within it, learnt from the loop's own wake-ups; instead of --spin-window and
    /// --per-wakeup.
    #[arg(long, value_parser = parse_duration, conflicts_with_all = ["spin_window", "per_wakeup"])]
    pub precision: Option<Duration>,
    /// With `--timer soft`: the backstop's frequency (1 / X), Hz. The backstop fires a send
    /// the host delayed past X; its helper looks once per X, a wake-up on another CPU.
    #[arg(long, default_value_t = super::DEFAULT_BACKSTOP_HZ)]
    pub backstop_hz: u64,
    /// With `--timer soft`: send each flow's datagrams with their own send, even when
    /// several flows are due at once (default: one send for them, as --batch-send says).
    #[arg(long)]
    pub no_batch: bool,
    /// With `--timer soft`: one soft-timer event per flow (`per-flow`, the paper's pacer),
    /// or one departure-time queue for all flows with one event at its next departure.
    #[arg(long, value_enum, default_value = "per-flow")]
    pub scheduler: Scheduler,
    /// With `--timer soft`: how the loop sends: `epoll` (a `send` per datagram), `uring`
    /// (queued in an io_uring and submitted with the loop's next wait: one system call for
    /// the sends and the wait), or `uring-sqpoll` (a kernel thread polls the ring: fewer
    /// system calls, but it costs a core).
    #[arg(long, default_value = "epoll")]
    pub io: IoBackend,
}

impl PaceArgs {
    /// The options these arguments stand for.
    pub fn options(&self) -> PaceOptions {
        PaceOptions {
            to: self.to,
            rate: self.rate,
            burst: self.burst,
            size: self.size,
            flows: self.flows,
            duration: self.duration,
            timer: self.timer,
            spin_window: self.spin_window,
            batch: !self.no_batch,
            scheduler: self.scheduler,
            io: self.io,
            per_wakeup: self.per_wakeup,
            batch_send: self.batch_send,
            precision: self.precision,
            backstop_hz: self.backstop_hz,
        }
    }
}

/// `softtimers sink`: receive UDP datagrams and measure them.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["listen", "observe"])))]
pub struct SinkArgs {
    /// Where to listen (an IP address and a port).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Observe datagrams to this port without owning it (a capture on --interface, with
    /// the same kernel timestamps; needs root): measures another tool's traffic, such as
    /// `iperf3 -u`, whose own server receives it.
    #[arg(long, conflicts_with = "listen")]
    pub observe: Option<u16>,
    /// The interface --observe captures on (default `lo`).
    #[arg(long)]
    pub interface: Option<String>,
    /// Stop after this long (default: when the traffic stops). Ctrl-C stops it too, with its
    /// report.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after this long without a datagram, once one has come.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub idle: Duration,
    /// The RTT the burstiness index is normalised by.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub rtt: Duration,
    /// A constant-rate virtual bottleneck for the burstiness index (for example the
    /// sender's target rate); default: Kobayashi's slow-start bottleneck.
    #[arg(long)]
    pub bottleneck: Option<Rate>,
    /// Gaps at most this long make datagrams one back-to-back burst.
    #[arg(long, default_value = "2us", value_parser = parse_duration)]
    pub burst_gap: Duration,
    /// The rate the sender was asked for: the report says how far the received rate is
    /// off it (`conformance_pct`).
    #[arg(long)]
    pub rate: Option<Rate>,
    /// With --observe: the sender's datagram size, for a sender that may use UDP
    /// segmentation (`pace --batch-send gso`): a capture sees one packet of k datagrams,
    /// counted as k datagrams at its time, as the receiving socket gets them.
    #[arg(long)]
    pub gso_segment: Option<usize>,
}

impl SinkArgs {
    /// The options these arguments stand for.
    ///
    /// # Errors
    ///
    /// `--interface` or `--gso-segment` without `--observe` (a socket's datagrams come
    /// whole, on its own address).
    pub fn options(&self) -> anyhow::Result<SinkOptions> {
        let target = match (self.listen, self.observe) {
            (Some(addr), _) => {
                for (given, flag) in [
                    (self.interface.is_some(), "--interface"),
                    (self.gso_segment.is_some(), "--gso-segment"),
                ] {
                    anyhow::ensure!(!given, "{flag} applies to --observe, not to --listen");
                }
                SinkTarget::Listen(addr)
            }
            (None, Some(port)) => SinkTarget::Observe {
                interface: self.interface.clone().unwrap_or_else(|| "lo".into()),
                port,
            },
            (None, None) => anyhow::bail!("sink needs --listen or --observe"),
        };
        Ok(SinkOptions {
            target,
            duration: self.duration,
            idle: self.idle,
            rtt: self.rtt,
            bottleneck: self.bottleneck,
            burst_gap: self.burst_gap,
            expected_rate: self.rate,
            gso_segment: self.gso_segment,
        })
    }
}

crate::program! {
    PaceArgs => PaceReport, |args| pace(&args.options());
    SinkArgs => SinkReport, |args| sink(&args.options()?);
}
