//! `bench timers`' report as Markdown.

use crate::harness::interval_label;
use crate::paper::PAPER_TABLE_I;
use crate::table::Table;
use crate::targets::targets_table;

use super::{TimerRow, TimersReport};

/// The report as Markdown, with the paper's Table I beside it.
pub fn to_markdown(report: &TimersReport) -> String {
    // Not run every round (older reports, which did not count runs, say 0).
    let ran_fewer = |r: &TimerRow| r.runs > 0 && r.runs < report.runs;
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Workload: {} chunks of pointer chasing, one `epoll_wait` per chunk; {:.0} trigger \
         states/s; median of {} runs without events: {:.3} s. Loop thread {}; backstop \
         thread real-time: {}.\n",
        report.chunks,
        report.trigger_states_per_s,
        report.runs,
        report.baseline_run_s,
        report
            .pinned_cpu
            .map_or("not pinned".to_string(), |c| format!("pinned to CPU {c}")),
        report
            .backstop_realtime
            .map_or("no backstop".to_string(), |r| r.to_string()),
    );
    let mut table = Table::new(
        "source | interval: | events asked/s: | delivered/s: | delivered %: | slowdown %, median [range] | µs per event: | run time (s), median [range]",
    );
    for r in &report.rows {
        let (delivered, per_event) = if r.events_asked_per_s > 0.0 {
            (
                format!(
                    "{:.1}",
                    r.events_delivered_per_s / r.events_asked_per_s * 100.0
                ),
                format!("{:.3}", r.cost_per_event_us),
            )
        } else {
            ("—".to_string(), "—".to_string())
        };
        let cut = match (r.runs_cut_short, ran_fewer(r)) {
            (0, false) => String::new(),
            (0, true) => format!(" † ({} runs)", r.runs),
            (_, true) => format!(" * ({} runs)", r.runs),
            (_, false) => " *".to_string(),
        };
        table.row(&[
            &r.source.name(),
            &interval_label(r.source, r.interval_us),
            &format!("{:.0}", r.events_asked_per_s),
            &format!("{:.0}", r.events_delivered_per_s),
            &delivered,
            &format!(
                "{:.2} [{:.2}, {:.2}]",
                r.slowdown_pct, r.slowdown_range_pct.0, r.slowdown_range_pct.1
            ),
            &per_event,
            &format!(
                "{:.3} [{:.3}, {:.3}]{cut}",
                r.median_run_s, r.run_range_s.0, r.run_range_s.1
            ),
        ]);
    }
    out += &table.finish();
    if report.rows.iter().any(|r| r.runs_cut_short > 0) {
        let cut_at = report
            .max_run_s
            .map_or(String::new(), |s| format!(" at {s} s"));
        let dropped = report.cut_runs_enough.map_or(String::new(), |n| {
            format!("; after {n} such runs a configuration was not run again")
        });
        let _ = writeln!(
            out,
            "\n\\* Runs cut{cut_at}, their time and events extrapolated from the chunks \
             done{dropped}."
        );
    }
    let dear_dropped = report
        .rows
        .iter()
        .any(|r| r.runs_cut_short == 0 && ran_fewer(r));
    if let (true, Some(pct), Some(n)) = (
        dear_dropped,
        report.dear_slowdown_pct,
        report.cut_runs_enough,
    ) {
        let _ = writeln!(
            out,
            "\n† Not run again after {n} runs whose median was {pct:.0} % or more over the \
             baseline's: their slowdown is known to a few percent of itself by then."
        );
    }
    let _ = writeln!(out, "\n{PAPER_TABLE_I}\n");
    let b = &report.backstop;
    let _ = writeln!(
        out,
        "The backstop while the loop thread computes without system calls ({} events due 97 µs \
         apart, X = {:.0} µs): {:.1} % fired by the backstop thread; lateness past due median \
         {:.0} µs, p99 {:.0} µs, max {:.0} µs; {:.2} % later than X (the paper's bound), {:.2} % \
         later than X + X/4.\n",
        b.events,
        b.x_us,
        b.pct_fired_by_backstop,
        b.median_us,
        b.p99_us,
        b.max_us,
        b.pct_over_x,
        b.pct_over_x_plus_quarter
    );
    out += "Backstop wake-ups, and the timer machinery's system calls on the loop's core:\n\n";
    let mut table = Table::new(
        "loop state | wake-ups/s: | arms (timerfd_settime)/s: | loop-core system calls/s: | events/s:",
    );
    for w in &report.backstop_wakeups_per_s {
        table.row(&[
            &w.state.name(),
            &format!("{:.0}", w.backstop_wakeups_per_s),
            &format!("{:.0}", w.backstop_arms_per_s),
            &format!("{:.0}", w.loop_core_syscalls_per_s),
            &format!("{:.0}", w.events_per_s),
        ]);
    }
    out += &table.finish();
    out += "\nA loop whose only work is one periodic event, by idle policy (where there are several interleaved rounds, the lateness of all their events together and the mean of their CPU; dominated by: the cheapest policy of the same period with both a lower p99 and a lower CPU; blank: on the frontier):\n\n";
    out += &Table::of(&report.idle_policy)
        .text("period:", |r| format!("{} µs", r.period_us))
        .text("policy", |r| r.label())
        .fixed("spin window (µs):", 1, |r| r.spin_window_us)
        .fixed("lateness p50 (µs):", 2, |r| r.late_p50_us)
        .fixed("p99 (µs):", 1, |r| r.late_p99_us)
        .text("p99 by round (µs):", |r| by_round(&r.late_p99_us_rounds))
        .fixed("max (µs):", 1, |r| r.late_max_us)
        .fixed("loop CPU (%):", 1, |r| r.cpu_pct)
        .text("CPU by round (%):", |r| by_round(&r.cpu_pct_rounds))
        .text("events:", |r| &r.events)
        .text("backstop wake-ups:", |r| &r.backstop_wakeups)
        .text("dominated by", |r| r.dominated_by.as_deref().unwrap_or(""))
        .table()
        .finish();
    out += "\n";
    out += &targets_table(&report.targets);
    out
}

/// Each round's figure, one decimal, `/`-separated (blank for a row of one run).
fn by_round(figures: &[f64]) -> String {
    if figures.len() < 2 {
        return String::new();
    }
    figures
        .iter()
        .map(|f| format!("{f:.1}"))
        .collect::<Vec<_>>()
        .join(" / ")
}
