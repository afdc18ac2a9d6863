//! Small fixed-size trees embedded in their parent's entry.
//!
//! A fixed-size tree nested under a key starts inside that key's entry (leaf entry kind 3):
//! `value_size u16`, then its entries packed as in a leaf (`key u64, value`, keys
//! ascending). It moves into pages of its own when its entries would pass
//! [`EMBEDDED_FIXED_MAX_BYTES`], and back when it is one leaf whose entries fit in half that.
//! Most per-node or per-series trees of a graph or a time-series store are small; each
//! would otherwise take a whole page.

use crate::error::Result;
use crate::page::{corrupt, get_u16, get_u64};

/// Most entry bytes an embedded fixed-size tree holds.
pub const EMBEDDED_FIXED_MAX_BYTES: usize = 1024;
/// A tree in pages moves back into its entry when its entries fit in this many bytes.
pub const EMBED_AGAIN_AT_OR_BELOW_BYTES: usize = EMBEDDED_FIXED_MAX_BYTES / 2;
/// Bytes before the entries: the value size.
pub const EMBEDDED_HEADER_BYTES: usize = 2;

/// An embedded tree's entries, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct Embedded<'a> {
    entries: &'a [u8],
    value_size: usize,
}

impl<'a> Embedded<'a> {
    /// Interprets a stored embedded tree; the size checks make every access in bounds.
    ///
    /// # Errors
    /// [`crate::Error::Corruption`] naming `page_number` for a malformed entry.
    pub fn decode(stored: &'a [u8], page_number: u64) -> Result<Embedded<'a>> {
        if stored.len() < EMBEDDED_HEADER_BYTES {
            return Err(corrupt(
                page_number,
                "embedded tree shorter than its header",
            ));
        }
        let value_size = usize::from(get_u16(stored, 0));
        let entries = &stored[EMBEDDED_HEADER_BYTES..];
        if value_size > super::FIXED_VALUE_SIZE_MAX_BYTES
            || entries.len() > EMBEDDED_FIXED_MAX_BYTES
            || !entries.len().is_multiple_of(8 + value_size)
        {
            return Err(corrupt(page_number, "embedded tree of a bad size"));
        }
        Ok(Embedded {
            entries,
            value_size,
        })
    }

    /// Entries of an owned embedded tree (`entries` without the header).
    pub(crate) fn of(entries: &'a [u8], value_size: usize) -> Embedded<'a> {
        debug_assert_eq!(entries.len() % (8 + value_size), 0);
        Embedded {
            entries,
            value_size,
        }
    }

    /// The value size.
    pub fn value_size(&self) -> usize {
        self.value_size
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len() / (8 + self.value_size)
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> u64 {
        get_u64(self.entries, i * (8 + self.value_size))
    }

    /// Value `i`.
    pub fn value(&self, i: usize) -> &'a [u8] {
        let at = i * (8 + self.value_size) + 8;
        &self.entries[at..at + self.value_size]
    }

    /// Where `key` is (`Ok`) or would go (`Err`).
    pub fn search(&self, key: u64) -> std::result::Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid).cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Option<&'a [u8]> {
        self.search(key).ok().map(|i| self.value(i))
    }

    /// Fails unless keys strictly ascend.
    ///
    /// # Errors
    /// [`crate::Error::Corruption`] naming `page_number`.
    pub fn validate_order(&self, page_number: u64) -> Result<()> {
        for i in 1..self.len() {
            if self.key(i - 1) >= self.key(i) {
                return Err(corrupt(page_number, "embedded tree keys out of order"));
            }
        }
        Ok(())
    }
}

/// The stored form of an embedded tree: value size, then `entries`.
pub fn encode(value_size: usize, entries: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(EMBEDDED_HEADER_BYTES + entries.len());
    out.extend_from_slice(&(value_size as u16).to_le_bytes());
    out.extend_from_slice(entries);
    out
}

/// Inserts or replaces `key` in owned `entries`; returns true if it replaced a value.
pub(crate) fn insert(entries: &mut Vec<u8>, value_size: usize, key: u64, value: &[u8]) -> bool {
    let size = 8 + value_size;
    match Embedded::of(entries, value_size).search(key) {
        Ok(i) => {
            entries[i * size + 8..(i + 1) * size].copy_from_slice(value);
            true
        }
        Err(i) => {
            let at = i * size;
            entries.splice(
                at..at,
                key.to_le_bytes().into_iter().chain(value.iter().copied()),
            );
            false
        }
    }
}

/// Removes `key` from owned `entries`; returns true if it was there.
pub(crate) fn remove(entries: &mut Vec<u8>, value_size: usize, key: u64) -> bool {
    let size = 8 + value_size;
    match Embedded::of(entries, value_size).search(key) {
        Ok(i) => {
            entries.drain(i * size..(i + 1) * size);
            true
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_edits_keep_order_and_decode_checks_sizes() {
        let mut entries = Vec::new();
        for key in [5u64, 1, 9, 5, 3] {
            insert(&mut entries, 2, key, &(key as u16).to_le_bytes());
        }
        let tree = Embedded::of(&entries, 2);
        assert_eq!(
            (0..tree.len()).map(|i| tree.key(i)).collect::<Vec<_>>(),
            [1, 3, 5, 9]
        );
        assert_eq!(tree.get(9), Some(&9u16.to_le_bytes()[..]));
        assert!(remove(&mut entries, 2, 3));
        assert!(!remove(&mut entries, 2, 3));
        let stored = encode(2, &entries);
        let decoded = Embedded::decode(&stored, 1).expect("decodes");
        assert_eq!(decoded.len(), 3);
        decoded.validate_order(1).expect("ordered");
        assert!(Embedded::decode(&stored[..stored.len() - 1], 1).is_err());
        assert!(Embedded::decode(&[0xFF, 0xFF], 1).is_err());
        assert!(Embedded::decode(&[], 1).is_err());
        let unordered = encode(0, &[2u64.to_le_bytes(), 1u64.to_le_bytes()].concat());
        assert!(
            Embedded::decode(&unordered, 1)
                .expect("sizes fine")
                .validate_order(1)
                .is_err()
        );
    }
}
