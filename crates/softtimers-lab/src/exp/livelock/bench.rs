//! The test bench every livelock step runs on: a fresh forwarding path, the router and the
//! flood started in their namespaces and pinned, and one point measured per offered rate.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::harness::{CLIENT_CPU, ExpOptions, read_json, server_cpu};
use crate::report::StepResult;
use softtimers_tools::netns::{ForwardPath, Host};
use softtimers_tools::router::{ComputeReport, FloodReport, RouterReport};

use super::{Design, PORT, SCREEN_NS, WORK_NS, flood_seconds, unavailable};

/// What a router run is told beyond its design.
#[derive(Clone, Debug)]
pub(super) struct RouterArgs {
    pub(super) design: Design,
    pub(super) quota: String,
    pub(super) cpu_budget: Option<u32>,
    pub(super) realtime: bool,
}

impl RouterArgs {
    pub(super) fn plain(design: Design) -> RouterArgs {
        RouterArgs {
            design,
            quota: "10".into(),
            cpu_budget: None,
            realtime: false,
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug)]
pub(super) struct Point {
    pub(super) flood: FloodReport,
    pub(super) router: RouterReport,
    pub(super) forwarded_pps: f64,
    pub(super) compute: Option<ComputeReport>,
}

/// The step's processes and files.
pub(super) struct Bench {
    pub(super) path: ForwardPath,
    pub(super) exe: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) runs: u32,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(super) fn kill(children: impl IntoIterator<Item = Child>) {
    for mut c in children {
        softtimers_tools::process::kill(&mut c);
    }
}

impl Bench {
    /// How a step begins: a bench (tagged `tag`) and the source's top rate, measured first;
    /// or, where the step cannot run here, its result saying why, with `skipped` recorded
    /// beside.
    pub(super) fn begin<R, E>(
        options: &ExpOptions,
        tag: &str,
        skipped: E,
        progress: &mut dyn FnMut(f64, &str),
    ) -> Result<std::result::Result<(Bench, f64), StepResult<R, E>>> {
        if let Some(why) = unavailable() {
            return Ok(Err(StepResult::skipped(
                options.length.mode(),
                why,
                skipped,
            )));
        }
        let mut bench = Bench::new(tag)?;
        progress(0.0, "the source's top rate");
        let max = bench.source_max(flood_seconds(options.length.quick))?;
        Ok(Ok((bench, max)))
    }

    pub(super) fn new(tag: &str) -> Result<Bench> {
        let path = ForwardPath::create(tag)?;
        softtimers_tools::process::require("taskset", "util-linux")?;
        let dir = std::env::temp_dir().join(format!("softtimers-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Bench {
            path,
            exe: std::env::current_exe().context("finding the softtimers binary")?,
            dir,
            runs: 0,
        })
    }

    pub(super) fn spawn(&self, host: Host, cpu: usize, args: &[String]) -> Result<Child> {
        // Children start at the stock timer slack (see `StockTimerSlack`).
        let _stock_slack = softtimers_tools::cpu::stock_timer_slack();
        self.path
            .command(host, "taskset")
            .args(["-c", &cpu.to_string()])
            .arg(&self.exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting a child process")
    }

    /// The router with `args`, a flood at `offered_pps` for `flood_s`, and (with `compute`) a
    /// compute-bound process on the router's core for as long.
    pub(super) fn run(
        &mut self,
        args: &RouterArgs,
        offered_pps: u64,
        flood_s: f64,
        compute: bool,
    ) -> Result<Point> {
        self.runs += 1;
        let n = self.runs;
        let (router_json, flood_json, compute_json) = (
            self.dir.join(format!("router-{n}.json")),
            self.dir.join(format!("flood-{n}.json")),
            self.dir.join(format!("compute-{n}.json")),
        );
        let flood_ms = (flood_s * 1000.0).round() as u64;
        let mut router_args: Vec<String> = vec![
            "router".into(),
            "--listen".into(),
            format!("{}:{PORT}", self.path.router_in),
            "--forward-to".into(),
            format!("{}:{PORT}", self.path.next_hop),
            "--design".into(),
            match args.design.router {
                softtimers_tools::router::RouterDesign::Polling => "polling".into(),
                softtimers_tools::router::RouterDesign::Baseline => "baseline".into(),
            },
            "--quota".into(),
            args.quota.clone(),
            "--work-ns".into(),
            WORK_NS.to_string(),
            "--screen-ns".into(),
            SCREEN_NS.to_string(),
            "--duration".into(),
            format!("{}ms", flood_ms + 400),
            "--json".into(),
            router_json.display().to_string(),
        ];
        if args.design.screen {
            router_args.push("--screen".into());
        }
        if let Some(b) = args.cpu_budget {
            router_args.extend(["--cpu-budget".into(), b.to_string()]);
        }
        if args.realtime {
            router_args.push("--realtime".into());
        }
        let router = self.spawn(Host::Router, server_cpu(), &router_args)?;
        std::thread::sleep(Duration::from_millis(250));
        let tx_before = self.path.router_tx_packets()?;
        let computer = if compute {
            match self.spawn(
                Host::Router,
                server_cpu(),
                &[
                    "compute".into(),
                    "--duration".into(),
                    format!("{flood_ms}ms"),
                    "--json".into(),
                    compute_json.display().to_string(),
                ],
            ) {
                Ok(c) => Some(c),
                Err(e) => {
                    kill([router]);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let flood = self.spawn(
            Host::Source,
            CLIENT_CPU,
            &[
                "flood".into(),
                "--to".into(),
                format!("{}:{PORT}", self.path.router_in),
                "--rate".into(),
                offered_pps.max(1).to_string(),
                "--duration".into(),
                format!("{flood_ms}ms"),
                "--json".into(),
                flood_json.display().to_string(),
            ],
        );
        let flood = match flood {
            Ok(f) => f,
            Err(e) => {
                kill(std::iter::once(router).chain(computer));
                return Err(e);
            }
        };
        let outcome = softtimers_tools::process::finish(flood, "the flood");
        // Forwarded while the flood lasted: what the socket buffer still holds afterwards
        // drains into the next second and is not counted.
        let tx_after = self.path.router_tx_packets();
        let computed =
            computer.map(|c| softtimers_tools::process::finish(c, "the compute process"));
        let routed = softtimers_tools::process::finish(router, "the router");
        outcome?;
        routed?;
        if let Some(c) = computed {
            c?;
        }
        let tx = tx_after?.saturating_sub(tx_before);
        let flood: FloodReport = read_json(&flood_json)?;
        let router: RouterReport = read_json(&router_json)?;
        let compute = compute
            .then(|| read_json::<ComputeReport>(&compute_json))
            .transpose()?;
        Ok(Point {
            forwarded_pps: tx as f64 / flood.duration_s.max(1e-3),
            flood,
            router,
            compute,
        })
    }

    /// The source's top rate through the path (the polling router receiving), datagrams/s.
    pub(super) fn source_max(&mut self, flood_s: f64) -> Result<f64> {
        let p = self.run(
            &RouterArgs::plain(Design::ALL[1]),
            100_000_000,
            flood_s,
            false,
        )?;
        Ok(p.flood.achieved_pps)
    }
}
