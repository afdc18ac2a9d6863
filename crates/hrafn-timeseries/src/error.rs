//! The store's error type.

/// Everything that can go wrong in the time-series store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The storage engine failed (I/O, corruption of its pages, a full scratch, ...).
    #[error(transparent)]
    Engine(#[from] hrafn::Error),
    /// A label set that cannot name a series (no `__name__`, a bad name, a repeated name).
    #[error("invalid labels: {0}")]
    InvalidLabels(String),
    /// The environment holds no time-series store (opened read-only, so none was made).
    #[error("no time-series store in this environment")]
    NotAStore,
    /// Stored time-series bytes that do not decode (a chunk, a label set, an index entry).
    #[error("corrupt time-series data: {0}")]
    Corrupt(String),
    /// Text input that does not parse (exposition format, CSV, a selector).
    #[error("parse error at line {line}: {message}")]
    Parse {
        /// 1-based line of the input (1 for a one-line input such as a selector).
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// A query that cannot run (a bad regex, a zero step, an empty range).
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// Reading input or writing output failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The store's result type.
pub type Result<T> = std::result::Result<T, Error>;
