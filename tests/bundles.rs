//! Row bundles: `runs/**.jsonl` files holding one `memcal-run/1` row per line, read by
//! `engine::load` next to row files. Each line is checked as a row file is, named `file:line`,
//! hashed over its bytes with its newline, and accounted for.

use memcal::engine::{self, calibrate, synthetic, Digest, ExclusionReason};
use std::path::Path;

const TRUTH: [f64; 6] = [1.2, 0.9, 1.3, 3.6, 5.2, 2.0];

/// A data folder with the same `rows` rows as files and as bundles of `per` rows.
fn both(rows: usize, per: usize) -> (tempfile::TempDir, tempfile::TempDir) {
    let files = tempfile::tempdir().unwrap();
    let bundles = tempfile::tempdir().unwrap();
    synthetic::write_data_folder(files.path(), rows, 10, TRUTH, 5).unwrap();
    synthetic::write_data_folder_as(
        bundles.path(),
        rows,
        10,
        TRUTH,
        5,
        synthetic::Layout::Bundles(per),
    )
    .unwrap();
    (files, bundles)
}

fn bundle_text(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join("runs").join(name)).unwrap()
}

#[test]
fn a_bundle_loads_the_same_rows_as_row_files() {
    let (files, bundles) = both(2_345, 1_000);
    let names: Vec<String> = std::fs::read_dir(bundles.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let a = engine::load(files.path()).unwrap();
    let b = engine::load(bundles.path()).unwrap();
    assert_eq!(a.rows.len(), 2_345);
    assert_eq!(b.rows.len(), 2_345);
    // Bundle order is file order, then line order: the same runs in the same order.
    for (x, y) in a.rows.iter().zip(&b.rows) {
        assert_eq!(x.run_id, y.run_id);
        assert_eq!(x.features, y.features);
        assert_eq!(x.measured_bytes, y.measured_bytes);
        assert_eq!(x.timestamp, y.timestamp);
        assert_eq!(x.after_fit, y.after_fit);
    }
    assert_eq!(b.rows[0].file.as_str(), "runs/b0000000.jsonl:1");
    assert_eq!(b.rows[1_000].file.as_str(), "runs/b0001000.jsonl:1");
    assert_eq!(b.rows[2_344].file.as_str(), "runs/b0002000.jsonl:345");
    // A line's digest is over its bytes with its newline.
    let text = bundle_text(bundles.path(), "b0001000.jsonl");
    let line = text.split_inclusive('\n').nth(6).unwrap();
    assert_eq!(b.rows[1_006].file_sha256, Digest::of(line.as_bytes()));
    // The engine sees the same rows: the same fit and the same counts.
    let (ca, cb) = (calibrate(&a), calibrate(&b));
    assert_eq!(ca.totals, cb.totals);
    assert_eq!(ca.fits, cb.fits);
}

#[test]
fn the_last_line_may_lack_its_newline() {
    let (_, bundles) = both(50, 1_000);
    let p = bundles.path().join("runs/b0000000.jsonl");
    let text = std::fs::read_to_string(&p).unwrap();
    let last = text.trim_end().rsplit('\n').next().unwrap().to_string();
    std::fs::write(&p, text.trim_end()).unwrap();
    let ds = engine::load(bundles.path()).unwrap();
    assert_eq!(ds.rows.len(), 50);
    assert_eq!(ds.rows[49].file_sha256, Digest::of(last.as_bytes()));
}

fn load_err(dir: &Path) -> String {
    engine::load(dir).unwrap_err().to_string()
}

#[test]
fn a_bad_line_is_named_by_file_and_line_and_field() {
    let (_, bundles) = both(3_000, 1_000);
    let p = bundles.path().join("runs/b0002000.jsonl");
    let text = bundle_text(bundles.path(), "b0002000.jsonl");
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    let bad = lines[9].replace("\"precision\":\"fp32\"", "\"precision\":\"fp8\"");
    lines[9] = &bad;
    std::fs::write(&p, lines.concat()).unwrap();
    let e = load_err(bundles.path());
    assert!(
        e.contains("runs/b0002000.jsonl:10: field `precision`"),
        "{e}"
    );
    // A type error points into the line by column, not "line 1".
    let bad = lines[3].replace("\"batch\":", "\"batch\":-");
    lines[3] = &bad;
    std::fs::write(&p, lines.concat()).unwrap();
    let e = load_err(bundles.path());
    assert!(e.contains("b0002000.jsonl:4: field `batch`"), "{e}");
    assert!(
        e.contains(" at column ") && !e.contains("line 1 column"),
        "{e}"
    );
    // A line cut short.
    let cut = &lines[0][..100];
    lines[0] = cut;
    std::fs::write(&p, lines.join("\n")).unwrap();
    let e = load_err(bundles.path());
    assert!(
        e.contains("b0002000.jsonl:1: malformed run row JSON"),
        "{e}"
    );
    assert!(e.contains("the line is cut short"), "{e}");
    // A line that parses but names a graph the folder lacks (an error of the join, after the
    // parse) is named by its line too.
    let text = bundle_text(bundles.path(), "b0001000.jsonl");
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    let bad = lines[41].replace("\"name\":\"fam", "\"name\":\"gone");
    lines[41] = &bad;
    std::fs::write(bundles.path().join("runs/b0001000.jsonl"), lines.concat()).unwrap();
    let e = load_err(bundles.path());
    assert!(
        e.contains("runs/b0001000.jsonl:42: field `graph.name`: names graph `gone"),
        "{e}"
    );
}

#[test]
fn the_first_bad_line_in_path_order_is_reported() {
    let (_, bundles) = both(4_000, 500);
    let late = bundles.path().join("runs/b0003500.jsonl");
    let early = bundles.path().join("runs/b0000500.jsonl");
    for (p, n) in [(&late, 3), (&early, 7)] {
        let text = std::fs::read_to_string(p).unwrap();
        let mut lines: Vec<String> = text.split_inclusive('\n').map(String::from).collect();
        lines[n - 1] = lines[n - 1].replace("memcal-run/1", "memcal-run/2");
        std::fs::write(p, lines.concat()).unwrap();
    }
    let e = load_err(bundles.path());
    assert!(e.contains("b0000500.jsonl:7: field `format`"), "{e}");
}

#[test]
fn empty_lines_and_empty_bundles_are_errors() {
    let (_, bundles) = both(20, 1_000);
    let p = bundles.path().join("runs/b0000000.jsonl");
    let text = bundle_text(bundles.path(), "b0000000.jsonl");
    // An empty line in the middle (nothing is skipped silently).
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    lines.insert(5, "\n");
    std::fs::write(&p, lines.concat()).unwrap();
    let e = load_err(bundles.path());
    assert!(
        e.contains("b0000000.jsonl:6: malformed run row bundle: an empty line"),
        "{e}"
    );
    // A blank line (spaces, or a carriage return) at the end is one too.
    std::fs::write(&p, format!("{text}  \r\n")).unwrap();
    let e = load_err(bundles.path());
    assert!(
        e.contains("b0000000.jsonl:21: malformed run row bundle"),
        "{e}"
    );
    // An empty bundle.
    std::fs::write(&p, "").unwrap();
    let e = load_err(bundles.path());
    assert!(
        e.contains("b0000000.jsonl: malformed run row bundle: the file is empty"),
        "{e}"
    );
    // Not UTF-8: the line is named.
    let mut bytes = text.into_bytes();
    let third = bytes
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .nth(1)
        .unwrap()
        .0;
    bytes[third + 20] = 0xff;
    std::fs::write(&p, bytes).unwrap();
    let e = load_err(bundles.path());
    assert!(
        e.contains("b0000000.jsonl:3: malformed run row: not UTF-8"),
        "{e}"
    );
}

#[test]
fn a_duplicate_run_id_across_a_bundle_and_a_file_is_excluded_and_accounted_for() {
    let (files, bundles) = both(30, 1_000);
    // The bundle's line 12 also as a row file that sorts after the bundle, and line 9 again
    // as line 31 of the bundle.
    let text = bundle_text(bundles.path(), "b0000000.jsonl");
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    std::fs::create_dir_all(bundles.path().join("runs/z")).unwrap();
    std::fs::write(bundles.path().join("runs/z/again.json"), lines[11]).unwrap();
    std::fs::write(
        bundles.path().join("runs/b0000000.jsonl"),
        format!("{text}{}", lines[8]),
    )
    .unwrap();
    let ds = engine::load(bundles.path()).unwrap();
    assert_eq!(ds.rows.len(), 32);
    let cal = calibrate(&ds);
    let dups: Vec<_> = cal
        .exclusions
        .iter()
        .filter(|e| e.reason == ExclusionReason::DuplicateRunId)
        .collect();
    assert_eq!(dups.len(), 2, "{dups:?}");
    // The later one by path (then by line number) is the one excluded.
    assert_eq!(dups[0].file, "runs/b0000000.jsonl:31");
    assert_eq!(
        dups[0].detail,
        "run id also in runs/b0000000.jsonl:9, which comes first"
    );
    assert_eq!(dups[1].file, "runs/z/again.json");
    assert_eq!(
        dups[1].detail,
        "run id also in runs/b0000000.jsonl:12, which comes first"
    );
    // Nothing lost: every line and file is a row in, counted once.
    assert_eq!(cal.totals.inputs, 32);
    assert!(cal.totals.balanced);
    // The file layout of the same rows has none.
    let cal = calibrate(&engine::load(files.path()).unwrap());
    assert_eq!(cal.totals.inputs, 30);
}

#[test]
fn line_numbers_order_numerically_not_as_text() {
    // Line 10 of a bundle comes after line 9 (as text, ":10" < ":9"): a duplicate on lines 9
    // and 10 excludes line 10.
    let (_, bundles) = both(12, 1_000);
    let p = bundles.path().join("runs/b0000000.jsonl");
    let text = bundle_text(bundles.path(), "b0000000.jsonl");
    let mut lines: Vec<String> = text.split_inclusive('\n').map(String::from).collect();
    lines[9] = lines[8].clone();
    std::fs::write(&p, lines.concat()).unwrap();
    let cal = calibrate(&engine::load(bundles.path()).unwrap());
    let dup: Vec<_> = cal
        .exclusions
        .iter()
        .filter(|e| e.reason == ExclusionReason::DuplicateRunId)
        .collect();
    assert_eq!(dup.len(), 1);
    assert_eq!(dup[0].file, "runs/b0000000.jsonl:10");
}
