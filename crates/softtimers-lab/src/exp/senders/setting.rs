//! What each sender is asked to do: the settings the frontier spans, their names in tables,
//! and their command lines.

use std::net::IpAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};
use softtimer_rt::IoBackend;
use softtimers_tools::pace::{BatchSend, DEFAULT_BACKSTOP_HZ, PaceTimer};

use super::SendSpec;

/// Who sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tool {
    /// `softtimers pace`.
    Pace,
    /// `iperf3 -u`.
    Iperf3,
}

impl Tool {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Pace => "pace",
            Tool::Iperf3 => "iperf3",
        }
    }
}

/// How the soft loop waits for a send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Spin {
    /// A fixed spin window, µs (`--spin-window Nus`; 0 blocks until each send).
    WindowUs(u32),
    /// This machine's measured wake-up lateness (`--spin-window calibrated`).
    Calibrated,
    /// A named precision, µs (`--precision Nus`): the window and the datagrams per wake-up
    /// are `pace`'s to pick.
    PrecisionUs(u32),
}

/// One setting of `pace`: everything that changes what it costs and how precise it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaceSetting {
    /// What paces: soft timers or a periodic timerfd.
    pub timer: PaceTimer,
    /// The soft loop's spin window (or named precision).
    pub spin: Spin,
    /// Datagrams per wake-up, back to back.
    pub per_wakeup: u32,
    /// How they leave together.
    pub batch_send: BatchSend,
    /// The soft loop's backstop frequency, Hz.
    pub backstop_hz: u64,
    /// The I/O backend.
    pub io: IoBackend,
}

impl PaceSetting {
    /// `pace` with no options: soft timers, no spin window, one datagram per wake-up.
    pub const DEFAULT: PaceSetting = PaceSetting {
        timer: PaceTimer::Soft,
        spin: Spin::WindowUs(0),
        per_wakeup: 1,
        batch_send: BatchSend::Gso,
        backstop_hz: DEFAULT_BACKSTOP_HZ,
        io: IoBackend::Epoll,
    };

    /// Its name in tables: what differs from `pace`'s defaults.
    pub fn label(&self) -> String {
        if *self == PaceSetting::DEFAULT {
            return "soft, no spin (default)".into();
        }
        let mut parts = vec![self.timer.name().to_string()];
        if self.timer == PaceTimer::Soft {
            parts.push(match self.spin {
                Spin::WindowUs(0) => "no spin".into(),
                Spin::WindowUs(us) => format!("spin {us} µs"),
                Spin::Calibrated => "spin calibrated".into(),
                Spin::PrecisionUs(us) => format!("--precision {us}us"),
            });
        }
        if self.per_wakeup > 1 {
            parts.push(format!(
                "{} per wake-up ({})",
                self.per_wakeup,
                self.batch_send.name()
            ));
        }
        if self.timer == PaceTimer::Soft && self.backstop_hz != DEFAULT_BACKSTOP_HZ {
            parts.push(format!("backstop {} Hz", self.backstop_hz));
        }
        if self.io != IoBackend::Epoll {
            parts.push(self.io.name().into());
        }
        parts.join(", ")
    }

    /// Its options on `pace`'s command line (after what every run gives).
    fn options(&self) -> Vec<String> {
        let mut args = vec!["--timer".into(), self.timer.name().into()];
        match self.spin {
            Spin::WindowUs(us) => args.extend(["--spin-window".into(), format!("{us}us")]),
            Spin::Calibrated => args.extend(["--spin-window".into(), "calibrated".into()]),
            Spin::PrecisionUs(us) => args.extend(["--precision".into(), format!("{us}us")]),
        }
        if !matches!(self.spin, Spin::PrecisionUs(_)) {
            args.extend(["--per-wakeup".into(), self.per_wakeup.to_string()]);
        }
        args.extend(["--batch-send".into(), self.batch_send.name().into()]);
        args.extend(["--backstop-hz".into(), self.backstop_hz.to_string()]);
        if self.io != IoBackend::Epoll {
            args.extend(["--io".into(), self.io.name().into()]);
        }
        args
    }
}

/// A setting of one sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "tool")]
pub enum Setting {
    /// `softtimers pace`.
    Pace(PaceSetting),
    /// `iperf3 -u -b RATE`, with its pacing timer (`None`: its default, 1 ms).
    Iperf3 {
        /// `--pacing-timer`, µs.
        pacing_timer_us: Option<u32>,
    },
}

impl Setting {
    /// `pace` with no options.
    pub const PACE_DEFAULT: Setting = Setting::Pace(PaceSetting::DEFAULT);
    /// `pace --timer timerfd`: the timerfd sender the soft one is held against.
    pub const PACE_TIMERFD: Setting = Setting::Pace(PaceSetting {
        timer: PaceTimer::Timerfd,
        ..PaceSetting::DEFAULT
    });
    /// `iperf3 -u` with its defaults.
    pub const IPERF3_DEFAULT: Setting = Setting::Iperf3 {
        pacing_timer_us: None,
    };

    /// Who sends.
    pub fn tool(&self) -> Tool {
        match self {
            Setting::Pace(_) => Tool::Pace,
            Setting::Iperf3 { .. } => Tool::Iperf3,
        }
    }

    /// Whether it is `pace` on soft timers (the claim; a timerfd `pace` is the baseline).
    pub fn is_soft(&self) -> bool {
        matches!(self, Setting::Pace(p) if p.timer == PaceTimer::Soft)
    }

    /// Its name in tables.
    pub fn label(&self) -> String {
        match self {
            Setting::Pace(p) => p.label(),
            Setting::Iperf3 {
                pacing_timer_us: None,
            } => "1 ms pacing timer (default)".into(),
            Setting::Iperf3 {
                pacing_timer_us: Some(us),
            } => format!("--pacing-timer {us}"),
        }
    }

    /// Its command line after the program's name, sending `spec` to `to:port` and writing
    /// the sender's own report to `json`.
    pub(super) fn args(&self, to: IpAddr, port: u16, spec: &SendSpec, json: &Path) -> Vec<String> {
        let (rate, size) = (spec.rate.bits_per_sec().to_string(), spec.size.to_string());
        match self {
            Setting::Iperf3 { pacing_timer_us } => {
                let mut a: Vec<String> = [
                    "-c",
                    &to.to_string(),
                    "-p",
                    &port.to_string(),
                    "-u",
                    "-b",
                    &rate,
                    "-l",
                    &size,
                    "-t",
                    &spec.seconds.to_string(),
                    "--json",
                    "--logfile",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                a.push(json.display().to_string());
                if let Some(us) = pacing_timer_us {
                    a.extend(["--pacing-timer".into(), us.to_string()]);
                }
                a
            }
            Setting::Pace(p) => {
                let mut a: Vec<String> = vec![
                    "pace".into(),
                    "--to".into(),
                    format!("{to}:{port}"),
                    "--rate".into(),
                    rate,
                    "--size".into(),
                    size,
                    "--duration".into(),
                    format!("{}s", spec.seconds),
                    "--json".into(),
                    json.display().to_string(),
                ];
                a.extend(p.options());
                a
            }
        }
    }
}

/// The I/O backends `pace` is measured on: each is one more setting axis, over the cheap end
/// of the frontier (the default and the largest GSO batch) where a backend's per-call cost
/// shows.
pub const IO_BACKENDS: [IoBackend; 1] = [IoBackend::Epoll];

/// The settings a run measures, in table order: `pace` with no spin window and a calibrated
/// one, 2, 4, (6,) and 8 datagrams per wake-up as one GSO send and as one `sendmmsg`, a named
/// precision and a timerfd, then `iperf3 -u` at its three pacing timers. The quick run keeps
/// one of each kind (4 per wake-up, no named precision).
pub fn settings(quick: bool) -> Vec<Setting> {
    let d = PaceSetting::DEFAULT;
    let burst = |per_wakeup, batch_send| PaceSetting {
        per_wakeup,
        batch_send,
        ..d
    };
    let per_wakeup = |batch_send| -> &[u32] {
        match (quick, batch_send) {
            (true, _) => &[4],
            // Six: k datagrams per wake-up arrive as k - 1 gaps of nothing and one of k
            // intervals, an inter-arrival stddev of the interval times sqrt(k - 1), so six is
            // the most that stays under the stddev of iperf3's default (1 ms, eight or nine
            // datagrams per wake-up) with room for jitter; GSO is the cheaper batch where it
            // counts (loopback), so only it gets the extra point.
            (false, BatchSend::Gso) => &[2, 4, 6, 8],
            (false, BatchSend::Sendmmsg) => &[2, 4, 8],
        }
    };
    let mut pace = vec![
        d,
        PaceSetting {
            spin: Spin::Calibrated,
            ..d
        },
    ];
    for batch_send in [BatchSend::Gso, BatchSend::Sendmmsg] {
        pace.extend(per_wakeup(batch_send).iter().map(|&n| burst(n, batch_send)));
    }
    if !quick {
        pace.push(PaceSetting {
            spin: Spin::PrecisionUs(PRECISION_US),
            ..d
        });
    }
    let mut out: Vec<Setting> = pace.into_iter().map(Setting::Pace).collect();
    out.push(Setting::PACE_TIMERFD);
    for io in IO_BACKENDS.into_iter().filter(|&io| io != IoBackend::Epoll) {
        for per_wakeup in [1, 8] {
            out.push(Setting::Pace(PaceSetting {
                io,
                per_wakeup,
                ..d
            }));
        }
    }
    out.extend([
        Setting::IPERF3_DEFAULT,
        Setting::Iperf3 {
            pacing_timer_us: Some(100),
        },
        Setting::Iperf3 {
            pacing_timer_us: Some(10),
        },
    ]);
    out
}

/// The named precision measured (`pace --precision 50us`): a p99 departure error a little
/// over the inter-arrival stddev of iperf3's finest pacing timer, the setting it must beat.
pub const PRECISION_US: u32 = 50;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_has_its_own_name_and_the_defaults_are_in_both_runs() {
        for quick in [true, false] {
            let all = settings(quick);
            let mut labels: Vec<(Tool, String)> =
                all.iter().map(|s| (s.tool(), s.label())).collect();
            labels.sort();
            labels.dedup();
            assert_eq!(labels.len(), all.len(), "{labels:?}");
            for needed in [
                Setting::PACE_DEFAULT,
                Setting::PACE_TIMERFD,
                Setting::IPERF3_DEFAULT,
            ] {
                assert!(all.contains(&needed), "{needed:?}");
            }
            let iperf3 = all.iter().filter(|s| s.tool() == Tool::Iperf3).count();
            assert_eq!(iperf3, 3);
        }
        assert!(settings(true).len() < settings(false).len());
    }

    #[test]
    fn a_setting_is_its_command_line() {
        let spec = SendSpec::standard(1);
        let to: IpAddr = [127, 0, 0, 1].into();
        let json = Path::new("out.json");
        let args = Setting::Pace(PaceSetting {
            per_wakeup: 8,
            batch_send: BatchSend::Sendmmsg,
            ..PaceSetting::DEFAULT
        })
        .args(to, 9, &spec, json)
        .join(" ");
        assert!(args.starts_with("pace --to 127.0.0.1:9 --rate 100000000 --size 1472"));
        assert!(
            args.contains("--per-wakeup 8 --batch-send sendmmsg"),
            "{args}"
        );
        let args = Setting::Pace(PaceSetting {
            spin: Spin::PrecisionUs(50),
            ..PaceSetting::DEFAULT
        })
        .args(to, 9, &spec, json)
        .join(" ");
        assert!(args.contains("--precision 50us"), "{args}");
        assert!(!args.contains("--per-wakeup"), "{args}");
        let args = Setting::Iperf3 {
            pacing_timer_us: Some(10),
        }
        .args(to, 9, &spec, json)
        .join(" ");
        assert!(
            args.ends_with("--logfile out.json --pacing-timer 10"),
            "{args}"
        );
        // The names say what differs from the defaults.
        assert_eq!(Setting::PACE_DEFAULT.label(), "soft, no spin (default)");
        assert_eq!(Setting::PACE_TIMERFD.label(), "timerfd");
        let json = serde_json::to_value(Setting::PACE_TIMERFD).unwrap();
        assert_eq!(json["tool"], "pace");
        assert_eq!(json["timer"], "timerfd");
        let back: Setting = serde_json::from_value(json).unwrap();
        assert_eq!(back, Setting::PACE_TIMERFD);
    }
}
