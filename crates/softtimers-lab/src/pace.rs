//! `softtimers pace` and `softtimers sink`: a paced UDP sender and a measuring receiver.
//!
//! `pace` sends UDP datagrams at a rate, paced by the timer chosen: soft timers on the event
//! loop (the paper's adaptive pacer, one event per flow), a periodic `timerfd` or a timer
//! signal at the packet interval (sending every packet due at each expiry), a spinning loop,
//! or no pacing at all. It reports the achieved rate, the process's CPU time per packet
//! (`getrusage`, idle spinning included) and the send-interval statistics.
//!
//! `sink` receives on a port, takes the kernel's receive timestamp of every datagram, and
//! reports the rate, the inter-arrival statistics, the longest back-to-back burst and the
//! burstiness index of Kobayashi's Section V. It measures any sender's traffic (datagrams
//! without the `pace` header are counted as foreign and measured all the same), and it can
//! observe a port another program owns (`--observe PORT`: a capture on the interface, with
//! the same kernel timestamps), so that `iperf3 -u` and `pace` are measured alike.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, Fired, Instant, SoftTimers, Span, SystemClock};
use softtimer_net::Rate;
use softtimer_net::burstiness::{ArrivalStats, Bottleneck, BurstinessIndex};
use softtimer_net::capture::PortObserver;
use softtimer_net::pacer::{FlowPacer, PacerConfig};
use softtimer_net::udp::{MAX_DATAGRAM, PacketHeader, TimestampedReceiver, realtime_ns};
use softtimer_rt::{EventLoop, LoopConfig, SpinWindow, TimerMode};

/// What paces the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PaceTimer {
    /// Soft timers on the event loop: the adaptive pacer, one event outstanding per flow,
    /// fired at trigger states; the loop blocks with a precise timeout and spins only for
    /// the last stretch before a send.
    Soft,
    /// A periodic `timerfd` at the packet interval, in the loop's epoll set; each expiry
    /// sends every packet that is due.
    Timerfd,
    /// A POSIX timer signal at the packet interval; each signal sends every packet due.
    Signal,
    /// A loop that spins on the clock and sends each packet when due (a whole core).
    Spin,
    /// No pacing: the datagrams of the whole run back to back, as fast as the socket
    /// takes them.
    None,
}

/// How the soft pacer schedules many flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// The soft-timers paper's pacer: one soft-timer event per flow, a target and a burst
    /// rate each.
    PerFlow,
    /// Departure-time scheduling (Kobayashi, Carousel): each flow's next datagram is stamped
    /// with its departure time into one two-level queue, and one soft-timer event at the
    /// queue's next departure sends everything due, in one `sendmmsg`.
    Departure,
}

/// How `pace` runs.
#[derive(Clone, Debug)]
pub struct PaceOptions {
    /// Where to send.
    pub to: SocketAddr,
    /// The total target rate (split evenly over the flows).
    pub rate: Rate,
    /// The burst rate of the soft pacer (default: twice the rate).
    pub burst: Option<Rate>,
    /// UDP payload bytes per datagram.
    pub size: usize,
    /// Flows, each paced on its own at `rate / flows`.
    pub flows: u32,
    /// How long to send.
    pub duration: Duration,
    /// What paces.
    pub timer: PaceTimer,
    /// The soft loop's spin window (how long before a send it stops blocking and spins).
    pub spin_window: SpinWindow,
    /// With soft timers: datagrams of several flows due at one trigger state leave in one
    /// `sendmmsg` (off: one `send` each).
    pub batch: bool,
    /// With soft timers: how the flows are scheduled.
    pub scheduler: Scheduler,
}

/// What `pace` measured (`pace --json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PaceReport {
    /// What paced.
    pub timer: PaceTimer,
    /// The target rate, bit/s.
    pub target_bps: u64,
    /// The rate achieved: the bits of every datagram but the last over the time from the
    /// first send to the last.
    pub achieved_bps: f64,
    /// |achieved − target| / target, %.
    pub conformance_pct: f64,
    /// Datagrams sent.
    pub packets: u64,
    /// Sends the kernel refused (buffer full, unreachable port): not counted as sent.
    pub send_errors: u64,
    /// The process's CPU time (user + system, every thread) per datagram sent, ns.
    pub cpu_ns_per_packet: f64,
    /// The process's CPU time over the run, % of one core.
    pub cpu_pct: f64,
    /// Datagram payload bytes.
    pub size: usize,
    /// Flows.
    pub flows: u32,
    /// The run's length, s.
    pub duration_s: f64,
    /// Mean interval between a flow's consecutive sends, µs.
    pub send_interval_mean_us: f64,
    /// Their standard deviation, µs.
    pub send_interval_stddev_us: f64,
    /// The longest, µs.
    pub send_interval_max_us: f64,
    /// The soft loop's spin window, µs (`null` for the other timers).
    pub spin_window_us: Option<f64>,
    /// Send system calls made (`sendmmsg` counts once however many datagrams it carried).
    pub send_calls: u64,
}

/// Checks `pace`'s options: sizes, the flow count, the duration, and a packet interval the
/// timers can keep (at least 1 µs per flow for the hardware timers).
pub fn check_pace(options: &PaceOptions) -> Result<()> {
    ensure!(
        (PacketHeader::LEN..=MAX_DATAGRAM).contains(&options.size),
        "--size {}: a datagram carries {}..={} bytes (the header is {} bytes)",
        options.size,
        PacketHeader::LEN,
        MAX_DATAGRAM,
        PacketHeader::LEN
    );
    ensure!(
        (1..=100_000).contains(&options.flows),
        "--flows {}: want 1..=100000",
        options.flows
    );
    ensure!(
        options.rate.bits_per_sec() >= u64::from(options.flows),
        "--rate {} over {} flows is under 1 bit/s per flow",
        options.rate,
        options.flows
    );
    ensure!(
        options.duration >= Duration::from_millis(10)
            && options.duration <= Duration::from_secs(3600),
        "--duration {:?}: want 10 ms ..= 1 hour",
        options.duration
    );
    if let Some(burst) = options.burst {
        ensure!(
            burst >= options.rate,
            "--burst {burst} is below --rate {}",
            options.rate
        );
    }
    if matches!(options.timer, PaceTimer::Timerfd | PaceTimer::Signal) {
        let interval = packet_interval(options.rate, options.size);
        ensure!(
            interval >= Duration::from_micros(1),
            "{} datagrams of {} bytes are {:?} apart: the {} timer cannot fire more often than \
             every 1 µs",
            options.rate,
            options.size,
            interval,
            options.timer.name()
        );
    }
    Ok(())
}

impl PaceTimer {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            PaceTimer::Soft => "soft",
            PaceTimer::Timerfd => "timerfd",
            PaceTimer::Signal => "signal",
            PaceTimer::Spin => "spin",
            PaceTimer::None => "none",
        }
    }
}

/// The interval between datagrams of `size` bytes at `rate` (all flows together).
fn packet_interval(rate: Rate, size: usize) -> Duration {
    Duration::from_nanos(rate.ticks_for_bytes(size as u64, 1_000_000_000))
}

/// One flow's state, carried as the payload of its one pending event: no state is shared
/// between the loop and a signal handler but the counters.
#[derive(Clone, Debug)]
struct Flow {
    id: u32,
    seq: u64,
    pacer: FlowPacer,
    last_sent: Option<Instant>,
}

/// What every sender updates (atomics: the timer-signal handler may not lock).
#[derive(Default)]
struct SendCounters {
    calls: AtomicU64,
    packets: AtomicU64,
    errors: AtomicU64,
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    gaps: AtomicU64,
    gap_sum_ns: AtomicU64,
    /// Sum of squared gaps, µs², as `f64` bits (one sender at a time writes).
    gap_sum_sq_us2_bits: AtomicU64,
    gap_max_ns: AtomicU64,
}

/// The sending side: a connected socket, a zero payload, and the counters.
struct Sender {
    socket: OwnedFd,
    payload: Box<[u8]>,
    counters: SendCounters,
    hz: u64,
}

impl Sender {
    /// The header of flow `flow`'s next datagram, sent at `sent_ns`.
    fn header(flow: &Flow, sent_ns: u64) -> [u8; PacketHeader::LEN] {
        let mut header = [0u8; PacketHeader::LEN];
        PacketHeader {
            flow: flow.id,
            seq: flow.seq,
            sent_ns,
        }
        .write(&mut header);
        header
    }

    /// Sends flow `flow`'s next datagram at `now` (async-signal-safe: two system calls, no
    /// allocation, no lock).
    fn send(&self, flow: &mut Flow, now: Instant) -> bool {
        let sent_ns = realtime_ns();
        let header = Self::header(flow, sent_ns);
        let iov = [
            std::io::IoSlice::new(&header),
            std::io::IoSlice::new(&self.payload),
        ];
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let ok = rustix::net::sendmsg(
            &self.socket,
            &iov,
            &mut rustix::net::SendAncillaryBuffer::default(),
            rustix::net::SendFlags::empty(),
        )
        .is_ok();
        if !ok {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.account(flow, now, sent_ns);
        true
    }

    /// Counts flow `flow`'s datagram as sent at `now` (`sent_ns` on the realtime clock).
    fn account(&self, flow: &mut Flow, now: Instant, sent_ns: u64) {
        flow.seq += 1;
        let c = &self.counters;
        if c.packets.fetch_add(1, Ordering::Relaxed) == 0 {
            c.first_ns.store(sent_ns, Ordering::Relaxed);
        }
        c.last_ns.store(sent_ns, Ordering::Relaxed);
        if let Some(last) = flow.last_sent {
            let gap_ns = now.saturating_since(last).as_nanos(self.hz);
            c.gaps.fetch_add(1, Ordering::Relaxed);
            c.gap_sum_ns.fetch_add(gap_ns, Ordering::Relaxed);
            let gap_us = gap_ns as f64 / 1000.0;
            let sum = f64::from_bits(c.gap_sum_sq_us2_bits.load(Ordering::Relaxed));
            c.gap_sum_sq_us2_bits
                .store((sum + gap_us * gap_us).to_bits(), Ordering::Relaxed);
            c.gap_max_ns.fetch_max(gap_ns, Ordering::Relaxed);
        }
        flow.last_sent = Some(now);
    }

    /// Sends the datagrams whose headers are queued in `batch` (one `send` for one, one
    /// `sendmmsg` per up to [`BATCH`] otherwise) and empties it. Datagrams the kernel refused
    /// were counted as sent when queued: they move to the errors.
    fn flush(&self, batch: &mut Vec<[u8; PacketHeader::LEN]>) {
        let c = &self.counters;
        let mut refused = 0u64;
        if let [header] = batch.as_slice() {
            let iov = [
                std::io::IoSlice::new(header),
                std::io::IoSlice::new(&self.payload),
            ];
            c.calls.fetch_add(1, Ordering::Relaxed);
            refused = u64::from(
                rustix::net::sendmsg(
                    &self.socket,
                    &iov,
                    &mut rustix::net::SendAncillaryBuffer::default(),
                    rustix::net::SendFlags::empty(),
                )
                .is_err(),
            );
        } else if !batch.is_empty() {
            let iovs: Vec<[std::io::IoSlice<'_>; 2]> = batch
                .iter()
                .map(|h| {
                    [
                        std::io::IoSlice::new(h),
                        std::io::IoSlice::new(&self.payload),
                    ]
                })
                .collect();
            let mut controls: Vec<rustix::net::SendAncillaryBuffer<'_, '_, '_>> =
                iovs.iter().map(|_| Default::default()).collect();
            let mut messages: Vec<rustix::net::MMsgHdr<'_>> = iovs
                .iter()
                .zip(controls.iter_mut())
                .map(|(iov, control)| rustix::net::MMsgHdr::new(iov, control))
                .collect();
            let mut done = 0;
            while done < messages.len() {
                c.calls.fetch_add(1, Ordering::Relaxed);
                match rustix::net::sendmmsg(
                    &self.socket,
                    &mut messages[done..],
                    rustix::net::SendFlags::empty(),
                ) {
                    Ok(n) if n > 0 => done += n,
                    // The first datagram left was refused: skip it and go on.
                    _ => {
                        refused += 1;
                        done += 1;
                    }
                }
            }
        }
        if refused > 0 {
            c.errors.fetch_add(refused, Ordering::Relaxed);
            c.packets.fetch_sub(refused, Ordering::Relaxed);
        }
        batch.clear();
    }
}

/// The most datagrams one `sendmmsg` of `pace` carries.
const BATCH: usize = 64;

fn connect(to: SocketAddr) -> Result<OwnedFd> {
    let any: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let socket = UdpSocket::bind(any).context("binding the sending socket")?;
    socket
        .connect(to)
        .with_context(|| format!("connecting to {to}"))?;
    Ok(OwnedFd::from(socket))
}

/// Process CPU time (user + system, all threads), ns: the account `getrusage` reports,
/// read at nanosecond resolution.
use crate::harness::process_cpu_ns;

/// Runs `pace` and returns what it measured.
pub fn pace(options: &PaceOptions) -> Result<PaceReport> {
    check_pace(options)?;
    let clock = SystemClock::new();
    let hz = clock.resolution_hz();
    let sender = Arc::new(Sender {
        socket: connect(options.to)?,
        payload: vec![0u8; options.size - PacketHeader::LEN].into_boxed_slice(),
        counters: SendCounters::default(),
        hz,
    });
    let per_flow =
        Rate::from_bits_per_sec((options.rate.bits_per_sec() / u64::from(options.flows)).max(1))?;
    let burst = options.burst.map_or_else(
        || {
            Rate::from_bits_per_sec(
                per_flow
                    .bits_per_sec()
                    .saturating_mul(2)
                    .min(softtimer_net::MAX_RATE_BPS),
            )
        },
        |b| Rate::from_bits_per_sec((b.bits_per_sec() / u64::from(options.flows)).max(1)),
    )?;
    let config = match options.timer {
        // Timer-driven pacing sends, at each expiry, every datagram the target rate has made
        // due since the train started: a late expiry is made up at once, not lost.
        PaceTimer::Timerfd | PaceTimer::Signal => PacerConfig::new(per_flow, unlimited_burst())?,
        _ => PacerConfig::new(per_flow, burst)?,
    };
    let flows: Vec<Flow> = (0..options.flows)
        .map(|id| Flow {
            id,
            seq: 0,
            pacer: FlowPacer::new(config, hz),
            last_sent: None,
        })
        .collect();
    let cpu_before = process_cpu_ns();
    let started = StdInstant::now();
    let spin_window_us = match options.timer {
        PaceTimer::Soft if options.scheduler == Scheduler::Departure => {
            run_departure(options, &sender, flows)?
        }
        PaceTimer::Soft | PaceTimer::Timerfd | PaceTimer::Signal => {
            run_loop(options, &sender, flows)?
        }
        PaceTimer::Spin => {
            run_spin(options, &sender, flows, &clock);
            None
        }
        PaceTimer::None => {
            run_unpaced(options, &sender);
            None
        }
    };
    let elapsed = started.elapsed();
    let cpu_ns = process_cpu_ns().saturating_sub(cpu_before);
    let c = &sender.counters;
    let packets = c.packets.load(Ordering::Relaxed);
    let refused = c.errors.load(Ordering::Relaxed);
    if packets == 0 && refused > 0 {
        bail!(
            "every send to {} was refused ({refused} tries): is anything listening there?",
            options.to
        );
    }
    let span_ns = c
        .last_ns
        .load(Ordering::Relaxed)
        .saturating_sub(c.first_ns.load(Ordering::Relaxed));
    let achieved_bps = if packets > 1 && span_ns > 0 {
        (packets - 1) as f64 * options.size as f64 * 8.0 / (span_ns as f64 / 1e9)
    } else {
        f64::NAN
    };
    let target = options.rate.bits_per_sec() as f64;
    let gaps = c.gaps.load(Ordering::Relaxed).max(1) as f64;
    let mean_us = c.gap_sum_ns.load(Ordering::Relaxed) as f64 / gaps / 1000.0;
    let var =
        f64::from_bits(c.gap_sum_sq_us2_bits.load(Ordering::Relaxed)) / gaps - mean_us * mean_us;
    Ok(PaceReport {
        timer: options.timer,
        target_bps: options.rate.bits_per_sec(),
        achieved_bps,
        conformance_pct: (achieved_bps - target).abs() / target * 100.0,
        packets,
        send_errors: c.errors.load(Ordering::Relaxed),
        cpu_ns_per_packet: cpu_ns as f64 / packets.max(1) as f64,
        cpu_pct: cpu_ns as f64 / elapsed.as_nanos().max(1) as f64 * 100.0,
        size: options.size,
        flows: options.flows,
        duration_s: elapsed.as_secs_f64(),
        send_interval_mean_us: mean_us,
        send_interval_stddev_us: var.max(0.0).sqrt(),
        send_interval_max_us: c.gap_max_ns.load(Ordering::Relaxed) as f64 / 1000.0,
        spin_window_us,
        send_calls: c.calls.load(Ordering::Relaxed),
    })
}

/// The fastest burst rate: catch up at once.
fn unlimited_burst() -> Rate {
    Rate::from_bits_per_sec(softtimer_net::MAX_RATE_BPS).expect("the maximum rate is a rate")
}

/// Soft timers, timerfd or signal: the event loop fires each flow's event; the handler sends.
/// Returns the soft loop's spin window in µs.
fn run_loop(options: &PaceOptions, sender: &Arc<Sender>, flows: Vec<Flow>) -> Result<Option<f64>> {
    let hardware = options.timer != PaceTimer::Soft;
    let batching = options.batch && !hardware;
    let s = Arc::clone(sender);
    // The handler is shared with the loop's helper threads (`Fn`): the batch sits behind a
    // lock that only the thread holding the facility ever takes, so it is never contended.
    let batch: std::sync::Mutex<Vec<[u8; PacketHeader::LEN]>> =
        std::sync::Mutex::new(Vec::with_capacity(BATCH));
    let handler = move |timers: &mut SoftTimers<Flow>, fired: Fired<Flow>| {
        let mut flow = fired.event;
        let mut now = fired.now;
        let bytes = s.payload.len() as u64 + PacketHeader::LEN as u64;
        if batching {
            // Queue this flow's datagram; send the batch once no other flow is due at this
            // trigger state (the facility fires every due event in one check).
            let mut batch = batch.lock().unwrap_or_else(|e| e.into_inner());
            let sent_ns = realtime_ns();
            batch.push(Sender::header(&flow, sent_ns));
            s.account(&mut flow, now, sent_ns);
            let next = flow.pacer.on_sent(now, bytes);
            let _ = timers.schedule_at(next, flow);
            if batch.len() >= BATCH || timers.next_expiry().is_none_or(|t| t.is_after(now)) {
                s.flush(&mut batch);
            }
            return;
        }
        // Soft: one datagram per event (the burst rate paces any catching up). Hardware
        // timers: every datagram due at this expiry, up to a bound.
        for _ in 0..if hardware { 64 } else { 1 } {
            let next = if s.send(&mut flow, now) {
                flow.pacer.on_sent(now, bytes)
            } else {
                // Refused (buffer full): try again one interval later.
                now + flow
                    .pacer
                    .config()
                    .target()
                    .span_for_bytes(s.payload.len() as u64, s.hz)
            };
            now = timers.measure_time();
            if next.is_after(now) || !hardware {
                let _ = timers.schedule_at(next, flow);
                return;
            }
        }
        let _ = timers.schedule_at(now, flow);
    };
    let config = LoopConfig {
        capacity: options.flows as usize + 1,
        spin_window: options.spin_window,
        ..LoopConfig::default()
    };
    let period = packet_interval(options.rate, options.size).max(Duration::from_micros(1));
    let per_flow_interval = Span::from_duration(period * options.flows, sender.hz);
    let mut ev: EventLoop<Flow> = match options.timer {
        PaceTimer::Soft => EventLoop::new(config, handler)?,
        PaceTimer::Timerfd => EventLoop::new(
            LoopConfig {
                mode: TimerMode::timerfd(period)?,
                ..config
            },
            handler,
        )?,
        // SAFETY: the handler is async-signal-safe: `Sender::send` makes two system calls
        // (clock_gettime, sendmsg) on memory it owns, and touches atomics; the pacer is
        // integer arithmetic; `schedule_at` uses the capacity reserved above for every flow,
        // so it does not allocate; `Flow` has no heap data, so dropping one frees nothing.
        PaceTimer::Signal => {
            #[allow(unsafe_code)]
            unsafe {
                EventLoop::with_timer_signal(config, period, handler)?
            }
        }
        PaceTimer::Spin | PaceTimer::None => bail!("not a loop timer"),
    };
    {
        let mut cx = ev.cx();
        let now = cx.now();
        // The flows start spread over one per-flow interval, not all at once.
        let n = flows.len() as u64;
        let interval = per_flow_interval.ticks();
        for flow in flows {
            let offset = Span::from_ticks(interval * u64::from(flow.id) / n);
            cx.schedule_at(now + offset, flow)?;
        }
    }
    let stop = ev.stop_handle();
    let duration = options.duration;
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(duration);
        stop.stop();
    });
    ev.run(|_, _| {})?;
    let _ = stopper.join();
    let hz = ev.clock().resolution_hz();
    Ok((options.timer == PaceTimer::Soft)
        .then(|| ev.idle_policy().spin_window.as_nanos(hz) as f64 / 1000.0))
}

/// Soft timers over one departure queue: every flow's next datagram is stamped at its rate;
/// one event at the queue's next departure sends all that is due (one `sendmmsg`) and
/// stamps each of those flows' next datagram. Returns the loop's spin window in µs.
fn run_departure(
    options: &PaceOptions,
    sender: &Arc<Sender>,
    flows: Vec<Flow>,
) -> Result<Option<f64>> {
    use softtimer_net::departure::{DepartureQueue, FlowStamper};
    struct Departures {
        queue: DepartureQueue<u32>,
        flows: Vec<(Flow, FlowStamper)>,
        due: Vec<u32>,
        batch: Vec<[u8; PacketHeader::LEN]>,
    }
    let clock = SystemClock::new();
    let hz = clock.resolution_hz();
    let bytes = options.size as u64;
    let per_flow = Rate::from_bits_per_sec(options.rate.bits_per_sec() / u64::from(options.flows))?;
    // Slots of one per-flow packet interval / 64, over a horizon of 4 intervals: a flow's next
    // stamp always falls inside the ring.
    let interval = per_flow.span_for_bytes(bytes, hz);
    let slot = Span::from_ticks((interval.ticks() / 64).max(1));
    let start = clock.now();
    let mut queue = DepartureQueue::new(start, slot, 256)?;
    let mut stamped = Vec::with_capacity(flows.len());
    let n = flows.len() as u64;
    for flow in flows {
        let mut stamper = FlowStamper::new(hz);
        stamper.set_rate(per_flow);
        // The flows start spread over one interval, not all at once.
        let first = start + Span::from_ticks(interval.ticks() * u64::from(flow.id) / n);
        queue.push(stamper.stamp(first, bytes), flow.id);
        stamped.push((flow, stamper));
    }
    let state = std::sync::Mutex::new(Departures {
        queue,
        flows: stamped,
        due: Vec::with_capacity(BATCH),
        batch: Vec::with_capacity(BATCH),
    });
    let s = Arc::clone(sender);
    let handler = move |timers: &mut SoftTimers<()>, fired: Fired<()>| {
        let now = fired.now;
        let mut guard = state.lock().unwrap_or_else(|e| e.into_inner());
        let d = &mut *guard;
        loop {
            d.due.clear();
            d.queue.drain_due(now, BATCH, &mut d.due);
            if d.due.is_empty() {
                break;
            }
            let sent_ns = realtime_ns();
            for &id in &d.due {
                let (flow, stamper) = &mut d.flows[id as usize];
                d.batch.push(Sender::header(flow, sent_ns));
                s.account(flow, now, sent_ns);
                let next = stamper.stamp(now, bytes);
                d.queue.push(next, id);
            }
            s.flush(&mut d.batch);
        }
        if let Some(next) = d.queue.next_departure() {
            let _ = timers.schedule_at(next, ());
        }
    };
    let config = LoopConfig {
        capacity: 2,
        spin_window: options.spin_window,
        ..LoopConfig::default()
    };
    let mut ev: EventLoop<()> = EventLoop::new(config, handler)?;
    {
        let mut cx = ev.cx();
        let now = cx.now();
        cx.schedule_at(now, ())?;
    }
    let stop = ev.stop_handle();
    let duration = options.duration;
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(duration);
        stop.stop();
    });
    ev.run(|_, _| {})?;
    let _ = stopper.join();
    let hz = ev.clock().resolution_hz();
    Ok(Some(
        ev.idle_policy().spin_window.as_nanos(hz) as f64 / 1000.0,
    ))
}

/// Spins on the clock; sends each flow's datagram when due (one per flow per pass).
fn run_spin(options: &PaceOptions, sender: &Sender, mut flows: Vec<Flow>, clock: &SystemClock) {
    let end = StdInstant::now() + options.duration;
    let bytes = options.size as u64;
    let mut next: Vec<Instant> = vec![clock.now(); flows.len()];
    let mut pass = 0u32;
    loop {
        let now = clock.now();
        for (flow, due) in flows.iter_mut().zip(next.iter_mut()) {
            if !due.is_after(now) {
                *due = if sender.send(flow, now) {
                    flow.pacer.on_sent(now, bytes)
                } else {
                    now + flow
                        .pacer
                        .config()
                        .target()
                        .span_for_bytes(bytes, sender.hz)
                };
            }
        }
        pass = pass.wrapping_add(1);
        if pass % 1024 == 0 && StdInstant::now() >= end {
            return;
        }
    }
}

/// No pacing: as many datagrams as the rate would send in the run, back to back.
fn run_unpaced(options: &PaceOptions, sender: &Sender) {
    let total = u128::from(options.rate.bits_per_sec()) * options.duration.as_nanos()
        / (options.size as u128 * 8 * 1_000_000_000);
    let mut flow = Flow {
        id: 0,
        seq: 0,
        pacer: FlowPacer::new(PacerConfig::fixed(options.rate), sender.hz),
        last_sent: None,
    };
    let clock = SystemClock::new();
    let end = StdInstant::now() + options.duration * 4;
    let mut sent = 0u128;
    while sent < total.max(2) {
        if sender.send(&mut flow, clock.now()) {
            sent += 1;
        } else if StdInstant::now() > end {
            return;
        }
    }
}

/// Prints `pace`'s report.
pub fn pace_markdown(r: &PaceReport) -> String {
    format!(
        "timer {}: {} datagrams of {} B in {:.2} s, {} flow(s)\n\
         target {:.3} Mbit/s, achieved {:.3} Mbit/s (off by {:.3} %)\n\
         CPU {:.1} % of a core, {:.0} ns per datagram; {} send calls; send errors {}\n\
         send interval per flow: mean {:.2} µs, stddev {:.2} µs, max {:.1} µs{}\n",
        r.timer.name(),
        r.packets,
        r.size,
        r.duration_s,
        r.flows,
        r.target_bps as f64 / 1e6,
        r.achieved_bps / 1e6,
        r.conformance_pct,
        r.cpu_pct,
        r.cpu_ns_per_packet,
        r.send_calls,
        r.send_errors,
        r.send_interval_mean_us,
        r.send_interval_stddev_us,
        r.send_interval_max_us,
        r.spin_window_us
            .map_or_else(String::new, |w| format!("; spin window {w:.1} µs")),
    )
}

/// How `sink` runs.
#[derive(Clone, Debug)]
pub struct SinkOptions {
    /// What to receive: a port to own, or one to observe.
    pub target: SinkTarget,
    /// Stop after this long (from the start).
    pub duration: Option<Duration>,
    /// Stop after this long without a datagram, once one has come.
    pub idle: Duration,
    /// The RTT the burstiness index is normalised by.
    pub rtt: Duration,
    /// The virtual bottleneck's rate for the burstiness index; `None`: the slow-start
    /// bottleneck of Kobayashi's equation 3.
    pub bottleneck: Option<Rate>,
    /// Gaps at most this long make datagrams one back-to-back burst.
    pub burst_gap: Duration,
    /// The rate the sender was asked for, to report conformance against.
    pub expected_rate: Option<Rate>,
}

/// Where `sink` takes its datagrams from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkTarget {
    /// Bind this address and receive on it.
    Listen(SocketAddr),
    /// Observe datagrams to `port` arriving on `interface`, without owning the port (an
    /// `AF_PACKET` capture; needs root). Another program must receive them.
    Observe {
        /// The interface they arrive on (`lo`, a veth end).
        interface: String,
        /// Their destination port.
        port: u16,
    },
}

impl std::fmt::Display for SinkTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkTarget::Listen(addr) => write!(f, "socket {addr}"),
            SinkTarget::Observe { interface, port } => write!(f, "capture {interface}:{port}"),
        }
    }
}

/// What `sink` reads datagrams from: a bound socket or a capture.
pub enum SinkInput {
    /// A UDP socket `sink` owns.
    Socket(TimestampedReceiver),
    /// A capture of a port another program owns.
    Observer(PortObserver),
}

impl From<TimestampedReceiver> for SinkInput {
    fn from(rx: TimestampedReceiver) -> Self {
        SinkInput::Socket(rx)
    }
}

impl SinkInput {
    /// Opens what `target` names.
    pub fn open(target: &SinkTarget) -> Result<SinkInput> {
        Ok(match target {
            SinkTarget::Listen(addr) => SinkInput::Socket(bind_sink(*addr)?),
            SinkTarget::Observe { interface, port } => SinkInput::Observer(
                PortObserver::open(interface, *port, 256)
                    .with_context(|| format!("observing port {port} on {interface}"))?,
            ),
        })
    }

    fn set_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        match self {
            SinkInput::Socket(rx) => rx.set_timeout(timeout),
            SinkInput::Observer(o) => o.set_timeout(timeout),
        }
    }

    fn kernel_drops(&self) -> u64 {
        match self {
            SinkInput::Socket(rx) => rx.kernel_drops(),
            SinkInput::Observer(o) => o.kernel_drops(),
        }
    }

    /// Takes a batch and hands each packet to `visit`; returns how many came.
    fn recv(&mut self, mut visit: impl FnMut(Arrival<'_>)) -> std::io::Result<usize> {
        match self {
            SinkInput::Socket(rx) => {
                let n = rx.recv_batch()?;
                for i in 0..n {
                    let d = rx.get(i).expect("received");
                    visit(Arrival::Datagram {
                        data: d.data,
                        len: d.data.len(),
                        truncated: d.truncated,
                        kernel_ns: d.kernel_ns,
                    });
                }
                Ok(n)
            }
            SinkInput::Observer(o) => {
                let n = o.recv_batch()?;
                for i in 0..n {
                    visit(match o.get(i).expect("received") {
                        (Ok(udp), kernel_ns) => Arrival::Datagram {
                            data: udp.payload,
                            len: udp.len,
                            truncated: false,
                            kernel_ns,
                        },
                        (Err(_), _) => Arrival::Malformed,
                    });
                }
                Ok(n)
            }
        }
    }
}

/// One thing `sink` received.
enum Arrival<'a> {
    /// A datagram: its (captured) bytes, its whole length, and the kernel's timestamp.
    Datagram {
        data: &'a [u8],
        len: usize,
        truncated: bool,
        kernel_ns: Option<u64>,
    },
    /// A captured packet that is not a readable UDP datagram.
    Malformed,
}

/// What `sink` measured (`sink --json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SinkReport {
    /// What it received from: `socket ADDR` or `capture IFACE:PORT`.
    pub source: String,
    /// Datagrams received (all of them, ours and foreign).
    pub packets: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Receive rate (payload bits over first-to-last arrival), bit/s.
    pub rate_bps: f64,
    /// Mean inter-arrival time, µs.
    pub interarrival_mean_us: f64,
    /// Its standard deviation, µs.
    pub interarrival_stddev_us: f64,
    /// Median inter-arrival time, µs.
    pub interarrival_p50_us: f64,
    /// 99th percentile, µs.
    pub interarrival_p99_us: f64,
    /// Longest gap, µs.
    pub interarrival_max_us: f64,
    /// Gaps longer than 1 ms: on a shared machine, mostly the sender's CPU taken away (they
    /// weigh heavily in the stddev of a stream 100 µs apart).
    #[serde(default)]
    pub gaps_over_1ms: u64,
    /// The most datagrams in a row with gaps of at most `burst_gap_us`.
    pub longest_burst: u64,
    /// The gap that counts as back to back, µs.
    pub burst_gap_us: f64,
    /// Kobayashi's burstiness index B (Section V), `null` for too few datagrams.
    pub burstiness_index: Option<f64>,
    /// The virtual bottleneck B was computed for: `slow-start` or its rate in bit/s.
    pub bottleneck: String,
    /// The RTT B is normalised by, µs.
    pub rtt_us: f64,
    /// Datagrams without the `pace` header (another sender's traffic, or garbage).
    pub foreign: u64,
    /// Datagrams longer than the receive buffer, cut.
    pub truncated: u64,
    /// Datagrams the kernel dropped on the socket (buffer full).
    pub kernel_drops: u64,
    /// `pace` datagrams missing from their flows' sequence (lost or still in flight).
    pub missing: u64,
    /// `pace` datagrams that came after a later one of their flow.
    pub reordered: u64,
    /// Datagrams without a kernel timestamp (measured at user-space receive time instead).
    pub untimestamped: u64,
    /// Captured packets that were not readable UDP datagrams (observe mode only).
    pub malformed: u64,
    /// |rate − expected| / expected, %, when the expected rate was given (`--rate`).
    #[serde(default)]
    pub conformance_pct: Option<f64>,
    /// `pace` flows seen.
    #[serde(default)]
    pub flows: u64,
    /// The fewest and the most datagrams received from one `pace` flow (equal shares mean
    /// every flow got its rate).
    #[serde(default)]
    pub flow_packets_min: u64,
    /// See `flow_packets_min`.
    #[serde(default)]
    pub flow_packets_max: u64,
}

/// The largest flow number `sink` tracks sequences for.
const MAX_FLOWS: usize = 1 << 20;

/// Runs `sink` on an already bound receiver until its duration or idle time is up.
pub fn sink_on(input: &mut SinkInput, options: &SinkOptions) -> Result<SinkReport> {
    ensure!(
        options.rtt >= Duration::from_micros(1),
        "--rtt {:?}: want at least 1 µs",
        options.rtt
    );
    input.set_timeout(Duration::from_millis(50))?;
    let rtt_ns = options.rtt.as_nanos() as u64;
    let bottleneck = match options.bottleneck {
        Some(rate) => Bottleneck::Rate {
            bits_per_sec: rate.bits_per_sec(),
            rtt_ns,
        },
        None => Bottleneck::SlowStart { rtt_ns },
    };
    let mut index = BurstinessIndex::new(bottleneck, 20);
    let burst_gap_ns = options.burst_gap.as_nanos() as u64;
    let mut stats = ArrivalStats::new(burst_gap_ns);
    let (mut foreign, mut truncated, mut untimestamped, mut malformed) = (0u64, 0u64, 0u64, 0u64);
    // Per flow: the next sequence number expected, and how many came.
    let mut next_seq: Vec<u64> = Vec::new();
    let mut flow_count: Vec<u64> = Vec::new();
    let (mut missing_gaps, mut reordered) = (0u64, 0u64);
    let started = StdInstant::now();
    let mut last_arrival: Option<StdInstant> = None;
    loop {
        let now = StdInstant::now();
        if options
            .duration
            .is_some_and(|d| now.duration_since(started) >= d)
        {
            break;
        }
        if last_arrival.is_some_and(|t| now.duration_since(t) >= options.idle) {
            break;
        }
        let n = input.recv(|arrival| {
            let Arrival::Datagram {
                data,
                len,
                truncated: cut,
                kernel_ns,
            } = arrival
            else {
                malformed += 1;
                return;
            };
            let at = kernel_ns.unwrap_or_else(|| {
                untimestamped += 1;
                realtime_ns()
            });
            truncated += u64::from(cut);
            stats.push(at, len as u64);
            index.push(at, len as u64);
            match PacketHeader::read(data) {
                Ok(h) if (h.flow as usize) < MAX_FLOWS => {
                    let f = h.flow as usize;
                    if next_seq.len() <= f {
                        next_seq.resize(f + 1, 0);
                        flow_count.resize(f + 1, 0);
                    }
                    flow_count[f] += 1;
                    if h.seq >= next_seq[f] {
                        // Saturating: a forged sequence number near u64::MAX is counted, not
                        // a crash.
                        missing_gaps = missing_gaps.saturating_add(h.seq - next_seq[f]);
                        next_seq[f] = h.seq.saturating_add(1);
                    } else {
                        reordered += 1;
                        missing_gaps = missing_gaps.saturating_sub(1);
                    }
                }
                _ => foreign += 1,
            }
        })?;
        if n > 0 {
            last_arrival = Some(StdInstant::now());
        }
    }
    let us = |ns: f64| ns / 1000.0;
    Ok(SinkReport {
        source: options.target.to_string(),
        packets: stats.packets(),
        bytes: stats.bytes(),
        rate_bps: stats.rate_bps().unwrap_or(f64::NAN),
        interarrival_mean_us: us(stats.interarrival_mean_ns().unwrap_or(f64::NAN)),
        interarrival_stddev_us: us(stats.interarrival_stddev_ns().unwrap_or(f64::NAN)),
        interarrival_p50_us: us(stats.interarrival_percentile_ns(50.0).unwrap_or(f64::NAN)),
        interarrival_p99_us: us(stats.interarrival_percentile_ns(99.0).unwrap_or(f64::NAN)),
        interarrival_max_us: us(stats.max_gap_ns().map_or(f64::NAN, |g| g as f64)),
        gaps_over_1ms: stats.gaps_over_ns(1_000_000),
        longest_burst: stats.longest_burst(),
        burst_gap_us: us(burst_gap_ns as f64),
        burstiness_index: index.index(),
        bottleneck: options.bottleneck.map_or_else(
            || "slow-start".to_string(),
            |r| r.bits_per_sec().to_string(),
        ),
        rtt_us: us(rtt_ns as f64),
        foreign,
        truncated,
        kernel_drops: input.kernel_drops(),
        missing: missing_gaps,
        reordered,
        untimestamped,
        malformed,
        conformance_pct: options
            .expected_rate
            .zip(stats.rate_bps())
            .map(|(want, got)| {
                let want = want.bits_per_sec() as f64;
                (got - want).abs() / want * 100.0
            }),
        flows: flow_count.iter().filter(|&&c| c > 0).count() as u64,
        flow_packets_min: flow_count
            .iter()
            .copied()
            .filter(|&c| c > 0)
            .min()
            .unwrap_or(0),
        flow_packets_max: flow_count.iter().copied().max().unwrap_or(0),
    })
}

/// Opens `options.target` and runs `sink`.
pub fn sink(options: &SinkOptions) -> Result<SinkReport> {
    let mut input = SinkInput::open(&options.target)?;
    sink_on(&mut input, options)
}

/// Prints `sink`'s report.
pub fn sink_markdown(r: &SinkReport) -> String {
    let mut out = format!(
        "{}: {} datagrams, {} bytes: {:.3} Mbit/s\n\
         inter-arrival: mean {:.2} µs, stddev {:.2} µs, p50 {:.2} µs, p99 {:.2} µs, max {:.1} µs, \
         {} over 1 ms\n\
         longest burst {} (gaps ≤ {:.1} µs); burstiness index B {} ({} bottleneck, RTT {:.0} µs)\n\
         missing {}, reordered {}, kernel drops {}, foreign {}, truncated {}, without timestamp {}, \
         malformed {}\n",
        r.source,
        r.packets,
        r.bytes,
        r.rate_bps / 1e6,
        r.interarrival_mean_us,
        r.interarrival_stddev_us,
        r.interarrival_p50_us,
        r.interarrival_p99_us,
        r.interarrival_max_us,
        r.gaps_over_1ms,
        r.longest_burst,
        r.burst_gap_us,
        r.burstiness_index.map_or_else(
            || "— (too few datagrams)".to_string(),
            |b| format!("{b:.3e}")
        ),
        if r.bottleneck == "slow-start" {
            "slow-start".to_string()
        } else {
            format!("{} bit/s", r.bottleneck)
        },
        r.rtt_us,
        r.missing,
        r.reordered,
        r.kernel_drops,
        r.foreign,
        r.truncated,
        r.untimestamped,
        r.malformed,
    );
    if let Some(c) = r.conformance_pct {
        out += &format!("off the expected rate by {c:.3} %\n");
    }
    if r.flows > 1 {
        out += &format!(
            "{} flows: {} to {} datagrams each\n",
            r.flows, r.flow_packets_min, r.flow_packets_max
        );
    }
    out
}

/// Parses `--spin-window`: `calibrated`, or a duration of at most 1 s (`0`, `20us`).
pub fn parse_spin_window(text: &str) -> Result<SpinWindow, String> {
    if text == "calibrated" {
        return Ok(SpinWindow::Calibrated);
    }
    let window = parse_duration(text)?;
    if window > Duration::from_secs(1) {
        return Err(format!("{text:?}: a spin window over 1 s is a busy loop"));
    }
    Ok(SpinWindow::Fixed(window))
}

/// Parses a duration written as `10s`, `250ms`, `40us`/`40µs` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit_ns) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        (t, 1e9)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (write 10s, 250ms or 40us)"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("{text:?}: a duration must be a positive number"));
    }
    let ns = value * unit_ns;
    if ns > 365.0 * 86_400.0 * 1e9 {
        return Err(format!("{text:?} is longer than a year"));
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// The socket `sink` would use, for callers that need its address before it runs.
pub fn bind_sink(listen: SocketAddr) -> Result<TimestampedReceiver> {
    TimestampedReceiver::bind(listen, 256, MAX_DATAGRAM)
        .with_context(|| format!("listening on {listen}"))
}
