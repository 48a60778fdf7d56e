//! The saturated workload of `softtimers bench timers`, alone, for counting what pending events
//! cost a busy loop: an always-readable eventfd makes every pass one `epoll_wait` (a trigger
//! state) followed by a chunk of pointer chasing, while a soft event re-arms itself every
//! `INTERVAL_US` µs (`every`: at every trigger state; `none`: nothing scheduled; `off`: no timer
//! machinery at all). It prints the loop's counters; run it under `strace -c -f`, `perf stat
//! --per-thread` or `valgrind --tool=cachegrind` to see where the cost goes.
//!
//! `INTERVAL_US=10 CHUNKS=200000 CPU=1 cargo run --release -p softtimers-lab --example busy_cost`
//! (`ARRAY_MB` sets the chased array's size, 64 by default; `STEPS` the steps per chunk, 32).
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::event::{EventfdFlags, eventfd};
use softtimer::{Clock, Span, SystemClock};
use softtimer_rt::{EventLoop, Interest, LoopConfig, TimerMode};
use softtimers_lab::bench_timers::pointer_chase_array;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Each thread of this process: name, voluntary and involuntary context switches.
fn thread_switches() -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        out.push((
            field("Name:"),
            field("voluntary_ctxt_switches:").parse().unwrap_or(0),
            field("nonvoluntary_ctxt_switches:").parse().unwrap_or(0),
        ));
    }
    out
}

fn main() {
    let interval = std::env::var("INTERVAL_US").unwrap_or_else(|_| "10".into());
    let chunks: u64 = env("CHUNKS", 200_000);
    let steps: usize = env("STEPS", 32);
    let array_mb: usize = env("ARRAY_MB", 64);
    if let Ok(cpu) = std::env::var("CPU")
        && let Ok(cpu) = cpu.parse::<usize>()
    {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).expect("pinning to CPU");
    }
    let array = pointer_chase_array((array_mb << 20) / 4);
    let hz = SystemClock::new().resolution_hz();
    let (mode, every) = match interval.as_str() {
        "off" => (TimerMode::Off, None),
        "none" => (TimerMode::Soft, None),
        "every" => (TimerMode::Soft, Some(Span::ZERO)),
        us => (
            TimerMode::Soft,
            Some(Span::from_micros(us.parse().expect("INTERVAL_US"), hz)),
        ),
    };
    let config = LoopConfig {
        mode,
        capacity: 16,
        ..LoopConfig::default()
    };
    let period = every.unwrap_or(Span::ZERO);
    let mut ev: EventLoop<()> = EventLoop::new(config, move |timers, fired| {
        let next = if period.is_zero() {
            fired.now
        } else {
            fired.due + period
        };
        let _ = timers.schedule_at(next, ());
    })
    .expect("event loop");
    let work: OwnedFd = eventfd(1, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC).unwrap();
    ev.cx().register(&work, Interest::READABLE, 1).unwrap();
    if let Some(t) = every {
        ev.cx().schedule_soft_event(t, ()).unwrap();
    }
    let mut position = 0u32;
    let mut remaining = chunks;
    let (cpu0, start) = (cpu_ns(), Instant::now());
    ev.run(|cx, _| {
        for _ in 0..steps {
            position = array[position as usize];
        }
        remaining -= 1;
        if remaining == 0 {
            cx.stop();
        }
    })
    .unwrap();
    let (wall, cpu) = (start.elapsed(), Duration::from_nanos(cpu_ns() - cpu0));
    std::hint::black_box(position);
    let c = ev.counters();
    let switches = thread_switches();
    let placement = ev.helper_placement();
    let helpers = ev.stop_helpers();
    let secs = wall.as_secs_f64();
    println!("interval {interval}, {chunks} chunks of {steps} steps over {array_mb} MB");
    println!("wall {wall:?}, loop thread cpu {cpu:?}");
    println!(
        "fired {} ({:.0}/s), backstop arms {} ({:.0}/s), backstop wake-ups {}, watcher nudges {}",
        c.fired_total(),
        c.fired_total() as f64 / secs,
        c.backstop_arms,
        c.backstop_arms as f64 / secs,
        c.backstop_wakeups,
        c.watcher_nudges,
    );
    println!(
        "helper {placement:?}; timer system calls on the loop's core {} ({:.0}/s)",
        c.loop_core_syscalls,
        c.loop_core_syscalls as f64 / secs
    );
    for (name, voluntary, involuntary) in switches {
        println!("thread {name}: {voluntary} voluntary, {involuntary} involuntary switches");
    }
    println!(
        "helper cpu: backstop {:?}, watcher {:?}",
        Duration::from_nanos(helpers.backstop_ns),
        Duration::from_nanos(helpers.watcher_ns)
    );
}
