//! The HTTP server against nginx with one worker: same file, same load generator, same
//! cores. nginx is not a dependency: where it is not installed the comparison says so.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::experiments::{ExpOptions, ExpResult, HandlerKind, Setup, Source, Workload, cpus, run};
use crate::http::{FILE_SIZE, run_load};
use crate::lab::write_json;
use crate::stats::median;

/// The comparison's result.
#[derive(Clone, Debug, Serialize)]
pub struct NginxComparison {
    /// Our server's throughput, req/s (median of rounds).
    pub softtimers_rps: f64,
    /// nginx's throughput, req/s (median of rounds).
    pub nginx_rps: f64,
    /// Ours / nginx.
    pub ratio: f64,
    /// nginx's version line.
    pub nginx_version: String,
}

fn nginx_binary() -> Option<String> {
    ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .map(str::to_string)
}

struct Nginx {
    child: Child,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts nginx (one process, pinned to `cpu`) serving the same 6 KB file on a free port.
fn start_nginx(binary: &str, dir: &Path, cpu: usize) -> Result<(Nginx, SocketAddr)> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let root = dir.join("root");
    std::fs::create_dir_all(&root)?;
    let body: Vec<u8> = (0..FILE_SIZE).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(root.join("6k"), body)?;
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "daemon off;\nmaster_process off;\n\
             pid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
             events {{ worker_connections 1024; use epoll; }}\n\
             http {{ access_log off; sendfile on; tcp_nodelay on; keepalive_requests 1000000;\n\
             keepalive_timeout 30s; client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;\n\
             fastcgi_temp_path {dir}/fastcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;\n\
             server {{ listen 127.0.0.1:{port}; root {root}; location / {{ }} }} }}\n",
            dir = dir.display(),
            root = root.display(),
        ),
    )?;
    let child = Command::new(binary)
        .args([
            "-c",
            conf.to_str().unwrap_or_default(),
            "-p",
            dir.to_str().unwrap_or_default(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {binary}"))?;
    // One process serves everything (`master_process off`), so killing it leaves nothing
    // behind; it runs on the server's CPU like our server does.
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        let _ = rustix::thread::sched_setaffinity(Some(pid), &set);
    }
    let nginx = Nginx { child };
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

/// Runs the comparison, or explains why it cannot.
pub fn compare(options: &ExpOptions) -> Result<ExpResult> {
    let mut md = String::from("## The HTTP server against nginx (one worker)\n\n");
    let Some(binary) = nginx_binary() else {
        md += "Skipped: nginx is not installed on this machine (`apt-get install nginx` to \
               compare; it is not a dependency of the lab).\n";
        write_json(
            &options.out.join("nginx.json"),
            &serde_json::json!({ "skipped": "nginx not installed" }),
        )?;
        return Ok(ExpResult {
            markdown: md,
            plots: vec![],
        });
    };
    let version = Command::new(&binary)
        .arg("-v")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("softtimers-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let server_cpu = cpus().saturating_sub(1);
    let duration = Duration::from_millis(if options.quick { 400 } else { 2_000 });
    let rounds = if options.quick { 1 } else { 5 };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let result = (|| -> Result<()> {
        let (_nginx, addr) = start_nginx(&binary, &dir, server_cpu)?;
        for _ in 0..rounds {
            let o = run(&Setup {
                workload: Workload::HttpKeepAlive,
                source: Source::None,
                handler: HandlerKind::Null,
                deadline_us: None,
                deadline_design: softtimer_rt::DeadlineDesign::default(),
                stats: false,
                trace: 0,
                duration,
                client: crate::experiments::Client::Own,
            })?;
            ours.push(o.rate);
            let r = std::thread::spawn(move || {
                let mut set = rustix::thread::CpuSet::new();
                set.set(0);
                let _ = rustix::thread::sched_setaffinity(None, &set);
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
    let c = NginxComparison {
        softtimers_rps: median(&ours),
        nginx_rps: median(&theirs),
        ratio: median(&ours) / median(&theirs),
        nginx_version: version,
    };
    write_json(&options.out.join("nginx.json"), &c)?;
    let _ = writeln!(
        md,
        "Same 6 KB file, keep-alive, the same load generator with 32 connections on CPU 0, the \
         server on CPU {server_cpu}; {rounds} round(s) of {} s.\n\n| server | req/s (median) |\n\
         | --- | ---: |\n| softtimers HTTP server | {:.0} |\n| {} (1 worker) | {:.0} |\n\n\
         Ours / nginx: {:.2}.",
        duration.as_secs_f64(),
        c.softtimers_rps,
        c.nginx_version,
        c.nginx_rps,
        c.ratio
    );
    Ok(ExpResult {
        markdown: md,
        plots: vec![],
    })
}
