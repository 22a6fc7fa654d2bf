//! Interned names and the fast hash they are looked up with: a million rows share a few
//! thousand distinct graph, family, regime and device names, each held once. At the crate root
//! (not in the engine) because the graph check hashes its names with the same hash.

use serde::Serialize;
use std::sync::Arc;

/// A shared, cheaply cloned string (run ids, graph, family and regime names), serialised as a
/// plain JSON string. One pointer wide (8 bytes, where an `Arc<str>` is 16): a million rows
/// hold several each.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(pub Arc<String>);

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        Name(Arc::new(s.to_string()))
    }
}

impl From<String> for Name {
    fn from(mut s: String) -> Self {
        s.shrink_to_fit();
        Name(Arc::new(s))
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.0.as_str()
    }
}

impl Name {
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl From<&Name> for String {
    fn from(n: &Name) -> String {
        n.0.to_string()
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_str()
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.0.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.0.as_str() == *other
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Shares equal names: one allocation per distinct string.
#[derive(Debug, Default)]
pub struct Interner {
    set: std::collections::HashSet<Name, FastHash>,
    /// The last name [`Interner::mostly_distinct`] handed out.
    last: Option<Name>,
}

/// A fast, not DoS-resistant hash for the interner (an Fx-style multiply-rotate over 8-byte
/// words): the loader looks up eight names per row, and the names are the data folder's own.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHash;

impl std::hash::BuildHasher for FastHash {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

/// The hasher of [`FastHash`].
pub struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Interner {
    pub fn name(&mut self, s: &str) -> Name {
        if let Some(n) = self.set.get(s) {
            return n.clone();
        }
        let n = Name::from(s);
        self.set.insert(n.clone());
        n
    }

    /// A name for a string that is mostly new (a run's timestamp): shared with the previous
    /// one asked for this way when they are equal (rows read in order that started in the same
    /// second), and not kept in the set (a million distinct timestamps would only make every
    /// lookup slower).
    pub fn mostly_distinct(&mut self, s: &str) -> Name {
        match &self.last {
            Some(n) if n.as_str() == s => n.clone(),
            _ => {
                let n = Name::from(s);
                self.last = Some(n.clone());
                n
            }
        }
    }
}
