//! `softtimers flood`: minimum-size UDP datagrams at an offered rate, in `sendmmsg` batches
//! on a schedule; reports the rate it reached, and says so when that is below the rate asked
//! for.

use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use crate::output::Report;
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use softtimer::{Clock, Span, SystemClock};
use softtimer_rt::send_all;

/// How `flood` runs: `softtimers flood`'s options.
#[derive(clap::Args, Clone, Debug)]
pub struct FloodOptions {
    /// Where to send (`host:port`).
    #[arg(long)]
    pub to: SocketAddr,
    /// Datagrams per second asked for.
    #[arg(long = "rate", value_name = "RATE")]
    pub rate_pps: u64,
    /// UDP payload bytes (18: a minimum-size Ethernet frame).
    #[arg(long, default_value_t = 18)]
    pub size: usize,
    /// How long to send.
    #[arg(long, default_value = "5s", value_parser = crate::parse::parse_duration)]
    pub duration: Duration,
}

/// What `flood` did (`flood --json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FloodReport {
    /// The rate asked for, datagrams/s.
    pub offered_pps: u64,
    /// The rate reached, datagrams/s.
    pub achieved_pps: f64,
    /// Datagrams sent.
    pub sent: u64,
    /// Sends refused.
    pub send_errors: u64,
    /// What the last refused send said, when one was (absent from older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_send_error: Option<String>,
    /// Whether the generator fell short of the rate asked for (by more than 2 %).
    pub saturated: bool,
    /// The run's length, s.
    pub duration_s: f64,
}

/// Sends minimum-size datagrams at `rate_pps` for `duration`, in batches of up to 64 on a
/// schedule: the batch due at `t` leaves at `t`, and a late batch does not make the next one
/// bigger than 64.
pub fn flood(options: &FloodOptions) -> Result<FloodReport> {
    ensure!(
        options.rate_pps >= 1,
        "--rate {}: want at least 1 datagram/s",
        options.rate_pps
    );
    ensure!(
        options.rate_pps <= 100_000_000,
        "--rate {} datagrams/s is beyond any NIC; want at most 1e8",
        options.rate_pps
    );
    ensure!(
        (1..=1472).contains(&options.size),
        "--size {}: want 1 ..= 1472",
        options.size
    );
    crate::parse::check_run_duration(options.duration)?;
    let any: SocketAddr = if options.to.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let socket = UdpSocket::bind(any)?;
    socket
        .connect(options.to)
        .with_context(|| format!("connecting to {}", options.to))?;
    let payload = vec![0u8; options.size];
    let batch_max = 64u64;
    let parts: Vec<[IoSlice<'_>; 1]> = (0..batch_max).map(|_| [IoSlice::new(&payload)]).collect();
    let datagrams: Vec<&[IoSlice<'_>]> = parts.iter().map(|p| &p[..]).collect();
    let clock = SystemClock::new();
    let hz = clock.resolution_hz();
    let start = clock.now();
    let end_ticks = Span::from_duration(options.duration, hz).ticks();
    let (mut sent, mut errors, mut last_error) = (0u64, 0u64, None);
    loop {
        let now = clock.now();
        let elapsed = now.saturating_since(start).ticks();
        if elapsed >= end_ticks {
            break;
        }
        // Datagrams due by now on the schedule, less those sent.
        let due = (u128::from(elapsed) * u128::from(options.rate_pps) / u128::from(hz)) as u64 + 1;
        let n = due.saturating_sub(sent + errors).min(batch_max) as usize;
        if n == 0 {
            // The next one is due in 1/rate: spin (short) or sleep (long).
            let gap_ns = 1_000_000_000 / options.rate_pps;
            if gap_ns > 200_000 {
                // Half the gap, but not past the run's end.
                let left = Span::from_ticks(end_ticks - elapsed).to_duration(hz);
                std::thread::sleep(Duration::from_nanos(gap_ns / 2).min(left));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        let out = send_all(&socket, &datagrams[..n], true);
        sent += out.sent as u64;
        errors += out.refused as u64;
        last_error = out.last_error.or(last_error);
    }
    let duration_s = clock
        .now()
        .saturating_since(start)
        .to_duration(hz)
        .as_secs_f64();
    let achieved_pps = sent as f64 / duration_s;
    Ok(FloodReport {
        offered_pps: options.rate_pps,
        achieved_pps,
        sent,
        send_errors: errors,
        last_send_error: last_error.map(|e| std::io::Error::from_raw_os_error(e).to_string()),
        saturated: achieved_pps < options.rate_pps as f64 * 0.98,
        duration_s,
    })
}

impl Report for FloodReport {
    fn text(&self) -> String {
        format!(
            "{} datagrams in {:.2} s: {:.0} datagrams/s{}{}\n",
            self.sent,
            self.duration_s,
            self.achieved_pps,
            if self.send_errors > 0 {
                format!(
                    "; {} sends refused by the kernel (the last: {})",
                    self.send_errors,
                    self.last_send_error.as_deref().unwrap_or("no reason given")
                )
            } else {
                String::new()
            },
            if self.saturated && self.send_errors == 0 {
                format!(
                    " (asked for {}: this is as fast as this sender goes here)",
                    self.offered_pps
                )
            } else {
                String::new()
            }
        )
    }
}
