//! What every lab experiment runs on.
//!
//! | module | holds |
//! | --- | --- |
//! | [`server`] | one server run: [`Setup`] in, [`Outcome`] out ([`run`]); the timer sources |
//! | [`handler`] | the null and synthetic event handlers a server run fires |
//! | [`paced_flow`] | the UDP flow a server's handler sends while it serves (E6, E7) |
//! | [`client`] | the load generators: the project's own and `wrk` |
//! | [`rounds`] | configurations interleaved round by round ([`interleaved`]) |
//! | [`length`] | how long each kind of run lasts in quick and full mode ([`RunLength`]) |
//! | [`options`] | what an experiment knows of its lab run ([`ExpOptions`]) and states of its runs ([`RunInfo`], [`RunResult`]) |
//! | [`progress`] | progress bars and durations for people |
//!
//! CPU accounting and pinning ([`softtimers_tools::cpu`]) and JSON files
//! ([`softtimers_tools::json`]) are the tools' own, re-exported here for the experiments.

pub mod client;
pub mod handler;
pub mod length;
pub mod options;
pub mod paced_flow;
pub mod progress;
pub mod rounds;
pub mod server;

pub use client::{Client, NoResponse, check_client, run_client};
pub use handler::HandlerKind;
pub use length::RunLength;
pub use options::{ExpOptions, RunInfo, RunResult, trigger_source_name};
pub use paced_flow::{Clocking, PaceLoad, PaceOutcome};
pub use progress::{human_duration, progress_bar, with_progress};
pub use rounds::{interleaved, per_config};
pub use server::{Outcome, Setup, TimerSource, Workload, interval_label, run};
pub use softtimers_tools::cpu::{
    CLIENT_CPU, Pinned, cpus, pin_process, pin_to, pin_to_last_cpu, process_cpu_ns, server_cpu,
    thread_cpu_ns, waited_children_cpu_ns,
};
pub use softtimers_tools::json::{read_json, write_json};
