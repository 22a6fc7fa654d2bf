//! The real implementations: rows that measured the code people run (a `memcal-run/1` row with
//! `implementation`: a transformers class built from a Hugging Face config) rather than the
//! graph built by the harness, grouped by the graph they are planned from, with each method's
//! error on them. Never fitted (their regime is not a training regime), so every error here is
//! out of sample.

use super::{Calibration, Dataset, Method};
use crate::run::RunStatus;
use std::collections::BTreeMap;

/// One real model's rows and every method's error on them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RealModel {
    pub graph: String,
    pub family: String,
    /// Library and class, e.g. `transformers 5.24.0 GPT2LMHeadModel`.
    pub implementation: String,
    pub parameters: u64,
    pub regime: String,
    /// The batches measured (completed rows), ascending.
    pub batches: Vec<u64>,
    pub min_measured_bytes: u64,
    pub max_measured_bytes: u64,
    /// Per method that predicts these rows: signed errors (predicted / measured - 1) ...
    pub errors: BTreeMap<Method, Errors>,
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

/// Every graph with real-implementation rows (completed, usable), by graph name.
pub fn real_models(ds: &Dataset, cal: &Calibration) -> Vec<RealModel> {
    let implementations: BTreeMap<&str, &str> = ds
        .rows
        .iter()
        .filter_map(|r| Some((r.run_id.as_str(), r.implementation.as_ref()?.as_str())))
        .collect();
    let mut by_graph: BTreeMap<&str, (RealModel, BTreeMap<Method, Vec<f64>>)> = BTreeMap::new();
    for r in &cal.rows {
        let Some(implementation) = implementations.get(r.run_id.as_str()) else {
            continue;
        };
        let (Some(measured), RunStatus::Completed) = (r.measured_bytes, r.status) else {
            continue;
        };
        let parameters = ds.graphs.get(r.graph.as_str()).map_or(0, |g| g.parameters);
        let (model, errors) = by_graph.entry(r.graph.as_str()).or_insert_with(|| {
            (
                RealModel {
                    graph: r.graph.to_string(),
                    family: r.family.to_string(),
                    implementation: implementation.to_string(),
                    parameters,
                    regime: r.regime.to_string(),
                    batches: Vec::new(),
                    min_measured_bytes: measured,
                    max_measured_bytes: measured,
                    errors: BTreeMap::new(),
                },
                BTreeMap::new(),
            )
        });
        model.batches.push(r.batch);
        model.min_measured_bytes = model.min_measured_bytes.min(measured);
        model.max_measured_bytes = model.max_measured_bytes.max(measured);
        for m in METHODS {
            if let Some(p) = r.predictions.get(&m) {
                errors.entry(m).or_default().push(p / measured as f64 - 1.0);
            }
        }
    }
    by_graph
        .into_values()
        .map(|(mut model, errors)| {
            model.batches.sort_unstable();
            model.batches.dedup();
            model.errors = errors
                .into_iter()
                .map(|(m, e)| (m, summarise(&e)))
                .collect();
            model
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
