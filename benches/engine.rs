//! Placeholder; the engine benchmark is being written.
fn main() {}
