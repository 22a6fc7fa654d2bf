//! End-to-end tests of memcal-measure on CPU: rows, peaks, OOM under a cap, refusals, campaign.

use memcal::run::{RunRow, RunStatus};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_memcal-measure");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.json"))
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("start memcal-measure")
}

fn measure(graph: &str, batch: u64, extra: &[&str], dir: &Path) -> (i32, RunRow) {
    let out = dir.join(format!(
        "{graph}-b{batch}-{}.json",
        extra.join("_").replace(['-', '.'], "")
    ));
    let g = fixture(graph);
    let b = batch.to_string();
    let mut args = vec![
        "run",
        "--graph",
        g.to_str().unwrap(),
        "--batch",
        &b,
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    let code = o.status.code().expect("exited");
    let text = std::fs::read_to_string(&out).unwrap_or_else(|e| {
        panic!(
            "no row at {} ({e}); stderr: {}",
            out.display(),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (
        code,
        serde_json::from_str(&text).expect("a memcal-run/1 row"),
    )
}

#[test]
fn completed_row_is_complete_and_peak_grows_with_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (c1, small) = measure("mlp", 2, &[], dir.path());
    let (c2, large) = measure("mlp", 256, &[], dir.path());
    assert_eq!((c1, c2), (0, 0));
    for r in [&small, &large] {
        assert_eq!(r.status, RunStatus::Completed);
        assert_eq!(r.format, "memcal-run/1");
        assert!(r.run_id.starts_with("cpu-free/mlp/b"));
        assert_eq!(r.graph.sha256.len(), 64);
        assert_eq!(r.device.kind, "cpu");
        assert!(r.device.reserved_equals_allocated);
        assert!(r.device.capacity_bytes > 0);
        assert!(!r.graph_mismatch);
        assert_eq!(r.parameters.graph, r.parameters.built);
        let names: Vec<&str> = r.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "model_load",
                "inputs",
                "step1.forward",
                "step1.backward",
                "step1.optimizer",
                "step2.forward",
                "step2.backward",
                "step2.optimizer",
                "step3.forward",
                "step3.backward",
                "step3.optimizer"
            ]
        );
        // The weights alone are 4 bytes per parameter, allocated in model_load.
        assert_eq!(r.phases[0].allocated_end, Some(4 * r.parameters.built));
        let peak = r.peak.as_ref().expect("completed rows have a peak");
        let max = r
            .phases
            .iter()
            .filter_map(|p| p.allocated_peak)
            .max()
            .unwrap();
        assert_eq!(peak.allocated_bytes, max);
        // AdamW keeps two moments: after step 1 at least weights + 2 moments stay allocated.
        assert!(r.phases[4].allocated_end.unwrap() >= 3 * 4 * r.parameters.built);
    }
    let s = small.peak.as_ref().unwrap().allocated_bytes;
    let l = large.peak.as_ref().unwrap().allocated_bytes;
    assert!(l > s, "peak at batch 256 ({l}) should exceed batch 2 ({s})");
    let fwd = |r: &RunRow| r.phases[2].allocated_peak.unwrap() - r.phases[2].allocated_start;
    assert!(
        fwd(&large) > 50 * fwd(&small),
        "forward activations scale with the batch"
    );
}

/// Whether this CPU has what oneDNN's bf16 RNN primitives need (AVX-512).
fn onednn_bf16_rnn() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

#[test]
fn every_fixture_graph_trains_with_matching_parameters() {
    let dir = tempfile::tempdir().unwrap();
    for g in ["transformer", "t5", "cnn", "rnn"] {
        let (code, row) = measure(g, 2, &[], dir.path());
        assert_eq!(code, 0, "{g}: {:?}", row.error);
        assert_eq!(row.status, RunStatus::Completed, "{g}: {:?}", row.error);
        assert!(!row.graph_mismatch, "{g}: {:?}", row.parameters);
        // Every op also runs under CPU bf16 autocast (dtype mixing across ops).
        let (code, row) = measure(g, 2, &["--precision", "bf16-autocast"], dir.path());
        if g == "rnn" && !onednn_bf16_rnn() {
            // torch runs a CPU LSTM in bf16 through oneDNN, whose bf16 RNN needs AVX-512: on
            // an AVX2-only CPU torch itself refuses it, and the harness must record that as a
            // failed run (exit 1, status error, the phase and torch's message), not crash.
            assert_eq!(
                code, 1,
                "{g} bf16 on a CPU without AVX-512: {:?}",
                row.error
            );
            assert_eq!(row.status, RunStatus::Error);
            let e = row.error.as_ref().expect("the failure is recorded");
            assert!(e.message.contains("LSTM"), "{e:?}");
            continue;
        }
        assert_eq!(code, 0, "{g} bf16: {:?}", row.error);
        assert_eq!(
            row.status,
            RunStatus::Completed,
            "{g} bf16: {:?}",
            row.error
        );
    }
}

#[test]
fn oom_under_a_small_cap_is_recorded_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    // 0.001 GiB = 1,073,742 bytes: the weights (495 kB) load, training does not fit.
    let (code, row) = measure("transformer", 2, &["--cap-gib", "0.001"], dir.path());
    assert_eq!(code, 0, "a recorded OOM exits 0");
    assert_eq!(row.status, RunStatus::Oom);
    assert_eq!(row.regime, "cpu-edge");
    assert_eq!(row.run_id, "cpu-edge/transformer/b2/cap0.001");
    assert_eq!(row.device.emulated_capacity_bytes, Some(1_073_742));
    assert!(row.peak.is_none(), "an OOM row has no peak");
    let oom = row.oom.as_ref().expect("oom details");
    assert!(oom.message.contains("out of memory"), "{}", oom.message);
    let last = row.phases.last().unwrap();
    assert_eq!(last.name, oom.phase);
    assert_eq!(last.status, "oom");
    assert!(last.allocated_peak.is_none());
    assert_eq!(row.phases[0].name, "model_load");
    assert_eq!(row.phases[0].status, "ok");
    assert!(row.phases.iter().rev().skip(1).all(|p| p.status == "ok"));

    // 0.0001 GiB (107,374 bytes) does not even hold the weights: OOM in model_load, nothing built.
    let (code, row) = measure("transformer", 2, &["--cap-gib", "0.0001"], dir.path());
    assert_eq!(code, 0);
    assert_eq!(row.status, RunStatus::Oom);
    assert_eq!(row.oom.as_ref().unwrap().phase, "model_load");
    assert_eq!(row.phases.len(), 1);
    assert_eq!((row.parameters.built, row.graph_mismatch), (0, false));
}

#[test]
fn a_torch_error_is_recorded_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let (code, row) = measure("index-error", 2, &[], dir.path());
    assert_eq!(code, 1, "a recorded error exits 1");
    assert_eq!(row.status, RunStatus::Error);
    let e = row.error.as_ref().expect("error details");
    assert_eq!(e.phase, "step1.forward");
    assert!(e.message.contains("index out of range"), "{}", e.message);
    assert!(
        !e.message.contains("Exception raised from"),
        "no C++ stack trace: {}",
        e.message
    );
    assert!(row.peak.is_none() && row.oom.is_none());
    assert_eq!(row.phases.last().unwrap().status, "error");
    assert_eq!(row.phases.len(), 3, "phases after the failure are absent");
}

#[test]
fn bf16_autocast_changes_the_forward_on_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let (_, fp32) = measure("mlp", 8, &[], dir.path());
    let (code, bf16) = measure("mlp", 8, &["--precision", "bf16-autocast"], dir.path());
    assert_eq!(code, 0);
    assert_eq!(bf16.status, RunStatus::Completed, "{:?}", bf16.error);
    assert_eq!(bf16.precision, "bf16-autocast");
    let fwd = |r: &RunRow| r.phases[2].allocated_peak.unwrap() - r.phases[2].allocated_start;
    // Autocast keeps bf16 copies of the weights for the forward: a different footprint.
    assert_ne!(fwd(&fp32), fwd(&bf16));
}

#[test]
fn existing_output_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("row.json");
    std::fs::write(&out, "keep me").unwrap();
    let o = run(&[
        "run",
        "--graph",
        fixture("mlp").to_str().unwrap(),
        "--batch",
        "1",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("refusing to overwrite"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
}

#[test]
fn absent_cuda_device_exits_2_without_a_cpu_number() {
    let o = run(&["environment", "--device", "cuda:0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty(), "nothing reported for an absent device");
    let o = run(&["environment", "--device", "cpu", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["kind"], "cpu");
    assert!(v["capacity_bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["torch"], "2.11.0");
}

#[test]
fn campaign_writes_rows_resumes_and_keeps_ooms() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    let mlp = fixture("mlp");
    let tr = fixture("transformer");
    std::fs::write(
        &plan,
        format!(
            "regime = \"test\"\n\n[[run]]\ngraph = {:?}\nbatches = [1, 2]\n\n[[run]]\ngraph = {:?}\nbatches = [2]\ncaps = [0.001]\n",
            mlp.to_str().unwrap(),
            tr.to_str().unwrap()
        ),
    )
    .unwrap();
    let out = dir.path().join("runs");
    let o = run(&[
        "campaign",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("3 runs: 2 completed, 1 oom, 0 skipped, 0 failed"),
        "{err}"
    );
    for p in ["mlp/b1.json", "mlp/b2.json", "transformer/b2-cap0.001.json"] {
        let row: RunRow =
            serde_json::from_str(&std::fs::read_to_string(out.join(p)).unwrap()).unwrap();
        assert_eq!(row.regime, "test");
    }
    let o = run(&[
        "campaign",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("3 skipped"));
}
