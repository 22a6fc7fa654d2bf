//! `memcal-measure`: measure the real peak memory of training runs (see `measurement/README.md`).

use clap::{Parser, Subcommand};
use memcal_measure::campaign;
use memcal_measure::measure::{self, Exit, RunArgs, SPAWN_ENV};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Parser)]
#[command(
    name = "memcal-measure",
    version,
    about = "Measure the real peak memory of training runs of memcal-graph/1 models (tch / libtorch)",
    long_about = "Builds a memcal-graph/1 model in tch, trains three AdamW steps on seeded synthetic \
inputs and records, per phase, the allocator's start, peak and end levels as a memcal-run/1 row \
(docs/run-format.md). CPU runs count every tensor allocation exactly with a counting allocator; \
CUDA runs (build with --features cuda) read the CUDA caching allocator."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Describe a device: name, capacity, driver, torch, CUDA, allocator, cores. Exits 2 if the
    /// device is absent (a CUDA request never reports the CPU).
    Environment {
        /// `cpu`, `cuda` or `cuda:N`.
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure one run (one graph, one batch, one device, one precision) and write its row.
    ///
    /// Exit status: 0 when the run completed or ran out of memory (the row records it), 1 when it
    /// failed otherwise (the row records status error), 2 for usage errors (no row written:
    /// existing output, absent device, unreadable graph).
    Run {
        /// The graph file (memcal-graph/1 JSON).
        #[arg(long)]
        graph: PathBuf,
        /// Batch size.
        #[arg(long)]
        batch: u64,
        /// `cpu`, `cuda` or `cuda:N`.
        #[arg(long, default_value = "cpu")]
        device: String,
        /// `fp32` or `bf16-autocast` (default: fp32 on CPU, bf16-autocast on CUDA).
        #[arg(long)]
        precision: Option<String>,
        /// Emulated capacity in GiB (2^30 bytes): a hard cap on CPU, setMemoryFraction on CUDA.
        #[arg(long)]
        cap_gib: Option<f64>,
        /// Regime label (default `<cpu|cuda>-free`, or `<cpu|cuda>-edge` with --cap-gib).
        #[arg(long)]
        regime: Option<String>,
        /// Mark a row measured after the shipped factors were fixed (never fitted).
        #[arg(long, value_parser = ["after-fit"])]
        marker: Option<String>,
        /// Where to write the row; an existing file is never overwritten.
        #[arg(long)]
        output: PathBuf,
    },
    /// Run a campaign plan (TOML), each run in a fresh child process; resumable.
    Campaign {
        /// The plan (see measurement/README.md for the format).
        plan: PathBuf,
        /// Output folder: rows go to <out>/<graph>/b<batch>[-cap<GiB>].json.
        #[arg(long)]
        out: PathBuf,
        /// Kill a run that takes longer than this many seconds (reported as failed, no row).
        #[arg(long)]
        run_timeout_s: Option<u64>,
    },
    /// Benchmark: the fixed overhead per run, from process start to the first phase, on CPU.
    BenchOverhead {
        /// Graph to run (default: the MLP test fixture).
        #[arg(long)]
        graph: Option<PathBuf>,
        /// Number of runs.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
}

fn bench_overhead(graph: Option<PathBuf>, runs: usize) -> Result<i32, Exit> {
    let graph = graph.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mlp.json")
    });
    let exe = std::env::current_exe().map_err(|e| Exit::usage(e.to_string()))?;
    let dir = std::env::temp_dir().join(format!("memcal-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Exit::usage(format!("{}: {e}", dir.display())))?;
    let (mut overheads, mut walls) = (Vec::new(), Vec::new());
    for k in 0..runs {
        let out = dir.join(format!("run{k}.json"));
        let spawn = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let t = Instant::now();
        let o = Command::new(&exe)
            .args(["run", "--batch", "1", "--device", "cpu", "--graph"])
            .arg(&graph)
            .arg("--output")
            .arg(&out)
            .env(SPAWN_ENV, spawn.to_string())
            .stdout(Stdio::null())
            .output()
            .map_err(|e| Exit::usage(e.to_string()))?;
        walls.push(t.elapsed().as_secs_f64());
        let err = String::from_utf8_lossy(&o.stderr);
        let v = err
            .lines()
            .find_map(|l| l.strip_prefix("memcal-overhead-seconds: "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        match (o.status.success(), v) {
            (true, Some(v)) => overheads.push(v),
            _ => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Exit {
                    code: 1,
                    message: format!("bench run {k} failed: {err}"),
                });
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (v[0], v[v.len() / 2], v[v.len() - 1])
    };
    let (lo, med, hi) = stats(&mut overheads);
    let (wlo, wmed, whi) = stats(&mut walls);
    println!("graph {}: {runs} runs on CPU", graph.display());
    println!("fixed overhead, process start to first phase: min {lo:.3} s, median {med:.3} s, max {hi:.3} s (target <= 3 s)");
    println!("whole run (process wall time):                min {wlo:.3} s, median {wmed:.3} s, max {whi:.3} s");
    Ok(0)
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Environment { device, json } => measure::parse_device(&device)
            .and_then(measure::environment)
            .map(|env| {
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&env).expect("environment serialises")
                    );
                } else {
                    print!("{}", env.to_text());
                }
                0
            }),
        Cmd::Run {
            graph,
            batch,
            device,
            precision,
            cap_gib,
            regime,
            marker,
            output,
        } => measure::run_command(&RunArgs {
            graph,
            batch,
            device,
            precision,
            cap_gib,
            regime,
            marker,
            output,
        }),
        Cmd::Campaign {
            plan,
            out,
            run_timeout_s,
        } => campaign::run_campaign(
            &plan,
            &out,
            run_timeout_s.map(std::time::Duration::from_secs),
        ),
        Cmd::BenchOverhead { graph, runs } => bench_overhead(graph, runs.max(1)),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("memcal-measure: {}", e.message);
            std::process::exit(e.code);
        }
    }
}
