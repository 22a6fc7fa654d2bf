//! The whole pipeline at scale: synthetic rows over 100 graphs (one architecture family each) at
//! 10k, 100k and 1M rows. Two measurements per size:
//!
//! - `engine`: `calibrate` (bucketing, the shipped fit per profile, every held-out-by-architecture
//!   refit, the upper bound, every card check and metric);
//! - `pipeline`: `calibrate`, `write_calibration_json`, and the site (`report::from_calibration`,
//!   `report::render::render`, every file written into a temporary folder).
//!
//! The dataset is generated once per size, outside the timing. `MEMCAL_BENCH_ROWS` selects the
//! sizes (comma-separated, e.g. `MEMCAL_BENCH_ROWS=1000000`), so each size can run in its own
//! process; the process's peak resident set (VmHWM) is printed after each size. Results and
//! commands: `docs/hardening.md`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use memcal::engine::{self, calibrate, synthetic, Dataset};
use memcal::report;
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];
const GRAPHS: usize = 100;

fn sizes() -> Vec<usize> {
    match std::env::var("MEMCAL_BENCH_ROWS") {
        Ok(s) => s
            .split(',')
            .map(|x| {
                x.trim()
                    .replace('_', "")
                    .parse()
                    .expect("MEMCAL_BENCH_ROWS: row counts")
            })
            .collect(),
        Err(_) => SIZES.to_vec(),
    }
}

/// The process's peak resident set so far, from /proc/self/status (Linux), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// calibrate + calibration.json + the site written to `out`; returns the bytes written.
fn pipeline(ds: &Dataset, out: &Path) -> usize {
    let cal = calibrate(ds);
    let json = engine::write_calibration_json(&cal);
    let site = report::from_calibration(&cal, &ds.factors, &report::ProseInput::default());
    let files = report::render::render(&site, false).expect("the site renders");
    let mut written = json.len();
    std::fs::write(out.join("calibration.json"), &json).unwrap();
    for (rel, bytes) in &files {
        let p = out.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, bytes).unwrap();
        written += bytes.len();
    }
    written
}

fn bench(c: &mut Criterion) {
    let truth = [1.2, 0.9, 1.3, 3.6, 5.2, 2.0];
    let mut g = c.benchmark_group("pipeline");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_secs(1));
    for rows in sizes() {
        let ds = synthetic::dataset(rows, GRAPHS, truth, 0.1, 7);
        g.measurement_time(Duration::from_secs(if rows >= 1_000_000 { 60 } else { 10 }));
        g.bench_with_input(BenchmarkId::new("engine", rows), &ds, |b, ds| {
            b.iter(|| black_box(calibrate(black_box(ds))))
        });
        let out = tempfile::tempdir().unwrap();
        g.bench_with_input(BenchmarkId::new("pipeline", rows), &ds, |b, ds| {
            b.iter(|| black_box(pipeline(black_box(ds), out.path())))
        });
        let site_mb = pipeline(&ds, out.path()) as f64 / 1e6;
        match peak_rss_mib() {
            Some(m) => eprintln!("rows {rows}: peak RSS so far {m:.0} MiB; output {site_mb:.1} MB"),
            None => eprintln!("rows {rows}: output {site_mb:.1} MB"),
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
