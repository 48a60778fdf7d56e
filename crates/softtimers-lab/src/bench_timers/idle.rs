//! The idle loop: the wake-ups each backstop state costs, and the idle policies (block,
//! spin a fixed window, spin always, and the default calibrated window) against events
//! 100 µs to 10 ms apart, each period's rows placed on their frontier of loop CPU against
//! p99 lateness ([`crate::frontier`]).

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use anyhow::Result;
use rustix::event::{EventfdFlags, eventfd};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, Span};
use softtimer_rt::{EventLoop, IdlePolicy, Interest, LoopConfig, SpinWindow};

use crate::frontier;
use crate::harness::thread_cpu_ns;
use crate::summary::{median, percentile};
use crate::targets::{Goal, TargetCheck};

/// What the loop is doing while its backstop's wake-ups are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoopState {
    /// Nothing pending, blocked in `epoll_wait`.
    Idle,
    /// An event every 100 µs, and trigger states keep up.
    Busy,
    /// An event pending while the loop thread computes without system calls.
    Computing,
}

impl LoopState {
    /// Every state, in report order.
    pub const ALL: [LoopState; 3] = [LoopState::Idle, LoopState::Busy, LoopState::Computing];
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            LoopState::Idle => "idle",
            LoopState::Busy => "busy",
            LoopState::Computing => "computing",
        }
    }
}

/// Backstop wake-ups per second in one state of the loop.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WakeupRow {
    /// What the loop was doing.
    pub state: LoopState,
    /// Backstop timer wake-ups per second.
    #[serde(deserialize_with = "crate::summary::num")]
    pub backstop_wakeups_per_s: f64,
    /// Backstop timer arms (system calls) per second.
    #[serde(deserialize_with = "crate::summary::num")]
    pub backstop_arms_per_s: f64,
    /// System calls the timer machinery made on the loop's core per second
    /// ([`softtimer_rt::Counters::loop_core_syscalls`]): 0 while a busy loop keeps up and its
    /// helper runs on another CPU.
    #[serde(default, deserialize_with = "crate::summary::num")]
    pub loop_core_syscalls_per_s: f64,
    /// Events fired per second.
    #[serde(deserialize_with = "crate::summary::num")]
    pub events_per_s: f64,
}

/// How a loop whose only work is a periodic event waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdlePolicyKind {
    /// Block with a precise timeout, then spin the measured wake-up lateness (the default).
    Calibrated,
    /// Never spin (timer slack 1 ns).
    Block,
    /// Never spin, with the kernel's default 50 µs timer slack: the loop before it set its
    /// own.
    BlockDefaultSlack,
    /// Spin whenever an event is due within a backstop period: the paper's idle loop.
    Spin,
    /// A fixed spin window between blocking and spinning (the row's `spin_window_us`).
    Window,
}

impl IdlePolicyKind {
    /// Every policy, in report order.
    pub const ALL: [IdlePolicyKind; 5] = [
        IdlePolicyKind::Calibrated,
        IdlePolicyKind::Block,
        IdlePolicyKind::BlockDefaultSlack,
        IdlePolicyKind::Window,
        IdlePolicyKind::Spin,
    ];
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            IdlePolicyKind::Calibrated => "calibrated",
            IdlePolicyKind::Block => "block",
            IdlePolicyKind::BlockDefaultSlack => "block-default-slack",
            IdlePolicyKind::Spin => "spin",
            IdlePolicyKind::Window => "window",
        }
    }
}

/// The fixed spin windows measured between blocking and spinning, µs: about this machine's
/// wake-up lateness, and a step either side of it.
pub(super) const FIXED_WINDOWS_US: [u64; 3] = [10, 30, 100];

/// Every idle policy measured at each period, with its spin window: the default, then the
/// fixed windows from none to a whole millisecond.
pub(super) fn idle_settings() -> Vec<(IdlePolicyKind, SpinWindow)> {
    let mut out = vec![
        (IdlePolicyKind::Calibrated, SpinWindow::Calibrated),
        (IdlePolicyKind::Block, SpinWindow::Fixed(Duration::ZERO)),
        (
            IdlePolicyKind::BlockDefaultSlack,
            SpinWindow::Fixed(Duration::ZERO),
        ),
    ];
    out.extend(FIXED_WINDOWS_US.map(|us| {
        (
            IdlePolicyKind::Window,
            SpinWindow::Fixed(Duration::from_micros(us)),
        )
    }));
    out.push((
        IdlePolicyKind::Spin,
        SpinWindow::Fixed(Duration::from_millis(1)),
    ));
    out
}

/// A loop whose only work is one event re-armed every `period_us`, pinned, for a while.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdlePolicyRow {
    /// The event's period, µs.
    pub period_us: u64,
    /// How the loop waits.
    pub policy: IdlePolicyKind,
    /// The spin window before a wait of the period, µs (the calibrated policy's as the run
    /// left it).
    #[serde(deserialize_with = "crate::summary::num")]
    pub spin_window_us: f64,
    /// Median lateness past the due time, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub late_p50_us: f64,
    /// 99th percentile of lateness, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub late_p99_us: f64,
    /// The largest lateness, µs (a stall past the backstop's bound shows here).
    #[serde(default, deserialize_with = "crate::summary::num")]
    pub late_max_us: f64,
    /// CPU time of the loop thread over wall time, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub cpu_pct: f64,
    /// Events fired.
    pub events: usize,
    /// Backstop wake-ups.
    pub backstop_wakeups: u64,
    /// The cheapest other policy at the same period with both a lower p99 lateness and a
    /// lower CPU (its name and window), or null: the row is on its period's frontier.
    #[serde(default)]
    pub dominated_by: Option<String>,
    /// Lateness p99 in each interleaved round, µs, where the row reads all the rounds'
    /// events together (empty in older reports, whose rows are one run each).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::summary::nums"
    )]
    pub late_p99_us_rounds: Vec<f64>,
    /// The loop's CPU in each round, %, as `late_p99_us_rounds`.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::summary::nums"
    )]
    pub cpu_pct_rounds: Vec<f64>,
}

impl IdlePolicyRow {
    /// Its name in tables: the policy, and the window where it is a fixed one.
    pub fn label(&self) -> String {
        match self.policy {
            IdlePolicyKind::Window => format!("window {:.0} µs", self.spin_window_us),
            p => p.name().to_string(),
        }
    }

    /// The row as a point on its period's frontier: (CPU %, p99 lateness µs).
    pub fn point(&self) -> (f64, f64) {
        (self.cpu_pct, self.late_p99_us)
    }

    /// One setting's row over interleaved rounds of equal length (runs of the same period
    /// and policy), `late_us` the lateness of every event of them all: the lateness
    /// quantiles and largest of all the events together (as one run of the rounds' length
    /// would give: a round of three at a 10 ms period holds 66 events, whose p99 lies
    /// between its two latest), the mean of the rounds' CPU, their events and backstop wake-ups summed, the
    /// window as the last round left it, each round's p99 and CPU kept for the spread.
    /// `None` for no rounds.
    pub fn over_rounds(rounds: &[IdlePolicyRow], late_us: &[f64]) -> Option<IdlePolicyRow> {
        let of =
            |figure: fn(&IdlePolicyRow) -> f64| -> Vec<f64> { rounds.iter().map(figure).collect() };
        let mut row = rounds.last()?.clone();
        row.late_p50_us = median(late_us);
        row.late_p99_us = percentile(late_us, 99.0);
        row.late_max_us = percentile(late_us, 100.0);
        row.cpu_pct = of(|r| r.cpu_pct).iter().sum::<f64>() / rounds.len() as f64;
        row.events = rounds.iter().map(|r| r.events).sum();
        row.backstop_wakeups = rounds.iter().map(|r| r.backstop_wakeups).sum();
        row.late_p99_us_rounds = of(|r| r.late_p99_us);
        row.cpu_pct_rounds = of(|r| r.cpu_pct);
        row.dominated_by = None;
        Some(row)
    }
}

/// One run of an idle-policy setting: its row, the lateness of each event, µs, and the
/// idle policy it left (for the setting's next round to go on from).
pub(super) struct IdleRun {
    pub row: IdlePolicyRow,
    pub late_us: Vec<f64>,
    pub left: IdlePolicy,
}

/// Every setting of [`idle_settings`] at every period of [`IDLE_POLICY_PERIODS_US`], in
/// `rounds` interleaved rounds of `run(period) / rounds` each, so that each setting meets the
/// host's slow and quiet spells alike (the rows are compared with each other, and a host
/// that stalls one run of a second would otherwise decide the comparison): each round runs
/// every period's settings, starting one setting further along than the round before. Each
/// round's loop goes on from the idle policy the setting's previous round left, so that the
/// calibrated policy learns its windows once, as in one run, not once a round. The rows,
/// each over its rounds ([`IdlePolicyRow::over_rounds`]: the events of all of them
/// together), in period then setting order, placed on their frontier.
pub(super) fn measure_idle_policies(
    rounds: usize,
    run: impl Fn(u64) -> Duration,
) -> Result<Vec<IdlePolicyRow>> {
    let settings = idle_settings();
    let rounds = rounds.max(1);
    // runs[period index][setting index]: one row per round.
    // Per period and setting: each round's row, every event's lateness, the policy left.
    type Setting = (Vec<IdlePolicyRow>, Vec<f64>, Option<IdlePolicy>);
    let mut runs: Vec<Vec<Setting>> = (0..IDLE_POLICY_PERIODS_US.len())
        .map(|_| (0..settings.len()).map(|_| Default::default()).collect())
        .collect();
    for round in 0..rounds {
        for (p, &period_us) in IDLE_POLICY_PERIODS_US.iter().enumerate() {
            let time = run(period_us) / rounds as u32;
            for k in 0..settings.len() {
                let s = (k + round) % settings.len();
                let (rows, late, learnt) = &mut runs[p][s];
                let done = measure_idle_policy(period_us, settings[s], time, *learnt)?;
                rows.push(done.row);
                late.extend(done.late_us);
                *learnt = Some(done.left);
            }
        }
    }
    let mut rows: Vec<IdlePolicyRow> = runs
        .iter()
        .flatten()
        .filter_map(|(rows, late, _)| IdlePolicyRow::over_rounds(rows, late))
        .collect();
    place_on_frontier(&mut rows);
    Ok(rows)
}

/// Sets each row's `dominated_by`: the cheapest other row of its period that beats it on
/// both CPU and p99 lateness.
pub(super) fn place_on_frontier(rows: &mut [IdlePolicyRow]) {
    let points: Vec<(f64, f64)> = rows.iter().map(IdlePolicyRow::point).collect();
    for i in 0..rows.len() {
        let period = rows[i].period_us;
        let by = frontier::cheapest_beating(&points, i, |j| rows[j].period_us == period);
        rows[i].dominated_by = by.map(|j| rows[j].label());
    }
}

/// The event periods of the idle-policy rows, µs.
pub(super) const IDLE_POLICY_PERIODS_US: [u64; 5] = [100, 300, 1000, 3000, 10_000];

/// Stops `ev` after `time`, from another thread.
pub(super) fn stop_after(ev: &EventLoop<()>, time: Duration) {
    let stop = ev.stop_handle();
    std::thread::spawn(move || {
        std::thread::sleep(time);
        stop.stop();
    });
}

/// Runs a loop in one `state` for `time` and counts the backstop's wake-ups and arms.
pub(super) fn measure_wakeups(state: LoopState, time: Duration) -> Result<WakeupRow> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let hz = softtimer::SystemClock::new().resolution_hz();
    let period = Span::from_micros(100, hz);
    let fired = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&fired);
    let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), move |t, f| {
        counter.fetch_add(1, Ordering::Relaxed);
        let _ = t.schedule_at(f.due + period, ());
    })?;
    let start = Instant::now();
    match state {
        LoopState::Idle => {
            stop_after(&ev, time);
            ev.run(|_, _| {})?;
        }
        LoopState::Busy => {
            ev.cx().schedule_soft_event(period, ())?;
            stop_after(&ev, time);
            ev.run(|_, _| {})?;
        }
        LoopState::Computing => {
            // One callback that computes for `time` without a system call, an event pending.
            let kick: OwnedFd = eventfd(1, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
            ev.cx().register(&kick, Interest::READABLE, 1)?;
            ev.cx().schedule_soft_event(period, ())?;
            ev.run(|cx, _| {
                let mut acc = 0u64;
                while start.elapsed() < time {
                    for k in 0..1000u64 {
                        acc = acc.wrapping_mul(6364136223846793005).wrapping_add(k);
                    }
                }
                std::hint::black_box(acc);
                cx.stop();
            })?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let c = ev.counters();
    Ok(WakeupRow {
        state,
        backstop_wakeups_per_s: c.backstop_wakeups as f64 / secs,
        backstop_arms_per_s: c.backstop_arms as f64 / secs,
        loop_core_syscalls_per_s: c.loop_core_syscalls as f64 / secs,
        events_per_s: fired.load(Ordering::Relaxed) as f64 / secs,
    })
}

/// A loop whose only work is one event re-armed every `period_us`, waiting under `policy`,
/// starting from `learnt` (the idle policy a loop of the same setting left, to go on from
/// its windows) where given.
pub(super) fn measure_idle_policy(
    period_us: u64,
    (policy, spin_window): (IdlePolicyKind, SpinWindow),
    time: Duration,
    learnt: Option<IdlePolicy>,
) -> Result<IdleRun> {
    use std::sync::{Arc, Mutex};
    let hz = softtimer::SystemClock::new().resolution_hz();
    let period = Span::from_micros(period_us, hz);
    let late = Arc::new(Mutex::new(Vec::with_capacity(
        (time.as_micros() as usize / period_us as usize) + 16,
    )));
    let sink = Arc::clone(&late);
    let mut ev: EventLoop<()> = EventLoop::new(
        LoopConfig {
            spin_window,
            ..LoopConfig::default()
        },
        move |t, f| {
            if let Ok(mut v) = sink.lock() {
                v.push(f.late().as_nanos(hz) as f64 / 1000.0);
            }
            let _ = t.schedule_at(f.due + period, ());
        },
    )?;
    // The kernel's stock slack (50 µs) for this run; the loop's 1 ns comes back when the
    // guard is dropped.
    let stock_slack = (policy == IdlePolicyKind::BlockDefaultSlack)
        .then(softtimers_tools::cpu::stock_timer_slack);
    if let Some(learnt) = learnt {
        ev.set_idle_policy(learnt);
    }
    ev.cx().schedule_soft_event(period, ())?;
    stop_after(&ev, time);
    let (cpu0, start) = (thread_cpu_ns(), Instant::now());
    ev.run(|_, _| {})?;
    let cpu_pct = (thread_cpu_ns() - cpu0) as f64 / start.elapsed().as_nanos() as f64 * 100.0;
    drop(stock_slack);
    let v = late.lock().map(|v| v.clone()).unwrap_or_default();
    let row = IdlePolicyRow {
        period_us,
        policy,
        // The window before a wait of the period, as the run left it (the calibrated
        // policy's follows the wake-ups).
        spin_window_us: ev.idle_policy().window_for(period).as_nanos(hz) as f64 / 1000.0,
        late_p50_us: median(&v),
        late_p99_us: percentile(&v, 99.0),
        late_max_us: percentile(&v, 100.0),
        cpu_pct,
        events: v.len(),
        backstop_wakeups: ev.counters().backstop_wakeups,
        dominated_by: None,
        late_p99_us_rounds: Vec::new(),
        cpu_pct_rounds: Vec::new(),
    };
    Ok(IdleRun {
        row,
        late_us: v,
        left: ev.idle_policy(),
    })
}

pub(super) fn wakeup_and_idle_targets(
    wakeups: &[WakeupRow],
    idle: &[IdlePolicyRow],
) -> Vec<TargetCheck> {
    let mut targets = Vec::new();
    if let Some(w) = wakeups.iter().find(|w| w.state == LoopState::Idle) {
        targets.push(TargetCheck::new(
            "backstop wake-ups per second, idle with nothing pending",
            Goal::at_most(0.0, "0"),
            w.backstop_wakeups_per_s,
            crate::paper::ANCHOR_DESIGN,
        ));
    }
    for (period, cpu_goal) in [(100, 15.0), (1000, 3.0)] {
        if let Some(r) = idle
            .iter()
            .find(|r| r.period_us == period && r.policy == IdlePolicyKind::Calibrated)
        {
            targets.push(TargetCheck::new(
                format!("an event every {period} µs: lateness p99, µs (calibrated idle policy)"),
                Goal::at_most(5.0, "<= 5"),
                r.late_p99_us,
                crate::paper::ANCHOR_DESIGN,
            ));
            targets.push(TargetCheck::new(
                format!("an event every {period} µs: CPU of the loop, %"),
                Goal::at_most(cpu_goal, &format!("<= {cpu_goal}")),
                r.cpu_pct,
                crate::paper::ANCHOR_DESIGN,
            ));
        }
    }
    for period in IDLE_POLICY_PERIODS_US {
        let of_period: Vec<&IdlePolicyRow> =
            idle.iter().filter(|r| r.period_us == period).collect();
        let Some(default) = of_period
            .iter()
            .find(|r| r.policy == IdlePolicyKind::Calibrated)
        else {
            continue;
        };
        let beaters = of_period
            .iter()
            .filter(|r| frontier::beats(r.point(), default.point()))
            .count();
        targets.push(TargetCheck::new(
            format!(
                "an event every {period} µs: fixed spin windows with both a lower p99 and a lower \
                 CPU than the default"
            ),
            Goal::at_most(0.0, "0"),
            beaters as f64,
            crate::paper::ANCHOR_DESIGN,
        ));
    }
    targets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made_up(
        period_us: u64,
        policy: IdlePolicyKind,
        window_us: f64,
        cpu: f64,
        p99: f64,
    ) -> IdlePolicyRow {
        IdlePolicyRow {
            period_us,
            policy,
            spin_window_us: window_us,
            late_p50_us: p99 / 2.0,
            late_p99_us: p99,
            late_max_us: p99 * 2.0,
            cpu_pct: cpu,
            events: 100,
            backstop_wakeups: 0,
            dominated_by: None,
            late_p99_us_rounds: Vec::new(),
            cpu_pct_rounds: Vec::new(),
        }
    }

    #[test]
    fn the_default_is_dominated_only_by_a_window_of_its_own_period_better_on_both() {
        use IdlePolicyKind::*;
        let mut rows = vec![
            made_up(100, Calibrated, 25.0, 50.0, 5.0),
            made_up(100, Block, 0.0, 25.0, 40.0),
            made_up(100, Spin, 1000.0, 100.0, 1.0),
            made_up(1000, Calibrated, 25.0, 10.0, 20.0),
            made_up(1000, Window, 30.0, 8.0, 10.0),
            made_up(1000, Window, 10.0, 7.0, 12.0),
            // Cheaper and better than the 100 µs default, but another period's.
            made_up(1000, Block, 0.0, 4.0, 4.0),
        ];
        place_on_frontier(&mut rows);
        assert_eq!(rows[0].dominated_by, None);
        assert_eq!(rows[1].dominated_by, None);
        assert_eq!(rows[3].dominated_by.as_deref(), Some("block"));
        assert_eq!(rows[4].dominated_by.as_deref(), Some("block"));
        let targets = wakeup_and_idle_targets(&[], &rows);
        let frontier: Vec<&TargetCheck> = targets
            .iter()
            .filter(|t| t.figure.contains("fixed spin windows"))
            .collect();
        assert_eq!(frontier.len(), 2);
        assert!(frontier[0].met && frontier[0].figure.contains("every 100 µs"));
        assert!(
            !frontier[1].met && frontier[1].measured == 3.0,
            "{:?}",
            frontier[1]
        );
        // The names say which window.
        assert_eq!(rows[5].label(), "window 10 µs");
        assert_eq!(idle_settings().len(), 4 + FIXED_WINDOWS_US.len());
    }

    #[test]
    fn a_row_over_rounds_reads_all_their_events_together_so_one_stalled_round_does_not_decide_it() {
        use IdlePolicyKind::*;
        // Three rounds of 100 events of the default at 1 ms, each 1 µs late but two of the
        // second's, which the host stalled for 60 µs: that round's p99 is 60.
        let rounds = [
            made_up(1000, Calibrated, 30.0, 2.2, 1.0),
            made_up(1000, Calibrated, 31.0, 2.9, 60.0),
            made_up(1000, Calibrated, 32.0, 2.4, 1.0),
        ];
        let mut late = vec![1.0; 300];
        late[150] = 60.0;
        late[151] = 60.0;
        let row = IdlePolicyRow::over_rounds(&rounds, &late).expect("rounds");
        // Two stalled events in 300 are under one in a hundred.
        assert_eq!(row.late_p99_us, 1.0);
        assert_eq!(row.late_p50_us, 1.0);
        assert_eq!(row.late_max_us, 60.0);
        assert!((row.cpu_pct - 2.5).abs() < 1e-9, "{}", row.cpu_pct);
        // Every round's events, the last round's window, each round's figures.
        assert_eq!(row.events, 300);
        assert_eq!(row.spin_window_us, 32.0);
        assert_eq!(row.late_p99_us_rounds, vec![1.0, 60.0, 1.0]);
        assert_eq!(row.cpu_pct_rounds, vec![2.2, 2.9, 2.4]);
        assert!(IdlePolicyRow::over_rounds(&[], &[]).is_none());
        // A fixed window that beat the stalled round on both is not better than the rounds
        // together: the default stays on the frontier.
        let window = made_up(1000, Window, 30.0, 2.3, 4.0);
        assert!(frontier::beats(window.point(), rounds[1].point()));
        let mut rows = vec![row, window];
        place_on_frontier(&mut rows);
        assert_eq!(rows[0].dominated_by, None);
        // The JSON keeps the rounds, and a row from an older report (one run, no rounds
        // field) still reads.
        let json = serde_json::to_string(&rows[0]).expect("json");
        let back: IdlePolicyRow = serde_json::from_str(&json).expect("read back");
        assert_eq!(back.late_p99_us_rounds, rows[0].late_p99_us_rounds);
        let old = json
            .replace(",\"late_p99_us_rounds\":[1.0,60.0,1.0]", "")
            .replace(",\"cpu_pct_rounds\":[2.2,2.9,2.4]", "");
        assert!(!old.contains("rounds"), "{old}");
        let old: IdlePolicyRow = serde_json::from_str(&old).expect("an older row");
        assert!(old.late_p99_us_rounds.is_empty() && old.cpu_pct_rounds.is_empty());
        // A round with no events has no p99: written as null, read back as NaN.
        let mut empty_round = rows[0].clone();
        empty_round.late_p99_us_rounds[1] = f64::NAN;
        let json = serde_json::to_string(&empty_round).expect("json");
        let back: IdlePolicyRow = serde_json::from_str(&json).expect("a null round reads");
        assert!(back.late_p99_us_rounds[1].is_nan());
    }
}
