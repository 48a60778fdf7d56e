//! What an experiment knows of the lab run it is part of, and how its server runs were made.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use softtimers_tools::cpu::{CLIENT_CPU, server_cpu};

use super::{Client, RunLength};
use crate::report::{NoExtra, Skippable};
use crate::targets::TargetCheck;

/// What an experiment needs to know about the lab run it is part of.
#[derive(Clone, Debug)]
pub struct ExpOptions {
    /// Run lengths.
    pub length: RunLength,
    /// Where results go.
    pub out: PathBuf,
    /// The HTTP load generator.
    pub client: Client,
}

/// How an experiment's server runs were made, as its report section states them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    /// `quick` or `full`.
    pub mode: String,
    /// Seconds per run.
    #[serde(deserialize_with = "crate::summary::num")]
    pub run_s: f64,
    /// Interleaved rounds.
    pub rounds: usize,
    /// The CPU the server's loop was pinned to.
    pub server_cpu: usize,
    /// The CPU the load generator was pinned to.
    pub client_cpu: usize,
    /// The HTTP load generator.
    pub client: Client,
}

/// The result of an experiment made of server runs: how they were made, its rows, the
/// targets checked against them, and whatever else the experiment records (`Extra`, written
/// into the same JSON object).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult<Row, Extra = NoExtra> {
    /// How the runs were made.
    pub run: RunInfo,
    /// What else the experiment records.
    #[serde(flatten)]
    pub extra: Extra,
    /// One row per measured configuration.
    pub rows: Vec<Row>,
    /// The targets against this run (none, and no `targets` in the JSON, for an experiment
    /// that only reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetCheck>,
}

/// A result made of server runs always ran.
impl<Row, Extra> Skippable for RunResult<Row, Extra> {}

impl<Row> RunResult<Row> {
    /// The result of throughput runs made in the lab run `options`.
    pub fn throughput(options: &ExpOptions, rows: Vec<Row>, targets: Vec<TargetCheck>) -> Self {
        Self::throughput_rounds(options, options.length.rounds(), rows, targets)
    }

    /// [`throughput`](Self::throughput), for a step that makes `rounds` rounds of them.
    pub fn throughput_rounds(
        options: &ExpOptions,
        rounds: usize,
        rows: Vec<Row>,
        targets: Vec<TargetCheck>,
    ) -> Self {
        RunResult {
            run: RunInfo::new(options, options.length.throughput_run(), rounds),
            extra: NoExtra {},
            rows,
            targets,
        }
    }
}

impl RunInfo {
    /// For runs of `run` each, `rounds` rounds, in the lab run `options`.
    pub fn new(options: &ExpOptions, run: Duration, rounds: usize) -> Self {
        RunInfo {
            mode: options.length.mode().to_string(),
            run_s: run.as_secs_f64(),
            rounds,
            server_cpu: server_cpu(),
            client_cpu: CLIENT_CPU,
            client: options.client,
        }
    }

    /// For throughput runs, as many rounds as the lab run `options` makes of them.
    pub fn throughput(options: &ExpOptions) -> Self {
        let length = options.length;
        RunInfo::new(options, length.throughput_run(), length.rounds())
    }

    /// "the project's own load generator" or "wrk".
    pub fn client_name(&self) -> &'static str {
        match self.client {
            Client::Own => "the project's own load generator",
            Client::Wrk => "wrk",
        }
    }
}

/// Serialises a [`TriggerSource`](softtimer::TriggerSource) as its name (`syscall`, `send`, ...) and reads it back.
pub mod trigger_source_name {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};
    use softtimer::TriggerSource;

    /// Writes the name.
    pub fn serialize<S: Serializer>(source: &TriggerSource, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(source.name())
    }

    /// Reads a name written by [`serialize`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TriggerSource, D::Error> {
        let name = String::deserialize(d)?;
        TriggerSource::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| D::Error::custom(format!("unknown trigger source {name:?}")))
    }
}
