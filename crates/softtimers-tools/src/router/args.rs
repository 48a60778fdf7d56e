//! `softtimers flood`, `router` and `compute` on the command line (the first two take their
//! options, [`FloodOptions`] and [`RouterOptions`], as they are).

use std::time::Duration;

use super::{
    ComputeReport, FloodOptions, FloodReport, RouterOptions, RouterReport, compute, flood, router,
};
use crate::parse::parse_duration;

/// `softtimers compute`.
#[derive(clap::Args, Debug, Clone)]
pub struct ComputeArgs {
    /// How long.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
}

crate::program! {
    FloodOptions => FloodReport, |options| flood(options);
    RouterOptions => RouterReport, |options| router(options);
    ComputeArgs => ComputeReport, |args| compute(args.duration);
}
