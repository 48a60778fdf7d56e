//! The parsers of command-line values every tool shares: durations (`10s`, `250ms`, `40us`),
//! byte counts (`64k`, `10M`, `1MiB`), the soft loop's spin window (`calibrated` or a
//! duration) and a polling quota (`10`, `unlimited`). Each says what it expected on bad
//! input. [`check_run_duration`] bounds a run's `--duration` the same way for every tool.

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

/// Checks a run's `--duration`: from 10 ms (shorter measures nothing) to an hour (longer is
/// a mistyped unit).
///
/// ```
/// use std::time::Duration;
/// use softtimers_tools::parse::check_run_duration;
///
/// assert!(check_run_duration(Duration::from_secs(5)).is_ok());
/// assert!(check_run_duration(Duration::from_millis(1)).is_err());
/// ```
pub fn check_run_duration(duration: Duration) -> anyhow::Result<()> {
    anyhow::ensure!(
        duration >= Duration::from_millis(10) && duration <= Duration::from_secs(3600),
        "--duration {duration:?}: want 10 ms ..= 1 hour"
    );
    Ok(())
}

/// Parses a duration written as `10s`, `250ms`, `40us`/`40µs` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const UNITS: &[(&str, f64)] = &[
        ("ms", 1e6),
        ("us", 1e3),
        ("µs", 1e3),
        ("ns", 1.0),
        ("s", 1e9),
    ];
    let (value, unit_ns) = parse_scaled(
        text,
        text.trim(),
        UNITS,
        1e9,
        "a duration",
        "is not a duration (write 10s, 250ms or 40us)",
    )?;
    let ns = value * unit_ns;
    if ns > 365.0 * 86_400.0 * 1e9 {
        return Err(format!("{text:?} is longer than a year"));
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// Splits `body` (what is left of `text` to read) into a number and the scale of the first
/// of `units` it ends with (`default` without one), and parses the number: finite and not
/// negative, or an error quoting `text` that says `what` was expected (`not_one` finishes
/// the sentence for text that is no number).
fn parse_scaled(
    text: &str,
    body: &str,
    units: &[(&str, f64)],
    default: f64,
    what: &str,
    not_one: &str,
) -> Result<(f64, f64), String> {
    let (number, scale) = units
        .iter()
        .find_map(|&(suffix, scale)| body.strip_suffix(suffix).map(|n| (n, scale)))
        .unwrap_or((body, default));
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} {not_one}"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("{text:?}: {what} must be a positive number"));
    }
    Ok((value, scale))
}

/// Parses a byte count: `1000`, `64k`, `10M`, `1G` (powers of 1000), `64KiB`, `1MiB`
/// (powers of 1024); a trailing `B` is allowed.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix('B')
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(t);
    const UNITS: &[(&str, f64)] = &[
        ("Ki", (1u64 << 10) as f64),
        ("Mi", (1u64 << 20) as f64),
        ("Gi", (1u64 << 30) as f64),
        ("k", 1e3),
        ("K", 1e3),
        ("M", 1e6),
        ("G", 1e9),
    ];
    let (value, scale) = parse_scaled(
        text,
        t,
        UNITS,
        1.0,
        "a byte count",
        "is not a byte count (write 1000, 64k, 10M or 1MiB)",
    )?;
    let bytes = value * scale;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `parse` reads each of `ok` as its value, and refuses each of `bad` with an error
    /// containing the text given with it.
    fn check<T: PartialEq + std::fmt::Debug>(
        parse: fn(&str) -> Result<T, String>,
        ok: &[(&str, T)],
        bad: &[(&str, &str)],
    ) {
        for (text, want) in ok {
            assert_eq!(parse(text).as_ref(), Ok(want), "{text:?}");
        }
        for (text, error) in bad {
            let got = parse(text).expect_err(text);
            assert!(got.contains(error), "{text:?}: {got}");
        }
    }

    #[test]
    fn durations_read_every_unit_and_refuse_bad_text() {
        let ok = [
            ("10s", Duration::from_secs(10)),
            ("2", Duration::from_secs(2)),
            ("250ms", Duration::from_millis(250)),
            ("40us", Duration::from_micros(40)),
            (" 40µs ", Duration::from_micros(40)),
            ("1500ns", Duration::from_nanos(1500)),
            ("0.5s", Duration::from_millis(500)),
        ];
        let bad = [
            (
                "soon",
                "\"soon\" is not a duration (write 10s, 250ms or 40us)",
            ),
            ("-5ms", "\"-5ms\": a duration must be a positive number"),
            ("400d", "is not a duration"),
            ("1e9", "longer than a year"),
        ];
        check(parse_duration, &ok, &bad);
    }

    #[test]
    fn byte_counts_read_decimal_and_binary_prefixes_and_refuse_bad_text() {
        let ok = [
            ("1000", 1000),
            ("64k", 64_000),
            ("64K", 64_000),
            ("64kB", 64_000),
            ("10M", 10_000_000),
            ("1G", 1_000_000_000),
            ("64KiB", 64 << 10),
            ("1MiB", 1 << 20),
            ("2Gi", 2 << 30),
            ("1500b", 1500),
        ];
        let bad = [
            (
                "lots",
                "\"lots\" is not a byte count (write 1000, 64k, 10M or 1MiB)",
            ),
            ("-1k", "\"-1k\": a byte count must be a positive number"),
            ("2000T", "is not a byte count"),
            ("2000000G", "more than a petabyte"),
        ];
        check(parse_bytes, &ok, &bad);
    }
}
