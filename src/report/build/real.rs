//! The "Real implementations" section: the rows that trained the code people run (transformers
//! classes built from Hugging Face configs, measured in Python with the harness's counting
//! allocator and protocol), each real model with the error of the six-factor plan, the
//! simulator and accelerate on it. The numbers are [`crate::engine::real`]'s; this file
//! formats them.

use super::*;
use crate::engine::real::{AllocatorErrors, Errors, RealModel, DEFAULT_ALLOCATOR, METHODS};
use crate::engine::Method;

/// The section's view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RealView {
    pub intro: String,
    pub table: Table,
    pub gpu_intro: String,
    pub gpu_table: Table,
}

fn signed_pct(x: f64) -> Cell {
    Cell::num(fmt::signed_pct(x), fmt::pct_key(x))
}

fn error_cells(e: Option<&Errors>) -> [Cell; 2] {
    match e {
        Some(e) => [opt_pct(Some(e.median_abs)), signed_pct(e.worst)],
        None => [Cell::num(fmt::MISSING, ""), Cell::num(fmt::MISSING, "")],
    }
}

/// The section, from the real models' evidence.
pub fn view(models: &[RealModel], gpu: &[AllocatorErrors]) -> RealView {
    let mut columns = vec![
        col("Graph", false),
        col("Code measured", false),
        col("Device", false),
        col("Precision", false),
        col("Allocator settings", false),
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
    columns.push(col("Simulator reserved median |error|", true));
    columns.push(col("Simulator reserved worst", true));
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
            Cell::text(&r.device),
            Cell::text(&r.precision),
            Cell::text(r.allocator.as_deref().unwrap_or(fmt::MISSING)),
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
        row.extend(error_cells(r.reserved.as_ref()));
        table.rows.push(row);
    }
    let rows: usize = models.iter().map(|m| m.batches.len()).sum();
    RealView {
        intro: format!(
            "The zoo's graphs are replayed by the harness, which builds each as its own torch model. These rows are not: each trained the model class a library builds from a Hugging Face config (data/models/measured.json; full-size where the device holds it, reduced otherwise, its replaced fields named in the graph's description), with random weights, three AdamW steps under the harness's protocol, measured in Python: on the CPU in float32 with the harness's counting allocator (python3 -m memcal_export.campaign, regime cpu-real), or on the GPU under brain-float autocast (float32 weights) or in pure bf16 (bf16 weights, gradients and AdamW states) with the CUDA caching allocator's own statistics, allocated and reserved (python3 -m memcal_export.gpu, regime cuda-real; one row per model, precision, batch and allocator setting; the rows capped at an emulated capacity are left out of this table). Each is planned from the graph memcal import hf draws from the same config (data/graphs/). They are a regime of their own that no fit sees. The simulator has no fitted factor; the plan's columns are its held-out answer on them (the factors fitted on the training regimes' rows, the zoo's, only). {}",
            match models.len() {
                0 => "No real implementation has been measured yet.".to_string(),
                1 => format!("{} over one real model.", fmt::runs(rows as u64)),
                n => format!("{} over {} real models.", fmt::runs(rows as u64), fmt::number_word(n)),
            }
        ),
        table,
        gpu_intro: gpu_intro(gpu),
        gpu_table: gpu_table(gpu),
    }
}

fn gpu_intro(gpu: &[AllocatorErrors]) -> String {
    let rows: usize = gpu.iter().filter_map(|g| g.allocated.map(|e| e.rows)).sum();
    format!(
        "GPU errors per allocator setting: the real models' uncapped completed CUDA rows ({}), none of which any rule or factor was fitted on. The simulator's columns are its caching-allocator replay under the row's own settings (its allocated peak against the measured allocated peak, its reserved peak against the measured reserved peak); the plan's are its held-out answer against the measured allocated peak. Under torch's defaults every column is held out. The replay of the other settings (expandable segments, max_split_size_mb, which change how blocks are split and so the allocated bytes too) was written from torch's allocator source after these rows were measured: the simulator's columns for them are not held out (the held-out figures, from the replay of the defaults, are in docs/gpu-campaign.md). The last columns are the measured reserved peak over the allocated one.",
        fmt::runs(rows as u64)
    )
}

fn gpu_table(gpu: &[AllocatorErrors]) -> Table {
    let columns = vec![
        col("Allocator settings (PYTORCH_CUDA_ALLOC_CONF)", false),
        col("Real models", true),
        col("Rows", true),
        col("Simulator allocated median |error|", true),
        col("Simulator allocated worst", true),
        col("Simulator reserved median |error|", true),
        col("Simulator reserved worst", true),
        col("Simulator held out", false),
        col("Plan (held out) median |error|", true),
        col("Plan (held out) worst", true),
        col("Reserved / allocated, median", true),
        col("Reserved / allocated, largest", true),
    ];
    let mut table = table(
        "real-gpu-allocators-table",
        "GPU errors of the real models, per allocator setting (worst error signed: negative is under the measured peak)",
        columns,
        "No real implementation has been measured on a GPU yet (measurement/campaigns/gpu-all.sh).",
    );
    for g in gpu {
        let mut row = vec![
            Cell::text(&g.allocator),
            count_cell(g.models as u64),
            count_cell(g.allocated.map_or(0, |e| e.rows) as u64),
        ];
        row.extend(error_cells(g.allocated.as_ref()));
        row.extend(error_cells(g.reserved.as_ref()));
        row.push(Cell::text(if g.allocator == DEFAULT_ALLOCATOR {
            "yes"
        } else {
            "no: replay written after these rows"
        }));
        row.extend(error_cells(g.plan.as_ref()));
        let (median, largest) = g.reserved_over_allocated;
        row.push(Cell::num(format!("{median:.3}"), format!("{median:.6}")));
        row.push(Cell::num(format!("{largest:.3}"), format!("{largest:.6}")));
        table.rows.push(row);
    }
    table
}
