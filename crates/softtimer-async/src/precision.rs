//! How precisely a runtime's timers fire: the idle policy's spin window, as a setting.

use std::time::Duration;

use softtimer_rt::SpinWindow;

/// How precisely timers fire, and what that costs: the idle policy's spin window.
///
/// A loop with nothing to run blocks in `epoll_wait` with a precise timeout (its timer slack
/// at 1 ns) until a window before the next due timer, then spins on trigger checks for the
/// rest. A blocked thread runs again a wake-up's latency after its timeout (tens of µs on a
/// virtual machine, a few on bare metal), so the window trades CPU for lateness:
///
/// | setting | spins | lateness | CPU per timer |
/// | --- | --- | --- | --- |
/// | [`Coarse`](Precision::Coarse) | never | one wake-up | one wake-up: the cheapest |
/// | [`Calibrated`](Precision::Calibrated) (default) | this machine's wake-up lateness for a wait as long as this one, as the loop's own wake-ups show it (its 90th percentile, starting from a probe's; before waits of 8 ms and more, nearly its whole tail, up to 200 µs) | a few µs | one wake-up and the window |
/// | [`Window(d)`](Precision::Window) | `d` | as `Calibrated` when `d` covers the wake-up lateness | one wake-up and `d` |
/// | [`Within(d)`](Precision::Within) | what keeps 99 % of wake-ups within `d` of their due time, learnt from the loop's own | aims at a p99 of `d`; no better than `Busy`'s, which is the host's floor | one wake-up and that window, more after a late stretch |
/// | [`Busy`](Precision::Busy) | through the whole backstop interval (1 ms) | the trigger check's | a core while a timer is due within 1 ms |
///
/// The default keeps `sleep(100 µs)`'s lateness p99 within the bound measured in
/// `docs/RESULTS.md`, at the CPU measured there (`cargo run --release -p softtimer-async
/// --example sleep_lateness` prints both for every setting). The setting is per runtime:
/// the loop has one idle policy, and it spins before whichever timer is due next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    /// Never spin: block until each due time; late by one wake-up. The cheapest.
    Coarse,
    /// Block until this machine's wake-up lateness (calibrated once per process) before each
    /// due time, and spin the rest. A longer wait wakes later (an idle CPU sinks deeper), so
    /// the loop keeps a window per wait length, starting from probes at 100 µs and 1 ms and
    /// following its own wake-ups (towards their 90th percentile; before waits of 8,192 µs
    /// and more, down from 200 µs towards one late wake-up in 300).
    #[default]
    Calibrated,
    /// Spin this long before each due time.
    Window(Duration),
    /// Keep timers' lateness within this at the 99th percentile, at the least spin that
    /// does it on this machine: the loop keeps a window per wait length and widens it when
    /// more than one wake-up in a hundred comes later than the window and `d`, and narrows
    /// it otherwise (`softtimer_rt::SpinWindow::Precision`). Lateness the host causes by
    /// descheduling the thread, spinning or not, no window removes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use softtimer_async::{Precision, Runtime, time::sleep};
    ///
    /// let rt = Runtime::builder()
    ///     .precision(Precision::Within(Duration::from_micros(5)))
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(async { sleep(Duration::from_micros(200)).await });
    /// assert_eq!(Precision::Within(Duration::from_micros(5)).name(), "within-5us");
    /// ```
    Within(Duration),
    /// Spin whenever a timer is due within the backstop interval: the paper's idle loop.
    Busy,
}

impl Precision {
    /// A short lower-case name (`coarse`, `calibrated`, `window-20us`, `within-5us`, `busy`).
    pub fn name(&self) -> String {
        match self {
            Precision::Coarse => "coarse".into(),
            Precision::Calibrated => "calibrated".into(),
            Precision::Window(d) => format!("window-{}us", d.as_micros()),
            Precision::Within(d) => format!("within-{}us", d.as_micros()),
            Precision::Busy => "busy".into(),
        }
    }

    pub(crate) fn spin_window(self, interrupt_hz: u64) -> SpinWindow {
        match self {
            Precision::Coarse => SpinWindow::Fixed(Duration::ZERO),
            Precision::Calibrated => SpinWindow::Calibrated,
            Precision::Window(d) => SpinWindow::Fixed(d),
            Precision::Within(d) => SpinWindow::Precision(d),
            Precision::Busy => {
                SpinWindow::Fixed(Duration::from_nanos(1_000_000_000 / interrupt_hz.max(1)))
            }
        }
    }
}
