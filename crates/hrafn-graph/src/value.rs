//! Property values and their byte encoding.

use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// A property value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// No value.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
}

impl Value {
    /// The value as a float, for weights: `Int` and `Float` only.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// Bytes that sort like the values of one type (the property index's key part):
    /// a type tag, then an order-preserving body.
    pub fn index_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Value::Null => out.push(0),
            Value::Bool(b) => out.extend_from_slice(&[1, u8::from(*b)]),
            Value::Int(i) => {
                out.push(2);
                out.extend_from_slice(&((*i as u64) ^ (1 << 63)).to_be_bytes());
            }
            Value::Float(f) => {
                out.push(3);
                // -0.0 and 0.0 are one value here, as `==` says.
                let bits = if *f == 0.0 { 0 } else { f.to_bits() };
                let ordered = if bits >> 63 == 1 {
                    !bits
                } else {
                    bits | (1 << 63)
                };
                out.extend_from_slice(&ordered.to_be_bytes());
            }
            Value::Text(s) => {
                out.push(4);
                out.extend_from_slice(s.as_bytes());
            }
            Value::Bytes(b) => {
                out.push(5);
                out.extend_from_slice(b);
            }
        }
        out
    }
}

impl Value {
    /// Whether two values are the same for lookups (property indexes, patterns,
    /// [`crate::GraphRead::find_nodes`]): equal index bytes, so `-0.0` matches `0.0`, a NaN
    /// matches the same NaN, and an `Int` never matches a `Float`.
    pub fn same_as(&self, other: &Value) -> bool {
        self.index_bytes() == other.index_bytes()
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Text(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(s)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int(i)
    }
}
impl From<f64> for Value {
    fn from(f: f64) -> Value {
        Value::Float(f)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

/// A node's or edge's properties, by name.
pub type Properties = BTreeMap<String, Value>;

/// Longest label, edge type or property name, in bytes.
pub const NAME_MAX_BYTES: usize = 255;

/// Checks a label, edge type or property name.
///
/// # Errors
/// [`Error::InvalidName`] for an empty name, one over [`NAME_MAX_BYTES`], or one with a NUL.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX_BYTES || name.contains('\0') {
        return Err(Error::InvalidName(format!("{name:?}")));
    }
    Ok(())
}

/// The encoding of no properties (a count of zero).
pub(crate) const NO_PROPERTIES: [u8; 2] = [0, 0];

/// Encodes properties: `count u16`, then per property `name_len u8 | name | tag u8 | body`
/// (bool 1 byte, int and float 8 bytes LE, text and bytes `len u32 LE | bytes`).
///
/// # Errors
/// [`Error::InvalidName`] for a bad property name; [`Error::TooManyProperties`] past
/// `u16::MAX` properties.
/// [`encode`], but nothing (no allocation) for no properties: batches and the bulk load
/// hold many edges without any, stored as [`NO_PROPERTIES`].
pub(crate) fn encode_or_empty(props: &Properties) -> Result<Vec<u8>> {
    if props.is_empty() {
        return Ok(Vec::new());
    }
    encode(props)
}

pub(crate) fn encode(props: &Properties) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let count = u16::try_from(props.len()).map_err(|_| Error::TooManyProperties {
        count: props.len(),
        max: usize::from(u16::MAX),
    })?;
    out.extend_from_slice(&count.to_le_bytes());
    for (name, value) in props {
        check_name(name)?;
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        match value {
            Value::Null => out.push(0),
            Value::Bool(b) => out.extend_from_slice(&[1, u8::from(*b)]),
            Value::Int(i) => {
                out.push(2);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Value::Float(f) => {
                out.push(3);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            Value::Text(s) => put_bytes(&mut out, 4, s.as_bytes()),
            Value::Bytes(b) => put_bytes(&mut out, 5, b),
        }
    }
    Ok(out)
}

fn put_bytes(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads [`encode`]'s bytes back.
///
/// # Errors
/// [`Error::Corrupt`] for bytes `encode` cannot have produced.
pub(crate) fn decode(bytes: &[u8]) -> Result<Properties> {
    let bad = |why: &str| Error::Corrupt(format!("properties: {why}"));
    let mut r = Reader { bytes, at: 0 };
    let count = u16::from_le_bytes(
        r.take(2)
            .ok_or_else(|| bad("short"))?
            .try_into()
            .map_err(|_| bad("short"))?,
    );
    let mut props = Properties::new();
    for _ in 0..count {
        let len = *r
            .take(1)
            .and_then(|b| b.first())
            .ok_or_else(|| bad("short"))? as usize;
        let name = std::str::from_utf8(r.take(len).ok_or_else(|| bad("short name"))?)
            .map_err(|_| bad("name not UTF-8"))?
            .to_string();
        let tag = *r
            .take(1)
            .and_then(|b| b.first())
            .ok_or_else(|| bad("short"))?;
        let value = match tag {
            0 => Value::Null,
            1 => Value::Bool(r.take(1).ok_or_else(|| bad("short"))?[0] != 0),
            2 => Value::Int(i64::from_le_bytes(
                r.word().ok_or_else(|| bad("short int"))?,
            )),
            3 => Value::Float(f64::from_bits(u64::from_le_bytes(
                r.word().ok_or_else(|| bad("short float"))?,
            ))),
            4 | 5 => {
                let len = u32::from_le_bytes(
                    r.take(4)
                        .ok_or_else(|| bad("short"))?
                        .try_into()
                        .map_err(|_| bad("short"))?,
                ) as usize;
                let body = r.take(len).ok_or_else(|| bad("short body"))?;
                if tag == 4 {
                    Value::Text(
                        std::str::from_utf8(body)
                            .map_err(|_| bad("text not UTF-8"))?
                            .to_string(),
                    )
                } else {
                    Value::Bytes(body.to_vec())
                }
            }
            _ => return Err(bad("unknown value tag")),
        };
        props.insert(name, value);
    }
    if r.at != bytes.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(props)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn word(&mut self) -> Option<[u8; 8]> {
        self.take(8)?.try_into().ok()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn no_properties_encode_as_their_constant() {
        assert_eq!(encode(&Properties::new()).expect("encode"), NO_PROPERTIES);
        assert!(decode(&NO_PROPERTIES).expect("decode").is_empty());
    }

    use super::*;

    #[test]
    fn too_many_properties_is_its_own_error() {
        let mut p = Properties::new();
        for i in 0..=usize::from(u16::MAX) {
            p.insert(format!("p{i}"), Value::Bool(true));
        }
        assert!(matches!(
            encode(&p),
            Err(Error::TooManyProperties {
                count: 65_536,
                max: 65_535
            })
        ));
        p.remove("p0");
        assert!(encode(&p).is_ok(), "the most a record holds");
    }

    #[test]
    fn properties_round_trip_and_bad_bytes_are_refused() {
        let mut p = Properties::new();
        p.insert("name".into(), Value::from("Ada"));
        p.insert("age".into(), Value::Int(-36));
        p.insert("w".into(), Value::Float(0.25));
        p.insert("ok".into(), Value::Bool(true));
        p.insert("raw".into(), Value::Bytes(vec![0, 255]));
        p.insert("none".into(), Value::Null);
        let bytes = encode(&p).expect("encode");
        assert_eq!(decode(&bytes).ok(), Some(p));
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(encode(&Properties::from([(String::new(), Value::Null)])).is_err());
    }

    #[test]
    fn index_bytes_sort_like_values() {
        let ints = [i64::MIN, -2, 0, 5, i64::MAX];
        for w in ints.windows(2) {
            assert!(Value::Int(w[0]).index_bytes() < Value::Int(w[1]).index_bytes());
        }
        let floats = [f64::NEG_INFINITY, -1.5, -0.0, 0.0, 2.0, f64::INFINITY];
        for w in floats.windows(2) {
            assert!(Value::Float(w[0]).index_bytes() <= Value::Float(w[1]).index_bytes());
        }
    }
}
