//! The real measurement clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use softtimer::{Clock, ClockSource, SystemClock, monotonic_nanos};

/// Threads publish the largest clock value they have read; any read made after observing a
/// published value must not be smaller. Counts violations instead of stopping at the first,
/// so a failure says how often.
#[test]
fn monotonic_across_threads() {
    let clock = SystemClock::new();
    let published = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let published = Arc::clone(&published);
            std::thread::spawn(move || {
                let mut violations = 0u64;
                for _ in 0..200_000 {
                    let seen = published.load(Ordering::Acquire);
                    let now = clock.now().ticks();
                    if now < seen {
                        violations += 1;
                    }
                    published.fetch_max(now, Ordering::AcqRel);
                }
                violations
            })
        })
        .collect();
    let violations: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(
        violations,
        0,
        "{:?} went backwards across threads",
        clock.source()
    );
}

/// Over 100 ms, ticks / resolution agrees with CLOCK_MONOTONIC within 1 %.
#[test]
fn resolution_consistent_with_clock_monotonic() {
    let clock = SystemClock::new();
    let (t0, n0) = (clock.now(), monotonic_nanos());
    std::thread::sleep(Duration::from_millis(100));
    let (t1, n1) = (clock.now(), monotonic_nanos());
    let measured_ns = clock.duration(t1 - t0).as_nanos() as f64;
    let reference_ns = (n1 - n0) as f64;
    let error = (measured_ns - reference_ns).abs() / reference_ns;
    assert!(
        error < 0.01,
        "{:?} at {} Hz: {measured_ns} ns vs CLOCK_MONOTONIC {reference_ns} ns",
        clock.source(),
        clock.resolution_hz()
    );
}

#[test]
fn detection_explains_itself() {
    let info = SystemClock::info();
    assert!(!info.reason.is_empty());
    match info.source {
        ClockSource::Tsc => assert!(info.hz >= 100_000_000),
        ClockSource::Monotonic => assert_eq!(info.hz, 1_000_000_000),
    }
    let mono = SystemClock::monotonic();
    assert_eq!(mono.resolution_hz(), 1_000_000_000);
    let a = mono.now();
    assert!(mono.now() >= a);
}
