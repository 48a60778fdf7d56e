//! Where a trigger state came from.

/// The kind of place a trigger state was reached, after the paper's Table V.
///
/// The event loop in `softtimer-rt` tags every return from a system call it makes; the
/// periodic and deadline backstops have their own tags so that statistics can tell how often
/// the coarse clock, rather than a trigger state, had to fire an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TriggerSource {
    /// Return from a system call not covered by a more specific tag.
    Syscall = 0,
    /// Return from a send (`send`, `sendmmsg`, `write` on a socket): the paper's ip-output.
    Send = 1,
    /// Return from a receive (`recv`, `recvmmsg`, `read`): the paper's ip-intr.
    Recv = 2,
    /// Return from `accept`.
    Accept = 3,
    /// End of a batch of handlers in the event loop.
    Loop = 4,
    /// The idle loop, polling while a soft event is due soon.
    Idle = 5,
    /// The periodic backstop (the paper's interrupt clock).
    Backstop = 6,
    /// The one-shot deadline timer (Section 5.9).
    Deadline = 7,
    /// A trigger state the application declared itself.
    User = 8,
    /// A hardware-timer baseline (a periodic `timerfd` or timer signal), not a trigger state.
    Timer = 9,
}

impl TriggerSource {
    /// How many sources there are.
    pub const COUNT: usize = 10;
    /// Every source, in the order of their index.
    pub const ALL: [TriggerSource; Self::COUNT] = [
        TriggerSource::Syscall,
        TriggerSource::Send,
        TriggerSource::Recv,
        TriggerSource::Accept,
        TriggerSource::Loop,
        TriggerSource::Idle,
        TriggerSource::Backstop,
        TriggerSource::Deadline,
        TriggerSource::User,
        TriggerSource::Timer,
    ];

    /// A stable lower-case name, used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            TriggerSource::Syscall => "syscall",
            TriggerSource::Send => "send",
            TriggerSource::Recv => "recv",
            TriggerSource::Accept => "accept",
            TriggerSource::Loop => "loop",
            TriggerSource::Idle => "idle",
            TriggerSource::Backstop => "backstop",
            TriggerSource::Deadline => "deadline",
            TriggerSource::User => "user",
            TriggerSource::Timer => "timer",
        }
    }

    /// Position in [`TriggerSource::ALL`].
    #[inline(always)]
    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for TriggerSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
