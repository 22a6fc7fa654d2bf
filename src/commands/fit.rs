//! `memcal fit`: the calibration engine's summary and calibration.json, and with --write-factors the factors and their history.

use memcal::cli_io::print;
use memcal::outputs::write_file_atomic as write_atomic;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The data folder (factors.json, graphs/, runs/).
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// Where to write calibration.json (a file outside the data folder).
    #[arg(long, default_value = "calibration.json")]
    out: PathBuf,
    /// Write --out even inside the data folder (refused without it: the data folder holds
    /// memcal's inputs).
    #[arg(long)]
    force: bool,
    /// Also rewrite data/factors.json with the refitted factors, the quantiles and their
    /// provenance (fixed_at = now, the SHA-256 of the fitted rows, the tool version). The
    /// only way the factors file changes.
    #[arg(long)]
    write_factors: bool,
    /// Print calibration.json to stdout instead of the summary table.
    #[arg(long)]
    json: bool,
    /// Print the strategies' evidence instead (writes nothing): every row with a `strategy`
    /// against its formula (docs/strategies.md), per strategy and per family: rows, median and
    /// max |error| and the q95 of measured / predicted; with --json, the evidence as JSON.
    #[arg(long)]
    strategies: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args {
        data,
        out,
        force,
        write_factors,
        json,
        strategies,
    } = args;
    if strategies {
        let ds = memcal::engine::load(&data)?;
        let e = memcal::strategy::evidence::evidence(&ds, &data);
        let text = if json {
            let v = memcal::cli_io::with_format(
                memcal::strategy::evidence::STRATEGY_EVIDENCE_FORMAT,
                &e,
            )?;
            format!("{}\n", serde_json::to_string_pretty(&v)?)
        } else {
            memcal::strategy::render::render_evidence(&e)
        };
        print(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    memcal::outputs::check_calibration_out(&out, &data, force)?;
    let (ds, skipped) = memcal::engine::load_reporting(&data)?;
    eprint!("{}", memcal::cli_io::skipped_warning(&data, &skipped));
    let cal = memcal::engine::calibrate(&ds);
    let text = memcal::engine::write_calibration_json(&cal);
    write_atomic(&out, text.as_bytes())?;
    // Every file is written before anything is printed: a closed stdout loses nothing.
    if write_factors {
        let f = memcal::engine::refit_factors_file(&ds, &cal, &memcal::clock::now());
        let path = data.join("factors.json");
        let history_path = data.join("factors-history.json");
        let mut history = memcal::factors::FactorHistory::load_or_empty(&history_path)?;
        history
            .entries
            .push(memcal::review::history_entry(&f, &cal));
        write_atomic(&path, f.to_json().as_bytes())?;
        write_atomic(&history_path, history.to_json().as_bytes())?;
        eprintln!(
            "rewrote {} (fixed_at {}) and appended to {}; commit both before measuring after-the-fit rows",
            path.display(),
            f.provenance.as_ref().map_or(memcal::format::MISSING, |p| p.fixed_at.as_str()),
            history_path.display()
        );
    }
    if json {
        print(&text)?;
    } else {
        print(&format!(
            "{}\nwrote {}\n",
            memcal::engine::summary_table(&cal),
            out.display()
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
