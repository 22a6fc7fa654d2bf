//! Typed attribute reading: sizes, counts, flags and integers, each named in its error, and
//! the attribute groups several ops share (convolution, pooling, recurrent layers).

use super::{Conv, Pool, ReshapeDim, Rnn};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Reads typed attributes and rejects unknown ones.
pub(super) struct Attrs<'a> {
    pub(super) map: &'a Map<String, Value>,
    used: BTreeSet<&'static str>,
    /// The parser read the whole map itself.
    all: bool,
}

impl<'a> Attrs<'a> {
    pub(super) fn new(map: &'a Map<String, Value>) -> Self {
        Attrs {
            map,
            used: BTreeSet::new(),
            all: false,
        }
    }

    /// Marks every attribute read (a parser that checks the whole map itself).
    pub(super) fn use_all(&mut self) {
        self.all = true;
    }

    pub(super) fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.used.insert(key);
        self.map.get(key)
    }

    pub(super) fn size(&mut self, key: &'static str) -> Result<u64, String> {
        match self.get(key) {
            None => Err(format!("missing attribute `{key}` (a positive integer)")),
            Some(v) => positive(key, v),
        }
    }

    pub(super) fn size_or(&mut self, key: &'static str, default: u64) -> Result<u64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => positive(key, v),
        }
    }

    pub(super) fn count_or(&mut self, key: &'static str, default: u64) -> Result<u64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_u64().ok_or_else(|| {
                format!("attribute `{key}` must be a non-negative integer, found {v}")
            }),
        }
    }

    pub(super) fn int_or(&mut self, key: &'static str, default: i64) -> Result<i64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| format!("attribute `{key}` must be an integer, found {v}")),
        }
    }

    pub(super) fn int(&mut self, key: &'static str) -> Result<i64, String> {
        match self.get(key) {
            None => Err(format!("missing attribute `{key}` (an integer)")),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| format!("attribute `{key}` must be an integer, found {v}")),
        }
    }

    pub(super) fn flag_or(&mut self, key: &'static str, default: bool) -> Result<bool, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("attribute `{key}` must be true or false, found {v}")),
        }
    }

    /// A string attribute naming one of `choices` (its value for each), `default` when absent.
    pub(super) fn one_of<T: Copy>(
        &mut self,
        key: &'static str,
        choices: &[(&str, T)],
        default: T,
    ) -> Result<T, String> {
        let Some(v) = self.get(key) else {
            return Ok(default);
        };
        if let Some((_, t)) = choices.iter().find(|(name, _)| v.as_str() == Some(name)) {
            return Ok(*t);
        }
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        Err(format!(
            "attribute `{key}` must be {}, found {v}",
            names.join(" or ")
        ))
    }

    pub(super) fn finish(self) -> Result<(), String> {
        if self.all {
            return Ok(());
        }
        let unknown: Vec<&String> = self
            .map
            .keys()
            .filter(|k| !self.used.contains(k.as_str()))
            .collect();
        match unknown.first() {
            None => Ok(()),
            Some(k) => {
                let mut known: Vec<&str> = self.used.iter().copied().collect();
                known.sort_unstable();
                Err(format!(
                    "unknown attribute `{k}` (this op takes: {})",
                    if known.is_empty() {
                        "no attributes".to_string()
                    } else {
                        known.join(", ")
                    }
                ))
            }
        }
    }
}

pub(super) fn positive(key: &str, v: &Value) -> Result<u64, String> {
    match v.as_u64() {
        Some(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "attribute `{key}` must be a positive integer, found {v}"
        )),
    }
}

/// The most experts or recurrent layers one node may have: each gets its own parameter tensors,
/// so a larger count is a typo (and would take unbounded memory to enumerate).
pub const MAX_REPEATS: u64 = 1 << 16;

pub(super) fn at_most(key: &str, n: u64, max: u64) -> Result<u64, String> {
    if n <= max {
        Ok(n)
    } else {
        Err(format!(
            "attribute `{key}` must be at most {max}, found {n}; check the value"
        ))
    }
}

pub(super) fn conv(a: &mut Attrs) -> Result<Conv, String> {
    let c = Conv {
        in_channels: a.size("in_channels")?,
        out_channels: a.size("out_channels")?,
        kernel_size: a.size("kernel_size")?,
        stride: a.size_or("stride", 1)?,
        padding: a.count_or("padding", 0)?,
        groups: a.size_or("groups", 1)?,
        bias: a.flag_or("bias", true)?,
    };
    if !c.in_channels.is_multiple_of(c.groups) || !c.out_channels.is_multiple_of(c.groups) {
        return Err(format!(
            "groups = {} must divide in_channels = {} and out_channels = {}",
            c.groups, c.in_channels, c.out_channels
        ));
    }
    Ok(c)
}

pub(super) fn pool(a: &mut Attrs) -> Result<Pool, String> {
    let kernel_size = a.size("kernel_size")?;
    Ok(Pool {
        kernel_size,
        stride: a.size_or("stride", kernel_size)?,
        padding: a.count_or("padding", 0)?,
    })
}

pub(super) fn rnn(a: &mut Attrs) -> Result<Rnn, String> {
    Ok(Rnn {
        input_size: a.size("input_size")?,
        hidden_size: a.size("hidden_size")?,
        num_layers: at_most("num_layers", a.size_or("num_layers", 1)?, MAX_REPEATS)?,
        bidirectional: a.flag_or("bidirectional", false)?,
    })
}

/// Attribute `shape`: a non-empty list of `"B"` and positive sizes.
pub(super) fn batch_or_sizes(a: &mut Attrs) -> Result<Vec<ReshapeDim>, String> {
    let entries = match a.get("shape") {
        Some(Value::Array(v)) if !v.is_empty() => v,
        Some(v) => {
            return Err(format!(
                "attribute `shape` must be a non-empty list of \"B\" and sizes, found {v}"
            ))
        }
        None => return Err("missing attribute `shape` (a list of \"B\" and sizes)".into()),
    };
    let mut shape = Vec::with_capacity(entries.len());
    for e in entries {
        shape.push(match e {
            Value::String(s) if s == "B" => ReshapeDim::Batch,
            v => ReshapeDim::Fixed(positive("shape", v).map_err(|_| {
                format!("`shape` entries must be \"B\" or a positive integer, found {v}")
            })?),
        });
    }
    Ok(shape)
}
