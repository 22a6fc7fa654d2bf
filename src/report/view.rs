//! The view model: one serialisable struct per page whose fields are already formatted
//! strings (criterion.rs's html module, mdBook's single render context). Templates only place
//! these strings; [`from_calibration`](crate::report::build::from_calibration) fills them
//! from the engine's numbers. `--debug-json` writes each page's struct next to the page.

use super::charts::Chart;
use serde::Serialize;

/// A link in the navigation or a download.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Link {
    pub href: String,
    pub text: String,
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Column {
    pub label: String,
    /// Right-aligned, sorted by each cell's `sort` key as a number.
    pub numeric: bool,
}

/// One cell: the text shown and the key the sorting script uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    pub text: String,
    /// A plain number (no unit) for numeric columns; the text otherwise.
    pub sort: String,
    /// Optional link target.
    pub href: Option<String>,
    /// A CSS class name from a fixed set (`good`, `bad`, `warn`, `verdict`), if any.
    pub class: Option<String>,
    /// The text's inline Markdown as HTML (code spans, emphasis), shown in place of `text`
    /// where the text is Markdown ([`Cell::markdown`]); `text` stays the sort key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
}

impl Cell {
    /// A text cell.
    pub fn text(text: impl Into<String>) -> Cell {
        let text = text.into();
        Cell {
            sort: text.clone(),
            text,
            href: None,
            class: None,
            html: None,
        }
    }

    /// A text cell whose text is inline Markdown (a code span names a command or a graph):
    /// rendered, never shown raw.
    pub fn markdown(text: impl Into<String>) -> Cell {
        let mut c = Cell::text(text);
        c.html = Some(super::markdown::inline_to_html(&c.text));
        c
    }

    /// A numeric cell: what is shown, and the plain number it sorts by.
    pub fn num(text: impl Into<String>, sort: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            sort: sort.into(),
            href: None,
            class: None,
            html: None,
        }
    }

    /// Adds a link.
    pub fn link(mut self, href: impl Into<String>) -> Cell {
        self.href = Some(href.into());
        self
    }

    /// Adds a class.
    pub fn class(mut self, class: &str) -> Cell {
        self.class = Some(class.to_string());
        self
    }
}

/// A table with a caption; the first cell of each row is its row header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Table {
    /// `id` attribute (unique on its page).
    pub id: String,
    pub caption: String,
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Cell>>,
    /// The rows already rendered, exactly as the template renders `rows` (the runs tables,
    /// written straight from the engine's rows without a cell per value); `rows` is then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_html: Option<String>,
    /// Shown instead of an empty body.
    pub empty_text: String,
    /// Sortable by the inline script.
    pub sortable: bool,
    /// Shown on a page of its own ([`TablePage`]): this page gives its caption, its row count
    /// and the link instead of its rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<Moved>,
}

/// A chart as a page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChartRef {
    /// Path relative to the page, e.g. `charts/scatter-plan-as-shipped-fp32.svg`.
    pub src: String,
    /// Text alternative (what the chart shows, in words).
    pub alt: String,
    pub caption: String,
}

/// Charts under a heading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChartGroup {
    pub heading: String,
    pub charts: Vec<ChartRef>,
}

/// A label and a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fact {
    pub label: String,
    pub value: String,
}

/// What every page has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageMeta {
    /// The page's file name, e.g. `index.html`.
    pub file: String,
    pub title: String,
    pub nav: Vec<Link>,
}

/// Section 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Headline {
    /// What was measured and what was not, in sentences computed from the rows (per profile:
    /// rows, families, the largest model, real classes, the fitted range; the strategies that
    /// are formulas; why rows are not counted). Empty where the view model is built without
    /// the data set.
    pub scope: Vec<String>,
    pub facts: Vec<Fact>,
    /// One table per precision profile (one device each): per method, the median |error|, the
    /// missed did-not-fit checks and the share within the engine's band, over that profile's
    /// rows alone; the verdict method's row is marked.
    pub tables: Vec<Table>,
    /// What the tables' columns count and which row is the verdict method.
    pub note: String,
    /// Each regime: its number-free description beside the facts its rows give.
    pub regimes: Table,
    pub cards: Vec<String>,
    /// True when every measured row is from a CPU regime.
    pub cpu_only: bool,
}

/// Section 5.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpperView {
    /// One chart per precision profile with ratios.
    pub charts: Vec<ChartRef>,
    pub multipliers: Table,
    pub counts: Table,
}

/// Section 6.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HowView {
    /// The formula in words and symbols (no numbers).
    pub formula: String,
    pub factors: Table,
    pub settings: Vec<Fact>,
    pub fit: Vec<Fact>,
    pub splits: Table,
    pub refits: Table,
    pub accelerate: Table,
    /// Every number injected into this page's sentences, with where it comes from.
    pub injected: Table,
}

/// Section 10 on the index: where the runs table and the downloads are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllRunsView {
    pub summary: String,
    pub pages: Vec<Link>,
    pub downloads: Vec<Link>,
}

/// Rendered prose blocks (HTML), empty when the file is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Prose {
    pub headline: String,
    pub scatter: String,
    pub methods: String,
    pub did_not_fit: String,
    pub upper: String,
    pub how: String,
    pub out_of_sample: String,
    pub misses: String,
    pub excluded: String,
    pub runs: String,
}

/// `index.html`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IndexPage {
    pub meta: PageMeta,
    /// No usable rows yet: the page says so and shows no sections beyond the headline.
    pub empty: bool,
    pub empty_text: String,
    pub prose: Prose,
    pub headline: Headline,
    /// The scatter charts, one group per precision profile (one device each).
    pub scatter: Vec<ChartGroup>,
    /// The methods over each precision profile's rows alone.
    pub methods_by_profile: Table,
    /// The simulator's reserved peak against measured reserved, per profile (CUDA rows).
    pub simulated_reserved: Table,
    /// On a page of its own ([`Site::tables`]); the index says how many rows and links it.
    pub did_not_fit: Table,
    pub upper: UpperView,
    pub how: HowView,
    pub out_of_sample: Vec<Table>,
    /// Per profile, every method's known misses, the deciding method first.
    pub misses: Vec<Table>,
    /// Every known miss by family: on a page of its own ([`Site::tables`]).
    pub misses_by_family: Table,
    pub excluded: Table,
    pub all_runs: AllRunsView,
    /// Planning a job: the real cards, which method decides, the fitted range (absent where the
    /// view model was built without the data set, e.g. from a calibration alone).
    pub cards: Option<super::build::cards::CardsView>,
    /// The strategies of `memcal plan` and their measured rows (absent without the data set).
    pub strategies: Option<super::build::strategies::StrategiesView>,
    /// The real implementations measured (transformers classes from their configs) and every
    /// method's error on them (absent without the data set).
    pub real: Option<super::build::real::RealView>,
}

/// A table the index links instead of showing (it is too long for the front page).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moved {
    pub summary: String,
    pub link: Link,
}

/// A page of one long table the index links: its heading, the section's prose and the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TablePage {
    pub meta: PageMeta,
    pub heading: String,
    /// The section's prose (Markdown rendered).
    pub intro_html: String,
    pub table: Table,
}

/// A page of the runs table (all runs, or one family's when the table is split).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunsPage {
    pub meta: PageMeta,
    pub heading: String,
    pub intro: String,
    pub others: Vec<Link>,
    /// The pages of this family's runs when they take more than one page (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pages: Vec<Link>,
    pub downloads: Vec<Link>,
    pub table: Table,
}

/// The factor history page: every fixing of the factors, from `data/factors-history.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryPage {
    pub meta: PageMeta,
    pub intro: String,
    pub table: Table,
}

/// The "Will it fit?" page: every full-size graph and imported real model at a few batches,
/// as `memcal plan` answers it against the real cards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FitPage {
    pub meta: PageMeta,
    pub intro: String,
    pub table: Table,
}

/// One architecture family's page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FamilyPage {
    pub meta: PageMeta,
    pub family: String,
    pub facts: Vec<Fact>,
    /// One held-out scatter per precision profile with rows of the family.
    pub charts: Vec<ChartRef>,
    pub note_html: Option<String>,
    /// The family's runs; `None` when the runs table is split, and the family's runs pages
    /// (`runs_pages`) list them instead.
    pub runs: Option<Table>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs_pages: Vec<Link>,
}

/// The whole site: every page's view model and the charts to draw. Plain data.
///
/// The runs tables (on the runs pages and the family pages) are filled one page at a time and
/// the downloads are serialised straight into their files, from the rows
/// ([`crate::report::build::Built`] holds both), so a build's memory does not grow with the
/// text of every row. In `runs` and `families` the tables have their columns but no rows.
#[derive(Debug, Clone, Serialize)]
pub struct Site {
    /// Counted rows.
    pub counted_rows: usize,
    pub index: IndexPage,
    pub runs: Vec<RunsPage>,
    pub families: Vec<FamilyPage>,
    pub history: HistoryPage,
    pub fit: FitPage,
    /// The index's long tables, a page each (did-not-fit, not counted).
    pub tables: Vec<TablePage>,
    pub charts: Vec<Chart>,
}
