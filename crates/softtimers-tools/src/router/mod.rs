//! The forwarding workload of the livelock experiments: a flood generator, a user-space UDP
//! router in two designs, and a compute-bound process to share the router's core with.
//!
//! - `softtimers flood`: minimum-size UDP datagrams at an offered rate, in `sendmmsg` batches
//!   on a schedule (bounded in time); reports the rate it reached, and says so when that is
//!   below the rate asked for.
//! - `softtimers router --design polling|baseline [--screen]`: forwards every datagram that
//!   arrives on its port to the next hop.
//!   - `polling` is the livelock paper's design ([`softtimer_net::livelock`]): the socket's
//!     readiness (epoll, one-shot) only starts polling; polling takes at most a quota of
//!     datagrams per turn and processes each to completion (per-packet work, then `sendmmsg`),
//!     with no queue between receiving and processing; excess load stays in the kernel's
//!     socket buffer, which drops it early. With `--screen`, a screening thread on the same
//!     core is the slower consumer behind a 32-packet queue, and input stops at 75 % and
//!     resumes at 25 % (or after 1 ms). With `--cpu-budget P`, input stops once packet work
//!     used P % of a 10 ms period.
//!   - `baseline` is the 4.2BSD structure: a receive thread at real-time priority
//!     (`SCHED_FIFO`) moves datagrams (batched, as interrupt batching does) into a bounded
//!     intermediate queue (50 packets, as `ipintrq`), dropping when it is full; a processing
//!     thread at normal priority on the same core does the per-packet work and sends. With
//!     `--screen`, the queue is the 32-packet screening queue and its consumer also screens.
//!     Nothing in it is slow on purpose: it livelocks because receiving preempts processing.
//! - `softtimers compute`: spins for a duration and reports the share of a core it got.

mod args;
pub mod compute;
pub mod flood;

pub use args::ComputeArgs;
pub use compute::{ComputeReport, compute};
pub use flood::{FloodOptions, FloodReport, flood};

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, Span, SystemClock};
use softtimer_net::forward::{Forwarder, PacketWork};
use softtimer_net::livelock::{CpuBudget, QueueFeedback, Quota, RoundRobin, Serviced};

use crate::cpu::process_cpu_ns;
use crate::output::Report;

/// The router's designs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RouterDesign {
    /// Livelock-free: readiness starts polling, quotas, no intermediate queue, feedback, a
    /// CPU budget.
    Polling,
    /// The 4.2BSD structure: a real-time receive thread feeding a bounded queue.
    Baseline,
}

/// How the router runs: `softtimers router`'s options.
#[derive(clap::Args, Clone, Debug)]
pub struct RouterOptions {
    /// Where datagrams arrive (`host:port`).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Where they go (`host:port`).
    #[arg(long)]
    pub forward_to: SocketAddr,
    /// The design.
    #[arg(long, value_enum, default_value = "polling")]
    pub design: RouterDesign,
    /// A screening stage on the same core behind a 32-packet queue.
    #[arg(long)]
    pub screen: bool,
    /// Packets per polling turn (a number, or `unlimited`).
    #[arg(long, default_value = "10", value_parser = crate::parse::parse_quota)]
    pub quota: Quota,
    /// Per-packet forwarding work, ns of busy work.
    #[arg(long, default_value_t = 0)]
    pub work_ns: u64,
    /// Per-packet screening work, ns (with --screen).
    #[arg(long, default_value_t = 0)]
    pub screen_ns: u64,
    /// The share of each 10 ms period packet work may use, % (polling design).
    #[arg(long)]
    pub cpu_budget: Option<u32>,
    /// Polling design: run the polling thread at real-time priority (SCHED_FIFO, root),
    /// above every normal process on its core, as in-kernel packet processing is; only the
    /// CPU budget then leaves the core's other work its share.
    #[arg(long)]
    pub realtime: bool,
    /// How long to run.
    #[arg(long, default_value = "10s", value_parser = crate::parse::parse_duration)]
    pub duration: Duration,
}

/// What the router counted (`router --json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RouterReport {
    /// The design.
    pub design: RouterDesign,
    /// With the screening stage.
    pub screen: bool,
    /// Packets per turn (`null`: unlimited).
    pub quota: Option<u32>,
    /// Datagrams taken from the socket.
    pub received: u64,
    /// Datagrams sent on.
    pub forwarded: u64,
    /// Datagrams dropped at an intermediate queue (taken, then thrown away: wasted work).
    pub dropped_in_queue: u64,
    /// Datagrams the kernel dropped at the socket (early, at no cost to the router).
    pub kernel_drops: u64,
    /// Sends the kernel refused.
    pub send_errors: u64,
    /// Datagrams taken that were longer than the router carries (1,472 bytes): dropped,
    /// not sent on cut.
    #[serde(default)]
    pub too_long: u64,
    /// Times input was stopped by queue feedback, and how many of those the timeout ended.
    pub feedback_stops: (u64, u64),
    /// 10 ms periods in which the CPU budget ran out.
    pub budget_stops: u64,
    /// The router's CPU time over the run, % of one core.
    pub cpu_pct: f64,
    /// The run's length, s.
    pub duration_s: f64,
}

/// Bounded queue between two threads, with the counts the report needs.
struct Queue {
    items: Mutex<VecDeque<Box<[u8]>>>,
    ready: Condvar,
    drained: Condvar,
    capacity: usize,
    dropped: AtomicU64,
}

impl Queue {
    fn new(capacity: usize) -> Queue {
        Queue {
            items: Mutex::new(VecDeque::with_capacity(capacity)),
            ready: Condvar::new(),
            drained: Condvar::new(),
            capacity,
            dropped: AtomicU64::new(0),
        }
    }

    fn len(&self) -> usize {
        self.items.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Appends what fits, drops the rest (counted).
    fn push_all<'a>(&self, packets: impl Iterator<Item = &'a [u8]>) {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        for p in packets {
            if items.len() < self.capacity {
                items.push_back(p.into());
            } else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(items);
        self.ready.notify_one();
    }

    /// Takes up to `max`, waiting up to `wait` for the first.
    fn pop_batch(&self, max: usize, wait: Duration) -> Vec<Box<[u8]>> {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        if items.is_empty() {
            items = self
                .ready
                .wait_timeout(items, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let n = items.len().min(max);
        let out: Vec<Box<[u8]>> = items.drain(..n).collect();
        drop(items);
        if n > 0 {
            self.drained.notify_all();
        }
        out
    }

    /// Waits until the queue is at most `len` long or `wait` passes.
    fn wait_drained_to(&self, len: usize, wait: Duration) {
        let items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        if items.len() > len {
            let _ = self.drained.wait_timeout(items, wait);
        }
    }
}

/// What a consumer behind a queue sent on, and what the kernel refused of it.
#[derive(Debug, Default)]
struct Consumed {
    sent: AtomicU64,
    refused: AtomicU64,
}

/// The consumer behind a queue: per-packet work, then send; until `stop`, and then what is
/// left in the queue (at most its capacity), so that every datagram the queue accepted is
/// forwarded or refused, and `received = forwarded + dropped + send errors + too long` holds
/// at the end of a run.
fn consume(
    queue: &Queue,
    sender: &softtimer_net::forward::Sender,
    work: &PacketWork,
    stop: &AtomicBool,
    consumed: &Consumed,
) {
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let wait = if stopping {
            Duration::ZERO
        } else {
            Duration::from_millis(10)
        };
        let batch = queue.pop_batch(32, wait);
        if batch.is_empty() {
            if stopping {
                return;
            }
            continue;
        }
        work.run(batch.len());
        let refs: Vec<&[u8]> = batch.iter().map(|b| &b[..]).collect();
        let sent = sender.send(&refs);
        consumed.sent.fetch_add(sent as u64, Ordering::Relaxed);
        let refused = refs.len().saturating_sub(sent) as u64;
        consumed.refused.fetch_add(refused, Ordering::Relaxed);
    }
}

/// Whether datagrams sent to `to` would come back to a router listening on `listen`: the
/// same port, and the same address, or a listener on every address (of `to`'s family, or
/// IPv6's, which takes IPv4 too) with the next hop on loopback or on another of this host's
/// own addresses.
fn forwards_to_itself(listen: SocketAddr, to: SocketAddr) -> bool {
    if listen.port() != to.port() {
        return false;
    }
    if listen.ip() == to.ip() {
        return true;
    }
    listen.ip().is_unspecified()
        && (listen.is_ipv6() || to.is_ipv4())
        && (to.ip().is_loopback() || is_own_address(to))
}

/// Whether `to` is one of this host's addresses: the kernel sends a datagram to one of its
/// own addresses from that address (to another host, from the address of the way out).
/// Asked by connecting a UDP socket, which sends nothing; a link-local address keeps its
/// scope.
fn is_own_address(to: SocketAddr) -> bool {
    let any: SocketAddr = if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    std::net::UdpSocket::bind(any)
        .and_then(|socket| {
            socket.connect(to)?;
            socket.local_addr()
        })
        .is_ok_and(|local| local.ip() == to.ip())
}

/// Checks the router's options.
pub fn check_router(options: &RouterOptions) -> Result<()> {
    crate::parse::check_run_duration(options.duration)?;
    ensure!(
        options.work_ns <= 1_000_000 && options.screen_ns <= 1_000_000,
        "per-packet work over 1 ms is not a router"
    );
    ensure!(
        !forwards_to_itself(options.listen, options.forward_to),
        "--forward-to {} reaches the router itself (it listens on {}): it would forward its own \
         output for ever",
        options.forward_to,
        options.listen
    );
    if let Some(share) = options.cpu_budget {
        ensure!(
            (1..=100).contains(&share),
            "--cpu-budget {share}: want 1 ..= 100 (%)"
        );
        ensure!(
            options.design == RouterDesign::Polling,
            "--cpu-budget applies to the polling design"
        );
    }
    Ok(())
}

/// Runs the router for its duration and reports what it counted.
pub fn router(options: &RouterOptions) -> Result<RouterReport> {
    check_router(options)?;
    let fwd = Forwarder::bind(options.listen, options.forward_to, 256).with_context(|| {
        format!(
            "listening on {} to forward to {}",
            options.listen, options.forward_to
        )
    })?;
    let cpu_before = process_cpu_ns();
    let started = StdInstant::now();
    let mut report = match options.design {
        RouterDesign::Polling => run_polling(options, fwd)?,
        RouterDesign::Baseline => run_baseline(options, fwd)?,
    };
    let elapsed = started.elapsed();
    report.cpu_pct =
        process_cpu_ns().saturating_sub(cpu_before) as f64 / elapsed.as_nanos() as f64 * 100.0;
    report.duration_s = elapsed.as_secs_f64();
    Ok(report)
}

fn empty_report(options: &RouterOptions) -> RouterReport {
    RouterReport {
        design: options.design,
        screen: options.screen,
        quota: match options.quota {
            Quota::Packets(n) => Some(n),
            Quota::Unlimited => None,
        },
        received: 0,
        forwarded: 0,
        dropped_in_queue: 0,
        kernel_drops: 0,
        send_errors: 0,
        too_long: 0,
        feedback_stops: (0, 0),
        budget_stops: 0,
        cpu_pct: 0.0,
        duration_s: 0.0,
    }
}

/// The livelock-free design (see the module's documentation).
fn run_polling(options: &RouterOptions, mut fwd: Forwarder) -> Result<RouterReport> {
    use rustix::event::epoll;
    const RX: usize = 0;
    let clock = SystemClock::new();
    let hz = clock.resolution_hz();
    let poll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    let oneshot = epoll::EventFlags::IN | epoll::EventFlags::ONESHOT;
    epoll::add(
        &poll,
        fwd.receiving_socket(),
        epoll::EventData::new_u64(RX as u64),
        oneshot,
    )?;
    let mut armed = true;
    let mut rr = RoundRobin::new(1, options.quota);
    let work = PacketWork::new(options.work_ns);
    let mut budget = options
        .cpu_budget
        .map(|share| CpuBudget::new(share, Span::from_duration(Duration::from_millis(10), hz)))
        .transpose()?;
    // The screening stage: a thread on this core behind a 32-packet queue, with feedback.
    let stop = Arc::new(AtomicBool::new(false));
    let screened = Arc::new(Consumed::default());
    let queue = Arc::new(Queue::new(32));
    let mut feedback = options
        .screen
        .then(|| {
            QueueFeedback::new(
                32,
                75,
                25,
                Span::from_duration(Duration::from_millis(1), hz),
            )
        })
        .transpose()?;
    let screener = if options.screen {
        let (queue, stop, screened) =
            (Arc::clone(&queue), Arc::clone(&stop), Arc::clone(&screened));
        let sender = fwd.sender()?;
        let screen_work = PacketWork::new(options.screen_ns);
        Some(std::thread::spawn(move || {
            consume(&queue, &sender, &screen_work, &stop, &screened)
        }))
    } else {
        None
    };
    if options.realtime {
        set_fifo(50).context("--realtime needs SCHED_FIFO (root)")?;
    }
    let end = StdInstant::now() + options.duration;
    let mut events = Vec::with_capacity(4);
    while StdInstant::now() < end {
        let Some(turn) = rr.next_turn() else {
            // Nothing to do: the loop is idle. Clear the budget's total, arm readiness (the
            // "interrupt") and block for it.
            if let Some(b) = budget.as_mut() {
                b.on_idle();
            }
            if !armed {
                epoll::modify(
                    &poll,
                    fwd.receiving_socket(),
                    epoll::EventData::new_u64(RX as u64),
                    oneshot,
                )?;
                armed = true;
            }
            events.clear();
            let left = end.saturating_duration_since(StdInstant::now());
            let timeout = rustix::time::Timespec::try_from(left.min(Duration::from_millis(100)))?;
            match epoll::wait(
                &poll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&timeout),
            ) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            if !events.is_empty() {
                armed = false; // one-shot: disarmed until polling ends
                rr.mark_ready(RX);
            }
            continue;
        };
        let now = clock.now();
        if let Some(b) = budget.as_mut()
            && !b.input_allowed(now)
        {
            // Packet work used its share of the period: let the core's other work run.
            let resume = b.period_end().unwrap_or(now);
            std::thread::sleep(resume.saturating_since(now).to_duration(hz));
            continue;
        }
        if let Some(fb) = feedback.as_mut()
            && !fb.input_allowed(queue.len(), now)
        {
            let until = fb
                .resume_by()
                .unwrap_or(now)
                .saturating_since(now)
                .to_duration(hz);
            queue.wait_drained_to(7, until.max(Duration::from_micros(10)));
            continue;
        }
        // One turn: at most the quota (all that waits, when unlimited), each datagram
        // processed to completion or handed to the screening stage.
        let started = clock.now();
        let quota = turn.quota as usize;
        let mut took_total = 0usize;
        loop {
            let mut want = (quota - took_total).min(256);
            if let Some(fb) = feedback.as_ref() {
                // The watermark holds per packet: never take more than the queue has room
                // for below it, so no packet is worked on only to be dropped.
                want = want.min(fb.room(queue.len()));
                if want == 0 {
                    break;
                }
            }
            let took = fwd.take_up_to(want)?;
            if took > 0 {
                work.run(took);
                if options.screen {
                    queue.push_all((0..took).filter_map(|i| fwd.taken(i)));
                } else {
                    fwd.send_taken();
                }
            }
            took_total += took;
            if took < want || took_total >= quota {
                break;
            }
        }
        if let Some(b) = budget.as_mut() {
            let done = clock.now();
            b.charge(done, done.saturating_since(started));
        }
        // A turn that used its whole quota goes to the back of the line; one that ran dry
        // leaves it, and the next pass, finding no turn, arms readiness again.
        let _: Serviced = rr.serviced(RX, took_total);
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = screener {
        let _ = t.join();
    }
    let c = fwd.counters();
    let mut report = empty_report(options);
    report.received = c.received;
    report.forwarded = c.forwarded + screened.sent.load(Ordering::Relaxed);
    report.dropped_in_queue = queue.dropped.load(Ordering::Relaxed);
    report.kernel_drops = fwd.kernel_drops();
    report.send_errors = c.send_errors + screened.refused.load(Ordering::Relaxed);
    report.too_long = c.truncated;
    report.feedback_stops = feedback.map_or((0, 0), |f| f.counts());
    report.budget_stops = budget.map_or(0, |b| b.inhibited_periods());
    Ok(report)
}

/// Puts the calling thread in the real-time class at `priority` (1 ..= 99).
fn set_fifo(priority: i32) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a live `sched_param`; pid 0 is the calling thread.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The 4.2BSD structure (see the module's documentation).
fn run_baseline(options: &RouterOptions, mut fwd: Forwarder) -> Result<RouterReport> {
    let capacity = if options.screen { 32 } else { 50 };
    let queue = Arc::new(Queue::new(capacity));
    let stop = Arc::new(AtomicBool::new(false));
    let consumed = Arc::new(Consumed::default());
    let processor = {
        let (queue, stop, consumed) =
            (Arc::clone(&queue), Arc::clone(&stop), Arc::clone(&consumed));
        let sender = fwd.sender()?;
        let work =
            PacketWork::new(options.work_ns + if options.screen { options.screen_ns } else { 0 });
        std::thread::spawn(move || consume(&queue, &sender, &work, &stop, &consumed))
    };
    // This thread receives, at real-time priority, like a device interrupt.
    let fifo = set_fifo(50);
    let receiver = {
        let end = StdInstant::now() + options.duration;
        let queue = Arc::clone(&queue);
        let poll = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)?;
        rustix::event::epoll::add(
            &poll,
            fwd.receiving_socket(),
            rustix::event::epoll::EventData::new_u64(0),
            rustix::event::epoll::EventFlags::IN,
        )?;
        let mut events = Vec::with_capacity(4);
        while StdInstant::now() < end {
            // Every datagram waiting, in batches, into the intermediate queue.
            let took = fwd.take_up_to(256)?;
            if took > 0 {
                queue.push_all((0..took).filter_map(|i| fwd.taken(i)));
                continue;
            }
            events.clear();
            let timeout = rustix::time::Timespec::try_from(Duration::from_millis(50))?;
            let _ = rustix::event::epoll::wait(
                &poll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&timeout),
            );
        }
        fwd
    };
    stop.store(true, Ordering::Relaxed);
    let _ = processor.join();
    let c = receiver.counters();
    let mut report = empty_report(options);
    report.received = c.received;
    report.forwarded = consumed.sent.load(Ordering::Relaxed);
    report.send_errors = consumed.refused.load(Ordering::Relaxed);
    report.too_long = c.truncated;
    report.dropped_in_queue = queue.dropped.load(Ordering::Relaxed);
    report.kernel_drops = receiver.kernel_drops();
    if let Err(e) = fifo {
        bail!("the baseline's receive thread needs SCHED_FIFO (root): {e}");
    }
    Ok(report)
}

impl Report for RouterReport {
    fn text(&self) -> String {
        let too_long = match self.too_long {
            0 => String::new(),
            n => format!(", too long to carry {n}"),
        };
        format!(
            "received {}, forwarded {}, dropped in a queue {}, dropped by the kernel {}, \
             refused by the kernel on the way out {}{too_long}, CPU {:.1} %\n",
            self.received,
            self.forwarded,
            self.dropped_in_queue,
            self.kernel_drops,
            self.send_errors,
            self.cpu_pct
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which next hops come back to the router: ports, addresses, families, loopback.
    #[test]
    fn a_loop_is_told_from_a_next_hop() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        for (listen, to, loops) in [
            ("127.0.0.1:9000", "127.0.0.1:9000", true),
            ("127.0.0.1:9000", "127.0.0.1:9001", false),
            ("0.0.0.0:9000", "127.0.0.1:9000", true),
            ("0.0.0.0:9000", "127.0.0.2:9000", true),
            ("0.0.0.0:9000", "127.0.0.1:9001", false),
            ("[::]:9000", "127.0.0.1:9000", true),
            ("[::]:9000", "[::1]:9000", true),
            // An IPv4 socket does not get what is sent to an IPv6 address.
            ("0.0.0.0:9000", "[::1]:9000", false),
            ("127.0.0.1:9000", "127.0.0.2:9000", false),
        ] {
            assert_eq!(
                forwards_to_itself(at(listen), at(to)),
                loops,
                "{listen} -> {to}"
            );
        }
    }

    /// A consumer told to stop still forwards what its queue holds, so the baseline's
    /// counters add up at the end of a run.
    #[test]
    fn a_stopped_consumer_forwards_what_its_queue_holds() {
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sink.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let fwd = Forwarder::bind(
            "127.0.0.1:0".parse().unwrap(),
            sink.local_addr().unwrap(),
            8,
        )
        .unwrap();
        let queue = Queue::new(50);
        let packets: Vec<[u8; 4]> = (0u32..5).map(u32::to_be_bytes).collect();
        queue.push_all(packets.iter().map(|p| &p[..]));
        let (stop, sent) = (AtomicBool::new(true), Consumed::default());
        consume(
            &queue,
            &fwd.sender().unwrap(),
            &PacketWork::new(0),
            &stop,
            &sent,
        );
        assert_eq!(sent.sent.load(Ordering::Relaxed), 5);
        assert_eq!(sent.refused.load(Ordering::Relaxed), 0);
        assert_eq!(queue.len(), 0);
        let mut buf = [0u8; 16];
        for want in packets {
            let n = sink.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &want);
        }
    }
}
