//! memcal: measure real training runs, refit the memory planner's factors on them with honest
//! held-out splits, and publish a static calibration site.
//!
//! Data flows one way: [`graph`] (typed model graphs) -> [`features`] (six per run) -> [`plan`]
//! (the estimate, the bound, card verdicts) and [`baselines`]; [`run`] holds the measured row format.

pub mod error;
pub mod run;

pub use error::{Error, Result};
pub mod graph;
pub mod ops;
pub mod shape;
