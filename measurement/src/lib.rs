//! memcal-measure: the measurement harness of memcal. It builds a `memcal-graph/1` model in tch,
//! trains three AdamW steps on synthetic inputs, and records the real peak memory of every phase
//! as a `memcal-run/1` row (see `docs/run-format.md`).
//!
//! - [`counters`]: the C++ shim (counting CPU allocator with a cap, CUDA caching allocator stats,
//!   autocast switches).
//! - [`builder`]: graph -> tch model, every op of the format.
//! - [`generic`]: the generic `aten` node, one ATen call by schema name through the dispatcher.
//! - [`nf4`]: 4-bit NF4 packing (QLoRA's weights), a leaf the builder and the strategies share.
//! - [`protocol`]: the phases and the OOM/error handling.
//! - [`measure`]: the `run` and `environment` commands (row assembly, atomic writing).
//! - [`campaign`]: many runs from a TOML plan, each in a fresh child process.
//! - [`shard`]: shard I of N of a plan (Slurm array task, Kubernetes completion index).
//! - [`merge`]: checks the shards' rows and moves them into `data/runs/`.
//! - [`cluster`]: writes the Slurm array script and the Kubernetes Indexed Job, with merge steps.

pub mod builder;
pub mod campaign;
pub mod cluster;
pub mod counters;
pub mod generic;
pub mod inference;
pub mod measure;
pub mod merge;
pub mod nf4;
pub mod protocol;
pub mod shard;
pub mod strategies;
pub mod sysinfo;
