//! `memcal diff` and `memcal audit` on a fixture repository made by the test: one commit with
//! rows and seed factors, one with honestly fitted factors, one that changes a row's peak and
//! hand-edits a factor.

use memcal::features::{features, Precision};
use memcal::graph::Graph;
use memcal::run::*;
use std::path::Path;
use std::process::Command;

fn sh(repo: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

fn memcal(repo: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_memcal"))
        .current_dir(repo)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn row(graph: &Graph, batch: u64, peak: u64) -> RunRow {
    RunRow {
        format: RUN_FORMAT.into(),
        run_id: format!("cpu-free/{}/b{batch}", graph.name),
        graph: GraphRef {
            name: graph.name.clone(),
            sha256: graph.sha256.clone(),
        },
        batch,
        precision: "fp32".into(),
        regime: "cpu-free".into(),
        marker: None,
        device: DeviceInfo {
            kind: "cpu".into(),
            name: "test".into(),
            capacity_bytes: 1 << 34,
            emulated_capacity_bytes: None,
            allocator: "cpu-counting-allocator".into(),
            reserved_equals_allocated: true,
            torch: "2.11.0".into(),
            cuda: None,
            driver: None,
            cores: 2,
        },
        host: "test".into(),
        timestamp: "2026-01-01T00:00:00Z".into(),
        tool_version: "0.1.0".into(),
        parameters: ParameterCounts {
            graph: graph.parameters(),
            built: graph.parameters(),
        },
        graph_mismatch: false,
        status: RunStatus::Completed,
        oom: None,
        error: None,
        phases: vec![Phase {
            name: "step1.backward".into(),
            status: "ok".into(),
            allocated_start: 0,
            reserved_start: 0,
            allocated_peak: Some(peak),
            reserved_peak: Some(peak),
            allocated_end: Some(0),
            reserved_end: Some(0),
            wall_seconds: 0.1,
        }],
        peak: Some(Peak {
            allocated_bytes: peak,
            reserved_bytes: peak,
            phase: "step1.backward".into(),
        }),
    }
}

fn write_row(data: &Path, r: &RunRow) {
    let path = data.join(format!("runs/{}.json", r.run_id));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(r).unwrap()).unwrap();
}

#[test]
fn diff_reports_exactly_the_change_and_audit_flags_a_hand_edit() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine");
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path();
    let data = repo.join("data");
    std::fs::create_dir_all(data.join("graphs")).unwrap();
    let mut factors: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("factors.json")).unwrap())
            .unwrap();
    factors.as_object_mut().unwrap().remove("provenance");
    std::fs::write(
        data.join("factors.json"),
        serde_json::to_string_pretty(&factors).unwrap(),
    )
    .unwrap();
    let mut graphs = Vec::new();
    for name in ["tiny-mlp", "tiny-gpt"] {
        let src = fixtures.join(format!("graphs/{name}.json"));
        let dst = data.join(format!("graphs/{name}.json"));
        std::fs::copy(&src, &dst).unwrap();
        graphs.push(Graph::load(&dst).unwrap());
    }
    // Rows whose peaks follow known factors, with a little spread.
    let truth = [1.0, 0.7, 1.1, 1.5, 0.0, 0.9];
    for (gi, g) in graphs.iter().enumerate() {
        for (k, batch) in [2u64, 4, 8, 16, 32].iter().enumerate() {
            let f = features(g, *batch, Precision::Fp32).as_f64();
            let peak: f64 = truth.iter().zip(f).map(|(a, x)| a * x).sum();
            let spread = 1.0 + 0.03 * ((gi + k) % 3) as f64;
            write_row(&data, &row(g, *batch, (peak * spread) as u64));
        }
    }
    sh(repo, &["init", "-q"]);
    sh(repo, &["add", "."]);
    sh(repo, &["commit", "-qm", "rows and seed factors"]);

    // The seed factors never came from a fit: audit flags them.
    let (code, out, err) = memcal(repo, &["audit"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("no provenance"), "{out}");

    // An honest fit reproduces.
    let (code, _, err) = memcal(repo, &["fit", "--write-factors", "--out", "cal.json"]);
    assert_eq!(code, 0, "{err}");
    std::fs::remove_file(repo.join("cal.json")).unwrap();
    sh(repo, &["commit", "-qam", "fit"]);
    let (code, out, err) = memcal(repo, &["audit"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("History of data/factors.json (2 changes"),
        "{out}"
    );
    assert!(out.contains("reproduce from the rows they claim"), "{out}");

    // Change one row's peak and hand-edit one factor.
    let changed = row(&graphs[0], 8, 50_000_000);
    write_row(&data, &changed);
    let mut f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("factors.json")).unwrap()).unwrap();
    f["profiles"]["fp32"]["factors"][1] = serde_json::json!(9.5);
    std::fs::write(
        data.join("factors.json"),
        serde_json::to_string_pretty(&f).unwrap(),
    )
    .unwrap();
    sh(repo, &["commit", "-qam", "edit"]);

    let (code, out, err) = memcal(
        repo,
        &["diff", "--base", "HEAD~1", "--head", "HEAD", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    let changed_factors: Vec<(String, String)> = d["factors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["before"] != c["after"])
        .map(|c| {
            (
                c["profile"].as_str().unwrap().into(),
                c["feature"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        changed_factors,
        vec![("fp32".to_string(), "layer_outputs".to_string())]
    );
    assert_eq!(d["rows_added"].as_array().unwrap().len(), 0);
    assert_eq!(d["rows_removed"].as_array().unwrap().len(), 0);
    // accelerate does not read the factors: its checks change only where the edited row's truth
    // did (the row's new 50 MB peak fits no card), and they do change there.
    let accelerate: std::collections::BTreeSet<&str> = d["verdict_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["method"] == "accelerate")
        .map(|v| v["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        accelerate.into_iter().collect::<Vec<_>>(),
        vec![changed.run_id.as_str()]
    );

    // The Markdown form and a gate: a 9.5 factor on layer outputs makes the error much worse.
    let (code, md, _) = memcal(
        repo,
        &[
            "diff",
            "--base",
            "HEAD~1",
            "--fail-on",
            "held-out-median-worse=0",
        ],
    );
    assert!(
        md.contains("### Factors") && md.contains("**changed**"),
        "{md}"
    );
    assert!(code == 0 || code == 1);

    // The hand edit and the changed row are both flagged.
    let (code, out, _) = memcal(repo, &["audit"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("layer_outputs is 9.5 in the file"), "{out}");
    assert!(out.contains("rows changed since the fit"), "{out}");
    assert!(
        out.contains("History of data/factors.json (3 changes"),
        "{out}"
    );
}
