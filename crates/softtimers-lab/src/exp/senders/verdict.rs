//! The senders' verdict: each row's place on its link's cost frontier, the targets, and the
//! section with its frontier plot.

use std::fmt::Write as _;

use anyhow::Result;

use super::{
    CLIENT_CPU, NetPath, SENDER_CPU, SenderRow, SenderRun, Senders, Setting, Tool, Unbeaten,
};
use crate::frontier;
use crate::plot::{LineChart, Series, line_chart};
use crate::report::{Page, Section};
use crate::summary::{median, paired_ratios};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck};

/// Marks each row's place on its link's frontier (CPU %, inter-arrival stddev), names the
/// cheapest soft-timer `pace` setting beating each iperf3 row (`pace --timer timerfd` is the
/// baseline, not the claim), and returns the iperf3 settings none beats.
pub(super) fn place_on_frontier(rows: &mut [SenderRow]) -> Vec<Unbeaten> {
    let mut unbeaten = Vec::new();
    for link in [NetPath::Loopback, NetPath::Veth] {
        let on_link: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].link == link).collect();
        let points: Vec<(f64, f64)> = on_link.iter().map(|&i| rows[i].point()).collect();
        for k in frontier::frontier(&points) {
            rows[on_link[k]].on_frontier = true;
        }
        for (k, &i) in on_link.iter().enumerate() {
            if rows[i].sender != Tool::Iperf3 {
                continue;
            }
            let beater =
                frontier::cheapest_beating(&points, k, |j| rows[on_link[j]].options.is_soft());
            rows[i].beaten_by = beater.map(|j| rows[on_link[j]].setting.clone());
            if rows[i].beaten_by.is_none() {
                unbeaten.push(Unbeaten {
                    link,
                    setting: rows[i].setting.clone(),
                });
            }
        }
    }
    unbeaten
}

/// The targets, per link: every iperf3 setting beaten on both axes by a `pace` setting (on
/// the medians); and `pace`'s default never dearer per packet than its timerfd sender, at
/// equal or better stddev (medians of per-round ratios).
pub(super) fn checks(
    rows: &[SenderRow],
    configs: &[(NetPath, Setting)],
    runs: &[Vec<SenderRun>],
) -> Vec<TargetCheck> {
    let series = |path: NetPath, setting: Setting, f: &dyn Fn(&SenderRun) -> f64| {
        configs
            .iter()
            .position(|&c| c == (path, setting))
            .map(|i| runs[i].iter().map(f).collect::<Vec<f64>>())
    };
    let stddev = |r: &SenderRun| r.sink.interarrival_stddev_us;
    let cpu_per_packet = |r: &SenderRun| r.cpu_ns as f64 / r.sent.max(1) as f64;
    let mut out = Vec::new();
    for path in [NetPath::Loopback, NetPath::Veth] {
        let iperf3: Vec<&SenderRow> = rows
            .iter()
            .filter(|r| r.link == path && r.sender == Tool::Iperf3)
            .collect();
        if !iperf3.is_empty() {
            let unbeaten = iperf3.iter().filter(|r| r.beaten_by.is_none()).count();
            out.push(TargetCheck::new(
                format!(
                    "iperf3 -u settings not beaten on CPU and stddev by a soft pace setting, {}",
                    path.name()
                ),
                Goal::at_most(0.0, &format!("0 of {}", iperf3.len())),
                unbeaten as f64,
                crate::paper::ANCHOR_IPERF3,
            ));
        }
        let (soft, timerfd) = (Setting::PACE_DEFAULT, Setting::PACE_TIMERFD);
        if let (Some(s), Some(t), Some(s_sd), Some(t_sd)) = (
            series(path, soft, &cpu_per_packet),
            series(path, timerfd, &cpu_per_packet),
            series(path, soft, &stddev),
            series(path, timerfd, &stddev),
        ) {
            out.push(TargetCheck::new(
                format!("CPU per paced packet, timerfd / soft, {}", path.name()),
                Goal::at_least(1.0, ">= 1"),
                median(&paired_ratios(&t, &s)),
                crate::paper::ANCHOR_TIMERFD,
            ));
            out.push(TargetCheck::new(
                format!("inter-arrival stddev, soft / timerfd, {}", path.name()),
                Goal::at_most(1.0, "<= 1"),
                median(&paired_ratios(&s_sd, &t_sd)),
                crate::paper::ANCHOR_TIMERFD,
            ));
        }
    }
    out
}

/// The frontier plot's lines: per link, the frontier of `pace` on soft timers and iperf3's
/// three settings, each in order of CPU.
fn frontier_series(rows: &[SenderRow]) -> Vec<Series> {
    let mut out = Vec::new();
    for link in [NetPath::Loopback, NetPath::Veth] {
        for tool in [Tool::Pace, Tool::Iperf3] {
            // Pace's line is its soft-timer settings' frontier, the one the iperf3 settings
            // are judged against (its timerfd sender is the baseline).
            let of: Vec<&SenderRow> = rows
                .iter()
                .filter(|r| r.link == link && r.sender == tool)
                .filter(|r| tool == Tool::Iperf3 || r.options.is_soft())
                .collect();
            let points: Vec<(f64, f64)> = of.iter().map(|r| r.point()).collect();
            let line: Vec<(f64, f64)> = match tool {
                Tool::Pace => frontier::frontier(&points)
                    .into_iter()
                    .map(|i| points[i])
                    .collect(),
                Tool::Iperf3 => {
                    let mut p: Vec<(f64, f64)> = points
                        .into_iter()
                        .filter(|p| p.0.is_finite() && p.1.is_finite())
                        .collect();
                    p.sort_by(|a, b| a.0.total_cmp(&b.0));
                    p
                }
            };
            if !line.is_empty() {
                let what = match tool {
                    Tool::Pace => "pace on soft timers, its frontier",
                    Tool::Iperf3 => "iperf3 -u",
                };
                out.push(Series {
                    label: format!("{what}, {}", link.name()),
                    points: line,
                });
            }
        }
    }
    out
}

impl Section for Senders {
    const FILE: &'static str = "senders.json";
    const TITLE: &'static str = "Paced senders against iperf3 -u: the cost frontier";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "Each setting sends {:.0} Mbit/s of {} B datagrams for {} s, pinned to CPU {SENDER_CPU}; \
             its own receiver and a capture of the port (`softtimers sink --observe`, kernel \
             timestamps) on CPU {CLIENT_CPU}. CPU is the sender's whole CPU time \
             (`getrusage`). Bursts: datagrams closer than a quarter of the target interval. \
             B: against a constant bottleneck 10 % faster than the target rate. \
             Median of {} round(s); stddev [range]. On the frontier: no other setting on the \
             link is as cheap and as precise (CPU %, inter-arrival stddev).\n",
            self.extra.rate_bps as f64 / 1e6,
            self.extra.size,
            self.extra.seconds,
            self.extra.rounds,
        );
        let _ = writeln!(page, "veth link: {}.\n", self.extra.veth);
        if let Some(why) = &self.extra.iperf3_missing {
            let _ = writeln!(page, "iperf3 rows missing: {why}.\n");
        }
        let mut table = Table::new(
            "link | sender | setting | Mbit/s: | lost: | CPU %: | CPU per packet (µs): | inter-arrival mean (µs): | stddev (µs) [range]: | p99 (µs): | gaps > 1 ms: | longest burst: | B: | frontier",
        );
        for r in &self.rows {
            let place = match (&r.beaten_by, r.on_frontier) {
                (Some(by), _) => format!("beaten by {by}"),
                (None, true) => "on it".into(),
                (None, false) => String::new(),
            };
            table.row(&[
                &r.link.name(),
                &r.sender.name(),
                &r.setting,
                &format!("{:.2}", r.rate_bps / 1e6),
                &r.lost,
                &format!("{:.1}", r.cpu_pct),
                &format!("{:.1}", r.cpu_ns_per_packet / 1000.0),
                &format!("{:.2}", r.interarrival_mean_us),
                &format!(
                    "{:.1} [{:.1}, {:.1}]",
                    r.interarrival_stddev_us,
                    r.interarrival_stddev_range.0,
                    r.interarrival_stddev_range.1
                ),
                &format!("{:.1}", r.interarrival_p99_us),
                &r.gaps_over_1ms,
                &format!("{:.0}", r.longest_burst),
                &format!("{:.2e}", r.burstiness_index),
                &place,
            ]);
        }
        page.table(table);
        page.text("\n");
        if self.extra.frontier_dominated.is_empty() {
            page.text(
                "Every iperf3 setting is beaten on both axes by a soft-timer `pace` setting.\n\n",
            );
        } else {
            let names: Vec<String> = self
                .extra
                .frontier_dominated
                .iter()
                .map(|u| format!("{} ({})", u.setting, u.link.name()))
                .collect();
            let _ = writeln!(
                page,
                "iperf3 settings no soft-timer `pace` setting beats on both axes: {}.\n",
                names.join(", ")
            );
        }
        let series = frontier_series(&self.rows);
        if !series.is_empty() {
            let chart = LineChart::from_origin(
                "Sender CPU against inter-arrival stddev, 100 Mbit/s",
                ("sender CPU (% of a core)", "inter-arrival stddev (µs)"),
                series,
                1.0,
                (1.05, 1.05),
            );
            let image = page.plot("senders_frontier.png", "frontier", |path| {
                line_chart(path, &chart)
            })?;
            let _ = writeln!(page, "{image}\n");
        }
        page.targets(&self.targets);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::senders::{PaceSetting, Setting};

    fn made_up_row(link: NetPath, setting: Setting, cpu_pct: f64, stddev: f64) -> SenderRow {
        SenderRow {
            link,
            sender: setting.tool(),
            setting: setting.label(),
            options: setting,
            rate_bps: 1e8,
            packets: 100,
            lost: 0,
            cpu_pct,
            cpu_ns_per_packet: 1.0,
            interarrival_mean_us: 117.0,
            interarrival_stddev_us: stddev,
            interarrival_stddev_range: (stddev, stddev),
            interarrival_p99_us: 200.0,
            gaps_over_1ms: 0,
            longest_burst: 1.0,
            burstiness_index: 0.0,
            on_frontier: false,
            beaten_by: None,
        }
    }

    #[test]
    fn the_frontier_names_each_iperf3_setting_no_pace_setting_beats() {
        let burst = Setting::Pace(PaceSetting {
            per_wakeup: 8,
            ..PaceSetting::DEFAULT
        });
        let fine = Setting::Iperf3 {
            pacing_timer_us: Some(10),
        };
        let (lo, veth) = (NetPath::Loopback, NetPath::Veth);
        let mut rows = vec![
            made_up_row(lo, Setting::PACE_DEFAULT, 20.0, 15.0),
            made_up_row(lo, burst, 4.0, 100.0),
            made_up_row(lo, Setting::IPERF3_DEFAULT, 6.0, 300.0),
            made_up_row(lo, fine, 30.0, 30.0),
            // On veth the fine iperf3 setting is cheaper than any pace setting as precise:
            // and a pace setting on the other link does not count.
            made_up_row(veth, Setting::PACE_DEFAULT, 20.0, 15.0),
            made_up_row(veth, Setting::PACE_TIMERFD, 5.0, 10.0),
            made_up_row(veth, Setting::IPERF3_DEFAULT, 6.0, 300.0),
            made_up_row(veth, fine, 10.0, 30.0),
        ];
        let unbeaten = place_on_frontier(&mut rows);
        assert_eq!(
            unbeaten,
            vec![
                Unbeaten {
                    link: veth,
                    setting: Setting::IPERF3_DEFAULT.label(),
                },
                Unbeaten {
                    link: veth,
                    setting: fine.label(),
                },
            ]
        );
        assert_eq!(rows[2].beaten_by.as_deref(), Some(burst.label().as_str()));
        assert_eq!(
            rows[3].beaten_by.as_deref(),
            Some(Setting::PACE_DEFAULT.label().as_str())
        );
        assert!(rows[0].on_frontier && rows[1].on_frontier);
        assert!(!rows[2].on_frontier && !rows[3].on_frontier);
        // The timerfd sender beats both on veth, but it is the baseline, not the claim.
        assert!(rows[5].on_frontier && !rows[6].on_frontier && !rows[7].on_frontier);
        let checks = checks(&rows, &[], &[]);
        assert_eq!(checks.len(), 2);
        assert!(checks[0].met, "{checks:?}");
        assert!(!checks[1].met && checks[1].measured == 2.0, "{checks:?}");
        // The plot: pace's frontier and iperf3's settings, per link, in order of CPU.
        let series = frontier_series(&rows);
        assert_eq!(series.len(), 4);
        assert_eq!(series[0].points, vec![(4.0, 100.0), (20.0, 15.0)]);
        assert_eq!(series[1].points, vec![(6.0, 300.0), (30.0, 30.0)]);
        // The rows read back as written.
        let json = serde_json::to_string(&rows[3]).unwrap();
        let back: SenderRow = serde_json::from_str(&json).unwrap();
        assert_eq!(back.options, fine);
        assert_eq!(back.beaten_by, rows[3].beaten_by);
    }
}
