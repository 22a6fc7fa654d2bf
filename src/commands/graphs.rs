//! `memcal graphs`: the zoo's graph files, written deterministically.

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
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args { out, force } = args;
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let written = memcal::zoo::write_all_checked(&out, force)?;
    print(&format!(
        "wrote {} graphs to {}\n",
        written.len(),
        out.display()
    ))?;
    Ok(ExitCode::SUCCESS)
}
