//! Helpers shared by the integration tests (each test file is its own crate: `mod common;`).
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// Runs `git -C repo ARGS` as a fixed author and asserts that it succeeded.
pub fn git(repo: &Path, args: &[&str]) {
    git_as(repo, args, None);
}

/// [`git`] with a fixed date too, so the same files make the same commit.
pub fn git_dated(repo: &Path, args: &[&str]) {
    git_as(repo, args, Some("2026-01-01T00:00:00Z"));
}

fn git_as(repo: &Path, args: &[&str], date: Option<&str>) {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid");
    if let Some(d) = date {
        cmd.env("GIT_AUTHOR_DATE", d).env("GIT_COMMITTER_DATE", d);
    }
    assert!(cmd.status().unwrap().success(), "git {args:?}");
}

/// Copies the folder `from` into the existing folder `to`, recursively.
pub fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// The problems of `value` against `docs/schemas/<name>.schema.json`, in words (empty: valid).
pub fn schema_errors(name: &str, value: &serde_json::Value) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/schemas")
        .join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    let validator = jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("{} is not a valid schema: {e}", path.display()));
    validator
        .iter_errors(value)
        .map(|e| format!("{e} (at {})", e.instance_path))
        .collect()
}

/// Asserts that `value` is valid against `docs/schemas/<name>.schema.json`.
pub fn assert_schema(name: &str, value: &serde_json::Value) {
    let errors = schema_errors(name, value);
    assert!(errors.is_empty(), "{name}: {errors:#?}");
}
