//! Typed time: a point on the measurement clock ([`Instant`]) and a length of time in its
//! ticks ([`Span`]).
//!
//! Both are plain tick counts underneath, but they are not interchangeable: an instant plus
//! a span is an instant, two instants differ by a span, and instants compare on a circle
//! (like the kernel's `time_after`), so a counter that wraps past `u64::MAX` still orders
//! correctly as long as the two times are within 2^63 ticks of each other (146 years at
//! 2 GHz). Nanoseconds are [`std::time::Duration`]; converting a `Duration` to a `Span`
//! needs the clock's frequency ([`Span::from_duration`], [`crate::Clock::span`]).

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::time::Duration;

use crate::clock::{nanos_to_ticks, ticks_to_nanos};

/// A point in time on a measurement clock, in its ticks.
///
/// Instants compare on a circle: `a < b` when `b` is less than 2^63 ticks after `a`, even
/// across a wrap of the 64-bit counter. The order is therefore total only among instants
/// within 2^63 ticks of each other, which every instant a running program holds is.
///
/// ```
/// use softtimer::{Instant, Span};
/// let near_wrap = Instant::from_ticks(u64::MAX - 1);
/// let later = near_wrap + Span::from_ticks(5);
/// assert_eq!(later.ticks(), 3);
/// assert!(later > near_wrap);
/// assert_eq!(later - near_wrap, Span::from_ticks(5));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Instant(u64);

/// A length of time in ticks of a measurement clock.
///
/// ```
/// use std::time::Duration;
/// use softtimer::Span;
/// // On a 2 GHz clock, 10 µs is 20,000 ticks; conversions round up, so a delay is never
/// // shortened by them.
/// let t = Span::from_duration(Duration::from_micros(10), 2_000_000_000);
/// assert_eq!(t.ticks(), 20_000);
/// assert_eq!(t.to_duration(2_000_000_000), Duration::from_micros(10));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Span(u64);

impl Instant {
    /// The instant whose raw tick count is `ticks`.
    #[inline(always)]
    pub const fn from_ticks(ticks: u64) -> Self {
        Instant(ticks)
    }

    /// The raw tick count.
    #[inline(always)]
    pub const fn ticks(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this is; zero if it is not after it.
    #[inline(always)]
    pub fn saturating_since(self, earlier: Instant) -> Span {
        if self.is_after(earlier) {
            Span(self.0.wrapping_sub(earlier.0))
        } else {
            Span::ZERO
        }
    }

    /// How long after `earlier` this is, or `None` if it is before it.
    #[inline(always)]
    pub fn checked_since(self, earlier: Instant) -> Option<Span> {
        (!earlier.is_after(self)).then(|| Span(self.0.wrapping_sub(earlier.0)))
    }

    /// `span` later, wrapping like the counter.
    #[inline(always)]
    const fn wrapping_add(self, span: Span) -> Instant {
        Instant(self.0.wrapping_add(span.0))
    }

    /// `span` earlier, wrapping like the counter.
    #[inline(always)]
    const fn wrapping_sub(self, span: Span) -> Instant {
        Instant(self.0.wrapping_sub(span.0))
    }

    /// Whether this is strictly after `other` (on the circle).
    #[inline(always)]
    pub const fn is_after(self, other: Instant) -> bool {
        (self.0.wrapping_sub(other.0) as i64) > 0
    }

    /// Whether this is strictly before `other` (on the circle).
    #[inline(always)]
    pub const fn is_before(self, other: Instant) -> bool {
        other.is_after(self)
    }
}

impl Span {
    /// No time.
    pub const ZERO: Span = Span(0);
    /// The longest span.
    pub const MAX: Span = Span(u64::MAX);

    /// A span of `ticks` ticks.
    #[inline(always)]
    pub const fn from_ticks(ticks: u64) -> Self {
        Span(ticks)
    }

    /// The number of ticks.
    #[inline(always)]
    pub const fn ticks(self) -> u64 {
        self.0
    }

    /// `duration` in ticks of a clock at `hz`, rounded up (saturating).
    pub fn from_duration(duration: Duration, hz: u64) -> Self {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        Span(nanos_to_ticks(nanos, hz))
    }

    /// `micros` µs in ticks of a clock at `hz`, rounded up (saturating).
    pub fn from_micros(micros: u64, hz: u64) -> Self {
        Span(nanos_to_ticks(micros.saturating_mul(1000), hz))
    }

    /// This span as a `Duration` on a clock at `hz` (rounded down, saturating).
    pub fn to_duration(self, hz: u64) -> Duration {
        Duration::from_nanos(ticks_to_nanos(self.0, hz))
    }

    /// This span in nanoseconds on a clock at `hz` (rounded down, saturating).
    pub fn as_nanos(self, hz: u64) -> u64 {
        ticks_to_nanos(self.0, hz)
    }

    /// Sum, or `None` on overflow.
    #[inline(always)]
    pub const fn checked_add(self, other: Span) -> Option<Span> {
        match self.0.checked_add(other.0) {
            Some(t) => Some(Span(t)),
            None => None,
        }
    }

    /// Sum, saturating at [`Span::MAX`].
    #[inline(always)]
    pub const fn saturating_add(self, other: Span) -> Span {
        Span(self.0.saturating_add(other.0))
    }

    /// Difference, saturating at zero.
    #[inline(always)]
    pub const fn saturating_sub(self, other: Span) -> Span {
        Span(self.0.saturating_sub(other.0))
    }

    /// This span `n` times (saturating).
    #[inline(always)]
    pub const fn saturating_mul(self, n: u64) -> Span {
        Span(self.0.saturating_mul(n))
    }

    /// Whether this is no time at all.
    #[inline(always)]
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl PartialOrd for Instant {
    #[inline(always)]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Instant {
    /// On the circle: see [`Instant`].
    #[inline(always)]
    fn cmp(&self, other: &Self) -> Ordering {
        (self.0.wrapping_sub(other.0) as i64).cmp(&0)
    }
}

/// Implements each listed operator `Op::op(Lhs, Rhs) -> Output` by calling the function after
/// `=` (inlined); an `OpAssign::op_assign` after that adds the assigning form, `a op= b` as
/// `a = a op b`.
macro_rules! operators {
    ($(
        $(#[$doc:meta])*
        $Op:ident::$op:ident($Lhs:ty, $Rhs:ty) -> $Out:ty = $via:path
        $(, $OpAssign:ident::$op_assign:ident)?;
    )*) => {$(
        impl $Op<$Rhs> for $Lhs {
            type Output = $Out;
            $(#[$doc])*
            #[inline(always)]
            fn $op(self, rhs: $Rhs) -> $Out {
                $via(self, rhs)
            }
        }
        $(
            impl $OpAssign<$Rhs> for $Lhs {
                #[inline(always)]
                fn $op_assign(&mut self, rhs: $Rhs) {
                    *self = $via(*self, rhs);
                }
            }
        )?
    )*};
}

operators! {
    /// Wraps, like the counter it reads.
    Add::add(Instant, Span) -> Instant = Instant::wrapping_add, AddAssign::add_assign;
    /// Wraps, like the counter it reads.
    Sub::sub(Instant, Span) -> Instant = Instant::wrapping_sub, SubAssign::sub_assign;
    /// The span from `rhs` to `self`, zero if `rhs` is not before `self` (use
    /// [`Instant::checked_since`] to tell).
    Sub::sub(Instant, Instant) -> Span = Instant::saturating_since;
    /// Saturates at [`Span::MAX`].
    Add::add(Span, Span) -> Span = Span::saturating_add, AddAssign::add_assign;
    /// Saturates at zero.
    Sub::sub(Span, Span) -> Span = Span::saturating_sub;
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instant({})", self.0)
    }
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Span({} ticks)", self.0)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ticks", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_order_across_the_wrap() {
        let a = Instant::from_ticks(u64::MAX - 10);
        let b = a + Span::from_ticks(20);
        assert!(b > a);
        assert!(a.is_before(b) && b.is_after(a));
        assert_eq!(b.ticks(), 9);
        assert_eq!(b - a, Span::from_ticks(20));
        assert_eq!(a - b, Span::ZERO);
        assert_eq!(a.checked_since(b), None);
        assert_eq!(b.checked_since(a), Some(Span::from_ticks(20)));
        assert_eq!(a.max(b), b);
    }

    #[test]
    fn spans_convert_rounding_up() {
        let hz = 3_000_000_000;
        let s = Span::from_duration(Duration::from_nanos(1), hz);
        assert_eq!(s.ticks(), 3);
        let s = Span::from_duration(Duration::from_nanos(1), 1_000_000);
        assert_eq!(s.ticks(), 1, "a positive delay never rounds to zero");
        assert_eq!(Span::from_micros(u64::MAX, 1_000_000_000), Span::MAX);
        assert_eq!(Span::MAX + Span::from_ticks(1), Span::MAX);
        assert_eq!(Span::ZERO - Span::from_ticks(1), Span::ZERO);
    }
}
