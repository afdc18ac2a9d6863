//! Cursors over trees open for writing: seek, step both ways, delete at the cursor.
//!
//! A write cursor keeps its position as a key, not as a path of pages: deleting at the
//! cursor (or any change through it) may merge or free the pages a path would hold. Each
//! step is one descent from the root (over a multi-value tree, a few: the key, its set,
//! the value), so a write cursor costs a lookup per step; read cursors
//! ([`crate::btree::TreeCursor`]) step within leaves.

use super::fixed::{FixedTree, FixedTreeMut};
use super::multi::{MultiTree, MultiTreeMut};
use super::table::{Table, TableMut};
use super::write::TreeMut;
use crate::error::Result;
use crate::table::Record;
use std::ops::Bound;

/// What a key cursor can move over: ordered entries, looked up by key.
pub trait Seekable {
    /// An owned key (the cursor's position).
    type Key: Clone;
    /// An entry as the tree hands it out, borrowed from it.
    type Entry<'s>
    where
        Self: 's;
    /// The key of an entry.
    fn key_of<'s>(entry: &Self::Entry<'s>) -> Self::Key
    where
        Self: 's;
    /// The first entry above `bound` (as a lower bound).
    ///
    /// # Errors
    /// Corruption.
    fn first_after(&self, bound: Bound<&Self::Key>) -> Result<Option<Self::Entry<'_>>>;
    /// The last entry below `bound` (as an upper bound).
    ///
    /// # Errors
    /// Corruption.
    fn last_before(&self, bound: Bound<&Self::Key>) -> Result<Option<Self::Entry<'_>>>;
}

/// A [`Seekable`] whose entries can be removed by key.
pub trait Removable: Seekable {
    /// Removes `key`; false if absent.
    ///
    /// # Errors
    /// Scratch full; corruption.
    fn remove_key(&mut self, key: &Self::Key) -> Result<bool>;
}

/// Where a write cursor is.
enum Place<K> {
    Unpositioned,
    At(K),
    /// The entry it was on was deleted: `next` and `prev` go to its neighbours.
    Deleted(K),
    PastEnd,
    BeforeStart,
}

/// A cursor that keeps its position as a key: over a tree open for writing (borrowing its
/// handle; it can delete at the cursor), or in a read transaction over a fixed-size tree,
/// a multi-value tree (its `(key, value)` pairs) or a table.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
/// let mut wtx = env.begin_write()?;
/// let mut t = wtx.open_tree("t")?;
/// for k in [b"a", b"b", b"c", b"d"] {
///     t.insert(k, b"v")?;
/// }
/// let mut cursor = t.cursor();
/// assert_eq!(cursor.seek(b"b")?.map(|(k, _)| k.to_vec()), Some(b"b".to_vec()));
/// assert!(cursor.delete()?); // removes "b"; the cursor sits between "a" and "c"
/// assert_eq!(cursor.next()?.map(|(k, _)| k.to_vec()), Some(b"c".to_vec()));
/// assert_eq!(cursor.prev()?.map(|(k, _)| k.to_vec()), Some(b"a".to_vec()));
/// assert_eq!(t.len(), 3);
/// # Ok::<(), hrafn::Error>(())
/// ```
pub struct KeyCursor<T: Seekable> {
    target: T,
    place: Place<T::Key>,
}

impl<T: Seekable> KeyCursor<T> {
    pub(crate) fn new(target: T) -> KeyCursor<T> {
        KeyCursor {
            target,
            place: Place::Unpositioned,
        }
    }

    fn land<'s>(
        place: &mut Place<T::Key>,
        entry: Option<T::Entry<'s>>,
        off: Place<T::Key>,
    ) -> Option<T::Entry<'s>> {
        *place = match &entry {
            Some(e) => Place::At(T::key_of(e)),
            None => off,
        };
        entry
    }

    /// Moves to the first entry.
    ///
    /// # Errors
    /// Corruption.
    pub fn first(&mut self) -> Result<Option<T::Entry<'_>>> {
        let entry = self.target.first_after(Bound::Unbounded)?;
        Ok(Self::land(&mut self.place, entry, Place::PastEnd))
    }

    /// Moves to the last entry.
    ///
    /// # Errors
    /// Corruption.
    pub fn last(&mut self) -> Result<Option<T::Entry<'_>>> {
        let entry = self.target.last_before(Bound::Unbounded)?;
        Ok(Self::land(&mut self.place, entry, Place::BeforeStart))
    }

    /// Moves to the first entry whose key is `>= key`.
    ///
    /// # Errors
    /// Corruption.
    pub fn seek(&mut self, key: impl Into<T::Key>) -> Result<Option<T::Entry<'_>>> {
        let key = key.into();
        let entry = self.target.first_after(Bound::Included(&key))?;
        Ok(Self::land(&mut self.place, entry, Place::PastEnd))
    }

    /// The entry the cursor is on (none after a delete, until it moves).
    ///
    /// # Errors
    /// Corruption.
    pub fn current(&self) -> Result<Option<T::Entry<'_>>> {
        match &self.place {
            Place::At(key) => self.target.first_after(Bound::Included(key)),
            _ => Ok(None),
        }
    }

    /// Moves to the next entry (the first, if unpositioned or before the start).
    ///
    /// # Errors
    /// Corruption.
    // A cursor step, not an iterator: it moves a position that `prev`, `seek` and
    // `delete` share, and its entries borrow the cursor.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<T::Entry<'_>>> {
        let from = match &self.place {
            Place::Unpositioned | Place::BeforeStart => Bound::Unbounded,
            Place::At(k) | Place::Deleted(k) => Bound::Excluded(k.clone()),
            Place::PastEnd => return Ok(None),
        };
        let entry = self.target.first_after(from.as_ref())?;
        Ok(Self::land(&mut self.place, entry, Place::PastEnd))
    }

    /// Moves to the previous entry (the last, if unpositioned or past the end).
    ///
    /// # Errors
    /// Corruption.
    pub fn prev(&mut self) -> Result<Option<T::Entry<'_>>> {
        let from = match &self.place {
            Place::Unpositioned | Place::PastEnd => Bound::Unbounded,
            Place::At(k) | Place::Deleted(k) => Bound::Excluded(k.clone()),
            Place::BeforeStart => return Ok(None),
        };
        let entry = self.target.last_before(from.as_ref())?;
        Ok(Self::land(&mut self.place, entry, Place::BeforeStart))
    }
}

impl<T: Removable> KeyCursor<T> {
    /// Deletes the entry the cursor is on; the cursor then sits between its neighbours.
    /// Returns false if it was on no entry.
    ///
    /// # Errors
    /// Scratch full; corruption.
    pub fn delete(&mut self) -> Result<bool> {
        let Place::At(key) = &self.place else {
            return Ok(false);
        };
        let key = key.clone();
        let removed = self.target.remove_key(&key)?;
        self.place = Place::Deleted(key);
        Ok(removed)
    }
}

impl Seekable for &mut TreeMut<'_, '_> {
    type Key = Vec<u8>;
    type Entry<'s>
        = (&'s [u8], &'s [u8])
    where
        Self: 's;

    fn key_of<'s>(entry: &Self::Entry<'s>) -> Vec<u8>
    where
        Self: 's,
    {
        entry.0.to_vec()
    }

    fn first_after(&self, bound: Bound<&Vec<u8>>) -> Result<Option<Self::Entry<'_>>> {
        let bound = bound.map(Vec::as_slice);
        self.range::<&[u8], _>((bound, Bound::Unbounded))?
            .next()
            .transpose()
    }

    fn last_before(&self, bound: Bound<&Vec<u8>>) -> Result<Option<Self::Entry<'_>>> {
        let bound = bound.map(Vec::as_slice);
        self.range::<&[u8], _>((Bound::Unbounded, bound))?
            .next_back()
            .transpose()
    }
}

impl Removable for &mut TreeMut<'_, '_> {
    fn remove_key(&mut self, key: &Vec<u8>) -> Result<bool> {
        self.remove(key)
    }
}

/// The fixed-size tree handles' shared stepping: both offer `range` and `range_rev`.
macro_rules! fixed_seekable {
    ($ty:ty) => {
        impl Seekable for $ty {
            type Key = u64;
            type Entry<'s>
                = (u64, &'s [u8])
            where
                Self: 's;

            fn key_of<'s>(entry: &Self::Entry<'s>) -> u64
            where
                Self: 's,
            {
                entry.0
            }

            fn first_after(&self, bound: Bound<&u64>) -> Result<Option<Self::Entry<'_>>> {
                self.range((bound.cloned(), Bound::Unbounded))?
                    .next()
                    .transpose()
            }

            fn last_before(&self, bound: Bound<&u64>) -> Result<Option<Self::Entry<'_>>> {
                self.range_rev((Bound::Unbounded, bound.cloned()))?
                    .next()
                    .transpose()
            }
        }
    };
}

fixed_seekable!(&mut FixedTreeMut<'_, '_>);
fixed_seekable!(FixedTree<'_>);

impl Removable for &mut FixedTreeMut<'_, '_> {
    fn remove_key(&mut self, key: &u64) -> Result<bool> {
        self.remove(*key)
    }
}

/// A `(key, value)` pair of a multi-value tree as a cursor position.
type Pair = (Vec<u8>, Vec<u8>);

fn pair_bound(bound: Bound<&Pair>) -> Bound<(&[u8], &[u8])> {
    bound.map(|(k, v)| (k.as_slice(), v.as_slice()))
}

/// The multi-value tree handles' shared stepping, over `(key, value)` pairs.
macro_rules! multi_seekable {
    ($ty:ty) => {
        impl Seekable for $ty {
            type Key = Pair;
            type Entry<'s>
                = (&'s [u8], &'s [u8])
            where
                Self: 's;

            fn key_of<'s>(entry: &Self::Entry<'s>) -> Pair
            where
                Self: 's,
            {
                (entry.0.to_vec(), entry.1.to_vec())
            }

            fn first_after(&self, bound: Bound<&Pair>) -> Result<Option<Self::Entry<'_>>> {
                self.pair_next(pair_bound(bound), false)
            }

            fn last_before(&self, bound: Bound<&Pair>) -> Result<Option<Self::Entry<'_>>> {
                self.pair_next(pair_bound(bound), true)
            }
        }
    };
}

multi_seekable!(&mut MultiTreeMut<'_, '_>);
multi_seekable!(MultiTree<'_>);

impl Removable for &mut MultiTreeMut<'_, '_> {
    fn remove_key(&mut self, (key, value): &Pair) -> Result<bool> {
        self.remove(key, value)
    }
}

/// The table handles' shared stepping, over records in id order.
macro_rules! table_seekable {
    ($ty:ty) => {
        impl Seekable for $ty {
            type Key = u64;
            type Entry<'s>
                = (u64, Record<'s>)
            where
                Self: 's;

            fn key_of<'s>(entry: &Self::Entry<'s>) -> u64
            where
                Self: 's,
            {
                entry.0
            }

            fn first_after(&self, bound: Bound<&u64>) -> Result<Option<Self::Entry<'_>>> {
                self.record_next(bound.cloned(), false)
            }

            fn last_before(&self, bound: Bound<&u64>) -> Result<Option<Self::Entry<'_>>> {
                self.record_next(bound.cloned(), true)
            }
        }
    };
}

table_seekable!(&mut TableMut<'_, '_>);
table_seekable!(&Table<'_>);

impl Removable for &mut TableMut<'_, '_> {
    fn remove_key(&mut self, id: &u64) -> Result<bool> {
        self.delete(*id)
    }
}
