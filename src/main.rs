//! The `memcal` command line.

/// mimalloc: a large graph is millions of small strings and vectors, allocated and freed in
/// bulk; glibc's malloc spent a quarter of `memcal plan` on a million-node graph on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
enum ImportSource {
    /// A Hugging Face `config.json` (gpt2, llama, mistral, mixtral, bert, roberta, t5, vit):
    /// the graph transformers' model class builds from it, at its real parameter count.
    /// Prints the graph (or writes --out) and, on stderr, what it assumed.
    Hf {
        /// The model's config.json, as it is on the hub.
        config: PathBuf,
        /// Sequence length in tokens (default: the model's positions, capped at 4096 for
        /// decoders and 512 for encoders; the choice is printed).
        #[arg(long)]
        seq: Option<u64>,
        /// Decoder sequence length of an encoder-decoder (t5; default: as --seq).
        #[arg(long)]
        decoder_seq: Option<u64>,
        /// The graph's name (default: the config's folder or file name).
        #[arg(long)]
        name: Option<String>,
        /// The graph's family (default: hf-<model_type>).
        #[arg(long)]
        family: Option<String>,
        /// Write the graph here instead of standard output (refused over an existing file
        /// unless --force).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Overwrite --out if it exists.
        #[arg(long)]
        force: bool,
        /// Write the sequence length as the axis "T" instead of a number: the graph is then
        /// planned at any length with `memcal plan --seq N` (the learned positions of gpt2,
        /// bert and roberta still cap it).
        #[arg(long)]
        seq_axis: bool,
    },
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
        /// Check against this regime's cards instead of the planner's card list and the real
        /// products.
        #[arg(long)]
        regime: Option<String>,
        /// The data folder the verdict's evidence comes from: each method's held-out record
        /// (which method decides, and its own q95 bound), the range of the rows each profile
        /// was fitted on, and the allocator overhead of the GPU rows (the real cards' usable
        /// bytes). Loaded and calibrated as `memcal fit` does. Default: `data` when it holds a
        /// factors.json; without a data folder the six-factor plan decides with the factors
        /// file's q95, and the real cards are not checked.
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also print the simulated memory curve over the three training steps.
        #[arg(long)]
        timeline: bool,
        /// Also print, per card, the largest batch that fits by the verdict (the deciding
        /// method, planned at each batch), by the six-factor plan and by its bound (the
        /// estimate floored at the phase floor; searched up to 2^24).
        #[arg(long)]
        max_batch: bool,
        /// Sequence length for a graph whose inputs have the sequence axis "T".
        #[arg(long)]
        seq: Option<u64>,
    },
    /// Import a model's graph from its configuration (no download, no Python).
    Import {
        #[command(subcommand)]
        source: ImportSource,
    },
    /// Write every graph of the zoo (full-size templates and reduced variants) as
    /// `<out>/<name>.json`. Deterministic bytes: rerunning changes nothing.
    Graphs {
        /// Output folder.
        #[arg(long, default_value = "data/graphs")]
        out: PathBuf,
        /// Replace graph files whose bytes differ from what this memcal generates (edited by
        /// hand, or made by another version); without it they are refused (exit 2).
        #[arg(long)]
        force: bool,
    },
    /// Build the static calibration site from data/ into site/ (opens from disk, no server).
    /// Every number comes from the engine; identical inputs give byte-identical files.
    Build {
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
    },
    /// Run the calibration engine on data/: load and account for every row, fit the factors,
    /// refit held out by architecture, by implementation and by regime, compute every metric. Prints a summary and
    /// writes calibration.json (every number the site shows, with the row ids behind it).
    Fit {
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
    },
    /// Compare the estimation error of two states of data/ (a git ref or a folder each) and
    /// print a Markdown report fit for a pull-request comment.
    Diff {
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
    },
    /// Audit the factors: every entry of data/factors-history.json against the
    /// data/factors.json of the commit that fixed it (factors, q90/q95, rows, rows_sha256) with
    /// its medians recomputed from that commit's rows; every committed version of the factors
    /// file against its entry; and the current factors refitted from the rows they claim.
    /// Exit 1 naming the entry and field of every difference.
    Audit {
        /// The data folder whose factors are checked (its git repository is found from it).
        #[arg(long, default_value = "data")]
        data: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
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

use memcal::cli_io::print;
use memcal::outputs::write_file_atomic as write_atomic;

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plan {
            graph,
            batch,
            precision,
            factors,
            regime,
            data,
            json,
            timeline,
            max_batch,
            seq,
        } => {
            if batch == 0 {
                return Err(memcal::Error::Invalid("--batch must be at least 1".into()).into());
            }
            if seq == Some(0) {
                return Err(memcal::Error::Invalid("--seq must be at least 1".into()).into());
            }
            let data = data.or_else(|| {
                let d = PathBuf::from("data");
                d.join("factors.json").is_file().then_some(d)
            });
            // The data folder is calibrated on a second thread while the graph loads (for a
            // large graph, each takes about as long as the other).
            let (g, f, evidence) = std::thread::scope(|s| -> anyhow::Result<_> {
                let evidence = s.spawn(|| -> memcal::Result<_> {
                    match &data {
                        Some(d) => {
                            let ds = memcal::engine::load(d)?;
                            Ok(Some(memcal::plan_evidence::evidence(
                                &ds,
                                &memcal::engine::calibrate(&ds),
                            )))
                        }
                        None => Ok(None),
                    }
                });
                let g = Graph::load_at(&graph, seq);
                let f = FactorsFile::load(&factors);
                let evidence = evidence.join().map_err(|_| {
                    anyhow::anyhow!(
                        "calibrating the data folder failed (a bug in memcal: please report it)"
                    )
                })?;
                Ok((g?, f?, evidence?))
            })?;
            let cards = match &regime {
                None => f.cards.clone(),
                Some(r) => f
                    .regimes
                    .get(r)
                    .ok_or_else(|| {
                        memcal::Error::Invalid(format!(
                            "--regime {r}: no such regime in {} (it has: {})",
                            factors.display(),
                            f.regimes.keys().cloned().collect::<Vec<_>>().join(", ")
                        ))
                    })?
                    .cards
                    .clone(),
            };
            let real: &[memcal::cards::RealCard] = match (&regime, &evidence) {
                (None, Some(e)) => &e.real_cards,
                _ => &[],
            };
            // The timeline's events only when asked for (a deep graph makes millions).
            let simulation = if timeline {
                memcal::simulate::simulate(&g, batch, precision)
            } else {
                memcal::simulate::simulate_peak(&g, batch, precision)
            };
            let cards = memcal::plan::Cards { seed: &cards, real };
            let p = memcal::plan::plan_with_simulation(
                &g,
                batch,
                precision,
                &f,
                cards,
                &simulation,
                evidence.as_ref(),
            )
            .map_err(|m| memcal::Error::Invalid(format!("{}: {m}", factors.display())))?;
            memcal::plan::check_features(&g, &p).map_err(memcal::Error::Invalid)?;
            let sim = if timeline {
                Some(simulation.map_err(memcal::Error::Invalid)?)
            } else {
                None
            };
            let largest = if max_batch {
                Some(
                    memcal::plan::max_batch(&g, precision, &f, &cards.all())
                        .map_err(memcal::Error::Invalid)?
                        .into_iter()
                        .zip(memcal::plan::max_batch_verdict(
                            &g,
                            precision,
                            &f,
                            cards,
                            evidence.as_ref(),
                        ))
                        .map(|(m, v)| memcal::plan::MaxBatch {
                            verdict: Some(v),
                            ..m
                        })
                        .collect::<Vec<_>>(),
                )
            } else {
                None
            };
            if json {
                let mut value = match &sim {
                    None => serde_json::to_value(&p)?,
                    Some(s) => serde_json::json!({ "plan": p, "simulation": s }),
                };
                if let Some(m) = &largest {
                    value["max_batch"] = serde_json::to_value(m)?;
                }
                print(&format!("{}\n", serde_json::to_string_pretty(&value)?))?;
            } else {
                let mut text = memcal::cli_plan::render(&p);
                if let Some(m) = &largest {
                    text.push_str(&format!("\n{}", memcal::cli_plan::render_max_batch(m)));
                }
                if let Some(s) = &sim {
                    text.push_str(&format!("\n{}", memcal::simulate::render_timeline(s)));
                }
                print(&text)?;
            }
            // The process ends next: freeing a large graph name by name (a million strings)
            // takes longer than the exit returning its memory at once.
            std::mem::forget(g);
            Ok(ExitCode::SUCCESS)
        }
        Command::Import { source } => import(source),
        Command::Graphs { out, force } => {
            std::fs::create_dir_all(&out)
                .with_context(|| format!("cannot create {}", out.display()))?;
            let written = memcal::zoo::write_all_checked(&out, force)?;
            print(&format!(
                "wrote {} graphs to {}\n",
                written.len(),
                out.display()
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Build {
            data,
            out,
            check,
            debug_json,
        } => {
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
        Command::Fit {
            data,
            out,
            force,
            write_factors,
            json,
        } => {
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
                    f.provenance.as_ref().map_or("-", |p| p.fixed_at.as_str()),
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
        Command::Diff {
            base,
            head,
            repo,
            json,
            fail_on,
        } => {
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
        Command::Audit { data, json } => {
            let a = memcal::review::audit(&data)?;
            if json {
                print(&format!("{}\n", serde_json::to_string_pretty(&a)?))?;
            } else {
                print(&memcal::review::audit_text(&a))?;
            }
            Ok(if a.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// `memcal import hf`: the graph, checked, to --out or standard output; what it assumed to
/// standard error.
fn import(source: ImportSource) -> anyhow::Result<ExitCode> {
    let ImportSource::Hf {
        config,
        seq,
        decoder_seq,
        name,
        family,
        out,
        force,
        seq_axis,
    } = source;
    let default_name = {
        let stem = config
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("model");
        let parent = config
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|s| s.to_str());
        match (stem, parent) {
            ("config", Some(p)) => p.to_string(),
            (s, _) => s.to_string(),
        }
    };
    let options = memcal::import::Options {
        seq,
        decoder_seq,
        name: name.unwrap_or(default_name),
        family,
        seq_axis,
    };
    if seq == Some(0) || decoder_seq == Some(0) {
        return Err(
            memcal::Error::Invalid("--seq and --decoder-seq must be at least 1".into()).into(),
        );
    }
    let imported = memcal::import::hf(&config, &options)?;
    let path = out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.json", options.name)));
    let bytes = memcal::zoo::to_bytes(&imported.graph);
    let graph = Graph::check_owned_at(imported.graph, &path, Some(imported.seq))?;
    let mut note = format!(
        "imported {} ({}): {} parameters, sequence length {} ({}){}\n",
        config.display(),
        imported.class,
        memcal::cli_plan::group(graph.parameters()),
        imported.seq,
        imported.seq_source,
        if seq_axis {
            "; written as the axis \"T\": plan it with --seq N"
        } else {
            ""
        }
    );
    for a in &imported.approximations {
        note.push_str(&format!("  approximation: {a}\n"));
    }
    match out {
        Some(out) => {
            if out.exists() && !force {
                return Err(memcal::Error::Invalid(format!(
                    "{}: exists; memcal does not write over a file it may not have written (give --force to replace it, or another --out)",
                    out.display()
                ))
                .into());
            }
            memcal::outputs::write_file_atomic(&out, &bytes)?;
            note.push_str(&format!(
                "wrote {}; plan it with `memcal plan {} --batch N`\n",
                out.display(),
                out.display()
            ));
            eprint!("{note}");
        }
        None => {
            eprint!("{note}");
            print(std::str::from_utf8(&bytes).unwrap_or_default())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
