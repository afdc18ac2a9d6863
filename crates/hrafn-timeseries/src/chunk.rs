//! Gorilla-compressed sample chunks (to be written).

/// One sample: a timestamp in milliseconds since the Unix epoch and a value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The value.
    pub value: f64,
}
