//! `memory-calibration.csv`: one line per counted row, written straight into its file.

use crate::engine::{Calibration, Method};
use crate::format as fmt;
use crate::report::digits;
use crate::report::names::{bucket_name, status_name};

/// `memory-calibration.csv` (see [`Built::write_download_csv`]).
pub fn write(
    cal: &Calibration,
    device: &dyn Fn(&str) -> &'static str,
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use std::io::Write;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
    let mut head: Vec<String> = [
        "run_id",
        "graph",
        "family",
        "regime",
        "device",
        "precision",
        "batch",
        "status",
        "bucket",
        "measured_bytes",
        "oom_capacity_bytes",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    head.extend(
        cal.settings
            .feature_names
            .iter()
            .map(|f| format!("feature_{f}_bytes")),
    );
    head.extend(
        Method::ALL
            .iter()
            .map(|m| format!("predicted_{}_bytes", m.as_str())),
    );
    head.push("bound_q90_bytes".into());
    head.push("bound_q95_bytes".into());
    writeln!(w, "{}", head.join(","))?;
    let csv = |line: &mut String, s: &str| {
        if s.contains([',', '"', '\n', '\r']) {
            line.push_str(&fmt::csv_field(s));
        } else {
            line.push_str(s);
        }
    };
    // Each line is put together in one buffer (numbers through `digits`: std's text, without
    // the formatting machinery) and written at once.
    let mut line = String::with_capacity(512);
    for r in &cal.rows {
        line.clear();
        for (k, s) in [&r.run_id, &r.graph, &r.family, &r.regime]
            .into_iter()
            .enumerate()
        {
            if k > 0 {
                line.push(',');
            }
            csv(&mut line, s);
        }
        for s in [device(&r.regime), r.precision.as_str()] {
            line.push(',');
            line.push_str(s);
        }
        line.push(',');
        digits::push_u64(&mut line, r.batch);
        for s in [status_name(r.status), bucket_name(r.bucket)] {
            line.push(',');
            line.push_str(s);
        }
        line.push(',');
        if let Some(b) = r.measured_bytes {
            digits::push_u64(&mut line, b);
        }
        line.push(',');
        if let Some(b) = r.oom_capacity_bytes {
            digits::push_u64(&mut line, b);
        }
        for b in &r.features {
            line.push(',');
            digits::push_u64(&mut line, *b);
        }
        for m in &Method::ALL {
            line.push(',');
            if let Some(p) = r.predictions.get(m) {
                digits::push_f64(&mut line, *p);
            }
        }
        for b in [r.bound_q90_bytes, r.bound_q95_bytes] {
            line.push(',');
            if let Some(b) = b {
                digits::push_f64(&mut line, b);
            }
        }
        line.push('\n');
        w.write_all(line.as_bytes())?;
    }
    w.flush()
}
