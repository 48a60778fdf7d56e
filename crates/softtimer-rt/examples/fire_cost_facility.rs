//! The facility alone firing one event per trigger state, for instruction counting under
//! `valgrind --tool=callgrind` (no threads, no epoll). `N` sets the number of triggers, `STEP`
//! the clock ticks between them (200 by default; `fire_cost_loop` uses 5000).
use softtimer::{SimClock, SoftTimers, TriggerSource};

fn main() {
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let step: u64 = std::env::var("STEP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let clock = SimClock::new(2_000_000_000);
    let mut timers: SoftTimers<(), SimClock> = SoftTimers::new(clock.clone()).unwrap();
    timers
        .schedule_soft_event(softtimer::Span::ZERO, ())
        .unwrap();
    let mut fired = 0;
    for _ in 0..n {
        clock.advance(step);
        fired += timers.trigger(TriggerSource::User, |t, ev| {
            t.schedule_at(ev.now, ()).unwrap();
        });
    }
    println!("{fired} fired");
}
