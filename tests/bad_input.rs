//! The bad-input corpus under `tests/bad_input/`: every malformed graph is run through
//! `memcal plan`, every malformed data folder through `memcal fit`. Each must exit 2 (an input
//! error) without a panic, name the offending file, and print the message recorded in its insta
//! snapshot (`tests/snapshots/bad_input__*.snap`). The one exception is a duplicate run id: not
//! an error but an exclusion, whose reason is snapshotted instead.
//!
//! Layout: `graphs/<case>.json` (a graph file, or a directory where a file is expected) and
//! `rows/<case>/` (a complete data folder: `factors.json`, `graphs/`, `runs/`; the `bundle_*` cases
//! hold a row bundle `runs/rows.jsonl`, whose errors name `file:line`). Adding a case
//! means adding the file or folder and its name to the lists below; `corpus_is_listed` checks
//! that the two agree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the binary from the repository root (so corpus paths print relative and stable).
fn memcal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memcal"))
        .current_dir(repo())
        .args(args)
        .output()
        .expect("the memcal binary runs")
}

/// Replaces machine-specific paths so snapshots are stable.
fn redact(text: &str, tmp: &Path) -> String {
    text.replace(tmp.to_str().unwrap(), "<tmp>")
        .replace(repo().to_str().unwrap(), "<repo>")
}

/// Asserts an input error: exit 2, no panic, one `error:` message naming `names`. Returns the
/// redacted stderr.
fn input_error(out: &Output, names: &str, tmp: &Path) -> String {
    let stderr = redact(&String::from_utf8_lossy(&out.stderr), tmp);
    assert!(!stderr.contains("panicked"), "panicked:\n{stderr}");
    assert_eq!(out.status.code(), Some(2), "exit status; stderr:\n{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains(names), "should name `{names}`:\n{stderr}");
    stderr
}

fn graph_case(name: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let graph = format!("tests/bad_input/graphs/{name}.json");
    let out = memcal(&[
        "plan",
        &graph,
        "--batch",
        "4",
        "--factors",
        "tests/bad_input/factors.json",
    ]);
    input_error(&out, &graph, tmp.path())
}

fn fit(name: &str, tmp: &Path) -> Output {
    let data = format!("tests/bad_input/rows/{name}");
    let cal = tmp.join("calibration.json");
    memcal(&["fit", "--data", &data, "--out", cal.to_str().unwrap()])
}

fn row_case(name: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let out = fit(name, tmp.path());
    let stderr = input_error(&out, &format!("tests/bad_input/rows/{name}/"), tmp.path());
    assert!(
        !tmp.path().join("calibration.json").exists(),
        "an input error writes no calibration"
    );
    stderr
}

macro_rules! cases {
    ($list:ident, $run:ident: $($name:ident),* $(,)?) => {
        pub(super) const $list: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                insta::assert_snapshot!(stringify!($name), super::$run(stringify!($name)));
            }
        )*
    };
}

/// `memcal plan tests/bad_input/graphs/<case>.json --batch 4`.
mod graphs {
    cases!(LIST, graph_case:
        truncated_json,
        empty_file,
        not_utf8,
        not_an_object,
        is_a_directory,
        wrong_type_name,
        wrong_type_shape,
        wrong_type_attribute,
        unknown_op,
        unknown_field,
        unknown_attribute,
        missing_field,
        missing_attribute,
        shape_mismatch,
        cycle,
        dangling_input,
        duplicate_node_id,
        wrong_format_version,
        loss_not_a_loss_node,
        int64_input_without_classes,
        negative_size,
        zero_input_dim,
        nan_dropout,
        dropout_out_of_range,
        no_nodes,
        huge_number_u64_overflow,
        huge_product_overflow,
        max_u64_input_dim,
    );
}

/// `memcal fit --data tests/bad_input/rows/<case> --out <tmp>/calibration.json`.
mod rows {
    cases!(LIST, row_case:
        truncated_json,
        empty_file,
        not_utf8,
        not_an_object,
        wrong_type_batch,
        wrong_type_status,
        unknown_status,
        negative_bytes,
        nan_bytes,
        fractional_bytes,
        huge_number_u64_overflow,
        huge_batch,
        zero_peak,
        zero_batch,
        zero_capacity,
        oom_row_claims_peak,
        completed_row_without_peak,
        error_row_claims_peak,
        row_names_missing_graph,
        wrong_format_version,
        unknown_field,
        unknown_nested_field,
        missing_field,
        missing_nested_field,
        bad_timestamp,
        unknown_precision,
        bad_graph_sha256,
        unknown_marker,
        graph_path_is_a_directory,
        graph_name_differs_from_file,
        bad_graph_in_data,
        factors_missing,
        factors_negative_factor,
        factors_truncated,
        factors_wrong_format_version,
        bundle_bad_line,
        bundle_empty_line,
        bundle_unknown_field,
    );
}

/// Not an error: the second row file with the same run id is excluded, and says why.
#[test]
fn duplicate_run_id_is_an_exclusion() {
    let tmp = tempfile::tempdir().unwrap();
    let out = fit("duplicate_run_id", tmp.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("rows:") || l.starts_with("  excluded"))
        .collect();
    let cal: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("calibration.json")).unwrap())
            .unwrap();
    let text = format!(
        "{}\nexcluded_by_reason: {}\nexclusions: {}\n",
        summary.join("\n"),
        cal["excluded_by_reason"],
        serde_json::to_string_pretty(&cal["exclusions"]).unwrap()
    );
    assert!(text.contains("duplicate-run-id"), "{text}");
    insta::assert_snapshot!("duplicate_run_id", redact(&text, tmp.path()));
}

/// Every corpus entry is listed above (and every listed case exists); at least 30 cases.
#[test]
fn corpus_is_listed() {
    let names = |dir: &str, strip: &str| -> BTreeSet<String> {
        std::fs::read_dir(repo().join("tests/bad_input").join(dir))
            .unwrap()
            .map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(strip).unwrap_or(&name).to_string()
            })
            .collect()
    };
    let listed = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(names("graphs", ".json"), listed(graphs::LIST));
    let mut rows = listed(rows::LIST);
    rows.insert("duplicate_run_id".into());
    assert_eq!(names("rows", ""), rows);
    assert!(graphs::LIST.len() + rows.len() >= 30);
}
