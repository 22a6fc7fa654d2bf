//! The site's downloads, each serialised straight into its file: `memory-calibration.json`
//! ([`json`]) and `memory-calibration.csv` ([`csv`]).

pub mod csv;
pub mod json;
