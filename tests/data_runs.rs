//! The measured rows shipped in data/runs pass the campaign's checks: each row's built model has
//! its graph's parameter count, no run failed for a reason other than memory, every completed
//! run's peak is at least the model state alone (16 bytes per parameter: float32 weights,
//! gradients and AdamW's two moments; under a strategy, what the strategy keeps), CPU rows are labelled CPU, and CPU out-of-memory errors
//! happen only under an emulated capacity.

use memcal::graph::Graph;
use memcal::run::{RunRow, RunStatus};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn rows_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rows_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

#[test]
fn shipped_rows_pass_the_campaign_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let graphs: BTreeMap<String, Graph> = memcal::graph::load_dir(&root.join("graphs"))
        .unwrap()
        .into_iter()
        .map(|g| (g.name.clone(), g))
        .collect();
    let mut files = Vec::new();
    rows_under(&root.join("runs"), &mut files);
    files.sort();
    assert!(!files.is_empty(), "no rows under data/runs");
    let mut problems = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        let row: RunRow = serde_json::from_slice(&std::fs::read(f).unwrap())
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        let Some(g) = graphs.get(&row.graph.name) else {
            problems.push(format!(
                "{rel}: graph `{}` is not in data/graphs",
                row.graph.name
            ));
            continue;
        };
        let params = g.parameters();
        if row.parameters.graph != params || row.parameters.built != params || row.graph_mismatch {
            problems.push(format!(
                "{rel}: parameters graph {} built {} (data/graphs says {params}), mismatch flag {}",
                row.parameters.graph, row.parameters.built, row.graph_mismatch
            ));
        }
        if row.status == RunStatus::Error {
            problems.push(format!("{rel}: failed for a reason other than memory"));
        }
        // The model state a strategy keeps: 16 bytes a parameter for plain training and
        // checkpointing, the fp32 weights for LoRA and inference, the packed 4-bit weights
        // (half a byte) for QLoRA.
        let (floor, what) = match row.strategy.as_deref() {
            // Pure bf16: weights, gradients and both AdamW states at 2 bytes each.
            None if row.precision == "bf16" => (8 * params, "8"),
            None => (16 * params, "16"),
            Some(s)
                if s.starts_with("inference:")
                    || s.starts_with("generate:")
                    || s.contains("lora:") && !s.contains("qlora:") =>
            {
                (4 * params, "4")
            }
            Some(s) if s.contains("qlora:") => (params / 2, "0.5"),
            // DeepSpeed's stages 1 and 2: the weights whole, the rest of the 16 bytes sharded.
            Some(s) if s.contains("impl=deepspeed") || s.starts_with("zero2:") => (
                4 * params + 12 * params / row.world.unwrap_or(1),
                "4 + 12 / world",
            ),
            Some(s) if s.contains("zero1:") => (8 * params, "8"),
            // Sharded per rank (`world` processes): at least the rank's share of the 16 bytes.
            Some(s)
                if s.starts_with("fsdp:") || s.starts_with("tp:") || s.starts_with("zero3:") =>
            {
                (16 * params / row.world.unwrap_or(1), "16 / world")
            }
            // A pipeline rank: the 16 bytes of its own stage's parameters (the split the
            // campaign and the formula share).
            Some(s) if s.starts_with("pp:") => {
                let spec = memcal::strategy::parse(s).unwrap();
                let stages = spec.devices();
                let terms = memcal::strategy::memory::graph_terms(g, row.batch);
                let (stage, _) = terms.pipeline.stage(row.rank.unwrap_or(0), stages);
                (16 * stage, "16 x its stage's share of the")
            }
            Some(_) => (16 * params, "16"),
        };
        if let Some(peak) = &row.peak {
            if peak.allocated_bytes < floor {
                problems.push(format!(
                    "{rel}: peak {} is below the model state alone, {floor} ({what} x {params} parameters)",
                    peak.allocated_bytes
                ));
            }
        }
        if rel.starts_with("runs/cpu") && (row.device.kind != "cpu" || row.precision != "fp32") {
            problems.push(format!(
                "{rel}: under runs/cpu but device {} precision {}",
                row.device.kind, row.precision
            ));
        }
        // GPU rows: a CUDA device, bf16 autocast or pure bf16, the caching allocator (reserved >= allocated),
        // and, with this campaign's 139.8 GiB card, an out-of-memory error only under a cap or
        // (cuda-real) at the card's own capacity.
        if rel.starts_with("runs/cuda") {
            if row.device.kind != "cuda"
                || !["bf16-autocast", "bf16"].contains(&row.precision.as_str())
                || row.device.reserved_equals_allocated
            {
                problems.push(format!(
                    "{rel}: under runs/cuda but device {} precision {} reserved_equals_allocated {}",
                    row.device.kind, row.precision, row.device.reserved_equals_allocated
                ));
            }
            if let Some(peak) = &row.peak {
                if peak.reserved_bytes < peak.allocated_bytes {
                    problems.push(format!(
                        "{rel}: reserved peak {} below the allocated peak {}",
                        peak.reserved_bytes, peak.allocated_bytes
                    ));
                }
            }
            // The real models' campaign (cuda-real) also runs a batch past the card: such a row
            // must have run out with the allocator's reserve near the card's whole capacity.
            let near_card = row.phases.last().is_some_and(|p| {
                p.reserved_peak.unwrap_or(0) as f64 >= 0.9 * row.device.capacity_bytes as f64
            });
            if row.status == RunStatus::Oom
                && row.device.emulated_capacity_bytes.is_none()
                && !(row.regime == "cuda-real" && near_card)
            {
                problems.push(format!(
                    "{rel}: a GPU out-of-memory error without an emulated capacity, short of the card"
                ));
            }
        }
        if row.device.kind == "cpu"
            && row.status == RunStatus::Oom
            && row.device.emulated_capacity_bytes.is_none()
        {
            problems.push(format!(
                "{rel}: a CPU out-of-memory error without an emulated capacity"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} rows fail:\n{}",
        problems.len(),
        files.len(),
        problems.join("\n")
    );
}
