//! Bad graphs: each error names the file and the node or field; the CLI exits 2, never panics.

use std::path::Path;
use std::process::Command;

const OK_NODES: &str = r#"
  {"id":"fc1","op":"linear","inputs":["x"],"attributes":{"in_features":8,"out_features":16}},
  {"id":"act","op":"relu","inputs":["fc1"]},
  {"id":"fc2","op":"linear","inputs":["act"],"attributes":{"in_features":16,"out_features":4}},
  {"id":"loss","op":"cross_entropy","inputs":["fc2","y"]}"#;

fn graph_with(nodes: &str) -> String {
    format!(
        r#"{{"format":"memcal-graph/1","name":"bad","family":"mlp","variant":"t","inputs":[
        {{"name":"x","shape":["B",8],"dtype":"float32"}},
        {{"name":"y","shape":["B"],"dtype":"int64","classes":4}}],
        "nodes":[{nodes}],"loss":"loss"}}"#
    )
}

/// Writes the graph, runs `memcal plan` on it, and returns (exit code, stderr).
fn plan(json: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(&path, json).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_memcal"))
        .args(["plan", path.to_str().unwrap(), "--batch", "4", "--factors"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/factors.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).replace(dir.path().to_str().unwrap(), "<tmp>");
    (out.status.code().unwrap_or(-1), err)
}

fn assert_error(json: &str, wanted: &[&str]) {
    let (code, err) = plan(json);
    assert_eq!(code, 2, "exit status for: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("<tmp>/bad.json"), "names the file: {err}");
    for w in wanted {
        assert!(err.contains(w), "expected `{w}` in: {err}");
    }
}

#[test]
fn a_valid_graph_plans() {
    let (code, err) = plan(&graph_with(OK_NODES));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn malformed_json() {
    assert_error(&graph_with(OK_NODES)[..60], &["malformed graph JSON"]);
}

#[test]
fn unknown_op() {
    let nodes = OK_NODES.replace(r#""op":"relu""#, r#""op":"swish""#);
    assert_error(&graph_with(&nodes), &["node `act`", "unknown op `swish`"]);
}

#[test]
fn unknown_attribute() {
    let nodes = OK_NODES.replace(
        r#""out_features":16}"#,
        r#""out_features":16,"biass":false}"#,
    );
    assert_error(
        &graph_with(&nodes),
        &["node `fc1`", "unknown attribute `biass`"],
    );
}

#[test]
fn missing_input() {
    let nodes = OK_NODES.replace(r#""inputs":["fc1"]"#, r#""inputs":["fc0"]"#);
    assert_error(&graph_with(&nodes), &["node `act`", "input `fc0`"]);
}

#[test]
fn cycle() {
    let nodes = OK_NODES.replace(r#""inputs":["x"]"#, r#""inputs":["act"]"#);
    assert_error(&graph_with(&nodes), &["cycle"]);
}

#[test]
fn shape_mismatch_names_expected_and_found() {
    let nodes = OK_NODES.replace(
        r#""in_features":16,"out_features":4"#,
        r#""in_features":32,"out_features":4"#,
    );
    assert_error(
        &graph_with(&nodes),
        &[
            "node `fc2`",
            "expected last dimension 32",
            "found 16",
            "[B, 16]",
        ],
    );
}

#[test]
fn zero_and_negative_sizes() {
    let zero = OK_NODES.replace(r#""out_features":16"#, r#""out_features":0"#);
    assert_error(
        &graph_with(&zero),
        &["node `fc1`", "`out_features` must be a positive integer"],
    );
    let neg = OK_NODES.replace(r#""out_features":16"#, r#""out_features":-3"#);
    assert_error(&graph_with(&neg), &["node `fc1`", "found -3"]);
    let bad_input = graph_with(OK_NODES).replace(r#"["B",8]"#, r#"["B",0]"#);
    assert_error(&bad_input, &["inputs[0].shape"]);
}

#[test]
fn wrong_format_version() {
    let g = graph_with(OK_NODES).replace("memcal-graph/1", "memcal-graph/9");
    assert_error(&g, &["field `format`", "memcal-graph/9"]);
}

#[test]
fn loss_must_be_a_loss_node() {
    let g = graph_with(OK_NODES).replace(r#""loss":"loss"}"#, r#""loss":"fc2"}"#);
    assert_error(&g, &["field `loss`", "cross_entropy or mse"]);
}

#[test]
fn no_batch_axis_loads_but_is_flagged() {
    let g = graph_with(OK_NODES)
        .replace(r#"["B",8]"#, r#"[2,8]"#)
        .replace(r#"["B"]"#, r#"[2]"#);
    let (code, _) = plan(&g);
    assert_eq!(code, 0);
    let graph = memcal::graph::Graph::from_bytes(g.as_bytes(), Path::new("x.json")).unwrap();
    assert!(!graph.has_batch_axis());
}

#[test]
fn a_missing_graph_file_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.json");
    let out = Command::new(env!("CARGO_BIN_EXE_memcal"))
        .args(["plan", path.to_str().unwrap(), "--batch", "4", "--factors"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/factors.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("missing.json: cannot read"), "{err}");
    // The io error is printed once, not once by the message and again as its cause.
    assert_eq!(err.matches("os error 2").count(), 1, "{err}");
}
