//! `memcal audit`: the factor history and the factors checked against their commits and rows.

use memcal::cli_io::print;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The data folder whose factors are checked (its git repository is found from it).
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args { data, json } = args;
    let a = memcal::review::audit(&data)?;
    if json {
        let v = memcal::cli_io::with_format(memcal::review::AUDIT_FORMAT, &a)?;
        print(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
    } else {
        print(&memcal::review::audit_text(&a))?;
    }
    Ok(if a.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
