//! The UDP request/response workload (small NFS-like RPCs): a server that answers each
//! request with a 1 KB reply, receiving and sending in batches (`recvmmsg`, `sendmmsg`), and
//! a client that keeps a window of requests outstanding. Both run on the event loop.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use softtimer_rt::{Interest, LoopCx, Ready, RecvBatch};

/// Bytes in a reply.
pub const REPLY_SIZE: usize = 1024;
/// Bytes in a request: an 8-byte transaction id and a small argument block.
pub const REQUEST_SIZE: usize = 64;

/// The RPC server; drive it with [`RpcServer::on_ready`].
pub struct RpcServer {
    socket: UdpSocket,
    batch: RecvBatch,
    reply: Vec<u8>,
    replies: Vec<Vec<u8>>,
    served: Arc<AtomicU64>,
}

impl RpcServer {
    /// A server on `addr` (port 0: any free port).
    pub fn bind(addr: SocketAddr) -> Result<Self> {
        let socket = UdpSocket::bind(addr).with_context(|| format!("cannot bind {addr}"))?;
        socket.set_nonblocking(true)?;
        Ok(RpcServer {
            socket,
            batch: RecvBatch::new(32, 2048),
            reply: vec![0x5a; REPLY_SIZE],
            replies: vec![vec![0; REPLY_SIZE]; 32],
            served: Arc::default(),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Requests answered so far.
    pub fn served(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.served)
    }

    /// Registers the socket with the loop.
    pub fn register<E>(&self, cx: &mut LoopCx<'_, E>) -> Result<()> {
        cx.register(&self.socket, Interest::READABLE, 0)?;
        Ok(())
    }

    /// Answers every waiting request.
    pub fn on_ready<E>(&mut self, cx: &mut LoopCx<'_, E>, _ready: Ready) {
        loop {
            let n = match cx.recvmmsg(&self.socket, &mut self.batch) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut out: Vec<(&[u8], SocketAddr)> = Vec::with_capacity(n);
            for (i, reply) in self.replies.iter_mut().enumerate().take(n) {
                let Some((request, Some(from))) = self.batch.get(i) else {
                    continue;
                };
                if request.len() < 8 {
                    continue; // not an RPC: no reply
                }
                // The reply echoes the transaction id.
                reply.copy_from_slice(&self.reply);
                reply[..8].copy_from_slice(&request[..8]);
                out.push((&reply[..], from));
            }
            if let Ok(sent) = cx.sendmmsg(&self.socket, &out) {
                self.served.fetch_add(sent as u64, Ordering::Relaxed);
            }
        }
    }
}

/// What an RPC load run measured.
#[derive(Clone, Debug, Default)]
pub struct RpcResult {
    /// Replies received.
    pub replies: u64,
    /// How long it ran.
    pub elapsed: Duration,
}

impl RpcResult {
    /// Replies per second.
    pub fn rate(&self) -> f64 {
        self.replies as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Keeps `window` requests outstanding to `addr` for `duration` (run on its own thread).
/// The window is small enough (32 × 64 B requests, 32 × 1 KB replies) for loopback socket
/// buffers, so nothing is lost.
pub fn run_rpc_load(addr: SocketAddr, window: usize, duration: Duration) -> Result<RpcResult> {
    let mut ev = crate::http::client_loop(duration)?;
    let socket = UdpSocket::bind("127.0.0.1:0").context("cannot bind the RPC client")?;
    socket
        .connect(addr)
        .with_context(|| format!("cannot connect to {addr}"))?;
    socket.set_nonblocking(true)?;
    ev.cx().register(&socket, Interest::READABLE, 0)?;
    let mut xid = 0u64;
    let mut request = [0u8; REQUEST_SIZE];
    let mut send = |cx: &mut LoopCx<'_, ()>, xid: &mut u64| {
        *xid += 1;
        request[..8].copy_from_slice(&xid.to_be_bytes());
        let _ = cx.send(&socket, &request);
    };
    {
        let mut cx = ev.cx();
        for _ in 0..window {
            send(&mut cx, &mut xid);
        }
    }
    let mut result = RpcResult::default();
    let mut batch = RecvBatch::new(32, 2048);
    let start = Instant::now();
    ev.run(|cx, _ready| {
        while let Ok(n) = cx.recvmmsg(&socket, &mut batch) {
            if n == 0 {
                break;
            }
            result.replies += n as u64;
            for _ in 0..n {
                send(cx, &mut xid);
            }
        }
    })?;
    result.elapsed = start.elapsed();
    Ok(result)
}
