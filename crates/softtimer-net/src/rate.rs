//! Transmission rates, parsed the way network tools write them (`500M`, `1.5G`, `64k`), and
//! the exact time a number of bytes takes at a rate.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use softtimer::Span;

/// The fastest rate accepted: 1 Tbit/s, far above any link this code can drive, so that a
/// typo (`500G` for `500M`) is refused instead of turning pacing off.
pub const MAX_RATE_BPS: u64 = 1_000_000_000_000;

/// A transmission rate in bits per second, never zero.
///
/// ```
/// use softtimer_net::Rate;
///
/// let rate: Rate = "500M".parse().unwrap();
/// assert_eq!(rate.bits_per_sec(), 500_000_000);
/// // 1472 bytes at 500 Mbit/s take 23.552 µs; on a 1 GHz clock that is 23,552 ticks.
/// assert_eq!(rate.ticks_for_bytes(1472, 1_000_000_000), 23_552);
/// assert!("0".parse::<Rate>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Rate(u64);

/// Why a rate was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// Not a number with an optional `k`, `M`, `G` or `T` suffix.
    #[error(
        "{0:?} is not a rate: write bits per second as a number with an optional k, M, G or T \
         suffix (for example 500M)"
    )]
    Unparseable(String),
    /// Zero or negative.
    #[error("a rate must be above zero (got {0:?})")]
    NotPositive(String),
    /// Above [`MAX_RATE_BPS`].
    #[error("{bps} bit/s is above the largest rate accepted, {max} bit/s")]
    TooFast {
        /// What was asked for, bit/s.
        bps: u128,
        /// The limit, bit/s.
        max: u64,
    },
}

impl Rate {
    /// `bps` bits per second; an error for 0 or above [`MAX_RATE_BPS`].
    pub fn from_bits_per_sec(bps: u64) -> Result<Rate, RateError> {
        match bps {
            0 => Err(RateError::NotPositive("0".into())),
            b if b > MAX_RATE_BPS => Err(RateError::TooFast {
                bps: u128::from(b),
                max: MAX_RATE_BPS,
            }),
            b => Ok(Rate(b)),
        }
    }

    /// The rate that sends one `bytes`-byte packet every `interval_ns` nanoseconds.
    pub fn from_packet_interval(bytes: u64, interval_ns: u64) -> Result<Rate, RateError> {
        if interval_ns == 0 || bytes == 0 {
            return Err(RateError::NotPositive(format!(
                "{bytes} bytes every {interval_ns} ns"
            )));
        }
        let bps = u128::from(bytes) * 8 * 1_000_000_000 / u128::from(interval_ns);
        match u64::try_from(bps) {
            Ok(b) if b > 0 => Rate::from_bits_per_sec(b),
            Ok(_) => Err(RateError::NotPositive(format!(
                "{bytes} bytes every {interval_ns} ns"
            ))),
            Err(_) => Err(RateError::TooFast {
                bps,
                max: MAX_RATE_BPS,
            }),
        }
    }

    /// Bits per second.
    pub const fn bits_per_sec(self) -> u64 {
        self.0
    }

    /// How many ticks of a `hz` clock `bytes` bytes take at this rate, rounded down. Use it on
    /// the total bytes of a train, not per packet, so that rounding does not add up.
    pub fn ticks_for_bytes(self, bytes: u64, hz: u64) -> u64 {
        let ticks = u128::from(bytes) * 8 * u128::from(hz) / u128::from(self.0);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// [`Rate::ticks_for_bytes`] as a [`Span`].
    pub fn span_for_bytes(self, bytes: u64, hz: u64) -> Span {
        Span::from_ticks(self.ticks_for_bytes(bytes, hz))
    }

    /// The rate measured as `bytes` in `ticks` of a `hz` clock; `None` for no time or no bytes.
    pub fn measured(bytes: u64, ticks: u64, hz: u64) -> Option<Rate> {
        if ticks == 0 {
            return None;
        }
        let bps = u128::from(bytes) * 8 * u128::from(hz) / u128::from(ticks);
        u64::try_from(bps)
            .ok()
            .and_then(|b| Rate::from_bits_per_sec(b).ok())
    }
}

impl TryFrom<u64> for Rate {
    type Error = RateError;
    fn try_from(bps: u64) -> Result<Rate, RateError> {
        Rate::from_bits_per_sec(bps)
    }
}

impl From<Rate> for u64 {
    fn from(rate: Rate) -> u64 {
        rate.0
    }
}

impl FromStr for Rate {
    type Err = RateError;

    /// Bits per second, with an optional decimal SI suffix: `k` (10^3), `M` (10^6),
    /// `G` (10^9), `T` (10^12), and an optional trailing `bit/s`, `bps` or `b`.
    fn from_str(s: &str) -> Result<Rate, RateError> {
        let text = s.trim();
        let bad = || RateError::Unparseable(s.to_string());
        let mut body = text;
        for unit in ["bit/s", "bps", "bit", "b"] {
            if let Some(stripped) = body.strip_suffix(unit) {
                body = stripped;
                break;
            }
        }
        let (number, scale) = match body.char_indices().last() {
            Some((i, c)) if c.is_ascii_alphabetic() => {
                let scale: u128 = match c {
                    'k' | 'K' => 1_000,
                    'M' | 'm' => 1_000_000,
                    'G' | 'g' => 1_000_000_000,
                    'T' | 't' => 1_000_000_000_000,
                    _ => return Err(bad()),
                };
                (&body[..i], scale)
            }
            _ => (body, 1),
        };
        let number = number.trim();
        if number.starts_with('-') {
            return Err(RateError::NotPositive(s.to_string()));
        }
        // Decimal digits with at most one point, read exactly (no float rounding).
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && frac.is_empty()
            || !whole.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
            || frac.len() > 12
            || whole.len() > 20
        {
            return Err(bad());
        }
        let whole_value: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad())?
        };
        let frac_value: u128 = if frac.is_empty() {
            0
        } else {
            frac.parse().map_err(|_| bad())?
        };
        let frac_scale = 10u128.pow(frac.len() as u32);
        let bps = whole_value
            .checked_mul(scale)
            .and_then(|w| w.checked_add(frac_value * scale / frac_scale))
            .ok_or_else(bad)?;
        if bps == 0 {
            return Err(RateError::NotPositive(s.to_string()));
        }
        if bps > u128::from(MAX_RATE_BPS) {
            return Err(RateError::TooFast {
                bps,
                max: MAX_RATE_BPS,
            });
        }
        Ok(Rate(bps as u64))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        match self.0 {
            r if r >= 1_000_000_000 => write!(f, "{:.3} Gbit/s", b / 1e9),
            r if r >= 1_000_000 => write!(f, "{:.3} Mbit/s", b / 1e6),
            r if r >= 1_000 => write!(f, "{:.3} kbit/s", b / 1e3),
            _ => write!(f, "{} bit/s", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_network_tools_write() {
        let cases = [
            ("500M", 500_000_000),
            ("1.5G", 1_500_000_000),
            ("64k", 64_000),
            ("2000", 2000),
            ("100Mbps", 100_000_000),
            ("10 Mbit/s", 10_000_000),
            ("0.5k", 500),
            (".25M", 250_000),
            ("1T", 1_000_000_000_000),
        ];
        for (text, bps) in cases {
            assert_eq!(text.parse::<Rate>().unwrap().bits_per_sec(), bps, "{text}");
        }
    }

    #[test]
    fn refuses_bad_rates_with_a_reason() {
        for text in ["", "M", "abc", "1.2.3M", "5X", "1e9", "1,5M"] {
            assert!(
                matches!(text.parse::<Rate>(), Err(RateError::Unparseable(_))),
                "{text}"
            );
        }
        for text in ["0", "0M", "-5M", "0.0000001"] {
            assert!(
                matches!(text.parse::<Rate>(), Err(RateError::NotPositive(_))),
                "{text}"
            );
        }
        assert!(matches!(
            "2T".parse::<Rate>(),
            Err(RateError::TooFast { .. })
        ));
        assert!(matches!(
            "99999999999999999999999T".parse::<Rate>(),
            Err(RateError::Unparseable(_))
        ));
        assert!(Rate::from_bits_per_sec(0).is_err());
        assert!(Rate::from_packet_interval(1500, 0).is_err());
    }

    #[test]
    fn time_for_bytes_is_exact_over_a_train() {
        let rate = Rate::from_bits_per_sec(300_000_000).unwrap();
        // 1000 packets of 1472 B at 300 Mbit/s: 39.253... ms; per-packet rounding at 1 MHz
        // would lose 0.253 µs a packet.
        let hz = 1_000_000;
        assert_eq!(rate.ticks_for_bytes(1472 * 1000, hz), 39_253);
        assert_eq!(rate.ticks_for_bytes(1472, hz) * 1000, 39_000);
        assert_eq!(
            Rate::measured(1472 * 1000, 39_253, hz)
                .unwrap()
                .bits_per_sec(),
            300_002_547
        );
        assert_eq!(
            Rate::from_packet_interval(1500, 12_000)
                .unwrap()
                .bits_per_sec(),
            1_000_000_000
        );
    }

    #[test]
    fn displays_in_the_largest_unit() {
        assert_eq!(
            Rate::from_bits_per_sec(1_500_000_000).unwrap().to_string(),
            "1.500 Gbit/s"
        );
        assert_eq!(
            Rate::from_bits_per_sec(999).unwrap().to_string(),
            "999 bit/s"
        );
    }
}
