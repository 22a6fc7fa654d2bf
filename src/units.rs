//! Byte formatting. GB means 10^9 bytes and GiB means 2^30 bytes; they are never mixed, and every
//! printed size says which.

/// Bytes in a GB (decimal).
pub const GB: f64 = 1e9;
/// Bytes in a GiB (binary).
pub const GIB: f64 = 1073741824.0;

/// `12.35 GB`.
pub fn gb(bytes: f64) -> String {
    format!("{:.2} GB", bytes / GB)
}

/// `11.50 GiB`.
pub fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / GIB)
}

/// `12.35 GB (11.50 GiB)`.
pub fn both(bytes: f64) -> String {
    format!("{} ({})", gb(bytes), gib(bytes))
}

/// accelerate's `convert_bytes`: divides by 1024 while the value is at least 1024 and labels the
/// result "bytes", "KB", "MB", "GB", "TB" (its KB/MB/GB are 1024-based), rounded to 2 decimals.
pub fn accelerate_convert_bytes(bytes: f64) -> String {
    let mut size = bytes;
    for unit in ["bytes", "KB", "MB", "GB", "TB"] {
        if size < 1024.0 {
            return format!("{} {unit}", python_round2(size));
        }
        size /= 1024.0;
    }
    format!("{} PB", python_round2(size))
}

/// Python's `round(x, 2)` printed the way Python prints a float (no trailing zeros).
fn python_round2(x: f64) -> String {
    let r = (x * 100.0).round() / 100.0;
    let s = format!("{r:.2}");
    let s = s.trim_end_matches('0');
    if s.ends_with('.') {
        format!("{s}0")
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_say_which() {
        assert_eq!(gb(16e9), "16.00 GB");
        assert_eq!(gib(GIB * 2.0), "2.00 GiB");
        assert_eq!(accelerate_convert_bytes(89_075_712.0), "84.95 MB");
        assert_eq!(accelerate_convert_bytes(512.0), "512.0 bytes");
    }
}
