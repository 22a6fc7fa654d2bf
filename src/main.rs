//! The `memcal` command line.

/// mimalloc: a large graph is millions of small strings and vectors, allocated and freed in
/// bulk; glibc's malloc spent a quarter of `memcal plan` on a million-node graph on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod commands;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// memcal: measure real training runs, refit the memory planner's factors, publish the
/// calibration site.
#[derive(Parser)]
#[command(name = "memcal", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Predict a training job's peak memory from its graph: the six features, the estimate,
    /// the bound, the verdict per card, the smallest card, and both baselines.
    Plan(commands::plan::Args),
    /// Import a model's graph from its configuration (no download, no Python).
    Import(commands::import::Args),
    /// Write every graph of the zoo (full-size templates and reduced variants) and of the
    /// measured real models (data/models/measured.json, imported) as `<out>/<name>.json`.
    /// Deterministic bytes: rerunning changes nothing.
    Graphs(commands::graphs::Args),
    /// Build the static calibration site from data/ into site/ (opens from disk, no server).
    /// Every number comes from the engine; identical inputs give byte-identical files.
    Build(commands::build::Args),
    /// Run the calibration engine on data/: load and account for every row, fit the factors,
    /// refit held out by architecture, by implementation and by regime, compute every metric. Prints a summary and
    /// writes calibration.json (every number the site shows, with the row ids behind it).
    Fit(commands::fit::Args),
    /// Compare the estimation error of two states of data/ (a git ref or a folder each) and
    /// print a Markdown report fit for a pull-request comment.
    Diff(commands::diff::Args),
    /// Audit the factors: every entry of data/factors-history.json against the
    /// data/factors.json of the commit that fixed it (factors, q90/q95, rows, rows_sha256) with
    /// its medians recomputed from that commit's rows; every committed version of the factors
    /// file against its entry; and the current factors refitted from the rows they claim.
    /// Exit 1 naming the entry and field of every difference.
    Audit(commands::audit::Args),
    /// One state's engine output as JSON (memcal-review-state/1), read by another memcal's
    /// `diff` to score a base ref with the base's own code.
    #[command(hide = true)]
    ReviewState(commands::review_state::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // The reader of stdout went away (`| head`): files were written first; a normal end.
        Err(e) if memcal::cli_io::is_closed_stdout(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", chain_message(&e));
            let code = e
                .downcast_ref::<memcal::Error>()
                .map_or(1, |m| m.exit_code());
            ExitCode::from(code as u8)
        }
    }
}

/// The error and its causes, joined by ": ", without a cause that the message before it already
/// ends with (memcal's own errors print their io cause themselves).
fn chain_message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    let mut prev = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if !prev.ends_with(&s) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&s);
        }
        prev = s;
    }
    msg
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plan(a) => commands::plan::run(a),
        Command::Import(a) => commands::import::run(a),
        Command::Graphs(a) => commands::graphs::run(a),
        Command::Build(a) => commands::build::run(a),
        Command::Fit(a) => commands::fit::run(a),
        Command::Diff(a) => commands::diff::run(a),
        Command::Audit(a) => commands::audit::run(a),
        Command::ReviewState(a) => commands::review_state::run(a),
    }
}
