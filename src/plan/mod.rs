//! Planning a job: the decision ([`decide`]: estimate, bound and verdict per card), the
//! evidence a data folder adds ([`evidence`]: each method's held-out record, the fitted range,
//! the real cards' usable bytes), the cards ([`cards`]), the verdicts the measured rows are
//! held to ([`verdicts`]), the terminal rendering ([`render`]) and the strategies' planner
//! ([`strategies`]: a strategy's terms and verdict per card, and `--recommend`'s cheapest option
//! per card, from the plain plan and the strategy table of `crate::strategy`).
//!
//! The files import downwards only: `cards` <- `evidence` <- `decide` <- `verdicts`, and
//! `render` and `strategies` read `decide`. This file only re-exports, so other modules can name
//! `crate::plan::Plan` without knowing which file holds it; the files of this folder name each
//! other (`super::decide`), never this one.

pub mod cards;
pub mod decide;
pub mod evidence;
pub mod render;
pub mod strategies;
pub mod verdicts;

pub use decide::*;
