//! `softtimers path` on the command line.

use std::time::Duration;

use anyhow::{Result, bail};
use softtimer_net::Rate;
use softtimer_net::path::{LinkConfig, QueueLimit};
use softtimer_rt::{IoBackend, SpinWindow};

use super::{COMMAND_SPIN_ARG, EmulatorOptions, PathReport, PathSpec, parse_loss, parse_queue};
use crate::parse::{parse_duration, parse_spin_window};

/// `softtimers path`: a command run with an emulated path between two namespaces.
#[derive(clap::Args, Debug, Clone)]
pub struct PathArgs {
    /// One-way delay, each direction (so the RTT is twice this).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub delay: Duration,
    /// Bottleneck rate, each direction (50mbit, 1G); default: none.
    #[arg(long)]
    pub rate: Option<Rate>,
    /// Drop-tail queue at the bottleneck: bytes (64kb) or packets (100p). Without --rate
    /// there is no bottleneck and no queue: the delay line holds at most 65,536 packets each
    /// way (more are dropped and counted as queue drops).
    #[arg(long, default_value = "64kb", value_parser = parse_queue)]
    pub queue: QueueLimit,
    /// Random loss, each direction (0.01 or 1%).
    #[arg(long, default_value = "0", value_parser = parse_loss)]
    pub loss: f64,
    /// One-way delay from b to a, if not --delay.
    #[arg(long, value_parser = parse_duration)]
    pub reverse_delay: Option<Duration>,
    /// Bottleneck rate from b to a, if not --rate.
    #[arg(long)]
    pub reverse_rate: Option<Rate>,
    /// Random loss from b to a, if not --loss.
    #[arg(long, value_parser = parse_loss)]
    pub reverse_loss: Option<f64>,
    /// Drop-tail queue from b to a, if not --queue.
    #[arg(long, value_parser = parse_queue)]
    pub reverse_queue: Option<QueueLimit>,
    /// How long the emulator spins before a packet is due instead of sleeping through
    /// it: a duration up to 1s, or `calibrated` (this machine's typical wake-up
    /// lateness). More is more precise and costs CPU while packets are pending.
    #[arg(long, default_value = COMMAND_SPIN_ARG, value_parser = parse_spin_window)]
    pub spin: SpinWindow,
    /// How the emulator reads and writes its devices: `epoll` (a system call per packet),
    /// `uring` (through an io_uring: multishot reads, writes submitted with the loop's next
    /// wait) or `uring-sqpoll` (a kernel thread polls the ring; it costs a core).
    #[arg(long, default_value = "epoll")]
    pub io: IoBackend,
    /// The CPU to pin the emulator to.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Seed of the random-loss generators.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// The command to run, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

impl PathArgs {
    /// The path these arguments describe: each direction's link (the reverse direction
    /// takes the forward one's values where not given).
    pub fn spec(&self) -> PathSpec {
        let a_to_b = LinkConfig {
            delay: self.delay,
            rate: self.rate,
            queue: self.queue,
            loss: self.loss,
        };
        let b_to_a = LinkConfig {
            delay: self.reverse_delay.unwrap_or(self.delay),
            rate: self.reverse_rate.or(self.rate),
            queue: self.reverse_queue.unwrap_or(self.queue),
            loss: self.reverse_loss.unwrap_or(self.loss),
        };
        PathSpec { a_to_b, b_to_a }
    }

    /// Runs the command with the path set up; returns how it ended and what the emulator
    /// measured.
    pub fn run(&self) -> Result<(std::process::ExitStatus, PathReport)> {
        let cpus = crate::cpu::cpus();
        if let Some(cpu) = self.cpu
            && cpu >= cpus
        {
            bail!("--cpu {cpu}: this machine has CPUs 0 to {}", cpus - 1);
        }
        let options = EmulatorOptions {
            cpu: self.cpu,
            seed: self.seed,
            spin: self.spin,
            io: self.io,
        };
        super::run_command(self.spec(), options, &self.command)
    }
}
