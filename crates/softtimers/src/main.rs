//! The `softtimers` command: a thin dispatcher. Every subcommand's options and its run live
//! in the library that owns it: the programs a user runs on their own in
//! `softtimers-tools`, the lab, its benchmarks and its report in `softtimers-lab`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use softtimers_lab::alloc_count::CountingAlloc;
use softtimers_lab::{bench_core, bench_timers, info, lab};
use softtimers_tools::json::write_json;
use softtimers_tools::{netns, pace, path, quic, router};

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
    Info(info::InfoArgs),
    /// Micro-benchmarks.
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
    /// The main job: run every experiment and write a report (default into `results/`).
    Lab(lab::LabArgs),
    /// Send UDP datagrams at a rate, paced by the timer chosen, and report the achieved rate,
    /// the CPU time per datagram and the send intervals.
    Pace(pace::PaceArgs),
    /// Receive UDP datagrams and report the rate, inter-arrival statistics (kernel
    /// timestamps), the longest burst and the burstiness index; works for any sender.
    Sink(pace::SinkArgs),
    /// Send minimum-size UDP datagrams at a rate (the livelock experiments' flood), in
    /// batches on a schedule; reports the rate reached.
    Flood(router::FloodArgs),
    /// A user-space UDP router: forwards what arrives on --listen to --forward-to, in the
    /// livelock-free polling design or the 4.2BSD baseline.
    Router(router::RouterArgs),
    /// Spin for a duration (a compute-bound process) and report the share of a core it got.
    Compute(router::ComputeArgs),
    /// Rewrite DIR/report.md and its plots from the JSON files a lab run left in DIR,
    /// without running anything (sections whose JSON is missing are skipped, with a note).
    Report(lab::ReportArgs),
    /// Run a command with an emulated path between two network namespaces (delay, a
    /// bottleneck rate, a drop-tail queue, random loss; TUN devices, soft timers). The
    /// command finds the namespaces in SOFTTIMERS_PATH_A / _B and their addresses in
    /// SOFTTIMERS_PATH_ADDR_A / _B (10.201.0.1, 10.201.0.2). Needs root.
    ///
    /// Example: softtimers path --delay 10ms --rate 50mbit --queue 64kb -- sh -c
    /// 'ip netns exec $SOFTTIMERS_PATH_A ping -c 3 $SOFTTIMERS_PATH_ADDR_B'
    Path(path::PathArgs),
    /// The QUIC performance protocol (draft-banks-quic-performance, ALPN `perf`) on soft
    /// timers, stock quinn on tokio, or the kernel's TCP.
    Quic {
        #[command(subcommand)]
        which: quic::QuicCommand,
    },
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// The facility's trigger, schedule, cancel and fire costs against a BinaryHeap, a
    /// BTreeMap and tokio's DelayQueue, at 1,000 and 1,000,000 pending events.
    Core(bench_core::CoreArgs),
    /// Cost per event of soft timers, a periodic timerfd and a timer signal, from the
    /// slowdown of a workload that makes a system call every few microseconds.
    Timers(bench_timers::TimersArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Ctrl-C (or SIGTERM) removes the network namespaces an experiment made before it exits;
    // the experiment's child processes get the same signal from the terminal.
    let _ = ctrlc::set_handler(|| {
        netns::remove_live();
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

/// Writes `value` to `json`, if given.
fn save(json: Option<&std::path::Path>, value: &impl serde::Serialize) -> anyhow::Result<()> {
    json.map_or(Ok(()), |path| write_json(path, value))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Info(args) => {
            let info = args.run();
            print!("{}", info::to_markdown(&info));
            save(args.json.as_deref(), &info)?;
        }
        Command::Bench {
            which: Bench::Core(args),
        } => {
            let report = args.run();
            print!("{}", bench_core::to_markdown(&report));
            save(args.json.as_deref(), &report)?;
        }
        Command::Bench {
            which: Bench::Timers(args),
        } => {
            let report = args.run()?;
            print!("{}", bench_timers::to_markdown(&report));
            save(args.json.as_deref(), &report)?;
        }
        Command::Lab(args) => {
            let path = args.run()?;
            println!("report written to {}", path.display());
        }
        Command::Pace(args) => {
            let report = args.run()?;
            print!("{}", pace::pace_markdown(&report));
            save(args.json.as_deref(), &report)?;
        }
        Command::Sink(args) => {
            let report = args.run()?;
            print!("{}", pace::sink_markdown(&report));
            save(args.json.as_deref(), &report)?;
        }
        Command::Flood(args) => {
            let report = args.run()?;
            println!(
                "{} datagrams in {:.2} s: {:.0} datagrams/s{}",
                report.sent,
                report.duration_s,
                report.achieved_pps,
                if report.saturated {
                    format!(
                        " (asked for {}: this is as fast as this sender goes here)",
                        args.rate
                    )
                } else {
                    String::new()
                }
            );
            save(args.json.as_deref(), &report)?;
        }
        Command::Router(args) => {
            let report = args.run()?;
            println!(
                "received {}, forwarded {}, dropped in a queue {}, dropped by the kernel {}, CPU {:.1} %",
                report.received,
                report.forwarded,
                report.dropped_in_queue,
                report.kernel_drops,
                report.cpu_pct
            );
            save(args.json.as_deref(), &report)?;
        }
        Command::Compute(args) => {
            let report = args.run()?;
            println!(
                "{:.1} % of a core over {:.2} s",
                report.cpu_share_pct, report.duration_s
            );
            save(args.json.as_deref(), &report)?;
        }
        Command::Path(args) => {
            let (code, report) = args.run()?;
            eprint!("{}", path::summary(&report));
            save(args.json.as_deref(), &report)?;
            if code != 0 {
                anyhow::bail!("the command exited with status {code}");
            }
        }
        Command::Quic {
            which: quic::QuicCommand::Server(args),
        } => {
            let run = args.run()?;
            println!("{}", quic::server_summary(&run));
            save(args.common.json.as_deref(), &run)?;
        }
        Command::Quic {
            which: quic::QuicCommand::Client(args),
        } => {
            let run = args.run()?;
            print!("{}", quic::client_summary(&run));
            save(args.common.json.as_deref(), &run)?;
        }
        Command::Report(args) => {
            let path = args.run()?;
            println!("report written to {}", path.display());
        }
    }
    Ok(())
}
