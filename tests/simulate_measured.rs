//! Compares the simulator's per-phase peaks with `memcal-measure` rows of the single-op fixtures
//! under `tests/fixtures/sim/` (CPU, float32, exact counting allocator). The measured rows are
//! committed under `tests/fixtures/sim/measured/`; see docs/simulator.md for how they were made.

use memcal::features::Precision;
use memcal::graph::Graph;
use memcal::run::RunRow;
use memcal::simulate::simulate;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One measured run, reduced to its phases (`tests/fixtures/sim/measured/*.json`).
#[derive(Deserialize)]
struct Measured {
    graph: String,
    sha256: String,
    batch: u64,
    phases: Vec<MeasuredPhase>,
}

#[derive(Deserialize)]
struct MeasuredPhase {
    name: String,
    start: u64,
    peak: u64,
    end: u64,
}

/// Allowed relative error of a simulated phase peak, per fixture, with its reason.
fn tolerance(graph: &str) -> f64 {
    match graph {
        // oneDNN's fixed 10-30 KB scratch on small convolutions, LSTM's ~19 KB: not modelled
        // (constants that depend on the build and threads).
        "sim-conv2"
        | "sim-group-norm"
        | "sim-avg-pool-upsample"
        | "sim-adaptive-pool"
        | "sim-lstm"
        | "sim-conv-bn-pool"
        | "sim-conv1d-s1"
        | "sim-mla"
        | "sim-dwconv" => 0.01,
        // MoE: routing is random and the rule assumes a uniform split over the experts.
        "sim-moe" | "mixtral-r1" => 0.01,
        // Two-layer LSTM: the workspace of inner layers is measured for one configuration.
        "sim-lstm2" | "cnn-lstm-r1" | "lstm-lm-r1" => 0.05,
        // Known gaps (docs/simulator.md): a stride-5 first conv1d at batch 2; U-Net's head;
        // bidirectional LSTM workspace; two-layer bidirectional GRU's backward.
        "sim-conv1d-stride" => 0.15,
        "sim-conv1d-s2-first" => 0.03,
        "sim-seg-head" => 0.01,
        "unet-r1" => 0.01,
        "sim-lstm2bi" => 0.12,
        // LSTM at H = 128 to 512: forward about 1% low (scratch growing with H not modelled).
        "sim-lstm-wide" | "sim-lstm2-wide" | "sim-lstm-h256-t32" | "sim-lstm-h128-t64"
        | "sim-lstm-h512-t16" => 0.02,
        "sim-gru" | "sim-gru-t32-h128" | "sim-gru-t64-h128" | "sim-gru-t32-h256" => 0.02,
        "gru-r1" => 0.03,
        "sim-gru2bi" => 0.07,
        // Three-layer bidirectional GRU: forward exact, backward up to +4.3% (the 3 W_hh rule).
        "sim-gru3bi" | "sim-gru4bi" => 0.05,
        // Dense block: +1 feature map in the backward of the linear reading the last concat
        // slice (the simulator copies a last-axis slice gradient that torch can view).
        "sim-dense" => 0.035,
        _ => 0.001,
    }
}

fn measured(file: &str) -> Vec<Measured> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sim/measured")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("measured summaries are committed");
    serde_json::from_str(&text).expect("measured summaries parse")
}

/// Checks every phase of every measured run against the simulation; returns the rows checked.
fn check(file: &str, dir: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut failures = Vec::new();
    for m in measured(file) {
        let path = root.join(dir).join(format!("{}.json", m.graph));
        let Ok(g) = Graph::load(&path) else {
            eprintln!("skipping {}: {} is gone", m.graph, path.display());
            continue;
        };
        if g.sha256 != m.sha256 {
            eprintln!(
                "skipping {}: the graph changed since it was measured",
                m.graph
            );
            continue;
        }
        let sim = simulate(&g, m.batch, Precision::Fp32).expect("fp32 simulates");
        let tol = tolerance(&m.graph);
        for p in &m.phases {
            let s = sim
                .phase(&p.name)
                .expect("every harness phase is simulated");
            // Starts and ends (what is alive between phases) must match as closely as peaks.
            for (what, got, want) in [
                ("start", s.start, p.start),
                ("peak", s.peak, p.peak),
                ("end", s.end, p.end),
            ] {
                let err = (got as f64 - want as f64).abs() / want.max(1) as f64;
                if err > tol {
                    failures.push(format!(
                        "{} b{} {} {what}: simulated {got}, measured {want} ({:+.3}%, tolerance {:.1}%)",
                        m.graph, m.batch, p.name, 100.0 * (got as f64 - want as f64) / want.max(1) as f64, 100.0 * tol
                    ));
                }
            }
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    checked
}

#[test]
fn single_op_fixtures_match_their_measured_runs() {
    assert!(check("cpu-fp32.json", "tests/fixtures/sim") >= 80);
}

#[test]
fn reduced_zoo_graphs_match_their_measured_runs() {
    // Measured by hand for validation (regime `test`, not calibration rows); rows whose graph
    // changed since are skipped.
    check("zoo-r1-cpu-fp32.json", "data/graphs");
}

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

#[test]
fn print_summary_from_env() {
    // MEMCAL_SIM_SUMMARY=1 cargo test --test simulate_measured print_summary -- --nocapture
    if std::env::var("MEMCAL_SIM_SUMMARY").is_err() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, dir) in [
        ("cpu-fp32.json", "tests/fixtures/sim"),
        ("zoo-r1-cpu-fp32.json", "data/graphs"),
    ] {
        for m in measured(file) {
            let g = Graph::load(&root.join(dir).join(format!("{}.json", m.graph))).unwrap();
            let sim = simulate(&g, m.batch, Precision::Fp32).unwrap();
            let overall_m = m.phases.iter().map(|p| p.peak).max().unwrap();
            let worst = m
                .phases
                .iter()
                .map(|p| {
                    let s = sim.phase(&p.name).unwrap().peak as f64;
                    (p.name.as_str(), 100.0 * (s - p.peak as f64) / p.peak as f64)
                })
                .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
                .unwrap();
            let overall_e = 100.0 * (sim.peak_bytes as f64 - overall_m as f64) / overall_m as f64;
            println!(
                "| {} | {} | {} | {} | {:+.3}% | {} {:+.3}% | {} |",
                m.graph,
                m.batch,
                sim.peak_bytes,
                overall_m,
                overall_e,
                worst.0,
                worst.1,
                sim.peak_phase
            );
        }
    }
}

#[test]
fn print_render_from_env() {
    // MEMCAL_SIM_RENDER=data/graphs/gpt-r1.json:2 cargo test ... -- --nocapture
    let Ok(spec) = std::env::var("MEMCAL_SIM_RENDER") else {
        return;
    };
    let (path, batch) = spec.split_once(':').expect("path:batch");
    let g = Graph::load(Path::new(path)).unwrap();
    let sim = simulate(&g, batch.parse().unwrap(), Precision::Fp32).unwrap();
    println!("{}", memcal::simulate::render_timeline(&sim));
}
