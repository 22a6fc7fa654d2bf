//! memcal: measure real training runs, refit the memory planner's factors on them with honest
//! held-out splits, and publish a static calibration site.
//!
//! Data flows one way: [`graph`] (typed model graphs) -> [`features`] (six per run) -> [`plan`]
//! (the estimate, the bound, card verdicts) and [`baselines`]; [`run`] holds the measured row
//! format and [`factors`] the shipped factors file.

pub mod baselines;
pub mod cli_io;
pub mod clock;
pub mod engine;
pub mod error;
pub mod factors;
pub mod features;
pub mod format;
pub mod graph;
pub mod import;
pub mod intern;
mod name_hash;
pub mod opcheck;
pub mod ops;
pub mod outputs;
pub mod plan;
pub mod report;
pub mod review;
pub mod run;
pub mod search;
pub mod shape;
pub mod simulate;
pub mod strategy;
pub mod time;
pub mod units;
pub mod zoo;

pub use error::{Error, Result};
