//! `softtimers path`: a path emulator on soft timers between two network namespaces.
//!
//! This kernel has no `netem`, `fq` or `cake`. The emulator makes two network namespaces,
//! `a` and `b`, each with a TUN device whose other end is this process: whatever either
//! namespace sends to the other (any protocol; the kernel's TCP included) is read here,
//! given to a [`Link`](softtimer_net::path::Link) per direction (one-way delay, bottleneck rate, drop-tail queue,
//! random loss), and written into the other namespace at the time the link says, by a soft
//! event on the `softtimer-rt` loop. It measures itself: how late each packet was written
//! against its due time, the spacing of back-to-back packets at the bottleneck against the
//! rate, and the queueing delay each packet got.
//!
//! Addresses: `a` is 10.201.0.1 and `b` is 10.201.0.2, point to point.

use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use softtimer_net::path::{LinkConfig, QueueLimit};
use softtimer_rt::RingCounters;

mod args;
mod emulator;
mod measure;

pub use args::PathArgs;

use crate::output::Report;
pub use emulator::{COMMAND_SPIN, COMMAND_SPIN_ARG, EmulatorOptions, RunningPath};

/// The address of namespace `a`.
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);
/// The address of namespace `b`.
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);

/// Which side of the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Namespace `a` (10.201.0.1).
    A,
    /// Namespace `b` (10.201.0.2).
    B,
}

/// Both directions of a path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathSpec {
    /// Packets from `a` to `b`.
    pub a_to_b: LinkConfig,
    /// Packets from `b` to `a`.
    pub b_to_a: LinkConfig,
}

/// What one direction measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DirectionReport {
    /// Packets read from the sending side.
    pub packets: u64,
    /// Packets written to the receiving side.
    pub delivered: u64,
    /// Bytes written.
    pub delivered_bytes: u64,
    /// Dropped at the tail of a full queue.
    pub queue_drops: u64,
    /// Of `queue_drops`, those from the start of the 50 ms interval in which this
    /// direction's delivered bytes passed half their total (later drops included): a bulk
    /// transfer's drops once its start, and a window's overshoot at the end of slow start,
    /// are behind it. Drops count at their arrival and bytes at their delivery, one delay
    /// later (at most 50 ms on the paths the lab emulates).
    pub queue_drops_second_half: u64,
    /// Lost at random.
    pub random_losses: u64,
    /// Writes that failed.
    pub write_errors: u64,
    /// Packets the kernel dropped on the sending side's device before the emulator read
    /// them (its queue overran); `None` if it could not be read.
    pub device_drops: Option<u64>,
    /// How late packets were released (handed to the receiving side's device) past their
    /// due time.
    pub delay_error: Quantiles,
    /// Back-to-back packets' measured rate against the configured rate, % (positive:
    /// faster); `None` without a bottleneck or without a standing queue.
    pub rate_error_pct: Option<f64>,
    /// Back-to-back pairs measured for `rate_error_pct`.
    pub back_to_back: u64,
    /// Queueing delay at the bottleneck.
    pub queue_delay: Quantiles,
    /// Standard deviation of the gaps between packets as they arrived from the sender
    /// (its departure spacing, before the bottleneck), µs; gaps over 10 ms (idle) left out.
    pub sender_gap_stddev_us: Option<f64>,
    /// Standard deviation of the gaps between packets as they were delivered to the
    /// receiver, µs; gaps over 10 ms left out.
    pub interarrival_stddev_us: Option<f64>,
    /// Kobayashi's burstiness index B of the sender's packets (Section V): the mean wait
    /// they would see at a queue served at the bottleneck rate, over the path's RTT, the
    /// first 20 packets left out; `None` without a bottleneck or a delay.
    pub burstiness_index: Option<f64>,
    /// Over time, per 50 ms: (s since start, largest queueing delay in ms, Mbit/s delivered).
    pub timeline: Vec<(f64, f64, f64)>,
}

/// A delay's distribution over a direction's packets, µs; `None` where no packet was
/// measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Median.
    pub p50_us: Option<f64>,
    /// 99th percentile.
    pub p99_us: Option<f64>,
    /// Largest.
    pub max_us: Option<f64>,
}

impl Quantiles {
    /// The median, 99th percentile and maximum of `h`, recorded in ns.
    pub fn of_ns(h: &hdrhistogram::Histogram<u64>) -> Quantiles {
        let us = |q: f64| (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0);
        Quantiles {
            p50_us: us(0.5),
            p99_us: us(0.99),
            max_us: us(1.0),
        }
    }
}

/// What the emulator measured, both directions.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PathReport {
    /// The worst direction's 99th-percentile delay error, µs (a direction that carried
    /// nothing is left out).
    pub delay_error_p99_us: Option<f64>,
    /// The rate error of the direction with the most back-to-back pairs, %.
    pub rate_error_pct: Option<f64>,
    /// `a` to `b`.
    pub a_to_b: DirectionReport,
    /// `b` to `a`.
    pub b_to_a: DirectionReport,
    /// How long the emulator ran, s.
    pub duration_s: f64,
}

/// Parses a queue limit: bytes (`64kb`, `100000`) or packets (`100p`, `100pkts`).
pub fn parse_queue(text: &str) -> Result<QueueLimit, String> {
    let t = text.trim();
    if let Some(n) = t.strip_suffix("pkts").or_else(|| t.strip_suffix('p')) {
        let n: u64 = n
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a packet count (write 100p)"))?;
        return Ok(QueueLimit::Packets(n));
    }
    Ok(QueueLimit::Bytes(crate::parse::parse_bytes(t)?))
}

/// Parses a loss probability: `0.01` or `1%`.
pub fn parse_loss(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (n, scale) = match t.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (t, 1.0),
    };
    let p: f64 = n
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a probability (write 0.01 or 1%)"))?;
    let p = p * scale;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!(
            "{text:?}: a loss probability must be between 0 and 1"
        ));
    }
    Ok(p)
}

/// Runs `argv` with a path set up (namespaces named in `SOFTTIMERS_PATH_A` and `_B`,
/// addresses in `SOFTTIMERS_PATH_ADDR_A` and `_B`), then removes everything and returns
/// how the command ended with what the emulator measured. Ctrl-C or `SIGTERM` to this
/// process ends the command (`SIGTERM` to it, [`COMMAND_GRACE`] later if it has not ended
/// by itself) and the path still reports ([`crate::interrupt`]).
pub fn run_command(
    spec: PathSpec,
    options: EmulatorOptions,
    argv: &[String],
) -> Result<(ExitStatus, PathReport)> {
    let Some((program, args)) = argv.split_first() else {
        bail!("no command given: write `softtimers path [OPTIONS] -- CMD ARGS...`");
    };
    let path = RunningPath::start_with("cmd", spec, options)?;
    // Ctrl-C reaches the command from the terminal already (one process group), and a
    // command with its own summary needs a moment for it; `SIGTERM` to `path` alone does
    // not reach it. So the command gets `SIGTERM` after a grace period, through a pidfd (no
    // other process by a reused PID), unless it has ended. Registered before the command
    // starts, so that no signal finds neither handler.
    let pidfd: Arc<OnceLock<OwnedFd>> = Arc::new(OnceLock::new());
    let fallback_pid = Arc::new(AtomicU32::new(0));
    let _interrupt = {
        let (pidfd, fallback_pid) = (Arc::clone(&pidfd), Arc::clone(&fallback_pid));
        crate::interrupt::stop_on_interrupt(move || {
            std::thread::spawn(move || {
                std::thread::sleep(COMMAND_GRACE);
                let term = rustix::process::Signal::TERM;
                if let Some(fd) = pidfd.get() {
                    let _ = rustix::process::pidfd_send_signal(fd, term);
                } else if let Some(pid) =
                    rustix::process::Pid::from_raw(fallback_pid.load(Ordering::Relaxed) as i32)
                {
                    let _ = rustix::process::kill_process(pid, term);
                }
            });
        })
    };
    let child = Command::new(program)
        .args(args)
        .env("SOFTTIMERS_PATH_A", path.namespace(Side::A))
        .env("SOFTTIMERS_PATH_B", path.namespace(Side::B))
        .env("SOFTTIMERS_PATH_ADDR_A", ADDR_A.to_string())
        .env("SOFTTIMERS_PATH_ADDR_B", ADDR_B.to_string())
        .spawn();
    let status = child.and_then(|mut child| {
        let pid = rustix::process::Pid::from_raw(child.id() as i32);
        let opened =
            pid.map(|pid| rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()));
        match opened {
            Some(Ok(fd)) => {
                let _ = pidfd.set(fd);
            }
            // No pidfds (Linux before 5.3): the PID itself, which a reaped child's
            // successor could reuse; the grace period is short, so that is unlikely.
            _ => fallback_pid.store(child.id(), Ordering::Relaxed),
        }
        child.wait()
    });
    let report = path.finish()?;
    let status = status.with_context(|| format!("cannot run {program}"))?;
    Ok((status, report))
}

/// How long an interrupted `path` gives its command to end on its own before `SIGTERM`.
pub const COMMAND_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How a command ended, as a shell says it: `None` when it succeeded.
pub fn command_failure(status: ExitStatus) -> Option<String> {
    use std::os::unix::process::ExitStatusExt as _;
    if status.success() {
        return None;
    }
    Some(match (status.code(), status.signal()) {
        (Some(code), _) => format!("the command exited with status {code}"),
        (None, Some(signal)) => format!("the command was killed by signal {signal}"),
        (None, None) => format!("the command ended: {status}"),
    })
}

impl DirectionReport {
    /// Packets read but neither delivered, dropped, lost nor failed to write: still delayed
    /// or queued when the path was taken down.
    pub fn left_in_path(&self) -> u64 {
        self.packets.saturating_sub(
            self.delivered + self.queue_drops + self.random_losses + self.write_errors,
        )
    }

    /// Settles the writes made through the ring into the receiving device, whose counters
    /// are `ring`, at the end of a run: they were counted delivered, packets and bytes, as
    /// they were queued. Those the device refused move to the write errors; and, when not
    /// every write completed (`all_completed` false: the last wait failed or outlasted its
    /// limit), so does every one the ring did not confirm sent.
    pub(crate) fn settle_ring_writes(&mut self, ring: &RingCounters, all_completed: bool) {
        let (packets, bytes) = match all_completed {
            true => (ring.refused, ring.refused_bytes),
            false => (
                self.delivered.saturating_sub(ring.sent),
                self.delivered_bytes.saturating_sub(ring.sent_bytes),
            ),
        };
        let packets = packets.min(self.delivered);
        self.delivered -= packets;
        self.delivered_bytes -= bytes.min(self.delivered_bytes);
        self.write_errors += packets;
    }
}

/// A line per direction, on stderr: the command's stdout is its child's.
impl Report for PathReport {
    const ON_STDERR: bool = true;

    fn text(&self) -> String {
        let report = self;
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        let mut out = String::new();
        for (name, d) in [("a→b", &report.a_to_b), ("b→a", &report.b_to_a)] {
            out += &format!(
                "{name}: {} packets, {} delivered, {} still in the path at the end, {} queue drops ({} in the second half), {} lost, {} device drops; delay error p50 {} µs, p99 {} µs, max {} µs; queueing p99 {} µs; rate error {} %\n",
                d.packets,
                d.delivered,
                d.left_in_path(),
                d.queue_drops,
                d.queue_drops_second_half,
                d.random_losses,
                d.device_drops.map_or("-".to_string(), |n| n.to_string()),
                f(d.delay_error.p50_us),
                f(d.delay_error.p99_us),
                f(d.delay_error.max_us),
                f(d.queue_delay.p99_us),
                f(d.rate_error_pct),
            );
        }
        out
    }
}

/// The fd of a TUN device is what keeps it: a check for tests that devices are gone.
pub fn device_exists(name: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(name).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use softtimer_rt::SpinWindow;

    /// Every packet read is accounted for: what was neither delivered, dropped, lost nor
    /// failed was still in the path (a run that ended within a delay, or a slow queue).
    #[test]
    fn packets_left_in_the_path_complete_the_count() {
        let d = DirectionReport {
            packets: 128,
            delivered: 80,
            queue_drops: 6,
            random_losses: 2,
            write_errors: 1,
            ..DirectionReport::default()
        };
        assert_eq!(d.left_in_path(), 39);
        let report = PathReport {
            delay_error_p99_us: None,
            rate_error_pct: None,
            a_to_b: d,
            b_to_a: DirectionReport::default(),
            duration_s: 1.0,
        };
        assert!(report.text().contains("80 delivered, 39 still in the path"));
    }

    /// Twelve writes of 1,000 bytes queued through the ring and counted delivered.
    fn twelve_queued() -> DirectionReport {
        DirectionReport {
            packets: 12,
            delivered: 12,
            delivered_bytes: 12_000,
            ..DirectionReport::default()
        }
    }

    /// Every write completed: the two the device refused, and their bytes, are write errors.
    #[test]
    fn refused_ring_writes_are_not_delivered() {
        let mut d = twelve_queued();
        let ring = RingCounters {
            sent: 10,
            sent_bytes: 10_000,
            refused: 2,
            refused_bytes: 2_000,
            ..RingCounters::default()
        };
        d.settle_ring_writes(&ring, true);
        assert_eq!(
            (d.delivered, d.delivered_bytes, d.write_errors),
            (10, 10_000, 2)
        );
        assert_eq!(d.left_in_path(), 0);
    }

    /// The last wait gave up: of twelve queued, nine confirmed sent (one refused, two never
    /// heard of), so three are write errors, their bytes out of the delivered.
    #[test]
    fn unconfirmed_ring_writes_are_not_delivered() {
        let mut d = twelve_queued();
        let ring = RingCounters {
            sent: 9,
            sent_bytes: 9_000,
            refused: 1,
            refused_bytes: 1_000,
            ..RingCounters::default()
        };
        d.settle_ring_writes(&ring, false);
        assert_eq!(
            (d.delivered, d.delivered_bytes, d.write_errors),
            (9, 9_000, 3)
        );
        assert_eq!(d.left_in_path(), 0);
    }

    /// Counters that do not add up (more refused than were queued) take out no more than was
    /// counted delivered.
    #[test]
    fn ring_settlement_never_goes_below_zero() {
        let mut d = twelve_queued();
        let ring = RingCounters {
            refused: 20,
            refused_bytes: 40_000,
            ..RingCounters::default()
        };
        d.settle_ring_writes(&ring, true);
        assert_eq!((d.delivered, d.delivered_bytes, d.write_errors), (0, 0, 12));
    }

    #[test]
    fn the_command_spin_argument_is_the_command_spin() {
        assert_eq!(
            crate::parse::parse_spin_window(COMMAND_SPIN_ARG),
            Ok(SpinWindow::Fixed(COMMAND_SPIN))
        );
    }
}
