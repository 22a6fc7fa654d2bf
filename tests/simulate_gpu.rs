//! The simulator's cuda-bf16-autocast table and allocator replay against the shipped GPU rows
//! (`data/runs/cuda*/`, one H200, torch 2.11.0+cu130). The rules were frozen before this
//! comparison was first run (docs/simulator.md, "Measured comparison on the GPU"); it prints
//! per family what the page and the docs report:
//!
//! ```text
//! MEMCAL_GPU_SUMMARY=1 cargo test --release --test simulate_gpu -- --nocapture
//! ```
//!
//! The asserting test checks only what must hold whatever the accuracy: every GPU row is
//! simulated, the replay's reserved is never below its allocated, and no row's graph is missing.

use memcal::features::Precision;
use memcal::graph::Graph;
use memcal::run::{RunRow, RunStatus};
use memcal::simulate::simulate;
use std::collections::BTreeMap;
use std::path::Path;

/// Rows measured at 1 GB (10^9 bytes) or more count for the accuracy targets.
const TARGET_FLOOR: f64 = 1e9;

struct Compared {
    family: String,
    run_id: String,
    status: RunStatus,
    capped: bool,
    measured: Option<(u64, u64)>,
    simulated: (u64, u64),
    /// Where the replay under the row's cap runs out of memory (capped rows).
    over_cap: Option<String>,
    oom_phase: Option<String>,
}

fn rows() -> Vec<Compared> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let mut files = Vec::new();
    for dir in ["runs/cuda", "runs/cuda-after-fit"] {
        for e in walkdir::WalkDir::new(root.join(dir)).sort_by_file_name() {
            let e = e.expect("readable data/runs");
            if e.path().extension().is_some_and(|x| x == "json") {
                files.push(e.path().to_path_buf());
            }
        }
    }
    let mut graphs: BTreeMap<String, Graph> = BTreeMap::new();
    let mut out = Vec::new();
    for f in files {
        let row: RunRow = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        let g = graphs.entry(row.graph.name.clone()).or_insert_with(|| {
            let p = root.join("graphs").join(format!("{}.json", row.graph.name));
            Graph::from_bytes(&std::fs::read(&p).unwrap(), &p).unwrap()
        });
        let sim = simulate(g, row.batch, Precision::Bf16Autocast).expect("simulated");
        let d = sim.device.as_ref().expect("a CUDA replay");
        let cap = row.device.emulated_capacity_bytes;
        let over_cap = cap.and_then(|c| {
            sim.replay(Some(c))
                .oom
                .map(|o| format!("{} at `{}`", o.phase, o.node))
        });
        out.push(Compared {
            family: g.family.clone(),
            run_id: row.run_id.clone(),
            status: row.status,
            capped: cap.is_some(),
            measured: row
                .peak
                .as_ref()
                .map(|p| (p.allocated_bytes, p.reserved_bytes)),
            simulated: (d.allocated_peak, d.reserved_peak),
            over_cap,
            oom_phase: row.oom.as_ref().map(|o| o.phase.clone()),
        });
    }
    out
}

#[test]
fn every_gpu_row_is_simulated_and_replayed() {
    let rows = rows();
    assert!(rows.len() >= 300, "{} GPU rows", rows.len());
    for r in &rows {
        assert!(
            r.simulated.1 >= r.simulated.0,
            "{}: reserved below allocated",
            r.run_id
        );
        assert!(r.simulated.0 > 0, "{}", r.run_id);
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[test]
fn print_gpu_comparison_from_env() {
    if std::env::var("MEMCAL_GPU_SUMMARY").is_err() {
        return;
    }
    let rows = rows();
    let mut fams: BTreeMap<&str, Vec<&Compared>> = BTreeMap::new();
    for r in &rows {
        fams.entry(r.family.as_str()).or_default().push(r);
    }
    println!("| family | rows >= 1 GB | allocated median | allocated max | reserved median | reserved max | cuda-edge OOM rows predicted over cap | completed capped rows predicted over |");
    println!("|---|---|---|---|---|---|---|---|");
    let (mut all_a, mut all_r) = (Vec::new(), Vec::new());
    for (fam, rs) in &fams {
        let (mut ea, mut er) = (Vec::new(), Vec::new());
        for r in rs {
            if let (RunStatus::Completed, Some((a, rv))) = (r.status, r.measured) {
                if a as f64 >= TARGET_FLOOR {
                    ea.push((r.simulated.0 as f64 - a as f64).abs() / a as f64 * 100.0);
                    er.push((r.simulated.1 as f64 - rv as f64).abs() / rv as f64 * 100.0);
                }
            }
        }
        let ooms: Vec<&&Compared> = rs.iter().filter(|r| r.status == RunStatus::Oom).collect();
        let oom_hit = ooms.iter().filter(|r| r.over_cap.is_some()).count();
        let capped_done: Vec<&&Compared> = rs
            .iter()
            .filter(|r| r.capped && r.status == RunStatus::Completed)
            .collect();
        let false_over = capped_done.iter().filter(|r| r.over_cap.is_some()).count();
        let max = |v: &[f64]| v.iter().cloned().fold(f64::NAN, f64::max);
        println!(
            "| {fam} | {} | {:.2}% | {:.2}% | {:.2}% | {:.2}% | {oom_hit} of {} | {false_over} of {} |",
            ea.len(),
            median(&mut ea.clone()),
            max(&ea),
            median(&mut er.clone()),
            max(&er),
            ooms.len(),
            capped_done.len()
        );
        all_a.extend(ea);
        all_r.extend(er);
    }
    println!(
        "| all | {} | {:.2}% | {:.2}% | {:.2}% | {:.2}% | | |",
        all_a.len(),
        median(&mut all_a.clone()),
        all_a.iter().cloned().fold(f64::NAN, f64::max),
        median(&mut all_r.clone()),
        all_r.iter().cloned().fold(f64::NAN, f64::max)
    );
    if std::env::var("MEMCAL_GPU_ROWS").is_ok() {
        for r in &rows {
            let m = r.measured.map_or("-".to_string(), |(a, rv)| {
                format!(
                    "alloc {:+.2}% reserved {:+.2}%",
                    (r.simulated.0 as f64 / a as f64 - 1.0) * 100.0,
                    (r.simulated.1 as f64 / rv as f64 - 1.0) * 100.0
                )
            });
            println!(
                "{} {:?} {m} over-cap: {} oom-phase: {}",
                r.run_id,
                r.status,
                r.over_cap.as_deref().unwrap_or("-"),
                r.oom_phase.as_deref().unwrap_or("-")
            );
        }
    }
}
