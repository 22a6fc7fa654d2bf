//! The calibration engine: reads every measured run row, puts each in exactly one bucket (fitted,
//! held out by regime, after the fit, or excluded with a reason), refits the planner's six
//! factors per precision profile with Clarabel, refits them with each architecture family held
//! out, derives the upper-bound quantiles, checks every method's card verdicts against what the
//! runs did, and reports all of it. `docs/engine.md` documents every rule.
//!
//! [`load`] does the I/O and the validation; [`calibrate`] is pure; [`write_calibration_json`],
//! [`summary_table`] and [`refit_factors_file`] present the result.
//!
//! `calibrate` runs these stages, one file each, each returning a typed result:
//! `bucket` (every row in its bucket or excluded, the fit blocks), `groups` (the implementation
//! groups), `fits` (the shipped fit and the held-out refits), `predict` (every method's
//! prediction of a row, defined once), `bound` (the upper-bound quantiles), `checks` (card
//! checks and tallies, on two threads through `split`), `metrics` (errors, quantiles, tallies
//! finished into metrics) and `misses` (per-family reports and known misses). The types they
//! return are in `results`.

mod bound;
mod bucket;
mod calibrate;
mod checks;
mod digest;
pub mod fit;
mod fits;
mod groups;
pub mod intervals;
mod load;
mod metrics;
mod misses;
mod output;
mod predict;
pub mod real;
pub mod reserved;
mod results;
mod scan;
mod split;
#[cfg(any(test, feature = "synthetic"))]
pub mod synthetic;

pub use crate::intern::{FastHash, FastHasher, Interner, Name};
pub use calibrate::calibrate;
pub use digest::Digest;
pub use groups::{implementation_groups, ImplementationGroup};
pub use load::{load, load_reporting, parse_row, rows_sha256, run_of, RowsHasher};
pub use metrics::{abs_rel_error, median, nearest_rank, row_abs_rel_error};
pub use misses::held_to_band;
pub use output::{refit_factors_file, summary_table, write_calibration_json, CALIBRATION_FORMAT};
pub use results::{
    truth, BoundCounts, BoundMetrics, Bucket, Calibration, Check, CheckRef, Checks, Exclusion,
    ExclusionReason, FamilyReport, FitReport, KnownMiss, LeaveFamilyOut, Method, MethodMetrics,
    PerMethod, Predictions, ProfileFits, RegimeFacts, RegimeRows, RowResult, Settings, Totals,
    Truth, Upper, VerdictCounts, NEAREST_RANK_RULE, WITHIN,
};
pub use scan::{scan_runs, RunFiles, Skipped};

use crate::factors::FactorsFile;
use crate::features::{Features, Precision};
use crate::run::RunStatus;
use serde::Serialize;
use std::collections::BTreeMap;

/// One run row, read, checked and joined to its graph: everything the engine needs of it.
///
/// The names many rows share (graph, family, regime, device, versions) are [`Name`]s, interned
/// by the loader, so a million rows hold each once; the file and run id are `Name`s too, so
/// the engine's results share them instead of copying.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The row file, relative to the data folder, `/`-separated (e.g. `runs/cpu-free/x.json`).
    pub file: Name,
    /// SHA-256 of the row file's bytes (32 bytes; hex in JSON and text).
    pub file_sha256: Digest,
    pub run_id: Name,
    /// The graph's name.
    pub graph: Name,
    /// The graph's architecture family (the unit of "held out by architecture").
    pub family: Name,
    pub regime: Name,
    pub precision: Precision,
    pub batch: u64,
    pub status: RunStatus,
    /// Measured peak allocated bytes (completed runs only).
    pub measured_bytes: Option<u64>,
    /// Measured peak reserved bytes (completed runs only; equal to allocated on CPU).
    pub measured_reserved_bytes: Option<u64>,
    /// The highest allocated peak of the phases after `model_load` (completed runs with
    /// phases): what running a loaded model holds. A `generate` row is compared on it, since
    /// building a model with random weights (`from_config`) allocates what loading a
    /// checkpoint does not (a tied head before it is tied).
    pub after_load_bytes: Option<u64>,
    /// The capacity the run ran under: the emulated capacity if any, else the device's.
    pub capacity_bytes: u64,
    /// The device's own capacity (`device.capacity_bytes`), capped or not.
    pub device_capacity_bytes: u64,
    /// The run was capped at an emulated capacity (`device.emulated_capacity_bytes`).
    pub capped: bool,
    /// True when the row carries the marker `after-fit`.
    pub after_fit: bool,
    /// The row's strategy spec (`memcal-run/1` field `strategy`); never fitted.
    pub strategy: Option<Name>,
    /// A multi-process run's rank and world (`memcal-run/1` `rank`, `world`), and its
    /// collective backend.
    pub rank: Option<u64>,
    pub world: Option<u64>,
    pub backend: Option<Name>,
    /// Why a rank's row is not counted (`rank-out-of-world`, `missing-rank`), set by the
    /// loader over all rows; None: counted.
    pub rank_problem: Option<(ExclusionReason, String)>,
    /// RFC 3339 start time of the run (shared by neighbouring rows that started in the same
    /// second).
    pub timestamp: Name,
    /// The graph file's SHA-256 differs from the one the run recorded.
    pub graph_changed: bool,
    /// The harness reported that the built model's parameters differ from the graph's.
    pub graph_mismatch: bool,
    /// The graph has a batch axis.
    pub has_batch_axis: bool,
    /// The six features at the row's batch and precision, from the current graph file.
    pub features: Features,
    /// accelerate's training estimate for the graph at the row's precision.
    pub accelerate_bytes: u64,
    /// The textbook formula's total, where it applies.
    pub textbook_bytes: Option<u64>,
    /// The simulator's peak, where it has a rule table for the row's precision (on CUDA the
    /// caching-allocator replay's allocated peak).
    pub simulated_bytes: Option<u64>,
    /// CUDA rows: the replay's reserved peak, reported apart from the allocated methods.
    pub simulated_reserved_bytes: Option<u64>,
    /// The graph's phase floor (`plan::phase_floor`): no plan estimate is below it.
    pub floor_bytes: u64,
    /// The device's name (the CPU model or the GPU), its kind, and the versions that measured.
    pub device: Name,
    pub device_kind: Name,
    pub harness_version: Name,
    /// The real code the row measured (`memcal-run/1` field `implementation`: library and
    /// class, e.g. `transformers 5.24.0 GPT2LMHeadModel`); None: the graph built by the harness.
    pub implementation: Option<Name>,
    pub torch_version: Name,
    /// The CUDA caching allocator's settings (`device.allocator_settings`); None: defaults.
    pub allocator_settings: Option<Name>,
}

/// What the engine knows of a graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphInfo {
    pub family: String,
    pub sha256: String,
    pub parameters: u64,
    pub has_batch_axis: bool,
    /// Why the textbook formula does not apply, if it does not.
    pub textbook_not_applicable: Option<String>,
    /// The bytes provably alive at the optimizer phase (`plan::phase_floor`), per precision
    /// profile (indexed by `Precision as usize`).
    pub floor_bytes: [u64; crate::features::Precision::ALL.len()],
    /// The implementation blocks its nodes use (`Op::block`), sorted and distinct.
    pub blocks: Vec<&'static str>,
    /// What the graph approximates (`plan::approximations`): its notes and generic nodes whose
    /// rule approximates.
    pub approximations: Vec<crate::graph::GraphNote>,
}

/// Everything [`calibrate`] works on.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// The current `data/factors.json`.
    pub factors: FactorsFile,
    /// Every row file, in path order.
    pub rows: Vec<Row>,
    /// The graphs under `data/graphs/`, by name.
    pub graphs: BTreeMap<String, GraphInfo>,
}
