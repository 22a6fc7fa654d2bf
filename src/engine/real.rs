//! The real implementations: rows that measured the code people run (a `memcal-run/1` row with
//! `implementation`: a transformers class built from a Hugging Face config) rather than the
//! graph built by the harness, grouped by the graph they are planned from, with each method's
//! error on them. Never fitted (their regime is not a training regime), so every error here is
//! out of sample.

use super::{Calibration, Dataset, Method};
use crate::run::RunStatus;
use std::collections::{BTreeMap, BTreeSet};

/// One real model's rows under one allocator setting, and every method's error on them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RealModel {
    pub graph: String,
    pub family: String,
    /// Library and class, e.g. `transformers 5.24.0 GPT2LMHeadModel`.
    pub implementation: String,
    pub parameters: u64,
    pub regime: String,
    /// The device the rows ran on (the CPU model or the GPU).
    pub device: String,
    /// The rows' precision profile (`fp32`, `bf16-autocast`, `bf16`).
    pub precision: String,
    /// CUDA rows: the caching allocator's settings (`defaults` when none were set); None on CPU.
    pub allocator: Option<String>,
    /// The batches measured (completed rows at the device's own capacity), ascending.
    pub batches: Vec<u64>,
    pub min_measured_bytes: u64,
    pub max_measured_bytes: u64,
    /// Per method that predicts these rows: signed errors (predicted / measured - 1) ...
    pub errors: BTreeMap<Method, Errors>,
    /// CUDA rows: the simulator's reserved peak (its caching-allocator replay) against the
    /// measured reserved peak.
    pub reserved: Option<Errors>,
}

/// A method's errors on one real model's completed rows.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Errors {
    pub rows: usize,
    pub median_abs: f64,
    /// The error of largest magnitude, with its sign (negative: under the measured peak).
    pub worst: f64,
}

/// The methods shown for real rows, in order: the simulator, the plan's out-of-sample answer
/// on them, and the baseline.
pub const METHODS: [Method; 3] = [
    Method::Simulated,
    Method::PlanHeldOutRegime,
    Method::Accelerate,
];

/// The label of a CUDA row's allocator settings.
pub const DEFAULT_ALLOCATOR: &str = "defaults";

/// One group's signed errors while they are gathered.
#[derive(Default)]
struct Gathered {
    errors: BTreeMap<Method, Vec<f64>>,
    reserved: Vec<f64>,
}

/// The real-implementation rows of training measured at their device's own capacity
/// (uncapped), by run id; with `cuda_only`, only the CUDA ones. A row with a strategy (the
/// generate campaign's) belongs to the strategies' evidence instead.
fn uncapped_real_rows(ds: &Dataset, cuda_only: bool) -> BTreeMap<&str, &super::Row> {
    ds.rows
        .iter()
        .filter(|r| r.implementation.is_some() && r.strategy.is_none() && !r.capped)
        .filter(|r| !cuda_only || is_cuda(r))
        .map(|r| (r.run_id.as_str(), r))
        .collect()
}

fn is_cuda(row: &super::Row) -> bool {
    row.device_kind.as_str() == "cuda"
}

/// A CUDA row's allocator settings as the tables name them ([`DEFAULT_ALLOCATOR`]: none set).
fn allocator_label(row: &super::Row) -> &str {
    row.allocator_settings
        .as_ref()
        .map_or(DEFAULT_ALLOCATOR, |a| a.as_str())
}

/// Every real model with real-implementation rows (completed, usable, uncapped), by graph,
/// precision profile and allocator setting.
pub fn real_models(ds: &Dataset, cal: &Calibration) -> Vec<RealModel> {
    let facts = uncapped_real_rows(ds, false);
    type Key<'a> = (&'a str, crate::features::Precision, Option<&'a str>);
    let mut groups: BTreeMap<Key, (RealModel, Gathered)> = BTreeMap::new();
    for r in &cal.rows {
        let Some(row) = facts.get(r.run_id.as_str()) else {
            continue;
        };
        let (Some(measured), RunStatus::Completed) = (r.measured_bytes, r.status) else {
            continue;
        };
        let cuda = is_cuda(row);
        let allocator = cuda.then(|| allocator_label(row));
        let parameters = ds.graphs.get(r.graph.as_str()).map_or(0, |g| g.parameters);
        let (model, gathered) = groups
            .entry((r.graph.as_str(), r.precision, allocator))
            .or_insert_with(|| {
                (
                    RealModel {
                        graph: r.graph.to_string(),
                        family: r.family.to_string(),
                        implementation: row
                            .implementation
                            .as_ref()
                            .map_or("", |i| i.as_str())
                            .to_string(),
                        parameters,
                        regime: r.regime.to_string(),
                        device: row.device.to_string(),
                        precision: r.precision.as_str().to_string(),
                        allocator: allocator.map(str::to_string),
                        batches: Vec::new(),
                        min_measured_bytes: measured,
                        max_measured_bytes: measured,
                        errors: BTreeMap::new(),
                        reserved: None,
                    },
                    Gathered::default(),
                )
            });
        model.batches.push(r.batch);
        model.min_measured_bytes = model.min_measured_bytes.min(measured);
        model.max_measured_bytes = model.max_measured_bytes.max(measured);
        for m in METHODS {
            if let Some(p) = r.predictions.get(&m) {
                gathered
                    .errors
                    .entry(m)
                    .or_default()
                    .push(p / measured as f64 - 1.0);
            }
        }
        if let (true, Some(m), Some(s)) = (
            cuda,
            row.measured_reserved_bytes,
            row.simulated_reserved_bytes,
        ) {
            if m > 0 {
                gathered.reserved.push(s as f64 / m as f64 - 1.0);
            }
        }
    }
    groups
        .into_values()
        .map(|(mut model, gathered)| {
            model.batches.sort_unstable();
            model.batches.dedup();
            model.errors = gathered
                .errors
                .into_iter()
                .map(|(m, e)| (m, summarise(&e)))
                .collect();
            model.reserved = (!gathered.reserved.is_empty()).then(|| summarise(&gathered.reserved));
            model
        })
        .collect()
}

/// The held-out GPU errors of the real rows under one allocator setting: the simulator's
/// allocated and reserved peaks and the plan's held-out answer, over every real model's
/// uncapped completed CUDA rows.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AllocatorErrors {
    pub allocator: String,
    pub models: usize,
    pub allocated: Option<Errors>,
    pub reserved: Option<Errors>,
    pub plan: Option<Errors>,
    /// The measured reserved / allocated peak: median and largest.
    pub reserved_over_allocated: (f64, f64),
}

/// [`AllocatorErrors`] per allocator setting of the real CUDA rows, defaults first.
pub fn gpu_by_allocator(ds: &Dataset, cal: &Calibration) -> Vec<AllocatorErrors> {
    let facts = uncapped_real_rows(ds, true);
    // (set by the user, name) -> (the graphs, [simulated allocated, simulated reserved, plan
    // held out, measured reserved / allocated]).
    type Group = (BTreeSet<String>, [Vec<f64>; 4]);
    let mut by: BTreeMap<(bool, String), Group> = BTreeMap::new();
    for r in &cal.rows {
        let (Some(row), Some(measured), RunStatus::Completed) =
            (facts.get(r.run_id.as_str()), r.measured_bytes, r.status)
        else {
            continue;
        };
        let (models, e) = by
            .entry((
                row.allocator_settings.is_some(),
                allocator_label(row).to_string(),
            ))
            .or_default();
        models.insert(r.graph.to_string());
        if let Some(p) = r.predictions.get(&Method::Simulated) {
            e[0].push(p / measured as f64 - 1.0);
        }
        if let (Some(m), Some(s)) = (row.measured_reserved_bytes, row.simulated_reserved_bytes) {
            e[1].push(s as f64 / m as f64 - 1.0);
        }
        if let Some(p) = r.predictions.get(&Method::PlanHeldOutRegime) {
            e[2].push(p / measured as f64 - 1.0);
        }
        if let Some(m) = row.measured_reserved_bytes {
            e[3].push(m as f64 / measured as f64);
        }
    }
    let some = |e: &[f64]| (!e.is_empty()).then(|| summarise(e));
    by.into_iter()
        .map(|((_, allocator), (models, mut e))| {
            let largest = e[3].iter().copied().fold(0.0, f64::max);
            let ratio = super::metrics::median(&mut e[3]).unwrap_or(0.0);
            AllocatorErrors {
                allocator,
                models: models.len(),
                allocated: some(&e[0]),
                reserved: some(&e[1]),
                plan: some(&e[2]),
                reserved_over_allocated: (ratio, largest),
            }
        })
        .collect()
}

fn summarise(e: &[f64]) -> Errors {
    let mut abs: Vec<f64> = e.iter().map(|x| x.abs()).collect();
    let median_abs = super::metrics::median(&mut abs).unwrap_or(0.0);
    let worst = e
        .iter()
        .copied()
        .fold(0.0f64, |w, x| if x.abs() > w.abs() { x } else { w });
    Errors {
        rows: e.len(),
        median_abs,
        worst,
    }
}
