//! A paced UDP sender on the runtime: 1472-byte datagrams at a rate, each leaving from a
//! soft-event handler at its departure time; prints what it sent and its CPU per datagram.
//!
//! ```sh
//! # To a sink of its own on loopback (a thread timing arrivals with CLOCK_MONOTONIC):
//! cargo run --release -p softtimer-async --example paced_udp
//! # To another receiver (`softtimers sink`, say), at 100 Mbit/s for 5 s:
//! cargo run --release -p softtimer-async --example paced_udp -- 127.0.0.1:9000 100M 5
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use softtimer_async::{PacedSender, Rate, Runtime, UdpSocket};

const SIZE: usize = 1472;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let to: Option<SocketAddr> = args
        .first()
        .map(|a| a.parse().expect("a destination like 127.0.0.1:9000"));
    let rate: Rate = args
        .get(1)
        .map_or("100M", String::as_str)
        .parse()
        .expect("a rate like 100M");
    let seconds: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let count = (rate.bits_per_sec() as f64 * seconds / (SIZE as f64 * 8.0)) as usize;

    let sink = to.is_none().then(|| {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let thread = std::thread::spawn(move || {
            let mut arrivals = Vec::with_capacity(count);
            let mut buf = [0u8; 2048];
            while arrivals.len() < count && socket.recv(&mut buf).is_ok() {
                arrivals.push(Instant::now());
            }
            arrivals
        });
        (addr, thread)
    });
    let to = to.unwrap_or_else(|| sink.as_ref().unwrap().0);

    let rt = Runtime::new().expect("a runtime");
    let cpu_before = process_cpu();
    let start = Instant::now();
    rt.block_on(async {
        let socket = UdpSocket::bind("0.0.0.0:0").await.unwrap();
        let paced = PacedSender::new(&socket, rate);
        let datagram = [0u8; SIZE];
        for _ in 0..count {
            paced.send_to(&datagram, to).await.unwrap();
        }
        paced.flush().await.unwrap();
    });
    let elapsed = start.elapsed();
    let cpu = process_cpu() - cpu_before;
    let stats = rt.stats();
    println!(
        "sent {count} datagrams of {SIZE} B at {rate} in {elapsed:?} ({:.1} Mbit/s); CPU {:.2} µs \
         per datagram, {:.1} % of a core; {:.3} task polls and {:.2} blocking waits per datagram",
        count as f64 * SIZE as f64 * 8.0 / elapsed.as_secs_f64() / 1e6,
        cpu.as_secs_f64() * 1e6 / count as f64,
        cpu.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        stats.polls as f64 / count as f64,
        stats.blocked_parks as f64 / count as f64,
    );
    if let Some((_, thread)) = sink {
        let arrivals = thread.join().unwrap();
        let mut gaps: Vec<f64> = arrivals
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6)
            .collect();
        let n = gaps.len().max(1) as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let stddev = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n).sqrt();
        gaps.sort_by(f64::total_cmp);
        let p99 = gaps.get(gaps.len() * 99 / 100).copied().unwrap_or(0.0);
        println!(
            "received {} (user-space arrival times): inter-arrival mean {mean:.1} µs, stddev {stddev:.1} µs, p99 {p99:.1} µs",
            arrivals.len()
        );
    }
}

/// CPU time of the whole process (every thread, the sink's too when it runs).
fn process_cpu() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
