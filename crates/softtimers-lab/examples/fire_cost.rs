//! Where the cost of firing an event at every trigger state goes: the bare facility against
//! the event loop's trigger (lock, counters, publish). `cargo run --release --example fire_cost`
use std::time::Instant;

use softtimer::{SoftTimers, SystemClock, TriggerSource};
use softtimer_rt::{EventLoop, LoopConfig};

fn main() {
    let n: u32 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let mut timers: SoftTimers<()> = SoftTimers::new(SystemClock::new()).unwrap();
    timers.schedule_soft_event(0, ()).unwrap();
    for round in 0..3 {
        let start = Instant::now();
        let mut fired = 0;
        for _ in 0..n {
            fired += timers.trigger(TriggerSource::User, |t, ev| {
                t.schedule_at(ev.now, ()).unwrap();
            });
        }
        println!(
            "facility   round {round}: {:.1} ns per trigger, {fired} fired",
            start.elapsed().as_nanos() as f64 / f64::from(n)
        );
    }
    let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), |t, ev| {
        t.schedule_at(ev.now, ()).unwrap();
    })
    .unwrap();
    ev.cx().schedule_soft_event(0, ()).unwrap();
    for round in 0..3 {
        let start = Instant::now();
        let mut fired = 0;
        let mut cx = ev.cx();
        for _ in 0..n {
            fired += cx.trigger(TriggerSource::User);
        }
        println!(
            "event loop round {round}: {:.1} ns per trigger, {fired} fired",
            start.elapsed().as_nanos() as f64 / f64::from(n)
        );
    }
    let mut quiet: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
    let start = Instant::now();
    let mut cx = quiet.cx();
    for _ in 0..n {
        cx.trigger(TriggerSource::User);
    }
    println!(
        "event loop, nothing due: {:.1} ns per trigger",
        start.elapsed().as_nanos() as f64 / f64::from(n)
    );
}
