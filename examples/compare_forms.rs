//! The evidence behind the plan's form (docs/engine.md, "The phase floor"): the linear
//! six-factor estimate against max(linear, phase floor), on every full-size graph of data/graphs
//! at batches 1, 8 and 32, next to the simulator's peak (no fitted factor) where it has rules.
//!
//!     cargo run --release --example compare_forms
use memcal::factors::FactorsFile;
use memcal::features::{features, Precision};
use memcal::graph::Graph;
use memcal::plan::{estimate, phase_floor};
use std::path::Path;

fn main() {
    let data = Path::new("data");
    let f = FactorsFile::load(&data.join("factors.json")).expect("data/factors.json loads");
    let mut graphs: Vec<_> = std::fs::read_dir(data.join("graphs"))
        .expect("data/graphs")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_stem().unwrap().to_string_lossy();
            !n.ends_with("-r1") && !n.ends_with("-r2") && !n.ends_with("-r3")
        })
        .collect();
    graphs.sort();
    println!("| graph | parameters | batch | profile | floor GB | linear GB | linear / floor | simulated GB (fp32) |");
    println!("|---|---:|---:|---|---:|---:|---:|---:|");
    for path in graphs {
        let g = Graph::load(&path).expect("graph loads");
        for batch in [1u64, 8, 32] {
            for p in Precision::ALL {
                let floor = phase_floor(&g, p);
                let Some(a) = f.factors(p) else { continue };
                let lin = estimate(a, &features(&g, batch, p));
                let sim = if p == Precision::Fp32 {
                    memcal::simulate::simulate(&g, batch, p)
                        .map(|s| format!("{:.2}", s.peak_bytes as f64 / 1e9))
                        .unwrap_or_else(|e| format!("none ({e})"))
                } else {
                    "—".into()
                };
                println!(
                    "| {} | {} | {batch} | {} | {:.2} | {:.2} | {:.3} | {sim} |",
                    g.name,
                    g.parameters(),
                    p.as_str(),
                    floor.bytes as f64 / 1e9,
                    lin / 1e9,
                    lin / floor.bytes as f64,
                );
            }
        }
    }
}
