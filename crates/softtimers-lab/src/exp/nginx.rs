//! The HTTP server against nginx with one worker: same file, same load generator, same
//! cores. nginx is configured as its users would for a small static file (open-file cache,
//! `sendfile`, no access log, long keep-alive), so that it does not open, stat and close the
//! file per request while our server serves from memory. nginx is not a dependency: where it
//! is not installed the comparison says so.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::harness::{
    CLIENT_CPU, Client, ExpOptions, RunInfo, Setup, Workload, pin_process, pin_to, run, server_cpu,
};
use crate::report::{Page, Section, Skippable};
use crate::summary::median;
use crate::table::Table;
use softtimers_tools::http::{file_body, run_load};
use softtimers_tools::process as tools;

/// nginx's tuning for a small static file, as written into its configuration (and shown in
/// the report).
pub const TUNING: [&str; 11] = [
    "access_log off;",
    "sendfile on;",
    "tcp_nopush on;",
    "tcp_nodelay on;",
    "open_file_cache max=1000 inactive=20s;",
    "open_file_cache_valid 30s;",
    "open_file_cache_min_uses 1;",
    "open_file_cache_errors on;",
    "keepalive_timeout 30s;",
    "keepalive_requests 1000000;",
    "worker_connections 1024; use epoll;",
];

/// A measured comparison.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NginxComparison {
    /// How the runs were made.
    pub run: RunInfo,
    /// Our server's throughput, req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub softtimers_rps: f64,
    /// nginx's throughput, req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub nginx_rps: f64,
    /// Ours / nginx.
    #[serde(deserialize_with = "crate::summary::num")]
    pub ratio: f64,
    /// nginx's version line.
    pub nginx_version: String,
    /// The directives nginx ran with beyond its defaults.
    pub nginx_config: Vec<String>,
}

/// The comparison's result (`nginx.json`): measured, or why not.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Nginx {
    /// Measured.
    Measured(NginxComparison),
    /// Not measured.
    Skipped {
        /// Why.
        skipped: String,
    },
}

impl Nginx {
    /// A comparison that failed (in a whole lab run, a failure is reported, not fatal).
    pub fn failed(error: &anyhow::Error) -> Self {
        Nginx::Skipped {
            skipped: format!("the comparison failed: {error:#}"),
        }
    }
}

struct NginxProcess {
    child: Child,
}

impl Drop for NginxProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &Path, root: &Path, port: u16) -> String {
    let (events, http): (Vec<&str>, Vec<&str>) = TUNING
        .iter()
        .partition(|d| d.starts_with("worker_connections"));
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\n\
         pid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
         events {{ {events} }}\n\
         http {{\n  {http}\n  default_type text/plain;\n\
         client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;\n\
         fastcgi_temp_path {dir}/fastcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;\n\
         server {{ listen 127.0.0.1:{port}; root {root}; location / {{ }} }}\n}}\n",
        dir = dir.display(),
        root = root.display(),
        events = events.join(" "),
        http = http.join("\n  "),
    )
}

/// Starts nginx (one process, pinned to `cpu`) serving the same 6 KB file on a free port.
fn start_nginx(binary: &Path, dir: &Path, cpu: usize) -> Result<(NginxProcess, SocketAddr)> {
    // Children start at the stock timer slack (see `StockTimerSlack`).
    let _stock_slack = softtimers_tools::cpu::stock_timer_slack();
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let root = dir.join("root");
    std::fs::create_dir_all(&root)?;
    std::fs::write(root.join("6k"), file_body())?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, config(dir, &root, port))?;
    let child = Command::new(binary)
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", binary.display()))?;
    // One process serves everything (`master_process off`), so killing it leaves nothing
    // behind; it runs on the server's CPU like our server does.
    pin_process(child.id(), cpu);
    let nginx = NginxProcess { child };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let start = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        if start.elapsed() > Duration::from_secs(5) {
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            bail!("nginx did not start listening within 5 s: {log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((nginx, addr))
}

/// Runs the comparison, or says why it cannot (nginx not installed).
pub fn compare(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<Nginx> {
    let Some(binary) = tools::find(tools::NGINX) else {
        return Ok(Nginx::Skipped {
            skipped: "nginx is not installed on this machine (`apt-get install nginx-light` \
                      to compare; it is not a dependency of the lab)"
                .into(),
        });
    };
    let version = Command::new(&binary)
        .arg("-v")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("softtimers-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let length = options.length;
    let duration = length.throughput_run();
    let rounds = length.rounds();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let result = (|| -> Result<()> {
        let (_nginx, addr) = start_nginx(&binary, &dir, server_cpu())?;
        for round in 0..rounds {
            progress(
                round as f64 / rounds as f64,
                &format!("round {}/{rounds}", round + 1),
            );
            let o = run(&Setup::plain(
                Workload::HttpKeepAlive,
                duration,
                Client::Own,
            ))?;
            ours.push(o.rate);
            let r = std::thread::spawn(move || {
                let _pin = pin_to(CLIENT_CPU);
                run_load(addr, 32, true, duration)
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the load generator panicked"))??;
            if r.errors > 0 {
                bail!("nginx answered {} requests with errors", r.errors);
            }
            theirs.push(r.rate());
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    let run_info = RunInfo::new(
        &ExpOptions {
            client: Client::Own,
            ..options.clone()
        },
        duration,
        rounds,
    );
    Ok(Nginx::Measured(NginxComparison {
        run: run_info,
        softtimers_rps: median(&ours),
        nginx_rps: median(&theirs),
        ratio: median(&ours) / median(&theirs),
        nginx_version: version,
        nginx_config: TUNING.iter().map(|d| d.to_string()).collect(),
    }))
}

/// A run without nginx says so in its own words ("Not measured"), in its body.
impl Skippable for Nginx {}

impl Section for Nginx {
    const FILE: &'static str = "nginx.json";
    const TITLE: &'static str = "The HTTP server against nginx (one worker)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let c = match self {
            Nginx::Skipped { skipped } => {
                let _ = writeln!(page, "Not measured: {skipped}.");
                return Ok(());
            }
            Nginx::Measured(c) => c,
        };
        let _ = writeln!(
            page,
            "Same 6 KB file, keep-alive, the same load generator with 32 connections on CPU \
             {}, the server on CPU {}; {} round(s) of {} s.\n",
            c.run.client_cpu, c.run.server_cpu, c.run.rounds, c.run.run_s,
        );
        let mut table = Table::new("server | req/s (median):");
        table.row(&[
            &"softtimers HTTP server",
            &format!("{:.0}", c.softtimers_rps),
        ]);
        table.row(&[
            &format!("{} (1 worker)", c.nginx_version),
            &format!("{:.0}", c.nginx_rps),
        ]);
        page.table(table);
        let _ = writeln!(page, "\nOurs / nginx: {:.2}.\n", c.ratio);
        let _ = writeln!(
            page,
            "nginx runs as one process (`master_process off`) pinned to the server's CPU, \
             configured as for a small static file, so that it serves the file from its \
             open-file cache with `sendfile` rather than opening it per request: {}.",
            c.nginx_config
                .iter()
                .map(|d| format!("`{d}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_caches_the_file_and_logs_nothing() {
        let text = config(Path::new("/tmp/x"), Path::new("/tmp/x/root"), 8080);
        for directive in TUNING {
            assert!(text.contains(directive), "{directive} missing:\n{text}");
        }
        assert!(text.contains("events { worker_connections 1024; use epoll; }"));
        assert!(text.contains("listen 127.0.0.1:8080;"));
    }

    #[test]
    fn both_outcomes_read_back() {
        let skipped = Nginx::Skipped {
            skipped: "not installed".into(),
        };
        let text = serde_json::to_string(&skipped).unwrap();
        assert_eq!(text, r#"{"skipped":"not installed"}"#);
        let back: Nginx = serde_json::from_str(&text).unwrap();
        assert!(matches!(back, Nginx::Skipped { .. }));
    }
}
