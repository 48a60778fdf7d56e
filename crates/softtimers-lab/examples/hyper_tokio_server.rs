//! The baseline of `softtimer-async`'s `hyper_server` example: the same hyper HTTP/1.1
//! server (13-byte body, `TCP_NODELAY`, hyper's timer from `hyper-util`) on tokio
//! `current_thread`, as the lab's hyper rows run it, so that the two can be driven alike.
//!
//! ```sh
//! taskset -c 0 cargo run --release -p softtimers-lab --example hyper_tokio_server -- --port 8080 --seconds 10
//! taskset -c 1 wrk -t1 -c32 -d5s http://127.0.0.1:8080/
//! ```
//!
//! `--seconds S` stops after S seconds (default: never); `--no-timer` gives hyper no timer,
//! and so no header-read timeout, as `hyper_server --no-timer` does.

use std::convert::Infallible;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;

const BODY: &[u8] = b"Hello, world!";

/// What the command line asked for.
struct Options {
    port: u16,
    seconds: Option<u64>,
    timer: bool,
}

fn options() -> Result<Options> {
    let mut o = Options {
        port: 8080,
        seconds: None,
        timer: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--port" => o.port = value("--port")?.parse()?,
            "--seconds" => o.seconds = Some(value("--seconds")?.parse()?),
            "--no-timer" => o.timer = false,
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok(o)
}

fn main() -> Result<()> {
    let o = options()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", o.port)).await?;
        eprintln!("serving on http://{}/", listener.local_addr()?);
        let timer = o.timer;
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_| async {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(BODY))))
                    });
                    let mut builder = hyper::server::conn::http1::Builder::new();
                    if timer {
                        builder.timer(hyper_util::rt::TokioTimer::new());
                    }
                    let _ = builder
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        match o.seconds {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => drop(accept.await),
        }
        Ok(())
    })
}
