//! Label sets: what identifies a series.

use crate::error::{Error, Result};
use std::fmt;

/// The label that holds a series' metric name.
pub const METRIC_NAME: &str = "__name__";

/// A series' labels: unique names in sorted order, each with a non-empty value, one of
/// them [`METRIC_NAME`]. Two label sets name the same series exactly when they are equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels {
    pairs: Vec<(String, String)>,
}

impl Labels {
    /// Builds a label set from `(name, value)` pairs in any order. Pairs with an empty
    /// value are dropped (an empty value means "no such label", as in Prometheus).
    ///
    /// # Errors
    /// [`Error::InvalidLabels`]: no `__name__`, a name that is not `[a-zA-Z_][a-zA-Z0-9_]*`,
    /// a name given twice, or a NUL byte in a value.
    pub fn new<N: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (N, V)>,
    ) -> Result<Labels> {
        let mut pairs: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(n, v)| (n.into(), v.into()))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        pairs.sort();
        for (name, value) in &pairs {
            if !valid_name(name) {
                return Err(Error::InvalidLabels(format!("bad label name {name:?}")));
            }
            if value.contains('\0') {
                return Err(Error::InvalidLabels(format!(
                    "NUL byte in the value of {name}"
                )));
            }
        }
        if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::InvalidLabels(format!(
                "label {} given twice",
                w[0].0
            )));
        }
        if !pairs.iter().any(|(n, _)| n == METRIC_NAME) {
            return Err(Error::InvalidLabels(format!("no {METRIC_NAME} label")));
        }
        Ok(Labels { pairs })
    }

    /// The metric name (the value of `__name__`).
    pub fn metric_name(&self) -> &str {
        self.get(METRIC_NAME).unwrap_or_default()
    }

    /// The value of label `name`, if the set has it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.pairs[i].1.as_str())
    }

    /// The `(name, value)` pairs in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The number of labels, `__name__` included.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Always false: a label set holds at least `__name__`.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The canonical bytes the store keys a series by: `name 0x00 value 0x00` per label,
    /// in name order. Equal sets, and only equal sets, encode equally.
    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(self.pairs.iter().map(|(n, v)| n.len() + v.len() + 2).sum());
        for (n, v) in &self.pairs {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
            out.extend_from_slice(v.as_bytes());
            out.push(0);
        }
        out
    }

    /// Reads [`Labels::encode`]'s bytes back.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for bytes `encode` cannot have produced.
    pub fn decode(bytes: &[u8]) -> Result<Labels> {
        let bad = |why: &str| Error::Corrupt(format!("label set: {why}"));
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let Some(body) = text.strip_suffix('\0') else {
            return Err(bad("not NUL-terminated"));
        };
        let parts: Vec<&str> = body.split('\0').collect();
        if !parts.len().is_multiple_of(2) {
            return Err(bad("a name without a value"));
        }
        let labels =
            Labels::new(parts.chunks(2).map(|p| (p[0], p[1]))).map_err(|e| bad(&e.to_string()))?;
        if labels.encode() != bytes {
            return Err(bad("not in canonical form"));
        }
        Ok(labels)
    }
}

/// Whether `name` is a valid label name.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Writes `value` as a double-quoted string with `\\`, `\"` and `\n` escaped.
pub fn write_quoted(f: &mut impl fmt::Write, value: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in value.chars() {
        match c {
            '\\' => f.write_str("\\\\")?,
            '"' => f.write_str("\\\"")?,
            '\n' => f.write_str("\\n")?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

/// `metric{name="value",...}`, as the exposition format writes a series.
impl fmt::Display for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.metric_name())?;
        let mut first = true;
        for (n, v) in self.iter().filter(|(n, _)| *n != METRIC_NAME) {
            f.write_str(if first { "{" } else { "," })?;
            first = false;
            f.write_str(n)?;
            f.write_char('=')?;
            write_quoted(f, v)?;
        }
        if !first {
            f.write_char('}')?;
        }
        Ok(())
    }
}

use fmt::Write as _;

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::new(pairs.iter().copied()).expect("valid labels")
    }

    #[test]
    fn order_of_pairs_does_not_matter_and_encoding_round_trips() {
        let a = labels(&[("__name__", "up"), ("job", "node"), ("instance", "a:9100")]);
        let b = labels(&[("instance", "a:9100"), ("job", "node"), ("__name__", "up")]);
        assert_eq!(a, b);
        assert_eq!(a.encode(), b.encode());
        assert_eq!(Labels::decode(&a.encode()).ok(), Some(a.clone()));
        assert_eq!(a.to_string(), r#"up{instance="a:9100",job="node"}"#);
        assert_eq!(a.get("job"), Some("node"));
        assert_eq!(a.get("nope"), None);
    }

    #[test]
    fn bad_label_sets_are_refused() {
        assert!(Labels::new([("job", "x")]).is_err());
        assert!(Labels::new([("__name__", "x"), ("1bad", "y")]).is_err());
        assert!(Labels::new([("__name__", "x"), ("a", "1"), ("a", "2")]).is_err());
        assert!(Labels::new([("__name__", "x"), ("a", "nul\0")]).is_err());
        // An empty value is no label at all.
        assert_eq!(labels(&[("__name__", "x"), ("a", "")]).len(), 1);
    }

    #[test]
    fn decoding_never_panics_and_refuses_non_canonical_bytes() {
        for bytes in [
            &b""[..],
            b"\0",
            b"__name__\0x",
            b"b\0y\0__name__\0x\0",
            b"\xff\0",
        ] {
            assert!(Labels::decode(bytes).is_err(), "{bytes:?}");
        }
        assert!(Labels::decode(b"__name__\0x\0").is_ok());
    }
}
