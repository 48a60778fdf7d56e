//! Where the cost of firing an event at every trigger state goes: the bare facility against
//! the event loop's trigger (lock, counters, rules, publish), with a breakdown.
//!
//! `cargo run --release -p softtimer-rt --example fire_cost` (`N=…` sets the triggers per
//! round). Pin it (`taskset -c 1`) on a quiet machine.
use std::time::Instant as WallClock;

use softtimer::{Clock, SoftTimers, SystemClock, TriggerSource};
use softtimer_rt::{EventLoop, LoopConfig};

fn per_op(start: WallClock, n: u32) -> f64 {
    start.elapsed().as_nanos() as f64 / f64::from(n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The cost of one call of `op`, ns: the median over `rounds` rounds of `n` calls each.
fn cost(rounds: usize, n: u32, mut op: impl FnMut()) -> f64 {
    median(
        (0..rounds)
            .map(|_| {
                let start = WallClock::now();
                for _ in 0..n {
                    op();
                }
                per_op(start, n)
            })
            .collect(),
    )
}

fn main() {
    let n: u32 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let rounds = 5;
    let clock = SystemClock::new();

    let clock_read = cost(rounds, n, || {
        std::hint::black_box(clock.now_unordered());
    });

    let mut timers: SoftTimers<()> = SoftTimers::new(clock).unwrap();
    timers
        .schedule_soft_event(softtimer::Span::ZERO, ())
        .unwrap();
    let facility = cost(rounds, n, || {
        timers.trigger(TriggerSource::User, |t, ev| {
            t.schedule_at(ev.now, ()).unwrap();
        });
    });

    let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), |t, ev| {
        t.schedule_at(ev.now, ()).unwrap();
    })
    .unwrap();
    ev.cx()
        .schedule_soft_event(softtimer::Span::ZERO, ())
        .unwrap();
    let mut fired = 0;
    let mut cx = ev.cx();
    let in_loop = cost(rounds, n, || fired += cx.trigger(TriggerSource::User));
    assert!(
        fired as u64 >= u64::from(n) * rounds as u64 / 2,
        "events fired: {fired}"
    );

    let mut quiet: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
    let mut cx = quiet.cx();
    let nothing_due = cost(rounds, n, || {
        cx.trigger(TriggerSource::User);
    });

    println!("clock read (unordered)             {clock_read:6.1} ns");
    println!("loop trigger, nothing due          {nothing_due:6.1} ns");
    println!("facility trigger, fire + re-arm    {facility:6.1} ns");
    println!("loop trigger, fire + re-arm        {in_loop:6.1} ns");
    println!(
        "  of which beyond the facility     {:6.1} ns (lock, counters, rules, publish)",
        in_loop - facility
    );
    println!(
        "  of which beyond a clock read     {:6.1} ns",
        in_loop - clock_read
    );
    println!(
        "backstop arms during the run: {}",
        ev.counters().backstop_arms
    );
    println!(
        "uncontended mutex lock+unlock      {:6.1} ns",
        mutex_cost(n)
    );
}

#[allow(dead_code)]
fn mutex_cost(n: u32) -> f64 {
    let m = std::sync::Mutex::new(0u64);
    cost(1, n, || *m.lock().unwrap() += 1)
}
