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
//! * `softtimers lab [e1|…|e8|senders|e13|nginx]`: everything above plus the papers'
//!   experiments on the HTTP and UDP RPC workloads, the paced sender against `iperf3 -u`
//!   (on loopback and a veth link), and the HTTP server against nginx; each
//!   step writes `DIR/<step>.json`, and `DIR/report.md` with its plots is rendered from it;
//! * `softtimers pace` and `softtimers sink`: a paced UDP sender (soft timers, timerfd, a timer
//!   signal, spinning or no pacing) and a receiver that measures any sender's spacing with
//!   kernel timestamps (on a port it owns, or observing another program's port), built on
//!   `softtimer-net`;
//! * `softtimers report DIR`: renders `DIR/report.md` and the plots again from the JSON
//!   files in `DIR`, running nothing.
//!
//! Where things are:
//!
//! | module | holds |
//! | --- | --- |
//! | [`harness`] | one server run with its load generator, pinning, run lengths, interleaved rounds, progress, JSON files |
//! | [`exp`] | the lab's steps, one module per experiment family, and their registry |
//! | [`report`] | rendering report sections and plots from the steps' JSON; `softtimers report` |
//! | [`lab`] | `softtimers lab`: the steps in order, the overall progress line |
//! | [`bench_core`], [`bench_timers`], [`info`] | `softtimers bench core`, `bench timers`, `info` (also lab steps) |
//! | [`baselines`] | the timer queues `bench core` compares the facility with |
//! | [`pace`] | `softtimers pace` and `softtimers sink` |
//! | [`router`] | the forwarding workload: `softtimers flood`, `router` (polling and 4.2BSD designs), `compute` |
//! | [`netns`] | a veth link between two network namespaces, made and removed by an experiment |
//! | [`http`], [`rpc`] | the workloads: HTTP server and load generator, UDP RPC server and client |
//! | [`targets`], [`summary`] | target checks; medians, percentiles, per-round ratios |
//! | [`tcp_info`] | the kernel's TCP counts of a connection (segments sent, retransmitted) |
//! | [`plot`], [`tools`], [`alloc_count`] | PNG line charts; finding curl, wrk, nginx on `PATH`; the counting allocator |
//!
//! The modules are public so that the criterion benchmarks and the tests use the same code
//! as the command.
#![deny(unsafe_code)]

pub mod alloc_count;
pub mod baselines;
pub mod bench_core;
pub mod bench_timers;
pub mod exp;
pub mod harness;
pub mod http;
pub mod info;
pub mod lab;
pub mod netns;
pub mod pace;
pub mod path;
pub mod plot;
pub mod quic;
pub mod report;
pub mod router;
pub mod rpc;
pub mod summary;
pub mod targets;
pub mod tcp_info;
pub mod tools;
