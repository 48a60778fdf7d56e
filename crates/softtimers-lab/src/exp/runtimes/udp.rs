//! Paced UDP: 1472-byte datagrams at 100 Mbit/s (one every 117.76 µs) over loopback, from the
//! soft runtime's `PacedSender` (each datagram leaves from a soft-event handler at its
//! departure time) and from a tokio and a smol task sending one datagram per tick of their
//! runtime's interval timer at the same period, and the floor: a thread that spins on the
//! clock and sends each datagram at its time. A receiver thread on another CPU takes each
//! datagram's kernel receive timestamp; the figure is the inter-arrival times' spread.
//!
//! The four senders run in interleaved rounds (three in a full run, the order rotated each
//! round; one in a quick run), and each row is the median of its rounds: the stddev is made
//! by a handful of long gaps among some 12,700 a round (the virtual CPU descheduled for up to
//! a millisecond or two, as the spinning floor shows), and one such stall in one sender's
//! single run used to decide the comparison.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use softtimer_async::{PacedSender, Precision, Rate, Runtime, UdpSocket};
use softtimer_net::burstiness::ArrivalStats;
use softtimer_net::udp::TimestampedReceiver;
use softtimers_tools::cpu::{CLIENT_CPU, pin_to, process_cpu_ns, server_cpu, thread_cpu_ns};

use super::{AsyncRow, AsyncWorkload, RuntimeKind};

/// The workload's name.
pub const PACED_UDP: AsyncWorkload = AsyncWorkload::PacedUdp100mbit;

const SIZE: usize = 1472;
const BITS_PER_SEC: u64 = 100_000_000;

fn gap() -> Duration {
    Duration::from_nanos(SIZE as u64 * 8 * 1_000_000_000 / BITS_PER_SEC)
}

/// Interleaved rounds of the four senders.
fn rounds(quick: bool) -> usize {
    if quick { 1 } else { 3 }
}

/// One sender's run in one round.
fn run_length(quick: bool) -> Duration {
    Duration::from_millis(if quick { 1_000 } else { 1_500 })
}

fn datagrams(quick: bool) -> usize {
    (run_length(quick).as_nanos() / gap().as_nanos()) as usize
}

/// About how long the workload takes, s.
pub fn expected_seconds(quick: bool) -> f64 {
    (4 * rounds(quick)) as f64 * (run_length(quick).as_secs_f64() + 0.2)
}

/// What the receiver saw: the arrivals' statistics, as `softtimers sink` keeps them.
struct Received {
    arrivals: ArrivalStats,
    cpu_ns: u64,
}

/// A receiver on the client CPU that takes up to `count` datagrams with their kernel
/// receive timestamps (`SO_TIMESTAMPNS`, taken on loopback as the sender's `sendmsg` hands
/// the datagram over), so that the gaps are the sender's spacing and not this thread's
/// wake-ups; a second's silence ends the run early when datagrams are lost.
fn receiver(count: usize) -> Result<(SocketAddr, std::thread::JoinHandle<Result<Received>>)> {
    let mut socket =
        TimestampedReceiver::bind("127.0.0.1:0".parse()?, 64, 2048).context("receiver socket")?;
    socket.set_timeout(Duration::from_secs(1))?;
    let addr = socket.local_addr()?;
    let thread = std::thread::spawn(move || {
        let _pin = pin_to(CLIENT_CPU);
        let start = thread_cpu_ns();
        // Gaps of 2 µs or less make a burst, as `sink`'s default.
        let mut arrivals = ArrivalStats::new(2_000);
        while arrivals.packets() < count as u64 {
            let n = socket.recv_batch().context("receiving")?;
            if n == 0 {
                break;
            }
            for i in 0..n {
                let datagram = socket.get(i).expect("within the batch");
                let at = datagram
                    .kernel_ns
                    .context("a datagram without its kernel timestamp")?;
                arrivals.push(at, datagram.data.len() as u64);
            }
        }
        Ok(Received {
            arrivals,
            cpu_ns: thread_cpu_ns() - start,
        })
    });
    Ok((addr, thread))
}

/// What a receiver saw of one sender: the spread of the gaps and the sender's CPU.
struct Spacing {
    stddev_us: f64,
    p99_us: f64,
    cpu_ns_per_datagram: f64,
    datagrams_per_s: f64,
}

impl Spacing {
    fn row(self, runtime: RuntimeKind, precision: Option<Precision>) -> AsyncRow {
        let mut row = AsyncRow::new(PACED_UDP, runtime, precision);
        row.stddev_us = Some(self.stddev_us);
        row.p99_us = Some(self.p99_us);
        row.cpu_ns_per_op = Some(self.cpu_ns_per_datagram);
        row.ops_per_s = Some(self.datagrams_per_s);
        row
    }
}

/// Runs `send` (which sends `count` datagrams to the address it is given; `sender` names it)
/// against a fresh receiver.
fn measure(
    sender: &str,
    count: usize,
    send: impl FnOnce(SocketAddr) -> Result<()>,
) -> Result<Spacing> {
    let before = process_cpu_ns();
    let (to, rx) = receiver(count)?;
    send(to)?;
    let received = rx
        .join()
        .map_err(|_| anyhow::anyhow!("the receiver panicked"))??;
    let cpu = process_cpu_ns()
        .saturating_sub(before)
        .saturating_sub(received.cpu_ns);
    let a = &received.arrivals;
    let (Some(stddev_ns), Some(p99_ns), Some(rate_bps)) = (
        a.interarrival_stddev_ns(),
        a.interarrival_percentile_ns(99.0),
        a.rate_bps(),
    ) else {
        bail!("{sender}: {} datagrams of {count} arrived", a.packets());
    };
    Ok(Spacing {
        stddev_us: stddev_ns / 1e3,
        p99_us: p99_ns / 1e3,
        cpu_ns_per_datagram: cpu as f64 / count as f64,
        datagrams_per_s: rate_bps / (8 * SIZE) as f64,
    })
}

/// The senders of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sender {
    Soft,
    Tokio,
    Smol,
    /// The floor: a thread spinning for each departure.
    Spinning,
}

const SENDERS: [Sender; 4] = [Sender::Soft, Sender::Tokio, Sender::Smol, Sender::Spinning];

/// What `paced-udp-100mbit` measured: a row per runtime (the median of its rounds, each
/// round's figures kept), and the floor's stddev, µs, the median of its rounds and round by
/// round.
pub struct PacedUdp {
    pub rows: Vec<AsyncRow>,
    pub floor_stddev_us: f64,
    pub floor_stddev_us_rounds: Vec<f64>,
}

/// `paced-udp-100mbit`: soft's `PacedSender`, tokio's `interval`, smol's `Timer::interval`,
/// and the floor, a spinning thread, in interleaved rounds.
pub fn paced_udp(quick: bool) -> Result<PacedUdp> {
    let count = datagrams(quick);
    let _pin = pin_to(server_cpu());
    let mut per_sender: [Vec<Spacing>; 4] = Default::default();
    for round in 0..rounds(quick) {
        for k in 0..SENDERS.len() {
            let i = (round + k) % SENDERS.len();
            per_sender[i].push(run_sender(SENDERS[i], count)?);
        }
    }
    let [soft, tokio, smol, spinning] = per_sender;
    let over = |runs: Vec<Spacing>, runtime, precision| {
        let rows = runs
            .into_iter()
            .map(|s| s.row(runtime, precision))
            .collect();
        AsyncRow::over_rounds(rows).context("no rounds")
    };
    let rows = vec![
        over(soft, RuntimeKind::Soft, Some(Precision::default()))?,
        over(tokio, RuntimeKind::TokioCt, None)?,
        over(smol, RuntimeKind::Smol, None)?,
    ];
    let floor_stddev_us_rounds: Vec<f64> = spinning.iter().map(|s| s.stddev_us).collect();
    Ok(PacedUdp {
        rows,
        floor_stddev_us: crate::summary::median(&floor_stddev_us_rounds),
        floor_stddev_us_rounds,
    })
}

/// One run of `sender`: `count` datagrams at 100 Mbit/s into a fresh receiver.
fn run_sender(sender: Sender, count: usize) -> Result<Spacing> {
    let datagram = [0u8; SIZE];
    match sender {
        Sender::Soft => {
            let rt = Runtime::builder()
                .precision(Precision::default())
                .build()
                .context("softtimer-async runtime")?;
            let rate = Rate::from_packet_interval(SIZE as u64, gap().as_nanos() as u64)
                .context("100 Mbit/s of 1472-byte datagrams")?;
            measure("soft", count, |to| {
                rt.block_on(async {
                    let socket = UdpSocket::bind("127.0.0.1:0").await?;
                    let paced = PacedSender::new(&socket, rate);
                    for _ in 0..count {
                        paced.send_to(&datagram, to).await?;
                    }
                    paced.flush().await
                })
                .context("soft paced sender")
            })
        }
        Sender::Tokio => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("tokio current_thread runtime")?;
            measure("tokio-ct", count, |to| {
                let _stock = softtimers_tools::cpu::stock_timer_slack();
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
            })
        }
        Sender::Smol => measure("smol", count, |to| {
            let _stock = softtimers_tools::cpu::stock_timer_slack();
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
        }),
        Sender::Spinning => measure("a spinning thread", count, |to| {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").context("sender socket")?;
            let mut due = Instant::now();
            for _ in 0..count {
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
                socket.send_to(&datagram, to).context("spinning sender")?;
                due += gap();
            }
            Ok(())
        }),
    }
}
