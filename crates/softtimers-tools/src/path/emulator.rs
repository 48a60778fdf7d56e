//! The emulator itself: two TUN devices, one in each namespace, whose other ends this
//! process reads; a [`Link`] per direction; a soft event on the `softtimer-rt` loop writes
//! each packet into the other namespace when its link says.

use std::os::fd::OwnedFd;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use softtimer::{EventId, Fired, Instant, Span};
use softtimer_net::departure::DepartureQueue;
use softtimer_net::path::{Link, Offer};
use softtimer_rt::{
    EventLoop, Interest, IoBackend, LoopConfig, LoopTurn, RingRecv, SendOptions, SpinWindow,
    StopHandle,
};

use super::measure::Direction;
use super::{ADDR_A, ADDR_B, PathReport, PathSpec, Side};
use crate::netns::{Namespaces, command_in, run};

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
    /// How the emulator reads and writes the devices: `epoll` (a `read` and a `write` per
    /// packet), or io_uring (multishot reads into provided buffers, writes queued in the ring
    /// and submitted with the loop's next entry into it).
    pub io: IoBackend,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            cpu: None,
            seed: 0x5eed,
            spin: SpinWindow::Calibrated,
            io: IoBackend::Epoll,
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
        crate::netns::check_available()?;
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
            let (local, peer) = (addr.to_string(), format!("{peer}/32"));
            run(&[
                "ip", "-n", ns, "addr", "add", &local, "peer", &peer, "dev", dev,
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
                    .err()
                    .map_or_else(|| "it ended without an error".into(), |e| format!("{e:#}"));
                bail!("the emulator did not start: {why}");
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

/// Buffers the ring reads each device into (with io_uring).
const RING_BUFFERS: u16 = 256;

/// A packet read from device `from` at `now`: measured, then offered to its direction's link,
/// which queues it for delivery or drops it.
#[allow(clippy::too_many_arguments)]
fn arrive(
    d: &mut Direction,
    queue: &mut DepartureQueue<(usize, Packet, Instant, bool)>,
    spare: &mut Vec<Packet>,
    from: usize,
    buf: Packet,
    now: Instant,
    start: Instant,
    hz: u64,
) {
    let n = buf.len;
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
            d.queue_delay.saturating_record(q.max(1));
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

fn emulate(
    spec: PathSpec,
    options: EmulatorOptions,
    tun_a: OwnedFd,
    tun_b: OwnedFd,
    started: std::sync::mpsc::Sender<StopHandle>,
) -> Result<PathReport> {
    let EmulatorOptions {
        cpu,
        seed,
        spin,
        io,
    } = options;
    // A CPU named and refused (outside a cgroup's `cpuset`) is an error, not a run unpinned.
    let _pinned = match cpu {
        Some(cpu) => Some(
            crate::cpu::try_pin_to(cpu)
                .with_context(|| format!("pinning the emulator to CPU {cpu}"))?,
        ),
        None => None,
    };
    let config = LoopConfig {
        spin_window: spin,
        io_backend: io,
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
    // With io_uring, the devices are attached to the ring instead of watched.
    let ring = if io == IoBackend::Epoll {
        for (i, fd) in tuns.iter().enumerate() {
            ev.cx().register(fd, Interest::READABLE, i as u64)?;
        }
        None
    } else {
        let mut cx = ev.cx();
        let reads = RingRecv::Reads {
            buffers: RING_BUFFERS,
            size: Packet::CAPACITY as u32,
        };
        Some([
            cx.attach(&tuns[0], 0, reads)?,
            cx.attach(&tuns[1], 1, reads)?,
        ])
    };
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
            if let Some(ring) = ring {
                // A packet due for release goes first, as below: what the ring read waits.
                let now = cx.now();
                if queue.next_departure().is_some_and(|t| !t.is_after(now)) {
                    return;
                }
                cx.received(ring[from], READ_BATCH, |m| {
                    let mut buf = spare.pop().unwrap_or_else(Packet::new);
                    let n = m.data.len().min(Packet::CAPACITY);
                    buf.bytes[..n].copy_from_slice(&m.data[..n]);
                    buf.len = n;
                    arrive(&mut dirs[from], queue, spare, from, buf, now, start, hz);
                });
                return;
            }
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
                arrive(&mut dirs[from], queue, spare, from, buf, now, start, hz);
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
                let result = match ring {
                    Some(ring) => cx
                        .send_ring(ring[to], &[buf.as_slice()], &SendOptions::default())
                        .is_ok(),
                    None => cx.write(&tuns[to], buf.as_slice()).is_ok(),
                };
                let d = &mut dirs[from];
                match result {
                    true => {
                        d.report.delivered += 1;
                        d.report.delivered_bytes += buf.len as u64;
                        let late = written.saturating_since(at).as_nanos(hz);
                        d.delay_error.saturating_record(late.max(1));
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
                    false => d.report.write_errors += 1,
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
    if let Some(ring) = ring {
        // The last writes leave before the ring goes; those the device refused move from the
        // delivered to the write errors, packets and bytes (a write into device `to` carried
        // direction `1 - to`), and so do those not confirmed when the wait for them failed or
        // outlasted its limit: the report stands, and says so. Their release times stay in
        // the delay statistics, which time the emulator's releases, and their bytes in the
        // per-interval throughput, which is counted as they are released.
        let mut cx = ev.cx();
        let flushed = cx.flush_ring(Duration::from_secs(1));
        for (to, fd) in ring.into_iter().enumerate() {
            let c = cx.ring_counters(fd).unwrap_or_default();
            dirs[1 - to]
                .report
                .settle_ring_writes(&c, matches!(flushed, Ok(true)));
        }
        match flushed {
            Ok(true) => {}
            Ok(false) => eprintln!(
                "path: the last writes through the ring did not all complete within a second; \
                 counted as write errors"
            ),
            Err(e) => eprintln!(
                "path: the last writes through the ring: {e}; the unconfirmed \
                                 counted as write errors"
            ),
        }
    }
    let duration_s = ev.cx().now().saturating_since(start).as_nanos(hz) as f64 / 1e9;
    let [a, b] = dirs;
    let (a, b) = (a.finish(), b.finish());
    let worst = [&a, &b]
        .iter()
        .filter_map(|d| d.delay_error.p99_us)
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
