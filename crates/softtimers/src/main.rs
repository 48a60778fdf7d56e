//! # softtimers: the command
//!
//! A thin dispatcher. Every subcommand's options (`clap` derive) and its run live in the
//! library that owns it: the programs a user runs on their own in `softtimers-tools`, the
//! lab, its benchmarks and its report in `softtimers-lab`. Each program hands back a typed
//! report, which [`execute`] prints and writes as JSON with `--json`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use softtimer_rt::alloc_count::CountingAlloc;
use softtimers_lab::{bench_core, bench_timers, info, lab};
use softtimers_tools::output::{WithJson, emit, execute};
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
    Info(WithJson<info::InfoArgs>),
    /// Micro-benchmarks.
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
    /// The main job: run every experiment and write a report (default into `results/`).
    Lab(lab::LabArgs),
    /// Send UDP datagrams at a rate, paced by the timer chosen, and report the achieved rate,
    /// the CPU time per datagram and the send intervals.
    Pace(WithJson<pace::PaceArgs>),
    /// Receive UDP datagrams and report the rate, inter-arrival statistics (kernel
    /// timestamps), the longest burst and the burstiness index; works for any sender.
    Sink(WithJson<pace::SinkArgs>),
    /// Send minimum-size UDP datagrams at a rate (the livelock experiments' flood), in
    /// batches on a schedule; reports the rate reached.
    Flood(WithJson<router::FloodOptions>),
    /// A user-space UDP router: forwards what arrives on --listen to --forward-to, in the
    /// livelock-free polling design or the 4.2BSD baseline.
    Router(WithJson<router::RouterOptions>),
    /// Spin for a duration (a compute-bound process) and report the share of a core it got.
    Compute(WithJson<router::ComputeArgs>),
    /// Rewrite DIR/report.md, DIR/summary.md and the plots from the JSON files a lab run
    /// left in DIR, without running anything (sections whose JSON is missing are skipped,
    /// with a note).
    Report(lab::ReportArgs),
    /// Run a command with an emulated path between two network namespaces (delay, a
    /// bottleneck rate, a drop-tail queue, random loss; TUN devices, soft timers). The
    /// command finds the namespaces in SOFTTIMERS_PATH_A / _B and their addresses in
    /// SOFTTIMERS_PATH_ADDR_A / _B (10.201.0.1, 10.201.0.2). Needs root.
    ///
    /// Example: softtimers path --delay 10ms --rate 50mbit --queue 64kb -- sh -c
    /// 'ip netns exec $SOFTTIMERS_PATH_A ping -c 3 $SOFTTIMERS_PATH_ADDR_B'
    Path(WithJson<path::PathArgs>),
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
    Core(WithJson<bench_core::CoreArgs>),
    /// Cost per event of soft timers, a periodic timerfd and a timer signal, from the
    /// slowdown of a workload that makes a system call every few microseconds.
    Timers(WithJson<bench_timers::TimersArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Ctrl-C (or SIGTERM) first asks a program that runs until stopped to end its run and
    // report; otherwise (or the second time) it removes the network namespaces an experiment
    // made and exits. The experiment's child processes get the same signal from the terminal.
    let _ = ctrlc::set_handler(|| {
        if softtimers_tools::interrupt::interrupt() {
            eprintln!("softtimers: interrupted: reporting what was measured (again to quit now)");
            return;
        }
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

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Info(args) => execute(&args),
        Command::Bench {
            which: Bench::Core(args),
        } => execute(&args),
        Command::Bench {
            which: Bench::Timers(args),
        } => execute(&args),
        Command::Pace(args) => execute(&args),
        Command::Sink(args) => execute(&args),
        Command::Flood(args) => execute(&args),
        Command::Router(args) => execute(&args),
        Command::Compute(args) => execute(&args),
        Command::Quic {
            which: quic::QuicCommand::Server(args),
        } => execute(&args),
        Command::Quic {
            which: quic::QuicCommand::Client(args),
        } => execute(&args),
        Command::Path(args) => {
            if let Some(json) = &args.json {
                softtimers_tools::output::check_writable(json)?;
            }
            // The report, then the command's own failure, if it failed.
            let (status, report) = args.args.run()?;
            emit(&report, args.json.as_deref())?;
            match softtimers_tools::path::command_failure(status) {
                Some(failure) => anyhow::bail!(failure),
                None => Ok(()),
            }
        }
        Command::Lab(args) => {
            println!("report written to {}", args.run()?.display());
            Ok(())
        }
        Command::Report(args) => {
            println!("report written to {}", args.run()?.display());
            Ok(())
        }
    }
}
