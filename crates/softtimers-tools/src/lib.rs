//! # softtimers-tools: the programs a user runs on their own
//!
//! Each module is one program of the `softtimers` command, usable as a library: options in,
//! a typed report out (serde both ways, so that the lab reads back exactly what a program
//! wrote), and the same code behind the command line, the lab's experiments and the tests.
//!
//! | module | program |
//! | --- | --- |
//! | [`path`] | `softtimers path`: a path emulator on soft timers between two network namespaces (delay, rate, queue, loss) |
//! | [`pace`] | `softtimers pace` and `sink`: a paced UDP sender (soft timers, timerfd, a timer signal, spinning, none) and a receiver that measures any sender with kernel timestamps |
//! | [`router`] | `softtimers flood`, `router` (the livelock paper's polling design and the 4.2BSD baseline), `compute` |
//! | [`http`], [`rpc`] | the workloads: an event-driven HTTP server and its load generator, a UDP RPC server and client |
//! | [`quic`] | `softtimers quic server|client`: QUIC's perf protocol on soft timers, on stock quinn and tokio, and on kernel TCP |
//! | [`netns`] | network namespaces joined by veth links, made for one run and removed after it |
//! | [`cpu`], [`process`], [`tcp_info`] | CPU time and pinning; finding and reaping external programs; the kernel's TCP counts of a connection |
//! | [`interrupt`] | Ctrl-C for a program that runs until stopped: its run ends and it reports |
//! | [`output`], [`parse`], [`json`] | a program's typed report and how a command shows it; the command-line value parsers the tools share; JSON files written and read back |
//!
//! The layers: everything here stands on `softtimer-rt` (the event loop), `softtimer-net`
//! (sans-IO pacers, links, batched UDP) and `softtimer-quic` (quinn-proto on soft timers);
//! the lab (`softtimers-lab`) stands on these programs, and the `softtimers` binary only
//! dispatches to them. Start reading at [`pace`], the smallest whole program.
#![deny(unsafe_code)]

pub mod cpu;
pub mod http;
pub mod interrupt;
pub mod json;
pub mod netns;
pub mod output;
pub mod pace;
pub mod parse;
pub mod path;
pub mod process;
pub mod quic;
pub mod router;
pub mod rpc;
pub mod tcp_info;
