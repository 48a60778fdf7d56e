//! # softtimers-lab: the `softtimers` command
//!
//! The top of the workspace. It measures the facility from `softtimer` against real
//! baselines and writes tables, JSON and (in later experiments) plots:
//!
//! * `softtimers info`: the measurement clock in use and why, resolutions, and the cost of a
//!   clock read against the other candidates;
//! * `softtimers bench core`: the facility's micro-benchmarks against a `BinaryHeap`, a
//!   `BTreeMap` and tokio's `DelayQueue`;
//! * `softtimers bench timers`: the cost per event of soft timers, a periodic `timerfd` and a
//!   timer signal, from a workload's slowdown (the paper's Table I method), on the event
//!   loop of `softtimer-rt`;
//! * `softtimers lab [e1|e2|e3|e4|e5|e13|nginx]`: everything above plus the papers'
//!   experiments on the HTTP and UDP RPC workloads (`http`, `rpc`, `experiments`), and the
//!   HTTP server against nginx, written to `results/report.md` with tables, JSON and plots.
//!
//! The modules are public so that the criterion benchmarks and the tests use the same code
//! as the command.
#![deny(unsafe_code)]

pub mod alloc_count;
pub mod baselines;
pub mod bench_core;
pub mod bench_timers;
pub mod experiments;
pub mod http;
pub mod info;
pub mod lab;
pub mod nginx;
pub mod plot;
pub mod rpc;
pub mod stats;
