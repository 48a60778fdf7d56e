//! # softtimers-lab: the lab that re-runs the papers' experiments
//!
//! The lab measures the facility of `softtimer` and the programs of `softtimers-tools` against
//! real baselines and writes, per step, a JSON file from which its report section and plots
//! are rendered (`softtimers lab`, `softtimers report DIR`).
//!
//! | module | holds |
//! | --- | --- |
//! | [`exp`] | the lab's steps, one module per experiment family, and their registry ([`exp::Step`]) |
//! | [`lab`] | `softtimers lab`: the steps in order, the overall progress line; `softtimers report` |
//! | [`harness`] | what the experiments run on: one server run with its load, run lengths, interleaved rounds, progress |
//! | [`report`], [`plot`], [`table`] | rendering a step's section from its JSON; PNG line charts; Markdown tables |
//! | [`targets`], [`summary`], [`paper`] | target checks; medians, percentiles, per-round ratios; the seed papers' figures |
//! | [`frontier`] | cost against precision: the frontier of measured settings, and which beats which |
//! | [`bench_core`], [`bench_timers`], [`baselines`] | `softtimers bench core` and `bench timers` (also lab steps); the timer queues bench core compares with |
//! | [`info`] | `softtimers info` |
//!
//! The layers, bottom up: `summary`, `targets`, `frontier` and `paper` (numbers, and what
//! they are judged against); `report`, `plot` and `table` (a step's section from its JSON alone); `harness`
//! (server runs and their load, on the tools' servers); the experiments in `exp`, one module
//! per family, each a result type implementing [`report::Section`] and a function that runs
//! it; the registry [`exp::Step`]; and [`lab`], which runs the registry in order. Start
//! reading at [`exp::Step::run`], then at one family (E1 and E2 in [`exp::cost`] are the
//! smallest). The modules are public so that the criterion benchmarks and the tests use the
//! same code as the command.
#![deny(unsafe_code)]

pub mod baselines;
pub mod bench_core;
pub mod bench_timers;
pub mod exp;
pub mod frontier;
pub mod harness;
pub mod info;
pub mod lab;
pub mod paper;
pub mod plot;
pub mod report;
pub mod summary;
pub mod table;
pub mod targets;
