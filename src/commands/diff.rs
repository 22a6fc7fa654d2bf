//! `memcal diff`: two states of the data compared, as Markdown for a pull request or JSON, with gates.

use memcal::cli_io::print;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The state before: a git ref (branch, tag, commit) or a folder.
    #[arg(long)]
    base: String,
    /// The state after: a git ref or a folder; default: the working tree's data/.
    #[arg(long, default_value = "data")]
    head: String,
    /// The repository the refs belong to.
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// Print JSON instead of Markdown.
    #[arg(long)]
    json: bool,
    /// Exit 1 when a gate is crossed. Repeatable. `new-missed-oom`: a did-not-fit check of
    /// head (rows the change adds included) that a plan method or the simulator calls
    /// "fits" and did not in base. `median-worse=PROFILE:METHOD:POINTS`: METHOD's median
    /// |error| over PROFILE's rows (fp32, bf16-autocast, or * for each on its own) rose by
    /// more than POINTS percentage points. `default`: new-missed-oom,
    /// median-worse=*:plan-as-shipped:1 and median-worse=*:plan-held-out-architecture:1
    /// (docs/review.md). Improvements never fail.
    #[arg(long = "fail-on", value_name = "GATE")]
    fail_on: Vec<memcal::review::FailOn>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args {
        base,
        head,
        repo,
        json,
        fail_on,
    } = args;
    let b = memcal::review::evaluate(&memcal::review::DataState::open(&base, &repo)?)?;
    let h = memcal::review::evaluate(&memcal::review::DataState::open(&head, &repo)?)?;
    let d = memcal::review::diff(&b, &h, &fail_on);
    if json {
        print(&format!("{}\n", serde_json::to_string_pretty(&d)?))?;
    } else {
        print(&memcal::review::diff_markdown(&d))?;
    }
    Ok(if d.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
