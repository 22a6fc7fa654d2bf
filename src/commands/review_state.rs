//! `memcal review-state` (hidden): one state's engine output as `memcal-review-state/1`, for
//! another memcal's `diff` to read (`src/review/state.rs`).

use memcal::cli_io::print;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The data folder to score.
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// The repository whose OpInfo samples the simulator's generic rule is run on.
    #[arg(long, default_value = ".")]
    repo: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let ds = memcal::engine::load(&args.data)?;
    let cal = memcal::engine::calibrate(&ds);
    let state = memcal::review::ReviewState::of(
        &cal,
        ds.factors.small_runs.threshold_bytes,
        Some(&args.repo),
    );
    print(&format!("{}\n", serde_json::to_string(&state)?))?;
    Ok(ExitCode::SUCCESS)
}
