//! The committed `site/index.html`'s headline tables against `calibration.json` (what `memcal
//! fit` writes, from the same `data/`): every figure of every cell is parsed back and compared
//! with the engine's number, every profile with rows has its table, every headline method of a
//! profile has its row, and exactly one row, the engine's verdict method, is marked.

use memcal::engine::{calibrate, load, write_calibration_json, Method};
use serde_json::Value;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `calibration.json` for `data/`, as `memcal fit` writes it, and each profile's verdict
/// method (`memcal plan`'s, from the held-out records).
fn calibration_json() -> (Value, std::collections::BTreeMap<String, Method>) {
    let ds = load(&repo().join("data")).expect("data/ loads");
    let cal = calibrate(&ds);
    let verdicts = memcal::plan::evidence::verdict_methods(&cal)
        .into_iter()
        .map(|(p, m)| (p.as_str().to_string(), m))
        .collect();
    (
        serde_json::from_str(&write_calibration_json(&cal)).expect("calibration.json parses"),
        verdicts,
    )
}

fn unescape(s: &str) -> String {
    s.replace("&#34;", "\"")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The text of `html` with its tags removed.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    unescape(out.trim())
}

/// Every `<open ...>...</close>` in `html`: (the opening tag, the inner HTML).
fn elements<'a>(html: &'a str, open: &str, close: &str) -> Vec<(&'a str, &'a str)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(open) {
        let after = &rest[i..];
        let tag_end = after.find('>').expect("a tag ends") + 1;
        let end = after.find(close).expect("an element closes");
        out.push((&after[..tag_end], &after[tag_end..end]));
        rest = &after[end + close.len()..];
    }
    out
}

/// A table on the page: its caption, its header labels, and per row (opening tag, text) cells.
struct Parsed<'a> {
    caption: String,
    columns: Vec<String>,
    rows: Vec<Vec<(&'a str, String)>>,
}

fn table<'a>(html: &'a str, id: &str) -> Option<Parsed<'a>> {
    let start = html.find(&format!("<table id=\"{id}\""))?;
    let end = start + html[start..].find("</table>").expect("the table closes");
    let t = &html[start..end];
    let caption = text(elements(t, "<caption", "</caption>")[0].1);
    let (head, body) = t.split_at(t.find("<tbody>").expect("a body"));
    let columns = elements(head, "<th", "</th>")
        .into_iter()
        .map(|(_, inner)| text(inner))
        .collect();
    let rows = elements(body, "<tr>", "</tr>")
        .into_iter()
        .map(|(_, tr)| {
            let mut cells: Vec<(&str, String)> = Vec::new();
            let mut rest = tr;
            while let Some(i) = rest.find('<') {
                let after = &rest[i..];
                let close = if after.starts_with("<th") {
                    "</th>"
                } else if after.starts_with("<td") {
                    "</td>"
                } else {
                    rest = &after[1..];
                    continue;
                };
                let tag_end = after.find('>').unwrap() + 1;
                let end = after.find(close).unwrap();
                cells.push((&after[..tag_end], text(&after[tag_end..end])));
                rest = &after[end + close.len()..];
            }
            cells
        })
        .collect();
    Some(Parsed {
        caption,
        columns,
        rows,
    })
}

/// A count as the page prints it (`1,494`).
fn count(s: &str) -> u64 {
    s.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("{s:?} is not a count"))
}

/// A share of the engine as the page prints it, one decimal of a percent.
fn pct(v: &Value) -> String {
    format!("{:.1}", v.as_f64().expect("a share") * 100.0)
}

/// A cell `7.0% (95%: 5.8–8.0%)`, `7.0% (95%: 5.8–8.0%; few runs)` or `59.7% (1 run: no
/// interval)` against the engine's share, its interval, its run count and few-runs flag.
fn check_share(cell: &str, share: &Value, interval: &Value, n: u64, few: bool, what: &str) {
    if share.is_null() {
        assert_eq!(cell, "—", "{what}: no value, printed as missing");
        return;
    }
    let (value, rest) = cell
        .split_once("% (")
        .unwrap_or_else(|| panic!("{what}: {cell:?}"));
    assert_eq!(value, pct(share), "{what}: the share in {cell:?}");
    let inner = rest
        .strip_suffix(')')
        .unwrap_or_else(|| panic!("{what}: {cell:?}"));
    if interval.is_null() {
        let noun = if n == 1 { "run" } else { "runs" };
        assert_eq!(
            inner,
            format!("{} {noun}: no interval", n),
            "{what}: {cell:?}"
        );
        return;
    }
    let confidence = format!("{:.0}%: ", memcal::engine::intervals::CONFIDENCE * 100.0);
    let inner = inner
        .strip_prefix(confidence.as_str())
        .unwrap_or_else(|| panic!("{what}: {cell:?}"));
    let inner = match inner.strip_suffix("; few runs") {
        Some(i) => {
            assert!(few, "{what}: few runs marked but the engine says not");
            i
        }
        None => {
            assert!(!few, "{what}: the engine's few-runs flag is not shown");
            inner
        }
    };
    let (low, high) = inner
        .strip_suffix('%')
        .and_then(|i| i.split_once('–'))
        .unwrap_or_else(|| panic!("{what}: {cell:?}"));
    assert_eq!(
        low,
        pct(&interval["low"]),
        "{what}: interval low in {cell:?}"
    );
    assert_eq!(
        high,
        pct(&interval["high"]),
        "{what}: interval high in {cell:?}"
    );
}

/// The method a row header names: its label, with the verdict method's mark.
fn method_of(header: &str) -> (Method, bool) {
    let (label, marked) = match header.strip_suffix(": the verdict method") {
        Some(l) => (l, true),
        None => (header, false),
    };
    let m = Method::ALL
        .into_iter()
        .find(|m| m.label() == label)
        .unwrap_or_else(|| panic!("{header:?} names no method"));
    (m, marked)
}

#[test]
fn every_figure_of_the_headline_tables_is_the_engines() {
    let (cal, verdicts) = calibration_json();
    let html = std::fs::read_to_string(repo().join("site/index.html")).unwrap();
    let headline = {
        let start = html.find("<section id=\"headline\"").expect("a headline");
        let end = start + html[start..].find("</section>").unwrap();
        &html[start..end]
    };
    let threshold = cal["settings"]["small_runs_threshold_bytes"]
        .as_u64()
        .unwrap();
    let band = format!("Within ±{:.0}%", memcal::engine::WITHIN * 100.0);
    assert!(
        headline.contains(&format!(
            "are over completed runs of at least {:.2} GB",
            threshold as f64 / 1e9
        )),
        "the note says which runs the error is over"
    );
    let mut tables = 0;
    let mut cells = 0;
    for (profile, fits) in cal["fits"].as_object().unwrap() {
        let methods = fits["methods"].as_object().unwrap();
        let Some(t) = table(headline, &format!("headline-{profile}")) else {
            assert!(
                methods.is_empty(),
                "{profile} has rows but no headline table"
            );
            continue;
        };
        tables += 1;
        assert!(t.caption.contains(profile.as_str()), "{}", t.caption);
        for d in cal["measured"]["devices_by_profile"][profile]
            .as_array()
            .unwrap()
        {
            let name = d.as_str().unwrap().split_once(": ").unwrap().1;
            assert!(
                t.caption.contains(name),
                "{profile}: device {name} not named"
            );
        }
        assert_eq!(
            t.columns,
            [
                "Method",
                "Median |error|",
                "Did-not-fit checks called \"fits\"",
                band.as_str(),
                "Runs in the error"
            ]
        );
        let mut shown = Vec::new();
        for row in &t.rows {
            assert_eq!(row.len(), 5, "{profile}: {row:?}");
            let (m, marked) = method_of(&row[0].1);
            assert_eq!(
                marked,
                Some(&m) == verdicts.get(profile),
                "{profile}: {:?}",
                row[0].1
            );
            assert_eq!(row[0].0.contains("verdict"), marked, "{:?}", row[0].0);
            let mm = &methods[m.as_str()];
            assert!(mm.is_object(), "{profile}: {} has no metrics", m.as_str());
            let what = format!("{profile} {}", m.as_str());
            let n = mm["error_rows"].as_u64().unwrap();
            let few = mm["few_runs"].as_bool().unwrap();
            check_share(
                &row[1].1,
                &mm["median_abs_rel_error"],
                &mm["median_interval"],
                n,
                few,
                &format!("{what} median"),
            );
            let checks = mm["did_not_fit_checks"].as_u64().unwrap();
            let missed = mm["missed_oom"].as_array().unwrap().len() as u64;
            let (counts, share) = match row[2].1.split_once("; ") {
                Some((c, s)) => (c, Some(s)),
                None => (row[2].1.as_str(), None),
            };
            let (a, b) = counts.split_once(" of ").expect("`missed of checks`");
            assert_eq!((count(a), count(b)), (missed, checks), "{what} missed");
            match share {
                Some(s) => check_share(
                    s,
                    &mm["missed_oom_share"],
                    &mm["missed_oom_interval"],
                    checks,
                    false,
                    &format!("{what} missed share"),
                ),
                None => assert!(mm["missed_oom_share"].is_null(), "{what}: share not shown"),
            }
            assert_eq!(
                row[2].0.contains("bad"),
                missed > 0,
                "{what}: {:?}",
                row[2].0
            );
            check_share(
                &row[3].1,
                &mm["within_25pct"],
                &mm["within_25pct_interval"],
                n,
                false,
                &format!("{what} within"),
            );
            assert_eq!(count(&row[4].1), n, "{what} runs in the error");
            shown.push(m);
            cells += row.len();
        }
        assert_eq!(
            shown.first(),
            verdicts.get(profile),
            "{profile}: verdict first"
        );
        for m in Method::ALL {
            if m != Method::PlanRefitInSample && methods.contains_key(m.as_str()) {
                assert!(shown.contains(&m), "{profile}: {} has no row", m.as_str());
            }
        }
        // Every method but the in-sample refit (absent where no row of the profile is fitted).
        let refit = usize::from(methods.contains_key(Method::PlanRefitInSample.as_str()));
        assert_eq!(shown.len(), methods.len() - refit, "{profile}: {shown:?}");
    }
    assert_eq!(
        tables, 3,
        "data/ has a CPU fp32, a GPU bf16-autocast and a GPU bf16 profile"
    );
    assert!(cells > 50, "{cells} cells checked");
}

#[test]
fn the_parser_catches_a_wrong_cell() {
    // The comparison is not vacuous: one figure off by a tenth of a percent fails it.
    let v = serde_json::json!({"low": 0.058, "high": 0.08});
    let ok = std::panic::catch_unwind(|| {
        check_share(
            "7.0% (95%: 5.8–8.0%)",
            &serde_json::json!(0.07),
            &v,
            10,
            false,
            "x",
        )
    });
    assert!(ok.is_ok());
    for wrong in [
        "7.1% (95%: 5.8–8.0%)",
        "7.0% (95%: 5.9–8.0%)",
        "7.0% (95%: 5.8–8.1%)",
        "7.0% (95%: 5.8–8.0%; few runs)",
        "7.0%",
    ] {
        let r = std::panic::catch_unwind(|| {
            check_share(wrong, &serde_json::json!(0.07), &v, 10, false, "x")
        });
        assert!(r.is_err(), "{wrong} passed");
    }
}
