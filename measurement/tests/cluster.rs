//! Sharded campaigns (`campaign --shard`), `merge`, and the files `slurm` and `k8s` write
//! (golden files under tests/golden/; regenerate with MEMCAL_UPDATE_GOLDEN=1 and review the diff).

use memcal::run::RunRow;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_memcal-measure");

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs memcal-measure in measurement/ with `envs` set and Slurm/Kubernetes variables cleared.
fn run_env(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args).current_dir(crate_dir());
    for v in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_COUNT",
        "JOB_COMPLETION_INDEX",
    ] {
        c.env_remove(v);
    }
    c.envs(envs.iter().copied());
    c.output().expect("start memcal-measure")
}

fn run(args: &[&str]) -> Output {
    run_env(args, &[])
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that stderr says `want`.
fn has(o: &Output, want: &str) {
    assert!(stderr(o).contains(want), "no `{want}` in: {}", stderr(o));
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Compares `text` with the golden file, or rewrites it with MEMCAL_UPDATE_GOLDEN=1.
fn golden(name: &str, text: &str) {
    let path = crate_dir().join("tests/golden").join(name);
    if std::env::var_os("MEMCAL_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (MEMCAL_UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        text,
        want,
        "{} differs (MEMCAL_UPDATE_GOLDEN=1 rewrites it; review the diff)",
        path.display()
    );
}

fn generated(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name))
        .unwrap()
        .replace(s(dir), "@OUT@")
}

const PLAN: &str = "tests/fixtures/cluster-plan.toml";

#[test]
fn slurm_files_match_the_golden_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("slurm");
    let o = run(&[
        "slurm",
        PLAN,
        "--out",
        s(&out),
        "--into",
        "data/runs/cuda",
        "--partition",
        "gpu",
        "--max-concurrent",
        "2",
        "--time",
        "01:00:00",
        "--cpus-per-task",
        "4",
        "--run-timeout-s",
        "900",
        "--workdir",
        "/srv/memcal",
        "--bin",
        "/srv/memcal/target/release/memcal-measure",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for f in ["campaign.sbatch", "merge.sbatch", "submit.sh"] {
        golden(&format!("slurm/{f}"), &generated(&out, f));
    }
    assert!(
        out.join("logs").is_dir(),
        "Slurm needs the log folder to exist"
    );
    let array = generated(&out, "campaign.sbatch");
    // The CUDA plan asks for a GPU per task by default; 5 runs give 5 shards, 2 at once.
    assert!(array.contains("\n#SBATCH --array=0-4%2\n"), "{array}");
    assert!(array.contains("\n#SBATCH --gpus-per-task=1\n"), "{array}");
    assert!(array.contains("--shard auto/5 "), "{array}");
    let submit = generated(&out, "submit.sh");
    assert!(submit.contains("--dependency=afterok:"), "{submit}");
}

#[test]
fn k8s_files_match_the_golden_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("k8s");
    let o = run(&[
        "k8s",
        PLAN,
        "--out",
        s(&out),
        "--into",
        "/results/runs/cuda",
        "--image",
        "registry.example.com/memcal-measure:0.1.0",
        "--claim",
        "memcal-results",
        "--parallelism",
        "2",
        "--backoff-limit-per-index",
        "2",
        "--namespace",
        "calibration",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for f in ["job.yaml", "merge-job.yaml", "submit.sh"] {
        golden(&format!("k8s/{f}"), &generated(&out, f));
    }
    let job = generated(&out, "job.yaml");
    for line in [
        "  completionMode: Indexed",
        "  completions: 5",
        "  parallelism: 2",
        "  backoffLimitPerIndex: 2",
        "      restartPolicy: Never",
        "              nvidia.com/gpu: 1",
    ] {
        assert!(job.lines().any(|l| l == line), "no `{line}` in {job}");
    }
}

#[test]
fn bad_cluster_options_exit_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x");
    let base = ["slurm", PLAN, "--out", s(&out), "--into", "data/runs/x"];
    for (extra, want) in [
        (&["--shards", "6"][..], "between 1 and the plan's 5 runs"),
        (&["--shards", "0"][..], "between 1 and"),
        (&["--time", "one hour"][..], "expected a Slurm time"),
        (&["--max-concurrent", "0"][..], "at least 1"),
        (
            &["--workdir", "relative/dir"][..],
            "must be an absolute path",
        ),
        (
            &["--workdir", "/a dir/with space"][..],
            "cannot hold spaces",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra:?}: {}", stderr(&o));
    }
    assert!(!out.exists(), "nothing is written on a usage error");
}

/// A 3-run plan of the MLP fixture: run k goes to shard k mod 2.
fn small_plan(dir: &Path) -> PathBuf {
    let plan = dir.join("plan.toml");
    let mlp = crate_dir().join("tests/fixtures/mlp.json");
    std::fs::write(
        &plan,
        format!(
            "regime = \"test\"\n\n[[run]]\ngraph = {:?}\nbatches = [1, 2, 3]\n",
            s(&mlp)
        ),
    )
    .unwrap();
    plan
}

fn copy_dir(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let dest = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

fn rows_under(dir: &Path) -> usize {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name().to_string_lossy();
            e.file_type().is_file() && n.starts_with('b') && n.ends_with(".json")
        })
        .count()
}

/// Runs both shards (one by `I/N`, one by JOB_COMPLETION_INDEX) of the small plan into `out`.
fn measure_shards(plan: &Path, out: &Path) {
    let o = run(&["campaign", s(plan), "--shard", "0/2", "--out", s(out)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    has(&o, "shard 0 of 2: 2 runs");
    let o = run_env(
        &["campaign", s(plan), "--shard", "auto/2", "--out", s(out)],
        &[("JOB_COMPLETION_INDEX", "1")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    has(&o, "shard 1 of 2: 1 runs");
}

#[test]
fn shards_record_resume_and_merge_with_every_check() {
    let dir = tempfile::tempdir().unwrap();
    let plan = small_plan(dir.path());
    let out = dir.path().join("shards");
    measure_shards(&plan, &out);
    // Round robin: runs 0 and 2 (b1, b3) in shard 0, run 1 (b2) in shard 1.
    assert!(out.join("shard-0-of-2/mlp/b1.json").is_file());
    assert!(out.join("shard-0-of-2/mlp/b3.json").is_file());
    assert!(out.join("shard-1-of-2/mlp/b2.json").is_file());
    let rec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("shard-1-of-2/shard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rec["format"], "memcal-shard/1");
    assert_eq!(rec["plan_runs"], 3);
    assert_eq!(rec["runs"][0]["run"], "mlp b2");
    let attempt = &rec["attempts"][0];
    assert_eq!(attempt["scheduler"]["JOB_COMPLETION_INDEX"], "1");
    assert_eq!(attempt["environments"][0]["kind"], "cpu");
    assert_eq!(attempt["results"][0]["outcome"], "completed");

    // A retried shard resumes: its rows are skipped, and the attempt is recorded.
    let o = run(&["campaign", s(&plan), "--shard", "0/2", "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    has(&o, "2 skipped");
    let rec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("shard-0-of-2/shard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rec["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(rec["attempts"][1]["results"][0]["outcome"], "skipped");

    // Shards never go under a data folder's runs/ (the engine would read shard.json as a row).
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("runs")).unwrap();
    std::fs::write(data.join("factors.json"), "{}").unwrap();
    let o = run(&[
        "campaign",
        s(&plan),
        "--shard",
        "0/2",
        "--out",
        s(&data.join("runs/x")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    has(&o, "inside a data folder's runs/");
    std::fs::remove_dir_all(&data).unwrap();

    // The same folder with an edited plan is refused (a shard folder belongs to one plan).
    let changed = dir.path().join("changed.toml");
    std::fs::write(
        &changed,
        std::fs::read_to_string(&plan).unwrap() + "\n# edited\n",
    )
    .unwrap();
    let o = run(&["campaign", s(&changed), "--shard", "0/2", "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    has(&o, "made from a different plan");

    let graphs = crate_dir().join("tests/fixtures");
    let merge = |shards: &Path, into: &Path, extra: &[&str]| {
        let mut args = vec![
            "merge",
            s(shards),
            "--into",
            s(into),
            "--graphs",
            s(&graphs),
            "--plan",
            s(&plan),
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let fresh = |name: &str| {
        let d = dir.path().join(name);
        copy_dir(&out, &d);
        d
    };

    // Missing: a row deleted from shard 1; nothing moves; the run and shard are named.
    let sh = fresh("missing");
    std::fs::remove_file(sh.join("shard-1-of-2/mlp/b2.json")).unwrap();
    let into = dir.path().join("into-missing/runs/test");
    let o = merge(&sh, &into, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    has(&o, "missing: mlp b2 (shard 1 of 2)");
    assert_eq!(rows_under(&into), 0, "nothing moves while a run is missing");
    let o = merge(&sh, &into, &["--allow-missing"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(rows_under(&into), 2);

    // A shard that left no folder: its runs are named from the plan.
    let sh = fresh("no-shard");
    std::fs::remove_dir_all(sh.join("shard-0-of-2")).unwrap();
    let o = merge(&sh, &dir.path().join("into-no-shard"), &["--check"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    for run in ["mlp b1", "mlp b3"] {
        has(
            &o,
            &format!("missing: {run} (shard 0 of 2): shard 0 of 2: no folder"),
        );
    }

    // Conflict: the destination already has the file; both files are named, nothing moves.
    let sh = fresh("conflict");
    let into = dir.path().join("into-conflict");
    std::fs::create_dir_all(into.join("mlp")).unwrap();
    std::fs::copy(
        sh.join("shard-0-of-2/mlp/b1.json"),
        into.join("mlp/b1.json"),
    )
    .unwrap();
    let o = merge(&sh, &into, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let want = format!(
        "conflict: {} would overwrite the existing row {}",
        sh.join("shard-0-of-2/mlp/b1.json").display(),
        into.join("mlp/b1.json").display()
    );
    has(&o, &want);
    assert_eq!(rows_under(&into), 1);
    assert_eq!(rows_under(&sh), 3);

    // Duplicate run id: an existing row elsewhere under the runs root has the same id.
    let sh = fresh("duplicate");
    let root = dir.path().join("into-dup/runs");
    std::fs::create_dir_all(root.join("other/mlp")).unwrap();
    let existing = root.join("other/mlp/b2.json");
    std::fs::copy(sh.join("shard-1-of-2/mlp/b2.json"), &existing).unwrap();
    let o = merge(&sh, &root.join("test"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    has(
        &o,
        &format!(
            "duplicate run id `test/mlp/b2`: {} and {}",
            sh.join("shard-1-of-2/mlp/b2.json").display(),
            existing.display()
        ),
    );

    // Graph SHA-256: a row whose graph file changed since the run.
    let sh = fresh("sha");
    let other_graphs = dir.path().join("graphs");
    std::fs::create_dir_all(&other_graphs).unwrap();
    let mut g: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(graphs.join("mlp.json")).unwrap()).unwrap();
    g["family"] = serde_json::json!("changed");
    std::fs::write(other_graphs.join("mlp.json"), g.to_string()).unwrap();
    let o = run(&[
        "merge",
        s(&sh),
        "--into",
        s(&dir.path().join("into-sha")),
        "--graphs",
        s(&other_graphs),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    has(&o, "field `graph.sha256`");

    // A bad row and a stray file are errors naming the file.
    let sh = fresh("bad");
    std::fs::write(
        sh.join("shard-1-of-2/mlp/b2.json"),
        "{\"format\": \"memcal-run/1\"}",
    )
    .unwrap();
    std::fs::write(sh.join("shard-1-of-2/mlp/b9.json"), "{}").unwrap();
    let o = merge(&sh, &dir.path().join("into-bad"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    has(&o, "shard-1-of-2/mlp/b2.json");
    has(
        &o,
        "shard-1-of-2/mlp/b9.json: not a planned run of shard 1 of 2",
    );

    // A changed plan is refused.
    let o = run(&[
        "merge",
        s(&out),
        "--into",
        s(&dir.path().join("into-changed")),
        "--graphs",
        s(&graphs),
        "--plan",
        s(&changed),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    has(&o, "is not the plan the shards ran");

    // The real merge: every row moves, the shards keep their records, a second merge says so.
    let into = dir.path().join("data/runs/test");
    let o = merge(&out, &into, &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["format"], "memcal-merge-report/1");
    assert_eq!(report["moved"].as_array().unwrap().len(), 3);
    assert_eq!(rows_under(&into), 3);
    assert_eq!(rows_under(&out), 0);
    for b in [1, 2, 3] {
        let row: RunRow = serde_json::from_str(
            &std::fs::read_to_string(into.join(format!("mlp/b{b}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(row.run_id, format!("test/mlp/b{b}"));
    }
    assert!(out.join("shard-0-of-2/shard.json").is_file());
    let o = merge(&out, &into, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("3 already merged; 0 missing"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_failed_run_is_named_by_the_shard_and_by_merge() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    let mlp = crate_dir().join("tests/fixtures/mlp.json");
    // An emulated capacity above this machine's memory: the run refuses it, no row.
    std::fs::write(
        &plan,
        format!(
            "[[run]]\ngraph = {:?}\nbatches = [1]\ncaps = [100000]\n",
            s(&mlp)
        ),
    )
    .unwrap();
    let out = dir.path().join("shards");
    let o = run_env(
        &["campaign", s(&plan), "--shard", "auto", "--out", s(&out)],
        &[
            ("SLURM_ARRAY_TASK_ID", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "1"),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    has(&o, "failed: mlp b1 cap100000: no row");
    let o = run(&[
        "merge",
        s(&out),
        "--into",
        s(&dir.path().join("into")),
        "--graphs",
        s(&crate_dir().join("tests/fixtures")),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    has(&o, "missing: mlp b1 cap100000 (shard 0 of 1): no-row on ");
    has(&o, "exceeds the device");
}
