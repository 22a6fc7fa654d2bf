//! The whole pipeline at scale: synthetic rows over 100 graphs (one architecture family each) at
//! 10k, 100k and 1M rows. Two measurements per size:
//!
//! - `engine`: `calibrate` (bucketing, the shipped fit per profile, every held-out-by-architecture
//!   refit, the upper bound, every card check and metric);
//! - `pipeline`: what `memcal build` does after loading: `calibrate`, the view model
//!   (`report::from_calibration`), and the writer (`report::write_site`: every page rendered
//!   and written one at a time, the charts, and the JSON and CSV downloads serialised straight
//!   into their files) into a temporary folder.
//!
//! The dataset is generated once per size, outside the timing (`memcal build` reads it from
//! `data/runs/`; that load is not measured here). `MEMCAL_BENCH_ROWS` selects the sizes
//! (comma-separated, e.g. `MEMCAL_BENCH_ROWS=1000000`), so each size can run in its own process;
//! the process's peak resident set (VmHWM) is printed after the dataset, the engine and the
//! pipeline, and one untimed pipeline run prints where its time goes and what it wrote.
//! `MEMCAL_BENCH_SITE=0` skips the pipeline; `MEMCAL_BENCH_ONCE=1` runs only the one untimed
//! pipeline with its breakdown (no criterion measurement). Results and commands: `docs/hardening.md`.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, SamplingMode};
use memcal::engine::{calibrate, synthetic, Dataset};
use memcal::report;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

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

/// Bytes under `dir`, recursively, and the number of files.
fn du(dir: &Path) -> (u64, usize) {
    let mut bytes = 0;
    let mut files = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        if m.is_dir() {
            let (b, f) = du(&e.path());
            bytes += b;
            files += f;
        } else {
            bytes += m.len();
            files += 1;
        }
    }
    (bytes, files)
}

/// calibrate + the view model + the site written into `out` (what `memcal build` does after
/// loading). With `breakdown`, prints the seconds of each step and what was written.
fn pipeline(ds: &Dataset, out: &Path, breakdown: bool) -> usize {
    let t = Instant::now();
    let cal = calibrate(ds);
    let t_cal = t.elapsed().as_secs_f64();
    let prose = report::ProseInput::default();
    let site = report::from_calibration(&cal, &ds.factors, &prose);
    let t_view = t.elapsed().as_secs_f64();
    let summary = report::write_site(&site, out, false).expect("the site builds");
    let t_write = t.elapsed().as_secs_f64();
    if breakdown {
        let (bytes, files) = du(out);
        let size = |f: &str| std::fs::metadata(out.join(f)).map_or(0, |m| m.len()) as f64 / 1e6;
        eprintln!(
            "rows {}: calibrate {t_cal:.2} s, view model {:.2} s, render + write {:.2} s; \
             total {t_write:.2} s; wrote {files} files ({} pages, {} charts), {:.1} MB \
             (memory-calibration.json {:.1} MB, memory-calibration.csv {:.1} MB)",
            ds.rows.len(),
            t_view - t_cal,
            t_write - t_view,
            summary.pages,
            summary.charts,
            bytes as f64 / 1e6,
            size("memory-calibration.json"),
            size("memory-calibration.csv"),
        );
    }
    summary.files.len()
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
        if std::env::var("MEMCAL_BENCH_ONCE").as_deref() == Ok("1") {
            // One untimed pipeline run with its breakdown, no criterion measurement.
            let out = tempfile::tempdir().unwrap();
            pipeline(&ds, out.path(), true);
            drop(out);
            if let Some(m) = peak_rss_mib() {
                eprintln!("rows {rows}: peak RSS after the pipeline {m:.0} MiB");
            }
            continue;
        }
        g.measurement_time(Duration::from_secs(if rows >= 1_000_000 { 60 } else { 10 }));
        g.bench_with_input(BenchmarkId::new("engine", rows), &ds, |b, ds| {
            b.iter(|| black_box(calibrate(black_box(ds))))
        });
        if let Some(m) = peak_rss_mib() {
            eprintln!("rows {rows}: peak RSS after the engine {m:.0} MiB");
        }
        if std::env::var("MEMCAL_BENCH_SITE").as_deref() == Ok("0") {
            continue;
        }
        // Each run writes into a fresh folder (a first build; the folder is removed outside the
        // timing). TMPDIR chooses where: a disk, not a tmpfs, for the 1M-row site.
        g.bench_with_input(BenchmarkId::new("pipeline", rows), &ds, |b, ds| {
            b.iter_batched(
                || tempfile::tempdir().unwrap(),
                |out| {
                    black_box(pipeline(black_box(ds), out.path(), false));
                    out
                },
                BatchSize::PerIteration,
            )
        });
        let out = tempfile::tempdir().unwrap();
        pipeline(&ds, out.path(), true);
        drop(out);
        if let Some(m) = peak_rss_mib() {
            eprintln!("rows {rows}: peak RSS after the pipeline {m:.0} MiB");
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
