//! `memcal diff`: two states compared, each scored by its own code (data and code), as
//! Markdown for a pull request or JSON, with gates.

use memcal::cli_io::print;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(
    long_about = "Compare the estimation error of two states of the repository, each scored by its own code: \
the base ref's data by the base ref's memcal (built once per commit into --base-cache, reused after), \
head's data by head's code (the working tree: this memcal). When no file of code (src/, Cargo.toml, \
Cargo.lock) differs, nothing is built. When the base cannot be built or cannot report (a commit \
older than code review), the first line says so and both sides are scored by this memcal.\n\n\
The report opens with one bottom line per precision profile (new missed out-of-memory checks \
first), then only what changed: the code, rules and features that changed, hand-edited factors, \
the methods whose error moved, the card verdicts, and the rows added (each with every method's \
error). See docs/review.md."
)]
pub struct Args {
    /// The state before: a git ref (branch, tag, commit) or a folder.
    #[arg(long)]
    base: String,
    /// The state after: a git ref or a folder; default: the working tree (its data/, scored
    /// by this memcal).
    #[arg(long)]
    head: Option<String>,
    /// The repository the refs belong to.
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// Where the base ref's memcal is built and kept, one binary per commit (default:
    /// <repo>/target/memcal-base). MEMCAL_BASE_PROFILE=dev builds the debug profile.
    #[arg(long, value_name = "DIR")]
    base_cache: Option<PathBuf>,
    /// Print JSON (format memcal-diff/2, docs/review.md) instead of Markdown.
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
        base_cache,
        json,
        fail_on,
    } = args;
    let req = memcal::review::Request {
        repo: &repo,
        base: &base,
        head: head.as_deref(),
        cache: base_cache.unwrap_or_else(|| memcal::review::code::default_cache(&repo)),
    };
    let mut say = |line: &str| eprintln!("{line}");
    let (b, h, code) = memcal::review::open_sides(&req, &mut say)?;
    let d = memcal::review::diff(&b, &h, &code, &fail_on);
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
