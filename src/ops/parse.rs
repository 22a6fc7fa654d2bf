//! Parsing an op: its name looked up in the registry's table ([`super::family`]), its
//! attributes read by its family's parser.

use super::attributes::Attrs;
use super::family::OPS;
use super::*;
use serde_json::{Map, Value};

/// Every op name the format knows, in the table's order (for error messages).
pub fn op_names() -> Vec<&'static str> {
    OPS.iter().map(|(_, n, _)| *n).collect()
}

/// The name of an op kind in the file format: its entry in the table (entry `k as usize` is
/// kind `k`; a test checks it).
fn kind_name(k: OpKind) -> &'static str {
    OPS[k as usize].1
}

impl Op {
    /// The op's name in the file format (from the op table).
    pub fn name(&self) -> &'static str {
        kind_name(self.kind())
    }

    /// Parses an op from its name and attribute map. The error text names the attribute.
    pub fn parse(name: &str, attributes: &Map<String, Value>) -> Result<Op, String> {
        let mut a = Attrs::new(attributes);
        let Some((_, _, parse)) = OPS.iter().find(|(_, n, _)| *n == name) else {
            return Err(format!(
                "unknown op `{name}` (known ops: {}; any ATen call can be drawn as a generic `aten` node: docs/graph-format.md)",
                op_names().join(", ")
            ));
        };
        let op = parse(&mut a)?;
        a.finish()?;
        Ok(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_kind_order() {
        for (i, (k, n, _)) in OPS.iter().enumerate() {
            assert_eq!(*k as usize, i, "entry {i} (`{n}`) is out of OpKind order");
        }
        assert_eq!(OPS.len(), OpKind::LAST as usize + 1);
    }
}
