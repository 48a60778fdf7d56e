//! Helpers shared by the facility's integration tests: tick-valued time on a simulated clock.

#![allow(dead_code)]

/// A span of `t` ticks.
pub fn sp(t: u64) -> softtimer::Span {
    softtimer::Span::from_ticks(t)
}

/// The instant `t` ticks after the clock's origin.
pub fn at(t: u64) -> softtimer::Instant {
    softtimer::Instant::from_ticks(t)
}

/// The tick count of an instant.
pub fn ticks(i: softtimer::Instant) -> u64 {
    i.ticks()
}
