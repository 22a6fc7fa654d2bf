//! Property-based tests (proptest, stable Rust) of the loaders and the engine.
//!
//! Fuzzing: valid graphs (the bad-input corpus's tiny MLP and every reduced `-r1` zoo graph) and
//! valid run rows are mutated (a field dropped, a value replaced by another JSON type, a number
//! perturbed to 0, negative, huge, fractional or past u64, nodes or phases reordered, an array
//! entry duplicated, the bytes cut short or one byte flipped) and fed to `Graph::from_bytes`,
//! `features`, `plan`, `parse_row` and `engine::load` + `calibrate`: never a panic, always a result
//! or an error that names the file.
//!
//! Invariants: every input row is accounted for exactly once (fitted + held out by regime + after
//! the fit + excluded = inputs, and each row file appears once among the usable rows and the
//! exclusions); scaling every byte quantity (features, peaks, capacities, baselines, the small-run
//! threshold) by one integer constant leaves every relative error unchanged (within 1e-9);
//! permuting the rows leaves the calibration JSON byte-identical.
//!
//! Case counts are modest so the file runs in well under 30 s in a debug build.

use memcal::engine::{self, synthetic, Dataset};
use memcal::factors::FactorsFile;
use memcal::features::{self, Precision};
use memcal::graph::Graph;
use memcal::run::RunStatus;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A complete, valid data folder of the corpus (one graph `tiny`, one completed row).
fn valid_dir() -> PathBuf {
    repo().join("tests/bad_input/rows/duplicate_run_id")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The seed graphs: the tiny MLP and every `-r1` zoo variant (one per family, all op kinds).
fn seed_graphs() -> &'static [Value] {
    static GRAPHS: std::sync::OnceLock<Vec<Value>> = std::sync::OnceLock::new();
    GRAPHS.get_or_init(|| {
        let mut v = vec![read_json(&valid_dir().join("graphs/tiny.json"))];
        let mut zoo: Vec<PathBuf> = std::fs::read_dir(repo().join("data/graphs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_str().unwrap().ends_with("-r1.json"))
            // The generate campaign's graphs have the sequence axis "T" (no fixed length).
            .filter(|p| !p.file_name().unwrap().to_str().unwrap().starts_with("gen-"))
            .collect();
        zoo.sort();
        v.extend(zoo.iter().map(|p| read_json(p)));
        v
    })
}

/// The seed rows: a completed row and an out-of-memory row of `tiny`.
fn seed_rows() -> Vec<Value> {
    let done = read_json(&valid_dir().join("runs/a/b8.json"));
    let mut oom = done.clone();
    oom["run_id"] = json!("cpu-edge/tiny/b8/cap2");
    oom["regime"] = json!("cpu-edge");
    oom["status"] = json!("oom");
    oom["device"]["emulated_capacity_bytes"] = json!(2_147_483_648u64);
    oom["oom"] = json!({"phase": "step1.backward", "message": "out of memory"});
    oom.as_object_mut().unwrap().remove("peak");
    vec![done, oom]
}

/// JSON pointer tokens of every value in a document (the root excluded).
fn paths(v: &Value) -> Vec<Vec<String>> {
    fn walk(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        let children: Vec<(String, &Value)> = match v {
            Value::Object(m) => m.iter().map(|(k, c)| (k.clone(), c)).collect(),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, c)| (i.to_string(), c))
                .collect(),
            _ => Vec::new(),
        };
        for (k, c) in children {
            at.push(k);
            out.push(at.clone());
            walk(c, at, out);
            at.pop();
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

fn pointer(tokens: &[String]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// One structural mutation.
#[derive(Debug, Clone, Copy)]
enum Mutation {
    /// Remove the field or array entry.
    Drop(Index),
    /// Replace the value with one of another JSON type.
    SwapType(Index, Index),
    /// Replace a number (or string) by a nearby or absurd one.
    Perturb(Index, Index),
    /// Reverse or rotate the graph's nodes / the row's phases.
    Reorder(Index),
    /// Duplicate an array entry.
    Duplicate(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Drop),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::SwapType(a, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Perturb(a, b)),
        any::<Index>().prop_map(Mutation::Reorder),
        any::<Index>().prop_map(Mutation::Duplicate),
    ]
}

/// What happens to the serialised bytes afterwards.
#[derive(Debug, Clone, Copy)]
enum Bytes {
    Keep,
    Truncate(Index),
    Flip(Index, u8),
}

fn bytes_edit() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        6 => Just(Bytes::Keep),
        1 => any::<Index>().prop_map(Bytes::Truncate),
        1 => (any::<Index>(), 1u8..=255).prop_map(|(i, x)| Bytes::Flip(i, x)),
    ]
}

fn apply(v: &mut Value, m: Mutation) {
    let all = paths(v);
    if all.is_empty() {
        return;
    }
    let pick = |i: Index| all[i.index(all.len())].clone();
    match m {
        Mutation::Drop(i) => {
            let p = pick(i);
            let (last, parent) = p.split_last().unwrap();
            match v.pointer_mut(&pointer(parent)) {
                Some(Value::Object(o)) => {
                    o.remove(last);
                }
                Some(Value::Array(a)) => {
                    let k: usize = last.parse().unwrap();
                    a.remove(k);
                }
                _ => {}
            }
        }
        Mutation::SwapType(i, j) => {
            let others = [
                Value::Null,
                json!(true),
                json!(0),
                json!(-1),
                json!("x"),
                json!([]),
                json!({}),
                json!(1.5),
            ];
            *v.pointer_mut(&pointer(&pick(i))).unwrap() = others[j.index(others.len())].clone();
        }
        Mutation::Perturb(i, j) => {
            let target = v.pointer_mut(&pointer(&pick(i))).unwrap();
            match target.clone() {
                Value::Number(n) => {
                    let x = n.as_f64().unwrap_or(0.0);
                    let u = n.as_u64().unwrap_or(0);
                    let choices = [
                        json!(0),
                        json!(-x),
                        json!(u.saturating_add(1)),
                        json!(u.saturating_mul(1000)),
                        json!(u64::MAX),
                        json!(1e300),
                        json!(x + 0.5),
                        // Past u64: serde_json reads it as a float.
                        json!(18_446_744_073_709_551_616.0),
                    ];
                    *target = choices[j.index(choices.len())].clone();
                }
                Value::String(s) => {
                    let choices = [String::new(), format!("{s}x"), s.to_uppercase()];
                    *target = json!(choices[j.index(choices.len())]);
                }
                Value::Bool(b) => *target = json!(!b),
                _ => {}
            }
        }
        Mutation::Reorder(i) => {
            for key in ["nodes", "phases", "inputs"] {
                if let Some(Value::Array(a)) = v.get_mut(key) {
                    if !a.is_empty() {
                        let k = i.index(a.len());
                        if k == 0 {
                            a.reverse();
                        } else {
                            a.rotate_left(k);
                        }
                    }
                }
            }
        }
        Mutation::Duplicate(i) => {
            let arrays: Vec<Vec<String>> = all
                .iter()
                .filter(
                    |p| matches!(v.pointer(&pointer(p)), Some(Value::Array(a)) if !a.is_empty()),
                )
                .cloned()
                .collect();
            if arrays.is_empty() {
                return;
            }
            let p = &arrays[i.index(arrays.len())];
            if let Some(Value::Array(a)) = v.pointer_mut(&pointer(p)) {
                let first = a[0].clone();
                a.push(first);
            }
        }
    }
}

fn mutate(seed: &Value, muts: &[Mutation], edit: Bytes) -> Vec<u8> {
    let mut v = seed.clone();
    for m in muts {
        apply(&mut v, *m);
    }
    let mut bytes = serde_json::to_vec_pretty(&v).unwrap();
    match edit {
        Bytes::Keep => {}
        Bytes::Truncate(i) => bytes.truncate(i.index(bytes.len())),
        Bytes::Flip(i, x) => {
            let k = i.index(bytes.len());
            bytes[k] ^= x;
        }
    }
    bytes
}

fn factors() -> FactorsFile {
    FactorsFile::load(&valid_dir().join("factors.json")).unwrap()
}

/// An error names the file first, then says something.
fn assert_names(e: &memcal::Error, file: &str) {
    let text = e.to_string();
    assert!(text.starts_with(file), "error does not name {file}: {text}");
    assert!(text.len() > file.len() + 10, "terse error: {text}");
    assert_eq!(e.exit_code(), 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// A mutated graph loads (and then features and plans at small and absurd batches) or fails
    /// with an error naming the file.
    #[test]
    fn mutated_graphs_load_or_fail_clearly(
        g in any::<Index>(),
        muts in prop::collection::vec(mutation(), 1..4),
        edit in bytes_edit(),
    ) {
        let seeds = seed_graphs();
        let bytes = mutate(&seeds[g.index(seeds.len())], &muts, edit);
        match Graph::from_bytes(&bytes, Path::new("mutant.json")) {
            Ok(graph) => {
                let f = factors();
                for batch in [1, 3, 1 << 20, u64::MAX] {
                    for p in Precision::ALL {
                        std::hint::black_box(features::features(&graph, batch, p));
                    }
                }
                for batch in [1, 8] {
                    let plan = memcal::plan::plan(&graph, batch, Precision::Fp32, &f, &f.cards);
                    prop_assert!(plan.is_ok(), "{:?}", plan.err());
                }
            }
            Err(e) => assert_names(&e, "mutant.json: "),
        }
    }

    /// A mutated run row parses or fails with an error naming the file.
    #[test]
    fn mutated_rows_parse_or_fail_clearly(
        r in any::<Index>(),
        muts in prop::collection::vec(mutation(), 1..4),
        edit in bytes_edit(),
    ) {
        let seeds = seed_rows();
        let bytes = mutate(&seeds[r.index(seeds.len())], &muts, edit);
        match engine::parse_row(&bytes, Path::new("runs/mutant.json")) {
            Ok(row) => prop_assert!(row.batch > 0),
            Err(e) => assert_names(&e, "runs/mutant.json: "),
        }
    }

    /// Reordering a valid graph's nodes changes neither its loading nor its features.
    #[test]
    fn node_order_does_not_matter(g in any::<Index>(), k in any::<Index>(), batch in 1u64..64) {
        let seeds = seed_graphs();
        let seed = &seeds[g.index(seeds.len())];
        let mut v = seed.clone();
        apply(&mut v, Mutation::Reorder(k));
        let a = Graph::from_bytes(&serde_json::to_vec(seed).unwrap(), Path::new("a.json")).unwrap();
        let b = Graph::from_bytes(&serde_json::to_vec(&v).unwrap(), Path::new("b.json")).unwrap();
        for p in Precision::ALL {
            prop_assert_eq!(
                features::features(&a, batch, p),
                features::features(&b, batch, p)
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// A data folder with valid rows and one or two mutated ones (and sometimes a mutated graph)
    /// loads and calibrates with every row accounted for, or fails naming a file of the folder.
    #[test]
    fn mutated_data_folders_load_or_fail_clearly(
        muts in prop::collection::vec((any::<Index>(), prop::collection::vec(mutation(), 1..3), bytes_edit()), 1..3),
        graph_muts in prop::option::weighted(0.2, prop::collection::vec(mutation(), 1..3)),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        std::fs::create_dir_all(data.join("graphs")).unwrap();
        std::fs::create_dir_all(data.join("runs")).unwrap();
        std::fs::copy(valid_dir().join("factors.json"), data.join("factors.json")).unwrap();
        let tiny = read_json(&valid_dir().join("graphs/tiny.json"));
        let graph_bytes = match &graph_muts {
            Some(m) => mutate(&tiny, m, Bytes::Keep),
            None => std::fs::read(valid_dir().join("graphs/tiny.json")).unwrap(),
        };
        std::fs::write(data.join("graphs/tiny.json"), &graph_bytes).unwrap();
        let seeds = seed_rows();
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(data.join(format!("runs/ok{i}.json")), serde_json::to_vec_pretty(s).unwrap()).unwrap();
        }
        for (i, (r, m, edit)) in muts.iter().enumerate() {
            let bytes = mutate(&seeds[r.index(seeds.len())], m, *edit);
            std::fs::write(data.join(format!("runs/mutant{i}.json")), bytes).unwrap();
        }
        match engine::load(data) {
            Ok(ds) => {
                let cal = engine::calibrate(&ds);
                prop_assert!(cal.totals.balanced);
                prop_assert_eq!(cal.totals.inputs as usize, 2 + muts.len());
                let _ = engine::write_calibration_json(&cal);
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(text.starts_with(data.to_str().unwrap()), "{}", text);
                prop_assert_eq!(e.exit_code(), 2);
            }
        }
    }
}

/// A synthetic dataset with awkward rows mixed in: duplicate run ids, failed runs, changed
/// graphs, unknown regimes and precisions, after-the-fit rows before and after `fixed_at`, zero
/// features, out-of-memory rows.
fn awkward_dataset(rows: usize, families: usize, seed: u64, chaos: &[(Index, u8)]) -> Dataset {
    let truth = [1.2, 0.9, 1.3, 3.6, 5.2, 2.0];
    let mut ds = synthetic::dataset(rows, families, truth, 0.1, seed);
    let n = ds.rows.len();
    for (i, kind) in chaos {
        let k = i.index(n);
        let other = ds.rows[(k + 1) % n].run_id.clone();
        let r = &mut ds.rows[k];
        match kind % 10 {
            0 => r.run_id = other,
            1 => {
                r.status = RunStatus::Error;
                r.measured_bytes = None;
            }
            2 => r.graph_changed = true,
            3 => r.regime = "cuda-free".into(),
            4 => r.precision = Precision::Bf16Autocast,
            5 => {
                r.after_fit = true;
                r.timestamp = "2025-01-01T00:00:00Z".into();
            }
            6 => r.features = Default::default(),
            7 => {
                r.status = RunStatus::Oom;
                r.measured_bytes = None;
                r.capacity_bytes = 1;
            }
            8 => r.graph_mismatch = true,
            _ => r.has_batch_axis = false,
        }
    }
    ds
}

fn calibration_json(ds: &Dataset) -> String {
    engine::write_calibration_json(&engine::calibrate(ds))
}

/// |prediction / measured - 1| per (row file, method), from the calibration JSON.
fn relative_errors(json: &str) -> BTreeMap<(String, String), f64> {
    let v: Value = serde_json::from_str(json).unwrap();
    let mut out = BTreeMap::new();
    for r in v["rows"].as_array().unwrap() {
        let Some(m) = r["measured_bytes"].as_f64() else {
            continue;
        };
        for (method, p) in r["predictions"].as_object().unwrap() {
            let key = (r["file"].as_str().unwrap().to_string(), method.clone());
            out.insert(key, (p.as_f64().unwrap() / m - 1.0).abs());
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// inputs = fitted + held out by regime + after the fit + excluded, and each row file is in
    /// exactly one place: the usable rows or the exclusions.
    #[test]
    fn every_row_is_accounted_for_once(
        rows in 1usize..160,
        families in 1usize..6,
        seed in any::<u64>(),
        chaos in prop::collection::vec((any::<Index>(), any::<u8>()), 0..40),
    ) {
        let ds = awkward_dataset(rows, families, seed, &chaos);
        let cal = engine::calibrate(&ds);
        let t = &cal.totals;
        prop_assert!(t.balanced);
        prop_assert_eq!(t.inputs as usize, ds.rows.len());
        prop_assert_eq!(t.inputs, t.fitted + t.held_out_regime + t.after_fit + t.excluded);
        let v: Value = serde_json::from_str(&engine::write_calibration_json(&cal)).unwrap();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for r in v["rows"].as_array().unwrap().iter().chain(v["exclusions"].as_array().unwrap()) {
            *seen.entry(r["file"].as_str().unwrap().to_string()).or_default() += 1;
        }
        let inputs: BTreeMap<String, usize> =
            ds.rows.iter().map(|r| (r.file.to_string(), 1)).collect();
        prop_assert_eq!(seen, inputs);
        let usable = v["rows"].as_array().unwrap().len() as u64;
        prop_assert_eq!(usable, t.fitted + t.held_out_regime + t.after_fit);
    }

    /// Scaling every byte quantity by the same integer leaves each relative error unchanged.
    ///
    /// A completed row enters the fit as √w · x / m and an out-of-memory row as
    /// (1 + headroom) · x / C. The division of two scaled integers is exact-then-rounded, so it
    /// is bit-identical under any integer scale, but the engine multiplies before it divides,
    /// and that product rounds differently unless the scale is a power of two. The held-out
    /// refits are often under-determined (one family's features span fewer than six directions;
    /// Clarabel stops at `AlmostSolved`), so an ulp there moved a held-out prediction by 6e-6
    /// relative (rows = 42, families = 2, scale = 9). Hence: powers of two on every row; any
    /// other integer on completed rows with small-run weight 1 (where both products are exact).
    #[test]
    fn scaling_bytes_keeps_relative_errors(
        rows in 20usize..200,
        families in 2usize..6,
        seed in any::<u64>(),
        scale in prop_oneof![2u64..1000, (1u32..24).prop_map(|k| 1u64 << k)],
    ) {
        let mut ds = awkward_dataset(rows, families, seed, &[]);
        if !scale.is_power_of_two() {
            ds.rows.retain(|r| r.status != RunStatus::Oom);
            ds.factors.small_runs.weight = 1.0;
        }
        let mut scaled = ds.clone();
        for r in &mut scaled.rows {
            r.measured_bytes = r.measured_bytes.map(|m| m * scale);
            r.capacity_bytes *= scale;
            let f = &mut r.features;
            for v in [
                &mut f.model_state,
                &mut f.layer_outputs,
                &mut f.intermediates,
                &mut f.attention_scores,
                &mut f.recurrent_gates,
                &mut f.largest_tensor,
            ] {
                *v *= scale;
            }
            r.accelerate_bytes *= scale;
            r.textbook_bytes = r.textbook_bytes.map(|t| t * scale);
        }
        scaled.factors.small_runs.threshold_bytes *= scale;
        let a = relative_errors(&calibration_json(&ds));
        let b = relative_errors(&calibration_json(&scaled));
        prop_assert_eq!(a.len(), b.len());
        prop_assert!(!a.is_empty());
        for (k, e) in &a {
            let f = b[k];
            prop_assert!((e - f).abs() <= 1e-9, "{:?}: {} vs {}", k, e, f);
        }
    }

    /// The rows' order does not reach the output: calibration JSON is byte-identical.
    #[test]
    fn row_order_does_not_matter(
        rows in 1usize..160,
        families in 1usize..6,
        seed in any::<u64>(),
        chaos in prop::collection::vec((any::<Index>(), any::<u8>()), 0..20),
        perm_seed in any::<u64>(),
    ) {
        let ds = awkward_dataset(rows, families, seed, &chaos);
        let mut shuffled = ds.clone();
        let mut rng = synthetic::Lcg(perm_seed);
        for i in (1..shuffled.rows.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            shuffled.rows.swap(i, j);
        }
        prop_assert!(calibration_json(&ds) == calibration_json(&shuffled));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Nothing under `runs/` is lost silently: the rows on the built site are the files under
    /// `runs/` less the skips `memcal build` reports (files that are not rows: other names,
    /// dotfiles, no extension), with rows in nested folders and repeated run ids (excluded, but
    /// on the page).
    #[test]
    fn rows_on_the_page_are_the_files_less_the_reported_skips(
        rows in prop::collection::vec((0usize..3, 0u64..4), 0..8),
        others in prop::collection::vec((0usize..3, 0usize..5), 0..5),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(data.join("graphs")).unwrap();
        std::fs::create_dir_all(data.join("runs")).unwrap();
        std::fs::copy(valid_dir().join("factors.json"), data.join("factors.json")).unwrap();
        std::fs::copy(valid_dir().join("graphs/tiny.json"), data.join("graphs/tiny.json")).unwrap();
        std::fs::create_dir_all(data.join("prose")).unwrap();
        for name in memcal::report::PROSE_BLOCKS {
            std::fs::write(data.join(format!("prose/{name}.md")), "").unwrap();
        }
        let seed = read_json(&valid_dir().join("runs/a/b8.json"));
        let dirs = ["", "cpu/", "cpu/deep/"];
        for (k, (dir, id)) in rows.iter().enumerate() {
            let mut r = seed.clone();
            r["run_id"] = json!(format!("cpu-free/tiny/b8-{id}"));
            let p = data.join(format!("runs/{}r{k}.json", dirs[*dir]));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, serde_json::to_vec_pretty(&r).unwrap()).unwrap();
        }
        let names = ["README.md", "notes", ".gitkeep", "row.json.bak", "x.txt"];
        for (k, (dir, name)) in others.iter().enumerate() {
            let p = data.join(format!("runs/{}{k}-{}", dirs[*dir], names[*name]));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "not a row\n").unwrap();
        }
        let files = walkdir::WalkDir::new(data.join("runs"))
            .into_iter()
            .filter(|e| e.as_ref().unwrap().file_type().is_file())
            .count();
        let out = tmp.path().join("site");
        let s = memcal::report::build_site(&data, &out, false).unwrap();
        prop_assert_eq!(s.skipped.len(), others.len());
        prop_assert_eq!(files, rows.len() + others.len());
        // The page's "Run rows read" (counted rows and excluded ones, a repeated run id among
        // them) is the files under runs/ less the skips.
        let index = std::fs::read_to_string(out.join("index.html")).unwrap();
        let read = index
            .split("Run rows read</dt><dd>")
            .nth(1)
            .and_then(|r| r.split('<').next())
            .map(|n| n.replace(',', ""));
        if files - s.skipped.len() > 0 {
            prop_assert_eq!(read, Some((files - s.skipped.len()).to_string()));
        } else {
            prop_assert!(index.contains("No measured rows yet"));
        }
        // Every row that is not a repeat is counted (and in the every-row download).
        let distinct: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.1).collect();
        prop_assert_eq!(s.rows, distinct.len());
        let csv = std::fs::read_to_string(out.join("memory-calibration.csv")).unwrap();
        prop_assert_eq!(csv.lines().count(), s.rows + 1);
    }
}
