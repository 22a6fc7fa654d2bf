//! One timed calibration of 1,000,000 synthetic rows over 100 families (ignored by default; the
//! criterion benchmark `benches/engine.rs` is the measurement). Run with
//! `cargo test --release --test engine_timing -- --ignored --nocapture`.

use memcal::engine::{calibrate, synthetic};
use std::time::Instant;

#[test]
#[ignore]
fn one_million_rows() {
    let truth = [1.2, 0.9, 1.3, 3.6, 5.2, 2.0];
    let t0 = Instant::now();
    let ds = synthetic::dataset(1_000_000, 100, truth, 0.1, 7);
    let t1 = Instant::now();
    let cal = calibrate(&ds);
    let t2 = Instant::now();
    println!(
        "generate {:.2} s, calibrate {:.2} s; {}",
        (t1 - t0).as_secs_f64(),
        (t2 - t1).as_secs_f64(),
        memcal::engine::summary_table(&cal)
    );
    assert!(cal.totals.balanced);
}

/// The engine on the repository's own `data/` (ignored: the data is still being measured).
/// `cargo test --test engine_timing -- --ignored --nocapture real_data`.
#[test]
#[ignore]
fn real_data() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let ds = memcal::engine::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    let cal = calibrate(&ds);
    println!("{}", memcal::engine::summary_table(&cal));
    assert!(cal.totals.balanced);
}
