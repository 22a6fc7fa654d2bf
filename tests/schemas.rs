//! Every JSON output of memcal names its `format` and is valid against its schema in
//! `docs/schemas/` (issue 41): `plan` in every mode, `fit --json` (calibration.json) and
//! `fit --strategies --json`. `memcal diff --json` and `memcal audit --json` are checked in
//! `tests/review.rs`, on the fixture repositories made there.

mod common;

use common::{assert_schema, schema_errors};
use std::process::Command;

fn json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_memcal"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn every_schema_names_the_format_its_output_carries() {
    for (name, format) in [
        ("plan", memcal::plan::PLAN_FORMAT),
        ("plan-timeline", memcal::plan::PLAN_TIMELINE_FORMAT),
        (
            "strategy-plan",
            memcal::plan::strategies::STRATEGY_PLAN_FORMAT,
        ),
        ("calibration", memcal::engine::CALIBRATION_FORMAT),
        (
            "strategy-evidence",
            memcal::strategy::evidence::STRATEGY_EVIDENCE_FORMAT,
        ),
        ("audit", memcal::review::AUDIT_FORMAT),
        ("diff", memcal::review::DIFF_FORMAT),
    ] {
        let path = format!(
            "{}/docs/schemas/{name}.schema.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let schema: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(schema["$id"], format, "{path}");
        assert_eq!(schema["properties"]["format"]["const"], format, "{path}");
    }
}

#[test]
fn plan_in_every_mode_matches_its_schema() {
    let small = ["plan", "data/graphs/gpt-r1.json", "--batch", "8"];
    assert_schema("plan", &json(&[&small[..], &["--json"]].concat()));
    assert_schema(
        "plan",
        &json(&[&small[..], &["--max-batch", "--json"]].concat()),
    );
    assert_schema(
        "strategy-plan",
        &json(
            &[
                &small[..],
                &["--strategy", "checkpoint+zero3:world=8", "--json"],
            ]
            .concat(),
        ),
    );
    // A 7B model fits no card plainly (smallest_card null), and its --recommend has cards
    // where nothing fits and borderline options.
    let large = ["plan", "data/graphs/llama-full.json", "--batch", "4"];
    let v = json(&[&large[..], &["--json"]].concat());
    assert!(v["smallest_card"].is_null(), "{}", v["smallest_card"]);
    assert_schema("plan", &v);
    for args in [&small, &large] {
        assert_schema(
            "strategy-plan",
            &json(&[&args[..], &["--recommend", "--json"]].concat()),
        );
    }
    assert_schema(
        "strategy-plan",
        &json(&[&small[..], &["--inference", "--context", "512", "--json"]].concat()),
    );
    let t = json(&[&small[..], &["--timeline", "--json"]].concat());
    assert_schema("plan-timeline", &t);
    assert_schema("plan", &t["plan"]);
}

#[test]
fn the_schemas_refuse_what_they_do_not_describe() {
    // A test that cannot fail proves nothing: a plan with the wrong format, a verdict memcal
    // never gives, and a card without its bytes are each refused.
    let v = json(&["plan", "data/graphs/gpt-r1.json", "--batch", "8", "--json"]);
    let mut wrong = v.clone();
    wrong["format"] = "memcal-plan/2".into();
    assert!(!schema_errors("plan", &wrong).is_empty());
    let mut wrong = v.clone();
    wrong["cards"][0]["verdict"] = "maybe".into();
    assert!(!schema_errors("plan", &wrong).is_empty());
    let mut wrong = v;
    wrong["smallest_card"] = serde_json::json!({"name": "A10G 24 GB"});
    assert!(!schema_errors("plan", &wrong).is_empty());
}

#[test]
fn fit_outputs_match_their_schemas() {
    let out = tempfile::tempdir().unwrap();
    let cal = out.path().join("calibration.json");
    let v = json(&["fit", "--json", "--out", cal.to_str().unwrap()]);
    assert_schema("calibration", &v);
    // The file says the same as stdout.
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cal).unwrap()).unwrap();
    assert_eq!(file, v);
    assert_schema(
        "strategy-evidence",
        &json(&["fit", "--strategies", "--json"]),
    );
}
