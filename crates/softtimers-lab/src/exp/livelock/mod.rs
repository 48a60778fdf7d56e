//! Receive livelock (Mogul and Ramakrishnan, Sections 6–7): E10, forwarded rate against
//! offered rate for the 4.2BSD-structured router and the polling router, without and with a
//! screening stage (Figs. 6-1, 6-3, 6-4); E11, the polling router's packet quota (Figs. 6-5,
//! 6-6); E12, the CPU left to a compute-bound process on the router's core under flood, for
//! CPU budgets of 25–100 % (Fig. 7-1).
//!
//! Every run is on a [`ForwardPath`](softtimers_tools::netns::ForwardPath) the step makes and removes: a source namespace floods
//! minimum-size UDP datagrams (`softtimers flood`, pinned to CPU 0) at the router namespace
//! (`softtimers router`, pinned to the last CPU), which forwards them to a phantom next hop
//! on the sink's link. Forwarded packets are counted on the router's outgoing interface, as
//! the paper read its output interface's packet count.
//!
//! One core of this VM offers about 240,000 datagrams/s through the veth pair, and a router
//! that only receives and sends forwards about as many: the flood could not overload it. So
//! the router does [`WORK_NS`] of busy work per packet (a stated cost, as the paper's
//! `screend` added one), which puts its loss-free rate near a quarter of what the source
//! offers; the screening stage adds [`SCREEN_NS`] more.

mod bench;
mod e10;
mod e11;
mod e12;

pub use e10::{E10, ForwardRow, Mlfrr, e10, mlfrr};
pub use e11::{E11, e11};
pub use e12::{BudgetRow, E12, e12};

use serde::{Deserialize, Serialize};

use bench::*;

/// What every livelock step records beside its rows: how long each flood lasted, and the
/// fastest the source could send.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Flood {
    /// Seconds of flood per run.
    pub flood_s: f64,
    /// The source's top rate, datagrams/s (`null` where the step did not run).
    #[serde(deserialize_with = "crate::summary::num")]
    pub source_max_pps: f64,
}

impl Flood {
    /// A step that did not run: its flood length, no source rate.
    fn unmeasured(flood_s: f64) -> Self {
        Flood {
            flood_s,
            source_max_pps: f64::NAN,
        }
    }
}
use e10::*;
use e11::*;
use e12::*;

/// The router's per-packet forwarding work, ns of busy work.
pub const WORK_NS: u64 = 15_000;

/// The screening stage's per-packet work, ns.
pub const SCREEN_NS: u64 = 5_000;

/// The port the router listens on.
const PORT: u16 = 9000;

/// The router's design in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Design {
    /// `polling` or `baseline`.
    pub router: softtimers_tools::router::RouterDesign,
    /// With the screening stage.
    pub screen: bool,
}

impl Design {
    /// Every design E10 compares, in table order.
    pub const ALL: [Design; 4] = [
        Design {
            router: softtimers_tools::router::RouterDesign::Baseline,
            screen: false,
        },
        Design {
            router: softtimers_tools::router::RouterDesign::Polling,
            screen: false,
        },
        Design {
            router: softtimers_tools::router::RouterDesign::Baseline,
            screen: true,
        },
        Design {
            router: softtimers_tools::router::RouterDesign::Polling,
            screen: true,
        },
    ];

    /// `baseline`, `polling`, `baseline+screen`, `polling+screen`.
    pub fn name(self) -> &'static str {
        use softtimers_tools::router::RouterDesign::{Baseline, Polling};
        match (self.router, self.screen) {
            (Baseline, false) => "baseline",
            (Polling, false) => "polling",
            (Baseline, true) => "baseline+screen",
            (Polling, true) => "polling+screen",
        }
    }
}

fn flood_seconds(quick: bool) -> f64 {
    if quick { 0.4 } else { 1.0 }
}

/// How many router runs E10, E11 and E12 make (for the progress estimate).
pub fn runs(step: &str, quick: bool) -> usize {
    match step {
        "e10" => 1 + Design::ALL.len() * (fractions(quick).len() + refinements(quick) + 1),
        "e11" => 1 + quotas(quick).len() * 2 * e11_fractions(quick).len(),
        _ => 2 + budgets(quick).len() * e12_fractions(quick).len(),
    }
}

/// Seconds one run takes, all told (the flood and about 0.45 s of set-up and settling, as
/// measured over the full runs' E10–E12).
pub fn run_seconds(quick: bool) -> f64 {
    flood_seconds(quick) + 0.45
}

/// Why a forwarding step cannot run here, if it cannot (for the lab to say so plainly).
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("the forwarding experiments make network namespaces and need root".into());
    }
    softtimers_tools::process::find("ip")
        .is_none()
        .then(|| "iproute2's `ip` is not installed".to_string())
}
