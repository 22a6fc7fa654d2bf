//! `memcal build`: the static calibration site (or, with --check, whether the committed one is current).

use memcal::cli_io::print;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The data folder (factors.json, graphs/, runs/, prose/).
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// The site folder: new, empty, or one memcal built (it holds the manifest
    /// `.memcal-manifest`; only the files it lists are ever removed). Not the data folder
    /// or inside it. The new site is built next to it and renamed in.
    #[arg(long, default_value = "site")]
    out: PathBuf,
    /// Do not write: rebuild in memory and fail (exit 1), naming the first differing file,
    /// if the committed site differs from what the data produces (exit 2 on bad data).
    #[arg(long)]
    check: bool,
    /// Also write each page's view model as JSON next to it (for debugging templates).
    #[arg(long)]
    debug_json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args {
        data,
        out,
        check,
        debug_json,
    } = args;
    if check {
        return Ok(match memcal::report::compare_site(&data, &out)? {
            None => {
                print(&format!(
                    "{} is current: it is exactly what {} produces\n",
                    out.display(),
                    data.display()
                ))?;
                ExitCode::SUCCESS
            }
            Some(first) => {
                eprintln!(
                    "error: {} is not current: {first}\nrebuild it with `memcal build` and commit it",
                    out.display()
                );
                ExitCode::from(1)
            }
        });
    }
    let started = std::time::Instant::now();
    let summary = memcal::report::build_site(&data, &out, debug_json)?;
    eprint!(
        "{}",
        memcal::cli_io::skipped_warning(&data, &summary.skipped)
    );
    print(&format!(
        "built {}: {} pages, {} charts, {} rows, in {:.2} s{}{}\n",
        out.display(),
        summary.pages,
        summary.charts,
        summary.rows,
        started.elapsed().as_secs_f64(),
        if summary.removed.is_empty() {
            String::new()
        } else {
            format!(
                "; removed {} files of the previous build it no longer writes",
                summary.removed.len()
            )
        },
        if summary.kept.is_empty() {
            String::new()
        } else {
            format!("; kept {} files memcal did not write", summary.kept.len())
        }
    ))?;
    Ok(ExitCode::SUCCESS)
}
