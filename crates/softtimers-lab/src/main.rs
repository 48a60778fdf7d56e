//! The `softtimers` command. See the crate documentation of `softtimers_lab`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use softtimer_net::Rate;
use softtimer_net::livelock::Quota;
use softtimer_rt::SpinWindow;
use softtimers_lab::alloc_count::CountingAlloc;
use softtimers_lab::harness::{Client, with_progress, write_json};
use softtimers_lab::pace::{self, PaceTimer, parse_duration, parse_spin_window};
use softtimers_lab::router::{self, RouterDesign};
use softtimers_lab::{bench_core, bench_timers, info, lab, report};

/// Parses `--quota`: a number of packets (at least 1) or `unlimited`.
fn parse_quota(text: &str) -> Result<Quota, String> {
    if text == "unlimited" {
        return Ok(Quota::Unlimited);
    }
    let n: u32 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a packet count (write 10, or unlimited)"))?;
    Quota::packets(n).map_err(|e| e.to_string())
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Soft timers for user-space networking: clock info, benchmarks, and the lab that re-runs
/// the papers' experiments.
#[derive(Parser, Debug)]
#[command(name = "softtimers", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The measurement clock in use and why, its resolution, the backstop's, and the cost of
    /// one clock read.
    Info {
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Micro-benchmarks.
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
    /// The main job: run every experiment and write a report (default into `results/`).
    Lab {
        /// One experiment only (default: all).
        #[arg(value_enum, default_value = "all")]
        step: lab::Which,
        /// A short run (a few seconds per step), as CI does.
        #[arg(long)]
        quick: bool,
        /// Where to write the report, JSON and plots.
        #[arg(long, default_value = "results")]
        out: PathBuf,
        /// The HTTP load generator: the project's own, or wrk as a cross-check.
        #[arg(long, value_enum, default_value = "own")]
        client: Client,
    },
    /// Send UDP datagrams at a rate, paced by the timer chosen, and report the achieved rate,
    /// the CPU time per datagram and the send intervals.
    Pace {
        /// Where to send (`host:port`).
        #[arg(long)]
        to: std::net::SocketAddr,
        /// The rate, bits per second with an optional k, M, G suffix (for example 500M).
        #[arg(long)]
        rate: Rate,
        /// UDP payload bytes per datagram (24 ..= 65507).
        #[arg(long, default_value_t = 1472)]
        size: usize,
        /// Flows, each paced at rate / flows.
        #[arg(long, default_value_t = 1)]
        flows: u32,
        /// How long to send (10s, 500ms, ...).
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        duration: std::time::Duration,
        /// What paces the datagrams.
        #[arg(long, value_enum, default_value = "soft")]
        timer: PaceTimer,
        /// The soft pacer's burst rate, at which a flow that fell behind catches up (default:
        /// twice --rate).
        #[arg(long)]
        burst: Option<Rate>,
        /// With `--timer soft`: how long before a send the idle loop stops blocking and spins
        /// (`calibrated`: this machine's measured wake-up lateness; `0`: never spin; or a
        /// duration such as `20us`). More spinning is more precise and costs more CPU.
        #[arg(long, default_value = "calibrated", value_parser = parse_spin_window)]
        spin_window: SpinWindow,
        /// With `--timer soft`: send each flow's datagram with its own `send`, even when
        /// several flows are due at once (default: one `sendmmsg` for them).
        #[arg(long)]
        no_batch: bool,
        /// With `--timer soft`: one soft-timer event per flow (`per-flow`, the paper's pacer),
        /// or one departure-time queue for all flows with one event at its next departure.
        #[arg(long, value_enum, default_value = "per-flow")]
        scheduler: pace::Scheduler,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Receive UDP datagrams and report the rate, inter-arrival statistics (kernel
    /// timestamps), the longest burst and the burstiness index; works for any sender.
    #[command(group(clap::ArgGroup::new("input").required(true).args(["listen", "observe"])))]
    Sink {
        /// Where to listen (`host:port`).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Observe datagrams to this port without owning it (a capture on --interface, with
        /// the same kernel timestamps; needs root): measures another tool's traffic, such as
        /// `iperf3 -u`, whose own server receives it.
        #[arg(long, conflicts_with = "listen")]
        observe: Option<u16>,
        /// The interface --observe captures on.
        #[arg(long, default_value = "lo", requires = "observe")]
        interface: String,
        /// Stop after this long (default: when the traffic stops).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<std::time::Duration>,
        /// Stop after this long without a datagram, once one has come.
        #[arg(long, default_value = "2s", value_parser = parse_duration)]
        idle: std::time::Duration,
        /// The RTT the burstiness index is normalised by.
        #[arg(long, default_value = "100ms", value_parser = parse_duration)]
        rtt: std::time::Duration,
        /// A constant-rate virtual bottleneck for the burstiness index (for example the
        /// sender's target rate); default: Kobayashi's slow-start bottleneck.
        #[arg(long)]
        bottleneck: Option<Rate>,
        /// Gaps at most this long make datagrams one back-to-back burst.
        #[arg(long, default_value = "2us", value_parser = parse_duration)]
        burst_gap: std::time::Duration,
        /// The rate the sender was asked for: the report says how far the received rate is
        /// off it (`conformance_pct`).
        #[arg(long)]
        rate: Option<Rate>,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Send minimum-size UDP datagrams at a rate (the livelock experiments' flood), in
    /// batches on a schedule; reports the rate reached.
    Flood {
        /// Where to send (`host:port`).
        #[arg(long)]
        to: std::net::SocketAddr,
        /// Datagrams per second.
        #[arg(long)]
        rate: u64,
        /// UDP payload bytes (18: a minimum-size Ethernet frame).
        #[arg(long, default_value_t = 18)]
        size: usize,
        /// How long to send.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        duration: std::time::Duration,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// A user-space UDP router: forwards what arrives on --listen to --forward-to, in the
    /// livelock-free polling design or the 4.2BSD baseline.
    Router {
        /// Where datagrams arrive (`host:port`).
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Where they go (`host:port`).
        #[arg(long)]
        forward_to: std::net::SocketAddr,
        /// The design.
        #[arg(long, value_enum, default_value = "polling")]
        design: RouterDesign,
        /// A screening stage on the same core behind a 32-packet queue.
        #[arg(long)]
        screen: bool,
        /// Packets per polling turn (a number, or `unlimited`).
        #[arg(long, default_value = "10", value_parser = parse_quota)]
        quota: Quota,
        /// Per-packet forwarding work, ns of busy work.
        #[arg(long, default_value_t = 0)]
        work_ns: u64,
        /// Per-packet screening work, ns (with --screen).
        #[arg(long, default_value_t = 0)]
        screen_ns: u64,
        /// The share of each 10 ms period packet work may use, % (polling design).
        #[arg(long)]
        cpu_budget: Option<u32>,
        /// Polling design: run the polling thread at real-time priority (SCHED_FIFO, root),
        /// above normal processes, as in-kernel packet processing is.
        #[arg(long)]
        realtime: bool,
        /// How long to run.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        duration: std::time::Duration,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Spin for a duration (a compute-bound process) and report the share of a core it got.
    Compute {
        /// How long.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        duration: std::time::Duration,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Rewrite DIR/report.md and its plots from the JSON files a lab run left in DIR,
    /// without running anything (sections whose JSON is missing are skipped, with a note).
    Report {
        /// The directory a lab run wrote (`results/` by default).
        dir: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// The facility's trigger, schedule, cancel and fire costs against a BinaryHeap, a
    /// BTreeMap and tokio's DelayQueue, at 1,000 and 1,000,000 pending events.
    Core {
        /// Fewer repetitions (a few seconds).
        #[arg(long)]
        quick: bool,
        /// The facility's finest wheel-slot width in clock ticks, rounded down to a power of
        /// two (default: about 30 ns); for comparing widths.
        #[arg(long, value_name = "TICKS", value_parser = clap::value_parser!(u64).range(1..=(1u64 << 40)))]
        slot_ticks: Option<u64>,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Cost per event of soft timers, a periodic timerfd and a timer signal, from the
    /// slowdown of a workload that makes a system call every few microseconds.
    Timers {
        /// Event interval in µs (repeatable; default 10, 20 and 50).
        #[arg(long = "interval", value_name = "US")]
        intervals: Vec<u64>,
        /// Fewer and shorter runs (about 15 s).
        #[arg(long)]
        quick: bool,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Ctrl-C (or SIGTERM) removes the network namespaces an experiment made before it exits;
    // the experiment's child processes get the same signal from the terminal.
    let _ = ctrlc::set_handler(|| {
        softtimers_lab::netns::remove_live();
        eprintln!("softtimers: interrupted");
        std::process::exit(130);
    });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softtimers: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Info { json } => {
            let info = info::run();
            print!("{}", info::to_markdown(&info));
            if let Some(path) = json {
                write_json(&path, &info)?;
            }
        }
        Command::Bench {
            which:
                Bench::Core {
                    quick,
                    slot_ticks,
                    json,
                },
        } => {
            let config = bench_core::CoreBenchConfig {
                slot_ticks,
                ..bench_core::CoreBenchConfig::new(quick)
            };
            let report = with_progress("bench core", |p| bench_core::run(&config, p));
            print!("{}", bench_core::to_markdown(&report));
            if let Some(path) = json {
                write_json(&path, &report)?;
            }
        }
        Command::Bench {
            which:
                Bench::Timers {
                    intervals,
                    quick,
                    json,
                },
        } => {
            let intervals = if intervals.is_empty() {
                vec![10, 20, 50]
            } else {
                intervals
            };
            let config = bench_timers::TimersConfig::new(quick, intervals)?;
            let report = with_progress("bench timers", |p| bench_timers::run(&config, p))?;
            print!("{}", bench_timers::to_markdown(&report));
            if let Some(path) = json {
                write_json(&path, &report)?;
            }
        }
        Command::Lab {
            step,
            quick,
            out,
            client,
        } => {
            let path = lab::run(&lab::LabOptions {
                quick,
                out,
                step,
                client,
            })?;
            println!("report written to {}", path.display());
        }
        Command::Pace {
            to,
            rate,
            size,
            flows,
            duration,
            timer,
            burst,
            spin_window,
            no_batch,
            scheduler,
            json,
        } => {
            let report = pace::pace(&pace::PaceOptions {
                to,
                rate,
                burst,
                size,
                flows,
                duration,
                timer,
                spin_window,
                batch: !no_batch,
                scheduler,
            })?;
            print!("{}", pace::pace_markdown(&report));
            if let Some(path) = json {
                write_json(&path, &report)?;
            }
        }
        Command::Sink {
            listen,
            observe,
            interface,
            duration,
            idle,
            rtt,
            bottleneck,
            burst_gap,
            rate,
            json,
        } => {
            let target = match (listen, observe) {
                (Some(addr), _) => pace::SinkTarget::Listen(addr),
                (None, Some(port)) => pace::SinkTarget::Observe { interface, port },
                (None, None) => unreachable!("clap requires --listen or --observe"),
            };
            let report = pace::sink(&pace::SinkOptions {
                target,
                duration,
                idle,
                rtt,
                bottleneck,
                burst_gap,
                expected_rate: rate,
            })?;
            print!("{}", pace::sink_markdown(&report));
            if let Some(path) = json {
                write_json(&path, &report)?;
            }
        }
        Command::Flood {
            to,
            rate,
            size,
            duration,
            json,
        } => {
            let report = router::flood(&router::FloodOptions {
                to,
                rate_pps: rate,
                size,
                duration,
            })?;
            println!(
                "{} datagrams in {:.2} s: {:.0} datagrams/s{}",
                report.sent,
                report.duration_s,
                report.achieved_pps,
                if report.saturated {
                    format!(" (asked for {rate}: this is as fast as this sender goes here)")
                } else {
                    String::new()
                }
            );
            if let Some(path) = json {
                write_json(&path, &report)?;
            }
        }
        Command::Router {
            listen,
            forward_to,
            design,
            screen,
            quota,
            work_ns,
            screen_ns,
            cpu_budget,
            realtime,
            duration,
            json,
        } => {
            let report = router::router(&router::RouterOptions {
                listen,
                forward_to,
                design,
                screen,
                quota,
                work_ns,
                screen_ns,
                cpu_budget,
                realtime,
                duration,
            })?;
            println!(
                "received {}, forwarded {}, dropped in a queue {}, dropped by the kernel {}, CPU {:.1} %",
                report.received,
                report.forwarded,
                report.dropped_in_queue,
                report.kernel_drops,
                report.cpu_pct
            );
            if let Some(path) = json {
                write_json(&path, &report)?;
            }
        }
        Command::Compute { duration, json } => {
            let report = router::compute(duration)?;
            println!(
                "{:.1} % of a core over {:.2} s",
                report.cpu_share_pct, report.duration_s
            );
            if let Some(path) = json {
                write_json(&path, &report)?;
            }
        }
        Command::Report { dir } => {
            let path = report::rewrite(&dir)?;
            println!("report written to {}", path.display());
        }
    }
    Ok(())
}
