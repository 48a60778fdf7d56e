//! E11: the polling router's packet quota (Figs. 6-5, 6-6).

use std::fmt::Write as _;

use anyhow::Result;

use crate::harness::ExpOptions;
use crate::paper::PAPER_FIGS_6;
use crate::report::{Page, Section, StepResult};

use super::{
    Bench, Design, Flood, ForwardRow, RouterArgs, flood_seconds, forward_chart, forward_row,
    forward_table, runs, series_by,
};

pub(super) fn quotas(quick: bool) -> Vec<&'static str> {
    if quick {
        vec!["1", "10", "unlimited"]
    } else {
        vec!["1", "5", "10", "20", "100", "unlimited"]
    }
}

pub(super) fn e11_fractions(quick: bool) -> Vec<f64> {
    if quick {
        vec![1.0]
    } else {
        vec![0.2, 0.4, 0.7, 1.0]
    }
}

/// E11's result (`e11.json`).
pub type E11 = StepResult<ForwardRow, Flood>;

/// E11: the polling router with each quota, without and with screening.
pub fn e11(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E11> {
    let quick = options.length.quick;
    let flood_s = flood_seconds(quick);
    let (mut bench, max) =
        match Bench::begin(options, "eleven", Flood::unmeasured(flood_s), progress)? {
            Ok(begun) => begun,
            Err(skipped) => return Ok(skipped),
        };
    let total = runs("e11", quick) as f64;
    let mut rows = Vec::new();
    let mut done = 1.0;
    for screen in [false, true] {
        let design = Design {
            router: softtimers_tools::router::RouterDesign::Polling,
            screen,
        };
        for quota in quotas(quick) {
            for f in e11_fractions(quick) {
                progress(
                    done / total,
                    &format!("{}, quota {quota}, {:.0}/s", design.name(), f * max),
                );
                let args = RouterArgs {
                    quota: quota.to_string(),
                    ..RouterArgs::plain(design)
                };
                let p = bench.run(&args, (f * max) as u64, flood_s, false)?;
                rows.push(forward_row(design, quota, &p, false));
                done += 1.0;
            }
        }
    }
    progress(1.0, "done");
    Ok(E11::ran(
        options.length.mode(),
        Flood {
            flood_s,
            source_max_pps: max,
        },
        rows,
        Vec::new(),
    ))
}

impl Section for E11 {
    const FILE: &'static str = "e11.json";
    const TITLE: &'static str = "E11: the polling quota (livelock Figs. 6-5, 6-6)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "The polling router with each packet quota per turn, without and with the screening \
             stage (32-packet queue, feedback at 75 % / 25 %, 1 ms timeout); {:.1} s of flood \
             per run; source top rate {:.0} datagrams/s.\n",
            self.extra.flood_s, self.extra.source_max_pps
        );
        page.text(&forward_table(&self.rows));
        for (screen, file, title) in [
            (false, "e11_quota.png", "Polling quota, no screening"),
            (
                true,
                "e11_quota_screen.png",
                "Polling quota, with screening",
            ),
        ] {
            let series = series_by(
                self.rows
                    .iter()
                    .filter(|r| r.design.ends_with("+screen") == screen)
                    .map(|r| (r, format!("quota {}", r.quota))),
            );
            if series.iter().any(|s| s.points.len() > 1) {
                let image = forward_chart(page, (file, title), title, series)?;
                let _ = writeln!(page, "\n{image}");
            }
        }
        page.paper(PAPER_FIGS_6);
        Ok(())
    }
}
