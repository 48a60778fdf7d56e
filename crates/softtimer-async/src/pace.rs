//! Paced sends (stub).
use crate::clock::RuntimeClock;
use crate::executor::TimerEvent;
use softtimer::{Instant, SoftTimers};
pub(crate) struct Departures;
impl Departures {
    pub(crate) fn on_departure(
        &self,
        _t: &mut SoftTimers<TimerEvent, RuntimeClock>,
        _now: Instant,
    ) {
    }
}
