//! The generic `aten` node in the harness: graphs of ATen calls build, train and are measured
//! like any other graph (shared parameters counted and trained once, autocast, out-of-memory
//! under a cap, errors that name the node).

use memcal::graph::Graph;
use memcal::run::{RunRow, RunStatus};
use memcal_measure::builder::Model;
use std::path::{Path, PathBuf};
use std::process::Command;
use tch::Device;

const BIN: &str = env!("CARGO_BIN_EXE_memcal-measure");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.json"))
}

/// Runs `memcal-measure run` on `graph` and returns its exit code and row.
fn measure(graph: &Path, batch: u64, extra: &[&str], dir: &Path) -> (i32, RunRow) {
    let out = dir.join(format!(
        "{}-b{batch}-{}.json",
        graph.file_stem().unwrap().to_string_lossy(),
        extra.join("_").replace(['-', '.'], "")
    ));
    let b = batch.to_string();
    let mut args = vec![
        "run",
        "--graph",
        graph.to_str().unwrap(),
        "--batch",
        &b,
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = Command::new(BIN)
        .args(&args)
        .output()
        .expect("start memcal-measure");
    let text = std::fs::read_to_string(&out).unwrap_or_else(|e| {
        panic!(
            "no row at {} ({e}); stderr: {}",
            out.display(),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (
        o.status.code().expect("exited"),
        serde_json::from_str(&text).expect("a memcal-run/1 row"),
    )
}

#[test]
fn a_parameter_named_by_two_nodes_is_one_tensor() {
    let g = Graph::load(&fixture("aten-shared")).unwrap();
    let m = Model::build(&g, Device::Cpu).unwrap();
    let vars = m.vs.trainable_variables();
    assert_eq!(vars.len(), 1, "block.weight is made once");
    assert_eq!(m.built_parameters(), 128 * 128);
    assert_eq!(m.built_parameters(), g.parameters());
    let inputs = m.inputs(2).unwrap();
    let loss = m.forward(&inputs, 2);
    loss.backward();
    let grad = vars[0].grad();
    assert!(grad.defined(), "both uses reach the one parameter");
    assert!(grad.abs().sum(tch::Kind::Float).double_value(&[]) > 0.0);
}

#[test]
fn generic_graphs_are_measured_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    for g in ["aten-mlp", "aten-shared", "aten-split-gate"] {
        let (code, row) = measure(&fixture(g), 4, &[], dir.path());
        assert_eq!(code, 0, "{g}: {:?}", row.error);
        assert_eq!(row.status, RunStatus::Completed, "{g}: {:?}", row.error);
        assert_eq!(row.parameters.graph, row.parameters.built, "{g}");
        assert!(!row.graph_mismatch);
        assert_eq!(row.phases.len(), 11);
        // The weights alone, 4 bytes a parameter, allocated in model_load.
        assert_eq!(row.phases[0].allocated_end, Some(4 * row.parameters.built));
        // Every generic op also runs under CPU bf16 autocast (the dispatcher's autocast key).
        let (code, row) = measure(
            &fixture(g),
            4,
            &["--precision", "bf16-autocast"],
            dir.path(),
        );
        assert_eq!(code, 0, "{g} bf16: {:?}", row.error);
        assert_eq!(
            row.status,
            RunStatus::Completed,
            "{g} bf16: {:?}",
            row.error
        );
    }
}

#[test]
fn a_cap_refused_inside_an_aten_call_is_an_oom() {
    let dir = tempfile::tempdir().unwrap();
    // aten-mlp at batch 4: 2,582,464 bytes after the inputs, so the first mm's 8 KiB output
    // passes a cap of 0.00241 GiB (2,587,717 bytes) in step1.forward, inside the ATen call.
    let (code, row) = measure(
        &fixture("aten-mlp"),
        4,
        &["--cap-gib", "0.00241"],
        dir.path(),
    );
    assert_eq!(code, 0, "a recorded OOM exits 0: {:?}", row.error);
    assert_eq!(row.status, RunStatus::Oom, "{:?}", row.error);
    assert_eq!(row.phases.last().unwrap().name, "step1.forward");
}

#[test]
fn a_wrong_shape_is_an_error_naming_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("aten-split-gate")).unwrap())
            .unwrap();
    let gate = v["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|n| n["id"] == "gate")
        .unwrap();
    gate["attributes"]["shape"] = serde_json::json!(["B", 64]);
    let path = dir.path().join("bad-shape.json");
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    let (code, row) = measure(&path, 2, &[], dir.path());
    assert_eq!(code, 1, "a recorded error exits 1");
    assert_eq!(row.status, RunStatus::Error);
    let e = row.error.as_ref().expect("error details");
    assert_eq!(e.phase, "step1.forward");
    assert!(
        e.message.contains("node `gate` (aten.sigmoid.default)")
            && e.message.contains("[2, 128]")
            && e.message.contains("[2, 64]"),
        "{}",
        e.message
    );
}
