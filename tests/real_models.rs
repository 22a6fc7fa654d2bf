//! The real implementations in `data/`: every row of the real-model campaign (a row with
//! `implementation`) is held out by regime, never fitted, and lands in the page's "Real
//! implementations" table under the graph imported from its config.

use memcal::engine::{self, Bucket, Method};
use std::path::Path;

#[test]
fn every_real_row_is_held_out_and_on_the_real_models_table() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let ds = engine::load(&data).unwrap();
    let cal = engine::calibrate(&ds);
    let real: Vec<_> = ds
        .rows
        .iter()
        // A row measured on a graph memcal no longer draws so (hf-mixtral-r1 before the
        // grouped experts layout) is excluded as `graph changed` until it is re-measured.
        // A generate row (a strategy) is compared in the strategies' evidence instead.
        .filter(|r| r.implementation.is_some() && r.strategy.is_none() && !r.graph_changed)
        .collect();
    assert!(!real.is_empty(), "data/runs/cpu-real has rows");
    for r in &real {
        assert!(
            !ds.factors
                .training_regimes
                .iter()
                .any(|t| t.as_str() == r.regime.as_str()),
            "{}: a real row's regime is never a training regime",
            r.run_id
        );
        let result = cal
            .rows
            .iter()
            .find(|c| c.run_id == r.run_id)
            .expect("usable");
        assert_eq!(result.bucket, Bucket::HeldOutRegime, "{}", r.run_id);
    }
    let models = engine::real::real_models(&ds, &cal);
    let on_table: usize = models.iter().map(|m| m.batches.len()).sum();
    // The table holds the completed rows at the device's own capacity (a capped or
    // out-of-memory row has no peak to compare), one entry per batch and allocator setting.
    let tabled = real
        .iter()
        .filter(|r| r.status == memcal::run::RunStatus::Completed && !r.capped)
        .count();
    assert_eq!(on_table, tabled, "one table entry per batch measured");
    assert!(
        models
            .iter()
            .any(|m| m.allocator.is_some() && m.reserved.is_some()),
        "the GPU rows' reserved errors are on the table"
    );
    let entries = memcal::import::measured::entries(&data.join("models")).unwrap();
    for m in &models {
        let e = entries
            .iter()
            .find(|e| e.graph == m.graph)
            .expect("a measured.json entry");
        assert!(
            m.batches.iter().all(|b| e.batches.contains(b)),
            "{}",
            m.graph
        );
        for method in engine::real::METHODS {
            // The simulator has no pure-bf16 rule table: those rows have the plan and the
            // baseline only.
            if method == Method::Simulated && m.precision == "bf16" {
                assert!(!m.errors.contains_key(&method), "{}", m.graph);
                continue;
            }
            assert!(
                m.errors.contains_key(&method),
                "{}: {}",
                m.graph,
                method.as_str()
            );
        }
    }
    assert!(models
        .iter()
        .filter(|m| m.precision != "bf16")
        .all(|m| m.errors[&Method::Simulated].rows == m.batches.len()));
    assert!(
        models.iter().filter(|m| m.precision == "bf16").count() >= 7,
        "the H200's pure-bf16 rows are on the table, one group a model"
    );
}
