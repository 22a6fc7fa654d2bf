//! The "Real implementations" section: the rows that trained the code people run (transformers
//! classes built from Hugging Face configs, measured in Python with the harness's counting
//! allocator and protocol), each real model with the error of the six-factor plan, the
//! simulator and accelerate on it. The numbers are [`crate::engine::real`]'s; this file
//! formats them.

use super::*;
use crate::engine::real::{Errors, RealModel, METHODS};
use crate::engine::Method;

/// The section's view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RealView {
    pub intro: String,
    pub table: Table,
}

fn signed_pct(x: f64) -> Cell {
    Cell::num(format!("{:+.1}%", x * 100.0), fmt::pct_key(x))
}

fn error_cells(e: Option<&Errors>) -> [Cell; 2] {
    match e {
        Some(e) => [opt_pct(Some(e.median_abs)), signed_pct(e.worst)],
        None => [Cell::num(fmt::MISSING, ""), Cell::num(fmt::MISSING, "")],
    }
}

/// The section, from the real models' evidence.
pub fn view(models: &[RealModel]) -> RealView {
    let mut columns = vec![
        col("Graph", false),
        col("Code measured", false),
        col("Parameters", true),
        col("Batches", true),
        col("Measured peak", true),
    ];
    for m in METHODS {
        let short = match m {
            Method::PlanHeldOutRegime => "Plan (held out)",
            Method::Simulated => "Simulator",
            _ => m.as_str(),
        };
        columns.push(col(&format!("{short} median |error|"), true));
        columns.push(col(&format!("{short} worst"), true));
    }
    let mut table = table(
        "real-models-table",
        "Each real model against memcal's answer from its imported graph (out of sample; worst error signed: negative is under the measured peak)",
        columns,
        "No real implementation has been measured yet (python3 -m memcal_export.campaign).",
    );
    for r in models {
        let batches: Vec<String> = r.batches.iter().map(u64::to_string).collect();
        let mut row = vec![
            Cell::text(&r.graph),
            Cell::text(&r.implementation),
            count_cell(r.parameters),
            Cell::num(batches.join(", "), r.batches.len().to_string()),
            Cell::num(
                format!(
                    "{} to {}",
                    fmt::bytes(r.min_measured_bytes as f64),
                    fmt::bytes(r.max_measured_bytes as f64)
                ),
                fmt::bytes_key(r.max_measured_bytes as f64),
            ),
        ];
        for m in METHODS {
            row.extend(error_cells(r.errors.get(&m)));
        }
        table.rows.push(row);
    }
    let rows: usize = models.iter().map(|m| m.batches.len()).sum();
    RealView {
        intro: format!(
            "The zoo's graphs are replayed by the harness, which builds each as its own torch model. These rows are not: each trained the model class a library builds from a Hugging Face config (data/models/measured.json; full-size where a CPU holds it, reduced otherwise, its replaced fields named in the graph's description), with random weights, three AdamW steps on the CPU in float32, measured in Python with the harness's counting allocator under its protocol (python3 -m memcal_export.campaign). Each is planned from the graph memcal import hf draws from the same config (data/graphs/). They are a regime of their own that no fit sees. The simulator has no fitted factor; the plan's columns are its held-out answer on them (the factors fitted on the training regimes' rows, the zoo's, only). {}",
            match models.len() {
                0 => "No real implementation has been measured yet.".to_string(),
                1 => format!("{} over one real model.", fmt::runs(rows as u64)),
                n => format!("{} over {} real models.", fmt::runs(rows as u64), fmt::number_word(n)),
            }
        ),
        table,
    }
}
