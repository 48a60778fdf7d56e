//! Stock quinn on soft timers: a quinn server and client on one `softtimer-async` runtime,
//! over loopback, echo a few streams and print what they took.
//!
//! ```sh
//! cargo run -p softtimer-async --example quinn_echo
//! ```
//!
//! The only line that is not plain quinn is the runtime handed to `Endpoint::new`:
//! `Arc::new(SoftRuntime::current())`.

use std::error::Error;
use std::net::UdpSocket;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::{ClientConfig, Endpoint, EndpointConfig, ServerConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use softtimer_async::Runtime;
use softtimer_async::quinn::SoftRuntime;

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

fn main() -> Result<()> {
    let rt = Runtime::new()?;
    let times = rt.block_on(echo(16, 1000))?;
    let mut sorted = times.clone();
    sorted.sort();
    println!(
        "quinn on softtimer-async: {} streams of 1000 bytes echoed over loopback; \
         round trip median {:?}, max {:?}",
        times.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    Ok(())
}

/// Runs an echo server and a client on the calling thread's runtime; the client opens
/// `streams` streams one after another, each carrying `bytes` bytes there and back, and
/// returns how long each round trip took.
pub async fn echo(streams: usize, bytes: usize) -> Result<Vec<Duration>> {
    let runtime = Arc::new(SoftRuntime::current());
    let (server_config, cert) = server_config()?;
    let server = Endpoint::new(
        EndpointConfig::default(),
        Some(server_config),
        UdpSocket::bind("127.0.0.1:0")?,
        runtime.clone(),
    )?;
    let addr = server.local_addr()?;
    let serving = softtimer_async::spawn(serve(server.clone()));

    let mut client = Endpoint::new(
        EndpointConfig::default(),
        None,
        UdpSocket::bind("127.0.0.1:0")?,
        runtime,
    )?;
    client.set_default_client_config(client_config(cert)?);
    let connection = client.connect(addr, "localhost")?.await?;
    let message: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let mut times = Vec::with_capacity(streams);
    for _ in 0..streams {
        let start = Instant::now();
        let (mut send, mut recv) = connection.open_bi().await?;
        send.write_all(&message).await?;
        send.finish()?;
        let back = recv.read_to_end(bytes + 1).await?;
        if back != message {
            return Err("the echo differs from what was sent".into());
        }
        times.push(start.elapsed());
    }
    connection.close(0u32.into(), b"done");
    client.wait_idle().await;
    server.close(0u32.into(), b"done");
    server.wait_idle().await;
    serving.await??;
    Ok(times)
}

/// Accepts connections until the endpoint closes; echoes every stream of each.
async fn serve(endpoint: Endpoint) -> Result<()> {
    while let Some(incoming) = endpoint.accept().await {
        let connection = incoming.await?;
        softtimer_async::spawn(async move {
            while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                let Ok(data) = recv.read_to_end(1 << 20).await else {
                    break;
                };
                if send.write_all(&data).await.is_err() || send.finish().is_err() {
                    break;
                }
            }
        });
    }
    Ok(())
}

/// A server configuration with a fresh self-signed certificate for `localhost`.
fn server_config() -> Result<(ServerConfig, CertificateDer<'static>)> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let cert = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    Ok((
        ServerConfig::with_single_cert(vec![cert.clone()], key)?,
        cert,
    ))
}

/// A client configuration that trusts `cert`.
fn client_config(cert: CertificateDer<'static>) -> Result<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    Ok(ClientConfig::with_root_certificates(Arc::new(roots))?)
}
