//! The table and cell constructors every section uses: columns, tables, facts, and the cells
//! of counts, shares, bytes and method metrics (formatted by [`crate::format`]).

use super::*;
use crate::features::Precision;

pub(crate) fn col(label: &str, numeric: bool) -> Column {
    Column {
        label: label.to_string(),
        numeric,
    }
}

pub(crate) fn table(id: &str, caption: &str, columns: Vec<Column>, empty: &str) -> Table {
    Table {
        id: id.to_string(),
        caption: caption.to_string(),
        columns,
        rows: Vec::new(),
        rows_html: None,
        empty_text: empty.to_string(),
        sortable: false,
        moved_to: None,
    }
}

/// Moves `t`'s rows to a page of their own (`file`, headed `heading`, with `intro_html`), and
/// leaves in their place its caption, its row count and the link.
pub(crate) fn move_out(
    t: &mut Table,
    file: &str,
    heading: &str,
    intro_html: String,
    nav: &[Link],
) -> TablePage {
    let rows = t.rows.len();
    let page = TablePage {
        meta: PageMeta {
            file: file.into(),
            title: format!("{heading}: {TITLE}"),
            nav: nav.to_vec(),
        },
        heading: heading.into(),
        intro_html,
        table: t.clone(),
    };
    t.rows.clear();
    t.rows_html = None;
    t.moved_to = Some(Moved {
        summary: format!("{} rows, on a page of their own.", fmt::count(rows as u64)),
        link: Link {
            href: file.into(),
            text: heading.into(),
        },
    });
    page
}

pub(super) fn fact(label: &str, value: impl Into<String>) -> Fact {
    Fact {
        label: label.to_string(),
        value: value.into(),
    }
}

pub(crate) fn opt_pct(v: Option<f64>) -> Cell {
    match v {
        Some(x) => Cell::num(fmt::pct(x), fmt::pct_key(x)),
        None => Cell::num(fmt::MISSING, ""),
    }
}

pub(crate) fn count_cell(n: u64) -> Cell {
    Cell::num(fmt::count(n), n.to_string())
}

pub(crate) fn bytes_cell(b: Option<f64>) -> Cell {
    match b {
        Some(x) => Cell::num(fmt::bytes(x), fmt::bytes_key(x)),
        None => Cell::num(fmt::MISSING, ""),
    }
}

/// The columns of a method-metrics table after its first (row header) column.
pub(super) fn metrics_columns(first: &str) -> Vec<Column> {
    vec![
        col(first, false),
        col("Rows predicted", true),
        col("Rows in the error", true),
        col("Median |error|", true),
        col("Max |error|", true),
        col(&format!("Within {}", fmt::within_band()), true),
        col("Did-not-fit checks", true),
        col("Missed (called fits)", true),
        col("Fit checks", true),
        col("False alarms near the card", true),
        col("False alarms, over-estimates", true),
        col("Accuracy over all checks", true),
    ]
}

/// The columns of a per-profile metrics table: the precision profile, then [`metrics_columns`].
pub(super) fn profile_metrics_columns(first: &str) -> Vec<Column> {
    let mut columns = vec![col("Precision profile", false)];
    columns.extend(metrics_columns(first));
    columns
}

/// A row of a per-profile metrics table: the profile, then [`metrics_cells`].
pub(super) fn profile_metrics_cells(p: Precision, head: Cell, m: &MethodMetrics) -> Vec<Cell> {
    let mut row = vec![Cell::text(p.as_str())];
    row.extend(metrics_cells(head, m));
    row
}

pub(super) fn metrics_cells(head: Cell, m: &MethodMetrics) -> Vec<Cell> {
    let missed = m.missed_oom.len() as u64;
    vec![
        head,
        count_cell(m.rows),
        count_cell(m.error_rows),
        interval_cell(
            m.median_abs_rel_error,
            m.median_interval,
            m.error_rows,
            m.few_runs,
        ),
        opt_pct(m.max_abs_rel_error),
        interval_cell(m.within_25pct, m.within_25pct_interval, m.error_rows, false),
        count_cell(m.did_not_fit_checks),
        if missed > 0 {
            count_cell(missed).class("bad")
        } else {
            count_cell(missed)
        },
        count_cell(m.fit_checks),
        count_cell(m.false_alarm_edge.len() as u64),
        count_cell(m.false_alarm_over.len() as u64),
        opt_pct(m.accuracy),
    ]
}

/// A share with its interval, sorted by the share.
pub(super) fn interval_cell(v: Option<f64>, i: Option<Interval>, n: u64, few: bool) -> Cell {
    match v {
        Some(x) => {
            let c = Cell::num(fmt::pct_interval(x, i, n, few), fmt::pct_key(x));
            if few {
                c.class("warn")
            } else {
                c
            }
        }
        None => opt_pct(None),
    }
}
