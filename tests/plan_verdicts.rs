//! `memcal plan` with the data folder's evidence: the real cards' usable bytes come from the
//! GPU rows, every full-size graph's verdict is explained in one line by the method that
//! decides it, and the deciding method's bound is its own held-out q95 (or wider outside the
//! fitted range), never below the phase floor.

use memcal::engine::{calibrate, load};
use memcal::factors::FactorsFile;
use memcal::features::Precision;
use memcal::graph::Graph;
use memcal::plan::cards::{allocator_overhead, real_cards, PRODUCTS};
use memcal::plan::evidence::{evidence, Decider, Evidence};
use memcal::plan::{plan_with_simulation, Cards, Decided};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn data_evidence() -> Evidence {
    let ds = load(&repo().join("data")).unwrap();
    evidence(&ds, &calibrate(&ds))
}

/// The full-size graphs: every graph file not cut from another.
fn full_size() -> Vec<Graph> {
    memcal::graph::load_dir(&repo().join("data/graphs"))
        .unwrap()
        .into_iter()
        .filter(|g| g.cut_from.is_none())
        .collect()
}

/// The allocator overhead read straight from the row files (not through the engine): reserved
/// over allocated peak of every completed CUDA row of at least 1 GB.
fn overhead_from_files(dir: &Path, out: &mut Vec<f64>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            overhead_from_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            if v["device"]["kind"] == "cuda" && v["status"] == "completed" {
                let a = v["peak"]["allocated_bytes"].as_u64().unwrap();
                let r = v["peak"]["reserved_bytes"].as_u64().unwrap();
                if a >= 1_000_000_000 {
                    out.push(r as f64 / a as f64);
                }
            }
        }
    }
}

#[test]
fn the_allocator_overhead_is_the_gpu_rows_median_reserved_over_allocated() {
    let ds = load(&repo().join("data")).unwrap();
    let o = allocator_overhead(&ds).expect("the shipped data has GPU rows");
    let mut ratios = Vec::new();
    overhead_from_files(&repo().join("data/runs"), &mut ratios);
    ratios.sort_by(f64::total_cmp);
    assert_eq!(o.rows as usize, ratios.len());
    let n = ratios.len();
    let median = if n % 2 == 1 {
        ratios[n / 2]
    } else {
        (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
    };
    assert!((o.median_ratio - median).abs() < 1e-12);
    assert!(o.median_ratio > 1.0, "reserved is never below allocated");
    let cards = real_cards(Some(&o));
    for c in &cards {
        assert!(c.usable_bytes < c.reservable_bytes && c.reservable_bytes < c.reported_bytes);
    }
}

#[test]
fn the_h200_total_is_what_the_gpu_rows_recorded() {
    let h200 = PRODUCTS
        .iter()
        .find(|p| p.name.starts_with("H200"))
        .unwrap();
    let mut seen = 0;
    let mut stack = vec![repo().join("data/runs")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                let v: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                if v["device"]["name"] == "NVIDIA H200" {
                    assert_eq!(
                        v["device"]["capacity_bytes"].as_u64(),
                        Some(h200.reported.bytes()),
                        "{}",
                        p.display()
                    );
                    seen += 1;
                }
            }
        }
    }
    assert!(seen > 0);
}

#[test]
fn every_full_size_graph_gets_a_one_line_verdict_from_its_deciding_method() {
    let f = FactorsFile::load(&repo().join("data/factors.json")).unwrap();
    let ev = data_evidence();
    let graphs = full_size();
    assert!(graphs.len() >= 10, "{} full-size graphs", graphs.len());
    for g in &graphs {
        for precision in Precision::ALL {
            let sim = memcal::simulate::simulate_peak(g, 1, precision);
            let cards = Cards {
                seed: &f.cards,
                real: &ev.real_cards,
            };
            let p = plan_with_simulation(g, 1, precision, &f, cards, &sim, Some(&ev)).unwrap();
            let d = &p.decision;
            let what = format!("{} {precision}: {}", g.name, p.why);
            assert!(!p.why.is_empty() && !p.why.contains('\n'), "{what}");
            // An approximate graph's verdict says so first, then the deciding method.
            let why = if g.notes.is_empty() {
                p.why.as_str()
            } else {
                p.why
                    .split_once("; ")
                    .filter(|(head, _)| head.starts_with("approximate graph"))
                    .map_or(p.why.as_str(), |(_, rest)| rest)
            };
            assert!(why.starts_with(d.method.label()), "{what}");
            assert!(d.estimate_bytes >= p.floor.bytes as f64, "{what}");
            assert!(d.bound_bytes >= d.estimate_bytes, "{what}");
            let rec = d.records.iter().find(|r| r.method == d.method).unwrap();
            assert!(
                d.bound_bytes >= d.estimate_bytes * rec.q95.unwrap() - 1.0,
                "{what}"
            );
            let outside = d.range.as_ref().is_some_and(|r| !r.outside.is_empty());
            assert_eq!(
                p.why.contains("outside the fitted range"),
                outside,
                "{what}"
            );
            if d.method == Decider::Simulator {
                assert!(sim.is_ok(), "{what}");
            }
            assert_eq!(p.cards.len(), f.cards.len() + ev.real_cards.len());
            for v in &p.cards {
                if v.simulated_reserved_fits == Some(false) {
                    assert_eq!(v.verdict, Decided::DoesNotFit, "{what}: {}", v.card.name);
                }
                if v.verdict == Decided::Fits {
                    let need = d.bound_bytes * (1.0 + p.headroom);
                    assert!(need <= v.card.bytes as f64, "{what}: {}", v.card.name);
                }
            }
            match (&p.smallest_card_verdict, &p.shortfall) {
                (Some(c), _) => assert!(p.why.contains(&c.name), "{what}"),
                (None, Some(sf)) => assert!(p.why.contains(&sf.largest_card.name), "{what}"),
                (None, None) => {}
            }
        }
    }
}

#[test]
fn a_job_far_outside_the_fitted_range_says_by_how_much() {
    let f = FactorsFile::load(&repo().join("data/factors.json")).unwrap();
    let ev = data_evidence();
    let g = Graph::load(&repo().join("data/graphs/llama-full.json")).unwrap();
    let sim = memcal::simulate::simulate_peak(&g, 1, Precision::Bf16Autocast);
    let cards = Cards {
        seed: &f.cards,
        real: &ev.real_cards,
    };
    let p =
        plan_with_simulation(&g, 1, Precision::Bf16Autocast, &f, cards, &sim, Some(&ev)).unwrap();
    let r = p.decision.range.as_ref().unwrap();
    let params = r.outside.iter().find(|o| o.what == "parameters").unwrap();
    assert!((params.by - g.parameters() as f64 / r.fitted.parameters_max as f64).abs() < 1e-9);
    assert!(params.by > 10.0);
    // Outside the range with both methods covering it, the bound is the larger of the two.
    let plan_bound = p.estimate_bytes * p.decision.records[0].q95.unwrap();
    assert!(p.decision.bound_bytes >= plan_bound - 1.0);
    // Without the simulator, the six-factor plan alone is refused there.
    let none: Result<memcal::simulate::Simulation, String> = Err("no rules".into());
    let cards = Cards {
        seed: &f.cards,
        real: &ev.real_cards,
    };
    let p =
        plan_with_simulation(&g, 1, Precision::Bf16Autocast, &f, cards, &none, Some(&ev)).unwrap();
    assert_eq!(p.decision.method, Decider::SixFactorPlan);
    assert!(p.decision.refused.is_some());
    assert!(p.cards.iter().all(|v| v.verdict != Decided::Fits));
    assert!(p.why.contains("refused"), "{}", p.why);
}

fn memcal(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_memcal"))
        .current_dir(repo())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plan_json_names_the_deciding_method_and_the_real_cards() {
    let out = memcal(&[
        "plan",
        "data/graphs/gpt2-small.json",
        "--batch",
        "8",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "memcal-plan/3");
    // The verdict's numbers at the top level, the six-factor plan's under its own key.
    assert_eq!(v["method"], v["decision"]["method"]);
    assert_eq!(
        v["estimate_bytes"].as_u64().unwrap(),
        v["decision"]["estimate_bytes"].as_f64().unwrap().ceil() as u64
    );
    assert!(v["six_factor"]["estimate_bytes"].is_u64());
    assert!(v["six_factor"]["features"].is_object());
    let ev = data_evidence();
    let preferred = ev.profiles[&Precision::Bf16Autocast].preferred;
    assert_eq!(
        v["decision"]["method"],
        serde_json::to_value(preferred).unwrap()
    );
    assert_eq!(v["decision"]["records"].as_array().unwrap().len(), 2);
    let cards = v["cards"].as_array().unwrap();
    let real: Vec<_> = cards.iter().filter(|c| c["product"].is_object()).collect();
    assert_eq!(real.len(), PRODUCTS.len());
    for c in real {
        assert_eq!(c["card"]["bytes"], c["product"]["usable_bytes"]);
        assert!(c["product"]["source"]
            .as_str()
            .is_some_and(|s| !s.is_empty()));
    }
    assert!(v["why"].as_str().is_some_and(|s| !s.contains('\n')));
    // A regime's cards alone, and a data folder that is not there is an input error naming it.
    let out = memcal(&[
        "plan",
        "data/graphs/gpt2-small.json",
        "--batch",
        "8",
        "--json",
        "--regime",
        "cuda-edge",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["cards"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c.get("product").is_none()));
    let out = memcal(&[
        "plan",
        "data/graphs/gpt2-small.json",
        "--batch",
        "8",
        "--data",
        "tests/no-such-data",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tests/no-such-data/factors.json"), "{err}");
}

#[test]
fn max_batch_by_the_verdict_is_the_last_batch_that_fits() {
    let f = FactorsFile::load(&repo().join("data/factors.json")).unwrap();
    let ev = data_evidence();
    let g = Graph::load(&repo().join("data/graphs/gpt2-small.json")).unwrap();
    let cards = Cards {
        seed: &f.cards,
        real: &ev.real_cards,
    };
    let p = Precision::Bf16Autocast;
    let largest = memcal::plan::max_batch_verdict(&g, p, &f, cards, Some(&ev));
    assert_eq!(largest.len(), f.cards.len() + ev.real_cards.len());
    let verdict = |b: u64, i: usize| {
        let sim = memcal::simulate::simulate_peak(&g, b, p);
        plan_with_simulation(&g, b, p, &f, cards, &sim, Some(&ev))
            .unwrap()
            .cards[i]
            .verdict
    };
    let mut some = 0;
    for (i, b) in largest.iter().enumerate() {
        match b {
            Some(b) => {
                some += 1;
                assert_eq!(verdict(*b, i), Decided::Fits, "card {i} at {b}");
                assert_ne!(verdict(b + 1, i), Decided::Fits, "card {i} at {}", b + 1);
            }
            None => assert_ne!(verdict(1, i), Decided::Fits, "card {i} at 1"),
        }
    }
    assert!(some > 0);
}

/// Every shipped row gets plan's verdict at the capacity it ran under, from the method that
/// decides on its profile, and its outcome is what the run did: a missed out-of-memory run is
/// exactly a "fits" on a run that ran out of memory.
#[test]
fn every_shipped_row_has_a_verdict_and_its_outcome_is_what_the_run_did() {
    use memcal::plan::verdicts::{outcome_counts, row_verdicts, RowOutcome};
    use memcal::plan::Verdict;
    use memcal::run::RunStatus;
    let ds = load(&repo().join("data")).unwrap();
    let cal = calibrate(&ds);
    let ev = evidence(&ds, &cal);
    let verdicts = row_verdicts(&cal, &ev);
    assert_eq!(verdicts.len(), cal.rows.len());
    for (r, v) in cal.rows.iter().zip(&verdicts) {
        let v = v.unwrap_or_else(|| panic!("{}: no verdict", r.run_id));
        let preferred = ev.profiles[&r.precision].preferred;
        assert_eq!(
            v.method, preferred,
            "{}: decided by the profile's method",
            r.run_id
        );
        let estimate = r
            .predictions
            .get(&v.method.verdict_method())
            .copied()
            .unwrap();
        assert_eq!(v.estimate_bytes, estimate, "{}", r.run_id);
        assert!(v.bound_bytes >= v.estimate_bytes, "{}", r.run_id);
        assert_eq!(v.capacity_bytes, r.capacity_bytes);
        let oom = r.status == RunStatus::Oom;
        let expected = match (v.verdict, oom) {
            (Verdict::Fits, false) | (Verdict::DoesNotFit, true) => RowOutcome::Right,
            (Verdict::Fits, true) => RowOutcome::MissedOom,
            (Verdict::DoesNotFit, false) => RowOutcome::FalseAlarm,
            (Verdict::Borderline, false) => RowOutcome::BorderlineCompleted,
            (Verdict::Borderline, true) => RowOutcome::BorderlineOom,
        };
        assert_eq!(v.outcome, expected, "{}", r.run_id);
        // The verdict's own rule, restated: over the capacity does not fit.
        if v.estimate_bytes > r.capacity_bytes as f64 {
            assert_eq!(v.verdict, Verdict::DoesNotFit, "{}", r.run_id);
        }
    }
    let counts = outcome_counts(&cal, &verdicts);
    let total: u64 = counts.values().map(|c| c.rows).sum();
    assert_eq!(total, cal.rows.len() as u64);
    for c in counts.values() {
        assert_eq!(
            c.rows,
            c.right
                + c.missed_oom
                + c.false_alarm
                + c.borderline_completed
                + c.borderline_oom
                + c.no_verdict
        );
    }
}

/// Families that share an implementation block are held out together; a family of its own is
/// predicted by its leave-family-out refit, so the two held-out methods agree on it.
#[test]
fn families_sharing_an_implementation_block_are_held_out_together() {
    use memcal::engine::Method;
    let ds = load(&repo().join("data")).unwrap();
    let cal = calibrate(&ds);
    let groups = &cal.implementation_groups;
    let group_of = |f: &str| {
        groups
            .iter()
            .find(|g| g.families.iter().any(|x| x == f))
            .unwrap_or_else(|| panic!("{f} in no group"))
    };
    // The zoo's transformers share one attention builder (and vit's patch embedding is a conv).
    let bert = group_of("bert");
    for f in ["gpt", "t5", "vit", "resnet"] {
        assert!(bert.families.iter().any(|x| x == f), "{f} with bert");
    }
    assert!(bert
        .shared_blocks
        .iter()
        .any(|b| b == "multihead_attention"));
    assert!(group_of("llama").families.iter().any(|x| x == "mixtral"));
    assert!(!group_of("llama").families.iter().any(|x| x == "bert"));
    // Every family is in exactly one group.
    let mut all: Vec<&String> = groups.iter().flat_map(|g| &g.families).collect();
    all.sort();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n);
    assert_eq!(n, cal.families.len());
    // Each group's block shared by two of its families really is in both families' graphs.
    for g in groups {
        for b in &g.shared_blocks {
            let users = g
                .families
                .iter()
                .filter(|f| {
                    ds.graphs
                        .values()
                        .any(|i| &i.family == *f && i.blocks.contains(&b.as_str()))
                })
                .count();
            assert!(users >= 2, "{b} joins {}", g.name);
        }
    }
    for r in &cal.rows {
        let (Some(a), Some(i)) = (
            r.predictions.get(&Method::PlanHeldOutArchitecture),
            r.predictions.get(&Method::PlanHeldOutImplementation),
        ) else {
            continue;
        };
        if group_of(&r.family).families.len() == 1 {
            assert_eq!(a, i, "{}: a group of one is its family's refit", r.run_id);
        }
    }
}

/// The same job gives the same answer wherever it runs: from another folder, `--data` alone
/// and `--factors` alone (its folder holds the rows) each plan as the repository does.
#[test]
fn plan_from_another_folder_gives_the_in_repo_answer() {
    let graph = repo().join("data/graphs/gpt2-small.json");
    let graph = graph.to_str().unwrap();
    let data = repo().join("data");
    let factors = data.join("factors.json");
    let here = memcal(&["plan", graph, "--batch", "8", "--json"]);
    assert!(
        here.status.success(),
        "{}",
        String::from_utf8_lossy(&here.stderr)
    );
    let elsewhere = tempfile::tempdir().unwrap();
    for extra in [
        ["--data", data.to_str().unwrap()],
        ["--factors", factors.to_str().unwrap()],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_memcal"))
            .args(["plan", graph, "--batch", "8", "--json"])
            .args(extra)
            .current_dir(elsewhere.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, here.stdout, "{extra:?}");
    }
    // A factors file beside no rows plans without evidence, and says so next to the answer.
    let lone = elsewhere.path().join("factors.json");
    std::fs::copy(&factors, &lone).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memcal"))
        .args([
            "plan",
            graph,
            "--batch",
            "8",
            "--factors",
            lone.to_str().unwrap(),
        ])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let note = text.lines().nth(2).unwrap_or_default();
    assert!(
        note.starts_with("note: no held-out record") && note.contains("give --data"),
        "{text}"
    );
}
