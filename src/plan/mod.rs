//! Planning a job: the decision ([`decide`]: estimate, bound and verdict per card), the
//! evidence a data folder adds ([`evidence`]: each method's held-out record, the fitted range,
//! the real cards' usable bytes), the cards ([`cards`]), the verdicts the measured rows are
//! held to ([`verdicts`]) and the terminal rendering ([`render`]).
//!
//! The files import downwards only: `cards` <- `evidence` <- `decide` <- `verdicts`, and
//! `render` reads `decide`. This file only re-exports, so other modules can name
//! `crate::plan::Plan` without knowing which file holds it; the files of this folder name each
//! other (`super::decide`), never this one.

pub mod cards;
pub mod decide;
pub mod evidence;
pub mod render;
pub mod verdicts;

pub use decide::*;
