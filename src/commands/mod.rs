//! One module per subcommand: its arguments (`Args`, parsed by clap) and `run`.

pub mod audit;
pub mod build;
pub mod diff;
pub mod fit;
pub mod graphs;
pub mod import;
pub mod plan;
pub mod review_state;
