//! The phase floor (`plan::phase_floor`): the plan's estimate and bound are never below it, and
//! it is physics, not a fit: the simulator's optimizer phase and every measured run hold at
//! least that much.

use memcal::factors::FactorsFile;
use memcal::features::Precision;
use memcal::graph::Graph;
use memcal::plan::{phase_floor, plan};
use proptest::prelude::*;
use std::path::Path;

fn zoo() -> Vec<Graph> {
    let mut paths: Vec<_> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/graphs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
    paths.sort();
    // A graph with the sequence axis "T" (the generate campaign's) at one token.
    paths
        .iter()
        .map(|p| Graph::load_at(p, Some(1)).unwrap())
        .collect()
}

fn factors() -> FactorsFile {
    FactorsFile::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("data/factors.json")).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn no_zoo_graph_at_any_batch_is_planned_under_its_floor(
        g in 0usize..60, batch in 1u64..=1024, profile in 0usize..Precision::ALL.len()
    ) {
        let graphs = zoo();
        let g = &graphs[g % graphs.len()];
        let f = factors();
        let precision = Precision::ALL[profile];
        let p = plan(g, batch, precision, &f, &f.cards).unwrap();
        let floor = phase_floor(g, precision).bytes as f64;
        prop_assert!(p.estimate_bytes >= floor, "{} b{batch}: {} < {floor}", g.name, p.estimate_bytes);
        prop_assert!(p.bound_bytes >= floor);
        prop_assert_eq!(p.floor_decides, p.linear_estimate_bytes < floor);
    }
}

#[test]
fn every_zoo_graph_at_batch_1_to_1024_keeps_its_floor_on_a_grid() {
    let f = factors();
    for g in zoo() {
        for batch in [1, 2, 3, 7, 16, 64, 100, 256, 511, 1024] {
            for precision in Precision::ALL {
                let floor = phase_floor(&g, precision).bytes as f64;
                let p = plan(&g, batch, precision, &f, &f.cards).unwrap();
                assert!(p.estimate_bytes >= floor, "{} b{batch} {precision}", g.name);
            }
        }
    }
}

#[test]
fn the_floor_is_what_the_simulators_optimizer_step_holds_at_least() {
    for g in zoo() {
        let floor = phase_floor(&g, Precision::Fp32).bytes;
        let sim = memcal::simulate::simulate_peak(&g, 1, Precision::Fp32).unwrap();
        assert!(
            sim.peak_bytes >= floor,
            "{}: simulated {} < floor {floor}",
            g.name,
            sim.peak_bytes
        );
    }
}

#[test]
fn every_measured_run_held_at_least_its_floor() {
    let ds = memcal::engine::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("data")).unwrap();
    let mut checked = 0;
    // Plain training steps only (each at its precision's floor: 16 bytes a parameter, 8 in pure
    // bf16): a strategy keeps less than 16 bytes a parameter (LoRA,
    // QLoRA, inference, ZeRO); its own floor is checked in tests/data_runs.rs.
    for r in ds.rows.iter().filter(|r| r.strategy.is_none()) {
        if let Some(m) = r.measured_bytes {
            assert!(
                m >= r.floor_bytes,
                "{}: measured {m} < floor {}",
                r.run_id,
                r.floor_bytes
            );
            checked += 1;
        }
    }
    assert!(checked > 400, "{checked}");
}
