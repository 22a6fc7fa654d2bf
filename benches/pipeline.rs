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
//! process; the process's peak resident set (VmHWM) is printed after the engine and after the
//! pipeline, and one untimed pipeline run prints where its time goes. The pipeline runs up to
//! 100k rows by default (its memory grows to ~27 GB at 1M); `MEMCAL_BENCH_SITE=1` forces it at
//! every size, `MEMCAL_BENCH_SITE=0` skips it. Results and commands: `docs/hardening.md`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use memcal::engine::{self, calibrate, synthetic, Dataset};
use memcal::report;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];
const GRAPHS: usize = 100;
/// Above this many rows the site is skipped unless `MEMCAL_BENCH_SITE=1`: it grows by about
/// 27 MiB of resident memory per 1,000 rows (2.7 GB at 100k), so 1M rows needs some 27 GB.
const SITE_ROWS: usize = 100_000;

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

/// calibrate + calibration.json + the site written to `out`; returns the bytes written. With
/// `breakdown`, prints the seconds of each step and the sizes.
fn pipeline(ds: &Dataset, out: &Path, breakdown: bool) -> usize {
    let t = Instant::now();
    let cal = calibrate(ds);
    let t_cal = t.elapsed().as_secs_f64();
    let json = engine::write_calibration_json(&cal);
    let t_json = t.elapsed().as_secs_f64();
    let site = report::from_calibration(&cal, &ds.factors, &report::ProseInput::default());
    let t_view = t.elapsed().as_secs_f64();
    let files = report::render::render(&site, false).expect("the site renders");
    let t_render = t.elapsed().as_secs_f64();
    let mut written = json.len();
    std::fs::write(out.join("calibration.json"), &json).unwrap();
    for (rel, bytes) in &files {
        let p = out.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, bytes).unwrap();
        written += bytes.len();
    }
    let t_write = t.elapsed().as_secs_f64();
    if breakdown {
        let site_bytes: usize = files.values().map(|b| b.len()).sum();
        eprintln!(
            "rows {}: calibrate {t_cal:.2} s, calibration.json {:.2} s ({:.1} MB), view model {:.2} s, \
             render {:.2} s ({} files, {:.1} MB), write {:.2} s; total {t_write:.2} s",
            ds.rows.len(),
            t_json - t_cal,
            json.len() as f64 / 1e6,
            t_view - t_json,
            t_render - t_view,
            files.len(),
            site_bytes as f64 / 1e6,
            t_write - t_render,
        );
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
        if let Some(m) = peak_rss_mib() {
            eprintln!("rows {rows}: peak RSS after generating the dataset {m:.0} MiB");
        }
        g.measurement_time(Duration::from_secs(if rows >= 1_000_000 { 60 } else { 10 }));
        g.bench_with_input(BenchmarkId::new("engine", rows), &ds, |b, ds| {
            b.iter(|| black_box(calibrate(black_box(ds))))
        });
        if let Some(m) = peak_rss_mib() {
            eprintln!("rows {rows}: peak RSS after the engine {m:.0} MiB");
        }
        let site = match std::env::var("MEMCAL_BENCH_SITE").as_deref() {
            Ok("0") => false,
            Ok(_) => true,
            Err(_) => rows <= SITE_ROWS,
        };
        if !site {
            continue;
        }
        let out = tempfile::tempdir().unwrap();
        g.bench_with_input(BenchmarkId::new("pipeline", rows), &ds, |b, ds| {
            b.iter(|| black_box(pipeline(black_box(ds), out.path(), false)))
        });
        pipeline(&ds, out.path(), true);
        if let Some(m) = peak_rss_mib() {
            eprintln!("rows {rows}: peak RSS after the pipeline {m:.0} MiB");
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
