//! What every program hands back, and the one way a command shows it.
//!
//! A program's result is a typed [`Report`]: it prints as text (Markdown or a few lines)
//! and writes itself as JSON with `--json FILE`, and the lab reads that file back into the
//! same type (serde both ways), so that a field the writer renamed or dropped is a parse
//! error naming it, never a silent NaN. A program's command-line arguments are a [`Program`]:
//! run it, get its report; [`execute`] is the whole of a command.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::json::write_json;

/// A program's result.
pub trait Report: Serialize + DeserializeOwned {
    /// Printed on stderr rather than stdout (the path command, whose stdout is its child's).
    const ON_STDERR: bool = false;

    /// The report as the command prints it, ending with a newline.
    fn text(&self) -> String;
}

/// A program's arguments: what it needs to run, and where its JSON goes.
pub trait Program {
    /// What it reports.
    type Output: Report;

    /// Runs it.
    fn run(&self) -> Result<Self::Output>;

    /// The `--json` file, if asked for.
    fn json(&self) -> Option<&Path>;
}

/// Prints `report` and writes it as JSON to `json` if given.
pub fn emit<R: Report>(report: &R, json: Option<&Path>) -> Result<()> {
    if R::ON_STDERR {
        eprint!("{}", report.text());
    } else {
        print!("{}", report.text());
    }
    json.map_or(Ok(()), |path| write_json(path, report))
}

/// Runs `program` and shows its report: a command from start to end.
pub fn execute<P: Program>(program: &P) -> Result<()> {
    emit(&program.run()?, program.json())
}
