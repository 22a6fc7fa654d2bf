//! The builder against the graph format: the fixtures cover every op, and every graph (fixtures,
//! and every non-`full` graph of data/graphs) builds with exactly the graph's parameter count.

use memcal::graph::Graph;
use memcal_measure::builder::Model;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use tch::Device;

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    v
}

#[test]
fn fixtures_cover_every_op_of_the_format() {
    let mut seen = BTreeSet::new();
    for p in fixtures() {
        let g = Graph::load(&p).unwrap_or_else(|e| panic!("{e}"));
        for n in &g.nodes {
            seen.insert(n.op.name());
        }
    }
    let missing: Vec<&str> = memcal::ops::op_names()
        .into_iter()
        .filter(|op| !seen.contains(op))
        .collect();
    assert!(missing.is_empty(), "ops without a fixture: {missing:?}");
}

/// Graphs above this many parameters (2 GB of float32 weights) are not built on the CPU here.
const MAX_CPU_PARAMETERS: u64 = 500_000_000;

#[test]
fn built_parameters_equal_the_graphs() {
    let mut paths = fixtures();
    let zoo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/graphs");
    let mut zoo_count = 0;
    if zoo.is_dir() {
        for e in std::fs::read_dir(&zoo).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                paths.push(p);
            }
        }
    }
    paths.sort();
    let mut checked = Vec::new();
    let mut skipped = Vec::new();
    for p in &paths {
        // A graph with the sequence axis "T" (the generate campaign's) at one token.
        let g = Graph::load_at(p, Some(1)).unwrap_or_else(|e| panic!("{e}"));
        if g.variant == "full" {
            continue;
        }
        // The GPU campaign's full-size real models (1.2-7.2B parameters, data/models/measured.json
        // entries with device cuda) do not fit this machine in float32; their built counts
        // are the rows' `parameters.built` (data/runs/cuda-real), equal to the graphs'.
        if g.parameters() > MAX_CPU_PARAMETERS {
            skipped.push(g.name.clone());
            continue;
        }
        let m = Model::build(&g, Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(
            m.built_parameters(),
            g.parameters(),
            "{}: built vs graph parameters",
            p.display()
        );
        checked.push(g.name.clone());
        if p.starts_with(&zoo) {
            zoo_count += 1;
        }
    }
    eprintln!(
        "checked {} graphs ({zoo_count} from data/graphs): {}; too large for a CPU build: {}",
        checked.len(),
        checked.join(", "),
        skipped.join(", ")
    );
    assert!(checked.len() >= 5);
}
