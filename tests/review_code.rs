//! `memcal diff` on a change of code, not of data: a temporary repository made from this one's
//! committed files (its CPU rows only, to stay quick), whose base commit plants a change in a
//! baseline formula (accelerate's training estimate, x100) and in the simulator's generic rule
//! (every generic op holds one more output-sized temporary in forward), and whose working tree
//! is this memcal's code again. The base is built with its own code (the debug profile, cached
//! under the test target folder), so the report must show accelerate's median moving, with the
//! sign of the change, and name the files and functions, and the ATen ops whose rule changed.
//! Then a base that does not compile: the first line says so and only the data is compared.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn sh(repo: &Path, cmd: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(repo)
        .status()
        .unwrap()
        .success();
    assert!(ok, "{cmd}");
}

fn diff(repo: &Path, cache: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_memcal"))
        .current_dir(repo)
        .env("MEMCAL_BASE_PROFILE", "dev")
        // The build the base's memcal gets (cargo reads these): no debug info, not incremental,
        // so the one build is quicker.
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_INCREMENTAL", "0")
        .args(["diff", "--base", "HEAD", "--base-cache"])
        .arg(cache)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Replaces `from` by `to` in `file`, which must hold `from` exactly once.
fn plant(repo: &Path, file: &str, from: &str, to: &str) {
    let path = repo.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches(from).count(), 1, "{file}: `{from}`");
    std::fs::write(&path, text.replace(from, to)).unwrap();
}

/// This repository's committed files, its CPU rows only, as a fresh one-commit repository.
fn small_clone() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let here = env!("CARGO_MANIFEST_DIR");
    sh(
        &repo,
        &format!(
            "git -C '{here}' archive --format=tar HEAD -- . ':(exclude)site' ':(exclude)exporter' ':(exclude)measurement/campaigns' | tar -x"
        ),
    );
    sh(
        &repo,
        "for d in data/runs/*; do [ \"$d\" = data/runs/cpu ] || rm -rf \"$d\"; done",
    );
    common::git_dated(&repo, &["init", "-q"]);
    common::git_dated(&repo, &["add", "-A"]);
    common::git_dated(&repo, &["commit", "-qm", "small"]);
    (tmp, repo)
}

#[test]
fn a_change_of_code_is_scored_with_each_sides_own_code_and_named() {
    let (_tmp, repo) = small_clone();
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("memcal-base-cache");
    // The base: the planted change, committed; the working tree: this memcal's code again.
    plant(
        &repo,
        "src/baselines.rs",
        "Precision::Fp32 => (total_bytes.saturating_mul(4), \"float32\"),",
        "Precision::Fp32 => (total_bytes.saturating_mul(400), \"float32\"),",
    );
    plant(
        &repo,
        "src/simulate/generic.rs",
        "let mut forward_transient = 0u64;",
        "let mut forward_transient = y;",
    );
    common::git_dated(&repo, &["commit", "-qam", "planted"]);
    common::git_dated(&repo, &["checkout", "HEAD~1", "--", "src"]);

    let (code, out, err) = diff(&repo, &cache, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let d: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{err}"));
    common::assert_schema("diff", &d);
    assert_eq!(d["code"]["compared"], "code-and-data", "{}", d["code"]);
    assert!(d["code"]["base_build"].is_object(), "{}", d["code"]);
    // The files and the functions the change is in.
    let files = d["code"]["changed_files"].as_array().unwrap();
    let functions = |path: &str| -> String {
        files
            .iter()
            .find(|f| f["path"] == path)
            .unwrap_or_else(|| panic!("{path} not named: {files:?}"))["functions"]
            .to_string()
    };
    assert!(functions("src/baselines.rs").contains("pub fn accelerate"));
    assert!(functions("src/simulate/generic.rs").contains("fn rule_for_inputs"));
    // Base predicted 100 times accelerate's estimate: head, the right formula, improved.
    let accelerate = d["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["method"] == "accelerate" && m["profile"] == "fp32")
        .unwrap();
    assert!(
        accelerate["median_change_points"].as_f64().unwrap() < -100.0,
        "{accelerate}"
    );
    assert_eq!(accelerate["change"], "improved", "{accelerate}");
    let fp32 = &d["bottom_lines"][0];
    assert_eq!(fp32["profile"], "fp32");
    assert!(
        fp32["improved"]
            .as_array()
            .unwrap()
            .contains(&"accelerate".into()),
        "{fp32}"
    );
    // The data did not change: the same rows, and the as-shipped plan (no code changed under
    // it) did not move.
    assert_eq!(d["rows_added"].as_array().unwrap().len(), 0);
    let shipped = d["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["method"] == "plan-as-shipped" && m["profile"] == "fp32")
        .unwrap();
    assert_eq!(shipped["change"], "no-change-detected", "{shipped}");
    // The generic rule's change is named op by op, on torch's OpInfo samples.
    let rules = d["rules_changed"].as_array().unwrap();
    assert!(rules.len() > 10, "{rules:?}");

    // Again, as Markdown: the base build comes from the cache.
    let (code, md, err) = diff(&repo, &cache, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(md.contains("found in the cache"), "{md}");
    assert!(
        md.contains("- `src/baselines.rs`: `pub fn accelerate"),
        "{md}"
    );
    assert!(md.contains("### Simulator rules that changed"), "{md}");
    let bottom = md
        .find("✅ **fp32: improves.**")
        .unwrap_or_else(|| panic!("{md}"));
    assert!(bottom < md.find("Scored:").unwrap(), "{md}");

    // A base whose code does not compile: said first, and only the data is compared.
    plant(
        &repo,
        "src/baselines.rs",
        "pub fn accelerate(",
        "pub fn accelerate_is_broken() -> u64 { \"not a number\" }\npub fn accelerate(",
    );
    common::git_dated(&repo, &["commit", "-qam", "broken"]);
    common::git_dated(&repo, &["checkout", "HEAD~2", "--", "src"]);
    let (code, md, err) = diff(&repo, &cache, &[]);
    assert_eq!(code, 0, "{err}");
    let first = md.lines().next().unwrap();
    assert!(first.starts_with("⚠ **Data only:**"), "{md}");
    assert!(first.contains("cargo build failed"), "{first}");
    assert!(md.contains("**fp32: unchanged.**"), "{md}");
}
