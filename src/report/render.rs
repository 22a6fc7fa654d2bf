//! Turns the view model into files: askama templates for pages, the chart functions for SVGs,
//! and the view model itself as JSON with `--debug-json`. Output is a sorted map from relative
//! path to bytes, so two builds of the same inputs are byte-identical.

use super::view::{FamilyPage, HistoryPage, IndexPage, PageMeta, RunsPage, Site};
use askama::Template;
use std::collections::BTreeMap;

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

/// Every file of the site, by path relative to the site folder.
pub fn render(site: &Site, debug_json: bool) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut put = |path: String, bytes: Vec<u8>| -> Result<(), String> {
        match files.insert(path.clone(), bytes) {
            None => Ok(()),
            Some(_) => Err(format!("two outputs want the path `{path}`")),
        }
    };
    let page = |r: askama::Result<String>, file: &str| -> Result<Vec<u8>, String> {
        let mut s = r.map_err(|e| format!("{file}: {e}"))?;
        if !s.ends_with('\n') {
            s.push('\n');
        }
        Ok(s.into_bytes())
    };
    let i = &site.index;
    put(
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
        put(debug_name(&i.meta.file), json(i)?.into_bytes())?;
    }
    for r in &site.runs {
        let t = RunsTemplate {
            meta: &r.meta,
            p: r,
            sort_js: SORT_JS,
        };
        put(r.meta.file.clone(), page(t.render(), &r.meta.file)?)?;
        if debug_json {
            put(debug_name(&r.meta.file), json(r)?.into_bytes())?;
        }
    }
    for f in &site.families {
        let t = FamilyTemplate {
            meta: &f.meta,
            p: f,
            sort_js: SORT_JS,
        };
        put(f.meta.file.clone(), page(t.render(), &f.meta.file)?)?;
        if debug_json {
            put(debug_name(&f.meta.file), json(f)?.into_bytes())?;
        }
    }
    let h = &site.history;
    let t = HistoryTemplate {
        meta: &h.meta,
        p: h,
        sort_js: SORT_JS,
    };
    put(h.meta.file.clone(), page(t.render(), &h.meta.file)?)?;
    if debug_json {
        put(debug_name(&h.meta.file), json(h)?.into_bytes())?;
    }
    for c in &site.charts {
        put(format!("charts/{}", c.file()), c.render()?.into_bytes())?;
    }
    if debug_json {
        put("charts.json".to_string(), json(&site.charts)?.into_bytes())?;
    }
    put("site.css".to_string(), SITE_CSS.as_bytes().to_vec())?;
    put(
        "memory-calibration.json".to_string(),
        site.download_json.clone().into_bytes(),
    )?;
    put(
        "memory-calibration.csv".to_string(),
        site.download_csv.clone().into_bytes(),
    )?;
    Ok(files)
}
