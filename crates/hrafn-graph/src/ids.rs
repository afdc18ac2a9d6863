//! The node file's ids during a load, for resolving the ends of every edge row.

use std::borrow::Borrow;
use std::collections::hash_map::Entry;
use std::hash::{Hash, Hasher};

/// Bytes of an id kept inside the table's slot.
const INLINE_BYTES_MAX: usize = 22;

/// A file id, inline when short: a lookup then reads the slot it lands on and nothing
/// else. A `String` key costs one more cache miss per edge end (its heap bytes), which
/// on a graph larger than the cache is most of a lookup.
enum Key {
    Inline {
        len: u8,
        bytes: [u8; INLINE_BYTES_MAX],
    },
    Heap(Box<[u8]>),
}

impl Key {
    fn new(id: &[u8]) -> Key {
        if id.len() <= INLINE_BYTES_MAX {
            let mut bytes = [0; INLINE_BYTES_MAX];
            bytes[..id.len()].copy_from_slice(id);
            Key::Inline {
                len: id.len() as u8,
                bytes,
            }
        } else {
            Key::Heap(id.into())
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(bytes) => bytes,
        }
    }
}

// Hashed and compared as the bytes they hold, so a lookup by `&[u8]` finds them.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The stable id of each file id loaded so far.
#[derive(Default)]
pub(crate) struct IdMap {
    ids: rustc_hash::FxHashMap<Key, u64>,
}

/// The stable id of a file id claimed and not yet stored.
const UNSTORED: u64 = u64::MAX;

impl IdMap {
    /// Takes `file_id` for a row about to be stored; false if it was taken before.
    pub fn claim(&mut self, file_id: &str) -> bool {
        match self.ids.entry(Key::new(file_id.as_bytes())) {
            Entry::Occupied(_) => false,
            Entry::Vacant(slot) => {
                slot.insert(UNSTORED);
                true
            }
        }
    }

    /// Gives `file_id` its stable id.
    pub fn insert(&mut self, file_id: &str, id: u64) {
        debug_assert_ne!(id, UNSTORED);
        match self.ids.get_mut(file_id.as_bytes()) {
            Some(stored) => *stored = id,
            None => {
                self.ids.insert(Key::new(file_id.as_bytes()), id);
            }
        }
    }

    /// The stable id of `file_id`, if it was stored.
    pub fn get(&self, file_id: &str) -> Option<u64> {
        self.ids
            .get(file_id.as_bytes())
            .copied()
            .filter(|&id| id != UNSTORED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_ids_resolve_and_others_do_not() {
        let mut map = IdMap::default();
        let long = "x".repeat(INLINE_BYTES_MAX + 1);
        let edge = "y".repeat(INLINE_BYTES_MAX);
        for (i, id) in ["", "1", "n42", edge.as_str(), long.as_str()]
            .into_iter()
            .enumerate()
        {
            map.insert(id, i as u64);
        }
        assert_eq!(map.get(""), Some(0));
        assert_eq!(map.get("n42"), Some(2));
        assert_eq!(map.get(&edge), Some(3));
        assert_eq!(map.get(&long), Some(4));
        assert_eq!(map.get("n4"), None);
        assert_eq!(map.get(&long[1..]), None);
        assert_eq!(
            map.get("1\0"),
            None,
            "an inline id's unused bytes are not part of it"
        );
        // Claimed, then stored: found only once stored; a second claim fails.
        assert!(map.claim("n7"));
        assert!(!map.claim("n7") && !map.claim("n42"));
        assert_eq!(map.get("n7"), None);
        map.insert("n7", 9);
        assert_eq!(map.get("n7"), Some(9));
    }
}
