//! The node file's ids during a load, for resolving the ends of every edge row.

use std::borrow::Borrow;
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
///
/// Ids written as plain decimal numbers (`0`, `42`: no sign, no leading zero; most files
/// number their nodes) are kept in a vector indexed by their value: a lookup reads one
/// slot, where a hash table larger than the cache reads its control bytes and then the
/// slot, two misses per edge end. The vector grows only while it stays about as dense as
/// the ids claimed, so a file of a few large numbers does not allocate for every number
/// below them; a decimal id past its end goes to the table, and is found there.
#[derive(Default)]
pub(crate) struct IdMap {
    dense: Vec<u64>,
    ids: rustc_hash::FxHashMap<Key, u64>,
    claimed: usize,
}

/// The stable id of a file id claimed and not yet stored.
const UNSTORED: u64 = u64::MAX;
/// A slot of the dense vector no id claimed (the id, if any, is in the table).
const ABSENT: u64 = u64::MAX - 1;
/// Slots the dense vector may hold beyond twice the ids claimed.
const DENSE_SLACK: usize = 1 << 10;

/// The value of `id` if it is a plain decimal number of at most nine digits.
fn decimal(id: &[u8]) -> Option<usize> {
    if id.is_empty() || id.len() > 9 || (id.len() > 1 && id[0] == b'0') {
        return None;
    }
    id.iter().try_fold(0usize, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + usize::from(b - b'0'))
    })
}

impl IdMap {
    /// The dense slot of `id`, if it has one: decimal, within the vector and claimed.
    fn dense_slot(&self, id: &[u8]) -> Option<usize> {
        decimal(id).filter(|&n| self.dense.get(n).is_some_and(|&v| v != ABSENT))
    }

    /// Takes `file_id` for a row about to be stored; false if it was taken before.
    pub fn claim(&mut self, file_id: &str) -> bool {
        let bytes = file_id.as_bytes();
        if self.dense_slot(bytes).is_some() || self.ids.contains_key(bytes) {
            return false;
        }
        self.claimed += 1;
        let bound = 2 * self.claimed + DENSE_SLACK;
        match decimal(bytes) {
            Some(n) if n < bound => {
                if n >= self.dense.len() {
                    let len = (n + 1).max(2 * self.dense.len()).min(bound);
                    self.dense.resize(len, ABSENT);
                }
                self.dense[n] = UNSTORED;
            }
            _ => {
                self.ids.insert(Key::new(bytes), UNSTORED);
            }
        }
        true
    }

    /// Gives `file_id` its stable id.
    pub fn insert(&mut self, file_id: &str, id: u64) {
        debug_assert!(id < ABSENT);
        let bytes = file_id.as_bytes();
        if let Some(n) = self.dense_slot(bytes) {
            self.dense[n] = id;
            return;
        }
        match self.ids.get_mut(bytes) {
            Some(stored) => *stored = id,
            None => {
                self.ids.insert(Key::new(bytes), id);
            }
        }
    }

    /// The stable id of `file_id`, if it was stored.
    pub fn get(&self, file_id: &str) -> Option<u64> {
        let bytes = file_id.as_bytes();
        let stored = match self.dense_slot(bytes) {
            Some(n) => self.dense[n],
            None => *self.ids.get(bytes)?,
        };
        (stored != UNSTORED).then_some(stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_decimal_numbers_are_decimal() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"42"), Some(42));
        assert_eq!(decimal(b"999999999"), Some(999_999_999));
        let not_decimal: [&[u8]; 8] = [
            b"",
            b"007",
            b"-1",
            b"+1",
            b"1a",
            b" 1",
            b"1234567890",
            b"4.0",
        ];
        for id in not_decimal {
            assert_eq!(decimal(id), None, "{id:?}");
        }
    }

    /// Decimal ids in the vector, others in the table, and a decimal id that went to the
    /// table before the vector reached it: each resolves, each is claimed once, and a lone
    /// large number does not grow the vector.
    #[test]
    fn decimal_ids_resolve_from_the_vector_or_the_table_and_are_claimed_once() {
        let mut map = IdMap::default();
        assert!(map.claim("999999999"));
        assert!(map.claim("5000"), "past the vector's bound: to the table");
        assert!(map.dense.is_empty(), "no vector for two large numbers");
        for i in 0..4_500u64 {
            assert!(map.claim(&i.to_string()));
        }
        assert!(map.dense.len() > 5000, "the vector grew past 5000");
        assert!(map.dense.len() <= 2 * 4_502 + DENSE_SLACK);
        for id in ["n1", "007", "-3"] {
            assert!(map.claim(id));
        }
        // Claimed, not stored: not found, and not claimed again.
        for id in ["0", "4499", "5000", "999999999", "n1", "007", "-3"] {
            assert_eq!(map.get(id), None, "{id}");
            assert!(!map.claim(id), "{id} claimed twice");
        }
        for i in 0..4_500u64 {
            map.insert(&i.to_string(), i + 10);
        }
        // The ids outside the vector, and the stable ids they get.
        let others = [
            ("5000", 1),
            ("999999999", 2),
            ("n1", 3),
            ("007", 4),
            ("-3", 5),
        ];
        for (id, stable) in others {
            map.insert(id, stable);
        }
        for i in 0..4_500u64 {
            assert_eq!(map.get(&i.to_string()), Some(i + 10));
        }
        for (id, stable) in others {
            assert_eq!(map.get(id), Some(stable), "{id}");
        }
        for unknown in ["4500", "4999", "5001", "n2", "00"] {
            assert_eq!(map.get(unknown), None, "{unknown}");
        }
    }

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
