//! Errors of the facility.

/// Why a facility could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The measurement clock claims a resolution of 0 Hz.
    #[error("the measurement clock reports a resolution of 0 Hz")]
    ZeroMeasureResolution,
    /// The backstop frequency is 0 or above the allowed maximum.
    #[error("interrupt clock resolution {hz} Hz is out of range (1 ..= {max} Hz)")]
    InterruptClockOutOfRange {
        /// What was asked for.
        hz: u64,
        /// The largest frequency allowed.
        max: u64,
    },
    /// The backstop would tick faster than the measurement clock can tell apart.
    #[error(
        "interrupt clock resolution {interrupt_hz} Hz exceeds the measurement resolution {measure_hz} Hz"
    )]
    InterruptFasterThanMeasure {
        /// The backstop frequency asked for.
        interrupt_hz: u64,
        /// The measurement clock's frequency.
        measure_hz: u64,
    },
    /// The finest wheel-slot width is not a power of two from 1 to 2^32 ticks.
    #[error("wheel slot width {ticks} ticks is not a power of two from 1 to 2^32")]
    SlotWidth {
        /// The width asked for.
        ticks: u64,
    },
}

/// Why an event could not be scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The delay is 2^63 − 1 ticks or more (half the clock's circle: a due time that far
    /// ahead would read as one already passed), or `now + T + 1` does not fit the
    /// facility's 64-bit time.
    #[error("a delay of {ticks} ticks is beyond the facility's range (under 2^63 - 1 ticks)")]
    DelayOverflow {
        /// The delay asked for.
        ticks: u64,
    },
    /// The deadline is earlier than the delay: the event could never fire in time.
    #[error("deadline {deadline} ticks is earlier than the delay {delay} ticks")]
    DeadlineBeforeDelay {
        /// The delay asked for.
        delay: u64,
        /// The deadline asked for.
        deadline: u64,
    },
    /// More events are pending than the slab can index (2^32 − 1).
    #[error("too many pending events (the limit is {limit})")]
    TooManyEvents {
        /// The limit.
        limit: u64,
    },
}
