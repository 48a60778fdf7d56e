//! `softtimers path`: a path emulator on soft timers between two network namespaces.
//!
//! This kernel has no `netem`, `fq` or `cake`. The emulator makes two network namespaces,
//! `a` and `b`, each with a TUN device whose other end is this process: whatever either
//! namespace sends to the other (any protocol; the kernel's TCP included) is read here,
//! given to a [`Link`] per direction (one-way delay, bottleneck rate, drop-tail queue,
//! random loss), and written into the other namespace at the time the link says, by a soft
//! event on the `softtimer-rt` loop. It measures itself: how late each packet was written
//! against its due time, the spacing of back-to-back packets at the bottleneck against the
//! rate, and the queueing delay each packet got.
//!
//! Addresses: `a` is 10.201.0.1 and `b` is 10.201.0.2, point to point.

use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use serde::Serialize;
use softtimer::{EventId, Fired, Instant, Span};
use softtimer_net::burstiness::{Bottleneck, BurstinessIndex};
use softtimer_net::departure::DepartureQueue;
use softtimer_net::path::{Link, LinkConfig, Offer, QueueLimit};
use softtimer_rt::{EventLoop, Interest, LoopConfig, LoopTurn, SpinWindow, StopHandle};

use crate::netns::{Namespaces, command_in, run};

/// The address of namespace `a`.
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);
/// The address of namespace `b`.
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);

/// Which side of the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Namespace `a` (10.201.0.1).
    A,
    /// Namespace `b` (10.201.0.2).
    B,
}

/// Both directions of a path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathSpec {
    /// Packets from `a` to `b`.
    pub a_to_b: LinkConfig,
    /// Packets from `b` to `a`.
    pub b_to_a: LinkConfig,
}

/// What one direction measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DirectionReport {
    /// Packets read from the sending side.
    pub packets: u64,
    /// Packets written to the receiving side.
    pub delivered: u64,
    /// Bytes written.
    pub delivered_bytes: u64,
    /// Dropped at the tail of a full queue.
    pub queue_drops: u64,
    /// Of `queue_drops`, those from the start of the 50 ms interval in which this
    /// direction's delivered bytes passed half their total (later drops included): a bulk
    /// transfer's drops once its start, and a window's overshoot at the end of slow start,
    /// are behind it. Drops count at their arrival and bytes at their delivery, one delay
    /// later (at most 50 ms on the paths the lab emulates).
    pub queue_drops_second_half: u64,
    /// Lost at random.
    pub random_losses: u64,
    /// Writes that failed.
    pub write_errors: u64,
    /// Packets the kernel dropped on the sending side's device before the emulator read
    /// them (its queue overran); `None` if it could not be read.
    pub device_drops: Option<u64>,
    /// How late packets were released (handed to the receiving side's device) past their
    /// due time, µs.
    pub delay_error_p50_us: Option<f64>,
    /// 99th percentile.
    pub delay_error_p99_us: Option<f64>,
    /// Largest.
    pub delay_error_max_us: Option<f64>,
    /// Back-to-back packets' measured rate against the configured rate, % (positive:
    /// faster); `None` without a bottleneck or without a standing queue.
    pub rate_error_pct: Option<f64>,
    /// Back-to-back pairs measured for `rate_error_pct`.
    pub back_to_back: u64,
    /// Queueing delay at the bottleneck, µs.
    pub queue_delay_p50_us: Option<f64>,
    /// 99th percentile.
    pub queue_delay_p99_us: Option<f64>,
    /// Largest.
    pub queue_delay_max_us: Option<f64>,
    /// Standard deviation of the gaps between packets as they arrived from the sender
    /// (its departure spacing, before the bottleneck), µs; gaps over 10 ms (idle) left out.
    pub sender_gap_stddev_us: Option<f64>,
    /// Standard deviation of the gaps between packets as they were delivered to the
    /// receiver, µs; gaps over 10 ms left out.
    pub interarrival_stddev_us: Option<f64>,
    /// Kobayashi's burstiness index B of the sender's packets (Section V): the mean wait
    /// they would see at a queue served at the bottleneck rate, over the path's RTT, the
    /// first 20 packets left out; `None` without a bottleneck or a delay.
    pub burstiness_index: Option<f64>,
    /// Over time, per 50 ms: (s since start, largest queueing delay in ms, Mbit/s delivered).
    pub timeline: Vec<(f64, f64, f64)>,
}

/// What the emulator measured, both directions.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PathReport {
    /// The worst direction's 99th-percentile delay error, µs (a direction that carried
    /// nothing is left out).
    pub delay_error_p99_us: Option<f64>,
    /// The rate error of the direction with the most back-to-back pairs, %.
    pub rate_error_pct: Option<f64>,
    /// `a` to `b`.
    pub a_to_b: DirectionReport,
    /// `b` to `a`.
    pub b_to_a: DirectionReport,
    /// How long the emulator ran, s.
    pub duration_s: f64,
}

const TIMELINE_BUCKET: Duration = Duration::from_millis(50);

struct Direction {
    link: Link,
    /// Kobayashi's index of the sender's packets against this direction's bottleneck.
    burstiness: Option<BurstinessIndex>,
    report: DirectionReport,
    delay_error: Histogram<u64>,
    queue_delay: Histogram<u64>,
    last_written: Option<Instant>,
    expected_span: u64,
    actual_span: u64,
    timeline: Vec<Bucket>,
    input_gaps: Gaps,
    output_gaps: Gaps,
}

/// One 50 ms stretch of a direction's timeline.
#[derive(Clone, Copy, Default)]
struct Bucket {
    max_queue_delay_ns: u64,
    bytes: u64,
    queue_drops: u64,
}

/// Running mean and variance of gaps (Welford), idle gaps left out.
#[derive(Default)]
struct Gaps {
    last: Option<Instant>,
    n: u64,
    mean: f64,
    m2: f64,
}

impl Gaps {
    const IDLE_NS: u64 = 10_000_000;
    fn add(&mut self, t: Instant, hz: u64) {
        if let Some(prev) = self.last {
            let g = t.saturating_since(prev).as_nanos(hz);
            if g <= Self::IDLE_NS {
                let x = g as f64 / 1000.0;
                self.n += 1;
                let d = x - self.mean;
                self.mean += d / self.n as f64;
                self.m2 += d * (x - self.mean);
            }
        }
        self.last = Some(t);
    }
    fn stddev(&self) -> Option<f64> {
        (self.n >= 2).then(|| (self.m2 / (self.n - 1) as f64).sqrt())
    }
}

impl Direction {
    fn new(config: LinkConfig, rtt: Duration, hz: u64, seed: u64) -> Result<Direction> {
        let burstiness = match (config.rate, rtt.is_zero()) {
            (Some(rate), false) => Some(BurstinessIndex::new(
                Bottleneck::Rate {
                    bits_per_sec: rate.bits_per_sec(),
                    rtt_ns: rtt.as_nanos() as u64,
                },
                20,
            )),
            _ => None,
        };
        Ok(Direction {
            burstiness,
            link: Link::new(config, hz, seed)?,
            report: DirectionReport::default(),
            delay_error: Histogram::new_with_bounds(1, 60_000_000_000, 3)?,
            queue_delay: Histogram::new_with_bounds(1, 60_000_000_000, 3)?,
            last_written: None,
            expected_span: 0,
            actual_span: 0,
            timeline: Vec::new(),
            input_gaps: Gaps::default(),
            output_gaps: Gaps::default(),
        })
    }

    fn bucket(&mut self, at: Instant, start: Instant, hz: u64) -> &mut Bucket {
        let ns = at.saturating_since(start).as_nanos(hz);
        let i = (ns / TIMELINE_BUCKET.as_nanos() as u64) as usize;
        if self.timeline.len() <= i {
            self.timeline.resize(i + 1, Bucket::default());
        }
        &mut self.timeline[i]
    }

    fn finish(mut self) -> DirectionReport {
        let us = |h: &Histogram<u64>, q: f64| {
            (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0)
        };
        let r = &mut self.report;
        r.delay_error_p50_us = us(&self.delay_error, 0.5);
        r.delay_error_p99_us = us(&self.delay_error, 0.99);
        r.delay_error_max_us = us(&self.delay_error, 1.0);
        r.queue_delay_p50_us = us(&self.queue_delay, 0.5);
        r.queue_delay_p99_us = us(&self.queue_delay, 0.99);
        r.queue_delay_max_us = us(&self.queue_delay, 1.0);
        r.sender_gap_stddev_us = self.input_gaps.stddev();
        r.interarrival_stddev_us = self.output_gaps.stddev();
        r.burstiness_index = self.burstiness.as_ref().and_then(BurstinessIndex::index);
        if r.back_to_back >= 10 && self.actual_span > 0 {
            r.rate_error_pct =
                Some((self.expected_span as f64 / self.actual_span as f64 - 1.0) * 100.0);
        }
        r.queue_drops_second_half = drops_in_second_half(&self.timeline);
        let secs = TIMELINE_BUCKET.as_secs_f64();
        r.timeline = self
            .timeline
            .iter()
            .enumerate()
            .map(|(i, b)| {
                (
                    i as f64 * secs,
                    b.max_queue_delay_ns as f64 / 1e6,
                    b.bytes as f64 * 8.0 / secs / 1e6,
                )
            })
            .collect();
        self.report
    }
}

/// Queue drops from the bucket in which the delivered bytes pass half of their total on;
/// none if nothing was delivered. Halving by bytes, not by time, keeps a stray late packet
/// (a probe, a close) from moving the middle.
fn drops_in_second_half(timeline: &[Bucket]) -> u64 {
    let total: u64 = timeline.iter().map(|b| b.bytes).sum();
    if total == 0 {
        return 0;
    }
    let mut delivered = 0;
    let middle = timeline
        .iter()
        .position(|b| {
            delivered += b.bytes;
            delivered * 2 > total
        })
        .unwrap_or(timeline.len());
    timeline[middle..].iter().map(|b| b.queue_drops).sum()
}

/// A TUN device (no packet information header), non-blocking.
#[allow(unsafe_code)]
fn open_tun(name: &str) -> Result<OwnedFd> {
    if name.len() >= libc::IFNAMSIZ {
        bail!(
            "TUN name {name:?} is longer than {} bytes",
            libc::IFNAMSIZ - 1
        );
    }
    if std::path::Path::new("/sys/class/net").join(name).exists() {
        bail!("a network device named {name} exists already");
    }
    let fd = rustix::fs::open(
        "/dev/net/tun",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .context("opening /dev/net/tun (is the tun module there, and are we root?)")?;
    #[repr(C)]
    struct IfReq {
        name: [libc::c_char; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    for (dst, src) in req.name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq` (40 bytes: a 16-byte name and a
    // 24-byte union whose first member is the flags), which `req` is, laid out by repr(C);
    // the descriptor is open and owned here.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &mut req) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error()).context(format!("creating TUN device {name}"));
    }
    Ok(fd)
}

/// The `path` command's spin window: the emulator spins through the last millisecond before
/// a packet is due. At 10 Mbit/s (1.2 ms between 1500-byte packets) it still sleeps between
/// packets; on a virtual machine, whose wake-ups are sometimes hundreds of µs late, 300 µs
/// left the delay error's p99 at 9–26 µs there in hand runs, 1 ms at 6.5–8.3 µs. From about
/// 12 Mbit/s up, packets are due less than 1 ms apart, so the emulator spins the whole time
/// packets are queued: a core while busy, which is the price of its precision.
pub const COMMAND_SPIN: Duration = Duration::from_millis(1);
/// [`COMMAND_SPIN`] as the command line writes it.
pub const COMMAND_SPIN_ARG: &str = "1ms";

/// How the emulator runs (not what it emulates: that is the [`PathSpec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmulatorOptions {
    /// The CPU to pin the emulator's thread to (default: none).
    pub cpu: Option<usize>,
    /// Seeds the random-loss generators: the same seed drops the same packet numbers, so
    /// the arms of one experiment round take the same seed and rounds different ones.
    pub seed: u64,
    /// How long the emulator spins before a packet is due instead of sleeping through
    /// it (default: the event loop's calibrated window, this machine's typical wake-up
    /// lateness). A window of a few hundred µs covers a virtual machine's worst wake-ups
    /// at the cost of up to that much CPU per packet sent; 1 ms or more spins whenever a
    /// packet is due before the next backstop tick (the most precise, a core while busy).
    pub spin: SpinWindow,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            cpu: None,
            seed: 0x5eed,
            spin: SpinWindow::Calibrated,
        }
    }
}

/// A path between two fresh namespaces, emulated on its own thread until [`finish`]ed.
///
/// [`finish`]: RunningPath::finish
pub struct RunningPath {
    namespaces: Namespaces,
    devices: [String; 2],
    stop: StopHandle,
    thread: Option<JoinHandle<Result<PathReport>>>,
}

/// The soft event of the emulator: "a packet is due".
#[derive(Clone, Copy, Debug)]
struct Due;

impl RunningPath {
    /// Makes the namespaces and TUN devices and starts the emulator, pinned to `cpu`.
    pub fn start(tag: &str, spec: PathSpec, cpu: Option<usize>) -> Result<RunningPath> {
        Self::start_with(
            tag,
            spec,
            EmulatorOptions {
                cpu,
                ..EmulatorOptions::default()
            },
        )
    }

    /// [`start`](Self::start) with every option of the emulator.
    pub fn start_with(tag: &str, spec: PathSpec, options: EmulatorOptions) -> Result<RunningPath> {
        Namespaces::check()?;
        // Check the links before making anything.
        Link::new(spec.a_to_b, 1_000_000_000, 0)?;
        Link::new(spec.b_to_a, 1_000_000_000, 0)?;
        let namespaces = Namespaces::create(tag, &["a", "b"])?;
        let pid = std::process::id();
        let names = [format!("st{pid}{tag}a"), format!("st{pid}{tag}b")];
        let mut fds = Vec::new();
        for (i, (ns, (addr, peer))) in namespaces
            .names
            .iter()
            .zip([(ADDR_A, ADDR_B), (ADDR_B, ADDR_A)])
            .enumerate()
        {
            let dev = &names[i];
            fds.push(open_tun(dev)?);
            run(&["ip", "link", "set", dev, "netns", ns])?;
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &addr.to_string(),
                "peer",
                &format!("{peer}/32"),
                "dev",
                dev,
            ])?;
            // A long device queue: the emulator's own queue is the bottleneck, not the
            // kernel's hand-off to it (500 packets by default, which a burst can overrun
            // while the emulator is descheduled).
            run(&[
                "ip",
                "-n",
                ns,
                "link",
                "set",
                dev,
                "up",
                "mtu",
                "1500",
                "txqueuelen",
                "10000",
            ])?;
            run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        let tun_b = fds.pop().expect("two");
        let tun_a = fds.pop().expect("two");
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("path".into())
            .spawn(move || emulate(spec, options, tun_a, tun_b, tx))
            .context("starting the emulator thread")?;
        let stop = match rx.recv() {
            Ok(stop) => stop,
            Err(_) => {
                let why = thread
                    .join()
                    .map_err(|_| anyhow::anyhow!("the emulator panicked"))?
                    .err();
                bail!("the emulator did not start: {why:?}");
            }
        };
        Ok(RunningPath {
            namespaces,
            devices: names,
            stop,
            thread: Some(thread),
        })
    }

    /// The name of a side's namespace.
    pub fn namespace(&self, side: Side) -> &str {
        &self.namespaces.names[match side {
            Side::A => 0,
            Side::B => 1,
        }]
    }

    /// A command that runs `program` in a side's namespace.
    pub fn command(&self, side: Side, program: impl AsRef<std::ffi::OsStr>) -> Command {
        command_in(self.namespace(side), program)
    }

    /// Waits until `child`, started with [`command`](Self::command) on `side`, has a socket
    /// bound to `port`; `Ok(false)` if it exited first.
    pub fn wait_until_bound(
        &self,
        side: Side,
        child: &mut std::process::Child,
        port: u16,
        timeout: Duration,
    ) -> Result<bool> {
        crate::netns::wait_until_bound(self.namespace(side), child, port, timeout)
    }

    /// Stops the emulator and returns what it measured; the namespaces and devices go when
    /// this is dropped (the devices with the emulator's descriptors).
    pub fn finish(mut self) -> Result<PathReport> {
        // Read the devices' drop counters while the emulator still holds them open.
        let device_drops = [Side::A, Side::B].map(|side| self.device_drops(side));
        self.stop.stop();
        let thread = self.thread.take().expect("running");
        let mut report = thread
            .join()
            .map_err(|_| anyhow::anyhow!("the emulator panicked"))??;
        report.a_to_b.device_drops = device_drops[0];
        report.b_to_a.device_drops = device_drops[1];
        Ok(report)
    }

    /// Packets the kernel dropped on a side's device before the emulator read them (its
    /// transmit drops); `None` if `ip` could not tell.
    fn device_drops(&self, side: Side) -> Option<u64> {
        let ns = self.namespace(side);
        let dev = &self.devices[match side {
            Side::A => 0,
            Side::B => 1,
        }];
        let out = Command::new("ip")
            .args(["-n", ns, "-j", "-s", "link", "show", "dev", dev])
            .output()
            .ok()?;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        json.get(0)?
            .get("stats64")?
            .get("tx")?
            .get("dropped")?
            .as_u64()
    }
}

impl Drop for RunningPath {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.stop();
            let _ = thread.join();
        }
    }
}

/// A packet buffer, reused: allocated and zeroed once (zeroing a buffer per packet is what
/// an unoptimised build cannot afford), holding `len` bytes.
struct Packet {
    bytes: Box<[u8]>,
    len: usize,
}

impl Packet {
    /// Larger than any packet the devices hand over: they have no offloads and an MTU of
    /// 1500, which `start_with` sets.
    const CAPACITY: usize = 2048;

    fn new() -> Packet {
        Packet {
            bytes: vec![0; Self::CAPACITY].into_boxed_slice(),
            len: 0,
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The most packets read from a device per readiness event before the loop turns.
const READ_BATCH: usize = 64;

fn emulate(
    spec: PathSpec,
    options: EmulatorOptions,
    tun_a: OwnedFd,
    tun_b: OwnedFd,
    started: std::sync::mpsc::Sender<StopHandle>,
) -> Result<PathReport> {
    let EmulatorOptions { cpu, seed, spin } = options;
    let _pinned = cpu.map(crate::harness::pin_to);
    let config = LoopConfig {
        spin_window: spin,
        ..LoopConfig::default()
    };
    let mut ev: EventLoop<Due> = EventLoop::new(config, |_, _: Fired<Due>| {})?;
    let hz = softtimer::Clock::resolution_hz(ev.clock());
    let start = ev.cx().now();
    let rtt = spec.a_to_b.delay + spec.b_to_a.delay;
    let mut dirs = [
        Direction::new(spec.a_to_b, rtt, hz, seed.wrapping_mul(2))?,
        Direction::new(spec.b_to_a, rtt, hz, seed.wrapping_mul(2) | 1)?,
    ];
    let tuns = [tun_a, tun_b];
    for (i, fd) in tuns.iter().enumerate() {
        ev.cx().register(fd, Interest::READABLE, i as u64)?;
    }
    // Packets due for delivery: (direction, bytes, due time, queueing delay, back to back).
    let slot = Span::from_duration(Duration::from_micros(10), hz);
    let mut queue: DepartureQueue<(usize, Packet, Instant, bool)> =
        DepartureQueue::new(start, slot, 1 << 16)?;
    let mut spare: Vec<Packet> = Vec::new();
    let mut wake: Option<(EventId, Instant)> = None;
    let mut due = Vec::new();
    let _ = started.send(ev.stop_handle());
    let dirs_cell = std::cell::RefCell::new((&mut dirs, &mut queue, &mut spare));
    ev.run_with(
        |cx, ready| {
            let from = ready.token as usize;
            let mut guard = dirs_cell.borrow_mut();
            let (dirs, queue, spare) = &mut *guard;
            for _ in 0..READ_BATCH {
                // A packet due for release goes first: the rest of the backlog is read on
                // the next pass, after the release (at 1 Gbit/s a packet is due every 12 µs,
                // and a batch of reads takes longer than that).
                if queue
                    .next_departure()
                    .is_some_and(|t| !t.is_after(cx.now()))
                {
                    break;
                }
                let mut buf = spare.pop().unwrap_or_else(Packet::new);
                let n = match cx.read(&tuns[from], &mut buf.bytes[..]) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(_) => {
                        spare.push(buf);
                        break;
                    }
                };
                buf.len = n;
                let now = cx.now();
                let d = &mut dirs[from];
                d.report.packets += 1;
                d.input_gaps.add(now, hz);
                if let Some(b) = &mut d.burstiness {
                    b.push(now.saturating_since(start).as_nanos(hz), n as u64);
                }
                match d.link.offer(now, n as u64) {
                    Offer::Deliver {
                        at,
                        queued,
                        back_to_back,
                    } => {
                        let q = queued.as_nanos(hz);
                        let _ = d.queue_delay.record(q.max(1));
                        let b = d.bucket(now, start, hz);
                        b.max_queue_delay_ns = b.max_queue_delay_ns.max(q);
                        queue.push(at, (from, buf, at, back_to_back));
                    }
                    Offer::QueueFull => {
                        d.report.queue_drops += 1;
                        d.bucket(now, start, hz).queue_drops += 1;
                        spare.push(buf);
                    }
                    Offer::Lost => {
                        d.report.random_losses += 1;
                        spare.push(buf);
                    }
                }
            }
        },
        |cx, turn| {
            if matches!(turn, LoopTurn::BeforeBlock) {
                return false;
            }
            let mut guard = dirs_cell.borrow_mut();
            let (dirs, queue, spare) = &mut *guard;
            let now = cx.now();
            due.clear();
            queue.drain_due(now, usize::MAX, &mut due);
            let wrote = !due.is_empty();
            for (from, buf, at, back_to_back) in due.drain(..) {
                let to = 1 - from;
                // Released now: the write hands the packet to the receiving side, whose
                // stack then runs in this call (a cost any emulator's delivery pays).
                let written = cx.now();
                let result = cx.write(&tuns[to], buf.as_slice());
                let d = &mut dirs[from];
                match result {
                    Ok(_) => {
                        d.report.delivered += 1;
                        d.report.delivered_bytes += buf.len as u64;
                        let late = written.saturating_since(at).as_nanos(hz);
                        let _ = d.delay_error.record(late.max(1));
                        if back_to_back
                            && let (Some(prev), Some(rate)) = (d.last_written, d.link.config().rate)
                        {
                            d.report.back_to_back += 1;
                            d.expected_span += rate.span_for_bytes(buf.len as u64, hz).as_nanos(hz);
                            d.actual_span += written.saturating_since(prev).as_nanos(hz);
                        }
                        d.last_written = Some(written);
                        d.output_gaps.add(written, hz);
                        let b = d.bucket(at, start, hz);
                        b.bytes += buf.len as u64;
                    }
                    Err(_) => d.report.write_errors += 1,
                }
                spare.push(buf);
            }
            let next = queue.next_departure();
            if next != wake.map(|w| w.1) {
                if let Some((id, _)) = wake.take() {
                    cx.cancel(id);
                }
                if let Some(t) = next
                    && let Ok(id) = cx.schedule_at(t, Due)
                {
                    wake = Some((id, t));
                }
            }
            wrote
        },
    )?;
    let _ = dirs_cell.into_inner();
    let duration_s = ev.cx().now().saturating_since(start).as_nanos(hz) as f64 / 1e9;
    let [a, b] = dirs;
    let (a, b) = (a.finish(), b.finish());
    let worst = [&a, &b]
        .iter()
        .filter_map(|d| d.delay_error_p99_us)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let rate = if a.back_to_back >= b.back_to_back {
        a.rate_error_pct
    } else {
        b.rate_error_pct
    };
    Ok(PathReport {
        delay_error_p99_us: worst,
        rate_error_pct: rate,
        a_to_b: a,
        b_to_a: b,
        duration_s,
    })
}

/// Parses a queue limit: bytes (`64kb`, `100000`) or packets (`100p`, `100pkts`).
pub fn parse_queue(text: &str) -> Result<QueueLimit, String> {
    let t = text.trim();
    if let Some(n) = t.strip_suffix("pkts").or_else(|| t.strip_suffix('p')) {
        let n: u64 = n
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a packet count (write 100p)"))?;
        return Ok(QueueLimit::Packets(n));
    }
    Ok(QueueLimit::Bytes(crate::quic::parse_bytes(t)?))
}

/// Parses a loss probability: `0.01` or `1%`.
pub fn parse_loss(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (n, scale) = match t.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (t, 1.0),
    };
    let p: f64 = n
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a probability (write 0.01 or 1%)"))?;
    let p = p * scale;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!(
            "{text:?}: a loss probability must be between 0 and 1"
        ));
    }
    Ok(p)
}

/// Runs `argv` with a path set up (namespaces named in `SOFTTIMERS_PATH_A` and `_B`,
/// addresses in `SOFTTIMERS_PATH_ADDR_A` and `_B`), then removes everything and returns
/// the command's exit code with what the emulator measured.
pub fn run_command(
    spec: PathSpec,
    options: EmulatorOptions,
    argv: &[String],
) -> Result<(i32, PathReport)> {
    let Some((program, args)) = argv.split_first() else {
        bail!("no command given: write `softtimers path [OPTIONS] -- CMD ARGS...`");
    };
    let path = RunningPath::start_with("cmd", spec, options)?;
    let status = Command::new(program)
        .args(args)
        .env("SOFTTIMERS_PATH_A", path.namespace(Side::A))
        .env("SOFTTIMERS_PATH_B", path.namespace(Side::B))
        .env("SOFTTIMERS_PATH_ADDR_A", ADDR_A.to_string())
        .env("SOFTTIMERS_PATH_ADDR_B", ADDR_B.to_string())
        .status();
    let report = path.finish()?;
    let status = status.with_context(|| format!("cannot run {program}"))?;
    Ok((status.code().unwrap_or(128), report))
}

/// A short text summary of a report.
pub fn summary(report: &PathReport) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let mut out = String::new();
    for (name, d) in [("a→b", &report.a_to_b), ("b→a", &report.b_to_a)] {
        out += &format!(
            "{name}: {} packets, {} delivered, {} queue drops ({} in the second half), {} lost, {} device drops; delay error p50 {} µs, p99 {} µs, max {} µs; queueing p99 {} µs; rate error {} %\n",
            d.packets,
            d.delivered,
            d.queue_drops,
            d.queue_drops_second_half,
            d.random_losses,
            d.device_drops.map_or("-".to_string(), |n| n.to_string()),
            f(d.delay_error_p50_us),
            f(d.delay_error_p99_us),
            f(d.delay_error_max_us),
            f(d.queue_delay_p99_us),
            f(d.rate_error_pct),
        );
    }
    out
}

/// The fd of a TUN device is what keeps it: a check for tests that devices are gone.
pub fn device_exists(name: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(name).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_spin_argument_is_the_command_spin() {
        assert_eq!(
            crate::pace::parse_spin_window(COMMAND_SPIN_ARG),
            Ok(SpinWindow::Fixed(COMMAND_SPIN))
        );
    }

    fn bucket(bytes: u64, queue_drops: u64) -> Bucket {
        Bucket {
            max_queue_delay_ns: 0,
            bytes,
            queue_drops,
        }
    }

    #[test]
    fn second_half_drops_count_from_where_half_the_bytes_were_delivered() {
        // 60 bytes delivered in buckets 2..=7; the 31st byte comes in bucket 5, so the
        // second half is 5..=7 and the idle tail after it.
        let timeline = [
            bucket(0, 0),
            bucket(0, 0),
            bucket(10, 40),
            bucket(10, 0),
            bucket(10, 2),
            bucket(10, 3),
            bucket(10, 0),
            bucket(10, 4),
            bucket(0, 1),
        ];
        assert_eq!(drops_in_second_half(&timeline), 3 + 4 + 1);
        // Exactly half by the end of bucket 1: the second half starts after it.
        let even = [bucket(1, 5), bucket(1, 6), bucket(2, 7)];
        assert_eq!(drops_in_second_half(&even), 7);
        // A stray packet long after the transfer does not move the middle.
        let mut strayed = timeline.to_vec();
        strayed.extend([bucket(0, 0); 20]);
        strayed.push(bucket(1, 0));
        assert_eq!(drops_in_second_half(&strayed), 3 + 4 + 1);
        // Nothing delivered: no second half.
        assert_eq!(drops_in_second_half(&[bucket(0, 9)]), 0);
        assert_eq!(drops_in_second_half(&[]), 0);
    }
}
