//! The calibration engine: the fit, its determinism, every bucket and exclusion reason, the
//! quantile rule, the truth rule, and the loader's errors.

// Features and factors are parallel arrays: indexing both by k reads best.
#![allow(clippy::needless_range_loop)]

use memcal::engine::{
    self, calibrate, nearest_rank, refit_factors_file, rows_sha256, summary_table, synthetic,
    truth, write_calibration_json, Bucket, Dataset, ExclusionReason, Method, Truth,
};
use memcal::factors::FactorsFile;
use memcal::features::{Precision, N_FEATURES};
use memcal::graph::sha256_hex;
use memcal::run::RunStatus;
use memcal::Error;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const TRUTH: [f64; N_FEATURES] = [1.2, 0.9, 1.3, 3.6, 5.2, 2.0];
const GIB: u64 = 1 << 30;

fn rel(a: f64, b: f64) -> f64 {
    (a / b - 1.0).abs()
}

/// Exact synthetic rows (no noise, no OOM): 4 families of random features, all six supported.
fn exact_dataset() -> Dataset {
    let mut rng = synthetic::Lcg(11);
    let mut rows = Vec::new();
    for f in 0..4 {
        for i in 0..30 {
            let mut x = [0u64; N_FEATURES];
            for v in &mut x {
                *v = (1e8 + 4e9 * rng.unit()) as u64;
            }
            let m: f64 = (0..N_FEATURES).map(|k| TRUTH[k] * x[k] as f64).sum();
            rows.push(synthetic::row(
                &format!("fam{f}/r{i:03}"),
                &format!("fam{f}"),
                x,
                RunStatus::Completed,
                Some(m.round() as u64),
                64 * GIB,
            ));
        }
    }
    Dataset {
        factors: synthetic::factors_file([1.0; N_FEATURES]),
        rows,
        graphs: Default::default(),
    }
}

#[test]
fn recovers_known_factors() {
    let ds = exact_dataset();
    let cal = calibrate(&ds);
    let fp32 = &cal.fits[&Precision::Fp32];
    assert_eq!(fp32.shipped.source, "fit");
    for k in 0..N_FEATURES {
        assert!(
            rel(fp32.shipped.factors[k], TRUTH[k]) < 1e-6,
            "shipped {:?}",
            fp32.shipped.factors
        );
    }
    // Each held-out refit sees three exact families: it recovers the same factors.
    assert_eq!(fp32.held_out_architecture.len(), 4);
    for fr in fp32.held_out_architecture.values() {
        for k in 0..N_FEATURES {
            assert!(
                rel(fr.factors[k], TRUTH[k]) < 1e-6,
                "held out {:?}",
                fr.factors
            );
        }
    }
    assert_eq!(cal.totals.fitted, 120);
    assert!(cal.totals.balanced);
    let m = &cal.methods[&Method::PlanHeldOutArchitecture];
    assert!(m.median_abs_rel_error.unwrap() < 1e-6);
    assert_eq!(m.within_25pct, Some(1.0));
    // The quantiles of an exact fit are 1.
    assert!(rel(cal.fits[&Precision::Fp32].upper.q95.unwrap(), 1.0) < 1e-6);
}

#[test]
fn a_zero_factor_is_recovered_and_never_negative() {
    let mut ds = exact_dataset();
    let truth = [1.2, 0.0, 1.3, 3.6, 5.2, 2.0];
    for r in &mut ds.rows {
        let x = r.features.as_f64();
        let m: f64 = (0..N_FEATURES).map(|k| truth[k] * x[k]).sum();
        r.measured_bytes = Some(m.round() as u64);
    }
    let cal = calibrate(&ds);
    let a = cal.fits[&Precision::Fp32].shipped.factors;
    assert!(a.iter().all(|v| *v >= 0.0));
    assert!(a[1] < 1e-6, "{a:?}");
    assert!(rel(a[0], 1.2) < 1e-6, "{a:?}");
}

#[test]
fn an_oom_inequality_raises_the_fit() {
    let mut ds = exact_dataset();
    // Measured peaks 20% below the truth everywhere: the fit says 0.8 x truth.
    for r in &mut ds.rows {
        r.measured_bytes = r.measured_bytes.map(|m| (m as f64 * 0.8) as u64);
    }
    let before = calibrate(&ds);
    let a0 = before.fits[&Precision::Fp32].shipped.factors;
    // An out-of-memory run whose capacity the fit's prediction x 1.15 falls short of.
    let x = [2_000_000_000u64; N_FEATURES];
    let pred0: f64 = (0..N_FEATURES).map(|k| a0[k] * x[k] as f64).sum();
    let cap = (pred0 * 1.5) as u64;
    ds.rows.push(synthetic::row(
        "fam0/oom",
        "fam0",
        x,
        RunStatus::Oom,
        None,
        cap,
    ));
    let after = calibrate(&ds);
    let fit = &after.fits[&Precision::Fp32].shipped;
    let pred1: f64 = (0..N_FEATURES).map(|k| fit.factors[k] * x[k] as f64).sum();
    assert!(
        pred1 > pred0 * 1.01,
        "the OOM row must push the prediction up: {pred0} -> {pred1}"
    );
    assert!(
        pred1 * 1.15 <= cap as f64,
        "but not past the capacity (a penalty, not a wall)"
    );
    let o = fit.outcome.as_ref().unwrap();
    assert_eq!((o.oom_runs, o.oom_working_set, o.oom_short), (1, 1, 1));
    // A heavy penalty makes the inequality all but hard: prediction x 1.15 reaches the capacity.
    let mut heavy = ds.clone();
    heavy.factors.oom_penalty = 1e6;
    let hard = calibrate(&heavy);
    let a = hard.fits[&Precision::Fp32].shipped.factors;
    let pred2: f64 = (0..N_FEATURES).map(|k| a[k] * x[k] as f64).sum();
    assert!(
        pred2 > pred1 && pred2 * 1.15 > cap as f64 * 0.99,
        "{pred1} -> {pred2} vs {cap}"
    );
    // A satisfied OOM row changes nothing.
    ds.rows.pop();
    let small = (pred0 / 2.0) as u64;
    ds.rows.push(synthetic::row(
        "fam0/oom",
        "fam0",
        x,
        RunStatus::Oom,
        None,
        small,
    ));
    let same = calibrate(&ds);
    assert_eq!(same.fits[&Precision::Fp32].shipped.factors, a0);
    assert_eq!(
        same.fits[&Precision::Fp32]
            .shipped
            .outcome
            .as_ref()
            .unwrap()
            .oom_working_set,
        0
    );
}

#[test]
fn permuting_rows_changes_nothing() {
    let ds = synthetic::dataset(3000, 7, TRUTH, 0.15, 3);
    let a = calibrate(&ds);
    let mut shuffled = ds.clone();
    let mut rng = synthetic::Lcg(99);
    for i in (1..shuffled.rows.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        shuffled.rows.swap(i, j);
    }
    let b = calibrate(&shuffled);
    for (p, pf) in &a.fits {
        let qf = &b.fits[p];
        assert_eq!(
            pf.shipped.factors.map(f64::to_bits),
            qf.shipped.factors.map(f64::to_bits)
        );
        for (fam, fr) in &pf.held_out_architecture {
            assert_eq!(
                fr.factors.map(f64::to_bits),
                qf.held_out_architecture[fam].factors.map(f64::to_bits)
            );
        }
    }
    assert!(
        a.fits[&Precision::Fp32]
            .shipped
            .outcome
            .as_ref()
            .unwrap()
            .oom_runs
            > 0
    );
    assert_eq!(write_calibration_json(&a), write_calibration_json(&b));
}

#[test]
fn duplicates_around_the_middle_of_the_rows_are_found() {
    // The engine reads the rows in run-id order in two halves on two threads: a run of
    // duplicates across the middle must come out as if read in one pass.
    let ds = synthetic::dataset(301, 5, TRUTH, 0.1, 13);
    let clean = calibrate(&ds);
    let mut ids: Vec<(String, usize)> = ds
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.run_id.to_string(), i))
        .collect();
    ids.sort();
    let n = ds.rows.len() + 2;
    for rank in n / 2 - 3..n / 2 + 2 {
        let i = ids[rank].1;
        let mut dup = ds.clone();
        for k in [2, 3] {
            let mut r = ds.rows[i].clone();
            r.file = format!("{}~{k}", r.file).into();
            dup.rows.push(r);
        }
        let cal = calibrate(&dup);
        let id = ds.rows[i].run_id.as_str();
        let dups: Vec<_> = cal.exclusions.iter().filter(|e| e.run_id == id).collect();
        assert_eq!(dups.len(), 2, "rank {rank}");
        for e in dups {
            assert_eq!(e.reason, ExclusionReason::DuplicateRunId);
            assert_eq!(
                e.detail,
                format!("run id also in {}, which comes first", ds.rows[i].file)
            );
        }
        assert!(cal.totals.balanced);
        assert_eq!(cal.totals.excluded, clean.totals.excluded + 2);
        // Everything else is the clean data set's calibration.
        assert_eq!(cal.fitted_rows_sha256, clean.fitted_rows_sha256);
        assert_eq!(
            serde_json::to_string(&cal.rows).unwrap(),
            serde_json::to_string(&clean.rows).unwrap()
        );
        assert_eq!(
            serde_json::to_string(&cal.fits).unwrap(),
            serde_json::to_string(&clean.fits).unwrap()
        );
    }
    // The fitted rows' digest is rows_sha256 of the fitted rows.
    let fitted: Vec<(String, String)> = clean
        .rows
        .iter()
        .filter(|r| r.bucket == Bucket::Fitted)
        .map(|r| {
            let row = ds.rows.iter().find(|x| x.run_id == r.run_id).unwrap();
            (r.run_id.to_string(), row.file_sha256.hex())
        })
        .collect();
    let pairs: Vec<(&str, &str)> = fitted
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(clean.fitted_rows_sha256, rows_sha256(&pairs));
}

fn reason_of(cal: &engine::Calibration, run_id: &str) -> Option<ExclusionReason> {
    cal.exclusions
        .iter()
        .find(|e| e.run_id == run_id)
        .map(|e| e.reason)
}

fn bucket_of(cal: &engine::Calibration, run_id: &str) -> Option<Bucket> {
    cal.rows
        .iter()
        .find(|r| r.run_id == run_id)
        .map(|r| r.bucket)
}

#[test]
fn every_bucket_and_exclusion_reason() {
    let mut ds = exact_dataset();
    let x = [1_000_000_000u64; N_FEATURES];
    let mk = |id: &str| {
        synthetic::row(
            id,
            "fam0",
            x,
            RunStatus::Completed,
            Some(14_000_000_000),
            64 * GIB,
        )
    };
    // Duplicate run id: the later file by path order is excluded, whatever the Vec order.
    let mut d1 = mk("dup");
    d1.file = "runs/b/dup.json".into();
    let mut d0 = mk("dup");
    d0.file = "runs/a/dup.json".into();
    ds.rows.push(d1);
    ds.rows.push(d0);
    let mut r = mk("err");
    r.status = RunStatus::Error;
    r.measured_bytes = None;
    ds.rows.push(r);
    let mut r = mk("changed");
    r.graph_changed = true;
    ds.rows.push(r);
    let mut r = mk("mismatch");
    r.graph_mismatch = true;
    ds.rows.push(r);
    let mut r = mk("nobatch");
    r.has_batch_axis = false;
    ds.rows.push(r);
    let mut r = mk("regime");
    r.regime = "cuda-free".into();
    ds.rows.push(r);
    let mut r = mk("bf16");
    r.precision = Precision::Bf16Autocast;
    ds.rows.push(r);
    let mut r = mk("early");
    r.after_fit = true;
    r.timestamp = "2026-01-01T00:00:00Z".into(); // equal to fixed_at: not later
    ds.rows.push(r);
    let mut r = mk("late");
    r.after_fit = true;
    r.timestamp = "2026-01-01T00:00:01Z".into();
    ds.rows.push(r);
    let mut r = mk("edge");
    r.regime = "cpu-edge".into();
    ds.rows.push(r);
    ds.factors.profiles.remove("bf16-autocast");

    let cal = calibrate(&ds);
    let dup = cal.exclusions.iter().find(|e| e.run_id == "dup").unwrap();
    assert_eq!(dup.file, "runs/b/dup.json");
    assert_eq!(dup.reason, ExclusionReason::DuplicateRunId);
    assert_eq!(
        cal.rows.iter().find(|r| r.run_id == "dup").unwrap().file,
        "runs/a/dup.json"
    );
    assert_eq!(reason_of(&cal, "err"), Some(ExclusionReason::StatusError));
    assert_eq!(
        reason_of(&cal, "changed"),
        Some(ExclusionReason::GraphChanged)
    );
    assert_eq!(
        reason_of(&cal, "mismatch"),
        Some(ExclusionReason::GraphMismatch)
    );
    assert_eq!(
        reason_of(&cal, "nobatch"),
        Some(ExclusionReason::NoBatchAxis)
    );
    assert_eq!(
        reason_of(&cal, "regime"),
        Some(ExclusionReason::UnknownRegime)
    );
    assert_eq!(
        reason_of(&cal, "bf16"),
        Some(ExclusionReason::NoFactorsForPrecision)
    );
    assert_eq!(
        reason_of(&cal, "early"),
        Some(ExclusionReason::AfterFitNotLater)
    );
    assert_eq!(bucket_of(&cal, "late"), Some(Bucket::AfterFit));
    assert_eq!(bucket_of(&cal, "edge"), Some(Bucket::HeldOutRegime));
    // A profile's own fixing time decides its after-the-fit rows: fixed earlier than the file's
    // last fit, "early" is after it.
    let mut ds2 = ds.clone();
    ds2.factors.profiles.get_mut("fp32").unwrap().fixed_at = Some("2025-12-31T00:00:00Z".into());
    let cal2 = calibrate(&ds2);
    assert_eq!(bucket_of(&cal2, "early"), Some(Bucket::AfterFit));
    ds2.factors.profiles.get_mut("fp32").unwrap().fixed_at = Some("2026-06-01T00:00:00Z".into());
    let cal2 = calibrate(&ds2);
    assert_eq!(
        reason_of(&cal2, "late"),
        Some(ExclusionReason::AfterFitNotLater)
    );
    assert_eq!(bucket_of(&cal, "dup"), Some(Bucket::Fitted));
    let t = &cal.totals;
    assert_eq!(
        (
            t.inputs,
            t.fitted,
            t.held_out_regime,
            t.after_fit,
            t.excluded
        ),
        (131, 121, 1, 1, 8)
    );
    assert!(t.balanced);
    // Held-out-by-regime and after-fit rows are never in a fit.
    let o = cal.fits[&Precision::Fp32].shipped.outcome.as_ref().unwrap();
    assert_eq!(o.completed_runs, 121);
    // The methods predict their own buckets only.
    let late = cal.rows.iter().find(|r| r.run_id == "late").unwrap();
    assert!(late.predictions.contains_key(&Method::PlanAfterFit));
    assert!(!late.predictions.contains_key(&Method::PlanRefitInSample));
    let edge = cal.rows.iter().find(|r| r.run_id == "edge").unwrap();
    assert!(edge.predictions.contains_key(&Method::PlanHeldOutRegime));
    // After-fit rows are predicted by the factors in the file (all ones here).
    assert_eq!(late.predictions[&Method::PlanAfterFit], 6e9);

    // Without provenance, an after-fit row has nothing to be after.
    ds.factors.provenance = None;
    let cal = calibrate(&ds);
    assert_eq!(
        reason_of(&cal, "late"),
        Some(ExclusionReason::AfterFitUnfixed)
    );
    assert!(cal.totals.balanced);
}

#[test]
fn nearest_rank_matches_a_hand_computed_example() {
    // Twenty ratios 1.01 .. 1.20: q90 = sorted[ceil(0.9 * 20) - 1] = sorted[17] = 1.18;
    // q95 = sorted[ceil(0.95 * 20) - 1] = sorted[18] = 1.19.
    let v: Vec<f64> = (1..=20).map(|i| 1.0 + i as f64 / 100.0).collect();
    assert_eq!(nearest_rank(&v, 90), Some(1.18));
    assert_eq!(nearest_rank(&v, 95), Some(1.19));
    // Seven values: ceil(6.3) = 7 and ceil(6.65) = 7: both the maximum.
    let w = [0.9, 0.95, 1.0, 1.02, 1.1, 1.3, 1.6];
    assert_eq!(nearest_rank(&w, 90), Some(1.6));
    assert_eq!(nearest_rank(&w, 95), Some(1.6));
    assert_eq!(nearest_rank(&w, 50), Some(1.02));
}

#[test]
fn oom_truth_is_never_for_a_larger_card() {
    // Ran out at 4 GiB: does not fit 2 GiB nor 4 GiB, unknown for 8 and 16 GiB.
    assert_eq!(
        truth(RunStatus::Oom, None, 4 * GIB, 2 * GIB),
        Truth::DoesNotFit
    );
    assert_eq!(
        truth(RunStatus::Oom, None, 4 * GIB, 4 * GIB),
        Truth::DoesNotFit
    );
    assert_eq!(
        truth(RunStatus::Oom, None, 4 * GIB, 8 * GIB),
        Truth::Unknown
    );
    assert_eq!(
        truth(RunStatus::Oom, None, 4 * GIB, 16 * GIB),
        Truth::Unknown
    );
    assert_eq!(
        truth(RunStatus::Completed, Some(4 * GIB), 64 * GIB, 4 * GIB),
        Truth::Fits
    );
    assert_eq!(
        truth(RunStatus::Completed, Some(4 * GIB + 1), 64 * GIB, 4 * GIB),
        Truth::DoesNotFit
    );

    // Through the engine: an OOM row at 4 GiB contributes two did-not-fit checks, no more.
    let mut ds = exact_dataset();
    ds.rows.retain(|r| r.family == "fam0");
    let mut r = synthetic::row("o", "fam0", [1; N_FEATURES], RunStatus::Oom, None, 4 * GIB);
    r.regime = "cpu-edge".into();
    ds.rows.push(r);
    let cal = calibrate(&ds);
    let row = cal.rows.iter().find(|r| r.run_id == "o").unwrap();
    let truths: Vec<Truth> = row.checks.iter().map(|c| c.truth).collect();
    assert_eq!(
        truths,
        [
            Truth::DoesNotFit,
            Truth::DoesNotFit,
            Truth::Unknown,
            Truth::Unknown
        ]
    );
    let acc = &cal.methods[&Method::Accelerate];
    assert_eq!(acc.missed_oom.iter().filter(|c| c.run_id == "o").count(), 2);
    // A prediction of 1 byte "fits" everything: both checks are missed OOMs for the regime method.
    let m = &cal.methods[&Method::PlanHeldOutRegime];
    assert_eq!((m.did_not_fit_checks, m.missed_oom.len()), (2, 2));
    assert!(cal
        .known_misses
        .iter()
        .any(|k| k.family == "fam0" && k.method == Method::PlanHeldOutRegime));
}

#[test]
fn refit_factors_file_and_outputs() {
    let ds = exact_dataset();
    let cal = calibrate(&ds);
    let f = refit_factors_file(&ds, &cal, "2026-11-29T18:00:00Z");
    let p = f.provenance.as_ref().unwrap();
    assert_eq!(p.fixed_at, "2026-11-29T18:00:00Z");
    assert_eq!(p.rows, 120);
    assert_eq!(p.tool_version, env!("CARGO_PKG_VERSION"));
    // rows_sha256: SHA-256 of "run_id\tfile_sha256\n" lines sorted by run id.
    let mut lines: Vec<String> = ds
        .rows
        .iter()
        .map(|r| format!("{}\t{}\n", r.run_id, r.file_sha256))
        .collect();
    lines.sort();
    assert_eq!(p.rows_sha256, sha256_hex(lines.concat().as_bytes()));
    let hex: Vec<String> = ds.rows.iter().map(|r| r.file_sha256.hex()).collect();
    let pairs: Vec<(&str, &str)> = ds
        .rows
        .iter()
        .zip(&hex)
        .map(|(r, h)| (r.run_id.as_str(), h.as_str()))
        .collect();
    assert_eq!(p.rows_sha256, rows_sha256(&pairs));
    for k in 0..N_FEATURES {
        assert!(rel(f.profiles["fp32"].factors[k], TRUTH[k]) < 1e-6);
    }
    // bf16 has no fitted rows: its factors stay.
    assert_eq!(f.profiles["bf16-autocast"].factors, [1.0; N_FEATURES]);
    // The fitted profile gets its own multipliers and fixing time; the file's `upper` (for
    // profiles without their own) and the unfitted bf16 profile stay as they were.
    let fp32 = &f.profiles["fp32"];
    assert_eq!(
        fp32.upper.as_ref().unwrap().q95,
        cal.fits[&Precision::Fp32].upper.q95.unwrap()
    );
    assert_eq!(fp32.fixed_at.as_deref(), Some("2026-11-29T18:00:00Z"));
    assert_eq!(f.upper, ds.factors.upper);
    assert_eq!(f.profiles["bf16-autocast"].upper, None);
    // It is a valid factors file; a calibration against it knows its rows.
    let back = FactorsFile::parse(&f.to_json(), Path::new("factors.json")).unwrap();
    assert_eq!(back, f);
    let again = calibrate(&Dataset {
        factors: back,
        ..ds.clone()
    });
    assert!(again.factors_file_rows_match);
    // Refitting the same rows again changes nothing of fp32: it keeps the time it was fixed,
    // while the file's provenance records the new fit.
    let ds2 = Dataset {
        factors: f.clone(),
        ..ds.clone()
    };
    let f2 = refit_factors_file(&ds2, &again, "2026-11-30T00:00:00Z");
    assert_eq!(
        f2.profiles["fp32"].fixed_at.as_deref(),
        Some("2026-11-29T18:00:00Z")
    );
    assert_eq!(f2.provenance.unwrap().fixed_at, "2026-11-30T00:00:00Z");
    // A profile whose multipliers the rows no longer give is fixed anew.
    let mut moved = f.clone();
    moved.profiles.get_mut("fp32").unwrap().upper =
        Some(memcal::factors::Upper { q90: 2.0, q95: 3.0 });
    let ds3 = Dataset {
        factors: moved,
        ..ds.clone()
    };
    let f3 = refit_factors_file(&ds3, &calibrate(&ds3), "2026-11-30T00:00:00Z");
    assert_eq!(
        f3.profiles["fp32"].fixed_at.as_deref(),
        Some("2026-11-30T00:00:00Z")
    );
    let s = summary_table(&cal);
    assert!(s.contains("rows: 120 in = 120 fitted"), "{s}");
    assert!(s.contains("plan-held-out-architecture"));
    let j: Value = serde_json::from_str(&write_calibration_json(&cal)).unwrap();
    assert_eq!(j["totals"]["fitted"], 120);
    assert!(j["rows"][0]["predictions"]["plan-refit-in-sample"].is_number());
}

// --- Loading from files -------------------------------------------------------------------

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine")
}

/// A data folder with the fixture factors and graphs, and no runs yet.
fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(data.join("graphs")).unwrap();
    std::fs::create_dir_all(data.join("runs")).unwrap();
    std::fs::copy(fixtures().join("factors.json"), data.join("factors.json")).unwrap();
    for e in std::fs::read_dir(fixtures().join("graphs")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, data.join("graphs").join(p.file_name().unwrap())).unwrap();
    }
    (tmp, data)
}

fn graph_sha(name: &str) -> String {
    sha256_hex(&std::fs::read(fixtures().join(format!("graphs/{name}.json"))).unwrap())
}

/// The fixture graph's parameter count (what the harness records in `parameters.graph`).
fn graph_parameters(name: &str) -> u64 {
    memcal::graph::Graph::load(&fixtures().join(format!("graphs/{name}.json")))
        .unwrap()
        .parameters()
}

fn row_json(graph: &str, batch: u64, regime: &str, peak: Option<u64>) -> Value {
    let mut v = json!({
        "format": "memcal-run/1",
        "run_id": format!("{regime}/{graph}/b{batch}"),
        "graph": {"name": graph, "sha256": graph_sha(graph)},
        "batch": batch,
        "precision": "fp32",
        "regime": regime,
        "device": {
            "kind": "cpu", "name": "test cpu", "capacity_bytes": 25_000_000_000u64,
            "allocator": "cpu-counting-allocator", "reserved_equals_allocated": true,
            "torch": "2.11.0", "cores": 2
        },
        "host": "test",
        "timestamp": "2026-11-29T17:00:00Z",
        "tool_version": "memcal-measure 0.1.0",
        "parameters": {"graph": graph_parameters(graph), "built": graph_parameters(graph)},
        "graph_mismatch": false,
        "status": "completed",
        "phases": []
    });
    match peak {
        Some(p) => {
            v["peak"] =
                json!({"allocated_bytes": p, "reserved_bytes": p, "phase": "step2.backward"});
            v["phases"] = json!([{
                "name": "step2.backward", "status": "ok",
                "allocated_start": 0, "reserved_start": 0,
                "allocated_peak": p, "reserved_peak": p, "wall_seconds": 0.1
            }]);
        }
        None => {
            v["status"] = json!("oom");
            v["oom"] = json!({"phase": "step1.backward", "message": "out of memory"});
            v["device"]["emulated_capacity_bytes"] = json!(2_000_000);
        }
    }
    v
}

fn write(data: &Path, rel: &str, v: &Value) -> PathBuf {
    let p = data.join("runs").join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, serde_json::to_string_pretty(v).unwrap()).unwrap();
    p
}

#[test]
fn load_joins_rows_to_graphs() {
    let (_tmp, data) = data_dir();
    for (g, b) in [("tiny-mlp", 64), ("tiny-gpt", 8), ("tiny-lstm", 16)] {
        write(
            &data,
            &format!("cpu-free/{g}/b{b}.json"),
            &row_json(g, b, "cpu-free", Some(3_000_000)),
        );
    }
    write(
        &data,
        "cpu-edge/tiny-mlp/b512.json",
        &row_json("tiny-mlp", 512, "cpu-edge", None),
    );
    let mut changed = row_json("tiny-gpt", 4, "cpu-free", Some(2_000_000));
    changed["graph"]["sha256"] = json!("0".repeat(64));
    write(&data, "cpu-free/tiny-gpt/b4.json", &changed);
    write(
        &data,
        "cpu-free/fixed/b4.json",
        &row_json("fixed-batch", 4, "cpu-free", Some(1_000_000)),
    );

    let ds = engine::load(&data).unwrap();
    let files: Vec<&str> = ds.rows.iter().map(|r| r.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "runs/cpu-edge/tiny-mlp/b512.json",
            "runs/cpu-free/fixed/b4.json",
            "runs/cpu-free/tiny-gpt/b4.json",
            "runs/cpu-free/tiny-gpt/b8.json",
            "runs/cpu-free/tiny-lstm/b16.json",
            "runs/cpu-free/tiny-mlp/b64.json",
        ]
    );
    let gpt = ds
        .rows
        .iter()
        .find(|r| r.run_id == "cpu-free/tiny-gpt/b8")
        .unwrap();
    assert_eq!(gpt.family, "gpt");
    assert!(gpt.features.attention_scores > 0 && !gpt.graph_changed);
    assert!(gpt.textbook_bytes.is_some());
    let lstm = ds.rows.iter().find(|r| r.graph == "tiny-lstm").unwrap();
    assert!(lstm.features.recurrent_gates > 0);
    assert_eq!(lstm.textbook_bytes, None);
    let oom = ds.rows.iter().find(|r| r.regime == "cpu-edge").unwrap();
    assert_eq!(
        (oom.status, oom.capacity_bytes),
        (RunStatus::Oom, 2_000_000)
    );

    let cal = calibrate(&ds);
    assert_eq!(
        reason_of(&cal, "cpu-free/tiny-gpt/b4"),
        Some(ExclusionReason::GraphChanged)
    );
    assert_eq!(
        reason_of(&cal, "cpu-free/fixed-batch/b4"),
        Some(ExclusionReason::NoBatchAxis)
    );
    assert_eq!(
        bucket_of(&cal, "cpu-edge/tiny-mlp/b512"),
        Some(Bucket::HeldOutRegime)
    );
    let t = &cal.totals;
    assert_eq!(
        (t.inputs, t.fitted, t.held_out_regime, t.excluded),
        (6, 3, 1, 2)
    );
    assert!(cal.fits[&Precision::Fp32].held_out_architecture.len() == 3);
    assert!(cal.textbook_not_applicable.contains_key("tiny-lstm"));
    assert!(!cal.textbook_not_applicable.contains_key("tiny-gpt"));
}

fn expect_field(err: Error, file: &Path, field: &str) {
    match err {
        Error::Field {
            path,
            field: f,
            message,
        } => {
            assert_eq!(path, file, "{message}");
            assert_eq!(f, field, "{message}");
        }
        other => panic!("expected a field error on `{field}`, got {other}"),
    }
}

#[test]
fn malformed_rows_name_the_file_and_the_field() {
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("batch", Box::new(|v| v["batch"] = json!("four"))),
        (
            "peak.allocated_bytes",
            Box::new(|v| v["peak"]["allocated_bytes"] = json!(-5)),
        ),
        (
            "run_id",
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("run_id");
            }),
        ),
        ("format", Box::new(|v| v["format"] = json!("memcal-run/0"))),
        ("precision", Box::new(|v| v["precision"] = json!("fp8"))),
        (
            "timestamp",
            Box::new(|v| v["timestamp"] = json!("yesterday")),
        ),
        ("marker", Box::new(|v| v["marker"] = json!("later"))),
        (
            "peak",
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("peak");
            }),
        ),
        (
            "peak",
            Box::new(|v| {
                v["status"] = json!("oom");
                v["oom"] = json!({"phase": "step1.forward", "message": "oom"});
            }),
        ),
        (
            "graph.sha256",
            Box::new(|v| v["graph"]["sha256"] = json!("abc")),
        ),
        (
            "device.kind",
            Box::new(|v| {
                v["device"].as_object_mut().unwrap().remove("kind");
            }),
        ),
    ];
    for (field, edit) in cases {
        let (_tmp, data) = data_dir();
        write(
            &data,
            "cpu-free/a.json",
            &row_json("tiny-mlp", 8, "cpu-free", Some(1_000_000)),
        );
        let mut v = row_json("tiny-mlp", 16, "cpu-free", Some(1_000_000));
        edit(&mut v);
        let bad = write(&data, "cpu-free/b.json", &v);
        let err = engine::load(&data).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        expect_field(err, &bad, field);
    }
    // Not JSON at all: a parse error naming the file.
    let (_tmp, data) = data_dir();
    let p = data.join("runs/x.json");
    std::fs::write(&p, "{ not json").unwrap();
    let err = engine::load(&data).unwrap_err();
    assert!(err.to_string().contains("x.json"), "{err}");
}

#[test]
fn a_row_naming_a_missing_graph_is_an_input_error() {
    let (_tmp, data) = data_dir();
    let mut v = row_json("tiny-mlp", 8, "cpu-free", Some(1_000_000));
    v["graph"]["name"] = json!("no-such-graph");
    let p = write(&data, "cpu-free/ghost.json", &v);
    let err = engine::load(&data).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("no-such-graph"));
    expect_field(err, &p, "graph.name");
}

#[test]
fn an_empty_data_folder_loads_and_calibrates() {
    let (_tmp, data) = data_dir();
    let ds = engine::load(&data).unwrap();
    assert!(ds.rows.is_empty());
    let cal = calibrate(&ds);
    assert_eq!(cal.totals.inputs, 0);
    assert!(cal.totals.balanced);
    assert_eq!(cal.fits[&Precision::Fp32].shipped.source, "kept");
    assert!(summary_table(&cal).contains("rows: 0 in"));
}

#[test]
fn the_synthetic_data_folder_loads_with_the_synthetic_mix() {
    let dir = tempfile::tempdir().unwrap();
    let truth = [1.2, 0.9, 1.3, 3.6, 5.2, 2.0];
    let bytes = synthetic::write_data_folder(dir.path(), 2_500, 20, truth, 7).unwrap();
    assert!(bytes > 0);
    let ds = engine::load(dir.path()).unwrap();
    assert_eq!(ds.rows.len(), 2_500);
    assert_eq!(ds.graphs.len(), 20);
    // Path order is row order; every row joins its graph, unchanged.
    assert!(ds.rows.windows(2).all(|w| w[0].file < w[1].file));
    assert!(ds.rows.iter().all(|r| !r.graph_changed));
    let count = |p: &dyn Fn(&engine::Row) -> bool| ds.rows.iter().filter(|r| p(r)).count();
    let free = count(&|r| r.regime.as_str() == "cpu-free" && !r.after_fit);
    let edge = count(&|r| r.regime.as_str() == "cpu-edge");
    let after = count(&|r| r.after_fit);
    let oom = count(&|r| r.status == RunStatus::Oom);
    assert!(
        free > 2_000 && edge > 150 && after > 20 && oom > 50,
        "{free} {edge} {after} {oom}"
    );
    // Features differ between graphs.
    let distinct: std::collections::BTreeSet<_> =
        ds.rows.iter().map(|r| r.features.as_array()).collect();
    assert!(distinct.len() > 100);
    // The same seed writes the same bytes.
    let again = tempfile::tempdir().unwrap();
    synthetic::write_data_folder(again.path(), 2_500, 20, truth, 7).unwrap();
    let a = std::fs::read(dir.path().join("runs/0001/r0001234.json")).unwrap();
    let b = std::fs::read(again.path().join("runs/0001/r0001234.json")).unwrap();
    assert_eq!(a, b);
    let cal = calibrate(&ds);
    assert!(!cal.rows.is_empty());
}

#[test]
fn the_first_bad_row_in_path_order_is_reported_whichever_thread_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let truth = [1.2, 0.9, 1.3, 3.6, 5.2, 2.0];
    synthetic::write_data_folder(dir.path(), 4_000, 10, truth, 3).unwrap();
    let late = dir.path().join("runs/0003/r0003500.json");
    let early = dir.path().join("runs/0000/r0000010.json");
    let text = std::fs::read_to_string(&late).unwrap();
    std::fs::write(&late, text.replace("\"batch\"", "\"bach\"")).unwrap();
    let e = engine::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("r0003500.json"), "{e}");
    let text = std::fs::read_to_string(&early).unwrap();
    std::fs::write(&early, text.replace("memcal-run/1", "memcal-run/2")).unwrap();
    let e = engine::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("r0000010.json") && e.contains("format"), "{e}");
}

#[test]
fn known_misses_are_found_per_precision_profile() {
    // fam0 and fam1 also have exact bf16 rows; fam0's fp32 rows measure twice the truth, so
    // fp32 misses on fam0 however good its bf16 rows are.
    let mut ds = exact_dataset();
    let mut extra = Vec::new();
    for r in ds.rows.iter_mut() {
        if r.family.as_str() == "fam0" {
            r.measured_bytes = r.measured_bytes.map(|m| m * 2);
        }
    }
    for r in &ds.rows {
        if matches!(r.family.as_str(), "fam0" | "fam1") {
            let mut b = r.clone();
            b.run_id = format!("{}-bf16", r.run_id).as_str().into();
            b.precision = Precision::Bf16Autocast;
            let m: f64 = (0..N_FEATURES)
                .map(|k| TRUTH[k] * b.features.as_f64()[k])
                .sum();
            b.measured_bytes = Some(m.round() as u64);
            extra.push(b);
        }
    }
    ds.rows.extend(extra);
    ds.rows.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    let cal = calibrate(&ds);
    let fam0 = &cal.families["fam0"];
    assert_eq!(fam0.by_profile.len(), 2);
    let rows = |ms: &std::collections::BTreeMap<Method, memcal::engine::MethodMetrics>| {
        ms[&Method::PlanRefitInSample].rows + ms[&Method::PlanHeldOutArchitecture].rows
    };
    assert_eq!(
        rows(&fam0.methods),
        fam0.by_profile.values().map(rows).sum::<u64>()
    );
    let misses: Vec<_> = cal
        .known_misses
        .iter()
        .filter(|k| k.family == "fam0" && k.method == Method::PlanHeldOutArchitecture)
        .collect();
    assert_eq!(misses.len(), 1, "{misses:?}");
    assert_eq!(misses[0].precision, Precision::Fp32);
    assert!(misses[0].text.starts_with("fp32: "), "{}", misses[0].text);
    // The per-profile method table agrees with the family split: bf16 is exact.
    let bf16 = &cal.fits[&Precision::Bf16Autocast].methods[&Method::PlanRefitInSample];
    assert!(bf16.median_abs_rel_error.unwrap() < 1e-6);
}

/// The six features of a row result as `Features`.
fn features_of(x: [u64; N_FEATURES]) -> memcal::features::Features {
    memcal::features::Features {
        model_state: x[0],
        layer_outputs: x[1],
        intermediates: x[2],
        attention_scores: x[3],
        recurrent_gates: x[4],
        largest_tensor: x[5],
    }
}

/// The exact data set plus a family `odd` whose peaks follow other factors, with an
/// out-of-memory row: a family that would pull any fit it leaks into.
fn dataset_with_an_odd_family() -> Dataset {
    let mut ds = exact_dataset();
    let odd = [2.5, 0.2, 3.0, 0.5, 1.0, 6.0];
    let mut rng = synthetic::Lcg(5);
    for i in 0..12 {
        let mut x = [0u64; N_FEATURES];
        for v in &mut x {
            *v = (1e8 + 4e9 * rng.unit()) as u64;
        }
        let m: f64 = (0..N_FEATURES).map(|k| odd[k] * x[k] as f64).sum();
        ds.rows.push(synthetic::row(
            &format!("odd/r{i:03}"),
            "odd",
            x,
            RunStatus::Completed,
            Some(m.round() as u64),
            64 * GIB,
        ));
    }
    // Out of memory at a capacity the other families' factors would call ample.
    let x = [1_000_000_000u64; N_FEATURES];
    ds.rows.push(synthetic::row(
        "odd/oom",
        "odd",
        x,
        RunStatus::Oom,
        None,
        20 * GIB,
    ));
    ds
}

#[test]
fn a_held_out_family_never_leaks_into_its_own_refit() {
    let ds = dataset_with_an_odd_family();
    let cal = calibrate(&ds);
    let held = cal.fits[&Precision::Fp32].held_out_architecture["odd"].factors;
    // The same data without the odd family: its refit is what "held out" must mean.
    let mut without = ds.clone();
    without.rows.retain(|r| r.family != "odd");
    let alone = calibrate(&without).fits[&Precision::Fp32].shipped.factors;
    assert_eq!(
        held.map(f64::to_bits),
        alone.map(f64::to_bits),
        "held out {held:?} vs fitted without the family {alone:?}"
    );
    // Every odd row's held-out prediction is that fit's, to the bit.
    for r in cal.rows.iter().filter(|r| r.family == "odd") {
        let Some(p) = r.predictions.get(&Method::PlanHeldOutArchitecture) else {
            panic!("{} has no held-out prediction", r.run_id);
        };
        let f = features_of(r.features);
        assert_eq!(p.to_bits(), memcal::plan::estimate(&alone, &f).to_bits());
    }
    // And the family really is different: the shipped fit, which includes it, moves.
    let shipped = cal.fits[&Precision::Fp32].shipped.factors;
    assert_ne!(shipped.map(f64::to_bits), alone.map(f64::to_bits));
}

#[test]
fn the_bound_on_a_fitted_row_comes_from_the_other_families_only() {
    let ds = dataset_with_an_odd_family();
    let cal = calibrate(&ds);
    let up = &cal.fits[&Precision::Fp32].upper;
    let lfo = &up.leave_family_out["odd"];
    // The quantiles of the other families' ratios, recomputed here from the listed ratios.
    let mut others: Vec<f64> = up
        .ratios
        .iter()
        .filter(|(id, _)| !id.starts_with("odd/"))
        .map(|(_, r)| *r)
        .collect();
    others.sort_by(f64::total_cmp);
    assert_eq!(lfo.ratios, others.len() as u64);
    assert_eq!(Some(lfo.q95), nearest_rank(&others, 95));
    assert_eq!(Some(lfo.q90), nearest_rank(&others, 90));
    // The odd rows' bound uses those multipliers, not the pooled ones.
    for r in cal
        .rows
        .iter()
        .filter(|r| r.family == "odd" && r.run_id != "odd/oom")
    {
        let e = r.predictions[&Method::PlanHeldOutArchitecture];
        let want = memcal::plan::bound(e, lfo.q95, ds.factors.bound_floor_bytes);
        assert_eq!(r.bound_q95_bytes.map(f64::to_bits), Some(want.to_bits()));
    }
    // The pooled q95 includes the odd family's ratios, so it differs.
    assert_ne!(up.q95, Some(lfo.q95));
}

#[test]
fn a_row_whose_device_is_not_its_regimes_is_excluded() {
    let mut ds = exact_dataset();
    ds.factors.regimes.insert(
        "cuda-free".into(),
        memcal::factors::Regime {
            device: "cuda".into(),
            description: "test".into(),
            cards: vec![memcal::factors::Card {
                name: "80 GB".into(),
                bytes: 80_000_000_000,
            }],
        },
    );
    ds.factors.training_regimes.push("cuda-free".into());
    // A CPU row labelled with the CUDA regime.
    ds.rows[0].regime = "cuda-free".into();
    let id = ds.rows[0].run_id.to_string();
    let cal = calibrate(&ds);
    assert_eq!(
        reason_of(&cal, &id),
        Some(ExclusionReason::DeviceRegimeMismatch)
    );
    let e = cal.exclusions.iter().find(|e| e.run_id == id).unwrap();
    assert!(
        e.detail.contains("`cpu`") && e.detail.contains("`cuda`"),
        "{}",
        e.detail
    );
    assert!(cal.rows.iter().all(|r| r.run_id.as_str() != id));
    assert!(cal.totals.balanced);
}

#[test]
fn plan_as_shipped_predicts_every_usable_row_with_the_files_factors() {
    let mut ds = exact_dataset();
    ds.factors.profiles.get_mut("fp32").unwrap().factors = [0.5; N_FEATURES];
    let cal = calibrate(&ds);
    for r in &cal.rows {
        let f = features_of(r.features);
        let want = memcal::plan::estimate(&[0.5; N_FEATURES], &f);
        assert_eq!(
            r.predictions[&Method::PlanAsShipped].to_bits(),
            want.to_bits()
        );
    }
    assert_eq!(
        cal.methods[&Method::PlanAsShipped].rows,
        cal.rows.len() as u64
    );
    // The refit does not read the file's factors: it is exact on these rows.
    assert!(
        cal.methods[&Method::PlanRefitInSample]
            .median_abs_rel_error
            .unwrap()
            < 1e-6
    );
    assert!(
        cal.methods[&Method::PlanAsShipped]
            .median_abs_rel_error
            .unwrap()
            > 0.1
    );
}
