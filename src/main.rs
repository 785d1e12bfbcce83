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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
