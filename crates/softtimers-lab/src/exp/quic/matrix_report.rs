//! `quic`'s report section: the bulk and timer-driven tables, what per-packet pacing costs,
//! the emulator's bottleneck beside `tbf`, and the charts.

use std::fmt::Write as _;

use anyhow::Result;
use softtimer_quic::TransmitCauses;
use softtimers_tools::path::COMMAND_SPIN;

use crate::exp::bottleneck::{self, BottleneckRow};
use crate::plot::{LineChart, Series, line_chart};
use crate::report::{Page, Section};
use crate::table::Table;

use super::{
    BULK_50M_SMALL_QUEUE, LOOPBACK_RR, QuicResult, QuicRow, RR, cdf_series, distinct,
    latency_cdf_chart, ratios, spread, timer_driven, variant_arms,
};

impl QuicResult {
    /// What per-packet pacing costs: CPU against spacing, by variant.
    pub(super) fn pacing_variants_table(&self) -> String {
        let arms = variant_arms(&self.rows, &self.extra.pacing_variants);
        let mut md = format!(
            "\n### What per-packet pacing costs\n\n{BULK_50M_SMALL_QUEUE}, both sides with the same settings: one `sendmsg` and one wake-up per datagram are what pacing every datagram costs in user space (the driver blocks until a departure rather than spinning before it, and spins only before quinn's own timers); `spin-0` never spins, not even before those, `2-per-departure` sends two datagrams (one GSO send) per departure time at twice the interval, as Linux's TCP sends at least two segments per paced burst. The variants run right after `soft-paced` in each round, their order rotating. Medians over rounds with [min, max]; the CPU ratio is per round; idle spin is the loops' clock time spent spinning.\n\n"
        );
        let mut table = Table::new(
            "arm | spin window (µs): | server sendmsg calls: | CPU per MB, both sides (ms): | of which idle spin (ms): | CPU / quinn-tokio: | sender gap stddev (µs): | receiver inter-arrival stddev (µs): | burstiness index: | bottleneck drops: | goodput (Mbit/s):",
        );
        for stack in distinct(&arms, |r| r.stack.clone()) {
            let col = cells(&arms, |r| r.stack == stack);
            let ratio = if stack == "quinn-tokio" {
                "1".to_string()
            } else {
                spread(
                    ratios(&arms, BULK_50M_SMALL_QUEUE, &stack, |r| r.cpu_ns_per_mb),
                    2,
                )
            };
            table.row(&[
                &stack,
                &col(|r| r.spin_window_us, 1.0, 1),
                &col(|r| r.server_send_calls, 1.0, 0),
                &col(|r| r.cpu_ns_per_mb, 1e6, 1),
                &col(|r| r.idle_spin_ns_per_mb, 1e6, 1),
                &ratio,
                &col(|r| r.sender_gap_stddev_us, 1.0, 0),
                &col(|r| r.interarrival_stddev_us, 1.0, 0),
                &col(|r| r.burstiness_index, 1.0, 3),
                &col(|r| r.bottleneck_drops as f64, 1.0, 0),
                &col(|r| r.goodput_bps, 1e6, 1),
            ]);
        }
        md += &table.finish();
        md
    }

    /// The loopback median: each stack's server, the same stock-quinn client.
    fn loopback_table(&self, keys: &[(String, String)]) -> String {
        let mut md = String::from(
            "\n### The loopback median\n\n`loopback-rr-stock-client`: each stack's server answering the same stock-quinn client (the `quinn-tokio` stack's) on loopback, 2,000 requests of 10 KB one after another on one connection, server and client pinned to different CPUs; `quinn-plain` is stock quinn with quinn's defaults, the server a user of quinn writes. Medians over rounds, with [min, max].\n\n",
        );
        let mut table = Table::new(
            "server | p50 (µs): | p99 (µs): | p99.9 (µs): | server CPU per MB (ms): | server send calls: | server quinn timeouts:",
        );
        for (_, stack) in keys.iter().filter(|k| k.0 == LOOPBACK_RR) {
            let col = self.column(LOOPBACK_RR, stack);
            table.row(&[
                stack,
                &col(|r| r.latency.p50_us, 1.0, 0),
                &col(|r| r.latency.p99_us, 1.0, 0),
                &col(|r| r.latency.p999_us, 1.0, 0),
                &col(|r| r.server_cpu_ns_per_mb, 1e6, 1),
                &col(|r| r.server_send_calls, 1.0, 0),
                &col(|r| r.server_timeouts, 1.0, 0),
            ]);
        }
        md += &table.finish();
        md
    }

    /// The cells of one (scenario, stack), as `cells` writes them.
    pub(super) fn column<'a>(
        &'a self,
        scenario: &'a str,
        stack: &'a str,
    ) -> impl Fn(fn(&QuicRow) -> f64, f64, usize) -> String + 'a {
        cells(&self.rows, move |r| {
            r.scenario == scenario && r.stack == stack
        })
    }
}

/// A cell for the rows `pick` picks (one per round): the median of `g(row) / scale`, with
/// its range when there are several rounds.
fn cells<'a>(
    rows: &'a [QuicRow],
    pick: impl Fn(&QuicRow) -> bool + 'a,
) -> impl Fn(fn(&QuicRow) -> f64, f64, usize) -> String + 'a {
    move |g, scale, digits| {
        spread(
            rows.iter()
                .filter(|r| pick(r))
                .map(|r| g(r) / scale)
                .collect(),
            digits,
        )
    }
}

pub(super) fn bottleneck_table(rows: &[BottleneckRow]) -> String {
    let mut md = format!(
        "\n### The emulator's bottleneck beside the kernel's tbf\n\nA UDP sender offers 1.2 × the rate in 1500-byte packets; both bottlenecks hold a {} KB drop-tail queue. The emulator also delays every packet by 1 ms (tbf cannot delay); `emulator` spins up to {:?} before a packet is due (the `path` command's default), `emulator-calibrated` only the event loop's calibrated window (as in the QUIC runs above, where the emulator shares its CPU with the client). Delay error: when the emulator released each packet to the receiving side against when it was due. Received rate and inter-arrival spread at the receiving socket, after the first 100 ms; the ideal spread is 0. tbf counts the 14-byte Ethernet header in its rate and the receiver counts IP bytes, so tbf's −0.92 % is that header. Medians over rounds with [min, max].\n\n",
        bottleneck::QUEUE_BYTES / 1000,
        COMMAND_SPIN
    );
    let mut table = Table::new(
        "rate (Mbit/s): | bottleneck | delivered (Mbit/s): | rate error (%): | inter-arrival stddev (µs): | inter-arrival p99 (µs): | drops: | delay error p99 (µs):",
    );
    let mut keys = distinct(rows, |r| (r.rate_bps, r.bottleneck.clone()));
    keys.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for (rate, which) in keys {
        let col = |g: fn(&BottleneckRow) -> f64, digits: usize| {
            spread(
                rows.iter()
                    .filter(|r| r.rate_bps == rate && r.bottleneck == which)
                    .map(g)
                    .collect(),
                digits,
            )
        };
        table.row(&[
            &(rate / 1e6),
            &which,
            &col(|r| r.delivered_bps / 1e6, 2),
            &col(|r| r.rate_error_pct, 2),
            &col(|r| r.interarrival_stddev_us, 1),
            &col(|r| r.interarrival_p99_us, 1),
            &col(|r| r.drops, 0),
            &col(|r| r.delay_error_p99_us, 1),
        ]);
    }
    md += &table.finish();
    md
}

/// `packet / trigger state / backstop / app` as percentages of the datagrams sent.
pub(super) fn causes_cell(causes: Option<&TransmitCauses>) -> String {
    let Some(c) = causes else {
        return "unavailable".into();
    };
    let all = (c.packet + c.trigger_state + c.backstop + c.app).max(1) as f64;
    let pct = |n: u64| format!("{:.0}", n as f64 * 100.0 / all);
    format!(
        "{} / {} / {} / {}",
        pct(c.packet),
        pct(c.trigger_state),
        pct(c.backstop),
        pct(c.app)
    )
}

/// A lateness histogram folded into four buckets, as percentages.
pub(super) fn lateness_cell(hist: &[(f64, u64)]) -> String {
    let all: u64 = hist.iter().map(|b| b.1).sum();
    if all == 0 {
        return "-".into();
    }
    let mut sums = [0u64; 4];
    for &(upper_us, n) in hist {
        let i = match upper_us {
            u if u <= 10.0 => 0,
            u if u <= 100.0 => 1,
            u if u <= 1000.0 => 2,
            _ => 3,
        };
        sums[i] += n;
    }
    sums.map(|n| format!("{:.0}", n as f64 * 100.0 / all as f64))
        .join(" / ")
}

impl Section for QuicResult {
    const FILE: &'static str = "quic.json";
    const TITLE: &'static str = "QUIC on soft timers against stock quinn and kernel TCP";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        page.text("Through the path emulator (`softtimers path`; data from `b` to `a`, the bottleneck and its drop-tail queue on the data direction). Medians over rounds, with [min, max]. \"Of which in the second half\": the bottleneck drops from the start of the 50 ms interval in which the data direction's delivered bytes passed half their total (drops at the end of slow start fall in the first half).\n\n");
        let mut table = Table::new(
            "scenario | stack | goodput (Mbit/s): | data share of delivered bytes: | bottleneck drops: | of which in the second half: | sender-declared losses (TCP: segments resent): | receiver inter-arrival stddev (µs): | sender gap stddev (µs): | burstiness index: | queue delay p99 (µs): | CPU per MB, both sides (ms): | of which the server's (ms): | p50 (µs): | p99 (µs):",
        );
        let keys = distinct(&self.rows, |r| (r.scenario.clone(), r.stack.clone()));
        for (scenario, stack) in keys
            .iter()
            .filter(|k| !timer_driven(&k.0) && k.0 != LOOPBACK_RR)
        {
            let col = self.column(scenario, stack);
            table.row(&[
                scenario,
                stack,
                &col(|r| r.goodput_bps, 1e6, 1),
                &col(|r| r.data_share, 1.0, 3),
                &col(|r| r.bottleneck_drops as f64, 1.0, 0),
                &col(|r| r.bottleneck_drops_second_half, 1.0, 0),
                &col(|r| r.sender_lost_packets, 1.0, 0),
                &col(|r| r.interarrival_stddev_us, 1.0, 1),
                &col(|r| r.sender_gap_stddev_us, 1.0, 1),
                &col(|r| r.burstiness_index, 1.0, 3),
                &col(|r| r.queue_delay_p99_us, 1.0, 0),
                &col(|r| r.cpu_ns_per_mb, 1e6, 1),
                &col(|r| r.server_cpu_ns_per_mb, 1e6, 1),
                &col(|r| r.latency.p50_us, 1.0, 0),
                &col(|r| r.latency.p99_us, 1.0, 0),
            ]);
        }
        page.table(table);
        if !self.extra.pacing_variants.is_empty() {
            page.text(&self.pacing_variants_table());
        }
        if keys.iter().any(|k| k.0 == LOOPBACK_RR) {
            page.text(&self.loopback_table(&keys));
        }
        if keys.iter().any(|k| timer_driven(&k.0)) {
            page.text("\n### Where only a timer wakes the sender\n\n`app-256k-50ms`: the client asks for 256 KB every 50 ms (an application-limited sender); `thin-acks-50M-20ms`: a bulk download with each end asking its peer to ACK only every 10th packet, within 10 ms (quinn-proto's ACK-frequency extension); `after-idle-100pkt`: the client downloads 2 MB, is idle for 1 s, then asks for 100 packets (120 KB), which leave behind the pacer with quinn's CUBIC as it is (p50 and p99 are that one response; the other columns cover the whole connection, the warm-up included). All through 50 Mbit/s, RTT 20 ms, a queue of one BDP. What made the server's datagrams leave (soft-timer stacks: a received packet, a soft event at a trigger state, one fired by the backstop, the application) and how late the server's runtime handled quinn's timers (every QUIC stack; stock quinn's through a wrapper around its tokio timers).\n\n");
            let mut table = Table::new(
                "scenario | stack | goodput (Mbit/s): | p50 (µs): | p99 (µs): | sender gap stddev (µs): | burstiness index: | queue delay p99 (µs): | sent on packet / trigger state / backstop / app (%) | timer late p50 (µs): | p99 (µs): | ≤ 10 µs / ≤ 100 µs / ≤ 1 ms / > 1 ms (%)",
            );
            for (scenario, stack) in keys.iter().filter(|k| timer_driven(&k.0)) {
                let col = self.column(scenario, stack);
                let first = self
                    .rows
                    .iter()
                    .find(|r| &r.scenario == scenario && &r.stack == stack)
                    .expect("a key comes from a row");
                table.row(&[
                    scenario,
                    stack,
                    &col(|r| r.goodput_bps, 1e6, 1),
                    &col(|r| r.latency.p50_us, 1.0, 0),
                    &col(|r| r.latency.p99_us, 1.0, 0),
                    &col(|r| r.sender_gap_stddev_us, 1.0, 1),
                    &col(|r| r.burstiness_index, 1.0, 3),
                    &col(|r| r.queue_delay_p99_us, 1.0, 0),
                    &causes_cell(first.server_causes.as_ref()),
                    &col(|r| r.server_timer_late_p50_us, 1.0, 1),
                    &col(|r| r.server_timer_late_p99_us, 1.0, 1),
                    &lateness_cell(&first.server_timer_late_hist),
                ]);
            }
            page.table(table);
            page.text("\nCauses and the lateness buckets are round 0's; the other columns medians over rounds.\n");
        }
        for (file, title, y_label, pick) in [
            (
                "quic_queue_delay.png",
                "Queueing delay at the bottleneck (bulk, 50 Mbit/s, 0.25 BDP, round 0)",
                "largest queueing delay per 50 ms (ms)",
                1usize,
            ),
            (
                "quic_goodput.png",
                "Delivered rate over time (bulk, 50 Mbit/s, 0.25 BDP, round 0)",
                "Mbit/s per 50 ms",
                2usize,
            ),
        ] {
            let series: Vec<Series> = self
                .rows
                .iter()
                .filter(|r| r.scenario == BULK_50M_SMALL_QUEUE && r.round == 0)
                .map(|r| Series {
                    label: r.stack.clone(),
                    points: r
                        .timeline
                        .iter()
                        .map(|p| (p.0, if pick == 1 { p.1 } else { p.2 }))
                        .collect(),
                })
                .collect();
            let chart =
                LineChart::from_origin(title, ("time (s)", y_label), series, 0.1, (1.0, 1.1));
            let image = page.plot(file, title, |path| line_chart(path, &chart))?;
            let _ = writeln!(page, "\n{image}");
        }
        let rr: Vec<Series> = self
            .rows
            .iter()
            .filter(|r| r.scenario == RR && r.round == 0 && !r.latencies_us.is_empty())
            .map(|r| cdf_series(r.stack.clone(), &r.latencies_us))
            .collect();
        if !rr.is_empty() {
            let file = "quic_rr_latency_cdf.png";
            let title = "Request/response latency CDF (1 % loss, RTT 200 µs, round 0)";
            let image = page.plot(file, title, |path| latency_cdf_chart(path, title, rr))?;
            let _ = writeln!(page, "\n{image}");
        }
        if !self.extra.bottleneck.is_empty() {
            page.text(&bottleneck_table(&self.extra.bottleneck));
        }
        page.text("\n");
        page.targets(&self.targets);
        Ok(())
    }
}
