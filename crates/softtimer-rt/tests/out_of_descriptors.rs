//! A loop built when the process is short of descriptors either fails to build, with the
//! error, or keeps its bound: never a loop whose backstop helper quietly could not start.
//! This file holds one test so that it has its process (and its descriptor table) to itself.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use softtimer::TriggerSource;
use softtimer_rt::{EventLoop, LoopConfig, RtError};

/// Opens `/dev/null` until the process is out of descriptors.
fn fill(held: &mut Vec<File>) {
    while let Ok(f) = File::open("/dev/null") {
        held.push(f);
    }
}

#[test]
fn a_loop_short_of_descriptors_fails_to_build_or_keeps_its_backstop() {
    // A small table, so that filling it is quick: what is open now, and 64 more.
    let open_now = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(16) as u64;
    let before = getrlimit(Resource::Nofile);
    let small = open_now + 64;
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(small),
            maximum: before.maximum,
        },
    )
    .expect("lowering the soft descriptor limit");

    let mut held = Vec::new();
    let (mut refused, mut built) = (0, 0);
    // Free 0, 1, 2, … descriptors before each build: each build runs out at a different
    // step (the loop's epoll set, its eventfds and timerfd, the helper's epoll set) until
    // one has enough.
    for free in 0..=16 {
        fill(&mut held);
        for _ in 0..free {
            held.pop();
        }
        let fired = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&fired);
        let made: Result<EventLoop<()>, RtError> =
            EventLoop::new(LoopConfig::default(), move |_, _| {
                counter.fetch_add(1, Ordering::Relaxed);
            });
        let mut ev = match made {
            Err(e) => {
                // The error says what ran out.
                let text = e.to_string();
                assert!(
                    text.contains("descriptors") || text.contains("Too many open files"),
                    "{free} free: {text}"
                );
                refused += 1;
                continue;
            }
            Ok(ev) => ev,
        };
        built += 1;
        // Built: an event is due in 200 µs and the loop's thread passes no trigger state, so
        // only the backstop's helper can fire it, within the bound (a millisecond or so).
        let t = ev.span(Duration::from_micros(200));
        ev.cx().schedule_soft_event(t, ()).expect("scheduled");
        let end = Instant::now() + Duration::from_secs(2);
        while fired.load(Ordering::Relaxed) == 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            fired.load(Ordering::Relaxed),
            1,
            "{free} free: a loop was built whose backstop never fired its event"
        );
        assert_eq!(ev.counters().fired(TriggerSource::Backstop), 1);
        drop(ev);
    }
    drop(held);
    setrlimit(Resource::Nofile, before).expect("restoring the descriptor limit");
    // Both happened: the table was short enough to refuse some builds, and some had enough.
    assert!(refused > 0 && built > 0, "refused {refused}, built {built}");
}
