//! The run row format `memcal-run/1`: one JSON file per measured training run, written by the
//! harness (`memcal-measure`) and read by the calibration engine. Documented in
//! `docs/run-format.md`. Both sides use these types, so they agree by construction.

use serde::{Deserialize, Serialize};

/// The format tag every row carries.
pub const RUN_FORMAT: &str = "memcal-run/1";

/// One measured run: one graph, one batch, one device, one precision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunRow {
    /// Always [`RUN_FORMAT`].
    pub format: String,
    /// Unique id, by convention `<regime>/<graph>/b<batch>[/cap<GiB>]`.
    pub run_id: String,
    /// The graph that was built and run.
    pub graph: GraphRef,
    /// Batch size.
    pub batch: u64,
    /// Precision profile: `fp32` or `bf16-autocast`.
    pub precision: String,
    /// Regime label, e.g. `cpu-free`, `cpu-edge`, `cuda-free`.
    pub regime: String,
    /// `after-fit` for rows measured after the shipped factors were fixed; never fitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<String>,
    /// The memory-saving strategy the run used (`checkpoint:every=2`, `lora:r=8`, `qlora:r=8`,
    /// `inference:prompt=64,decode=32`; grammar in docs/strategies.md); absent: plain training.
    /// Rows with a strategy are never fitted into the plain factors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// A run of several processes (one per rank): this row's rank, from 0. Present with
    /// `world` and `backend` only; a rank not below its world is excluded (`rank-out-of-world`),
    /// and so is every row of a run whose ranks are not all in the data folder (`missing-rank`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    /// The number of processes of the run (at least 2); equal to the strategy's device count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<u64>,
    /// The collective backend the ranks ran (`gloo`; `nccl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The device and its allocator.
    pub device: DeviceInfo,
    /// Host name of the machine that ran it.
    pub host: String,
    /// RFC 3339 UTC time at which the run started.
    pub timestamp: String,
    /// Version of the harness that wrote the row.
    pub tool_version: String,
    /// The real code that was measured, when it is not the graph built by the harness: a row
    /// of the real-model campaign (`python3 -m memcal_export.campaign`) trains the class a
    /// library builds from a config, and is planned from the graph imported from that config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<Implementation>,
    /// Trainable parameters: as the graph counts them and as the built model has them.
    pub parameters: ParameterCounts,
    /// True when the built model's parameter count differs from the graph's.
    pub graph_mismatch: bool,
    /// Outcome of the run.
    pub status: RunStatus,
    /// For `status = oom`: where it ran out, and the error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<Failure>,
    /// For `status = error`: where it failed, and the error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    /// Every phase that ran, in order. A phase that did not run is absent (never zero-filled).
    pub phases: Vec<Phase>,
    /// Overall peak over the phases; present iff `status = completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak: Option<Peak>,
}

/// Which graph file a row ran, pinned by content.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GraphRef {
    /// The graph's `name` (also its file stem under `data/graphs/`).
    pub name: String,
    /// SHA-256 (hex) of the graph file's bytes at the time of the run.
    pub sha256: String,
}

/// The real implementation a row measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Implementation {
    /// The library and its version, e.g. `transformers 5.24.0`.
    pub library: String,
    /// The model class, e.g. `GPT2LMHeadModel`.
    pub class: String,
    /// The config it was built from, relative to the data folder
    /// (`models/<model>/config.json`).
    pub config: String,
    /// The config fields replaced for a reduced model, with their values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduced: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The device a run used.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeviceInfo {
    /// `cpu` or `cuda`.
    pub kind: String,
    /// Human name: the GPU's name, or the CPU model.
    pub name: String,
    /// Physical capacity in bytes (GPU memory; host memory for CPU).
    pub capacity_bytes: u64,
    /// Emulated capacity in bytes (`--cap-gib`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulated_capacity_bytes: Option<u64>,
    /// Allocator backend, e.g. `cuda-caching-allocator` or `cpu-counting-allocator`.
    pub allocator: String,
    /// The CUDA caching allocator's settings the run was started with
    /// (`PYTORCH_CUDA_ALLOC_CONF`, e.g. `expandable_segments:True`); absent: torch's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator_settings: Option<String>,
    /// True on CPU, where the counting allocator has no cache: reserved equals allocated.
    pub reserved_equals_allocated: bool,
    /// torch version, e.g. `2.11.0`.
    pub torch: String,
    /// CUDA runtime version, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
    /// GPU driver version, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// CPU cores (threads torch used).
    pub cores: u64,
}

/// Trainable parameter counts.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ParameterCounts {
    pub graph: u64,
    pub built: u64,
}

/// Outcome of a run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// All phases ran.
    Completed,
    /// An allocation failed for lack of memory.
    Oom,
    /// Something other than memory failed (a bug to fix, never dropped).
    Error,
}

/// Where and how a run failed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// The phase name, e.g. `step2.backward`.
    pub phase: String,
    /// The error text as torch reported it.
    pub message: String,
}

/// One phase's allocator readings. Values are raw bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// `model_load`, `inputs`, `step1.forward`, `step1.backward`, `step1.optimizer`, ...
    pub name: String,
    /// `ok`, `oom` or `error`.
    pub status: String,
    pub allocated_start: u64,
    pub reserved_start: u64,
    /// Peak during the phase (the peak counter is reset at the phase start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_peak: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_peak: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_end: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_end: Option<u64>,
    /// Wall time of the phase in seconds.
    pub wall_seconds: f64,
}

/// The overall peak of a completed run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Peak {
    /// Highest allocated bytes over all phases.
    pub allocated_bytes: u64,
    /// Highest reserved bytes over all phases.
    pub reserved_bytes: u64,
    /// The phase in which the allocated peak occurred.
    pub phase: String,
}
