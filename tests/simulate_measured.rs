//! Compares the simulator's per-phase peaks with `memcal-measure` rows of the single-op fixtures
//! under `tests/fixtures/sim/` (CPU, float32, exact counting allocator). The measured rows are
//! committed under `tests/fixtures/sim/measured/`; see docs/simulator.md for how they were made.

use memcal::features::Precision;
use memcal::graph::Graph;
use memcal::run::RunRow;
use memcal::simulate::simulate;
use std::path::{Path, PathBuf};

fn rows(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|x| x == "json"));
    v.sort();
    v
}

/// Relative error of the simulated phase peaks against a measured row, per phase.
fn compare(row: &RunRow, verbose: bool) -> Vec<(String, u64, u64)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = format!("{}.json", row.graph.name);
    let path = [root.join("tests/fixtures/sim"), root.join("data/graphs")]
        .into_iter()
        .map(|d| d.join(&file))
        .find(|p| p.exists())
        .expect("the row's graph is a fixture or a zoo graph");
    let g = Graph::load(&path).expect("graph loads");
    let sim = simulate(&g, row.batch, Precision::Fp32).expect("fp32 simulates");
    let mut out = Vec::new();
    for p in &row.phases {
        let Some(s) = sim.phase(&p.name) else {
            continue;
        };
        let m = p.allocated_peak.unwrap_or(0);
        // Compare what the phase adds on top of its start, and the peak itself.
        out.push((p.name.clone(), s.peak, m));
        if verbose {
            let d = s.peak as i64 - m as i64;
            println!(
                "{:<24} b{:<3} {:<16} sim start {:>10} peak {:>10} end {:>10} | meas start {:>10} peak {:>10} end {:>10} | peak diff {:>9} ({:+.2}%) at {}",
                row.graph.name, row.batch, p.name, s.start, s.peak, s.end, p.allocated_start, m,
                p.allocated_end.unwrap_or(0), d, 100.0 * d as f64 / m.max(1) as f64, s.peak_node
            );
        }
    }
    out
}

#[test]
fn print_comparisons_from_env() {
    // MEMCAL_SIM_RUNS=/folder/of/rows cargo test --test simulate_measured -- --nocapture
    let Ok(dir) = std::env::var("MEMCAL_SIM_RUNS") else {
        return;
    };
    for p in rows(Path::new(&dir)) {
        let text = std::fs::read_to_string(&p).unwrap();
        let row: RunRow = serde_json::from_str(&text).unwrap();
        compare(&row, true);
    }
}

#[test]
fn print_timeline_from_env() {
    // MEMCAL_SIM_GRAPH=tests/fixtures/sim/x.json MEMCAL_SIM_BATCH=8 ... -- --nocapture
    let (Ok(g), Ok(b)) = (
        std::env::var("MEMCAL_SIM_GRAPH"),
        std::env::var("MEMCAL_SIM_BATCH"),
    ) else {
        return;
    };
    let g = Graph::load(Path::new(&g)).unwrap();
    let sim = simulate(&g, b.parse().unwrap(), Precision::Fp32).unwrap();
    for e in sim.timeline.iter().filter(|e| e.step <= 1) {
        println!(
            "{:<16} {:<12} {:>12} {:>12}",
            e.phase, e.node, e.bytes, e.after
        );
    }
}
