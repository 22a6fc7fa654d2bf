//! `memcal build`: the fixture data dir under `tests/fixtures/site/` is built into a temporary
//! folder and checked page by page; snapshots pin the view model and the index's `<main>`.

mod common;

use common::copy_tree;
use memcal::report::{build_site, check_site, render_files};
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/site")
}

fn read(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The text between `<main` and `</main>`.
fn main_of(html: &str) -> &str {
    let start = html.find("<main").expect("a <main>");
    let end = html.find("</main>").expect("a </main>") + "</main>".len();
    &html[start..end]
}

/// Replaces the machine's paths in text with placeholders.
fn redact(text: &str) -> String {
    text.replace(env!("CARGO_MANIFEST_DIR"), "[repo]")
}

fn built() -> (tempfile::TempDir, memcal::report::BuildSummary) {
    let out = tempfile::tempdir().unwrap();
    let summary = build_site(&fixture(), out.path(), true).expect("the fixture builds");
    (out, summary)
}

#[test]
fn sections_are_in_order() {
    let (out, _) = built();
    let index = read(out.path(), "index.html");
    let headings = [
        "Headline",
        "Predicted against measured",
        "The four ways to say it",
        "Every time a run did not fit a card",
        "The upper bound",
        "How the numbers are made",
        "Out of sample",
        "Known misses",
        "Not counted",
        "All runs",
    ];
    let mut at = 0;
    for h in headings {
        let tag = format!(">{h}</h2>");
        let i = index[at..]
            .find(&tag)
            .unwrap_or_else(|| panic!("heading `{h}` missing or out of order"));
        at += i + tag.len();
    }
}

#[test]
fn every_chart_is_present_and_drawn() {
    let (out, summary) = built();
    let index = read(out.path(), "index.html");
    for m in [
        "accelerate",
        "textbook",
        "plan-held-out-architecture",
        "plan-as-shipped",
    ] {
        let rel = format!("charts/scatter-{m}-fp32.svg");
        assert!(
            index.contains(&format!("src=\"{rel}\"")),
            "index shows {rel}"
        );
        let svg = read(out.path(), &rel);
        assert!(
            svg.starts_with("<svg") && svg.contains("<circle"),
            "{rel} draws points"
        );
    }
    assert!(read(out.path(), "charts/upper-bound-ratios-fp32.svg").contains("<circle"));
    // Every chart an HTML page references exists and is non-empty, and every chart is used.
    let svgs: Vec<&String> = summary
        .files
        .iter()
        .filter(|f| f.ends_with(".svg"))
        .collect();
    assert!(svgs.len() >= 5);
    let pages: String = summary
        .files
        .iter()
        .filter(|f| f.ends_with(".html"))
        .map(|f| read(out.path(), f))
        .collect();
    for svg in svgs {
        assert!(!read(out.path(), svg).trim().is_empty(), "{svg} is empty");
        assert!(
            pages.contains(&format!("src=\"{svg}\"")),
            "{svg} is on a page"
        );
    }
    // Out-of-memory runs are drawn as crosses (paths), not dots.
    let plan = read(out.path(), "charts/scatter-plan-as-shipped-fp32.svg");
    assert!(plan.contains("out of memory"));
}

#[test]
fn names_from_data_are_escaped() {
    let (out, summary) = built();
    for f in summary.files.iter().filter(|f| f.ends_with(".html")) {
        let html = read(out.path(), f);
        assert!(
            !html.contains("<script>\n") || html.matches("<script>").count() == 1,
            "{f}: only the sorting script is a script"
        );
        let without_script = html.replace("<script>\n", "");
        assert!(
            !without_script.contains("<script>"),
            "{f}: a name from data became markup"
        );
    }
    let runs = read(out.path(), "runs.html");
    assert!(
        runs.contains("&#60;script&#62;") || runs.contains("&lt;script&gt;"),
        "the graph `<script>` shows as text"
    );
    let svg = read(out.path(), "charts/scatter-plan-as-shipped-fp32.svg");
    assert!(!svg.contains("<script"));
}

#[test]
fn downloads_exist_and_parse() {
    let (out, _) = built();
    let json: serde_json::Value =
        serde_json::from_str(&read(out.path(), "memory-calibration.json")).expect("JSON");
    let rows = json["rows"].as_array().expect("rows");
    assert!(!rows.is_empty());
    for r in rows {
        assert!(r["features"].as_array().is_some_and(|f| f.len() == 6));
        assert!(r["predictions"].is_object());
    }
    let csv = read(out.path(), "memory-calibration.csv");
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().expect("header").split(',').collect();
    assert_eq!(head[0], "run_id");
    let body: Vec<&str> = lines.collect();
    assert_eq!(body.len(), rows.len(), "one CSV line per row");
    for l in body {
        assert_eq!(l.split(',').count(), head.len(), "{l}");
    }
}

#[test]
fn family_pages_exist() {
    let (out, summary) = built();
    for fam in ["gpt", "gru", "mlp"] {
        let page = format!("family-{fam}.html");
        assert!(summary.files.contains(&page), "{page}");
        let html = read(out.path(), &page);
        assert!(html.contains(&format!("<h1>Family {fam}")));
        assert!(html.contains("<caption>"));
    }
    assert!(read(out.path(), "index.html").contains("href=\"family-gpt.html\""));
}

#[test]
fn tables_are_accessible_and_sortable() {
    let (out, _) = built();
    let runs = read(out.path(), "runs.html");
    assert!(runs.contains("<caption>"));
    assert!(runs.contains("<th scope=\"col\""));
    assert!(runs.contains("<th scope=\"row\""));
    assert!(runs.contains("class=\"sortable\""));
    assert!(runs.contains("querySelectorAll(\"table.sortable\")"));
    // CPU regimes are labelled CPU, never GPU.
    assert!(runs.contains("cpu-free (CPU)"));
    assert!(!read(out.path(), "index.html").contains("(GPU)"));
}

#[test]
fn builds_are_byte_identical() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let sa = build_site(&fixture(), a.path(), true).unwrap();
    let sb = build_site(&fixture(), b.path(), true).unwrap();
    assert_eq!(sa, sb);
    for f in &sa.files {
        assert_eq!(
            std::fs::read(a.path().join(f)).unwrap(),
            std::fs::read(b.path().join(f)).unwrap(),
            "{f} differs between two builds"
        );
    }
    // --check agrees with a build without --debug-json, and names the first differing file.
    let c = tempfile::tempdir().unwrap();
    build_site(&fixture(), c.path(), false).unwrap();
    assert_eq!(check_site(&fixture(), c.path()), Ok(()));
    std::fs::write(c.path().join("index.html"), "changed").unwrap();
    let err = check_site(&fixture(), c.path()).unwrap_err();
    assert!(err.starts_with("index.html"), "{err}");
}

#[test]
fn only_files_in_the_manifest_are_removed_and_others_kept() {
    let out = tempfile::tempdir().unwrap();
    let first = build_site(&fixture(), out.path(), false).unwrap();
    assert!(first.removed.is_empty());
    let manifest = std::fs::read_to_string(out.path().join(".memcal-manifest")).unwrap();
    assert!(
        manifest.starts_with("memcal-site-manifest/1\n"),
        "{manifest}"
    );
    for f in &first.files {
        assert!(manifest.lines().any(|l| l == f), "{f} not in the manifest");
    }
    // An earlier build's file this one does not write (listed), and files memcal did not write
    // (not listed), one of them where a build writes its own files.
    std::fs::write(out.path().join("family-old.html"), "old").unwrap();
    std::fs::write(
        out.path().join(".memcal-manifest"),
        format!("{manifest}family-old.html\n"),
    )
    .unwrap();
    std::fs::write(out.path().join("README.txt"), "keep").unwrap();
    std::fs::write(out.path().join("charts/mine.svg"), "<svg/>").unwrap();
    let s = build_site(&fixture(), out.path(), false).unwrap();
    assert_eq!(s.removed, vec!["family-old.html"]);
    assert_eq!(s.kept, vec!["README.txt", "charts/mine.svg"]);
    assert!(!out.path().join("family-old.html").exists());
    assert_eq!(read(out.path(), "README.txt"), "keep");
    assert_eq!(read(out.path(), "charts/mine.svg"), "<svg/>");
    assert_eq!(check_site(&fixture(), out.path()), Ok(()));
    // No temporary sibling is left next to the site.
    let parent = out.path().parent().unwrap();
    let name = out
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    for e in std::fs::read_dir(parent).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            !n.starts_with(&format!(".{name}.memcal-")),
            "left behind: {n}"
        );
    }
}

#[test]
fn a_folder_memcal_did_not_build_is_refused_untouched() {
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("package.json"), "{}").unwrap();
    std::fs::write(out.path().join("index.html"), "mine").unwrap();
    let err = build_site(&fixture(), out.path(), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no .memcal-manifest"), "{err}");
    assert_eq!(read(out.path(), "package.json"), "{}");
    assert_eq!(read(out.path(), "index.html"), "mine");
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 2);
}

#[test]
fn concurrent_builds_leave_one_whole_site() {
    let out = tempfile::tempdir().unwrap();
    let site = out.path().join("site");
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                // A build that loses the race to rename its folder in says so; none mixes.
                let _ = build_site(&fixture(), &site, false);
            });
        }
    });
    assert_eq!(check_site(&fixture(), &site), Ok(()));
}

#[test]
fn an_empty_data_set_builds_a_page_that_says_so() {
    let data = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture().join("factors.json"),
        data.path().join("factors.json"),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    // Without runs/ the folder is refused (a wrong --data must not build an empty site) ...
    let err = build_site(data.path(), out.path(), false).unwrap_err();
    assert!(err.to_string().contains("runs: missing"), "{err}");
    // ... and with an empty runs/ (and the prose and factor history a site needs) it is an
    // empty data set.
    std::fs::create_dir(data.path().join("runs")).unwrap();
    std::fs::create_dir(data.path().join("prose")).unwrap();
    copy_tree(&fixture().join("prose"), &data.path().join("prose"));
    std::fs::copy(
        fixture().join("factors-history.json"),
        data.path().join("factors-history.json"),
    )
    .unwrap();
    let s = build_site(data.path(), out.path(), false).unwrap();
    assert_eq!(s.rows, 0);
    let index = read(out.path(), "index.html");
    assert!(index.contains("No measured rows yet"));
    assert!(index.contains(">All runs</h2>"));
    assert!(out.path().join("memory-calibration.csv").exists());
}

#[test]
fn snapshot_of_the_view_model() {
    let (site, _) = render_files(&fixture(), false).unwrap();
    let json = redact(&serde_json::to_string_pretty(&site.index).unwrap());
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    insta::assert_json_snapshot!("site_view_model", v);
}

#[test]
fn snapshot_of_the_index_main() {
    let (_, files) = render_files(&fixture(), false).unwrap();
    let index = String::from_utf8(files["index.html"].clone()).unwrap();
    insta::assert_snapshot!("index_main", redact(main_of(&index)));
}

/// Words that say a number. "one" is not among them: prose uses it as a pronoun and an article
/// ("one chart per method"), never as a count the data could change.
const NUMBER_WORDS: [&str; 41] = [
    "zero",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "sixty",
    "seventy",
    "eighty",
    "ninety",
    "hundred",
    "thousand",
    "million",
    "billion",
    "half",
    "halves",
    "quarter",
    "quarters",
    "third",
    "thirds",
    "dozen",
    "twice",
    "thrice",
    "percent",
];

/// Why `text` types a number, if it does: a digit, or a number word (after the placeholders
/// that stand for the engine's constants are taken out).
fn typed_number(text: &str) -> Option<String> {
    let mut t = text.to_string();
    for p in memcal::report::markdown::PLACEHOLDERS {
        t = t.replace(p, " ");
    }
    if let Some(c) = t.chars().find(|c| c.is_ascii_digit()) {
        return Some(format!("the digit {c}"));
    }
    if let Some(i) = t.find('{') {
        return Some(format!("an unknown placeholder at {:?}", &t[i..]));
    }
    t.to_lowercase()
        .split(|c: char| !c.is_alphabetic())
        .find(|w| NUMBER_WORDS.contains(w))
        .map(|w| format!("the number word {w:?}"))
}

#[test]
fn the_number_check_catches_number_words() {
    assert_eq!(typed_number("within {within}, {features} features"), None);
    for typed in [
        "three or more batches",
        "within a quarter",
        "Six features",
        "uncapped (139.8 GiB)",
        "a {nope} placeholder",
    ] {
        assert!(typed_number(typed).is_some(), "{typed}");
    }
}

#[test]
fn prose_carries_no_numbers_and_no_markup() {
    // Numbers on a page come from the view model or the engine's constants; prose under
    // data/prose/ and the regimes' descriptions in data/factors.json type none, in digits or
    // in words.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = repo.join("data/prose");
    for entry in walk(&dir) {
        let text = std::fs::read_to_string(&entry).unwrap();
        if let Some(why) = typed_number(&text) {
            panic!("{} types a number: {why}", entry.display());
        }
    }
    let factors = memcal::factors::FactorsFile::load(&repo.join("data/factors.json")).unwrap();
    assert!(!factors.regimes.is_empty());
    for (name, r) in &factors.regimes {
        if let Some(why) = typed_number(&r.description) {
            panic!("regime {name}'s description types a number: {why}");
        }
    }
    // Raw HTML in prose is shown as text, and a family's note reaches its page.
    let (out, _) = built();
    let index = read(out.path(), "index.html");
    assert!(index.contains("<em>emphasis</em>"));
    assert!(index.contains("&lt;script&gt;alert"));
    assert!(read(out.path(), "family-gru.html").contains("Fixture note: the recurrent gates"));
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn a_large_runs_table_is_split_by_family_and_paged() {
    let ds = memcal::engine::load(&fixture()).unwrap();
    let cal = memcal::engine::calibrate(&ds);
    let prose = memcal::report::ProseInput::default();
    // At most 5 rows a page: split by family, and the larger families into pages.
    let site = memcal::report::build::from_calibration_paged(&cal, &ds.factors, &prose, 5);
    let files: Vec<&str> = site.runs.iter().map(|r| r.meta.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "runs-gpt.html",
            "runs-gpt.p2.html",
            "runs-gru.html",
            "runs-mlp.html",
            "runs-mlp.p2.html"
        ]
    );
    let pages: Vec<_> = (0..site.runs.len())
        .map(|k| site.runs_page(k, true))
        .collect();
    assert!(pages.iter().all(|p| p.table.rows.len() <= 5));
    let ids: Vec<String> = pages
        .iter()
        .flat_map(|p| p.table.rows.iter().map(|r| r[0].text.clone()))
        .collect();
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), cal.rows.len(), "every run is on a page");
    assert_eq!(distinct.len(), ids.len(), "and on one page only");
    // The index links each family's first page; each page links its family's pages; the
    // family page links them too and carries no copy of the table.
    let links: Vec<&str> = site
        .index
        .all_runs
        .pages
        .iter()
        .map(|l| l.href.as_str())
        .collect();
    assert_eq!(links, ["runs-gpt.html", "runs-gru.html", "runs-mlp.html"]);
    let gpt: Vec<&str> = pages[1].pages.iter().map(|l| l.href.as_str()).collect();
    assert_eq!(gpt, ["runs-gpt.html", "runs-gpt.p2.html"]);
    assert!(
        pages[2].pages.is_empty(),
        "a family on one page lists no pages"
    );
    let fam = site.family_page(0, true);
    assert!(fam.runs.is_none());
    let fam_links: Vec<&str> = fam.runs_pages.iter().map(|l| l.href.as_str()).collect();
    assert_eq!(fam_links, gpt);
    let rendered = memcal::report::render::render(&site, false).unwrap();
    assert!(rendered.contains_key("runs-gpt.p2.html") && !rendered.contains_key("runs.html"));
    let p2 = String::from_utf8(rendered["runs-gpt.p2.html"].clone()).unwrap();
    assert!(p2.contains("<a href=\"runs-gpt.html\">page 1 of 2"), "{p2}");
    let family = String::from_utf8(rendered["family-gpt.html"].clone()).unwrap();
    assert!(family.contains("<a href=\"runs-gpt.p2.html\">"));
}

#[test]
fn runs_rows_written_straight_match_the_template() {
    // Without --debug-json the runs tables are written straight from the engine's rows; with
    // it, through a cell per value and the table macro. The pages must be the same bytes, for
    // the one-table site and the split and paged one.
    let ds = memcal::engine::load(&fixture()).unwrap();
    let cal = memcal::engine::calibrate(&ds);
    let prose = memcal::report::ProseInput::default();
    for per_page in [memcal::report::build::RUNS_PER_PAGE_LIMIT, 5] {
        let site =
            memcal::report::build::from_calibration_paged(&cal, &ds.factors, &prose, per_page);
        let fast = memcal::report::render::render(&site, false).unwrap();
        let cells = memcal::report::render::render(&site, true).unwrap();
        let mut pages = 0;
        for (path, bytes) in &fast {
            if path.ends_with(".html") {
                assert!(cells[path] == *bytes, "{path} differs");
                pages += 1;
            }
        }
        assert!(pages > 3);
    }
}

#[test]
fn templates_only_place_strings() {
    // `if` and `for` only: no arithmetic and no filter but `safe` (HTML the build made).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "html") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (open, close) in [("{{", "}}"), ("{%", "%}")] {
            for chunk in text.split(open).skip(1) {
                let expr = chunk.split(close).next().unwrap();
                let name = path.file_name().unwrap().to_string_lossy();
                assert!(
                    !expr.contains(['+', '*', '/', '%']) && !expr.contains(" - "),
                    "{name}: arithmetic in `{expr}`"
                );
                for filter in expr.split('|').skip(1) {
                    assert_eq!(filter.trim(), "safe", "{name}: filter in `{expr}`");
                }
                let keyword = expr
                    .trim()
                    .trim_start_matches('-')
                    .split_whitespace()
                    .next();
                if open == "{%" {
                    assert!(
                        matches!(
                            keyword,
                            Some(
                                "if" | "else"
                                    | "endif"
                                    | "for"
                                    | "endfor"
                                    | "block"
                                    | "endblock"
                                    | "extends"
                                    | "import"
                                    | "macro"
                                    | "endmacro"
                                    | "call"
                                    | "endcall"
                            )
                        ),
                        "{name}: tag `{expr}`"
                    );
                }
            }
        }
    }
}

#[test]
fn the_factor_history_page_shows_audited_values_newest_first() {
    // A repository holding a copy of the fixture, fitted twice (a row changed in between), and
    // a history entry nobody's fit wrote.
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let data = repo.join("data");
    std::fs::create_dir_all(&data).unwrap();
    copy_tree(&fixture(), &data);
    let _ = std::fs::remove_file(data.join("factors-history.json"));
    let git = |args: &[&str]| common::git(&repo, args);
    let fit = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_memcal"))
            .current_dir(&repo)
            .args(["fit", "--write-factors", "--out", "../cal.json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "fixture"]);
    fit();
    git(&["add", "."]);
    git(&["commit", "-qm", "first fit"]);
    // Drop one fitted row and fit again one second later (fixing times are to the second).
    let runs: Vec<PathBuf> = walk_json(&data.join("runs"));
    std::fs::remove_file(&runs[0]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    fit();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "second fit"]);
    let history =
        memcal::factors::FactorHistory::load_or_empty(&data.join("factors-history.json")).unwrap();
    assert_eq!(history.entries.len(), 2);
    let (first, second) = (&history.entries[0], &history.entries[1]);
    assert_ne!(first.fixed_at, second.fixed_at);
    let out = tempfile::tempdir().unwrap();
    build_site(&data, out.path(), false).unwrap();
    let html = read(out.path(), "history.html");
    let newer = html.find(&second.fixed_at).expect("newer entry");
    let older = html.find(&first.fixed_at).expect("older entry");
    assert!(newer < older, "newest first");
    assert_eq!(
        html.matches(">audited<").count(),
        html.matches("<tr>").count() - 1
    );
    assert!(
        html.contains("commit "),
        "each entry names its commit: {html}"
    );

    // A fabricated entry: the page shows none of its values and says it fails.
    let mut forged = history.clone();
    // Fixed after the second fit, and not in the future (a history entry in the future is
    // refused outright).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let forged_at = memcal::clock::now();
    let mut e = second.clone();
    e.fixed_at = forged_at.clone();
    e.rows = 99_999;
    forged.entries.push(e);
    std::fs::write(data.join("factors-history.json"), forged.to_json()).unwrap();
    build_site(&data, out.path(), false).unwrap();
    let html = read(out.path(), "history.html");
    assert!(html.contains(&forged_at) && html.contains("fails (1 difference;"));
    assert!(
        !html.contains("99,999") && !html.contains("99999"),
        "{html}"
    );
    assert!(read(out.path(), "index.html").contains("href=\"history.html\""));
}

fn walk_json(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    out.sort();
    out
}

#[test]
fn the_shipped_site_keeps_each_precision_profile_apart() {
    // data/ has CPU fp32 and GPU bf16-autocast rows: the headline, the methods and the
    // multipliers speak of each profile on its own rows.
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let out = tempfile::tempdir().unwrap();
    build_site(&data, out.path(), false).unwrap();
    let index = read(out.path(), "index.html");
    for p in ["fp32", "bf16-autocast"] {
        assert!(
            index.contains(&format!("<table id=\"headline-{p}\"")),
            "the headline table of {p}"
        );
        assert!(
            std::fs::metadata(
                out.path()
                    .join(format!("charts/upper-bound-ratios-{p}.svg"))
            )
            .is_ok(),
            "the bound's chart of {p}"
        );
        // One scatter per profile and method, each drawing only that profile's device.
        let scatter = read(
            out.path(),
            &format!("charts/scatter-plan-as-shipped-{p}.svg"),
        );
        let (own, other) = if p == "fp32" {
            ("CPU", "GPU")
        } else {
            ("GPU", "CPU")
        };
        assert!(
            scatter.contains(&format!("{own} {p} runs")),
            "{p}'s scatter"
        );
        assert!(!scatter.contains(&format!("{other} run")), "{p}'s scatter");
    }
    assert!(index.contains("id=\"methods-by-profile\""));
    // No figure pools the profiles: no table of the methods over all rows, the out-of-sample
    // tables have a row per profile, a family page a chart per profile.
    assert!(!index.contains("<table id=\"methods\""));
    for page in [
        "held-out-by-architecture.html",
        "held-out-by-implementation.html",
    ] {
        let html = read(out.path(), page);
        assert!(
            html.contains(">fp32</") && html.contains(">bf16-autocast</"),
            "{page}"
        );
    }
    let family = read(out.path(), "family-gpt.html");
    for p in ["fp32", "bf16-autocast"] {
        assert!(
            family.contains(&format!("charts/family-gpt-{p}.svg")),
            "{p}"
        );
    }
    // Known misses: a table per profile with every method, the deciding one first; the
    // simulator's missed GPU checks (it decides on both profiles) are in it.
    let verdict = memcal::plan::evidence::verdict_methods(&memcal::engine::calibrate(
        &memcal::engine::load(&data).unwrap(),
    ));
    for (p, m) in &verdict {
        let at = index
            .find(&format!("<table id=\"misses-{}\"", p.as_str()))
            .unwrap_or_else(|| panic!("the known misses of {p:?}"));
        let table = &index[at..at + index[at..].find("</table>").unwrap()];
        let first = table.find("<th scope=\"row\">").expect("a row");
        assert!(
            table[first..].starts_with(&format!(
                "<th scope=\"row\">{} (decides the verdict)",
                m.label()
            )),
            "{p:?}: {table}"
        );
        for other in [
            memcal::engine::Method::Accelerate,
            memcal::engine::Method::PlanAsShipped,
        ] {
            assert!(table.contains(other.label()), "{p:?} lists {other:?}");
        }
    }
    let gpu = &index[index.find("<table id=\"misses-bf16-autocast\"").unwrap()..];
    assert!(
        gpu[..gpu.find("</table>").unwrap()].contains("gru (4)"),
        "{gpu}"
    );
    assert!(read(out.path(), "known-misses.html").contains("gru-r3"));
    // The headline says what was measured and what was not, in computed sentences: per profile
    // its device, largest model and fitted range; the simulator's exact matches; the strategies
    // that are formulas (from the strategies table); why rows are not counted.
    let at = index
        .find("<ul class=\"scope\">")
        .expect("the headline's scope");
    let scope = &index[at..at + index[at..].find("</ul>").unwrap()];
    for needle in [
        "CPU fp32 (",
        "GPU bf16-autocast (",
        "the largest model measured has 7,248,023,552 parameters",
        "fp32: the six-factor plan was fitted on",
        "to the byte",
        "formulas, not measured: ",
        "are not counted in the figures",
    ] {
        assert!(scope.contains(needle), "{needle}: {scope}");
    }
    let ds = memcal::engine::load(&data).unwrap();
    for formula in &memcal::strategy::evidence::evidence(&ds, &data).formulas_only {
        assert!(scope.contains(formula), "{formula}: {scope}");
    }
}

#[test]
fn the_shipped_site_spells_missing_one_way_and_sizes_once() {
    // A missing value is `format::MISSING` on every page, never "n/a" or a lone "-"; a size
    // is printed once with its unit (no "16 GB (16.00 GB (14.90 GiB))").
    let site = Path::new(env!("CARGO_MANIFEST_DIR")).join("site");
    let mut pages = 0;
    for entry in std::fs::read_dir(&site).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("html") {
            continue;
        }
        pages += 1;
        let html = std::fs::read_to_string(&path).unwrap();
        let name = path.display();
        for bad in ["n/a", "N/A", ">-<", ">–<", "> - <"] {
            assert!(
                !html.contains(bad),
                "{name} prints a missing value as {bad:?}"
            );
        }
        for (i, _) in html.match_indices(" GB (") {
            let rest = &html[i + " GB (".len()..];
            let inner: String = rest.chars().take_while(|c| *c != ')').collect();
            assert!(
                !inner.contains("GB (") && !inner.contains("GiB ("),
                "{name} prints a size twice: {:?}",
                &html[i.saturating_sub(20)..(i + 40).min(html.len())]
            );
        }
    }
    assert!(pages > 3, "{pages} pages");
    assert_eq!(memcal::format::MISSING, "—");
}

/// The shipped index stays under 150 KB: its long tables are on pages of their own, each
/// linked from where the table stood.
#[test]
fn the_shipped_index_is_under_150_kb_and_links_its_long_tables() {
    let site = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("site");
    let index = std::fs::read_to_string(site.join("index.html")).unwrap();
    assert!(index.len() < 150_000, "index.html is {} bytes", index.len());
    for page in [
        "did-not-fit.html",
        "not-counted.html",
        "accelerate.html",
        "full-size-verdicts.html",
        "strategies-by-family.html",
    ] {
        assert!(
            index.contains(&format!("href=\"{page}\"")),
            "{page} not linked"
        );
        let text = std::fs::read_to_string(site.join(page)).unwrap();
        assert!(text.contains("<table"), "{page} has no table");
    }
}

#[test]
fn the_shipped_site_shows_no_raw_markdown() {
    // Markdown is rendered wherever it is shown (prose, history notes, table cells): no page of
    // the shipped site has a backtick left over from a code span.
    let site = Path::new(env!("CARGO_MANIFEST_DIR")).join("site");
    for entry in std::fs::read_dir(&site).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("html") {
            continue;
        }
        let html = std::fs::read_to_string(&path).unwrap();
        if let Some(at) = html.find('`') {
            let from = html[..at]
                .char_indices()
                .rev()
                .nth(80)
                .map_or(0, |(i, _)| i);
            panic!(
                "{}: a raw backtick: {}",
                path.display(),
                &html[from..at + 1]
            );
        }
    }
}
