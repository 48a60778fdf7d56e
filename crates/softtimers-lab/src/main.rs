//! The `softtimers` command. See the crate documentation of `softtimers_lab`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use softtimer_net::Rate;
use softtimer_net::livelock::Quota;
use softtimer_quic::perf::ClientPlan;
use softtimer_rt::SpinWindow;
use softtimers_lab::alloc_count::CountingAlloc;
use softtimers_lab::harness::{Client, with_progress, write_json};
use softtimers_lab::pace::{self, PaceTimer, parse_duration, parse_spin_window};
use softtimers_lab::quic::parse_bytes;
use softtimers_lab::router::{self, RouterDesign};
use softtimers_lab::{bench_core, bench_timers, info, lab, path, quic, report};

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
    /// Run a command with an emulated path between two network namespaces (delay, a
    /// bottleneck rate, a drop-tail queue, random loss; TUN devices, soft timers). The
    /// command finds the namespaces in SOFTTIMERS_PATH_A / _B and their addresses in
    /// SOFTTIMERS_PATH_ADDR_A / _B (10.201.0.1, 10.201.0.2). Needs root.
    ///
    /// Example: softtimers path --delay 10ms --rate 50mbit --queue 64kb -- sh -c
    /// 'ip netns exec $SOFTTIMERS_PATH_A ping -c 3 $SOFTTIMERS_PATH_ADDR_B'
    Path {
        /// One-way delay, each direction (so the RTT is twice this).
        #[arg(long, default_value = "0", value_parser = parse_duration)]
        delay: std::time::Duration,
        /// Bottleneck rate, each direction (50mbit, 1G); default: none.
        #[arg(long)]
        rate: Option<Rate>,
        /// Drop-tail queue at the bottleneck: bytes (64kb) or packets (100p).
        #[arg(long, default_value = "64kb", value_parser = path::parse_queue)]
        queue: softtimer_net::path::QueueLimit,
        /// Random loss, each direction (0.01 or 1%).
        #[arg(long, default_value = "0", value_parser = path::parse_loss)]
        loss: f64,
        /// One-way delay from b to a, if not --delay.
        #[arg(long, value_parser = parse_duration)]
        reverse_delay: Option<std::time::Duration>,
        /// Bottleneck rate from b to a, if not --rate.
        #[arg(long)]
        reverse_rate: Option<Rate>,
        /// Random loss from b to a, if not --loss.
        #[arg(long, value_parser = path::parse_loss)]
        reverse_loss: Option<f64>,
        /// Drop-tail queue from b to a, if not --queue.
        #[arg(long, value_parser = path::parse_queue)]
        reverse_queue: Option<softtimer_net::path::QueueLimit>,
        /// How long the emulator spins before a packet is due instead of sleeping through
        /// it: a duration up to 1s, or `calibrated` (this machine's typical wake-up
        /// lateness). More is more precise and costs CPU while packets are pending.
        #[arg(long, default_value = path::COMMAND_SPIN_ARG, value_parser = parse_spin_window)]
        spin: SpinWindow,
        /// The CPU to pin the emulator to.
        #[arg(long)]
        cpu: Option<usize>,
        /// Seed of the random-loss generators.
        #[arg(long, default_value_t = 0x5eed)]
        seed: u64,
        /// Also write what the emulator measured as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// The command to run, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The QUIC performance protocol (draft-banks-quic-performance, ALPN `perf`) on soft
    /// timers, stock quinn on tokio, or the kernel's TCP.
    Quic {
        #[command(subcommand)]
        which: QuicCommand,
    },
}

/// Options both QUIC sides take.
#[derive(clap::Args, Debug, Clone)]
struct QuicCommon {
    /// The stack: quinn-proto on soft timers (`soft`, `soft-paced` with per-packet pacing,
    /// `soft-1ms` with timers rounded up to 1 ms), stock quinn on tokio, or kernel TCP.
    #[arg(long, value_enum, default_value = "soft")]
    stack: quic::Stack,
    /// Flow-control windows (bytes; k, M suffixes): at least twice the path's BDP.
    #[arg(long, default_value = "16M", value_parser = parse_bytes)]
    window: u64,
    /// What the congestion controller (CUBIC) does after an idle period.
    #[arg(long, value_enum, default_value = "keep")]
    after_idle: quic::AfterIdleArg,
    /// Ask the peer to acknowledge only every N ack-eliciting packets (ACK frequency).
    #[arg(long, value_name = "N")]
    ack_every: Option<u32>,
    /// The largest ACK delay to ask the peer for (ACK frequency; alone or with --ack-every).
    #[arg(long, value_parser = parse_duration)]
    max_ack_delay: Option<std::time::Duration>,
    /// How long the soft-timer loop spins before a due event instead of sleeping through
    /// it (the soft stacks): a duration up to 1s, or `calibrated` (this machine's typical
    /// wake-up lateness; the default). `0` never spins: cheaper, and events run a wake-up
    /// late.
    #[arg(long, value_parser = parse_spin_window)]
    spin: Option<softtimer_rt::SpinWindow>,
    /// With `--stack soft-paced`: datagrams that leave together (one GSO send) at each
    /// departure time. 1 spaces every datagram; 2 halves the system calls and wake-ups.
    #[arg(long, default_value_t = 1)]
    per_departure: usize,
    /// Turn off the soft-timer driver's tail-loss probe (a PING two smoothed RTTs after the
    /// last data or ACK while data is unacknowledged, which finds a lost last packet in about
    /// an RTT instead of quinn's probe timeout of 25 ms and more).
    #[arg(long)]
    no_tail_probe: bool,
    /// Close a connection after this long without a packet from the peer (the QUIC stacks;
    /// the smaller of the two sides' values applies). A server whose client's close was lost
    /// exits after this long. Default: 30 s.
    #[arg(long, value_parser = parse_duration)]
    idle_timeout: Option<std::time::Duration>,
    /// Also write the result as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl QuicCommon {
    fn common(&self) -> quic::Common {
        quic::Common {
            stack: self.stack,
            window: self.window,
            after_idle: self.after_idle,
            ack_every: self.ack_every,
            max_ack_delay: self.max_ack_delay,
            spin: self.spin,
            per_departure: self.per_departure,
            tail_probe: !self.no_tail_probe,
            idle_timeout: self.idle_timeout,
        }
    }
}

#[derive(Subcommand, Debug)]
enum QuicCommand {
    /// Serve the perf protocol: answer each stream with the number of bytes it asks for.
    Server {
        /// Where to listen (`host:port`).
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Exit after this many connections have closed (default: serve until Ctrl-C).
        #[arg(long)]
        connections: Option<u64>,
        /// Write the server's self-signed certificate (DER) here, for a client's --cert.
        #[arg(long)]
        cert_out: Option<PathBuf>,
        #[command(flatten)]
        common: QuicCommon,
    },
    /// Ask a perf-protocol server for data and report goodput, handshake time, request
    /// latency and losses.
    Client {
        /// The server (`host:port`).
        #[arg(long)]
        to: std::net::SocketAddr,
        /// Bytes to download per request (k, M, G suffixes).
        #[arg(long, value_parser = parse_bytes)]
        download: u64,
        /// Bytes to upload per request.
        #[arg(long, default_value = "0", value_parser = parse_bytes)]
        upload: u64,
        /// Requests, one after another on one connection.
        #[arg(long, default_value_t = 1)]
        requests: u64,
        /// Start request k at k × this after the first (an application-limited sender).
        #[arg(long, value_parser = parse_duration)]
        interval: Option<std::time::Duration>,
        /// Before the requests, download this many bytes and then stay idle for --idle.
        #[arg(long, value_parser = parse_bytes, requires = "idle")]
        warmup: Option<u64>,
        /// The idle period after --warmup.
        #[arg(long, value_parser = parse_duration, requires = "warmup")]
        idle: Option<std::time::Duration>,
        /// Accept any server certificate.
        #[arg(long, conflicts_with = "cert")]
        insecure: bool,
        /// Trust exactly this certificate (DER, as `quic server --cert-out` writes it).
        #[arg(long)]
        cert: Option<PathBuf>,
        /// The name the server's certificate must carry.
        #[arg(long, default_value = "localhost")]
        server_name: String,
        /// Give up if the handshake has not completed in this time.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        connect_timeout: std::time::Duration,
        /// Do not check the bytes received against the perf pattern (for other servers).
        #[arg(long)]
        no_verify: bool,
        #[command(flatten)]
        common: QuicCommon,
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
        /// Three rounds instead of 13, and shorter backstop and idle-policy runs (about a
        /// minute instead of about four).
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
        Command::Path {
            delay,
            rate,
            queue,
            loss,
            reverse_delay,
            reverse_rate,
            reverse_loss,
            reverse_queue,
            spin,
            cpu,
            seed,
            json,
            command,
        } => {
            let a_to_b = softtimer_net::path::LinkConfig {
                delay,
                rate,
                queue,
                loss,
            };
            let b_to_a = softtimer_net::path::LinkConfig {
                delay: reverse_delay.unwrap_or(delay),
                rate: reverse_rate.or(rate),
                queue: reverse_queue.unwrap_or(queue),
                loss: reverse_loss.unwrap_or(loss),
            };
            let cpus = softtimers_lab::harness::cpus();
            if let Some(cpu) = cpu
                && cpu >= cpus
            {
                anyhow::bail!("--cpu {cpu}: this machine has CPUs 0 to {}", cpus - 1);
            }
            let options = path::EmulatorOptions { cpu, seed, spin };
            let (code, report) =
                path::run_command(path::PathSpec { a_to_b, b_to_a }, options, &command)?;
            eprint!("{}", path::summary(&report));
            if let Some(file) = json {
                write_json(&file, &report)?;
            }
            if code != 0 {
                anyhow::bail!("the command exited with status {code}");
            }
        }
        Command::Quic {
            which:
                QuicCommand::Server {
                    listen,
                    connections,
                    cert_out,
                    common,
                },
        } => {
            let run = quic::server(&quic::ServerOptions {
                listen,
                common: common.common(),
                connections,
                cert_out,
            })?;
            println!("{}", quic::server_summary(&run));
            if let Some(path) = common.json {
                write_json(&path, &run)?;
            }
        }
        Command::Quic {
            which:
                QuicCommand::Client {
                    to,
                    download,
                    upload,
                    requests,
                    interval,
                    warmup,
                    idle,
                    insecure,
                    cert,
                    server_name,
                    connect_timeout,
                    no_verify,
                    common,
                },
        } => {
            let run = quic::client(&quic::ClientOptions {
                to,
                server_name,
                common: common.common(),
                plan: ClientPlan {
                    download,
                    upload,
                    requests,
                    interval,
                    warmup: warmup.zip(idle),
                    verify: !no_verify,
                    connect_timeout,
                },
                insecure,
                cert,
            })?;
            print!("{}", quic::client_summary(&run));
            if let Some(path) = common.json {
                write_json(&path, &run)?;
            }
        }
        Command::Report { dir } => {
            let path = report::rewrite(&dir)?;
            println!("report written to {}", path.display());
        }
    }
    Ok(())
}
