//! `memcal diff` and `memcal audit` on fixture repositories made by the tests: one commit with
//! rows and seed factors, one with honestly fitted factors, then the changes a review and an
//! audit must see: a hand-edited factor, a changed row, rows that run out of memory, thousands of
//! added rows, a fabricated or tampered history entry.

mod common;

use memcal::features::{features, Precision};
use memcal::graph::Graph;
use memcal::run::*;
use std::path::{Path, PathBuf};
use std::process::Command;

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
        strategy: None,
        rank: None,
        world: None,
        backend: None,
        device: DeviceInfo {
            kind: "cpu".into(),
            name: "test".into(),
            capacity_bytes: 1 << 34,
            emulated_capacity_bytes: None,
            allocator: "cpu-counting-allocator".into(),
            allocator_settings: None,
            reserved_equals_allocated: true,
            torch: "2.11.0".into(),
            cuda: None,
            driver: None,
            cores: 2,
        },
        host: "test".into(),
        timestamp: "2026-01-01T00:00:00Z".into(),
        tool_version: "0.1.0".into(),
        implementation: None,
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

/// An out-of-memory row at an emulated capacity.
fn oom_row(graph: &Graph, batch: u64, cap: u64) -> RunRow {
    let mut r = row(graph, batch, 0);
    r.run_id = format!("cpu-edge/{}/b{batch}/oom", graph.name);
    r.regime = "cpu-edge".into();
    r.device.emulated_capacity_bytes = Some(cap);
    r.status = RunStatus::Oom;
    r.oom = Some(Failure {
        phase: "step1.backward".into(),
        message: "out of memory (test)".into(),
    });
    r.peak = None;
    r.phases[0].status = "oom".into();
    r.phases[0].allocated_peak = Some(cap / 2);
    r.phases[0].reserved_peak = Some(cap / 2);
    r.phases[0].allocated_end = None;
    r.phases[0].reserved_end = None;
    r
}

fn write_row(data: &Path, r: &RunRow) {
    let path = data.join(format!("runs/{}.json", r.run_id));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(r).unwrap()).unwrap();
}

/// The truth the fixture rows follow (fp32 factors, with a little spread per row).
const TRUTH: [f64; 6] = [1.0, 0.7, 1.1, 1.5, 0.0, 0.9];

/// A repository with the engine fixture's two graphs, ten rows, and two commits: seed factors,
/// then `memcal fit --write-factors`. Returns the temp dir and the graphs.
fn fitted_repo() -> (tempfile::TempDir, PathBuf, Vec<Graph>) {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine");
    let tmp = tempfile::tempdir().unwrap();
    let repo_dir = tmp.path().join("repo");
    let repo = repo_dir.as_path();
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
    for (gi, g) in graphs.iter().enumerate() {
        for (k, batch) in [2u64, 4, 8, 16, 32, 64, 128, 256].iter().enumerate() {
            let f = features(g, *batch, Precision::Fp32).as_f64();
            let peak: f64 = TRUTH.iter().zip(f).map(|(a, x)| a * x).sum();
            let spread = 1.0 + 0.03 * ((gi + k) % 3) as f64;
            write_row(&data, &row(g, *batch, (peak * spread) as u64));
        }
    }
    // The site's prose (`memcal build` needs every section's file; empty: no text).
    std::fs::create_dir_all(data.join("prose")).unwrap();
    for name in memcal::report::PROSE_BLOCKS {
        std::fs::write(data.join(format!("prose/{name}.md")), "").unwrap();
    }
    common::git(repo, &["init", "-q"]);
    common::git(repo, &["add", "."]);
    common::git(repo, &["commit", "-qm", "rows and seed factors"]);

    // The seed factors never came from a fit: audit flags them.
    let (code, out, err) = memcal(repo, &["audit"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("no provenance"), "{out}");

    // An honest fit reproduces and its history entry is audited.
    let (code, _, err) = memcal(repo, &["fit", "--write-factors", "--out", "../cal.json"]);
    assert_eq!(code, 0, "{err}");
    common::git(repo, &["add", "."]);
    common::git(repo, &["commit", "-qm", "fit"]);
    let (code, out, err) = memcal(repo, &["audit"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Versions of data/factors.json (2"), "{out}");
    // The same audit as JSON, valid against docs/schemas/audit.schema.json.
    let (code, json, err) = memcal(repo, &["audit", "--json"]);
    assert_eq!(code, 0, "{err}");
    common::assert_schema("audit", &serde_json::from_str(&json).unwrap());
    assert!(
        out.contains("1. fixed_at") && out.contains("audited"),
        "{out}"
    );
    assert!(out.contains("audit: passes"), "{out}");
    (tmp, repo_dir, graphs)
}

/// The Factor history page `memcal build` makes of the repository's data (the build must pass).
fn history_page(repo: &Path) -> String {
    let site = tempfile::tempdir().unwrap();
    let site_dir = site.path().join("site");
    let (code, _, err) = memcal(
        repo,
        &[
            "build",
            "--data",
            "data",
            "--out",
            site_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    std::fs::read_to_string(site_dir.join("history.html")).unwrap()
}

/// `memcal diff --base HEAD --fail-on SPEC` against the working tree.
fn gate(repo: &Path, spec: &str) -> (i32, String, String) {
    memcal(repo, &["diff", "--base", "HEAD", "--fail-on", spec])
}

fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn failures(out: &str) -> Vec<String> {
    let d: serde_json::Value = serde_json::from_str(out).unwrap();
    d["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_edit_of_the_factors_file_crosses_the_gate_even_right_after_the_fit() {
    let (_tmp, repo, _) = fitted_repo();
    let repo = repo.as_path();
    let data = repo.join("data");
    // Right after the fit: no after-fit row exists, so only "as shipped" reads the file.
    edit_json(&data.join("factors.json"), |f| {
        f["profiles"]["fp32"]["factors"][1] = serde_json::json!(9.5);
        f["profiles"]["bf16-autocast"]["factors"][1] = serde_json::json!(9.5);
    });
    let (code, out, err) = memcal(
        repo,
        &["diff", "--base", "HEAD", "--json", "--fail-on", "default"],
    );
    assert_eq!(code, 1, "{out}{err}");
    let f = failures(&out);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].starts_with("median-worse=*:plan-as-shipped:1:") && f[0].contains("fp32"),
        "{f:?}"
    );
    // Every row's as-shipped prediction changed, and the held-out methods did not move.
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    common::assert_schema("diff", &d);
    let methods = d["methods"].as_array().unwrap();
    let m = |name: &str| {
        methods
            .iter()
            .find(|m| m["method"] == name && m["profile"] == "fp32")
            .unwrap()
            .clone()
    };
    assert!(
        m("plan-as-shipped")["median_change_points"]
            .as_f64()
            .unwrap()
            > 100.0
    );
    assert_eq!(
        m("plan-held-out-architecture")["median_change_points"].as_f64(),
        Some(0.0)
    );
    // The gate on the held-out method alone passes: it does not read the file.
    let (code, out, err) = gate(repo, "median-worse=*:plan-held-out-architecture:0");
    assert_eq!(code, 0, "{out}{err}");
    // Per profile: the fixture has no bf16 rows, so a bf16 gate has nothing to cross.
    let (code, out, err) = gate(repo, "median-worse=bf16-autocast:plan-as-shipped:0");
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = gate(repo, "median-worse=fp32:plan-as-shipped:0");
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("❌ **1 gate(s) crossed:**"), "{out}");
    // The reverse change is an improvement: it never fails.
    let (code, out, err) = memcal(
        repo,
        &[
            "diff",
            "--base",
            "data",
            "--head",
            "HEAD",
            "--fail-on",
            "default",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("✅ No gate crossed"), "{out}");
}

#[test]
fn diff_reports_exactly_the_change_and_audit_flags_a_hand_edit() {
    let (_tmp, repo, graphs) = fitted_repo();
    let repo = repo.as_path();
    let data = repo.join("data");
    // Change one row's peak and hand-edit one factor.
    let changed = row(&graphs[0], 8, 50_000_000);
    write_row(&data, &changed);
    edit_json(&data.join("factors.json"), |f| {
        f["profiles"]["fp32"]["factors"][1] = serde_json::json!(9.5);
    });
    common::git(repo, &["commit", "-qam", "edit"]);

    let (code, out, err) = memcal(
        repo,
        &["diff", "--base", "HEAD~1", "--head", "HEAD", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["format"], "memcal-diff/2");
    common::assert_schema("diff", &d);
    // The hand edit is in the report itself, not only in `audit`.
    let edits = d["hand_edits"].as_array().unwrap();
    assert!(
        edits.iter().any(|e| e
            .as_str()
            .unwrap()
            .contains("the fp32 factors changed but provenance.fixed_at")),
        "{edits:?}"
    );
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
    let changes = d["verdict_changes"].as_array().unwrap();
    let runs_of = |method: &str| -> std::collections::BTreeSet<&str> {
        changes
            .iter()
            .filter(|v| v["method"] == method)
            .map(|v| v["run_id"].as_str().unwrap())
            .collect()
    };
    // accelerate does not read the factors: its checks change only where the edited row's truth
    // did (the row's new 50 MB peak fits no card), and they do change there.
    assert_eq!(
        runs_of("accelerate").into_iter().collect::<Vec<_>>(),
        vec![changed.run_id.as_str()]
    );
    // "as shipped" reads the file: the edit changes its verdicts on rows beyond the edited one.
    assert!(runs_of("plan-as-shipped").len() > 1, "{changes:?}");
    // Cards are named.
    assert!(changes
        .iter()
        .all(|v| v["card"].as_str().unwrap().ends_with(" MB")));

    // The Markdown form: the bottom line first, then the hand edit, what moved, the factor
    // that changed.
    let (code, md, _) = memcal(repo, &["diff", "--base", "HEAD~1", "--fail-on", "default"]);
    assert_eq!(code, 1, "{md}");
    let bottom = md.find("**fp32: ").unwrap();
    let edited = md.find("The factors were edited by hand").unwrap();
    let summary = md.find("### What moved").unwrap();
    assert!(bottom < edited && edited < summary, "{md}");
    assert!(
        summary < md.find("### Factors that changed").unwrap(),
        "{md}"
    );
    assert!(md.contains("## memcal: estimation error, HEAD~1 ("), "{md}");
    assert!(md.contains(" → working tree"), "{md}");
    assert!(md.contains("| fp32 | layer_outputs |"), "{md}");

    // The hand edit and the changed row are both flagged.
    let (code, out, _) = memcal(repo, &["audit"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("layer_outputs is 9.5 in the file"), "{out}");
    assert!(out.contains("rows changed since the fit"), "{out}");
    assert!(
        out.contains("field `profiles.fp32.layer_outputs` changed from")
            && out.contains("an edit that no fit made"),
        "{out}"
    );
    assert!(out.contains("Versions of data/factors.json (3"), "{out}");
}

#[test]
fn a_new_missed_oom_on_a_row_the_change_adds_crosses_the_gate() {
    let (_tmp, repo, graphs) = fitted_repo();
    let repo = repo.as_path();
    let data = repo.join("data");
    // An out-of-memory row at the largest card whose as-shipped estimate fits it.
    let f = memcal::factors::FactorsFile::load(&data.join("factors.json")).unwrap();
    let a = f.factors(Precision::Fp32).unwrap();
    let x = features(&graphs[0], 4, Precision::Fp32);
    let est = memcal::plan::estimate(a, &x);
    let cap = f.regimes["cpu-edge"]
        .cards
        .iter()
        .rev()
        .find(|c| memcal::plan::plan_fits(est, f.headroom, c.bytes))
        .expect("a card the estimate fits")
        .bytes;
    write_row(&data, &oom_row(&graphs[0], 4, cap));
    common::git(repo, &["add", "."]);
    common::git(repo, &["commit", "-qm", "an oom row"]);
    let (code, out, err) = memcal(
        repo,
        &[
            "diff",
            "--base",
            "HEAD~1",
            "--head",
            "HEAD",
            "--json",
            "--fail-on",
            "new-missed-oom",
        ],
    );
    assert_eq!(code, 1, "{out}{err}");
    let f = failures(&out);
    assert!(
        f.len() == 1 && f[0].starts_with("new-missed-oom:") && !f[0].contains("(0 of them"),
        "{f:?}"
    );
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    let added: Vec<&serde_json::Value> = d["verdict_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["added"] == true)
        .collect();
    assert!(!added.is_empty());
    assert!(added
        .iter()
        .all(|v| v["new_missed_oom"] == true && v["method"] != "accelerate"));
    assert!(added.iter().any(|v| v["method"] == "plan-as-shipped"));
    // The change's new missed OOMs come first in the comment, with the card's name.
    let (_, md, _) = memcal(repo, &["diff", "--base", "HEAD~1", "--head", "HEAD"]);
    assert!(md.contains("⚠ new missed OOM"), "{md}");
    assert!(md.contains("(added)"), "{md}");
}

/// Checks every table of `md` with pulldown-cmark: each row's source line has as many cells as
/// the header's (GitHub drops extra cells silently). Returns the number of tables.
fn check_tables(md: &str) -> usize {
    use pulldown_cmark::{Event, Options, Parser, Tag};
    fn cells(line: &str) -> usize {
        let line = line.trim();
        let line = line.strip_prefix('|').unwrap_or(line);
        let line = line.strip_suffix('|').unwrap_or(line);
        let mut n = 1;
        let mut escaped = false;
        for c in line.chars() {
            match c {
                '\\' if !escaped => escaped = true,
                '|' if !escaped => n += 1,
                _ => escaped = false,
            }
        }
        n
    }
    let mut tables = 0;
    let mut header = 0;
    let mut in_table = false;
    for (e, range) in Parser::new_ext(md, Options::ENABLE_TABLES).into_offset_iter() {
        match e {
            Event::Start(Tag::Table(_)) => {
                tables += 1;
                in_table = true;
            }
            Event::Start(Tag::TableHead) => header = cells(&md[range]),
            Event::Start(Tag::TableRow) if in_table => {
                let src = &md[range];
                assert_eq!(cells(src), header, "row `{src}` has not the header's cells");
            }
            Event::End(pulldown_cmark::TagEnd::Table) => in_table = false,
            _ => {}
        }
    }
    tables
}

#[test]
fn the_comment_renders_and_fits_github_with_thousands_of_added_rows() {
    let (_tmp, repo, graphs) = fitted_repo();
    let repo = repo.as_path();
    let data = repo.join("data");
    // A factor edit (changed verdicts on every row) and 3,000 added rows.
    edit_json(&data.join("factors.json"), |f| {
        f["profiles"]["fp32"]["factors"][0] = serde_json::json!(0.2);
    });
    for b in 0..3000u64 {
        let g = &graphs[(b % 2) as usize];
        let batch = 1000 + b;
        let f = features(g, batch, Precision::Fp32).as_f64();
        let peak: f64 = TRUTH.iter().zip(f).map(|(a, x)| a * x).sum();
        write_row(&data, &row(g, batch, peak as u64));
    }
    let (code, md, err) = memcal(repo, &["diff", "--base", "HEAD", "--fail-on", "default"]);
    assert!(code == 1, "{err}");
    let chars = md.chars().count();
    std::fs::write(std::env::temp_dir().join("memcal-review-3000.md"), &md).unwrap();
    assert!(chars <= memcal::review::COMMENT_LIMIT, "{chars} characters");
    assert!(
        md.contains("Rows added (3000)"),
        "{}",
        &md[..2000.min(md.len())]
    );
    assert!(md.contains("more (the full list: `memcal diff --json`)"));
    assert!(md.contains("<details><summary>"));
    assert!(check_tables(&md) >= 3, "{md}");
}

#[test]
fn every_table_of_a_small_comment_has_the_headers_cells() {
    let (_tmp, repo, graphs) = fitted_repo();
    let repo = repo.as_path();
    let data = repo.join("data");
    write_row(&data, &row(&graphs[1], 8, 60_000_000));
    edit_json(&data.join("factors.json"), |f| {
        f["profiles"]["fp32"]["factors"][2] = serde_json::json!(3.0);
    });
    let (_, md, err) = memcal(repo, &["diff", "--base", "HEAD"]);
    assert!(md.contains("### Card verdicts that changed"), "{md}{err}");
    // Summary, factors, families, and the verdict table(s).
    assert!(check_tables(&md) >= 4, "{md}");
    // The check itself fails on the old comment's broken table (6 header cells, 7 a row).
    let broken =
        "| a | b | c | d | e | f |\n|---|---|---|---|---|---|\n| 1 | 2 | 3 | 4 | 5 | 6 | 7 |\n";
    assert!(std::panic::catch_unwind(|| check_tables(broken)).is_err());
}

#[test]
fn a_fabricated_or_tampered_history_entry_fails_the_audit() {
    let (_tmp, repo, _) = fitted_repo();
    let repo = repo.as_path();
    let data = repo.join("data");
    let history = data.join("factors-history.json");
    let honest = std::fs::read_to_string(&history).unwrap();
    // A hand-written entry: factor 42, 99,999 rows, 0.1% held-out error, fixed after the fit
    // (and not in the future: that is refused outright).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let forged_at = memcal::clock::now();
    edit_json(&history, |h| {
        let mut e = h["entries"][0].clone();
        e["fixed_at"] = serde_json::json!(forged_at);
        e["profiles"]["fp32"][0] = serde_json::json!(42.0);
        e["rows"] = serde_json::json!(99999);
        e["held_out_median"] = serde_json::json!(0.001);
        h["entries"].as_array_mut().unwrap().push(e);
    });
    common::git(repo, &["commit", "-qam", "a fabricated entry"]);
    let (code, out, _) = memcal(repo, &["audit"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "entry 2 (fixed_at {forged_at}): no version of data/factors.json"
        )),
        "{out}"
    );
    // The page shows no value of it, and says it fails.
    let page = history_page(repo);
    assert!(page.contains("fails (1 difference;"), "{page}");
    assert!(
        !page.contains("42.0000") && !page.contains("99,999"),
        "{page}"
    );
    assert!(page.contains("audited"), "{page}");

    // A tampered real entry: each field named.
    std::fs::write(&history, honest).unwrap();
    edit_json(&history, |h| {
        h["entries"][0]["profiles"]["fp32"][1] = serde_json::json!(42.0);
        h["entries"][0]["held_out_median"] = serde_json::json!(0.001);
    });
    let (code, out, _) = memcal(repo, &["audit"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("entry 1 (fixed_at")
            && out.contains("field `profiles.fp32.layer_outputs` is 42 in the log"),
        "{out}"
    );
    assert!(
        out.contains("field `held_out_median` is 0.001 in the log"),
        "{out}"
    );
}

#[test]
fn a_change_within_the_noise_is_reported_in_criterions_words_and_does_not_fail() {
    let (_tmp, repo, _) = fitted_repo();
    let repo = repo.as_path();
    let data = repo.join("data");
    // A nudge of one factor: some rows' errors rise, others' fall.
    edit_json(&data.join("factors.json"), |f| {
        let v = f["profiles"]["fp32"]["factors"][0].as_f64().unwrap();
        f["profiles"]["fp32"]["factors"][0] = serde_json::json!(v * 0.99);
    });
    let (code, out, err) = memcal(
        repo,
        &[
            "diff",
            "--base",
            "HEAD",
            "--json",
            "--fail-on",
            "median-worse=fp32:plan-as-shipped:0",
        ],
    );
    let d: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{err}"));
    let m = d["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["method"] == "plan-as-shipped" && m["profile"] == "fp32")
        .unwrap()
        .clone();
    let paired = &m["paired"];
    assert!(
        paired["rose"].as_u64().unwrap() > 0 && paired["fell"].as_u64().unwrap() > 0,
        "{m}"
    );
    assert_eq!(m["change"], "within-noise", "{m}");
    assert!(m["median_change_points"].as_f64().unwrap() > 0.0, "{m}");
    assert_eq!(code, 0, "a rise within the noise never fails: {m}");
    let (_, md, _) = memcal(repo, &["diff", "--base", "HEAD"]);
    // The bottom line first; the methods that did not move in one line.
    assert!(md.contains("**fp32: changes within noise.**"), "{md}");
    assert!(
        md.contains("within noise") && md.contains("Unchanged (6): "),
        "{md}"
    );
    assert!(!md.contains("no change detected"), "{md}");
}

/// Adds a row at batch 512 of the first graph, fits again one second after the first fit
/// (fixing times are to the second) and commits: the log then has two entries, both audited.
/// Returns the two entries' `fixed_at`, oldest first.
fn fit_again(repo: &Path, graphs: &[Graph]) -> (String, String) {
    let data = repo.join("data");
    let g = &graphs[0];
    let f = features(g, 512, Precision::Fp32).as_f64();
    let peak: f64 = TRUTH.iter().zip(f).map(|(a, x)| a * x).sum();
    write_row(&data, &row(g, 512, peak as u64));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (code, _, err) = memcal(repo, &["fit", "--write-factors", "--out", "../cal.json"]);
    assert_eq!(code, 0, "{err}");
    common::git(repo, &["add", "."]);
    common::git(repo, &["commit", "-qm", "second fit"]);
    let (code, out, err) = memcal(repo, &["audit"]);
    assert_eq!(code, 0, "{out}{err}");
    let h: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("factors-history.json")).unwrap())
            .unwrap();
    let at = |k: usize| h["entries"][k]["fixed_at"].as_str().unwrap().to_string();
    assert_eq!(h["entries"].as_array().unwrap().len(), 2);
    (at(0), at(1))
}

/// Rust's debug forms in a message: `Some(`, `None`, a tuple of numbers `(1.16, 1.1)`.
fn debug_forms(text: &str) -> Vec<String> {
    let mut found: Vec<String> = ["Some(", "None", "Ok(", "Err("]
        .iter()
        .filter(|p| text.contains(*p))
        .map(|p| p.to_string())
        .collect();
    for (k, _) in text.match_indices('(') {
        let rest = &text[k + 1..];
        let Some(end) = rest.find(')') else { continue };
        let inside = &rest[..end];
        let parts: Vec<&str> = inside.split(", ").collect();
        if parts.len() > 1 && parts.iter().all(|p| p.parse::<f64>().is_ok()) {
            found.push(format!("({inside})"));
        }
    }
    found
}

/// Counts agree with their nouns: no "1 problems", "1 differences", "1 entries".
fn bad_plurals(text: &str) -> Vec<String> {
    ["problems", "differences", "entries", "versions"]
        .iter()
        .filter(|noun| {
            text.match_indices(&format!(" {noun}")).any(|(k, _)| {
                let before = &text[..k];
                before.ends_with("(1") || before.ends_with(" 1")
            })
        })
        .map(|n| format!("1 {n}"))
        .collect()
}

#[test]
fn a_swapped_history_fails_the_audit_and_the_page_says_so() {
    let (_tmp, repo, graphs) = fitted_repo();
    let repo = repo.as_path();
    let (first, second) = fit_again(repo, &graphs);
    let history = repo.join("data/factors-history.json");
    edit_json(&history, |h| {
        h["entries"].as_array_mut().unwrap().swap(0, 1)
    });
    let (code, out, err) = memcal(repo, &["audit"]);
    assert_eq!(code, 1, "a swapped history fails: {out}{err}");
    let want = format!(
        "data/factors-history.json entry 2 (fixed_at {first}): out of order: it is not later \
         than data/factors-history.json entry 1 (fixed_at {second})"
    );
    assert!(out.contains(&want), "{out}");
    assert!(out.contains("audit: FAILS (1 problem)\n"), "{out}");
    assert!(
        debug_forms(&out).is_empty(),
        "{:?}\n{out}",
        debug_forms(&out)
    );
    // The same as JSON, valid against the schema, failing.
    let (code, json, _) = memcal(repo, &["audit", "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    common::assert_schema("audit", &v);
    assert_eq!(v["format"], "memcal-audit/1");
    assert!(
        failures(&json).iter().any(|f| f.starts_with(&want)),
        "{json}"
    );
    assert_eq!(v["history"][1]["differences"].as_array().unwrap().len(), 1);
    assert!(v["history"][0]["differences"]
        .as_array()
        .unwrap()
        .is_empty());

    // The page lists the fixings newest first and marks the misordered entry as failing.
    let page = history_page(repo);
    let (newer, older) = (page.find(&second).unwrap(), page.find(&first).unwrap());
    assert!(newer < older, "newest first: {page}");
    assert!(page.contains("fails (1 difference;"), "{page}");
    assert!(page.contains("out of order"), "{page}");
}

#[test]
fn audit_messages_are_words_and_numbers_with_their_plurals() {
    let (_tmp, repo, graphs) = fitted_repo();
    let repo = repo.as_path();
    let (first, _) = fit_again(repo, &graphs);
    let data = repo.join("data");
    let history = data.join("factors-history.json");
    // Every kind of failure at once: each field of an entry tampered with (a string, a count, a
    // multiplier, a profile's factors gone, a profile's own multipliers and fixing time added,
    // a median removed and one changed), a fabricated entry, an edit of the factors file that
    // keeps its fixing time (a version failure, and the current factors do not reproduce).
    edit_json(&history, |h| {
        let e = &mut h["entries"][0];
        e["tool_version"] = serde_json::json!("memcal 9.9.9");
        e["rows"] = serde_json::json!(7);
        e["q90"] = serde_json::json!(1.5);
        e["profiles"].as_object_mut().unwrap().remove("fp32");
        e["upper"] = serde_json::json!({"bf16-autocast": {"q90": 1.1, "q95": 1.1617017007889747}});
        e["profile_fixed_at"] = serde_json::json!({"bf16-autocast": first});
        e["held_out_median"] = serde_json::Value::Null;
        e["in_sample_median"] = serde_json::json!(0.05);
    });
    std::thread::sleep(std::time::Duration::from_millis(1100));
    edit_json(&history, |h| {
        let mut e = h["entries"][1].clone();
        e["fixed_at"] = serde_json::json!(memcal::clock::now());
        h["entries"].as_array_mut().unwrap().push(e);
    });
    edit_json(&data.join("factors.json"), |f| {
        f["profiles"]["fp32"]["factors"][0] = serde_json::json!(3.25);
    });
    let (code, out, err) = memcal(repo, &["audit"]);
    assert_eq!(code, 1, "{out}{err}");
    for want in [
        "field `tool_version` is `memcal 9.9.9` in the log but `",
        "field `rows` is 7 in the log but ",
        "field `q90` is 1.5 in the log but ",
        "field `profiles.fp32` is none in the log but [",
        "field `upper.bf16-autocast` is q90 1.1 / q95 1.1617017007889747 in the log but ",
        &format!("field `profile_fixed_at.bf16-autocast` is {first} in the log but "),
        "field `held_out_median` is none in the log but the rows at commit ",
        "field `in_sample_median` is 0.05 in the log but the rows at commit ",
        "entry 3 (fixed_at ",
        "no version of data/factors.json in the git history or the working tree has this",
        "field `profiles.fp32.",
        "current data/factors.json: profiles.fp32.factors: ",
    ] {
        assert!(out.contains(want), "missing `{want}`:\n{out}");
    }
    assert!(
        debug_forms(&out).is_empty(),
        "{:?}\n{out}",
        debug_forms(&out)
    );
    assert!(
        bad_plurals(&out).is_empty(),
        "{:?}\n{out}",
        bad_plurals(&out)
    );
    let (code, json, _) = memcal(repo, &["audit", "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    common::assert_schema("audit", &v);
    let n = failures(&json).len();
    assert!(n > 1);
    assert!(
        out.contains(&format!("audit: FAILS ({n} problems)")),
        "{out}"
    );
    for f in failures(&json) {
        assert!(debug_forms(&f).is_empty(), "{f}");
    }
    // The page says the same in words.
    let page = history_page(repo);
    assert!(debug_forms(&page).is_empty(), "{:?}", debug_forms(&page));
    assert!(bad_plurals(&page).is_empty(), "{:?}", bad_plurals(&page));
}

#[test]
fn a_history_entry_fixed_in_the_future_is_refused() {
    let (_tmp, repo, _) = fitted_repo();
    let repo = repo.as_path();
    let history = repo.join("data/factors-history.json");
    edit_json(&history, |h| {
        h["entries"][0]["fixed_at"] = serde_json::json!("2999-01-01T00:00:00Z");
    });
    for args in [&["audit"][..], &["build", "--out", "../site"][..]] {
        let (code, _, err) = memcal(repo, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("factors-history.json: field `entries[0].fixed_at`: `2999-01-01T00:00:00Z` is in the future"),
            "{args:?}: {err}"
        );
    }
}
