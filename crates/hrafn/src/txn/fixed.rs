//! Fixed-size trees as a transaction sees them (the pages are in `crate::fixed`).

use super::state::State;
use super::write::WriteTxn;
use crate::btree::TreeHeader;
use crate::error::{Error, Result};
use crate::fixed::{self, FixedRoot, embedded};
use std::ops::RangeBounds;

fn value_size(header: &TreeHeader) -> usize {
    header
        .kind
        .fixed_value_size()
        .expect("opened as a fixed-size tree")
}

/// A fixed-size tree in a read transaction: `u64` keys in numeric order, values of one
/// size.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
/// let mut wtx = env.begin_write()?;
/// let mut series = wtx.open_fixed_tree("cpu", 8)?;
/// for t in 0..1000u64 {
///     series.insert(t * 15, &(t as f64).to_le_bytes())?;
/// }
/// wtx.commit()?;
/// let rtx = env.begin_read()?;
/// let series = rtx.open_fixed_tree("cpu")?;
/// assert_eq!(series.get(30)?, Some(&2.0f64.to_le_bytes()[..]));
/// assert_eq!(series.range(100..160)?.count(), 4);
/// assert_eq!(series.last()?.map(|(k, _)| k), Some(999 * 15));
/// let newest: Vec<u64> = series.range_rev(..)?.take(2).map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
/// assert_eq!(newest, [999 * 15, 998 * 15]);
/// # Ok::<(), hrafn::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct FixedTree<'t> {
    src: &'t State,
    header: TreeHeader,
    root: FixedRoot<'t>,
}

impl<'t> FixedTree<'t> {
    pub(crate) fn new(src: &'t State, name: &str, header: TreeHeader) -> Result<FixedTree<'t>> {
        let Some(value_size) = header.kind.fixed_value_size() else {
            return Err(Error::WrongTreeKind {
                name: name.to_owned(),
                found: header.kind.to_string(),
                wanted: "a fixed-size tree".into(),
            });
        };
        let root = FixedRoot::Pages {
            root_page: header.root_page,
            value_size,
        };
        Ok(FixedTree { src, header, root })
    }

    /// A small tree embedded in its parent's entry.
    pub(crate) fn embedded(src: &'t State, tree: fixed::Embedded<'t>) -> FixedTree<'t> {
        FixedTree {
            src,
            header: super::read::Nested::Embedded(tree).header(),
            root: FixedRoot::Embedded(tree),
        }
    }

    /// The size of every value.
    pub fn value_size(&self) -> usize {
        value_size(&self.header)
    }

    /// A cursor over this tree.
    pub fn cursor(&self) -> super::cursor::KeyCursor<FixedTree<'t>> {
        super::cursor::KeyCursor::new(*self)
    }

    /// The value of `key`.
    ///
    /// # Errors
    /// Corruption.
    pub fn get(&self, key: u64) -> Result<Option<&'t [u8]>> {
        self.root.get(self.src, key)
    }

    /// Entries with keys in `range`, in order.
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn range(&self, range: impl RangeBounds<u64>) -> Result<crate::iter::FixedRange<'t>> {
        self.root.range(self.src, range, false)
    }

    /// Entries with keys in `range`, from the largest down.
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn range_rev(&self, range: impl RangeBounds<u64>) -> Result<crate::iter::FixedRange<'t>> {
        self.root.range(self.src, range, true)
    }

    /// The entry with the smallest key.
    ///
    /// # Errors
    /// Corruption.
    pub fn first(&self) -> Result<Option<(u64, &'t [u8])>> {
        self.range(..)?.next().transpose()
    }

    /// The entry with the largest key.
    ///
    /// # Errors
    /// Corruption.
    pub fn last(&self) -> Result<Option<(u64, &'t [u8])>> {
        self.root.last(self.src)
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.header.entry_count
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A fixed-size tree opened for writing; borrows the write transaction (or, nested, its
/// parent tree's handle).
pub struct FixedTreeMut<'t, 'env> {
    txn: &'t mut WriteTxn<'env>,
    index: usize,
}

impl<'t, 'env> FixedTreeMut<'t, 'env> {
    pub(crate) fn new(txn: &'t mut WriteTxn<'env>, index: usize) -> FixedTreeMut<'t, 'env> {
        FixedTreeMut { txn, index }
    }

    fn header(&self) -> TreeHeader {
        self.txn.trees[self.index].header
    }

    fn set_header(&mut self, header: TreeHeader) -> Result<()> {
        self.txn.set_tree_header(self.index, header)
    }

    /// The size of every value.
    pub fn value_size(&self) -> usize {
        value_size(&self.header())
    }

    /// Inserts or replaces `key`. Returns true if a value was replaced.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `value` is not the tree's value size; scratch full;
    /// corruption.
    pub fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool> {
        if value.len() != self.value_size() {
            return Err(Error::InvalidArgument(format!(
                "a value of {} bytes for a tree of {}-byte values",
                value.len(),
                self.value_size()
            )));
        }
        let value_size = self.value_size();
        if let Some(entries) = self.txn.trees[self.index].embedded.as_mut() {
            let mut entries = std::mem::take(entries);
            let replaced = embedded::insert(&mut entries, value_size, key, value);
            if entries.len() <= embedded::EMBEDDED_FIXED_MAX_BYTES {
                self.txn.store_embedded(self.index, entries)?;
            } else {
                // A spill that fails half way leaves pages no tree owns: the transaction
                // can then only be dropped.
                let spilled = self.spill(&entries);
                self.txn.fail_on_error(spilled)?;
            }
            return Ok(replaced);
        }
        let mut header = self.header();
        let mut hint = self.txn.trees[self.index].fixed_append_hint.take();
        // A split that fails half way (a leaf cut, its separator not yet in the parent)
        // leaves entries no tree reaches: the transaction can then only be dropped.
        let inserted = fixed::write::insert_hinted(self.txn, &mut header, key, value, &mut hint);
        let replaced = self.txn.fail_on_error(inserted)?;
        self.txn.trees[self.index].fixed_append_hint = hint;
        self.set_header(header)?;
        Ok(replaced)
    }

    /// Moves an embedded tree that outgrew its entry into pages of its own.
    fn spill(&mut self, entries: &[u8]) -> Result<()> {
        let value_size = self.value_size();
        let tree = embedded::Embedded::of(entries, value_size);
        let mut header = fixed::write::create(self.txn, value_size as u16)?;
        let mut hint = None;
        for i in 0..tree.len() {
            fixed::write::insert_hinted(
                self.txn,
                &mut header,
                tree.key(i),
                tree.value(i),
                &mut hint,
            )?;
        }
        self.txn.trees[self.index].embedded = None;
        self.txn.trees[self.index].fixed_append_hint = hint;
        self.txn.set_tree_header(self.index, header)
    }

    /// Moves a nested tree in pages back into its entry when it is one leaf whose entries
    /// fit in half the embedded limit.
    fn embed_again_if_small(&mut self) -> Result<()> {
        let header = self.header();
        let value_size = self.value_size();
        let fits = header.entry_count.saturating_mul(8 + value_size as u64)
            <= embedded::EMBED_AGAIN_AT_OR_BELOW_BYTES as u64;
        if !self.txn.is_nested(self.index) || !fits {
            return Ok(());
        }
        let page = crate::btree::PageStore::page(&*self.txn, header.root_page)?;
        if !fixed::validate(page, header.root_page, value_size)? {
            return Ok(()); // still a branch: leave it until it is one leaf
        }
        if fixed::count(page) as u64 != header.entry_count {
            return Err(crate::page::corrupt(
                header.root_page,
                "a one-leaf tree's count differs from its header's",
            ));
        }
        let entries = fixed::leaf_entries(page, 0..fixed::count(page), value_size);
        fixed::write::drop_tree(self.txn, &header)?;
        self.txn.trees[self.index].fixed_append_hint = None;
        self.txn.store_embedded(self.index, entries)
    }

    /// Removes `key`. Returns true if it was present.
    ///
    /// # Errors
    /// Scratch full, corruption.
    pub fn remove(&mut self, key: u64) -> Result<bool> {
        let value_size = self.value_size();
        if let Some(entries) = self.txn.trees[self.index].embedded.as_mut() {
            let mut entries = std::mem::take(entries);
            let removed = embedded::remove(&mut entries, value_size, key);
            self.txn.store_embedded(self.index, entries)?;
            return Ok(removed);
        }
        self.txn.trees[self.index].fixed_append_hint = None;
        let mut header = self.header();
        // A failure may come after pages were freed (an emptied leaf, the old root): the
        // transaction must not commit them free while the tree still names them.
        let removed = fixed::write::remove(self.txn, &mut header, key);
        let removed = self.txn.fail_on_error(removed)?;
        self.set_header(header)?;
        if removed {
            let embedded = self.embed_again_if_small();
            self.txn.fail_on_error(embedded)?;
        }
        Ok(removed)
    }

    /// Where the entries are, as this transaction sees them.
    fn root(&self) -> FixedRoot<'_> {
        let value_size = self.value_size();
        match &self.txn.trees[self.index].embedded {
            Some(entries) => FixedRoot::Embedded(embedded::Embedded::of(entries, value_size)),
            None => FixedRoot::Pages {
                root_page: self.header().root_page,
                value_size,
            },
        }
    }

    /// The value of `key` as this transaction sees it.
    ///
    /// # Errors
    /// Corruption.
    pub fn get(&self, key: u64) -> Result<Option<&[u8]>> {
        self.root().get(&*self.txn, key)
    }

    /// Entries with keys in `range`, in order, as this transaction sees them.
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn range<'s>(
        &'s self,
        range: impl RangeBounds<u64>,
    ) -> Result<crate::iter::FixedRangeMut<'s, 'env>> {
        self.root().range(&*self.txn, range, false)
    }

    /// Entries with keys in `range`, from the largest down, as this transaction sees them.
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn range_rev<'s>(
        &'s self,
        range: impl RangeBounds<u64>,
    ) -> Result<crate::iter::FixedRangeMut<'s, 'env>> {
        self.root().range(&*self.txn, range, true)
    }

    /// The entry with the smallest key.
    ///
    /// # Errors
    /// Corruption.
    pub fn first(&self) -> Result<Option<(u64, &[u8])>> {
        self.range(..)?.next().transpose()
    }

    /// The entry with the largest key.
    ///
    /// # Errors
    /// Corruption.
    pub fn last(&self) -> Result<Option<(u64, &[u8])>> {
        self.root().last(&*self.txn)
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.header().entry_count
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A cursor over this tree that can delete where it stands.
    pub fn cursor(&mut self) -> super::cursor::KeyCursor<&mut Self> {
        super::cursor::KeyCursor::new(self)
    }

    /// Removes every entry with a key in `range`. Returns how many were removed.
    ///
    /// # Errors
    /// Scratch full; corruption.
    pub fn delete_range(&mut self, range: impl RangeBounds<u64>) -> Result<u64> {
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        let mut removed = 0;
        while let Some(key) = self.range(bounds)?.next().transpose()?.map(|(k, _)| k) {
            // The range just yielded it: a miss means damage, and the key would come back
            // forever.
            if !self.remove(key)? {
                return Err(super::write::unremovable(self.txn.tree_site(self.index)));
            }
            removed += 1;
        }
        Ok(removed)
    }

    /// Keeps only the entries for which `keep(key, value)` is true. Returns how many were
    /// removed.
    ///
    /// # Errors
    /// Scratch full; corruption.
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &[u8]) -> bool) -> Result<u64> {
        let mut removed = 0;
        let mut cursor = self.cursor();
        let mut entry = cursor.first()?.map(|(k, v)| keep(k, v));
        while let Some(kept) = entry {
            if !kept && cursor.delete()? {
                removed += 1;
            }
            entry = cursor.next()?.map(|(k, v)| keep(k, v));
        }
        Ok(removed)
    }
}
