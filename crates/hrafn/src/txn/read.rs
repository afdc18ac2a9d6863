//! Read transactions: a registered slot plus the state they started on.

use super::handle::{TableHandle, TreeHandle};
use super::state::State;
use crate::btree::node::ValueRef;
use crate::btree::{self, PageSource, Range, TreeHeader, TreeKind};
use crate::env::EnvInner;
use crate::error::{Error, Result};
use crate::meta::{self, META_PAGE_NUMBER};
use std::ops::RangeBounds;
use std::sync::Arc;

/// A read transaction: a consistent snapshot of the environment as of its start.
///
/// It never blocks and is never blocked by writers. Slices it returns borrow from it and
/// stay valid until it drops. While it lives, pages it can see stay in scratch, so a very
/// long reader makes scratch grow (see [`crate::Stats::scratch_used_bytes`]).
pub struct ReadTxn<'env> {
    env: &'env EnvInner,
    slot: usize,
    pub(super) state: Arc<State>,
}

impl<'env> ReadTxn<'env> {
    pub(crate) fn begin(env: &'env EnvInner) -> Result<ReadTxn<'env>> {
        let (slot, state) = env.readers.register(&env.state)?;
        Ok(ReadTxn { env, slot, state })
    }

    /// The snapshot's pages.
    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// The id of the last transaction this snapshot includes.
    pub fn txn_id(&self) -> u64 {
        self.state.txn_id
    }

    /// Opens the named tree.
    ///
    /// # Errors
    /// [`Error::TreeNotFound`] if it does not exist; corruption.
    pub fn open_tree(&self, name: &str) -> Result<Tree<'_>> {
        let src: &State = &self.state;
        let header = require_tree(src, name)?;
        header.expect_kind(name, TreeKind::BTree)?;
        Ok(Tree { src, header })
    }

    /// Opens the named fixed-size tree.
    ///
    /// # Errors
    /// [`Error::TreeNotFound`] if it does not exist; [`Error::WrongTreeKind`] if it is a
    /// B+tree; corruption.
    pub fn open_fixed_tree(&self, name: &str) -> Result<super::fixed::FixedTree<'_>> {
        let src: &State = &self.state;
        super::fixed::FixedTree::new(src, name, require_tree(src, name)?)
    }

    /// Opens the named multi-value tree.
    ///
    /// # Errors
    /// [`Error::TreeNotFound`] if it does not exist; [`Error::WrongTreeKind`] if it is
    /// another kind of tree; corruption.
    pub fn open_multi_tree(&self, name: &str) -> Result<super::multi::MultiTree<'_>> {
        let src: &State = &self.state;
        super::multi::MultiTree::new(src, name, require_tree(src, name)?)
    }

    /// Opens the named table, whose stored schema must be `schema`.
    ///
    /// # Errors
    /// [`Error::TreeNotFound`] if it does not exist; [`Error::WrongTreeKind`] if the name
    /// holds a tree; [`Error::SchemaMismatch`]; corruption.
    pub fn open_table(
        &self,
        name: &str,
        schema: &crate::table::Schema,
    ) -> Result<super::table::Table<'_>> {
        super::table::Table::open(&self.state, name, schema)
    }

    /// A handle on the named tree (of any kind) that does not borrow this transaction: keep
    /// it in a struct next to the transaction and bind it for each use with
    /// [`TreeHandle::tree`] and its siblings.
    ///
    /// ```
    /// use hrafn::{ReadTxn, TreeHandle};
    /// /// A reader a program keeps around: the transaction and its trees, no borrow between.
    /// struct Lookup<'env> {
    ///     txn: ReadTxn<'env>,
    ///     users: TreeHandle,
    /// }
    /// impl Lookup<'_> {
    ///     fn name_of(&self, id: &[u8]) -> hrafn::Result<Option<Vec<u8>>> {
    ///         Ok(self.users.tree(&self.txn)?.get(id)?.map(<[u8]>::to_vec))
    ///     }
    /// }
    /// # let dir = tempfile::tempdir().unwrap();
    /// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    /// let mut wtx = env.begin_write()?;
    /// wtx.open_tree("users")?.insert(b"1", b"ada")?;
    /// wtx.commit()?;
    /// let txn = env.begin_read()?;
    /// let users = txn.tree_handle("users")?;
    /// let lookup = Lookup { txn, users };
    /// assert_eq!(lookup.name_of(b"1")?, Some(b"ada".to_vec()));
    /// # Ok::<(), hrafn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::TreeNotFound`]; corruption.
    pub fn tree_handle(&self, name: &str) -> Result<TreeHandle> {
        let header = require_tree(&*self.state, name)?;
        Ok(TreeHandle::new(name, Arc::downgrade(&self.state), header))
    }

    /// A handle on the named table, opened with `schema`, that does not borrow this
    /// transaction (see [`TableHandle`]).
    ///
    /// # Errors
    /// As [`ReadTxn::open_table`].
    pub fn table_handle(&self, name: &str, schema: &crate::table::Schema) -> Result<TableHandle> {
        self.open_table(name, schema)?;
        Ok(TableHandle::new(name, schema))
    }

    /// The stored header of the named tree: its kind and entry count.
    ///
    /// # Errors
    /// [`Error::TreeNotFound`]; corruption.
    pub fn tree_header(&self, name: &str) -> Result<TreeHeader> {
        require_tree(&*self.state, name)
    }

    /// The schema the named table was made with.
    ///
    /// # Errors
    /// [`Error::TreeNotFound`]; [`Error::WrongTreeKind`] if it is not a table; corruption.
    pub fn table_schema(&self, name: &str) -> Result<crate::table::Schema> {
        let header = require_tree(&*self.state, name)?;
        header.expect_kind(name, TreeKind::Table)?;
        let bytes = btree::get(&*self.state, header.root_page, crate::table::keys::SCHEMA)?
            .ok_or_else(|| crate::page::corrupt(header.root_page, "table schema missing"))?;
        crate::table::Schema::decode(bytes, header.root_page)
    }

    /// Names of all trees, in order.
    ///
    /// # Errors
    /// Corruption.
    pub fn list_trees(&self) -> Result<Vec<String>> {
        list_trees(&*self.state)
    }

    /// Checks the integrity of this snapshot (see [`crate::check`]).
    ///
    /// # Errors
    /// [`Error::Corruption`] describing the first problem found.
    pub fn check(&self) -> Result<crate::check::CheckReport> {
        crate::check::check(&*self.state)
    }

    /// [`ReadTxn::check`], calling `progress(pages_checked, pages_total)` as it goes (for a
    /// progress bar: a large environment takes a while).
    ///
    /// # Errors
    /// As [`ReadTxn::check`].
    pub fn check_with_progress(
        &self,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<crate::check::CheckReport> {
        crate::check::check_with_progress(&*self.state, &mut progress)
    }
}

impl Drop for ReadTxn<'_> {
    fn drop(&mut self) {
        self.env.readers.release(self.slot);
    }
}

/// Reads the root tree's root page from the meta page.
pub(crate) fn root_tree<'a, S: PageSource<'a>>(src: S) -> Result<TreeHeader> {
    let page = src.page(META_PAGE_NUMBER)?;
    let meta = meta::Meta::decode(page)?;
    Ok(TreeHeader::btree(meta.root_page, meta.tree_count))
}

/// Finds a named tree's header.
pub(crate) fn lookup_tree<'a, S: PageSource<'a>>(src: S, name: &str) -> Result<Option<TreeHeader>> {
    lookup_tree_in(src, root_tree(src)?, name)
}

/// Finds a named tree's header in the root tree `root`: a write transaction's own, whose
/// root may have moved (grown, split, collapsed) since the meta page was last written.
pub(crate) fn lookup_tree_in<'a, S: PageSource<'a>>(
    src: S,
    root: TreeHeader,
    name: &str,
) -> Result<Option<TreeHeader>> {
    if root.root_page == 0 {
        return Ok(None);
    }
    match btree::get(src, root.root_page, name.as_bytes())? {
        Some(bytes) => Ok(Some(TreeHeader::decode(bytes, root.root_page)?)),
        None => Ok(None),
    }
}

/// A named tree's header, or [`Error::TreeNotFound`].
pub(crate) fn require_tree<'a, S: PageSource<'a>>(src: S, name: &str) -> Result<TreeHeader> {
    lookup_tree(src, name)?.ok_or_else(|| Error::TreeNotFound {
        name: name.to_owned(),
    })
}

/// Names of all trees.
pub(crate) fn list_trees<'a, S: PageSource<'a>>(src: S) -> Result<Vec<String>> {
    list_trees_in(src, root_tree(src)?)
}

/// Names of all trees in the root tree `root` (see [`lookup_tree_in`]).
pub(crate) fn list_trees_in<'a, S: PageSource<'a>>(
    src: S,
    root: TreeHeader,
) -> Result<Vec<String>> {
    if root.root_page == 0 {
        return Ok(Vec::new());
    }
    let mut names = Vec::new();
    for item in Range::new(
        src,
        root.root_page,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
    )? {
        let (k, _) = item?;
        names.push(String::from_utf8_lossy(k).into_owned());
    }
    Ok(names)
}

/// A nested tree as stored: in pages (its header) or embedded in its entry.
pub(crate) enum Nested<'a> {
    Tree(TreeHeader),
    Embedded(crate::fixed::Embedded<'a>),
}

impl Nested<'_> {
    /// The tree's header (an embedded tree's has no root page).
    pub(crate) fn header(&self) -> TreeHeader {
        match self {
            Nested::Tree(header) => *header,
            Nested::Embedded(tree) => TreeHeader {
                root_page: 0,
                entry_count: tree.len() as u64,
                kind: TreeKind::Fixed {
                    value_size: tree.value_size() as u16,
                },
            },
        }
    }
}

/// The tree nested under `key` of the tree `parent`.
pub(crate) fn nested_tree<'a, S: PageSource<'a>>(
    src: S,
    parent: &TreeHeader,
    key: &[u8],
) -> Result<Nested<'a>> {
    match btree::get_stored(src, parent.root_page, key)? {
        Some(ValueRef::Tree(bytes)) => {
            Ok(Nested::Tree(TreeHeader::decode(bytes, parent.root_page)?))
        }
        Some(ValueRef::Embedded(bytes)) => Ok(Nested::Embedded(crate::fixed::Embedded::decode(
            bytes,
            parent.root_page,
        )?)),
        Some(_) => Err(Error::WrongTreeKind {
            name: String::from_utf8_lossy(key).into_owned(),
            found: "a value".into(),
            wanted: "a nested tree".into(),
        }),
        None => Err(Error::TreeNotFound {
            name: String::from_utf8_lossy(key).into_owned(),
        }),
    }
}

/// Converts a range of user keys to bounds over byte slices.
pub(crate) fn bounds<'a, K: AsRef<[u8]> + 'a, R: RangeBounds<K>>(
    range: &'a R,
) -> (std::ops::Bound<&'a [u8]>, std::ops::Bound<&'a [u8]>) {
    fn map<K: AsRef<[u8]>>(b: std::ops::Bound<&K>) -> std::ops::Bound<&[u8]> {
        use std::ops::Bound;
        match b {
            Bound::Included(k) => Bound::Included(k.as_ref()),
            Bound::Excluded(k) => Bound::Excluded(k.as_ref()),
            Bound::Unbounded => Bound::Unbounded,
        }
    }
    (map(range.start_bound()), map(range.end_bound()))
}

/// The smallest key greater than every key starting with `prefix`, if any.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A named tree in a read transaction.
pub struct Tree<'t> {
    src: &'t State,
    header: TreeHeader,
}

impl<'t> Tree<'t> {
    pub(crate) fn new(src: &'t State, header: TreeHeader) -> Tree<'t> {
        Tree { src, header }
    }

    /// Opens the B+tree nested under `key`.
    ///
    /// # Errors
    /// [`Error::TreeNotFound`] if the key is absent; [`Error::WrongTreeKind`] if it holds
    /// a value or another kind of tree; corruption.
    pub fn open_tree(&self, key: impl AsRef<[u8]>) -> Result<Tree<'t>> {
        let key = key.as_ref();
        let header = nested_tree(self.src, &self.header, key)?.header();
        header.expect_kind(&String::from_utf8_lossy(key), TreeKind::BTree)?;
        Ok(Tree {
            src: self.src,
            header,
        })
    }

    /// The kind of tree nested under `key`, if the key holds one (in pages or embedded);
    /// `None` for a value or an absent key.
    ///
    /// # Errors
    /// Corruption.
    pub fn nested_kind(&self, key: impl AsRef<[u8]>) -> Result<Option<TreeKind>> {
        // One lookup: the stored entry says whether and how a tree is nested.
        let root = self.header.root_page;
        Ok(match btree::get_stored(self.src, root, key.as_ref())? {
            Some(ValueRef::Tree(bytes)) => Some(TreeHeader::decode(bytes, root)?.kind),
            Some(ValueRef::Embedded(bytes)) => {
                let tree = crate::fixed::Embedded::decode(bytes, root)?;
                Some(Nested::Embedded(tree).header().kind)
            }
            _ => None,
        })
    }

    /// A cursor over this tree: seek, first, last, next, prev, stepping within leaves.
    pub fn cursor(&self) -> crate::iter::TreeCursor<'t> {
        btree::cursor::TreeCursor::new(self.src, self.header.root_page)
    }

    /// Opens the fixed-size tree nested under `key`.
    ///
    /// # Errors
    /// As [`Tree::open_tree`].
    pub fn open_fixed_tree(&self, key: impl AsRef<[u8]>) -> Result<super::fixed::FixedTree<'t>> {
        let key = key.as_ref();
        match nested_tree(self.src, &self.header, key)? {
            Nested::Tree(header) => {
                super::fixed::FixedTree::new(self.src, &String::from_utf8_lossy(key), header)
            }
            Nested::Embedded(tree) => Ok(super::fixed::FixedTree::embedded(self.src, tree)),
        }
    }

    /// Opens the multi-value tree nested under `key`.
    ///
    /// # Errors
    /// As [`Tree::open_tree`].
    pub fn open_multi_tree(&self, key: impl AsRef<[u8]>) -> Result<super::multi::MultiTree<'t>> {
        let key = key.as_ref();
        let header = nested_tree(self.src, &self.header, key)?.header();
        super::multi::MultiTree::new(self.src, &String::from_utf8_lossy(key), header)
    }

    /// The value of `key`, borrowed from the transaction.
    ///
    /// # Errors
    /// Corruption.
    #[inline]
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<&'t [u8]>> {
        btree::get(self.src, self.header.root_page, key.as_ref())
    }

    /// Entries with keys in `range`, in order (reversible with `.rev()`).
    ///
    /// # Errors
    /// None here: positioning waits for the first step, so corruption met then comes as
    /// an `Err` item of the iterator.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
    ) -> Result<crate::iter::TreeRange<'t>> {
        let (start, end) = bounds(&range);
        Range::new(self.src, self.header.root_page, start, end)
    }

    /// All entries in order.
    ///
    /// # Errors
    /// None here: positioning waits for the first step, so corruption met then comes as
    /// an `Err` item of the iterator.
    pub fn iter(&self) -> Result<crate::iter::TreeRange<'t>> {
        self.range::<&[u8], _>(..)
    }

    /// Entries whose keys start with `prefix`.
    ///
    /// # Errors
    /// None here: positioning waits for the first step, so corruption met then comes as
    /// an `Err` item of the iterator.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Result<crate::iter::TreeRange<'t>> {
        use std::ops::Bound;
        let prefix = prefix.as_ref();
        match prefix_end(prefix) {
            Some(end) => Range::new(
                self.src,
                self.header.root_page,
                Bound::Included(prefix),
                Bound::Excluded(&end),
            ),
            None => Range::new(
                self.src,
                self.header.root_page,
                Bound::Included(prefix),
                Bound::Unbounded,
            ),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.header.entry_count
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.header.entry_count == 0
    }
}
