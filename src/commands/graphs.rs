//! `memcal graphs`: the zoo's graph files and the measured real models' imported graphs,
//! written deterministically.

use anyhow::Context;
use memcal::cli_io::print;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Output folder.
    #[arg(long, default_value = "data/graphs")]
    out: PathBuf,
    /// Replace graph files whose bytes differ from what this memcal generates (edited by
    /// hand, or made by another version); without it they are refused (exit 2).
    #[arg(long)]
    force: bool,
    /// The real models' folder: each model of its measured.json (the ones the campaign
    /// measures) is imported as `memcal import hf` does and written beside the zoo.
    #[arg(long, default_value = "data/models")]
    models: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args { out, force, models } = args;
    let graphs = memcal::zoo::data_graphs(&models)?;
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let written = memcal::zoo::write_checked(&out, &graphs, force)?;
    print(&format!(
        "wrote {} graphs to {}\n",
        written.len(),
        out.display()
    ))?;
    Ok(ExitCode::SUCCESS)
}
