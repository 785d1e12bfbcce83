//! kura-operator command line: wiring only.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// mimalloc instead of glibc's malloc: every reconcile renders, allocating and
/// freeing many small strings and maps per instance, and mimalloc's thread-local
/// free lists make that cheaper (docs/benchmarks.md, "The pure core").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "kura-operator",
    version,
    about = "Reconciles Kura cache instances; the revision is the content hash of the rendered manifests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the CustomResourceDefinitions as YAML files (the source of crds/).
    Crd {
        /// Directory to write into; prints to stdout when absent.
        #[arg(long)]
        output_dir: Option<PathBuf>,
    },
    /// Render an instance's manifests offline; prints them with the revision and each object's hash.
    Render(cli::RenderArgs),
    /// Run the operator.
    Run(Box<kura_operator::run::RunArgs>),
    /// Preview, read-only, what this binary under a configuration would write to
    /// the live cluster, instance by instance. Exit code 0: no change; 1: changes
    /// (or instances that would not be applied); 2: an error.
    Diff(Box<kura_operator::diff::command::DiffArgs>),
    /// Follow the operator's rollouts across the fleet (read-only).
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
}

#[derive(Subcommand)]
enum RolloutCommand {
    /// Where a fleet change stands, from what each instance's status reports.
    ///
    /// Exit code 0: every instance runs its desired revision (paused ones
    /// left out); 1: the rollout is halted (failed or invalid instances
    /// hold it); 2: still in progress (without --watch, or when --timeout
    /// ran out); 3: a usage or cluster error.
    Status(cli::rollout_status::StatusArgs),
}

/// `rollout status`'s exit code for a usage or cluster error (0 to 2 are
/// its answers).
const ROLLOUT_ERROR: u8 = 3;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // `rollout status` answers with 1 and 2: a usage error there is 3.
        Err(e) if e.use_stderr() && std::env::args().nth(1).as_deref() == Some("rollout") => {
            let _ = e.print();
            return ExitCode::from(ROLLOUT_ERROR);
        }
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Crd { output_dir } => cli::crd(output_dir.as_deref()),
        Command::Render(args) => cli::render(&args),
        Command::Run(args) => kura_operator::run::main(*args),
        // As `kubectl diff`: errors are 2, since 1 means "changes".
        Command::Diff(args) => {
            return cli::diff(*args).unwrap_or_else(|e| {
                report(&*e);
                ExitCode::from(2)
            });
        }
        Command::Rollout {
            command: RolloutCommand::Status(args),
        } => {
            return cli::rollout_status::status(args).unwrap_or_else(|e| {
                report(&*e);
                ExitCode::from(ROLLOUT_ERROR)
            });
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `... | head`: the reader has what it wanted.
        Err(e) if cli::is_broken_pipe(&*e) => ExitCode::SUCCESS,
        Err(e) => {
            report(&*e);
            ExitCode::FAILURE
        }
    }
}

/// One line, always: a log collector keeps it as one record.
fn report(e: &dyn std::error::Error) {
    let message = e.to_string();
    let one_line: Vec<&str> = message.lines().map(str::trim).collect();
    eprintln!("kura-operator: {}", one_line.join(" "));
}
