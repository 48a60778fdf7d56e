//! What every program hands back, and the one way a command shows it.
//!
//! A program's result is a typed [`Report`]: it prints as text (Markdown or a few lines)
//! and writes itself as JSON with `--json FILE`, and the lab reads that file back into the
//! same type (serde both ways), so that a field the writer renamed or dropped is a parse
//! error naming it, never a silent NaN. A program's command-line arguments are a [`Program`]:
//! run it, get its report. [`WithJson`] adds the `--json FILE` every command takes, and
//! [`execute`] is the whole of a command.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
/// The result of a program's run.
pub use anyhow::Result;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::json::write_json;

/// A program's result.
pub trait Report: Serialize + DeserializeOwned {
    /// Printed on stderr rather than stdout (the path command, whose stdout is its child's).
    const ON_STDERR: bool = false;

    /// The report as the command prints it, ending with a newline.
    fn text(&self) -> String;

    /// What cut the run short, when something did: the command prints (and writes) the
    /// report, then fails with this.
    fn failure(&self) -> Option<String> {
        None
    }
}

/// A program's arguments: what it needs to run.
pub trait Program {
    /// What it reports.
    type Output: Report;

    /// Runs it.
    fn run(&self) -> Result<Self::Output>;
}

/// Implements [`Program`] for argument types whose run is one expression of `self`, named
/// by the identifier given: `Args => Report, |args| expression;` for each.
///
/// ```
/// use softtimers_tools::output::{Program, Report};
///
/// #[derive(clap::Args)]
/// struct HelloArgs {
///     #[arg(long)]
///     name: String,
/// }
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Hello {
///     greeting: String,
/// }
///
/// impl Report for Hello {
///     fn text(&self) -> String {
///         format!("{}\n", self.greeting)
///     }
/// }
///
/// softtimers_tools::program! {
///     HelloArgs => Hello, |args| Ok(Hello { greeting: format!("hello, {}", args.name) });
/// }
///
/// let args = HelloArgs { name: "loop".into() };
/// assert_eq!(args.run().unwrap().text(), "hello, loop\n");
/// ```
#[macro_export]
macro_rules! program {
    ($($args:ty => $report:ty, |$a:ident| $run:expr;)+) => {$(
        impl $crate::output::Program for $args {
            type Output = $report;

            fn run(&self) -> $crate::output::Result<$report> {
                let $a = self;
                $run
            }
        }
    )+};
}

/// A command's arguments: the program's own, and the `--json FILE` every command takes.
///
/// ```
/// use clap::Parser;
/// use softtimers_tools::output::WithJson;
/// use softtimers_tools::router::ComputeArgs;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     compute: WithJson<ComputeArgs>,
/// }
///
/// let cli = Cli::parse_from(["compute", "--duration", "1ms", "--json", "out.json"]);
/// assert_eq!(cli.compute.json.as_deref(), Some(std::path::Path::new("out.json")));
/// ```
#[derive(clap::Args, Clone, Debug)]
pub struct WithJson<A: clap::Args> {
    /// The program's arguments.
    #[command(flatten)]
    pub args: A,
    /// Also write the result as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Says on stderr where `program` listens when the kernel chose its port (`asked` has port
/// 0): whoever sends to it needs to know it. Nothing otherwise.
pub fn announce_port(program: &str, asked: SocketAddr, bound: std::io::Result<SocketAddr>) {
    if asked.port() == 0
        && let Ok(bound) = bound
    {
        eprintln!("softtimers {program}: listening on {bound}");
    }
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

/// Runs the command's program and shows its report: a command from start to end. A `--json`
/// file that cannot be written is refused before the run, not found out after it.
pub fn execute<P: Program + clap::Args>(command: &WithJson<P>) -> Result<()> {
    if let Some(path) = &command.json {
        check_writable(path)?;
    }
    let report = command.args.run()?;
    emit(&report, command.json.as_deref())?;
    match report.failure() {
        Some(why) => anyhow::bail!("{why}"),
        None => Ok(()),
    }
}

/// Refuses a `--json` file that cannot be written, before a run rather than after it: a
/// file that does not exist yet is created and removed again, an existing regular file is
/// opened for appending (and left as it is); anything else (a FIFO, a device) is left to
/// the write after the run, which a probe would disturb.
pub fn check_writable(path: &Path) -> Result<()> {
    let cannot = || format!("--json {}: cannot write it", path.display());
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => {
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .with_context(cannot)?;
        }
        Ok(_) => {}
        Err(_) => {
            // Only a file this made is removed: one that appeared meanwhile is not.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .with_context(cannot)?;
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that counts its runs.
    #[derive(clap::Args, Clone, Debug)]
    struct Counted {
        #[arg(skip)]
        runs: std::sync::Arc<std::sync::atomic::AtomicU32>,
    }

    #[derive(Serialize, serde::Deserialize)]
    struct Done;

    impl Report for Done {
        fn text(&self) -> String {
            String::new()
        }
    }

    impl Program for Counted {
        type Output = Done;

        fn run(&self) -> Result<Done> {
            self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Done)
        }
    }

    #[test]
    fn a_json_file_that_cannot_be_written_is_refused_before_the_run() {
        let dir = std::env::temp_dir().join(format!("softtimers-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let command = |json: PathBuf| WithJson {
            args: Counted {
                runs: Default::default(),
            },
            json: Some(json),
        };
        let nowhere = command(dir.join("missing").join("x.json"));
        let err = execute(&nowhere).unwrap_err();
        assert!(format!("{err:#}").contains("cannot write it"), "{err:#}");
        assert_eq!(
            nowhere.args.runs.load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        // A writable one: the run goes ahead and writes it.
        let fine = command(dir.join("x.json"));
        execute(&fine).unwrap();
        assert_eq!(fine.args.runs.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(dir.join("x.json").exists());
        // An existing file is only looked at: a refused run leaves it as it was.
        let kept = dir.join("kept.json");
        std::fs::write(&kept, "earlier").unwrap();
        check_writable(&kept).unwrap();
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "earlier");
        // A file that did not exist is not left behind by the check.
        let probe = dir.join("probe.json");
        check_writable(&probe).unwrap();
        assert!(!probe.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
