//! Turns the view model into files: askama templates for pages, the chart functions for SVGs,
//! and the view model itself as JSON with `--debug-json`. Output is a sorted map from relative
//! path to bytes, so two builds of the same inputs are byte-identical.

use super::build::Built;
use super::view::{FamilyPage, FitPage, HistoryPage, IndexPage, PageMeta, RunsPage, TablePage};
use askama::Template;
use std::collections::{BTreeMap, BTreeSet};

/// The sorting script, inlined into pages with sortable tables.
const SORT_JS: &str = include_str!("../../templates/sort.js");
/// The one stylesheet.
const SITE_CSS: &str = include_str!("../../templates/site.css");

#[derive(Template)]
#[template(path = "index.html")]
struct IndexTemplate<'a> {
    meta: &'a PageMeta,
    p: &'a IndexPage,
}

#[derive(Template)]
#[template(path = "runs.html")]
struct RunsTemplate<'a> {
    meta: &'a PageMeta,
    p: &'a RunsPage,
    sort_js: &'a str,
}

#[derive(Template)]
#[template(path = "family.html")]
struct FamilyTemplate<'a> {
    meta: &'a PageMeta,
    p: &'a FamilyPage,
    sort_js: &'a str,
}

#[derive(Template)]
#[template(path = "history.html")]
struct HistoryTemplate<'a> {
    meta: &'a PageMeta,
    p: &'a HistoryPage,
    sort_js: &'a str,
}

impl HistoryTemplate<'_> {
    /// The intro's Markdown (`code` spans) as inline HTML.
    fn intro_html(&self) -> String {
        super::markdown::inline_to_html(&self.p.intro)
    }
}

#[derive(Template)]
#[template(path = "table.html")]
struct TableTemplate<'a> {
    meta: &'a PageMeta,
    p: &'a TablePage,
    sort_js: &'a str,
}

#[derive(Template)]
#[template(path = "fit.html")]
struct FitTemplate<'a> {
    meta: &'a PageMeta,
    p: &'a FitPage,
    sort_js: &'a str,
}

/// Pretty JSON with a trailing newline.
fn json<T: serde::Serialize>(v: &T) -> Result<String, String> {
    let mut s = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    s.push('\n');
    Ok(s)
}

/// `page.html` -> `page.json`.
fn debug_name(file: &str) -> String {
    format!("{}.json", file.trim_end_matches(".html"))
}

/// Where rendered files go: the writer (files on disk, written as they come) or memory. Files
/// are handed over from more than one thread, each path once.
pub trait Sink: Sync {
    /// A file whose bytes are all there.
    fn put(&self, path: &str, bytes: Vec<u8>) -> Result<(), String>;
    /// A large file, written by `write` as it is serialised.
    fn stream(
        &self,
        path: &str,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), String>;
}

/// Collects every file in memory, by relative path.
impl Sink for std::sync::Mutex<BTreeMap<String, Vec<u8>>> {
    fn put(&self, path: &str, bytes: Vec<u8>) -> Result<(), String> {
        self.lock()
            .map_err(|e| e.to_string())?
            .insert(path.to_string(), bytes);
        Ok(())
    }

    fn stream(
        &self,
        path: &str,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), String> {
        let mut bytes = Vec::new();
        write(&mut bytes).map_err(|e| format!("{path}: {e}"))?;
        self.put(path, bytes)
    }
}

/// Every file of the site, by path relative to the site folder, in memory.
pub fn render(site: &Built, debug_json: bool) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let files = std::sync::Mutex::new(BTreeMap::new());
    render_into(site, debug_json, &files)?;
    files.into_inner().map_err(|e| e.to_string())
}

/// One file to make.
#[derive(Clone, Copy)]
enum Job {
    DownloadJson,
    DownloadCsv,
    Index,
    Runs(usize),
    Family(usize),
    History,
    Fit,
    Table(usize),
    Chart(usize),
    ChartsJson,
    Css,
}

/// A page's text with a trailing newline.
fn page(r: askama::Result<String>, file: &str) -> Result<Vec<u8>, String> {
    let mut s = r.map_err(|e| format!("{file}: {e}"))?;
    if !s.ends_with('\n') {
        s.push('\n');
    }
    Ok(s.into_bytes())
}

/// Makes one file (and its view model's JSON with `debug_json`) and hands it to `sink`.
fn run(site: &Built, debug_json: bool, sink: &dyn Sink, job: Job) -> Result<(), String> {
    // The view model as JSON, made only with `debug_json`.
    let debug = |file: &str, v: &dyn Fn() -> Result<String, String>| -> Result<(), String> {
        if debug_json {
            sink.put(&debug_name(file), v()?.into_bytes())?;
        }
        Ok(())
    };
    match job {
        Job::DownloadJson => sink.stream("memory-calibration.json", &mut |w| {
            site.write_download_json(w)
        }),
        Job::DownloadCsv => sink.stream("memory-calibration.csv", &mut |w| {
            site.write_download_csv(w)
        }),
        Job::Index => {
            let i = &site.index;
            let t = IndexTemplate {
                meta: &i.meta,
                p: i,
            };
            sink.put(&i.meta.file, page(t.render(), &i.meta.file)?)?;
            debug(&i.meta.file, &|| json(i))
        }
        Job::Runs(k) => {
            let r = site.runs_page(k, debug_json);
            let t = RunsTemplate {
                meta: &r.meta,
                p: &r,
                sort_js: SORT_JS,
            };
            sink.put(&r.meta.file, page(t.render(), &r.meta.file)?)?;
            debug(&r.meta.file, &|| json(&r))
        }
        Job::Family(k) => {
            let f = site.family_page(k, debug_json);
            let t = FamilyTemplate {
                meta: &f.meta,
                p: &f,
                sort_js: SORT_JS,
            };
            sink.put(&f.meta.file, page(t.render(), &f.meta.file)?)?;
            debug(&f.meta.file, &|| json(&f))
        }
        Job::History => {
            let h = &site.history;
            let t = HistoryTemplate {
                meta: &h.meta,
                p: h,
                sort_js: SORT_JS,
            };
            sink.put(&h.meta.file, page(t.render(), &h.meta.file)?)?;
            debug(&h.meta.file, &|| json(h))
        }
        Job::Fit => {
            let f = &site.fit;
            let t = FitTemplate {
                meta: &f.meta,
                p: f,
                sort_js: SORT_JS,
            };
            sink.put(&f.meta.file, page(t.render(), &f.meta.file)?)?;
            debug(&f.meta.file, &|| json(f))
        }
        Job::Table(k) => {
            let t = &site.tables[k];
            let r = TableTemplate {
                meta: &t.meta,
                p: t,
                sort_js: SORT_JS,
            };
            sink.put(&t.meta.file, page(r.render(), &t.meta.file)?)?;
            debug(&t.meta.file, &|| json(t))
        }
        Job::Chart(k) => {
            let c = &site.charts[k];
            sink.put(&format!("charts/{}", c.file()), c.render()?.into_bytes())
        }
        Job::ChartsJson => sink.put("charts.json", json(&site.charts)?.into_bytes()),
        Job::Css => sink.put("site.css", SITE_CSS.as_bytes().to_vec()),
    }
}

/// Renders every file of the site into `sink`: each runs page and family page is filled,
/// rendered, handed over and dropped on its own, and the downloads are serialised straight
/// into the sink, on as many threads as the machine has cores (two at most: the downloads
/// start first, the pages share the rest). What each file holds does not depend on the order.
/// Returns every path, sorted; two outputs wanting one path is an error.
pub fn render_into(site: &Built, debug_json: bool, sink: &dyn Sink) -> Result<Vec<String>, String> {
    let mut jobs = vec![Job::DownloadJson, Job::DownloadCsv, Job::Index];
    let mut paths = vec![
        "memory-calibration.json".to_string(),
        "memory-calibration.csv".to_string(),
        site.index.meta.file.clone(),
    ];
    let with_debug = |paths: &mut Vec<String>, file: &str| {
        paths.push(file.to_string());
        if debug_json {
            paths.push(debug_name(file));
        }
    };
    paths.pop();
    with_debug(&mut paths, &site.index.meta.file);
    for (k, r) in site.runs.iter().enumerate() {
        jobs.push(Job::Runs(k));
        with_debug(&mut paths, &r.meta.file);
    }
    for (k, f) in site.families.iter().enumerate() {
        jobs.push(Job::Family(k));
        with_debug(&mut paths, &f.meta.file);
    }
    jobs.push(Job::History);
    with_debug(&mut paths, &site.history.meta.file);
    jobs.push(Job::Fit);
    with_debug(&mut paths, &site.fit.meta.file);
    for (k, t) in site.tables.iter().enumerate() {
        jobs.push(Job::Table(k));
        with_debug(&mut paths, &t.meta.file);
    }
    for (k, c) in site.charts.iter().enumerate() {
        jobs.push(Job::Chart(k));
        paths.push(format!("charts/{}", c.file()));
    }
    if debug_json {
        jobs.push(Job::ChartsJson);
        paths.push("charts.json".to_string());
    }
    jobs.push(Job::Css);
    paths.push("site.css".to_string());
    let mut seen = BTreeSet::new();
    for p in &paths {
        if !seen.insert(p.as_str()) {
            return Err(format!("two outputs want the path `{p}`"));
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Result<(), String> {
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(&job) = jobs.get(k) else {
                return Ok(());
            };
            if let Err(e) = run(site, debug_json, sink, job) {
                // Stop the other threads too.
                next.store(jobs.len(), std::sync::atomic::Ordering::Relaxed);
                return Err(e);
            }
        }
    };
    std::thread::scope(|sc| {
        let others: Vec<_> = (1..threads).map(|_| sc.spawn(work)).collect();
        let mut result = work();
        for h in others {
            let r = h
                .join()
                .unwrap_or_else(|_| Err("a render thread panicked".to_string()));
            result = result.and(r);
        }
        result
    })?;
    Ok(seen.into_iter().map(str::to_string).collect())
}
