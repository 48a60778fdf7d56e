//! The parsers of command-line values every tool shares: durations (`10s`, `250ms`, `40us`),
//! byte counts (`64k`, `10M`, `1MiB`), the soft loop's spin window (`calibrated` or a
//! duration) and a polling quota (`10`, `unlimited`). Each says what it expected on bad
//! input.

use std::time::Duration;

use softtimer_net::livelock::Quota;
use softtimer_rt::SpinWindow;

/// Parses `--spin-window`: `calibrated`, or a duration of at most 1 s (`0`, `20us`).
pub fn parse_spin_window(text: &str) -> Result<SpinWindow, String> {
    if text == "calibrated" {
        return Ok(SpinWindow::Calibrated);
    }
    let window = parse_duration(text)?;
    if window > Duration::from_secs(1) {
        return Err(format!("{text:?}: a spin window over 1 s is a busy loop"));
    }
    Ok(SpinWindow::Fixed(window))
}

/// Parses a duration written as `10s`, `250ms`, `40us`/`40µs` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit_ns) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        (t, 1e9)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (write 10s, 250ms or 40us)"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("{text:?}: a duration must be a positive number"));
    }
    let ns = value * unit_ns;
    if ns > 365.0 * 86_400.0 * 1e9 {
        return Err(format!("{text:?} is longer than a year"));
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// Parses a byte count: `1000`, `64k`, `10M`, `1G` (powers of 1000), `64KiB`, `1MiB`
/// (powers of 1024); a trailing `B` is allowed.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix('B')
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(t);
    let (number, scale) = if let Some(n) = t.strip_suffix("Ki") {
        (n, 1u64 << 10)
    } else if let Some(n) = t.strip_suffix("Mi") {
        (n, 1 << 20)
    } else if let Some(n) = t.strip_suffix("Gi") {
        (n, 1 << 30)
    } else if let Some(n) = t.strip_suffix(['k', 'K']) {
        (n, 1_000)
    } else if let Some(n) = t.strip_suffix('M') {
        (n, 1_000_000)
    } else if let Some(n) = t.strip_suffix('G') {
        (n, 1_000_000_000)
    } else {
        (t, 1)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count (write 1000, 64k, 10M or 1MiB)"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("{text:?}: a byte count must be a positive number"));
    }
    let bytes = value * scale as f64;
    if bytes > 1e15 {
        return Err(format!("{text:?} is more than a petabyte"));
    }
    Ok(bytes as u64)
}

/// Parses `--quota`: a number of packets (at least 1) or `unlimited`.
pub fn parse_quota(text: &str) -> Result<Quota, String> {
    if text == "unlimited" {
        return Ok(Quota::Unlimited);
    }
    let n: u32 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a packet count (write 10, or unlimited)"))?;
    Quota::packets(n).map_err(|e| e.to_string())
}
