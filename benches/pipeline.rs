//! The whole `memcal build` at scale: a data folder on disk with 100 graphs (one architecture
//! family each) and 10k, 100k or 1M row files. Two measurements per size:
//!
//! - `engine`: `calibrate` on the loaded dataset (bucketing, the shipped fit per profile, every
//!   held-out-by-architecture refit, the upper bound, every card check and metric);
//! - `build`: exactly what `memcal build` does (`report::build_site`): `engine::load` (read,
//!   parse, check and hash every row file, features per graph, batch and precision, join to the
//!   graphs), `calibrate`, the prose, the view model and the writer (`report::write_site`: every
//!   page rendered and written one at a time, the charts, and the JSON and CSV downloads
//!   serialised straight into their files) into a fresh temporary folder.
//!
//! The data folder is written once per size, outside the timing, by
//! `engine::synthetic::write_data_folder_as` into a temporary folder (`TMPDIR`; 1M rows are about
//! 2.5 GB in 1M files) and removed afterwards. `MEMCAL_BENCH_ROWS` selects the sizes
//! (comma-separated, e.g. `MEMCAL_BENCH_ROWS=1000000`), so each size can run in its own process;
//! the process's peak resident set (VmHWM) is printed after each step, and one untimed build
//! prints where its time goes and what it wrote. `MEMCAL_BENCH_SITE=0` skips `build`;
//! `MEMCAL_BENCH_ONCE=1` runs only the one untimed build with its breakdown (load first; no
//! criterion measurement). `MEMCAL_BENCH_LAYOUT=bundles` writes the rows as row bundles (1,000
//! rows a `.jsonl` file; `bundles:N` for N) instead of one file per row, and
//! `MEMCAL_BENCH_DATA=<dir>` keeps the data folder under `<dir>` for later runs. Results and
//! commands: `docs/hardening.md`.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, SamplingMode};
use memcal::engine::{calibrate, synthetic};
use memcal::report;
use std::collections::BTreeSet;
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

/// The process's user and system CPU seconds so far, from /proc/self/stat (Linux; clock ticks of
/// 1/100 s).
fn cpu_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses: utime and stime are the 12th
    // and 13th of them.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let user: f64 = f.next()?.parse().ok()?;
    let sys: f64 = f.next()?.parse().ok()?;
    Some((user / 100.0, sys / 100.0))
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

/// What `memcal build` does (`report::build_site`), step by step so that each is timed: load
/// `data`, calibrate, the prose, the view model, and the site written into `out`. With
/// `breakdown`, prints the seconds of each step and what was written.
fn build(data: &Path, out: &Path, breakdown: bool) -> usize {
    let cpu0 = cpu_seconds().unwrap_or((f64::NAN, f64::NAN));
    let t = Instant::now();
    let ds = memcal::engine::load(data).expect("the data folder loads");
    let t_load = t.elapsed().as_secs_f64();
    let cpu1 = cpu_seconds().unwrap_or((f64::NAN, f64::NAN));
    let rss_load = peak_rss_mib();
    let cal = calibrate(&ds);
    let t_cal = t.elapsed().as_secs_f64();
    let rss_cal = peak_rss_mib();
    let families: BTreeSet<String> = cal
        .families
        .keys()
        .cloned()
        .chain(cal.rows.iter().map(|r| r.family.to_string()))
        .collect();
    let mut prose = report::load_prose(data, &families).expect("the prose loads");
    prose.history = memcal::review::audit_history(data, &cal).expect("the history is audited");
    let site = report::from_calibration(&cal, &ds.factors, &prose);
    let t_view = t.elapsed().as_secs_f64();
    let rss_view = peak_rss_mib();
    let summary = report::write_site(&site, out, false).expect("the site builds");
    let t_write = t.elapsed().as_secs_f64();
    if breakdown {
        let (bytes, files) = du(out);
        let size = |f: &str| std::fs::metadata(out.join(f)).map_or(0, |m| m.len()) as f64 / 1e6;
        eprintln!(
            "rows {}: load {t_load:.2} s (CPU {:.2} s user + {:.2} s system; peak RSS then \
             {:.0} MiB), calibrate {:.2} s (peak RSS then {:.0} MiB), \
             view model {:.2} s (peak RSS then {:.0} MiB), render + write {:.2} s; total \
             {t_write:.2} s; wrote {files} files ({} pages, {} charts), {:.1} MB \
             (memory-calibration.json {:.1} MB, memory-calibration.csv {:.1} MB)",
            ds.rows.len(),
            cpu1.0 - cpu0.0,
            cpu1.1 - cpu0.1,
            rss_load.unwrap_or(f64::NAN),
            t_cal - t_load,
            rss_cal.unwrap_or(f64::NAN),
            t_view - t_cal,
            rss_view.unwrap_or(f64::NAN),
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

/// `MEMCAL_BENCH_LAYOUT`: `files` (the default: one row file per run) or `bundles` (row
/// bundles of 1,000 rows; `bundles:N` for N rows a bundle).
fn layout() -> synthetic::Layout {
    match std::env::var("MEMCAL_BENCH_LAYOUT").as_deref() {
        Err(_) | Ok("files") => synthetic::Layout::Files,
        Ok("bundles") => synthetic::Layout::Bundles(1_000),
        Ok(s) => match s.strip_prefix("bundles:").map(str::parse) {
            Some(Ok(n)) => synthetic::Layout::Bundles(n),
            _ => panic!("MEMCAL_BENCH_LAYOUT: `files`, `bundles` or `bundles:N`, not `{s}`"),
        },
    }
}

/// The data folder for `rows` rows: a fresh temporary folder, removed afterwards, or with
/// `MEMCAL_BENCH_DATA=<dir>` the folder `<dir>/<layout>-<rows>`, kept and reused by later runs
/// (it is complete once `<dir>/<layout>-<rows>.done` exists).
enum DataDir {
    Temp(tempfile::TempDir),
    Kept(std::path::PathBuf),
}

impl DataDir {
    fn path(&self) -> &Path {
        match self {
            DataDir::Temp(t) => t.path(),
            DataDir::Kept(p) => p,
        }
    }
}

fn data_folder(rows: usize, layout: synthetic::Layout, truth: [f64; 6]) -> DataDir {
    let name = match layout {
        synthetic::Layout::Files => format!("files-{rows}"),
        synthetic::Layout::Bundles(n) => format!("bundles{n}-{rows}"),
    };
    let (dir, done) = match std::env::var_os("MEMCAL_BENCH_DATA") {
        Some(root) => {
            let root = std::path::PathBuf::from(root);
            let done = root.join(format!("{name}.done"));
            let dir = root.join(&name);
            if done.exists() {
                eprintln!("rows {rows}: reusing the data folder {}", dir.display());
                return DataDir::Kept(dir);
            }
            if dir.exists() {
                std::fs::remove_dir_all(&dir).unwrap();
            }
            (DataDir::Kept(dir), Some(done))
        }
        None => (DataDir::Temp(tempfile::tempdir().unwrap()), None),
    };
    let t = Instant::now();
    let bytes = synthetic::write_data_folder_as(dir.path(), rows, GRAPHS, truth, 7, layout)
        .expect("the data folder is written");
    eprintln!(
        "rows {rows}: wrote the data folder ({name}, {:.1} MB) in {:.1} s (not timed)",
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    if let Some(done) = done {
        std::fs::write(done, b"").unwrap();
    }
    dir
}

fn bench(c: &mut Criterion) {
    let truth = [1.2, 0.9, 1.3, 3.6, 5.2, 2.0];
    let mut g = c.benchmark_group("pipeline");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_secs(1));
    for rows in sizes() {
        let data = data_folder(rows, layout(), truth);
        if let Some(m) = peak_rss_mib() {
            eprintln!("rows {rows}: peak RSS after writing the data folder {m:.0} MiB");
        }
        if std::env::var("MEMCAL_BENCH_ONCE").as_deref() == Ok("1") {
            // One untimed build with its breakdown, no criterion measurement.
            let out = tempfile::tempdir().unwrap();
            build(data.path(), out.path(), true);
            drop(out);
            if let Some(m) = peak_rss_mib() {
                eprintln!("rows {rows}: peak RSS after the build {m:.0} MiB");
            }
            continue;
        }
        g.measurement_time(Duration::from_secs(if rows >= 1_000_000 { 60 } else { 10 }));
        {
            let ds = memcal::engine::load(data.path()).expect("the data folder loads");
            g.bench_with_input(BenchmarkId::new("engine", rows), &ds, |b, ds| {
                b.iter(|| black_box(calibrate(black_box(ds))))
            });
        }
        if let Some(m) = peak_rss_mib() {
            eprintln!("rows {rows}: peak RSS after the engine {m:.0} MiB");
        }
        if std::env::var("MEMCAL_BENCH_SITE").as_deref() == Ok("0") {
            continue;
        }
        // Each build writes into a fresh folder (a first build; the folder is removed outside
        // the timing). TMPDIR chooses where: a disk, not a tmpfs, for 1M rows.
        g.bench_with_input(BenchmarkId::new("build", rows), data.path(), |b, data| {
            b.iter_batched(
                || tempfile::tempdir().unwrap(),
                |out| {
                    black_box(
                        report::build_site(black_box(data), out.path(), false)
                            .expect("the site builds"),
                    );
                    out
                },
                BatchSize::PerIteration,
            )
        });
        let out = tempfile::tempdir().unwrap();
        build(data.path(), out.path(), true);
        drop(out);
        if let Some(m) = peak_rss_mib() {
            eprintln!("rows {rows}: peak RSS after the build {m:.0} MiB");
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
