//! Multi-value trees: each key holds a sorted set of distinct values (LMDB's `DUPSORT`,
//! redb's multimap).
//!
//! A multi-value tree is a B+tree of keys. A key's set is stored one of two ways:
//! - **embedded**, while its encoding is at most [`EMBEDDED_SET_MAX_BYTES`]: the entry's
//!   inline value is the set, each value as `len u16 | bytes`, ascending, no duplicates;
//! - **as its own tree**, once it outgrows that: the entry holds a nested B+tree whose keys
//!   are the values (and whose values are empty). When such a set shrinks to one leaf
//!   holding at most half the embedded limit, it is embedded again; the gap between the
//!   two thresholds keeps a set at the boundary from moving back and forth on every change.
//!
//! This module reads sets through [`PageSource`]; `write` changes them through
//! [`crate::btree::PageStore`]. It must not depend on transactions.

pub(crate) mod write;

use crate::btree::node::ValueRef;
use crate::btree::{self, PageSource, Range, TreeHeader, TreeKind};
use crate::error::Result;
use crate::page::{corrupt, get_u16};
use std::ops::{Bound, RangeBounds};

/// Largest encoded set kept inside its key's entry; a larger one becomes a nested tree.
/// With the longest key (2,000 bytes) the entry still fits inline (4,000 bytes).
pub const EMBEDDED_SET_MAX_BYTES: usize = 1024;

/// Longest value: values of a set that outgrew its entry are keys of a nested tree.
pub const MULTI_VALUE_SIZE_MAX_BYTES: usize = crate::limits::KEY_SIZE_MAX_BYTES;

/// Bytes of one value's length prefix in an embedded set.
pub const EMBEDDED_LEN_BYTES: usize = 2;

const _: () = assert!(
    btree::node::LEAF_INLINE_HEADER_BYTES
        + btree::node::SLOT_BYTES
        + crate::limits::KEY_SIZE_MAX_BYTES
        + EMBEDDED_SET_MAX_BYTES
        <= crate::limits::INLINE_ENTRY_MAX_BYTES
);
// One value always fits an embedded set... unless it is longer than the set limit, in
// which case the set starts as a nested tree; the length prefix holds any value.
const _: () = assert!(MULTI_VALUE_SIZE_MAX_BYTES <= u16::MAX as usize);

/// The values of an embedded set, validated: within [`EMBEDDED_SET_MAX_BYTES`], lengths
/// inside the bytes, strictly ascending.
///
/// # Errors
/// [`crate::Error::Corruption`] naming `page_number` otherwise.
pub fn decode_set(bytes: &[u8], page_number: u64) -> Result<Vec<&[u8]>> {
    let mut values = Vec::new();
    for_each_in_set(bytes, page_number, |_, value| values.push(value))?;
    Ok(values)
}

/// Where `value` goes in an embedded set's bytes (validated as [`decode_set`] does): the
/// offset of the first larger value, or the end; `None` if the set holds it.
///
/// # Errors
/// [`crate::Error::Corruption`] naming `page_number` for a damaged set.
pub(crate) fn position_in_set(
    bytes: &[u8],
    value: &[u8],
    page_number: u64,
) -> Result<Option<usize>> {
    let mut position = Some(bytes.len());
    let mut placed = false;
    for_each_in_set(bytes, page_number, |at, existing| {
        if !placed && existing >= value {
            placed = true;
            position = (existing != value).then_some(at);
        }
    })?;
    Ok(position)
}

/// Calls `f(offset, value)` for each value of an embedded set in order, checking lengths
/// and order on the way.
fn for_each_in_set<'a>(
    bytes: &'a [u8],
    page_number: u64,
    mut f: impl FnMut(usize, &'a [u8]),
) -> Result<()> {
    if bytes.is_empty() {
        return Err(corrupt(page_number, "empty embedded set"));
    }
    // A larger set lives in its own tree, and edits rely on the limit.
    if bytes.len() > EMBEDDED_SET_MAX_BYTES {
        return Err(corrupt(page_number, "embedded set over its limit"));
    }
    let mut at = 0;
    let mut last: Option<&[u8]> = None;
    while at < bytes.len() {
        if at + EMBEDDED_LEN_BYTES > bytes.len() {
            return Err(corrupt(page_number, "embedded set cut inside a length"));
        }
        let len = usize::from(get_u16(bytes, at));
        let start = at + EMBEDDED_LEN_BYTES;
        let value = bytes
            .get(start..start + len)
            .ok_or_else(|| corrupt(page_number, "embedded set value runs past the entry"))?;
        if last.is_some_and(|last| last >= value) {
            return Err(corrupt(page_number, "embedded set values out of order"));
        }
        f(at, value);
        last = Some(value);
        at = start + len;
    }
    Ok(())
}

/// Encodes ascending, distinct values as an embedded set.
pub(crate) fn encode_set<'v>(values: impl IntoIterator<Item = &'v [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for value in values {
        debug_assert!(value.len() <= MULTI_VALUE_SIZE_MAX_BYTES);
        out.extend_from_slice(&(value.len() as u16).to_le_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// Encoded size of a set holding `values`.
pub(crate) fn encoded_size<'v>(values: impl IntoIterator<Item = &'v [u8]>) -> usize {
    values
        .into_iter()
        .map(|v| EMBEDDED_LEN_BYTES + v.len())
        .sum()
}

/// How one key's set is stored.
pub(crate) enum Set<'a> {
    /// Inside the entry.
    Embedded(Vec<&'a [u8]>),
    /// In a nested B+tree.
    Tree(TreeHeader),
}

/// The set of `key` in the multi-value tree rooted at `root_page`, if the key exists.
///
/// # Errors
/// [`crate::Error::Corruption`] for damaged pages or an entry that is not a set.
pub(crate) fn find_set<'a, S: PageSource<'a>>(
    src: S,
    root_page: u64,
    key: &[u8],
) -> Result<Option<Set<'a>>> {
    match btree::get_stored(src, root_page, key)? {
        None => Ok(None),
        Some(stored) => set_of(stored, root_page).map(Some),
    }
}

/// Interprets a stored entry of a multi-value tree.
///
/// # Errors
/// [`crate::Error::Corruption`] for an entry that is not a set.
pub(crate) fn set_of(stored: ValueRef<'_>, page_number: u64) -> Result<Set<'_>> {
    match stored {
        ValueRef::Inline(bytes) => Ok(Set::Embedded(decode_set(bytes, page_number)?)),
        ValueRef::Tree(bytes) => {
            let header = TreeHeader::decode(bytes, page_number)?;
            if header.kind != TreeKind::BTree || header.entry_count == 0 {
                return Err(corrupt(
                    page_number,
                    "a set's tree is not a non-empty B+tree",
                ));
            }
            Ok(Set::Tree(header))
        }
        ValueRef::Overflow { .. } | ValueRef::Embedded(_) => {
            Err(corrupt(page_number, "a set stored as something else"))
        }
    }
}

/// Whether `value` is in `key`'s set.
///
/// # Errors
/// Corruption.
pub fn contains<'a, S: PageSource<'a>>(
    src: S,
    root_page: u64,
    key: &[u8],
    value: &[u8],
) -> Result<bool> {
    Ok(match find_set(src, root_page, key)? {
        None => false,
        Some(Set::Embedded(values)) => values.binary_search(&value).is_ok(),
        Some(Set::Tree(header)) => btree::get(src, header.root_page, value)?.is_some(),
    })
}

/// Number of values in `key`'s set (0 when the key is absent).
///
/// # Errors
/// Corruption.
pub fn count<'a, S: PageSource<'a>>(src: S, root_page: u64, key: &[u8]) -> Result<u64> {
    Ok(match find_set(src, root_page, key)? {
        None => 0,
        Some(Set::Embedded(values)) => values.len() as u64,
        Some(Set::Tree(header)) => header.entry_count,
    })
}

/// The values of one key in ascending order, usable from both ends. Items borrow from the
/// transaction.
pub struct Values<'a, S: PageSource<'a>> {
    inner: ValuesInner<'a, S>,
}

enum ValuesInner<'a, S: PageSource<'a>> {
    Embedded(std::vec::IntoIter<&'a [u8]>),
    Tree(Range<'a, S>),
}

impl<'a, S: PageSource<'a>> Values<'a, S> {
    /// The values of `key` (none when it is absent).
    ///
    /// # Errors
    /// Corruption.
    pub fn new(src: S, root_page: u64, key: &[u8]) -> Result<Values<'a, S>> {
        Self::between(src, root_page, key, Bound::Unbounded, Bound::Unbounded)
    }

    /// The values of `key` between `start` and `end`.
    ///
    /// # Errors
    /// Corruption.
    pub fn between(
        src: S,
        root_page: u64,
        key: &[u8],
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Result<Values<'a, S>> {
        let inner = match find_set(src, root_page, key)? {
            None => ValuesInner::Embedded(Vec::new().into_iter()),
            Some(Set::Embedded(mut values)) => {
                values.retain(|v| (start, end).contains(v));
                ValuesInner::Embedded(values.into_iter())
            }
            Some(Set::Tree(header)) => {
                ValuesInner::Tree(Range::new(src, header.root_page, start, end)?)
            }
        };
        Ok(Values { inner })
    }
}

/// The first `(key, value)` pair after `bound` (upwards) or, with `reverse`, the last one
/// before it, over every key's values in order.
///
/// # Errors
/// Corruption.
pub(crate) fn pair_next<'a, S: PageSource<'a>>(
    src: S,
    root_page: u64,
    bound: Bound<(&[u8], &[u8])>,
    reverse: bool,
) -> Result<Option<(&'a [u8], &'a [u8])>> {
    let (from_key, value_bound) = match bound {
        Bound::Unbounded => (Bound::Unbounded, Bound::Unbounded),
        Bound::Included((k, v)) => (Bound::Included(k), Bound::Included(v)),
        Bound::Excluded((k, v)) => (Bound::Included(k), Bound::Excluded(v)),
    };
    let mut keys = if reverse {
        Range::new(src, root_page, Bound::Unbounded, from_key)?
    } else {
        Range::new(src, root_page, from_key, Bound::Unbounded)?
    };
    loop {
        let next_key = if reverse {
            keys.next_back()
        } else {
            keys.next()
        };
        let Some(entry) = next_key else {
            return Ok(None);
        };
        let (key, _) = entry?;
        // Only the bound's own key is cut by the value bound.
        let on_bound_key = matches!(from_key, Bound::Included(k) if k == key);
        let value_bound = if on_bound_key {
            value_bound
        } else {
            Bound::Unbounded
        };
        let mut values = if reverse {
            Values::between(src, root_page, key, Bound::Unbounded, value_bound)?
        } else {
            Values::between(src, root_page, key, value_bound, Bound::Unbounded)?
        };
        let value = if reverse {
            values.next_back()
        } else {
            values.next()
        };
        if let Some(value) = value {
            return Ok(Some((key, value?)));
        }
    }
}

impl<'a, S: PageSource<'a>> Iterator for Values<'a, S> {
    type Item = Result<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            ValuesInner::Embedded(values) => values.next().map(Ok),
            ValuesInner::Tree(range) => range.next().map(|e| e.map(|(k, _)| k)),
        }
    }
}

impl<'a, S: PageSource<'a>> DoubleEndedIterator for Values<'a, S> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            ValuesInner::Embedded(values) => values.next_back().map(Ok),
            ValuesInner::Tree(range) => range.next_back().map(|e| e.map(|(k, _)| k)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_round_trip_and_damage_is_an_error() {
        let values: Vec<&[u8]> = vec![b"", b"a", b"ab", b"b"];
        let bytes = encode_set(values.iter().copied());
        assert_eq!(bytes.len(), encoded_size(values.iter().copied()));
        assert_eq!(decode_set(&bytes, 1).expect("decodes"), values);
        // Every cut and every single-byte change either decodes to a valid set or is an
        // error; none panics.
        for cut in 0..bytes.len() {
            let _ = decode_set(&bytes[..cut], 1);
        }
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x41;
            if let Ok(decoded) = decode_set(&damaged, 1) {
                assert!(decoded.windows(2).all(|w| w[0] < w[1]));
            }
        }
        let unordered = encode_set([&b"b"[..], &b"a"[..]]);
        assert!(decode_set(&unordered, 1).is_err());
        assert!(decode_set(&[], 1).is_err());
    }

    /// Splicing a value's encoding at the position found gives the encoding of the set
    /// with it; a value already there has no position; damage is an error wherever it is.
    #[test]
    fn position_in_set_splices_to_the_encoded_set() {
        let values: Vec<&[u8]> = vec![b"b", b"bb", b"d"];
        let bytes = encode_set(values.iter().copied());
        for new in [&b""[..], b"a", b"ba", b"c", b"e", b"zz"] {
            let at = position_in_set(&bytes, new, 1)
                .expect("valid")
                .expect("absent");
            let mut spliced = bytes.clone();
            let len = (new.len() as u16).to_le_bytes();
            spliced.splice(at..at, len.iter().chain(new).copied());
            let mut want = values.clone();
            want.push(new);
            want.sort_unstable();
            assert_eq!(spliced, encode_set(want.iter().copied()), "{new:?}");
        }
        for present in &values {
            assert_eq!(position_in_set(&bytes, present, 1).expect("valid"), None);
        }
        // Out of order after the position is still found.
        let unordered = encode_set([&b"a"[..], &b"c"[..], &b"b"[..]]);
        assert!(position_in_set(&unordered, b"a", 1).is_err());
        assert!(position_in_set(&bytes[..bytes.len() - 1], b"a", 1).is_err());
        assert!(position_in_set(&[], b"a", 1).is_err());
    }
}
