//! One soft-timer loop that serves QUIC (the perf protocol) and a plain UDP echo at once:
//! the application owns the loop, and the QUIC socket is one of its descriptors.
//!
//! Two clients on their own threads exercise it (a QUIC perf client making 20 requests, a
//! UDP client sending 20 datagrams); the loop stops when both are done, or after
//! `--duration SECS` (default 10).
//!
//! ```text
//! cargo run -p softtimer-quic --example quic_and_echo -- --duration 5
//! ```

use std::cell::RefCell;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use softtimer::{Clock, Fired, TriggerSource};
use softtimer_quic::perf::{ClientPlan, PerfClient, PerfServer};
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
use softtimer_quic::{DriverConfig, FireNotes, QuicLoop, QuicSocket};
use softtimer_rt::{EventLoop, Interest, LoopConfig, LoopTurn};

/// The application's soft events: the QUIC socket's wake-up, and its own deadline.
#[derive(Clone, Copy, Debug)]
enum Ev {
    Quic,
    Deadline,
}

const QUIC: u64 = 1;
const ECHO: u64 = 2;
const CLIENTS: usize = 2;

/// What one run served.
#[derive(Debug)]
pub struct Served {
    /// QUIC requests the loop's perf server answered.
    pub quic_requests: u64,
    /// Datagrams the loop's echo sent back.
    pub echoed: u64,
    /// Requests the QUIC client finished.
    pub client_requests: u64,
    /// Datagrams the echo client got back, of 20.
    pub echoes_back: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut duration = Duration::from_secs(10);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--duration" => {
                let secs: f64 = args.next().ok_or("--duration needs seconds")?.parse()?;
                if !(secs > 0.0 && secs <= 3600.0) {
                    return Err("--duration must be between 0 and 3600 seconds".into());
                }
                duration = Duration::from_secs_f64(secs);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let served = serve(duration)?;
    println!(
        "one loop served {} QUIC requests and echoed {} datagrams; the QUIC client finished {} \
         requests, the echo client got {} of 20 back",
        served.quic_requests, served.echoed, served.client_requests, served.echoes_back
    );
    Ok(())
}

/// Serves QUIC and the echo on one loop until both clients are done or `duration` passes.
pub fn serve(duration: Duration) -> Result<Served, Box<dyn std::error::Error>> {
    let notes = Arc::new(FireNotes::default());
    let handler_notes = Arc::clone(&notes);
    let mut ev: EventLoop<Ev> = EventLoop::new(LoopConfig::default(), move |_, f: Fired<Ev>| {
        if let Ev::Quic = f.event {
            handler_notes.note(f.source);
        }
    })?;

    // QUIC, on one descriptor of the loop.
    let identity = Identity::self_signed(&["localhost"])?;
    let config = DriverConfig {
        wake_lateness: ev.wake_lateness(),
        ..DriverConfig::default()
    };
    let server = server_config(&identity, &Tuning::default())?;
    let mut quic = QuicSocket::new(
        UdpSocket::bind("127.0.0.1:0")?,
        config,
        Some(server),
        *ev.clock(),
    )?
    .with_fire_notes(notes);
    quic.register(&mut ev.cx(), QUIC)?;
    let quic_addr = quic.local_addr()?;

    // A plain UDP echo, on another.
    let echo = UdpSocket::bind("127.0.0.1:0")?;
    echo.set_nonblocking(true)?;
    ev.cx().register(&echo, Interest::READABLE, ECHO)?;
    let echo_addr = echo.local_addr()?;

    let deadline = ev.clock().now() + ev.span(duration);
    ev.cx().schedule_at(deadline, Ev::Deadline)?;

    let done = Arc::new(AtomicUsize::new(0));
    let quic_client = {
        let done = Arc::clone(&done);
        let trust = Trust::Cert(identity.cert.clone());
        std::thread::spawn(move || -> Result<u64, String> {
            let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            let mut client =
                QuicLoop::new(Default::default(), socket, DriverConfig::default(), None)
                    .map_err(|e| e.to_string())?;
            // A short idle timeout: if the server's loop ends first, the client ends soon after.
            let tuning = Tuning {
                idle_timeout: Duration::from_secs(2),
                ..Tuning::default()
            };
            let tls = client_config(&trust, &tuning).map_err(|e| e.to_string())?;
            let started = client.driver().now();
            let conn = client
                .driver()
                .connect(tls, quic_addr, "localhost")
                .map_err(|e| e.to_string())?;
            let plan = ClientPlan {
                download: 10_000,
                requests: 20,
                ..ClientPlan::default()
            };
            let mut app = PerfClient::new(plan, conn, started);
            let result = client.run(&mut app);
            done.fetch_add(1, Ordering::Relaxed);
            result.map_err(|e| e.to_string())?;
            match app.report.error {
                Some(e) => Err(e),
                None => Ok(app.report.requests),
            }
        })
    };
    let echo_client = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || -> std::io::Result<usize> {
            let socket = UdpSocket::bind("127.0.0.1:0")?;
            socket.set_read_timeout(Some(Duration::from_secs(2)))?;
            let mut echoed = 0;
            let mut buf = [0u8; 64];
            for i in 0..20u32 {
                socket.send_to(&i.to_be_bytes(), echo_addr)?;
                if let Ok((n, _)) = socket.recv_from(&mut buf)
                    && buf[..n] == i.to_be_bytes()
                {
                    echoed += 1;
                }
            }
            done.fetch_add(1, Ordering::Relaxed);
            Ok(echoed)
        })
    };

    let mut server = PerfServer::new(None);
    let quic = RefCell::new(quic);
    let mut echoed = 0u64;
    let mut error = None;
    ev.run_with(
        |cx, ready| {
            if quic.borrow_mut().on_ready(cx, ready) || ready.token != ECHO {
                return;
            }
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = echo.recv_from(&mut buf) {
                cx.trigger(TriggerSource::Recv);
                if cx.send_to(&echo, &buf[..n], from).is_ok() {
                    echoed += 1;
                }
            }
        },
        |cx, turn| {
            if turn == LoopTurn::BeforeBlock {
                return false;
            }
            let did = match quic.borrow_mut().poll(cx, &mut server, Ev::Quic) {
                Ok(did) => did,
                Err(e) => {
                    error = Some(e);
                    cx.stop();
                    return false;
                }
            };
            if done.load(Ordering::Relaxed) == CLIENTS || !deadline.is_after(cx.now()) {
                cx.stop();
            }
            did
        },
    )?;
    if let Some(e) = error {
        return Err(e.into());
    }
    let client_requests = quic_client
        .join()
        .map_err(|_| "the QUIC client panicked")??;
    let echoes_back = echo_client
        .join()
        .map_err(|_| "the echo client panicked")??;
    Ok(Served {
        quic_requests: server.report.requests,
        echoed,
        client_requests,
        echoes_back,
    })
}
