//! `softtimers flood`, `router` and `compute` on the command line.

use std::net::SocketAddr;
use std::time::Duration;

use softtimer_net::livelock::Quota;

use super::{
    ComputeReport, FloodOptions, FloodReport, RouterDesign, RouterOptions, RouterReport, compute,
    flood, router,
};
use crate::parse::{parse_duration, parse_quota};

/// `softtimers flood`.
#[derive(clap::Args, Debug, Clone)]
pub struct FloodArgs {
    /// Where to send (`host:port`).
    #[arg(long)]
    pub to: SocketAddr,
    /// Datagrams per second.
    #[arg(long)]
    pub rate: u64,
    /// UDP payload bytes (18: a minimum-size Ethernet frame).
    #[arg(long, default_value_t = 18)]
    pub size: usize,
    /// How long to send.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
}

/// `softtimers router`.
#[derive(clap::Args, Debug, Clone)]
pub struct RouterArgs {
    /// Where datagrams arrive (`host:port`).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Where they go (`host:port`).
    #[arg(long)]
    pub forward_to: SocketAddr,
    /// The design.
    #[arg(long, value_enum, default_value = "polling")]
    pub design: RouterDesign,
    /// A screening stage on the same core behind a 32-packet queue.
    #[arg(long)]
    pub screen: bool,
    /// Packets per polling turn (a number, or `unlimited`).
    #[arg(long, default_value = "10", value_parser = parse_quota)]
    pub quota: Quota,
    /// Per-packet forwarding work, ns of busy work.
    #[arg(long, default_value_t = 0)]
    pub work_ns: u64,
    /// Per-packet screening work, ns (with --screen).
    #[arg(long, default_value_t = 0)]
    pub screen_ns: u64,
    /// The share of each 10 ms period packet work may use, % (polling design).
    #[arg(long)]
    pub cpu_budget: Option<u32>,
    /// Polling design: run the polling thread at real-time priority (SCHED_FIFO, root),
    /// above normal processes, as in-kernel packet processing is.
    #[arg(long)]
    pub realtime: bool,
    /// How long to run.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
}

/// `softtimers compute`.
#[derive(clap::Args, Debug, Clone)]
pub struct ComputeArgs {
    /// How long.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
}

impl FloodArgs {
    /// The flood these arguments ask for.
    pub fn options(&self) -> FloodOptions {
        FloodOptions {
            to: self.to,
            rate_pps: self.rate,
            size: self.size,
            duration: self.duration,
        }
    }
}

impl RouterArgs {
    /// The router these arguments ask for.
    pub fn options(&self) -> RouterOptions {
        RouterOptions {
            listen: self.listen,
            forward_to: self.forward_to,
            design: self.design,
            screen: self.screen,
            quota: self.quota,
            work_ns: self.work_ns,
            screen_ns: self.screen_ns,
            cpu_budget: self.cpu_budget,
            realtime: self.realtime,
            duration: self.duration,
        }
    }
}

crate::program! {
    FloodArgs => FloodReport, |args| flood(&args.options());
    RouterArgs => RouterReport, |args| router(&args.options());
    ComputeArgs => ComputeReport, |args| compute(args.duration);
}
