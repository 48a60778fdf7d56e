//! hyper 1.x on soft timers: an HTTP/1.1 server and a client on one `softtimer-async`
//! runtime, over loopback, with keep-alive; prints what the requests took.
//!
//! ```sh
//! cargo run -p softtimer-async --example hyper_hello
//! ```

use std::convert::Infallible;
use std::error::Error;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, Response};
use softtimer_async::hyper::HyperTimer;
use softtimer_async::{Runtime, TcpListener, TcpStream};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

fn main() -> Result<()> {
    let rt = Runtime::new()?;
    let times = rt.block_on(hello(200))?;
    let mut sorted = times.clone();
    sorted.sort();
    println!(
        "hyper on softtimer-async: {} requests on one keep-alive connection; \
         median {:?}, max {:?}",
        times.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    Ok(())
}

/// The body every response carries.
pub const BODY: &[u8] = b"hello from hyper on soft timers";

/// Serves `hello` on loopback and sends it `requests` requests on one connection; returns
/// how long each took.
pub async fn hello(requests: usize) -> Result<Vec<Duration>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = softtimer_async::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                break;
            };
            stream.set_nodelay(true).ok();
            softtimer_async::spawn(async move {
                let service =
                    hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(BODY))))
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(HyperTimer::current())
                    .header_read_timeout(Duration::from_secs(5))
                    .serve_connection(stream, service)
                    .await;
            });
        }
    });

    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(stream).await?;
    let driving = softtimer_async::spawn(connection);
    let mut times = Vec::with_capacity(requests);
    for _ in 0..requests {
        let start = Instant::now();
        let request = Request::builder()
            .uri("/")
            .header(hyper::header::HOST, "localhost")
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        if !response.status().is_success() {
            return Err(format!("status {}", response.status()).into());
        }
        let body = response.into_body().collect().await?.to_bytes();
        if body.as_ref() != BODY {
            return Err("unexpected body".into());
        }
        times.push(start.elapsed());
    }
    drop(sender);
    driving.await??;
    server.abort();
    Ok(times)
}
