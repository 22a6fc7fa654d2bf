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

mod common;

use common::copy_tree;
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
        seq_axis_without_seq,
        nan_dropout,
        dropout_out_of_range,
        no_nodes,
        huge_number_u64_overflow,
        huge_product_overflow,
        max_u64_input_dim,
        negative_input_dim,
        utf8_bom,
        infinity_attribute,
        trailing_bytes,
        two_graphs_in_one_file,
        activation_overflow,
        aten_unknown_target,
        aten_bad_shape_expression,
        aten_shape_not_a_monomial,
        aten_input_out_of_range,
        aten_missing_argument,
        broadcast_value,
        label_classes_exceed_logits,
        nul_in_family,
        nul_in_node_id,
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
        bad_strategy,
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
        trailing_bytes,
        two_rows_in_one_file,
        bundle_two_rows_on_a_line,
        peak_above_capacity,
        capped_peak_above_cap,
        peak_disagrees_with_phases,
        peak_phase_not_a_phase,
        timestamp_in_the_future,
        timestamp_before_the_harness,
        timestamp_not_ascii,
        uppercase_json_extension,
        no_runs_folder,
        factors_q95_below_q90,
        factors_q95_below_one,
        factors_zero_byte_card,
        factors_unsorted_cards,
        factors_no_training_regime,
        factors_non_hex_rows_sha256,
        factors_trailing_bytes,
        utf8_bom,
        infinity_bytes,
        completed_row_without_phases,
        completed_row_with_an_oom_phase,
        unknown_phase_status,
        run_id_names_another_batch,
        emulated_cap_above_capacity,
        unknown_device_kind,
        parameters_differ_from_the_graph,
        built_parameters_differ_without_mismatch,
        negative_wall_time,
        nul_in_run_id,
        factors_headroom_over_100_percent,
        factors_fixed_at_in_the_future,
        factors_profile_fixed_at_in_the_future,
    );
}

/// A command-line case `commands/<case>/`: a working folder (its `files/`, then the lines of
/// `setup`) in which `memcal <args>` runs; the snapshot holds the exit status, stderr, the
/// summary's `rows:` line and every file left in the folder afterwards (size and SHA-256, or
/// `(not compared)` under a path listed in `volatile`), so that a refusal shows that nothing
/// was written or removed.
///
/// `setup` lines: `data DIR` (a valid one-row data folder), `copy SRC DEST` (SRC relative to
/// the repository), `symlink TARGET LINK`, `mkfifo PATH`, `remove PATH` (a file or a folder). `args`: one argument
/// a line, `{repo}` for the repository. `exit`: the status. `stdout-closed`: stdout is a pipe
/// whose reader has already gone away (`memcal ... | head`).
fn command_case(name: &str) -> String {
    let case = repo().join("tests/bad_input/commands").join(name);
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    if case.join("files").is_dir() {
        copy_tree(&case.join("files"), &work);
    }
    let lines = |file: &str| -> Vec<String> {
        std::fs::read_to_string(case.join(file))
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    };
    for line in lines("setup") {
        setup_step(&line, &work);
    }
    let args: Vec<String> = lines("args")
        .iter()
        .map(|a| a.replace("{repo}", repo().to_str().unwrap()))
        .collect();
    let want: i32 = lines("exit")[0].parse().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memcal"));
    cmd.current_dir(&work).args(&args);
    if case.join("stdout-closed").exists() {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        cmd.stdout(writer);
    } else {
        cmd.stdout(std::process::Stdio::piped());
    }
    let out = cmd
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("the memcal binary runs");
    let stderr = without_fixed_at(&redact(&String::from_utf8_lossy(&out.stderr), tmp.path()));
    assert!(!stderr.contains("panicked"), "panicked:\n{stderr}");
    assert_eq!(
        out.status.code(),
        Some(want),
        "exit status; stderr:\n{stderr}"
    );
    if want == 2 {
        assert!(stderr.starts_with("error: "), "{stderr}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("rows:")).collect();
    format!(
        "exit: {}\n--- stderr\n{stderr}--- stdout rows\n{}\n--- files after\n{}",
        want,
        rows.join("\n"),
        listing(&work, &lines("volatile"))
    )
}

/// `(fixed_at <time>)` as `(fixed_at <now>)`: `fit --write-factors` fixes the factors now.
fn without_fixed_at(text: &str) -> String {
    match text.split_once("(fixed_at ") {
        Some((before, after)) => match after.split_once(')') {
            Some((_, rest)) => format!("{before}(fixed_at <now>){rest}"),
            None => text.to_string(),
        },
        None => text.to_string(),
    }
}

fn setup_step(line: &str, work: &Path) {
    let w: Vec<&str> = line.split_whitespace().collect();
    let at = |p: &str| work.join(p);
    let parent = |p: &Path| std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    match w.as_slice() {
        ["data", dir] => {
            let valid = repo().join("tests/bad_input/rows/duplicate_run_id");
            for (from, to) in [
                ("factors.json", "factors.json"),
                ("graphs", "graphs"),
                ("runs/a", "runs/a"),
            ] {
                let dest = at(dir).join(to);
                parent(&dest);
                copy_any(&valid.join(from), &dest);
            }
        }
        ["copy", from, to] => {
            parent(&at(to));
            copy_any(&repo().join(from), &at(to));
        }
        ["symlink", target, link] => {
            parent(&at(link));
            std::os::unix::fs::symlink(target, at(link)).unwrap();
        }
        ["mkfifo", path] => {
            parent(&at(path));
            let ok = Command::new("mkfifo").arg(at(path)).status().unwrap();
            assert!(ok.success(), "mkfifo {path}");
        }
        ["remove", path] if at(path).is_dir() => std::fs::remove_dir_all(at(path)).unwrap(),
        ["remove", path] => std::fs::remove_file(at(path)).unwrap(),
        _ => panic!("unknown setup line `{line}`"),
    }
}

fn copy_any(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        copy_tree(from, to);
    } else {
        std::fs::copy(from, to).unwrap();
    }
}

/// Every entry under `dir` (links not followed), sorted: a file with its size and the start of
/// its SHA-256, a link with its target, a pipe as such; under a `volatile` prefix only the path.
fn listing(dir: &Path, volatile: &[String]) -> String {
    use sha2::Digest as _;
    let mut out = String::new();
    let mut entries: Vec<PathBuf> = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else {
                entries.push(p);
            }
        }
    }
    entries.sort();
    for p in entries {
        let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let what = if m.file_type().is_symlink() {
            format!("-> {}", std::fs::read_link(&p).unwrap().display())
        } else if !m.is_file() {
            "(not a regular file)".to_string()
        } else if volatile.iter().any(|v| rel.starts_with(v.as_str())) {
            "(not compared)".to_string()
        } else {
            let bytes = std::fs::read(&p).unwrap();
            let h = sha2::Sha256::digest(&bytes);
            let hex: String = h.iter().take(6).map(|b| format!("{b:02x}")).collect();
            format!("{} bytes, sha256 {hex}", bytes.len())
        };
        out.push_str(&format!("{rel}  {what}\n"));
    }
    out
}

/// `memcal <args>` in a working folder: `tests/bad_input/commands/<case>/`.
mod commands {
    cases!(LIST, command_case:
        build_into_a_foreign_folder,
        build_out_is_the_data_folder,
        build_out_inside_the_data_folder,
        build_without_runs_keeps_the_site,
        build_out_is_a_file,
        build_removes_only_its_own_files,
        build_check_on_bad_data,
        fit_out_is_the_factors_file,
        fit_out_is_a_folder,
        fit_with_a_closed_stdout,
        plan_with_a_closed_stdout,
        graphs_over_a_hand_edited_graph,
        plan_unknown_regime,
        symlink_outside_the_data_folder,
        symlink_loop,
        symlink_dangling,
        symlink_within_the_data_folder_is_followed,
        skipped_files_are_reported,
        row_file_without_extension,
        build_without_prose,
        build_without_a_prose_file,
        build_without_the_factor_history,
        build_history_fixed_at_in_the_future,
        fit_out_under_a_file,
        build_out_under_a_file,
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
    assert_eq!(names("commands", ""), listed(commands::LIST));
    assert!(graphs::LIST.len() + rows.len() + commands::LIST.len() >= 30);
}

/// Flags that do not apply to the job exit 2 naming the combination (never ignored in silence),
/// and `plan` works from any folder given `--data` (its factors default to the data folder's).
#[test]
fn flags_that_do_not_apply_exit_2_and_plan_runs_from_any_folder() {
    let g = "data/graphs/gpt2-small.json";
    for (extra, names) in [
        (&["--max-batch", "--recommend"][..], "--max-batch"),
        (
            &["--timeline", "--strategy", "checkpoint"][..],
            "--timeline",
        ),
        (
            &["--max-batch", "--inference", "--context", "64"][..],
            "--max-batch",
        ),
        (&["--seq", "64"][..], "sequence axis"),
    ] {
        let mut args = vec!["plan", g, "--batch", "1"];
        args.extend_from_slice(extra);
        let out = memcal(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(names), "{extra:?}: {err}");
    }
    let here = memcal(&["plan", g, "--batch", "1", "--json"]);
    let elsewhere = Command::new(env!("CARGO_BIN_EXE_memcal"))
        .current_dir(std::env::temp_dir())
        .args([
            "plan",
            repo().join(g).to_str().unwrap(),
            "--batch",
            "1",
            "--json",
        ])
        .args(["--data", repo().join("data").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(here.status.success() && elsewhere.status.success());
    assert_eq!(here.stdout, elsewhere.stdout);
}

/// Not an error: a dead branch (a node no node reads that is not the loss) is valid PyTorch
/// (computed in forward, freed when forward returns; the simulator models it, measured on CUDA
/// as `tests/fixtures/sim/sim-dead-branch.json`), so `plan` plans it, and names the node in a
/// warning: it is often a leftover of an edit.
#[test]
fn a_dead_branch_is_planned_and_named() {
    let graph = "tests/bad_input/accepted/dead_branch.json";
    let out = memcal(&[
        "plan",
        graph,
        "--batch",
        "4",
        "--factors",
        "tests/bad_input/factors.json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "warning: {graph}: `aux` is read by no node and not the loss (a dead branch): \
             planned as PyTorch runs it, computed in forward and freed when forward returns; \
             remove it if it is a leftover\n"
        )
    );
}

/// An output folder memcal cannot write into (read-only: mode 555, and immutable where the
/// test runs as root, who ignores the mode): `build --out` and `fit --out` there exit 2 naming
/// the path, and write nothing. Skipped (with a note) where neither makes the folder read-only.
#[test]
fn a_read_only_output_folder_exits_2_naming_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    for (from, to) in [
        (
            "tests/bad_input/rows/duplicate_run_id/factors.json",
            "factors.json",
        ),
        ("tests/bad_input/rows/duplicate_run_id/graphs", "graphs"),
        ("tests/bad_input/rows/duplicate_run_id/runs/a", "runs/a"),
        ("tests/fixtures/site/prose", "prose"),
    ] {
        std::fs::create_dir_all(data.join(to).parent().unwrap()).unwrap();
        copy_any(&repo().join(from), &data.join(to));
    }
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let immutable = Command::new("chattr")
        .arg("+i")
        .arg(&ro)
        .status()
        .is_ok_and(|s| s.success());
    let writable = std::fs::write(ro.join("probe"), "x").is_ok();
    let _ = std::fs::remove_file(ro.join("probe"));
    let results: Vec<(String, Output)> = if writable {
        Vec::new()
    } else {
        [
            vec!["build", "--data", "data", "--out", "ro/site"],
            vec!["fit", "--data", "data", "--out", "ro/calibration.json"],
        ]
        .into_iter()
        .map(|args| {
            let out = Command::new(env!("CARGO_BIN_EXE_memcal"))
                .current_dir(tmp.path())
                .args(&args)
                .output()
                .unwrap();
            (args.join(" "), out)
        })
        .collect()
    };
    if immutable {
        let _ = Command::new("chattr").arg("-i").arg(&ro).status();
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    if writable {
        eprintln!("skipped: this machine cannot make a folder read-only for this user");
        return;
    }
    for (args, out) in results {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args}: {stderr}");
        assert_eq!(out.status.code(), Some(2), "{args}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains("ro"),
            "{args}: {stderr}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&ro).unwrap().count(),
        0,
        "nothing written"
    );
}
