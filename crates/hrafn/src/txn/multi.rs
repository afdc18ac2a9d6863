//! Multi-value trees as a transaction sees them (the layout is in `crate::multi`).

use super::state::State;
use super::write::WriteTxn;
use crate::btree::{Range, TreeHeader, TreeKind};
use crate::error::{Error, Result};
use crate::limits::KEY_SIZE_MAX_BYTES;
use crate::multi::{self, MULTI_VALUE_SIZE_MAX_BYTES, Values};
use std::ops::{Bound, RangeBounds};

/// A multi-value tree in a read transaction: each key holds a sorted set of distinct
/// values.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
/// let mut wtx = env.begin_write()?;
/// let mut index = wtx.open_multi_tree("by-label")?;
/// index.add(b"job=api", b"series-1")?;
/// index.add(b"job=api", b"series-7")?;
/// index.add(b"job=db", b"series-2")?;
/// index.remove(b"job=api", b"series-1")?;
/// wtx.commit()?;
///
/// let rtx = env.begin_read()?;
/// let index = rtx.open_multi_tree("by-label")?;
/// let api: Vec<&[u8]> = index.values(b"job=api")?.collect::<Result<_, _>>()?;
/// assert_eq!(api, [&b"series-7"[..]]);
/// assert!(index.contains(b"job=db", b"series-2")?);
/// assert_eq!(index.count(b"job=none")?, 0);
/// # Ok::<(), hrafn::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct MultiTree<'t> {
    src: &'t State,
    header: TreeHeader,
}

fn expect_multi(name: &str, header: TreeHeader) -> Result<TreeHeader> {
    header.expect_kind(name, TreeKind::Multi)?;
    Ok(header)
}

impl<'t> MultiTree<'t> {
    pub(crate) fn new(src: &'t State, name: &str, header: TreeHeader) -> Result<MultiTree<'t>> {
        Ok(MultiTree {
            src,
            header: expect_multi(name, header)?,
        })
    }

    /// Whether `value` is in `key`'s set.
    ///
    /// # Errors
    /// Corruption.
    pub fn contains(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        multi::contains(
            self.src,
            self.header.root_page,
            key.as_ref(),
            value.as_ref(),
        )
    }

    /// The values of `key`, ascending (none if the key is absent); iterate from either end.
    ///
    /// # Errors
    /// Corruption.
    pub fn values(&self, key: impl AsRef<[u8]>) -> Result<crate::iter::Values<'t>> {
        Values::new(self.src, self.header.root_page, key.as_ref())
    }

    /// Number of values of `key`.
    ///
    /// # Errors
    /// Corruption.
    pub fn count(&self, key: impl AsRef<[u8]>) -> Result<u64> {
        multi::count(self.src, self.header.root_page, key.as_ref())
    }

    /// The keys in `range`, in order (use [`MultiTree::values`] to read a key's set).
    ///
    /// # Errors
    /// None here: positioning waits for the first step, so corruption met then comes as
    /// an `Err` item of the iterator.
    pub fn keys<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
    ) -> Result<impl DoubleEndedIterator<Item = Result<&'t [u8]>> + use<'t, K, R>> {
        let (start, end) = super::read::bounds(&range);
        let keys = Range::new(self.src, self.header.root_page, start, end)?;
        Ok(keys.map(|e| e.map(|(k, _)| k)))
    }

    /// Number of keys.
    pub fn key_count(&self) -> u64 {
        self.header.entry_count
    }

    /// A cursor over the `(key, value)` pairs, in key order then value order.
    pub fn cursor(&self) -> super::cursor::KeyCursor<MultiTree<'t>> {
        super::cursor::KeyCursor::new(*self)
    }

    pub(crate) fn pair_next(
        &self,
        bound: Bound<(&[u8], &[u8])>,
        reverse: bool,
    ) -> Result<Option<(&'t [u8], &'t [u8])>> {
        multi::pair_next(self.src, self.header.root_page, bound, reverse)
    }

    /// Whether the tree has no keys.
    pub fn is_empty(&self) -> bool {
        self.header.entry_count == 0
    }
}

/// A multi-value tree opened for writing; borrows the write transaction (or, nested, its
/// parent tree's handle).
pub struct MultiTreeMut<'t, 'env> {
    txn: &'t mut WriteTxn<'env>,
    index: usize,
}

impl<'t, 'env> MultiTreeMut<'t, 'env> {
    pub(crate) fn new(txn: &'t mut WriteTxn<'env>, index: usize) -> MultiTreeMut<'t, 'env> {
        MultiTreeMut { txn, index }
    }

    fn header(&self) -> TreeHeader {
        self.txn.trees[self.index].header
    }

    fn check_sizes(key: &[u8], value: &[u8]) -> Result<()> {
        if key.len() > KEY_SIZE_MAX_BYTES {
            return Err(Error::KeyTooLarge {
                size_bytes: key.len(),
                limit_bytes: KEY_SIZE_MAX_BYTES,
            });
        }
        if value.len() > MULTI_VALUE_SIZE_MAX_BYTES {
            return Err(Error::ValueTooLarge {
                size_bytes: value.len(),
                limit_bytes: MULTI_VALUE_SIZE_MAX_BYTES,
            });
        }
        Ok(())
    }

    /// Adds `value` to `key`'s set. Returns false if it was already there.
    ///
    /// # Errors
    /// [`Error::KeyTooLarge`]; [`Error::ValueTooLarge`] past
    /// [`multi::MULTI_VALUE_SIZE_MAX_BYTES`]; scratch full; corruption. After an error
    /// other than a size refusal the transaction has failed: its commit returns
    /// [`Error::TransactionFailed`].
    pub fn add(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        let (key, value) = (key.as_ref(), value.as_ref());
        Self::check_sizes(key, value)?;
        let mut header = self.header();
        // A failure may come part way (a set moved into its own tree, a split): the
        // transaction must not commit that half, as for `TreeMut::insert`.
        let added = multi::write::add(self.txn, &mut header, key, value);
        let added = self.txn.fail_on_error(added)?;
        self.txn.set_tree_header(self.index, header)?;
        Ok(added)
    }

    /// Adds each `(key, value)` pair, as [`MultiTreeMut::add`] one by one would. Returns
    /// how many were not already there.
    ///
    /// Pairs in ascending key order go fastest: while keys ascend within one leaf, an add
    /// skips the descent from the root (and the branch pages' searches), and the values
    /// of consecutive pairs with one key go into its set together, found and stored once.
    ///
    /// # Errors
    /// As [`MultiTreeMut::add`]. A key or value too large stops the run with the pairs
    /// before it added. After an engine error (scratch full, corruption) a run of one
    /// key's values may be stored in part, so the transaction fails, as after a failed
    /// [`MultiTreeMut::add`].
    ///
    /// ```
    /// # fn main() -> hrafn::Result<()> {
    /// # let dir = tempfile::tempdir().expect("tempdir");
    /// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    /// let mut wtx = env.begin_write()?;
    /// let mut follows = wtx.open_multi_tree("follows")?;
    /// let pairs = [("ada", "bob"), ("ada", "cy"), ("bob", "ada")];
    /// assert_eq!(follows.add_each(pairs)?, 3);
    /// assert_eq!(follows.count("ada")?, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_each<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<u64> {
        let mut header = self.header();
        let mut finger = crate::btree::write::Finger::following();
        let mut added = 0;
        // Adds a run of values with one key (none without a key), leaving `values` empty.
        let mut add_run = |key: Option<K>, values: &mut Vec<V>| -> Result<()> {
            if let Some(key) = key {
                let txn = &mut *self.txn;
                added += multi::write::add_following(
                    txn,
                    &mut header,
                    key.as_ref(),
                    values,
                    &mut finger,
                )?;
            }
            values.clear();
            Ok(())
        };
        let mut key: Option<K> = None;
        let mut values: Vec<V> = Vec::new();
        let mut outcome = Ok(());
        for (next_key, value) in pairs {
            if let Err(error) = Self::check_sizes(next_key.as_ref(), value.as_ref()) {
                outcome = Err(error);
                break;
            }
            if key
                .as_ref()
                .is_some_and(|k| k.as_ref() != next_key.as_ref())
                && let Err(error) = add_run(key.take(), &mut values)
            {
                outcome = Err(error);
                break;
            }
            key.get_or_insert(next_key);
            values.push(value);
        }
        // The last run, or the run before a pair of the wrong size: one by one, it would
        // have been added first, so its error comes first too.
        if let Err(error) = add_run(key.take(), &mut values) {
            outcome = Err(error);
        }
        // A key or value too large is refused before its run changes anything; any other
        // failure may leave a run stored in part, which must not commit.
        if let Err(e) = &outcome
            && !matches!(e, Error::KeyTooLarge { .. } | Error::ValueTooLarge { .. })
        {
            outcome = self.txn.fail_on_error(outcome);
        }
        // The header changed with every add, also those before a failure; that failure is
        // the error to report.
        let stored = self.txn.set_tree_header(self.index, header);
        outcome?;
        stored.map(|()| added)
    }

    /// Removes `value` from `key`'s set (the key goes with its last value). Returns false
    /// if it was not there.
    ///
    /// # Errors
    /// Scratch full; corruption. After an error the transaction has failed: its commit
    /// returns [`Error::TransactionFailed`].
    pub fn remove(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        let (key, value) = (key.as_ref(), value.as_ref());
        if Self::check_sizes(key, value).is_err() {
            return Ok(false);
        }
        let mut header = self.header();
        // A failure may come after the set's tree changed, its count not yet stored.
        let removed = multi::write::remove(self.txn, &mut header, key, value);
        let removed = self.txn.fail_on_error(removed)?;
        self.txn.set_tree_header(self.index, header)?;
        Ok(removed)
    }

    /// Removes `key` with all its values. Returns how many values it held.
    ///
    /// # Errors
    /// Scratch full; corruption. After an error the transaction has failed: its commit
    /// returns [`Error::TransactionFailed`].
    pub fn remove_key(&mut self, key: impl AsRef<[u8]>) -> Result<u64> {
        let key = key.as_ref();
        if key.len() > KEY_SIZE_MAX_BYTES {
            return Ok(0);
        }
        let mut header = self.header();
        // A failure may come after part of the set's tree was freed while the key still
        // names it.
        let removed = multi::write::remove_key(self.txn, &mut header, key);
        let removed = self.txn.fail_on_error(removed)?;
        self.txn.set_tree_header(self.index, header)?;
        Ok(removed)
    }

    /// Whether `value` is in `key`'s set, as this transaction sees it.
    ///
    /// # Errors
    /// Corruption.
    pub fn contains(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        multi::contains(
            &*self.txn,
            self.header().root_page,
            key.as_ref(),
            value.as_ref(),
        )
    }

    /// The values of `key`, ascending, as this transaction sees them.
    ///
    /// # Errors
    /// Corruption.
    pub fn values<'s>(&'s self, key: impl AsRef<[u8]>) -> Result<crate::iter::ValuesMut<'s, 'env>> {
        Values::new(&*self.txn, self.header().root_page, key.as_ref())
    }

    /// Number of values of `key`.
    ///
    /// # Errors
    /// Corruption.
    pub fn count(&self, key: impl AsRef<[u8]>) -> Result<u64> {
        multi::count(&*self.txn, self.header().root_page, key.as_ref())
    }

    /// Number of keys.
    pub fn key_count(&self) -> u64 {
        self.header().entry_count
    }

    /// The keys in `range`, in order, as this transaction sees them (use
    /// [`MultiTreeMut::values`] to read a key's set).
    ///
    /// # Errors
    /// None here: positioning waits for the first step, so corruption met then comes as
    /// an `Err` item of the iterator.
    pub fn keys<'s, K: AsRef<[u8]>, R: RangeBounds<K>>(
        &'s self,
        range: R,
    ) -> Result<impl DoubleEndedIterator<Item = Result<&'s [u8]>> + use<'s, 'env, K, R>> {
        let (start, end) = super::read::bounds(&range);
        let keys = Range::new(&*self.txn, self.header().root_page, start, end)?;
        Ok(keys.map(|e| e.map(|(k, _)| k)))
    }

    /// A cursor over the `(key, value)` pairs, in key order then value order, that can
    /// delete the pair it stands on.
    pub fn cursor(&mut self) -> super::cursor::KeyCursor<&mut Self> {
        super::cursor::KeyCursor::new(self)
    }

    pub(crate) fn pair_next(
        &self,
        bound: Bound<(&[u8], &[u8])>,
        reverse: bool,
    ) -> Result<Option<(&[u8], &[u8])>> {
        multi::pair_next(&*self.txn, self.header().root_page, bound, reverse)
    }

    /// Whether the tree has no keys.
    pub fn is_empty(&self) -> bool {
        self.header().entry_count == 0
    }
}
