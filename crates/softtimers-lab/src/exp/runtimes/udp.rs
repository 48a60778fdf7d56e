//! Paced UDP: 1200-byte datagrams at 100 Mbit/s (one every 96 µs) over loopback, from the
//! soft runtime's `PacedSender` (each datagram leaves from a soft-event handler at its
//! departure time) and from a tokio and a smol task sending one datagram per tick of their
//! runtime's interval timer at the same period. A receiver thread on another CPU stamps
//! arrivals; the figure is the inter-arrival times' spread.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use softtimer_async::{PacedSender, Precision, Rate, Runtime, UdpSocket};
use softtimers_tools::cpu::{CLIENT_CPU, pin_to, process_cpu_ns, server_cpu, thread_cpu_ns};

use super::{AsyncRow, AsyncWorkload, RuntimeKind};

/// The workload's name.
pub const PACED_UDP: AsyncWorkload = AsyncWorkload::PacedUdp100mbit;

const SIZE: usize = 1200;
const BITS_PER_SEC: u64 = 100_000_000;

fn gap() -> Duration {
    Duration::from_nanos(SIZE as u64 * 8 * 1_000_000_000 / BITS_PER_SEC)
}

fn run_length(quick: bool) -> Duration {
    Duration::from_millis(if quick { 1_000 } else { 4_000 })
}

fn datagrams(quick: bool) -> usize {
    (run_length(quick).as_nanos() / gap().as_nanos()) as usize
}

/// About how long the workload takes, s.
pub fn expected_seconds(quick: bool) -> f64 {
    3.0 * (run_length(quick).as_secs_f64() + 0.2)
}

/// What the receiver saw.
struct Received {
    arrivals: Vec<Instant>,
    cpu_ns: u64,
}

/// A receiver on the client CPU that stamps up to `count` arrivals (blocking reads, a
/// second's timeout ending the run early when datagrams are lost).
fn receiver(count: usize) -> Result<(SocketAddr, std::thread::JoinHandle<Received>)> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").context("receiver socket")?;
    socket.set_read_timeout(Some(Duration::from_secs(1)))?;
    let addr = socket.local_addr()?;
    let thread = std::thread::spawn(move || {
        let _pin = pin_to(CLIENT_CPU);
        let start = thread_cpu_ns();
        let mut arrivals = Vec::with_capacity(count);
        let mut buf = [0u8; 2048];
        while arrivals.len() < count && socket.recv(&mut buf).is_ok() {
            arrivals.push(Instant::now());
        }
        Received {
            arrivals,
            cpu_ns: thread_cpu_ns() - start,
        }
    });
    Ok((addr, thread))
}

/// Runs `send` (which sends `count` datagrams to the address it is given) against a fresh
/// receiver and makes the row.
fn measure(
    runtime: RuntimeKind,
    precision: Option<Precision>,
    count: usize,
    send: impl FnOnce(SocketAddr) -> Result<()>,
) -> Result<AsyncRow> {
    let before = process_cpu_ns();
    let (to, rx) = receiver(count)?;
    send(to)?;
    let received = rx
        .join()
        .map_err(|_| anyhow::anyhow!("the receiver panicked"))?;
    let cpu = process_cpu_ns()
        .saturating_sub(before)
        .saturating_sub(received.cpu_ns);
    let arrivals = &received.arrivals;
    if arrivals.len() < 2 {
        bail!("{runtime}: {} datagrams of {count} arrived", arrivals.len());
    }
    let mut gaps: Vec<f64> = arrivals
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6)
        .collect();
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    let stddev = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n).sqrt();
    gaps.sort_by(f64::total_cmp);
    let span = (arrivals[arrivals.len() - 1] - arrivals[0]).as_secs_f64();
    let mut row = AsyncRow::new(PACED_UDP, runtime, precision);
    row.stddev_us = Some(stddev);
    row.p99_us = Some(gaps[((gaps.len() - 1) as f64 * 0.99).round() as usize]);
    row.cpu_ns_per_op = Some(cpu as f64 / count as f64);
    row.ops_per_s = Some((arrivals.len() - 1) as f64 / span.max(1e-9));
    Ok(row)
}

/// `paced-udp-100mbit`: soft's `PacedSender`, tokio's `interval`, smol's `Timer::interval`.
pub fn paced_udp(quick: bool) -> Result<Vec<AsyncRow>> {
    let count = datagrams(quick);
    let _pin = pin_to(server_cpu());
    let datagram = [0u8; SIZE];
    let mut rows = Vec::new();

    let precision = Precision::default();
    let rt = Runtime::builder()
        .precision(precision)
        .build()
        .context("softtimer-async runtime")?;
    let rate = Rate::from_packet_interval(SIZE as u64, gap().as_nanos() as u64)
        .context("100 Mbit/s of 1200-byte datagrams")?;
    rows.push(measure(RuntimeKind::Soft, Some(precision), count, |to| {
        rt.block_on(async {
            let socket = UdpSocket::bind("127.0.0.1:0")?;
            let paced = PacedSender::new(&socket, rate);
            for _ in 0..count {
                paced.send_to(&datagram, to).await?;
            }
            paced.flush().await
        })
        .context("soft paced sender")
    })?);
    drop(rt);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio current_thread runtime")?;
    rows.push(measure(RuntimeKind::TokioCt, None, count, |to| {
        rt.block_on(async {
            let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
            let mut ticks = tokio::time::interval(gap());
            for _ in 0..count {
                ticks.tick().await;
                socket.send_to(&datagram, to).await?;
            }
            Ok::<_, std::io::Error>(())
        })
        .context("tokio interval sender")
    })?);
    drop(rt);

    rows.push(measure(RuntimeKind::Smol, None, count, |to| {
        smol::block_on(async {
            use smol::stream::StreamExt as _;
            let socket = smol::net::UdpSocket::bind("127.0.0.1:0").await?;
            let mut ticks = smol::Timer::interval(gap());
            for _ in 0..count {
                ticks.next().await;
                socket.send_to(&datagram, to).await?;
            }
            Ok::<_, std::io::Error>(())
        })
        .context("smol Timer::interval sender")
    })?);
    Ok(rows)
}
