//! Turns the view model into files: askama templates for pages, the chart functions for SVGs,
//! and the view model itself as JSON with `--debug-json`. Output is a sorted map from relative
//! path to bytes, so two builds of the same inputs are byte-identical.

use super::view::{FamilyPage, HistoryPage, IndexPage, PageMeta, RunsPage, Site};
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

/// Where rendered files go: the writer (files on disk, written as they come) or memory.
pub trait Sink {
    /// A file whose bytes are all there.
    fn put(&mut self, path: &str, bytes: Vec<u8>) -> Result<(), String>;
    /// A large file, written by `write` as it is serialised.
    fn stream(
        &mut self,
        path: &str,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), String>;
}

/// Collects every file in memory, by relative path.
impl Sink for BTreeMap<String, Vec<u8>> {
    fn put(&mut self, path: &str, bytes: Vec<u8>) -> Result<(), String> {
        self.insert(path.to_string(), bytes);
        Ok(())
    }

    fn stream(
        &mut self,
        path: &str,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), String> {
        let mut bytes = Vec::new();
        write(&mut bytes).map_err(|e| format!("{path}: {e}"))?;
        self.put(path, bytes)
    }
}

/// Every file of the site, by path relative to the site folder, in memory.
pub fn render(site: &Site, debug_json: bool) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut files = BTreeMap::new();
    render_into(site, debug_json, &mut files)?;
    Ok(files)
}

/// Renders every file of the site into `sink`, one at a time: each runs page and family page
/// is filled, rendered, handed over and dropped before the next, and the downloads are
/// serialised straight into the sink. Returns every path, sorted.
pub fn render_into(
    site: &Site,
    debug_json: bool,
    sink: &mut dyn Sink,
) -> Result<Vec<String>, String> {
    let mut paths: BTreeSet<String> = BTreeSet::new();
    let mut claim = |path: &str| -> Result<(), String> {
        if paths.insert(path.to_string()) {
            Ok(())
        } else {
            Err(format!("two outputs want the path `{path}`"))
        }
    };
    let page = |r: askama::Result<String>, file: &str| -> Result<Vec<u8>, String> {
        let mut s = r.map_err(|e| format!("{file}: {e}"))?;
        if !s.ends_with('\n') {
            s.push('\n');
        }
        Ok(s.into_bytes())
    };
    let mut put = |sink: &mut dyn Sink, path: String, bytes: Vec<u8>| -> Result<(), String> {
        claim(&path)?;
        sink.put(&path, bytes)
    };
    let i = &site.index;
    put(
        sink,
        i.meta.file.clone(),
        page(
            IndexTemplate {
                meta: &i.meta,
                p: i,
            }
            .render(),
            &i.meta.file,
        )?,
    )?;
    if debug_json {
        put(sink, debug_name(&i.meta.file), json(i)?.into_bytes())?;
    }
    for k in 0..site.runs.len() {
        let r = site.runs_page(k);
        let t = RunsTemplate {
            meta: &r.meta,
            p: &r,
            sort_js: SORT_JS,
        };
        put(sink, r.meta.file.clone(), page(t.render(), &r.meta.file)?)?;
        if debug_json {
            put(sink, debug_name(&r.meta.file), json(&r)?.into_bytes())?;
        }
    }
    for k in 0..site.families.len() {
        let f = site.family_page(k);
        let t = FamilyTemplate {
            meta: &f.meta,
            p: &f,
            sort_js: SORT_JS,
        };
        put(sink, f.meta.file.clone(), page(t.render(), &f.meta.file)?)?;
        if debug_json {
            put(sink, debug_name(&f.meta.file), json(&f)?.into_bytes())?;
        }
    }
    let h = &site.history;
    let t = HistoryTemplate {
        meta: &h.meta,
        p: h,
        sort_js: SORT_JS,
    };
    put(sink, h.meta.file.clone(), page(t.render(), &h.meta.file)?)?;
    if debug_json {
        put(sink, debug_name(&h.meta.file), json(h)?.into_bytes())?;
    }
    for c in &site.charts {
        put(
            sink,
            format!("charts/{}", c.file()),
            c.render()?.into_bytes(),
        )?;
    }
    if debug_json {
        put(
            sink,
            "charts.json".to_string(),
            json(&site.charts)?.into_bytes(),
        )?;
    }
    put(sink, "site.css".to_string(), SITE_CSS.as_bytes().to_vec())?;
    for (path, write) in [
        (
            "memory-calibration.json",
            &(|w: &mut dyn std::io::Write| site.write_download_json(w))
                as &dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()>,
        ),
        ("memory-calibration.csv", &|w: &mut dyn std::io::Write| {
            site.write_download_csv(w)
        }),
    ] {
        claim(path)?;
        sink.stream(path, &mut |w| write(w))?;
    }
    Ok(paths.into_iter().collect())
}
