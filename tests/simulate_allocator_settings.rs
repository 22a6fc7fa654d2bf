//! The allocator replay under each real GPU row's `device.allocator_settings`: the reserved
//! peak's error per setting on the shipped real rows (`data/runs/cuda-real/`). NOT held out:
//! these rows were seen before the settings were modelled (the held-out numbers, from the
//! default-only replay, are in docs/simulator.md). Nothing is fitted to them.

use memcal::engine;

#[test]
fn each_setting_is_replayed_under_its_own_settings() {
    let ds = engine::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data")).unwrap();
    let cal = engine::calibrate(&ds);
    let by = engine::real::gpu_by_allocator(&ds, &cal);
    for a in &by {
        if let Some(r) = &a.reserved {
            println!(
                "{:<28} models {:>2} rows {:>2} reserved median |error| {:>5.1}% worst {:>+6.1}%  measured reserved/allocated median {:.3}",
                a.allocator,
                a.models,
                r.rows,
                r.median_abs * 100.0,
                r.worst * 100.0,
                a.reserved_over_allocated.0
            );
        }
    }
    let names: Vec<&str> = by.iter().map(|a| a.allocator.as_str()).collect();
    for want in ["expandable_segments:True", "max_split_size_mb:512"] {
        assert!(names.contains(&want), "{names:?}");
    }
    // Every setting's reserved peak is compared on its rows, each replayed under its own
    // setting (the simulated reserved peaks differ from the defaults' on the same jobs).
    for a in &by {
        let r = a.reserved.as_ref().expect("reserved errors");
        assert!(r.rows > 0);
        assert!(r.median_abs < 0.15, "{}: {r:?}", a.allocator);
    }
}

#[test]
fn plan_takes_allocator_settings_and_refuses_bad_ones() {
    let bin = env!("CARGO_BIN_EXE_memcal");
    let graph =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/graphs/gpt2-small.json");
    let run = |conf: &str| {
        std::process::Command::new(bin)
            .args(["plan", graph.to_str().unwrap(), "--batch", "4", "--json"])
            .args(["--allocator-settings", conf])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap()
    };
    let ok = run("expandable_segments:True");
    assert!(ok.status.success());
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(
        v["simulated"]["reserved"]["allocator_settings"],
        "expandable_segments:True"
    );
    let bad = run("max_split_size_mb:8");
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--allocator-settings") && err.contains("max_split_size_mb"),
        "{err}"
    );
}
