//! "One place per op": every variant of `Op` is named (`Op::X`) in at most [`LIMIT`] files of
//! `src/` outside `src/zoo/` and `src/import/` (the enum's file, its family's file under
//! `src/ops/family/`, the registry; `docs/ops.md`). A ratchet: lower the limit as ops move
//! into their families, never raise it. On failure it prints each variant's count and files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most files of `src/` a variant may be named in.
const LIMIT: usize = 3;

/// The variants of `pub enum Op` in `src/ops/mod.rs`: its lines indented by four spaces that
/// begin with a capital letter.
fn variants(src: &str) -> Vec<String> {
    let start = src
        .find("pub enum Op {")
        .expect("src/ops/mod.rs declares `pub enum Op`");
    let body = &src[start + "pub enum Op {".len()..];
    let end = body.find("\n}").expect("the enum ends");
    body[..end]
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("    ")?;
            let first = rest.chars().next()?;
            if !first.is_ascii_uppercase() {
                return None;
            }
            Some(
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect(),
            )
        })
        .collect()
}

/// Every `.rs` file under `dir`, outside `src/zoo` and `src/import`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("readable src/") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            if p.ends_with("src/zoo") || p.ends_with("src/import") {
                continue;
            }
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether `text` names `Op::{v}` as a whole word.
fn names(text: &str, v: &str) -> bool {
    let pat = format!("Op::{v}");
    text.match_indices(&pat).any(|(i, _)| {
        let after = text[i + pat.len()..].chars().next();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[test]
fn every_op_is_named_in_few_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(root.join("src/ops/mod.rs")).expect("src/ops/mod.rs");
    let vars = variants(&src);
    assert!(vars.len() > 40, "found only {} variants of Op", vars.len());
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(root).unwrap_or(f).display().to_string();
            (rel, std::fs::read_to_string(f).expect("a readable source"))
        })
        .collect();
    let mut table: BTreeMap<usize, Vec<(String, Vec<String>)>> = BTreeMap::new();
    for v in &vars {
        let named: Vec<String> = texts
            .iter()
            .filter(|(_, t)| names(t, v))
            .map(|(f, _)| f.clone())
            .collect();
        table
            .entry(named.len())
            .or_default()
            .push((v.clone(), named));
    }
    let worst = *table.keys().last().expect("some variant");
    if worst > LIMIT {
        let mut msg = format!("a variant of Op is named in more than {LIMIT} files of src/:\n");
        for (n, vs) in table.iter().rev() {
            for (v, fs) in vs {
                msg.push_str(&format!("{n:>3} {v}: {}\n", fs.join(", ")));
            }
        }
        panic!("{msg}");
    }
}
