//! `pace`'s sending side: a connected socket and its counters, and the four ways the
//! datagrams are paced (an event loop with soft timers or a hardware timer, one departure
//! queue, a spinning loop, none).

use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use anyhow::{Context, Result, bail};
use softtimer::{Clock, Fired, Instant, SoftTimers, Span, SystemClock};
use softtimer_net::pacer::{FlowPacer, PacerConfig};
use softtimer_net::udp::{PacketHeader, realtime_ns};
use softtimer_rt::{EventLoop, LoopConfig, LoopCx, TimerMode, send_all};

use super::{BatchSend, PaceOptions, PaceTimer, Plan, Run, SendCounters};

/// One flow's state, carried as the payload of its one pending event: no state is shared
/// between the loop and a signal handler but the counters.
#[derive(Clone, Debug)]
pub(super) struct Flow {
    pub(super) id: u32,
    pub(super) seq: u64,
    pub(super) pacer: FlowPacer,
    pub(super) last_sent: Option<Instant>,
}

/// The sending side: a connected socket, a zero payload, and the counters.
pub(super) struct Sender {
    pub(super) socket: OwnedFd,
    pub(super) payload: Box<[u8]>,
    pub(super) counters: SendCounters,
    pub(super) hz: u64,
    /// With GSO: the most datagrams one send carries (0: batches go by `sendmmsg`).
    gso_segments: usize,
}

/// One datagram's header, queued for a batch.
type Header = [u8; PacketHeader::LEN];

impl Sender {
    /// A sender of `size`-byte datagrams on `socket` (connected), sending batches as
    /// `batch_send` says. GSO is turned on for the socket here where the route takes a
    /// datagram of `size` whole: the kernel refuses every send of a segmented socket whose
    /// segment does not fit the path's MTU, one datagram's included, where without it a
    /// datagram that large leaves in IP fragments; so such a sender batches by `sendmmsg`
    /// instead ([`Sender::batch_send`] says which).
    pub(super) fn new(
        socket: OwnedFd,
        size: usize,
        batch_send: BatchSend,
        hz: u64,
    ) -> Result<Sender> {
        let batch_send = match batch_send {
            BatchSend::Gso if !fits_the_route(&socket, size) => BatchSend::Sendmmsg,
            other => other,
        };
        let gso_segments = match batch_send {
            BatchSend::Gso => {
                let segment = u16::try_from(size).context("a datagram over 64 KB")?;
                softtimer_net::udp::set_udp_segment(&socket, segment)
                    .context("turning on UDP segmentation (GSO) for the sending socket")?;
                // One send carries at most 64 KB.
                (65_000 / size).clamp(1, softtimer_net::udp::MAX_SEGMENTS)
            }
            BatchSend::Sendmmsg => 0,
        };
        Ok(Sender {
            socket,
            payload: vec![0u8; size - PacketHeader::LEN].into_boxed_slice(),
            counters: SendCounters::default(),
            hz,
            gso_segments,
        })
    }

    /// How batches leave: as asked, or by `sendmmsg` where GSO cannot carry the size.
    pub(super) fn batch_send(&self) -> BatchSend {
        if self.gso_segments > 0 {
            BatchSend::Gso
        } else {
            BatchSend::Sendmmsg
        }
    }

    /// The header of flow `flow`'s next datagram, sent at `sent_ns`.
    pub(super) fn header(flow: &Flow, sent_ns: u64) -> [u8; PacketHeader::LEN] {
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
    pub(super) fn send(&self, flow: &mut Flow, now: Instant) -> bool {
        let sent_ns = realtime_ns();
        let header = Self::header(flow, sent_ns);
        let parts = [IoSlice::new(&header), IoSlice::new(&self.payload)];
        let out = send_all(&self.socket, &[&parts], true);
        self.counters.calls(1);
        if out.sent == 0 {
            self.counters.refused(out.last_error);
            return false;
        }
        self.account(flow, now, sent_ns);
        true
    }

    /// Sends flow `flow`'s next datagram at `now` and returns when its next is due: by its
    /// pacer, or one interval later if the kernel refused this one (its buffer was full).
    pub(super) fn send_paced(&self, flow: &mut Flow, now: Instant) -> Instant {
        let bytes = (self.payload.len() + PacketHeader::LEN) as u64;
        if self.send(flow, now) {
            flow.pacer.on_sent(now, bytes)
        } else {
            now + flow.pacer.config().target().span_for_bytes(bytes, self.hz)
        }
    }

    /// Counts flow `flow`'s datagram as sent at `now` (`sent_ns` on the realtime clock).
    fn account(&self, flow: &mut Flow, now: Instant, sent_ns: u64) {
        flow.seq += 1;
        let gap_ns = flow
            .last_sent
            .map(|last| now.saturating_since(last).as_nanos(self.hz));
        self.counters.sent(sent_ns, gap_ns);
        flow.last_sent = Some(now);
    }

    /// Queues flow `flow`'s next `n` datagrams at `now`, back to back, and returns when its
    /// next are due: `n` intervals later by its pacer.
    fn queue_burst(
        &self,
        batch: &mut Vec<Header>,
        flow: &mut Flow,
        now: Instant,
        n: u32,
    ) -> Instant {
        let sent_ns = realtime_ns();
        for _ in 0..n {
            batch.push(Self::header(flow, sent_ns));
            self.account(flow, now, sent_ns);
        }
        let bytes = (self.payload.len() + PacketHeader::LEN) as u64;
        flow.pacer.on_sent(now, bytes * u64::from(n))
    }

    /// Sends the datagrams whose headers are queued in `batch` and empties it: with GSO, one
    /// `sendmsg` per `gso_segments` of them; otherwise one `send` for one and one `sendmmsg`
    /// per run of the rest. Datagrams the kernel refused were counted as sent when queued:
    /// they move to the refused.
    fn flush(&self, batch: &mut Vec<Header>) {
        if self.gso_segments > 0 && batch.len() > 1 {
            for chunk in batch.chunks(self.gso_segments) {
                let parts: Vec<IoSlice<'_>> = chunk
                    .iter()
                    .flat_map(|header| [IoSlice::new(header), IoSlice::new(&self.payload)])
                    .collect();
                // One buffer of whole datagrams: the kernel cuts it at each datagram.
                let out = send_all(&self.socket, &[&parts], true);
                self.counters.calls(1);
                if out.sent == 0 {
                    self.counters.unsent(chunk.len() as u64, out.last_error);
                }
            }
            batch.clear();
            return;
        }
        let parts: Vec<[IoSlice<'_>; 2]> = batch
            .iter()
            .map(|header| [IoSlice::new(header), IoSlice::new(&self.payload)])
            .collect();
        let datagrams: Vec<&[IoSlice<'_>]> = parts.iter().map(|p| &p[..]).collect();
        let out = send_all(&self.socket, &datagrams, true);
        self.counters.calls(out.calls as u64);
        if out.refused > 0 {
            self.counters.unsent(out.refused as u64, out.last_error);
        }
        batch.clear();
    }
}

/// Whether a datagram of `size` bytes fits the MTU of the route of the connected `socket`
/// whole (its IP and UDP headers included); true where the MTU cannot be read.
fn fits_the_route(socket: &OwnedFd, size: usize) -> bool {
    use rustix::net::sockopt;
    // IPv6 first: Linux answers IP_MTU on an IPv6 socket too (with the route's MTU), where
    // the headers are 48 bytes, not 28; IPV6_MTU fails on an IPv4 socket.
    let (mtu, headers) = match sockopt::ipv6_mtu(socket) {
        Ok(mtu) => (mtu, 40 + 8),
        Err(_) => match sockopt::ip_mtu(socket) {
            Ok(mtu) => (mtu, 20 + 8),
            Err(_) => return true,
        },
    };
    size + headers <= mtu as usize
}

/// The most datagrams one `sendmmsg` of `pace` carries.
pub(super) const BATCH: usize = 64;

pub(super) fn connect(to: SocketAddr) -> Result<OwnedFd> {
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

/// Stops `ev` from a thread of its own once `duration` has passed (join it after the run).
pub(super) fn stop_after<E: Send + 'static>(
    ev: &mut EventLoop<E>,
    duration: Duration,
) -> std::thread::JoinHandle<()> {
    let stop = ev.stop_handle();
    std::thread::spawn(move || {
        std::thread::sleep(duration);
        stop.stop();
    })
}

/// Runs `ev` for `duration`, then stops it; the spin window its idle policy ends with for
/// the plan's wait between wake-ups.
fn run_for<E: Send + 'static>(
    mut ev: EventLoop<E>,
    duration: Duration,
    plan: &Plan,
) -> Result<LoopRun> {
    let stopper = stop_after(&mut ev, duration);
    ev.run(|_, _| {})?;
    let _ = stopper.join();
    Ok(LoopRun::of(&ev, plan))
}

/// What a loop-driven run reports beside the sender's counters.
pub(super) struct LoopRun {
    /// The window the loop's idle policy spun before its waits.
    pub spin_window: Duration,
    /// Expirations of a hardware timer (a timerfd's, or timer signals).
    pub timer_expirations: u64,
}

impl LoopRun {
    pub(super) fn of<E: Send + 'static>(ev: &EventLoop<E>, plan: &Plan) -> LoopRun {
        LoopRun {
            spin_window: spin_window_for(ev, plan),
            timer_expirations: ev.counters().timer_expirations,
        }
    }
}

/// The window `ev`'s idle policy spins before the plan's wait between wake-ups: a soft loop
/// with `--precision` learns it from its own wake-ups; otherwise it is the plan's.
pub(super) fn spin_window_for<E: Send + 'static>(ev: &EventLoop<E>, plan: &Plan) -> Duration {
    let wait = ev.span(plan.period * plan.per_wakeup);
    ev.clock().duration(ev.idle_policy().window_for(wait))
}

/// Schedules each flow's first event: the flows start spread over one per-flow interval,
/// not all at once.
pub(super) fn start_spread(
    cx: &mut LoopCx<'_, Flow>,
    flows: Vec<Flow>,
    per_flow_interval: Span,
) -> Result<()> {
    let now = cx.now();
    let n = flows.len() as u64;
    for flow in flows {
        // In u128: an interval of days (a tiny rate over many flows) times a flow's number
        // overflows u64.
        let offset = u128::from(per_flow_interval.ticks()) * u128::from(flow.id) / u128::from(n);
        let offset = Span::from_ticks(u64::try_from(offset).unwrap_or(u64::MAX));
        cx.schedule_at(now + offset, flow)?;
    }
    Ok(())
}

/// Soft timers, timerfd or signal: the event loop fires each flow's event; the handler sends.
pub(super) fn run_loop(run: Run<'_>) -> Result<LoopRun> {
    let (options, plan, sender, flows) = (run.options, run.plan, run.sender, run.flows);
    let hardware = options.timer != PaceTimer::Soft;
    // Flows due at one trigger state leave together (soft timers only).
    let merge_flows = options.batch && !hardware;
    let per_wakeup = plan.per_wakeup;
    let s = Arc::clone(sender);
    // The handler is shared with the loop's helper threads (`Fn`): the batch sits behind a
    // lock that only the thread holding the facility ever takes, so it is never contended.
    let batch: std::sync::Mutex<Vec<Header>> = std::sync::Mutex::new(Vec::with_capacity(BATCH));
    let handler = move |timers: &mut SoftTimers<Flow>, fired: Fired<Flow>| {
        let mut flow = fired.event;
        let mut now = fired.now;
        if merge_flows || per_wakeup > 1 {
            // Queue this flow's burst. Soft: one burst per event (the burst rate paces any
            // catching up); a timerfd: every burst due at this expiry, up to a bound. Send
            // once no other flow is due at this trigger state (the facility fires every due
            // event in one check).
            let mut batch = batch.lock().unwrap_or_else(|e| e.into_inner());
            let mut next = s.queue_burst(&mut batch, &mut flow, now, per_wakeup);
            if hardware {
                for _ in 1..64 {
                    now = timers.measure_time();
                    if next.is_after(now) {
                        break;
                    }
                    next = s.queue_burst(&mut batch, &mut flow, now, per_wakeup);
                }
            }
            let _ = timers.schedule_at(next, flow);
            if !merge_flows
                || batch.len() >= BATCH
                || timers.next_expiry().is_none_or(|t| t.is_after(now))
            {
                s.flush(&mut batch);
            }
            return;
        }
        // One datagram per send, without a lock or an allocation (a signal handler's path).
        // Soft: one datagram per event. Hardware timers: every datagram due at this expiry, up
        // to a bound.
        for _ in 0..if hardware { 64 } else { 1 } {
            let next = s.send_paced(&mut flow, now);
            now = timers.measure_time();
            if next.is_after(now) || !hardware {
                let _ = timers.schedule_at(next, flow);
                return;
            }
        }
        let _ = timers.schedule_at(now, flow);
    };
    let config = LoopConfig {
        interrupt_clock_hz: options.backstop_hz,
        ..plan.loop_config(options.flows)
    };
    let period = plan.period;
    let per_flow_interval = Span::from_duration(period * options.flows, sender.hz);
    // A hardware timer fires once per batch of `per_wakeup` intervals: at every interval,
    // all but one of its expiries would find nothing due.
    let hardware_period = period * per_wakeup;
    let mut ev: EventLoop<Flow> = match options.timer {
        PaceTimer::Soft => EventLoop::new(config, handler)?,
        PaceTimer::Timerfd => EventLoop::new(
            LoopConfig {
                mode: TimerMode::timerfd(hardware_period)?,
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
                EventLoop::with_timer_signal(config, hardware_period, handler)?
            }
        }
        PaceTimer::Spin | PaceTimer::None => bail!("not a loop timer"),
    };
    start_spread(&mut ev.cx(), flows, per_flow_interval)?;
    run_for(ev, options.duration, plan)
}

/// Soft timers over one departure queue: every flow's next datagram is stamped at its rate;
/// one event at the queue's next departure sends all that is due (one `sendmmsg`) and
/// stamps each of those flows' next datagram.
pub(super) fn run_departure(run: Run<'_>) -> Result<LoopRun> {
    let (options, plan, sender, flows) = (run.options, run.plan, run.sender, run.flows);
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
    let per_flow = plan.per_flow;
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
        // In u128: an interval of days (a tiny rate over many flows) times a flow's number
        // overflows u64.
        let spread = u128::from(interval.ticks()) * u128::from(flow.id) / u128::from(n);
        let first = start + Span::from_ticks(u64::try_from(spread).unwrap_or(u64::MAX));
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
                // A flow a whole interval behind starts again from this send.
                let next = stamper.stamp_after_send(now, bytes);
                d.queue.push(next, id);
            }
            s.flush(&mut d.batch);
        }
        if let Some(next) = d.queue.next_departure() {
            let _ = timers.schedule_at(next, ());
        }
    };
    // One event: the queue's next departure.
    let config = LoopConfig {
        interrupt_clock_hz: options.backstop_hz,
        ..plan.loop_config(1)
    };
    let mut ev: EventLoop<()> = EventLoop::new(config, handler)?;
    {
        let mut cx = ev.cx();
        let now = cx.now();
        cx.schedule_at(now, ())?;
    }
    run_for(ev, options.duration, plan)
}

/// Spins on the clock; sends each flow's datagram when due (one per flow per pass).
pub(super) fn run_spin(
    options: &PaceOptions,
    sender: &Sender,
    mut flows: Vec<Flow>,
    clock: &SystemClock,
) {
    let end = StdInstant::now() + options.duration;
    let mut next: Vec<Instant> = vec![clock.now(); flows.len()];
    // The run's end is looked at every so many sends or passes, whichever comes first: a
    // pass over many flows behind their schedule may send for long.
    let mut since_look = 0u32;
    let mut ended = || {
        since_look += 1;
        if since_look < 1024 {
            return false;
        }
        since_look = 0;
        StdInstant::now() >= end
    };
    loop {
        let now = clock.now();
        for (flow, due) in flows.iter_mut().zip(next.iter_mut()) {
            if !due.is_after(now) {
                *due = sender.send_paced(flow, now);
                if ended() {
                    return;
                }
            }
        }
        if ended() {
            return;
        }
    }
}

/// No pacing: as many datagrams as the rate would send in the run, back to back.
pub(super) fn run_unpaced(options: &PaceOptions, sender: &Sender) {
    let total = u128::from(options.rate.bits_per_sec()) * options.duration.as_nanos()
        / (options.size as u128 * 8 * 1_000_000_000);
    let mut flow = Flow {
        id: 0,
        seq: 0,
        pacer: FlowPacer::new(PacerConfig::fixed(options.rate), sender.hz),
        last_sent: None,
    };
    let clock = SystemClock::new();
    // A sender slower than the rate stops at four times the run, sent or not.
    let end = StdInstant::now() + options.duration * 4;
    let mut sent = 0u128;
    while sent < total.max(2) {
        if sender.send(&mut flow, clock.now()) {
            sent += 1;
            if sent.is_multiple_of(1024) && StdInstant::now() > end {
                return;
            }
        } else if StdInstant::now() > end {
            return;
        }
    }
}
