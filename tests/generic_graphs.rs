//! Generic `aten` nodes through `memcal plan`: shared parameters counted once, and every
//! approximation printed first, carried in `--json` and said in the verdict line.

use std::process::Command;

fn plan(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_memcal"))
        .arg("plan")
        .args(args)
        .args(["--factors", "tests/bad_input/factors.json"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn a_shared_parameter_counts_once() {
    let (code, out) = plan(&[
        "tests/fixtures/sim/sim-aten-shared.json",
        "--batch",
        "4",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // One 128 x 128 weight, read by two mm nodes.
    assert_eq!(v["parameters"], 128 * 128);
    assert_eq!(v["approximations"], serde_json::json!([]));
}

#[test]
fn approximations_are_said_first_and_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g.json");
    // aten.linear is a composite (eager autograd runs t + addmm): drawn whole, it approximates.
    std::fs::write(
        &g,
        r#"{"format": "memcal-graph/1", "name": "approx", "family": "t", "variant": "r1",
 "inputs": [{"name": "x", "shape": ["B", 8], "dtype": "float32"},
            {"name": "y", "shape": ["B"], "dtype": "int64", "classes": 4}],
 "nodes": [{"id": "fc", "op": "aten", "inputs": ["x"], "attributes": {"target": "aten.linear.default",
   "args": [{"input": 0}, {"param": 0}], "params": [{"name": "fc.weight", "shape": [4, 8]}], "shape": ["B", 4]}},
  {"id": "loss", "op": "cross_entropy", "inputs": ["fc", "y"]}],
 "notes": [{"node": "fc", "text": "drawn by hand for this test"}],
 "loss": "loss"}"#,
    )
    .unwrap();
    let path = g.to_str().unwrap();
    let (code, out) = plan(&[path, "--batch", "4"]);
    assert_eq!(code, 0, "{out}");
    let first: Vec<&str> = out.lines().take(8).collect();
    assert!(
        first
            .iter()
            .any(|l| l.starts_with("approximate graph: 2 approximation")),
        "{out}"
    );
    assert!(
        out.contains("`fc`: aten.linear.default: a composite op drawn whole"),
        "{out}"
    );
    assert!(
        out.contains("in one line approximate graph (2 approximations)"),
        "{out}"
    );
    let (_, json) = plan(&[path, "--batch", "4", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let a = v["approximations"].as_array().unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["text"], "drawn by hand for this test");
    assert_eq!(a[1]["node"], "fc");
}

#[test]
fn a_note_naming_no_node_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g.json");
    let text = std::fs::read_to_string("tests/fixtures/sim/sim-aten-shared.json").unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["notes"] = serde_json::json!([{"node": "nope", "text": "x"}]);
    std::fs::write(&g, v.to_string()).unwrap();
    let (code, out) = plan(&[g.to_str().unwrap(), "--batch", "4"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("notes[0].node"), "{out}");
}
