//! `memcal-measure`: measure the real peak memory of training runs (see `measurement/README.md`).

use clap::{Parser, Subcommand};
use memcal_measure::measure::{self, Exit, RunArgs, SPAWN_ENV};
use memcal_measure::{campaign, cluster, merge, shard};
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
        /// A strategy protocol: `checkpoint[:every=K]` (segments of K blocks recomputed in
        /// backward), `lora[:r=R]` (frozen base, adapters trained), `qlora[:r=R]` (4-bit NF4
        /// base dequantized on use, adapters trained), `checkpoint+lora`, or
        /// `inference:prompt=P,decode=N` (prefill, then N decode steps with a KV cache). The
        /// row records it in `strategy`. ZeRO/FSDP/TP/PP and adam8bit have no protocol here.
        #[arg(long)]
        strategy: Option<String>,
        /// Where to write the row; an existing file is never overwritten.
        #[arg(long)]
        output: PathBuf,
    },
    /// Run a campaign plan (TOML), each run in a fresh child process; resumable.
    ///
    /// With --shard, runs only shard I of N (plan run k belongs to shard k mod N) into
    /// <out>/shard-I-of-N/, with a record (shard.json) of the shard's runs, the host, device,
    /// torch, driver, caps and every run's outcome; `merge` moves the rows into data/runs/.
    Campaign {
        /// The plan (see measurement/README.md for the format).
        plan: PathBuf,
        /// Output folder: rows go to <out>/<graph>/b<batch>[-cap<GiB>].json
        /// (with --shard: <out>/shard-I-of-N/<graph>/...).
        #[arg(long)]
        out: PathBuf,
        /// Kill a run that takes longer than this many seconds (reported as failed, no row).
        #[arg(long)]
        run_timeout_s: Option<u64>,
        /// Run shard I of N only: `I/N`; `auto/N` (I from SLURM_ARRAY_TASK_ID or Kubernetes'
        /// JOB_COMPLETION_INDEX); or `auto` (I and N from SLURM_ARRAY_TASK_ID and
        /// SLURM_ARRAY_TASK_COUNT).
        #[arg(long, value_name = "I/N")]
        shard: Option<String>,
    },
    /// Check the rows of a sharded campaign and move them into data/runs/<regime>/.
    ///
    /// Checks every row (format, graph SHA-256 against --graphs, batch, no duplicate run id
    /// among the shards or under data/runs, no overwrite of an existing row, no stray file) and
    /// that every planned run has a row; a missing run is named with its shard and the reason
    /// its shard recorded. Moves nothing unless all checks pass. Exit status: 0 merged, 1 runs
    /// missing (nothing moved), 2 a bad row or input (nothing moved).
    Merge {
        /// Shard folders (shard-I-of-N), or the folder holding them (campaign --out).
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        /// Destination folder, e.g. data/runs/cpu; rows keep their <graph>/<file> paths.
        #[arg(long)]
        into: PathBuf,
        /// The plan the shards ran (checked by SHA-256): names the runs of shards that left no
        /// folder at all.
        #[arg(long)]
        plan: Option<PathBuf>,
        /// The graphs the rows' graph.sha256 must match.
        #[arg(long, default_value = "data/graphs")]
        graphs: PathBuf,
        /// Where existing rows are searched for duplicate run ids (default: the `runs` folder
        /// above --into, else --into).
        #[arg(long)]
        runs_root: Option<PathBuf>,
        /// Check and report only; move nothing.
        #[arg(long)]
        check: bool,
        /// Merge the rows that exist even when planned runs are missing (still listed).
        #[arg(long)]
        allow_missing: bool,
        /// Also print the report as JSON (format memcal-merge-report/1, measurement/README.md).
        #[arg(long)]
        json: bool,
    },
    /// Write a Slurm array job (one shard per task), a merge job after it (afterok) and
    /// submit.sh into --out, ready to submit.
    Slurm {
        #[command(flatten)]
        common: ClusterArgs,
        /// Partition (#SBATCH --partition); default: the cluster's default partition.
        #[arg(long)]
        partition: Option<String>,
        /// At most K array tasks at once (--array=0-(N-1)%K); default: no limit.
        #[arg(long, value_name = "K")]
        max_concurrent: Option<usize>,
        /// Time limit per task (#SBATCH --time), e.g. 02:00:00.
        #[arg(long)]
        time: Option<String>,
    },
    /// Write a Kubernetes Indexed Job (one shard per completion index), a merge Job and
    /// submit.sh into --out.
    K8s {
        #[command(flatten)]
        common: ClusterArgs,
        /// The container image (holds memcal-measure, libtorch and the repository at --workdir).
        #[arg(long)]
        image: String,
        /// A ReadWriteMany PersistentVolumeClaim every pod mounts (shards and merged rows).
        #[arg(long)]
        claim: String,
        /// Where the claim is mounted in the pods.
        #[arg(long, default_value = "/results")]
        mount: PathBuf,
        /// Pods at once; default: all indexes.
        #[arg(long, value_name = "K")]
        parallelism: Option<usize>,
        /// Retries of a failed index before it counts as failed.
        #[arg(long, default_value_t = 1)]
        backoff_limit_per_index: u32,
        #[arg(long)]
        namespace: Option<String>,
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

/// Options shared by `slurm` and `k8s`.
#[derive(clap::Args)]
struct ClusterArgs {
    /// The plan (read here; its paths are relative to --workdir on the cluster).
    plan: PathBuf,
    /// Folder to write the files into (and, for Slurm, where shards and logs go).
    #[arg(long)]
    out: PathBuf,
    /// Where the merge step puts the rows, e.g. data/runs/cpu (relative to --workdir).
    #[arg(long)]
    into: PathBuf,
    /// Shards: array tasks or completion indexes; default one per run (at most 1001).
    #[arg(long, value_name = "N")]
    shards: Option<usize>,
    /// GPUs per task; default 1 if a run of the plan is on CUDA, else 0.
    #[arg(long)]
    gpus_per_task: Option<u32>,
    /// CPUs per task (Slurm --cpus-per-task, Kubernetes cpu limit); default: unset.
    #[arg(long)]
    cpus_per_task: Option<u32>,
    /// Passed to each shard's campaign: kill a run after this many seconds.
    #[arg(long)]
    run_timeout_s: Option<u64>,
    /// The memcal-measure binary as the tasks see it; default: this executable (Slurm) or
    /// `memcal-measure` on the image's PATH (Kubernetes).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// The folder the tasks run in; default: the current folder (Slurm) or /memcal (Kubernetes).
    #[arg(long)]
    workdir: Option<PathBuf>,
}

impl ClusterArgs {
    fn common(self, k8s: bool) -> Result<cluster::Common, Exit> {
        let here = std::env::current_dir().map_err(|e| Exit::usage(e.to_string()))?;
        let bin = match (self.bin, k8s) {
            (Some(b), _) => b,
            (None, true) => PathBuf::from("memcal-measure"),
            (None, false) => std::env::current_exe()
                .and_then(|p| p.canonicalize())
                .map_err(|e| Exit::usage(format!("cannot find my own executable: {e}")))?,
        };
        let workdir = match (self.workdir, k8s) {
            (Some(w), _) => w,
            (None, true) => PathBuf::from("/memcal"),
            (None, false) => here,
        };
        if !workdir.is_absolute() {
            return Err(Exit::usage(format!(
                "--workdir `{}`: must be an absolute path",
                workdir.display()
            )));
        }
        Ok(cluster::Common {
            plan: self.plan,
            out: self.out,
            into: self.into,
            shards: self.shards,
            gpus_per_task: self.gpus_per_task,
            cpus_per_task: self.cpus_per_task,
            run_timeout_s: self.run_timeout_s,
            bin,
            workdir,
        })
    }
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
            strategy,
            output,
        } => measure::run_command(&RunArgs {
            graph,
            batch,
            device,
            precision,
            cap_gib,
            regime,
            marker,
            strategy,
            output,
        }),
        Cmd::Campaign {
            plan,
            out,
            run_timeout_s,
            shard,
        } => {
            let timeout = run_timeout_s.map(std::time::Duration::from_secs);
            match shard {
                None => campaign::run_campaign(&plan, &out, timeout),
                Some(spec) => shard::parse_shard(&spec, &|k| std::env::var(k).ok())
                    .and_then(|s| shard::run_shard(&plan, &out, s, timeout)),
            }
        }
        Cmd::Merge {
            shards,
            into,
            plan,
            graphs,
            runs_root,
            check,
            allow_missing,
            json,
        } => merge::merge_command(&merge::MergeArgs {
            inputs: shards,
            into,
            plan,
            graphs,
            runs_root,
            check,
            allow_missing,
            json,
        }),
        Cmd::Slurm {
            common,
            partition,
            max_concurrent,
            time,
        } => common.common(false).and_then(|c| {
            let files = cluster::slurm_files(
                &c,
                &cluster::SlurmOpts {
                    partition,
                    max_concurrent,
                    time,
                },
            )?;
            let next = format!(
                "next: {}/submit.sh [--wait]   (or: sbatch {}/campaign.sbatch, then the merge job)",
                c.out.display(),
                c.out.display()
            );
            cluster::write_files(&c.out, &files, true, &next)
        }),
        Cmd::K8s {
            common,
            image,
            claim,
            mount,
            parallelism,
            backoff_limit_per_index,
            namespace,
        } => common.common(true).and_then(|c| {
            let files = cluster::k8s_files(
                &c,
                &cluster::K8sOpts {
                    image,
                    parallelism,
                    backoff_limit_per_index,
                    claim,
                    mount,
                    namespace,
                },
            )?;
            let next = format!("next: {}/submit.sh", c.out.display());
            cluster::write_files(&c.out, &files, false, &next)
        }),
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
