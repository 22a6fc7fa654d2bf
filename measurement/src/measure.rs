//! The `run` and `environment` commands: device checks, row assembly, atomic no-clobber writing.

use crate::counters::{self, Backend};
use crate::protocol::{self, Precision};
use crate::sysinfo;
use memcal::graph::Graph;
use memcal::run::{DeviceInfo, GraphRef, ParameterCounts, RunRow, RunStatus, RUN_FORMAT};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Exit status for usage and input errors (absent device, existing output, bad graph).
pub const EXIT_USAGE: i32 = 2;
/// Exit status of a run that was recorded with `status: error`.
pub const EXIT_RUN_ERROR: i32 = 1;
/// Environment variable through which a parent passes its spawn time (ns since the epoch), so
/// the child can report the fixed overhead from process start to the first phase.
pub const SPAWN_ENV: &str = "MEMCAL_SPAWN_EPOCH_NS";

/// A failure that ends a command with an exit status and a message.
#[derive(Debug)]
pub struct Exit {
    pub code: i32,
    pub message: String,
}

impl Exit {
    pub fn usage(message: impl Into<String>) -> Exit {
        Exit {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }
}

/// Parses `cpu`, `cuda` or `cuda:N`.
pub fn parse_device(s: &str) -> Result<Backend, Exit> {
    match s {
        "cpu" => Ok(Backend::Cpu),
        "cuda" => Ok(Backend::Cuda(0)),
        _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(i)) => Ok(Backend::Cuda(i)),
            _ => Err(Exit::usage(format!(
                "--device: `{s}` is not `cpu`, `cuda` or `cuda:N`"
            ))),
        },
    }
}

/// What the harness knows about a device before any run.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    pub device: String,
    pub kind: String,
    pub name: String,
    pub capacity_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    pub torch: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
    pub allocator: String,
    pub reserved_equals_allocated: bool,
    /// Threads torch uses for CPU work.
    pub torch_threads: u64,
    /// Logical CPUs of the host.
    pub logical_cpus: u64,
    pub host: String,
    pub built_with_cuda: bool,
}

/// Checks that the device exists and describes it. A CUDA request never falls back to the CPU.
pub fn environment(backend: Backend) -> Result<Environment, Exit> {
    let torch = counters::torch_version();
    let threads = tch::get_num_threads().max(1) as u64;
    match backend {
        Backend::Cpu => Ok(Environment {
            device: "cpu".into(),
            kind: "cpu".into(),
            name: sysinfo::cpu_model()
                .ok_or_else(|| Exit::usage("cpu: no `model name` in /proc/cpuinfo"))?,
            capacity_bytes: sysinfo::mem_total_bytes()
                .ok_or_else(|| Exit::usage("cpu: no MemTotal in /proc/meminfo"))?,
            driver: None,
            torch,
            cuda: None,
            allocator: backend.allocator_name().into(),
            reserved_equals_allocated: true,
            torch_threads: threads,
            logical_cpus: sysinfo::logical_cpus(),
            host: sysinfo::host_name(),
            built_with_cuda: counters::built_with_cuda(),
        }),
        Backend::Cuda(i) => {
            if !counters::built_with_cuda() {
                return Err(Exit::usage(format!(
                    "cuda:{i}: this memcal-measure was built without CUDA support; rebuild with \
                     `cargo build -p memcal-measure --features cuda` on a machine with a GPU"
                )));
            }
            let n = counters::cuda_device_count();
            if i >= n {
                return Err(Exit::usage(format!(
                    "cuda:{i}: no such CUDA device ({n} visible to torch)"
                )));
            }
            backend
                .init()
                .map_err(|e| Exit::usage(format!("cuda:{i}: {e}")))?;
            let p =
                counters::cuda_properties(i).map_err(|e| Exit::usage(format!("cuda:{i}: {e}")))?;
            Ok(Environment {
                device: format!("cuda:{i}"),
                kind: "cuda".into(),
                name: p.name,
                capacity_bytes: p.total_bytes,
                driver: sysinfo::nvidia_driver(),
                torch,
                cuda: Some(p.runtime),
                allocator: backend.allocator_name().into(),
                reserved_equals_allocated: false,
                torch_threads: threads,
                logical_cpus: sysinfo::logical_cpus(),
                host: sysinfo::host_name(),
                built_with_cuda: true,
            })
        }
    }
}

impl Environment {
    pub fn to_text(&self) -> String {
        let gib = self.capacity_bytes as f64 / (1u64 << 30) as f64;
        let mut s = String::new();
        s += &format!("device      {} ({})\n", self.device, self.name);
        s += &format!("capacity    {} bytes ({gib:.2} GiB)\n", self.capacity_bytes);
        s += &format!("driver      {}\n", self.driver.as_deref().unwrap_or("-"));
        s += &format!("torch       {}\n", self.torch);
        s += &format!("cuda        {}\n", self.cuda.as_deref().unwrap_or("-"));
        s += &format!(
            "allocator   {}{}\n",
            self.allocator,
            if self.reserved_equals_allocated {
                " (reserved = allocated)"
            } else {
                ""
            }
        );
        s += &format!(
            "cores       {} torch threads, {} logical CPUs\n",
            self.torch_threads, self.logical_cpus
        );
        s += &format!("host        {}\n", self.host);
        s += &format!(
            "cuda build  {}\n",
            if self.built_with_cuda { "yes" } else { "no" }
        );
        s
    }
}

/// Formats GiB for ids and file names: `8`, `0.5`.
pub fn gib_label(gib: f64) -> String {
    format!("{gib}")
}

/// The run id: `<regime>/<graph>/b<batch>[/cap<GiB>]`.
pub fn run_id(regime: &str, graph: &str, batch: u64, cap_gib: Option<f64>) -> String {
    let mut id = format!("{regime}/{graph}/b{batch}");
    if let Some(c) = cap_gib {
        id += &format!("/cap{}", gib_label(c));
    }
    id
}

/// The default regime label: `<kind>-free`, or `<kind>-edge` under a cap.
pub fn default_regime(backend: Backend, capped: bool) -> String {
    format!(
        "{}-{}",
        backend.kind(),
        if capped { "edge" } else { "free" }
    )
}

/// Options of one `run`.
#[derive(Debug, Clone)]
pub struct RunArgs {
    pub graph: PathBuf,
    pub batch: u64,
    pub device: String,
    pub precision: Option<String>,
    pub cap_gib: Option<f64>,
    pub regime: Option<String>,
    pub marker: Option<String>,
    /// A strategy spec (`checkpoint:every=2`, `lora:r=8`, `qlora:r=8`,
    /// `inference:prompt=64,decode=32`); None: plain training.
    pub strategy: Option<String>,
    pub output: PathBuf,
}

/// A strategy spec as a file-name part: `checkpoint:every=2` -> `checkpoint-every2`.
pub fn strategy_slug(spec: &str) -> String {
    spec.replace([':', ',', '+'], "-").replace('=', "")
}

/// The protocol of a `--strategy` spec and its canonical spec, or a usage error.
fn strategy_protocol(
    spec: &str,
    graph: &Graph,
) -> Result<(crate::strategies::Protocol, String), Exit> {
    let parsed = memcal::strategy::parse_row_spec(spec)
        .map_err(|m| Exit::usage(format!("--strategy: {m}")))?;
    let p = crate::strategies::protocol(&parsed)
        .map_err(|m| Exit::usage(format!("--strategy: {m}")))?;
    if p.inference.is_some() {
        if let Some(why) = crate::inference::unsupported(graph) {
            return Err(Exit::usage(format!(
                "--strategy {spec}: graph `{}`: {why}",
                graph.name
            )));
        }
    }
    Ok((p, parsed.label()))
}

/// Writes `row` to `path` atomically and never over an existing file: a temp file in the same
/// folder, then a hard link to the final name (which fails if it exists), then the temp removed.
pub fn write_row_atomic(path: &Path, row: &RunRow) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("{}: cannot create folder: {e}", dir.display()))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("row.json");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut text =
        serde_json::to_string_pretty(row).map_err(|e| format!("serialising the row: {e}"))?;
    text.push('\n');
    let write = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    })();
    if let Err(e) = write {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{}: cannot write: {e}", tmp.display()));
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    linked.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "{}: already exists; refusing to overwrite a row",
                path.display()
            )
        } else {
            format!("{}: cannot write: {e}", path.display())
        }
    })
}

fn now_epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The `run` command. Returns the exit status: 0 for a completed run and for a recorded OOM, 1
/// for a recorded error; usage errors (no row written) are `Err` with status 2.
pub fn run_command(a: &RunArgs) -> Result<i32, Exit> {
    let started = SystemTime::now();
    if a.output.exists() {
        return Err(Exit::usage(format!(
            "{}: already exists; refusing to overwrite a row (delete it to re-measure)",
            a.output.display()
        )));
    }
    if a.batch == 0 {
        return Err(Exit::usage("--batch: must be a positive integer"));
    }
    let backend = parse_device(&a.device)?;
    let precision = match &a.precision {
        Some(p) => Precision::parse(p).map_err(|e| Exit::usage(format!("--precision: {e}")))?,
        None => match backend {
            Backend::Cpu => Precision::Fp32,
            Backend::Cuda(_) => Precision::Bf16Autocast,
        },
    };
    if let Some(c) = a.cap_gib {
        if !(c.is_finite() && c > 0.0) {
            return Err(Exit::usage(format!(
                "--cap-gib: {c} is not a positive number of GiB"
            )));
        }
    }
    let env = environment(backend)?;
    let graph = Graph::load(&a.graph).map_err(|e| Exit::usage(e.to_string()))?;
    if !graph.has_batch_axis() {
        eprintln!(
            "memcal-measure: warning: {}: no input has a batch axis",
            a.graph.display()
        );
    }

    counters::install_cpu_counter().map_err(|e| Exit {
        code: EXIT_RUN_ERROR,
        message: format!("installing the counting CPU allocator: {e}"),
    })?;
    let cap_bytes = a.cap_gib.map(|g| (g * (1u64 << 30) as f64).round() as u64);
    if let Some(b) = cap_bytes {
        if b > env.capacity_bytes {
            return Err(Exit::usage(format!(
                "--cap-gib: {} bytes exceeds the device's {} bytes",
                b, env.capacity_bytes
            )));
        }
        backend.set_cap(b, env.capacity_bytes).map_err(|e| Exit {
            code: EXIT_RUN_ERROR,
            message: format!("--cap-gib: {e}"),
        })?;
    }
    let strategy = match &a.strategy {
        Some(s) => Some(strategy_protocol(s, &graph)?),
        None => None,
    };
    let regime = a
        .regime
        .clone()
        .unwrap_or_else(|| default_regime(backend, cap_bytes.is_some()));

    protocol::install_quiet_panic_hook();
    let first_phase_ns = now_epoch_ns();
    if let Some(spawn) = std::env::var(SPAWN_ENV)
        .ok()
        .and_then(|v| v.parse::<u128>().ok())
    {
        let overhead = first_phase_ns.saturating_sub(spawn) as f64 / 1e9;
        eprintln!("memcal-overhead-seconds: {overhead:.3}");
    }
    let outcome = protocol::run_with(
        &graph,
        a.batch,
        backend,
        precision,
        strategy.as_ref().map(|(p, _)| p),
    );
    let spec = strategy.map(|(_, s)| s);

    let graph_params = graph.parameters();
    let built = outcome.built_parameters;
    let mut row = RunRow {
        format: RUN_FORMAT.to_string(),
        run_id: match &spec {
            None => run_id(&regime, &graph.name, a.batch, a.cap_gib),
            Some(s) => format!("{}/{s}", run_id(&regime, &graph.name, a.batch, a.cap_gib)),
        },
        graph: GraphRef {
            name: graph.name.clone(),
            sha256: graph.sha256.clone(),
        },
        batch: a.batch,
        precision: precision.name().to_string(),
        regime,
        marker: a.marker.clone(),
        strategy: spec,
        rank: None,
        world: None,
        backend: None,
        device: device_info(&env, cap_bytes),
        host: env.host.clone(),
        timestamp: memcal::clock::rfc3339_utc(started),
        tool_version: format!("memcal-measure {}", env!("CARGO_PKG_VERSION")),
        implementation: None,
        parameters: ParameterCounts {
            graph: graph_params,
            built: built.unwrap_or(0),
        },
        graph_mismatch: built.is_some_and(|b| b != graph_params),
        status: RunStatus::Completed,
        oom: None,
        error: None,
        phases: Vec::new(),
        peak: None,
    };
    protocol::apply_outcome(&mut row, &outcome);
    if row.graph_mismatch {
        eprintln!(
            "memcal-measure: warning: {}: built model has {} trainable parameters, the graph counts {}",
            a.graph.display(),
            row.parameters.built,
            row.parameters.graph
        );
    }
    write_row_atomic(&a.output, &row).map_err(|m| Exit {
        code: EXIT_USAGE,
        message: m,
    })?;
    match row.status {
        RunStatus::Completed | RunStatus::Oom => Ok(0),
        RunStatus::Error => {
            let f = row.error.as_ref();
            eprintln!(
                "memcal-measure: run failed in {}: {}",
                f.map(|f| f.phase.as_str()).unwrap_or("?"),
                f.map(|f| f.message.as_str()).unwrap_or("?")
            );
            Ok(EXIT_RUN_ERROR)
        }
    }
}

/// The device a row was measured on, with its emulated cap (`--cap-gib`) if any.
fn device_info(env: &Environment, cap_bytes: Option<u64>) -> DeviceInfo {
    DeviceInfo {
        kind: env.kind.clone(),
        name: env.name.clone(),
        capacity_bytes: env.capacity_bytes,
        emulated_capacity_bytes: cap_bytes,
        allocator: env.allocator.clone(),
        // c10's CUDA allocator reads its settings from this variable at its first use.
        allocator_settings: (env.kind == "cuda")
            .then(|| std::env::var("PYTORCH_CUDA_ALLOC_CONF").ok())
            .flatten()
            .filter(|s| !s.is_empty()),
        reserved_equals_allocated: env.reserved_equals_allocated,
        torch: env.torch.clone(),
        cuda: env.cuda.clone(),
        driver: env.driver.clone(),
        cores: env.torch_threads,
    }
}
