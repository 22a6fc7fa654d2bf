//! The `memcal` command line.

use anyhow::Context;
use clap::{Parser, Subcommand};
use memcal::factors::FactorsFile;
use memcal::features::Precision;
use memcal::graph::Graph;
use std::path::PathBuf;
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
    Plan {
        /// A graph file in the memcal-graph/1 format (e.g. data/graphs/gpt2-small.json).
        graph: PathBuf,
        /// Batch size.
        #[arg(long)]
        batch: u64,
        /// Precision profile: bf16-autocast (CUDA default) or fp32 (CPU default).
        #[arg(long, default_value = "bf16-autocast")]
        precision: Precision,
        /// The factors file.
        #[arg(long, default_value = "data/factors.json")]
        factors: PathBuf,
        /// Check against this regime's cards instead of the planner's card list.
        #[arg(long)]
        regime: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write every graph of the zoo (full-size templates and reduced variants) as
    /// `<out>/<name>.json`. Deterministic bytes: rerunning changes nothing.
    Graphs {
        /// Output folder.
        #[arg(long, default_value = "data/graphs")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            let code = e
                .downcast_ref::<memcal::Error>()
                .map_or(1, |m| m.exit_code());
            ExitCode::from(code as u8)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plan {
            graph,
            batch,
            precision,
            factors,
            regime,
            json,
        } => {
            if batch == 0 {
                return Err(memcal::Error::Invalid("--batch must be at least 1".into()).into());
            }
            let g = Graph::load(&graph)?;
            let f = FactorsFile::load(&factors)?;
            let cards = match &regime {
                None => f.cards.clone(),
                Some(r) => f
                    .regimes
                    .get(r)
                    .with_context(|| format!("regime `{r}` is not in {}", factors.display()))?
                    .cards
                    .clone(),
            };
            let p = memcal::plan::plan(&g, batch, precision, &f, &cards)
                .map_err(memcal::Error::Invalid)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&p)?);
            } else {
                print!("{}", memcal::cli_plan::render(&p));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Graphs { out } => {
            std::fs::create_dir_all(&out)
                .with_context(|| format!("cannot create {}", out.display()))?;
            let written = memcal::zoo::write_all(&out)?;
            println!("wrote {} graphs to {}", written.len(), out.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
