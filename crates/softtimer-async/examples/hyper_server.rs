//! A hyper HTTP/1.1 server on several loops: one `SO_REUSEPORT` listener per loop, each
//! loop accepting and serving its own connections (nothing moves between loops), answering
//! every request with a short body.
//!
//! ```sh
//! cargo run --release -p softtimer-async --example hyper_server -- --threads 2 --port 8080 --seconds 10
//! wrk -t1 -c32 -d5s http://127.0.0.1:8080/
//! ```
//!
//! `--threads N` runs N loops (loop 0 on the main thread, pinned to the first CPU this process
//! may use, loop i to the i-th); `--seconds S` stops after S seconds (default: never);
//! `--pipeline-flush` asks hyper to answer a pipelined batch of requests with one write;
//! `--no-timer` gives hyper no timer, and so no header-read timeout (30 s by default with a
//! timer, one sleep armed and dropped per request): the difference is that timeout's cost,
//! the timer's and hyper's handling of it (an extra read pass after each request head).

use std::convert::Infallible;
use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use softtimer_async::hyper::HyperTimer;
use softtimer_async::{Runtime, TcpListener};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

const BODY: &[u8] = b"Hello, world!";

/// What the command line asked for.
struct Options {
    threads: usize,
    port: u16,
    seconds: Option<u64>,
    pipeline_flush: bool,
    timer: bool,
}

fn options() -> Result<Options> {
    let mut o = Options {
        threads: 1,
        port: 8080,
        seconds: None,
        pipeline_flush: false,
        timer: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--threads" => o.threads = value("--threads")?.parse()?,
            "--port" => o.port = value("--port")?.parse()?,
            "--seconds" => o.seconds = Some(value("--seconds")?.parse()?),
            "--pipeline-flush" => o.pipeline_flush = true,
            "--no-timer" => o.timer = false,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if o.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    Ok(o)
}

/// Accepts on `listener` and serves each connection on this loop.
async fn serve(listener: TcpListener, pipeline_flush: bool, timer: bool) {
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        softtimer_async::spawn_local(async move {
            let service = hyper::service::service_fn(|_| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(BODY))))
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            if timer {
                builder.timer(HyperTimer::current());
            }
            let _ = builder
                .pipeline_flush(pipeline_flush)
                .serve_connection(stream, service)
                .await;
        });
    }
}

fn main() -> Result<()> {
    let o = options()?;
    let rt = Runtime::builder().threads(o.threads).build()?;
    let handle = rt.handle();
    let addr = SocketAddr::from(([127, 0, 0, 1], o.port));
    rt.block_on(async move {
        let listener = TcpListener::bind_reuse_port(addr)?;
        // One listener per loop on the same port: the kernel spreads connections over them.
        // Each is made on its own loop, as a socket belongs to the loop that made it.
        let (flush, timer) = (o.pipeline_flush, o.timer);
        for i in 1..o.threads {
            drop(handle.spawn_on(i, async move {
                match TcpListener::bind_reuse_port(addr) {
                    Ok(listener) => serve(listener, flush, timer).await,
                    Err(e) => eprintln!("loop {i}: cannot listen on {addr}: {e}"),
                }
            }));
        }
        eprintln!("serving on http://{addr}/ with {} loop(s)", o.threads);
        let loop0 = softtimer_async::spawn_local(serve(listener, flush, timer));
        match o.seconds {
            Some(s) => softtimer_async::time::sleep(Duration::from_secs(s)).await,
            None => drop(loop0.await),
        }
        Ok::<_, Box<dyn Error + Send + Sync>>(())
    })
}
