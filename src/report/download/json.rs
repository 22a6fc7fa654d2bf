//! `memory-calibration.json`, format `memcal-site-download/2`: the settings, the totals, every
//! counted row with its features, predictions and card checks, and the exclusions. A row's
//! checks are the index of a list in `check_lists`: a million rows share a few thousand lists
//! (the engine shares them, [`Checks`]), and written out in full they were two thirds of the
//! file. The object is serialised straight into the writer, row by row (nothing is built per
//! row first).

use crate::engine::{Calibration, Check, RowResult};
use serde::ser::SerializeSeq;
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;

/// The format of the download.
pub(crate) const FORMAT: &str = "memcal-site-download/2";

/// The download object, as `serde_json` writes it (pretty for a small site, compact for a
/// large one).
#[derive(Serialize)]
pub(crate) struct Download<'a> {
    pub format: &'static str,
    pub tool_version: &'a str,
    pub settings: &'a crate::engine::Settings,
    pub totals: &'a crate::engine::Totals,
    /// Every distinct list of card checks, in the order the rows first use them.
    pub check_lists: Vec<&'a [Check]>,
    pub rows: Rows<'a>,
    pub exclusions: &'a [crate::engine::Exclusion],
}

/// The rows, each with the index of its checks in `check_lists`.
pub(crate) struct Rows<'a> {
    rows: &'a [RowResult],
    /// Per row, the index of its list.
    list: Vec<u32>,
}

impl Serialize for Rows<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.rows.len()))?;
        for (r, &k) in self.rows.iter().zip(&self.list) {
            seq.serialize_element(&row(r, k))?;
        }
        seq.end()
    }
}

impl<'a> Download<'a> {
    pub fn of(cal: &'a Calibration) -> Download<'a> {
        // Lists by address first (rows share one allocation per list and thread of the
        // engine), then by content (two threads may each hold a list).
        let mut by_address: HashMap<(usize, usize), u32> = HashMap::new();
        let mut by_content: HashMap<&[Check], u32> = HashMap::new();
        let mut check_lists: Vec<&[Check]> = Vec::new();
        let list = cal
            .rows
            .iter()
            .map(|r| {
                let checks: &[Check] = &r.checks;
                *by_address
                    .entry((checks.as_ptr() as usize, checks.len()))
                    .or_insert_with(|| {
                        *by_content.entry(checks).or_insert_with(|| {
                            check_lists.push(checks);
                            (check_lists.len() - 1) as u32
                        })
                    })
            })
            .collect();
        Download {
            format: FORMAT,
            tool_version: cal.tool_version,
            settings: &cal.settings,
            totals: &cal.totals,
            check_lists,
            rows: Rows {
                rows: &cal.rows,
                list,
            },
            exclusions: &cal.exclusions,
        }
    }
}

/// A row of the download: [`RowResult`]'s fields in its order with its attributes, its checks
/// as the index of their list.
#[derive(Serialize)]
struct Row<'a> {
    run_id: &'a crate::engine::Name,
    file: &'a crate::engine::Name,
    graph: &'a crate::engine::Name,
    family: &'a crate::engine::Name,
    regime: &'a crate::engine::Name,
    precision: crate::features::Precision,
    batch: u64,
    status: crate::run::RunStatus,
    bucket: crate::engine::Bucket,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    oom_capacity_bytes: Option<u64>,
    capacity_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    weight: Option<f64>,
    features: &'a [u64; crate::features::N_FEATURES],
    predictions: &'a crate::engine::Predictions,
    #[serde(skip_serializing_if = "Option::is_none")]
    bound_q90_bytes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bound_q95_bytes: Option<f64>,
    /// Index into `check_lists`.
    checks: u32,
}

fn row(r: &RowResult, list: u32) -> Row<'_> {
    // Destructured so that a field added to `RowResult` fails to compile here.
    let RowResult {
        run_id,
        file,
        graph,
        family,
        regime,
        precision,
        batch,
        status,
        bucket,
        measured_bytes,
        oom_capacity_bytes,
        capacity_bytes,
        weight,
        features,
        predictions,
        bound_q90_bytes,
        bound_q95_bytes,
        checks: _,
    } = r;
    Row {
        run_id,
        file,
        graph,
        family,
        regime,
        precision: *precision,
        batch: *batch,
        status: *status,
        bucket: *bucket,
        measured_bytes: *measured_bytes,
        oom_capacity_bytes: *oom_capacity_bytes,
        capacity_bytes: *capacity_bytes,
        weight: *weight,
        features,
        predictions,
        bound_q90_bytes: *bound_q90_bytes,
        bound_q95_bytes: *bound_q95_bytes,
        checks: list,
    }
}

fn json<T: Serialize + ?Sized>(w: &mut impl Write, v: &T) -> std::io::Result<()> {
    serde_json::to_writer(w, v).map_err(std::io::Error::other)
}

/// A JSON string: as is between quotes when nothing in it needs escaping, else serde_json's.
fn string(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, s).expect("a string serialises");
    }
}

/// A JSON number as serde_json writes an `f64` (`null` for NaN and the infinities).
fn float(out: &mut Vec<u8>, x: f64) {
    if x.is_finite() {
        out.extend_from_slice(zmij::Buffer::new().format_finite(x).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

fn unsigned(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// A row's compact JSON, byte for byte what serde_json makes of [`Row`], written field by field
/// (keys as constants; a large download's writing was most of it in serde's machinery).
fn compact_row(out: &mut Vec<u8>, r: &Row) -> std::io::Result<()> {
    out.extend_from_slice(b"{\"run_id\":");
    string(out, r.run_id);
    out.extend_from_slice(b",\"file\":");
    string(out, r.file);
    out.extend_from_slice(b",\"graph\":");
    string(out, r.graph);
    out.extend_from_slice(b",\"family\":");
    string(out, r.family);
    out.extend_from_slice(b",\"regime\":");
    string(out, r.regime);
    out.extend_from_slice(b",\"precision\":");
    json(out, &r.precision)?;
    out.extend_from_slice(b",\"batch\":");
    unsigned(out, r.batch);
    out.extend_from_slice(b",\"status\":");
    json(out, &r.status)?;
    out.extend_from_slice(b",\"bucket\":");
    json(out, &r.bucket)?;
    if let Some(m) = r.measured_bytes {
        out.extend_from_slice(b",\"measured_bytes\":");
        unsigned(out, m);
    }
    if let Some(c) = r.oom_capacity_bytes {
        out.extend_from_slice(b",\"oom_capacity_bytes\":");
        unsigned(out, c);
    }
    out.extend_from_slice(b",\"capacity_bytes\":");
    unsigned(out, r.capacity_bytes);
    if let Some(w) = r.weight {
        out.extend_from_slice(b",\"weight\":");
        float(out, w);
    }
    out.extend_from_slice(b",\"features\":[");
    for (k, f) in r.features.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        unsigned(out, *f);
    }
    out.extend_from_slice(b"],\"predictions\":{");
    for (k, (m, v)) in r.predictions.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        string(out, m.as_str());
        out.push(b':');
        float(out, v);
    }
    out.push(b'}');
    for (key, b) in [
        (&b",\"bound_q90_bytes\":"[..], r.bound_q90_bytes),
        (&b",\"bound_q95_bytes\":"[..], r.bound_q95_bytes),
    ] {
        if let Some(b) = b {
            out.extend_from_slice(key);
            float(out, b);
        }
    }
    out.extend_from_slice(b",\"checks\":");
    unsigned(out, u64::from(r.checks));
    out.push(b'}');
    Ok(())
}

/// The download as compact JSON into `w`: byte for byte `serde_json::to_writer` of `d`, the
/// rows written by [`compact_row`].
pub(crate) fn write_compact(d: &Download, w: &mut impl Write) -> std::io::Result<()> {
    w.write_all(b"{\"format\":")?;
    json(w, d.format)?;
    w.write_all(b",\"tool_version\":")?;
    json(w, d.tool_version)?;
    w.write_all(b",\"settings\":")?;
    json(w, d.settings)?;
    w.write_all(b",\"totals\":")?;
    json(w, d.totals)?;
    w.write_all(b",\"check_lists\":")?;
    json(w, &d.check_lists)?;
    w.write_all(b",\"rows\":[")?;
    let mut buf = Vec::with_capacity(1 << 16);
    for (k, (r, &list)) in d.rows.rows.iter().zip(&d.rows.list).enumerate() {
        if k > 0 {
            buf.push(b',');
        }
        compact_row(&mut buf, &row(r, list))?;
        if buf.len() >= 1 << 15 {
            w.write_all(&buf)?;
            buf.clear();
        }
    }
    w.write_all(&buf)?;
    w.write_all(b"],\"exclusions\":")?;
    json(w, d.exclusions)?;
    w.write_all(b"}")
}

/// `memory-calibration.json` (see [`Built::write_download_json`] and [`super::download`]),
/// serialised as it goes.
pub fn write(cal: &Calibration, compact: bool, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    use std::io::Write;
    let d = Download::of(cal);
    let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
    if compact {
        write_compact(&d, &mut w)?;
    } else {
        serde_json::to_writer_pretty(&mut w, &d).map_err(std::io::Error::other)?;
    }
    w.write_all(b"\n")?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use crate::engine::{calibrate, synthetic};

    #[test]
    fn each_row_is_the_engine_row_with_its_checks_by_index() {
        let mut ds = synthetic::dataset(5_000, 12, [1.2, 0.9, 1.3, 3.6, 5.2, 2.0], 0.1, 11);
        // A duplicate run id, for an exclusion.
        let again = ds.rows[7].clone();
        ds.rows.push(again);
        let cal = calibrate(&ds);
        assert!(cal.rows.len() > 4_000 && !cal.exclusions.is_empty());
        let have: serde_json::Value =
            serde_json::from_slice(&serde_json::to_vec(&super::Download::of(&cal)).unwrap())
                .unwrap();
        assert_eq!(have["format"], super::FORMAT);
        assert_eq!(have["totals"], serde_json::to_value(&cal.totals).unwrap());
        assert_eq!(
            have["exclusions"],
            serde_json::to_value(&cal.exclusions).unwrap()
        );
        let lists = have["check_lists"].as_array().unwrap();
        // Shared: far fewer lists than rows, and no list twice.
        assert!(lists.len() > 1 && lists.len() * 10 < cal.rows.len());
        let distinct: std::collections::BTreeSet<String> =
            lists.iter().map(|l| l.to_string()).collect();
        assert_eq!(distinct.len(), lists.len());
        // The compact writer makes serde's bytes, names that need escaping included.
        let mut odd = cal.clone();
        odd.rows[3].run_id = "a \"quoted\\ id\u{1}\tnew\nline é ✓".into();
        odd.rows[4].graph = "</script>".into();
        for c in [&cal, &odd] {
            let d = super::Download::of(c);
            let mut fast = Vec::new();
            super::write_compact(&d, &mut fast).unwrap();
            assert!(
                fast == serde_json::to_vec(&d).unwrap(),
                "the compact writer differs"
            );
        }
        let rows = have["rows"].as_array().unwrap();
        assert_eq!(rows.len(), cal.rows.len());
        for (h, r) in rows.iter().zip(&cal.rows) {
            // The row with its checks put back in place is the engine's row.
            let mut h = h.clone();
            let k = h["checks"].as_u64().unwrap() as usize;
            h["checks"] = lists[k].clone();
            assert_eq!(h, serde_json::to_value(r).unwrap(), "{}", r.run_id);
        }
    }
}
