//! One server run: a server (HTTP or UDP RPC) on an event loop pinned to the last CPU, its
//! load generator pinned to CPU 0, and a timer source firing events with a chosen handler on
//! the server's loop ([`Setup`] in, [`Outcome`] out). The calls into `softtimer` and
//! `softtimer-rt` that the experiments make are here, in [`run`] and
//! [`TimerSource::new_loop`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use softtimer::{Fired, SoftTimers, Span, TriggerSource, TriggerStats};
use softtimer_rt::{DeadlineDesign, EventLoop, HelperCpu, LoopConfig, TimerMode};
use softtimers_tools::cpu::{pin_to, server_cpu, thread_cpu_ns};
use softtimers_tools::http::{HttpServer, PollCounts};
use softtimers_tools::rpc::RpcServer;

use super::client::{Client, NoResponse, run_client};
use super::handler::{HandlerKind, make_handler};
use super::paced_flow::{PaceLoad, PaceOutcome, PaceSender, drain_udp};

/// The server workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Workload {
    /// HTTP with keep-alive: the event-driven (Flash-like) server, saturated.
    #[serde(rename = "http-keepalive")]
    HttpKeepAlive,
    /// HTTP without keep-alive: a connection per request, as the paper's clients did.
    #[serde(rename = "http-close")]
    HttpClose,
    /// HTTP with keep-alive and a compute-bound thread on the server's CPU
    /// (ST-Apache-compute).
    #[serde(rename = "http-compute")]
    HttpCompute,
    /// Small UDP RPCs (NFS-like).
    #[serde(rename = "udp-rpc")]
    Rpc,
}

impl Workload {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Workload::HttpKeepAlive => "http-keepalive",
            Workload::HttpClose => "http-close",
            Workload::HttpCompute => "http-compute",
            Workload::Rpc => "udp-rpc",
        }
    }
    pub(crate) fn keep_alive(self) -> bool {
        self != Workload::HttpClose
    }
}

/// What fires events on a loop: nothing (the reference), soft timers, or one of the
/// hardware-timer baselines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimerSource {
    /// No events and no timer machinery at all ([`TimerMode::Off`]): the reference.
    None,
    /// The soft-timer machinery (trigger checks, backstop) with nothing scheduled: what the
    /// machinery costs by itself.
    #[serde(rename = "soft-no-events")]
    BackstopOnly,
    /// Soft timers (interval 0: an event at every trigger state).
    Soft,
    /// A periodic `timerfd`, read when the loop returns to `epoll_wait`.
    Timerfd,
    /// A POSIX timer signal that interrupts the loop thread.
    Signal,
}

impl TimerSource {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            TimerSource::None => "none",
            TimerSource::BackstopOnly => "soft-no-events",
            TimerSource::Soft => "soft",
            TimerSource::Timerfd => "timerfd",
            TimerSource::Signal => "signal",
        }
    }

    /// Whether this is a hardware-timer baseline (`timerfd` or `signal`).
    pub fn is_hardware(self) -> bool {
        matches!(self, TimerSource::Timerfd | TimerSource::Signal)
    }

    /// Whether this source schedules events.
    pub fn has_events(self) -> bool {
        !matches!(self, TimerSource::None | TimerSource::BackstopOnly)
    }

    /// An event loop for this source firing every `period` (hardware sources), with
    /// `config`'s other settings and `handler`.
    ///
    /// # Safety
    ///
    /// For [`TimerSource::Signal`] the handler runs in signal context: it must be
    /// async-signal-safe (no allocation, no lock, no panic path).
    #[allow(unsafe_code)]
    pub unsafe fn new_loop<H>(
        self,
        config: LoopConfig,
        period: Duration,
        handler: H,
    ) -> Result<EventLoop<()>>
    where
        H: Fn(&mut SoftTimers<()>, Fired<()>) + Send + Sync + 'static,
    {
        let mode = match self {
            TimerSource::None => TimerMode::Off,
            TimerSource::BackstopOnly | TimerSource::Soft | TimerSource::Signal => TimerMode::Soft,
            TimerSource::Timerfd => TimerMode::timerfd(period)?,
        };
        let config = LoopConfig { mode, ..config };
        Ok(if self == TimerSource::Signal {
            // SAFETY: the caller guarantees the handler is async-signal-safe.
            #[allow(unsafe_code)]
            unsafe {
                EventLoop::with_timer_signal(config, period, handler)?
            }
        } else {
            EventLoop::new(config, handler)?
        })
    }
}

/// "every trigger state", "10 µs", or "—" (no events): an interval in a table.
pub fn interval_label(source: TimerSource, interval_us: u64) -> String {
    match (source, interval_us) {
        (TimerSource::None | TimerSource::BackstopOnly, _) => "—".to_string(),
        (_, 0) => "every trigger state".to_string(),
        (_, us) => format!("{us} µs"),
    }
}

/// One server run.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The workload.
    pub workload: Workload,
    /// The timer source.
    pub source: TimerSource,
    /// Event interval, µs (soft only: 0 fires at every trigger state).
    pub interval_us: u64,
    /// The handler.
    pub handler: HandlerKind,
    /// A deadline this many µs past each event's due time (soft events only).
    pub deadline_us: Option<u64>,
    /// What enforces the deadlines.
    pub deadline_design: DeadlineDesign,
    /// Keep trigger statistics.
    pub stats: bool,
    /// Record this many trigger states.
    pub trace: usize,
    /// How long the load runs.
    pub duration: Duration,
    /// The HTTP load generator.
    pub client: Client,
    /// A UDP flow the server's loop sends while it serves (rate-based clocking).
    pub pace: Option<PaceLoad>,
    /// Serve by soft-timer polling with this aggregation quota (HTTP workloads; the loop's
    /// soft events are then the polls, and `source` must be [`TimerSource::Soft`]).
    pub poll_quota: Option<u32>,
    /// A timer signal may leave the server no time to answer (E1, E2 and E6 at 10 µs on a
    /// slow or loaded machine), and so may a deadline design (E13 at 10 µs: a `timerfd` on
    /// the server's core, a watcher on the load generator's): a run whose load generator got
    /// no response at all is then a measured rate of 0, not an error. Off everywhere else.
    pub starving_measured: bool,
}

impl Setup {
    /// `workload` with no events, no statistics and no trace, for `duration`.
    pub fn plain(workload: Workload, duration: Duration, client: Client) -> Self {
        Setup {
            workload,
            source: TimerSource::None,
            interval_us: 0,
            handler: HandlerKind::Null,
            deadline_us: None,
            deadline_design: DeadlineDesign::default(),
            stats: false,
            trace: 0,
            duration,
            client,
            pace: None,
            poll_quota: None,
            starving_measured: false,
        }
    }

    /// This setup with `source` firing every `interval_us` (0: every trigger state).
    pub fn events(self, source: TimerSource, interval_us: u64) -> Self {
        Setup {
            source,
            interval_us,
            ..self
        }
    }
}

/// What one run measured.
pub struct Outcome {
    /// Responses (or RPC replies) per second; 0 where a timer signal left the server no
    /// time to answer any and the setup measures that ([`Setup::starving_measured`]).
    pub rate: f64,
    /// Events fired per second.
    pub events_per_s: f64,
    /// Events fired by the deadline timer.
    pub fired_by_deadline: u64,
    /// Events fired in all.
    pub fired: u64,
    /// Timer signals that found the facility busy (signal source only).
    pub signal_busy: u64,
    /// CPU time of the loop's helper threads (backstop, deadline watcher).
    pub helpers: HelperCpu,
    /// CPU time of the server's loop thread while it served, ns.
    pub loop_thread_ns: u64,
    /// Time the loop thread spent spinning idle (waiting, not working), ns.
    pub loop_idle_spin_ns: u64,
    /// How long the load ran.
    pub elapsed: Duration,
    /// Trigger statistics, if asked for.
    pub stats: Option<TriggerStats>,
    /// The trigger trace, if asked for.
    pub trace: Vec<(u64, TriggerSource)>,
    /// The measurement clock's frequency.
    pub hz: u64,
    /// The paced flow's figures, if the setup had one.
    pub pace: Option<PaceOutcome>,
    /// What soft-timer polling did, if the server polled.
    pub polling: Option<PollCounts>,
}

struct ServerSide {
    fired: u64,
    fired_by_deadline: u64,
    signal_busy: u64,
    helpers: HelperCpu,
    loop_thread_ns: u64,
    loop_idle_spin_ns: u64,
    stats: Option<TriggerStats>,
    trace: Vec<(u64, TriggerSource)>,
    pace: Option<Arc<PaceSender>>,
    polling: Option<PollCounts>,
}

/// Runs one server with its load and returns what it measured. A run whose load generator
/// got no valid response fails ([`NoResponse`]), except with [`TimerSource::Signal`] where
/// the setup asks ([`Setup::starving_measured`]): a signal starving the server is then a
/// measured outcome (rate 0).
pub fn run(setup: &Setup) -> Result<Outcome> {
    if setup.poll_quota.is_some()
        && (setup.workload == Workload::Rpc
            || setup.pace.is_some()
            || setup.source != TimerSource::Soft)
    {
        bail!(
            "soft-timer polling serves the HTTP workloads on soft timers, with no other events \
             on the loop (got {} on {})",
            setup.workload.name(),
            setup.source.name()
        );
    }
    let server_cpu = server_cpu();
    // A paced flow's receiver, on the load generator's CPU.
    let pace_sink = match setup.pace {
        Some(_) => {
            let rx = softtimer_net::udp::TimestampedReceiver::bind(
                "127.0.0.1:0".parse().expect("an address"),
                256,
                2048,
            )?;
            let to = rx.local_addr()?;
            let stop = Arc::new(AtomicBool::new(false));
            let stop_drain = Arc::clone(&stop);
            let drain = std::thread::spawn(move || drain_udp(rx, stop_drain));
            Some((to, stop, drain))
        }
        None => None,
    };
    let pace_to = pace_sink.as_ref().map(|(to, _, _)| *to);
    let (ready_tx, ready_rx) = mpsc::channel();
    let stop_compute = Arc::new(AtomicBool::new(false));
    let s = setup.clone();
    let server = std::thread::Builder::new().name("server".into()).spawn(
        move || -> Result<ServerSide> {
            let _pin = pin_to(server_cpu);
            let period = Duration::from_micros(s.interval_us.max(1));
            let hz = softtimer::Clock::resolution_hz(&softtimer::SystemClock::new());
            let interval = Span::from_micros(s.interval_us, hz);
            let deadline = s.deadline_us.map(|us| Span::from_micros(us, hz));
            let pace = match (s.pace, pace_to) {
                (Some(load), Some(to)) => Some(Arc::new(PaceSender::new(load, to, hz)?)),
                _ => None,
            };
            let poll_due = Arc::new(AtomicBool::new(false));
            let config = LoopConfig {
                deadlines: s.deadline_design,
                stats: s.stats,
                trace_capacity: s.trace,
                capacity: 64,
                ..LoopConfig::default()
            };
            // Each handler goes to the loop as its own closure type, boxed once there: a
            // handler boxed here too would cost every fired event a second indirect call.
            // `new_loop` is unsafe because, with timer signals, the handler runs in a signal
            // handler: each block below says why its handler is async-signal-safe.
            #[allow(unsafe_code)]
            let mut ev = match (&pace, s.poll_quota) {
                (Some(p), _) => {
                    let p = Arc::clone(p);
                    // SAFETY: a paced flow's handler adds one `send` system call on a buffer
                    // it owns; its lock is taken only with adaptive clocking, which runs on
                    // soft timers, never in a signal handler.
                    unsafe {
                        s.source
                            .new_loop(config, period, move |timers, ev| p.on_event(timers, &ev))?
                    }
                }
                (None, Some(_)) => {
                    let due = Arc::clone(&poll_due);
                    // SAFETY: the polling handler only stores to an atomic flag.
                    unsafe {
                        s.source.new_loop(config, period, move |_, _| {
                            due.store(true, Ordering::Relaxed)
                        })?
                    }
                }
                // SAFETY: `make_handler`'s handler only re-arms on a facility with room
                // reserved and touches preallocated atomics: no allocation, no lock, no panic
                // path.
                (None, None) => unsafe {
                    s.source
                        .new_loop(config, period, make_handler(&s, interval, deadline))?
                },
            };
            let any = "127.0.0.1:0".parse().expect("a valid address");
            enum Server {
                Http(HttpServer),
                Rpc(RpcServer),
            }
            let mut server = match s.workload {
                Workload::Rpc => Server::Rpc(RpcServer::bind(any)?),
                _ => Server::Http(HttpServer::bind(any, Duration::from_secs(30))?),
            };
            if let (Some(quota), Server::Http(h)) = (s.poll_quota, &mut server) {
                let config = softtimer_net::poll::PollerConfig::new(quota)?;
                h.poll_with(config, hz, Arc::clone(&poll_due))?;
            }
            let addr = match &mut server {
                Server::Http(h) => {
                    h.register(&mut ev.cx())?;
                    h.local_addr()?
                }
                Server::Rpc(r) => {
                    r.register(&mut ev.cx())?;
                    r.local_addr()?
                }
            };
            match (s.source, deadline) {
                _ if s.poll_quota.is_some() => {}
                (TimerSource::None | TimerSource::BackstopOnly, _) => {}
                (_, Some(d)) => {
                    ev.cx().schedule_with_deadline(interval, interval + d, ())?;
                }
                _ => {
                    ev.cx().schedule_soft_event(interval, ())?;
                }
            }
            ready_tx
                .send((addr, ev.stop_handle()))
                .map_err(|_| anyhow!("the experiment went away"))?;
            let cpu_before = thread_cpu_ns();
            {
                let server = std::cell::RefCell::new(&mut server);
                ev.run_with(
                    |cx, ready| match &mut **server.borrow_mut() {
                        Server::Http(h) => h.on_ready(cx, ready),
                        Server::Rpc(r) => r.on_ready(cx, ready),
                    },
                    |cx, turn| match &mut **server.borrow_mut() {
                        Server::Http(h) => h.on_turn(cx, turn),
                        Server::Rpc(_) => false,
                    },
                )?;
            }
            let polling = match &server {
                Server::Http(h) => h.poll_counts(),
                Server::Rpc(_) => None,
            };
            let loop_thread_ns = thread_cpu_ns().saturating_sub(cpu_before);
            let helpers = ev.stop_helpers();
            let counters = ev.counters();
            Ok(ServerSide {
                fired: counters.fired_total(),
                fired_by_deadline: counters.fired(TriggerSource::Deadline),
                signal_busy: counters.signal_busy,
                helpers,
                loop_thread_ns,
                loop_idle_spin_ns: counters.idle_spin_ns,
                stats: ev.stats(),
                trace: ev.trace().iter().map(|&(t, s)| (t.ticks(), s)).collect(),
                pace,
                polling,
            })
        },
    )?;
    let (addr, stop) = match ready_rx.recv() {
        Ok(x) => x,
        Err(_) => {
            if let Some((_, stop, _)) = &pace_sink {
                stop.store(true, Ordering::Relaxed);
            }
            // The server thread failed before it was ready: report its error.
            return Err(match server.join() {
                Ok(Err(e)) => e.context("the server did not start"),
                _ => anyhow!("the server thread panicked"),
            });
        }
    };
    let compute = (setup.workload == Workload::HttpCompute).then(|| {
        let stop = Arc::clone(&stop_compute);
        std::thread::spawn(move || {
            let _pin = pin_to(server_cpu);
            let mut x = 1u64;
            while !stop.load(Ordering::Relaxed) {
                for k in 0..10_000u64 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(k);
                }
            }
            std::hint::black_box(x);
        })
    });
    let (workload, duration, which) = (setup.workload, setup.duration, setup.client);
    let client = std::thread::spawn(move || {
        run_client(
            addr,
            workload,
            which,
            duration,
            softtimers_tools::http::FILE_SIZE,
        )
    });
    let client = client
        .join()
        .map_err(|_| anyhow!("the load generator panicked"));
    stop.stop();
    stop_compute.store(true, Ordering::Relaxed);
    if let Some(c) = compute {
        let _ = c.join();
    }
    let side = server
        .join()
        .map_err(|_| anyhow!("the server thread panicked"))??;
    let (rate, elapsed) = match client? {
        Ok(r) => r,
        // A timer signal or a deadline design every few µs can leave the loop no time to
        // serve (or a watcher the load generator none to ask): that is their cost, measured
        // as no throughput, not a failed run.
        Err(e)
            if setup.starving_measured
                && (setup.source == TimerSource::Signal || setup.deadline_us.is_some())
                && e.downcast_ref::<NoResponse>()
                    .is_some_and(|n| n.errors == 0) =>
        {
            (0.0, setup.duration)
        }
        Err(e) => return Err(e),
    };
    let pace = match (pace_sink, &side.pace) {
        (Some((_, stop, drain)), Some(sender)) => {
            stop.store(true, Ordering::Relaxed);
            let received = drain
                .join()
                .map_err(|_| anyhow!("the paced flow's receiver panicked"))??;
            Some(sender.outcome(received))
        }
        (Some((_, stop, drain)), None) => {
            stop.store(true, Ordering::Relaxed);
            let _ = drain.join();
            None
        }
        _ => None,
    };
    Ok(Outcome {
        pace,
        polling: side.polling,
        rate,
        events_per_s: side.fired as f64 / elapsed.as_secs_f64(),
        fired_by_deadline: side.fired_by_deadline,
        fired: side.fired,
        signal_busy: side.signal_busy,
        helpers: side.helpers,
        loop_thread_ns: side.loop_thread_ns,
        loop_idle_spin_ns: side.loop_idle_spin_ns,
        elapsed,
        stats: side.stats,
        trace: side.trace,
        hz: softtimer::Clock::resolution_hz(&softtimer::SystemClock::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{Client, HandlerKind};

    #[test]
    fn names_in_json_are_the_reports_names() {
        for (source, name) in [
            (TimerSource::None, "none"),
            (TimerSource::BackstopOnly, "soft-no-events"),
            (TimerSource::Soft, "soft"),
            (TimerSource::Timerfd, "timerfd"),
            (TimerSource::Signal, "signal"),
        ] {
            assert_eq!(serde_json::to_value(source).unwrap(), name);
            assert_eq!(source.name(), name);
        }
        for w in [
            Workload::HttpKeepAlive,
            Workload::HttpClose,
            Workload::HttpCompute,
            Workload::Rpc,
        ] {
            assert_eq!(serde_json::to_value(w).unwrap(), w.name());
        }
        assert_eq!(serde_json::to_value(HandlerKind::Null).unwrap(), "null");
        assert_eq!(
            serde_json::to_value(HandlerKind::Synthetic).unwrap(),
            "synthetic"
        );
        assert_eq!(serde_json::to_value(Client::Wrk).unwrap(), "wrk");
    }
}
