//! The command line's output: text to stdout that treats a closed pipe (`memcal fit | head`)
//! as a normal end, and the warnings for files under `runs/` that were not read.

use std::io::Write as _;
use std::path::Path;

/// Writes `text` to stdout and flushes it. A reader that went away (`| head`) is an
/// `ErrorKind::BrokenPipe` error, which [`is_closed_stdout`] recognises.
pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Whether an error (or one of its causes) is stdout's reader having gone away: the command
/// has done its work (files are written before anything is printed) and ends normally.
pub fn is_closed_stdout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The warning lines for the files under `data/runs/` that were not read (empty when none).
pub fn skipped_warning(data: &Path, skipped: &[crate::engine::Skipped]) -> String {
    let mut s = String::new();
    if skipped.is_empty() {
        return s;
    }
    s.push_str(&format!(
        "warning: {} file(s) under {} are not rows and were not read:\n",
        skipped.len(),
        data.join("runs").display()
    ));
    for k in skipped {
        s.push_str(&format!(
            "warning:   {}: {}\n",
            data.join(&k.file).display(),
            k.reason
        ));
    }
    s
}

/// `value` as a JSON object with `"format": format` as its first key: every JSON memcal prints
/// or writes names its format (the schemas are under `docs/schemas/`).
pub fn with_format(
    format: &str,
    value: &impl serde::Serialize,
) -> serde_json::Result<serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("format".into(), format.into());
    match serde_json::to_value(value)? {
        serde_json::Value::Object(o) => m.extend(o),
        other => {
            m.insert("value".into(), other);
        }
    }
    Ok(serde_json::Value::Object(m))
}
