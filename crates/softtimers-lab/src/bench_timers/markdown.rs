//! `bench timers`' report as Markdown.

use crate::harness::interval_label;
use crate::paper::PAPER_TABLE_I;
use crate::targets::targets_table;

use super::TimersReport;

/// The report as Markdown, with the paper's Table I beside it.
pub fn to_markdown(report: &TimersReport) -> String {
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
    let _ = writeln!(
        out,
        "| source | interval | events asked/s | delivered/s | delivered % | slowdown %, median [range] | µs per event | run time (s), median [range] |"
    );
    let _ = writeln!(
        out,
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"
    );
    for r in &report.rows {
        let interval = interval_label(r.source, r.interval_us);
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
        let _ = writeln!(
            out,
            "| {} | {interval} | {:.0} | {:.0} | {delivered} | {:.2} [{:.2}, {:.2}] | {per_event} | {:.3} [{:.3}, {:.3}]{} |",
            r.source.name(),
            r.events_asked_per_s,
            r.events_delivered_per_s,
            r.slowdown_pct,
            r.slowdown_range_pct.0,
            r.slowdown_range_pct.1,
            r.median_run_s,
            r.run_range_s.0,
            r.run_range_s.1,
            match (r.runs_cut_short, r.runs) {
                (0, _) => String::new(),
                (_, runs) if runs > 0 && runs < report.runs => format!(" * ({runs} runs)"),
                _ => " *".to_string(),
            },
        );
    }
    if report.rows.iter().any(|r| r.runs_cut_short > 0) {
        let cut_at = report
            .max_run_s
            .map_or(String::new(), |s| format!(" at {s:.0} s"));
        let dropped = report.cut_runs_enough.map_or(String::new(), |n| {
            format!("; after {n} such runs a configuration was not run again")
        });
        let _ = writeln!(
            out,
            "\n\\* Runs cut{cut_at}, their time and events extrapolated from the chunks \
             done{dropped}."
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
    let _ = writeln!(
        out,
        "Backstop wake-ups, and the timer machinery's system calls on the loop's core:\n\n| loop state | wake-ups/s | arms (timerfd_settime)/s | loop-core system calls/s | events/s |\n| --- | ---: | ---: | ---: | ---: |"
    );
    for w in &report.backstop_wakeups_per_s {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            w.state.name(),
            w.backstop_wakeups_per_s,
            w.backstop_arms_per_s,
            w.loop_core_syscalls_per_s,
            w.events_per_s
        );
    }
    let _ = writeln!(
        out,
        "\nA loop whose only work is one periodic event, by idle policy (dominated by: the cheapest policy of the same period with both a lower p99 and a lower CPU; blank: on the frontier):\n\n| period | policy | spin window (µs) | lateness p50 (µs) | p99 (µs) | max (µs) | loop CPU (%) | events | backstop wake-ups | dominated by |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    );
    for r in &report.idle_policy {
        let _ = writeln!(
            out,
            "| {} µs | {} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {} | {} | {} |",
            r.period_us,
            r.label(),
            r.spin_window_us,
            r.late_p50_us,
            r.late_p99_us,
            r.late_max_us,
            r.cpu_pct,
            r.events,
            r.backstop_wakeups,
            r.dominated_by.as_deref().unwrap_or("")
        );
    }
    out += "\n";
    out += &targets_table(&report.targets);
    out
}
