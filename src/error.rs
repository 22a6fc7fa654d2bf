//! The library's errors. Every error names the file it came from and, where there is one, the node
//! or field, and says what to do next. The binary maps [`Error::exit_code`] to its exit status.

use std::path::PathBuf;

/// Result alias used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong reading or checking memcal's inputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read at all.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not the JSON (or TOML) it should be.
    #[error("{}: malformed {what}: {message}", path.display())]
    Parse {
        path: PathBuf,
        what: &'static str,
        message: String,
    },
    /// A graph node is wrong: unknown op, bad attribute, missing input, shape mismatch, cycle.
    #[error("{}: node `{node}`: {message}", path.display())]
    Node {
        path: PathBuf,
        node: String,
        message: String,
    },
    /// A field of a file holds a value that is not allowed.
    #[error("{}: field `{field}`: {message}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// Anything else about the inputs that makes the command impossible.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// Input errors exit with status 2, as the CLI documents.
    pub fn exit_code(&self) -> i32 {
        2
    }

    pub(crate) fn node(path: &std::path::Path, node: &str, message: impl Into<String>) -> Self {
        Error::Node {
            path: path.to_path_buf(),
            node: node.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn field(path: &std::path::Path, field: &str, message: impl Into<String>) -> Self {
        Error::Field {
            path: path.to_path_buf(),
            field: field.to_string(),
            message: message.into(),
        }
    }
}
