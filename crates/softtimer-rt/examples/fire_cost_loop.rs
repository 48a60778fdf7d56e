//! The event loop's trigger state, for instruction counting under `valgrind --tool=cachegrind`
//! (the loop's counterpart of `fire_cost_facility`): `N` trigger states on a simulated clock,
//! with `PART` choosing what each one does:
//!
//! * `fire` (default): fires one event whose handler re-arms it at the trigger's time (E1's
//!   "an event at every trigger state");
//! * `nothing-due`: an event is pending far ahead, so each trigger is the check alone;
//! * `schedule`: no trigger; each step schedules an event through `LoopCx` and cancels it;
//! * `pollute`: nothing but the pollution below (the baseline to subtract).
//!
//! `POLLUTE_KB` (default 0) touches that much other memory between steps, as the kernel's
//! work between two trigger states would: with 64 or more (beyond the simulated 48 KB L1),
//! the first-level misses per step count the cache lines a step touches.
//!
//! Run it twice with different `N` and divide the difference in instructions by the
//! difference in `N`: that is the cost per step, start-up excluded.
//!
//! `N=100000 valgrind --tool=cachegrind target/release/examples/fire_cost_loop`
use softtimer::{Clock, SimClock, Span, TriggerSource};
use softtimer_rt::{EventLoop, LoopConfig};

fn main() {
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let part = std::env::var("PART").unwrap_or_else(|_| "fire".into());
    let pollute_kb: usize = std::env::var("POLLUTE_KB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut other = vec![0u64; pollute_kb * 128];
    let mut pollute = move || {
        for line in other.chunks_mut(8) {
            line[0] = line[0].wrapping_add(1);
        }
        std::hint::black_box(&other);
    };
    let clock = SimClock::new(2_600_000_000);
    let mut ev: EventLoop<(), SimClock> = EventLoop::with_clock(
        LoopConfig {
            capacity: 16,
            ..LoopConfig::default()
        },
        clock.clone(),
        |t, fired| {
            let _ = t.schedule_at(fired.now, ());
        },
    )
    .expect("event loop");
    let mut cx = ev.cx();
    let mut done = 0usize;
    match part.as_str() {
        "fire" => {
            cx.schedule_soft_event(Span::ZERO, ()).unwrap();
            for _ in 0..n {
                clock.advance(5_000);
                pollute();
                done += cx.trigger(TriggerSource::User);
            }
        }
        "pollute" => {
            for _ in 0..n {
                clock.advance(5_000);
                pollute();
            }
        }
        "nothing-due" => {
            cx.schedule_soft_event(Span::from_ticks(u64::MAX / 4), ())
                .unwrap();
            for _ in 0..n {
                clock.advance(5_000);
                pollute();
                done += cx.trigger(TriggerSource::User);
            }
        }
        "schedule" => {
            let far = cx.schedule_soft_event(Span::from_ticks(1 << 40), ());
            for _ in 0..n {
                clock.advance(5_000);
                pollute();
                let id = cx
                    .schedule_soft_event(Span::from_ticks(26_000), ())
                    .unwrap();
                done += usize::from(cx.cancel(id).is_some());
            }
            drop(far);
        }
        other => panic!("PART must be fire, nothing-due, schedule or pollute, not {other}"),
    }
    let c = ev.counters();
    println!(
        "{part}: {n} steps, {done} done, fired {}, backstop arms {}, at {}",
        c.fired_total(),
        c.backstop_arms,
        clock.now().ticks()
    );
}
