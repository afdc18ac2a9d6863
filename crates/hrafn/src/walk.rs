//! Walking the whole content of an environment, and building it again: the one traversal
//! that compaction ([`crate::Environment::compact_to`]) and the command-line tool's dump
//! and load share.
//!
//! [`walk`] visits every named tree of one snapshot as a stream of [`Item`]s: each tree
//! opens with [`Item::Tree`] (or [`Item::Table`]), its entries follow, trees nested under
//! keys of a B+tree open with [`Item::Nested`] in key order among the entries, and every
//! tree and table closes with [`Item::End`]. A [`Loader`] takes the same stream and writes
//! it into an environment in bounded write transactions.
//!
//! What the stream leaves out is derived data: a table's indexes (local and global) are
//! rebuilt by inserting its records, so the named trees that serve as global indexes are
//! not walked, and record ids (locations) are not carried.
//!
//! ```
//! use hrafn::walk::{Item, Loader, RecordOrder, walk};
//! use hrafn::{Environment, Options};
//!
//! # fn main() -> hrafn::Result<()> {
//! let (a, b) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
//! let source = Environment::open(a.path(), Options::default())?;
//! let mut wtx = source.begin_write()?;
//! let mut fruit = wtx.open_tree("fruit")?;
//! fruit.insert(b"apple", b"red")?;
//! fruit.open_fixed_tree(b"weights", 4)?.insert(7, &[0, 0, 1, 44])?;
//! wtx.commit()?;
//!
//! let copy = Environment::open(b.path(), Options::default())?;
//! let mut loader = Loader::new(&copy);
//! let mut trees = 0;
//! walk(&source.begin_read()?, RecordOrder::Id, |item| {
//!     if let Item::Tree { .. } | Item::Nested { .. } = item {
//!         trees += 1;
//!     }
//!     loader.push(item)
//! })?;
//! loader.finish()?;
//! assert_eq!(trees, 2);
//! let rtx = copy.begin_read()?;
//! assert_eq!(rtx.open_tree("fruit")?.open_fixed_tree(b"weights")?.get(7)?, Some(&[0, 0, 1, 44][..]));
//! # Ok(())
//! # }
//! ```

use crate::Environment;
use crate::btree::TreeKind;
use crate::error::{Error, Result};
use crate::table::Schema;
use crate::txn::{MultiTree, ReadTxn, Tree, TreeMut, WriteTxn};
use std::collections::BTreeSet;
use std::ops::Range;

/// One step of a walk over an environment (see the [module](self) documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item<'a> {
    /// A named tree begins (a B+tree, fixed-size or multi-value tree, never a table); its
    /// entries follow, then [`Item::End`].
    Tree {
        /// The tree's name.
        name: &'a str,
        /// Its kind.
        kind: TreeKind,
    },
    /// A tree nested under `key` of the B+tree being walked begins; its entries follow,
    /// then [`Item::End`].
    Nested {
        /// The key of the enclosing B+tree that holds it.
        key: &'a [u8],
        /// Its kind (a fixed-size tree small enough to be embedded in its entry is a
        /// fixed-size tree like any other).
        kind: TreeKind,
    },
    /// An entry of the B+tree being walked, or one value of a key of the multi-value tree
    /// being walked (a key with several values comes once per value, values ascending).
    Entry {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// An entry of the fixed-size tree being walked.
    Fixed {
        /// The key.
        key: u64,
        /// The value (the tree's value size).
        value: &'a [u8],
    },
    /// A table begins; its records follow, then [`Item::End`].
    Table {
        /// The table's name.
        name: &'a str,
        /// Its schema (the names of its global indexes included).
        schema: &'a Schema,
    },
    /// A record of the table being walked.
    Record {
        /// Its fields, in order.
        fields: &'a [&'a [u8]],
    },
    /// The innermost tree or table begun ends.
    End,
}

/// In which order [`walk`] gives a table's records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RecordOrder {
    /// Id order: the physical order, the cheapest to read.
    #[default]
    Id,
    /// Primary-key order where the table has a primary key (id order otherwise): the same
    /// for two databases with the same content, whatever their record ids.
    PrimaryKey,
}

/// The names of the trees that serve some table as a global index, in `txn`.
///
/// # Errors
/// Corruption.
pub fn global_index_names(txn: &ReadTxn<'_>) -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for name in txn.list_trees()? {
        if txn.tree_header(&name)?.kind == TreeKind::Table {
            for index in txn
                .table_schema(&name)?
                .indexes()
                .iter()
                .filter(|i| i.global)
            {
                names.insert(index.name.clone());
            }
        }
    }
    Ok(names)
}

/// Visits every named tree and table of `txn`'s snapshot in name order, nested trees
/// included, as [`Item`]s (see the [module](self) documentation). Trees that serve a table
/// as a global index are left out: inserting the tables' records rebuilds them.
///
/// # Errors
/// The first error `visit` returns (the walk stops there); corruption.
pub fn walk<E: From<Error>>(
    txn: &ReadTxn<'_>,
    order: RecordOrder,
    mut visit: impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let derived = global_index_names(txn)?;
    for name in txn.list_trees()? {
        if derived.contains(&name) {
            continue;
        }
        walk_named(txn, &name, order, &mut visit)?;
    }
    Ok(())
}

/// Visits the one named tree or table `name` as [`walk`] does (a global index too, as a
/// plain tree, if asked for by name).
///
/// # Errors
/// As [`walk`]; [`Error::TreeNotFound`].
pub fn walk_named<E: From<Error>>(
    txn: &ReadTxn<'_>,
    name: &str,
    order: RecordOrder,
    visit: &mut impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let kind = txn.tree_header(name)?.kind;
    match kind {
        TreeKind::Table => return walk_table(txn, name, order, visit),
        TreeKind::Fixed { .. } => {
            visit(Item::Tree { name, kind })?;
            walk_fixed(&txn.open_fixed_tree(name)?, visit)?;
        }
        TreeKind::Multi => {
            visit(Item::Tree { name, kind })?;
            walk_multi(&txn.open_multi_tree(name)?, visit)?;
        }
        TreeKind::BTree => {
            visit(Item::Tree { name, kind })?;
            walk_btree(&txn.open_tree(name)?, visit)?;
        }
    }
    visit(Item::End)
}

fn walk_fixed<E: From<Error>>(
    tree: &crate::txn::FixedTree<'_>,
    visit: &mut impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<(), E> {
    for entry in tree.range(..)? {
        let (key, value) = entry?;
        visit(Item::Fixed { key, value })?;
    }
    Ok(())
}

fn walk_multi<E: From<Error>>(
    tree: &MultiTree<'_>,
    visit: &mut impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<(), E> {
    for key in tree.keys::<&[u8], _>(..)? {
        let key = key?;
        for value in tree.values(key)? {
            visit(Item::Entry { key, value: value? })?;
        }
    }
    Ok(())
}

fn walk_btree<E: From<Error>>(
    tree: &Tree<'_>,
    visit: &mut impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let mut entries = tree.iter()?;
    while let Some(entry) = entries.next_entry() {
        let (key, value, nested) = entry?;
        if !nested {
            visit(Item::Entry { key, value })?;
            continue;
        }
        let kind = tree
            .nested_kind(key)?
            .ok_or_else(|| crate::page::corrupt(0, "a nested tree's entry does not read as one"))?;
        visit(Item::Nested { key, kind })?;
        match kind {
            TreeKind::Fixed { .. } => walk_fixed(&tree.open_fixed_tree(key)?, visit)?,
            TreeKind::Multi => walk_multi(&tree.open_multi_tree(key)?, visit)?,
            TreeKind::BTree => walk_btree(&tree.open_tree(key)?, visit)?,
            TreeKind::Table => {
                return Err(crate::page::corrupt(0, "a table nested under a key").into());
            }
        }
        visit(Item::End)?;
    }
    Ok(())
}

fn walk_table<E: From<Error>>(
    txn: &ReadTxn<'_>,
    name: &str,
    order: RecordOrder,
    visit: &mut impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let schema = txn.table_schema(name)?;
    let table = txn.open_table(name, &schema)?;
    visit(Item::Table {
        name,
        schema: &schema,
    })?;
    if order == RecordOrder::PrimaryKey && schema.primary_key_field().is_some() {
        for (_, record) in table.scan_by_key::<&[u8], _>(..)? {
            visit(Item::Record {
                fields: &record.fields(),
            })?;
        }
    } else {
        for entry in table.scan()? {
            let (_, record) = entry?;
            visit(Item::Record {
                fields: &record.fields(),
            })?;
        }
    }
    visit(Item::End)
}

/// Counts of what a [`Loader`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadCounts {
    /// Named trees begun ([`Item::Tree`]).
    pub trees: u64,
    /// Tables begun ([`Item::Table`]).
    pub tables: u64,
    /// Nested trees begun ([`Item::Nested`]).
    pub nested_trees: u64,
    /// Entries of trees: B+tree entries, fixed-size tree entries and multi-value values.
    pub entries: u64,
    /// Table records.
    pub records: u64,
    /// Key, value and field bytes written.
    pub bytes: u64,
    /// Write transactions committed.
    pub commits: u64,
}

/// Where a [`Loader`] is: the named tree or table, then the nested keys below it.
enum Frame {
    Tree { key: Vec<u8>, kind: TreeKind },
    Table { name: String, schema: Schema },
}

impl Frame {
    fn kind(&self) -> TreeKind {
        match self {
            Frame::Tree { kind, .. } => *kind,
            Frame::Table { .. } => TreeKind::Table,
        }
    }
}

/// One buffered change of the innermost tree or table.
enum Change {
    Entry {
        key: Range<usize>,
        value: Range<usize>,
    },
    Fixed {
        key: u64,
        value: Range<usize>,
    },
    /// Fields: a range of [`Pending::fields`].
    Record {
        fields: Range<usize>,
    },
}

/// Changes waiting to be applied to the innermost tree or table, their bytes in one buffer.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    fields: Vec<Range<usize>>,
    changes: Vec<Change>,
}

impl Pending {
    fn keep(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        start..self.bytes.len()
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.fields.clear();
        self.changes.clear();
    }
}

/// Changes buffered before they are applied (one opening of the tree's path for all).
const PENDING_BYTES_MAX: usize = 1 << 20;
/// Bytes of changes a write transaction of a [`Loader`] takes by default before it commits.
pub const LOADER_TRANSACTION_BYTES: u64 = 16 << 20;
/// Bytes a change is counted for besides its keys and values (entry headers, index
/// entries), so that a transaction of many tiny changes is bounded too.
const CHANGE_OVERHEAD_BYTES: u64 = 32;

/// Writes a stream of [`Item`]s (from [`walk`], or parsed from a dump) into an
/// environment, in write transactions bounded by [`Loader::transaction_bytes`], so a
/// large stream never needs one transaction's scratch for all of it. Trees and tables
/// that exist already are added to. Tables rebuild their indexes, global ones included,
/// as their records are inserted.
///
/// Nothing written is visible to readers until a transaction commits; a failed load leaves
/// whatever earlier transactions committed.
pub struct Loader<'env> {
    env: &'env Environment,
    txn: Option<WriteTxn<'env>>,
    path: Vec<Frame>,
    /// How many frames of `path` (from the outside in) exist in the target already.
    made: usize,
    pending: Pending,
    transaction_bytes: u64,
    txn_bytes: u64,
    counts: LoadCounts,
}

impl<'env> Loader<'env> {
    /// A loader into `env`, committing about every [`LOADER_TRANSACTION_BYTES`].
    pub fn new(env: &'env Environment) -> Loader<'env> {
        Loader {
            env,
            txn: None,
            path: Vec::new(),
            made: 0,
            pending: Pending::default(),
            transaction_bytes: LOADER_TRANSACTION_BYTES,
            txn_bytes: 0,
            counts: LoadCounts::default(),
        }
    }

    /// Commits once a transaction has taken about `bytes` of changes (keys, values and
    /// fields, plus a small allowance per change) or changed that many bytes of pages.
    pub fn transaction_bytes(mut self, bytes: u64) -> Loader<'env> {
        self.transaction_bytes = bytes.max(1);
        self
    }

    /// What has been pushed so far (changes still buffered included).
    pub fn counts(&self) -> LoadCounts {
        self.counts
    }

    /// The kind of the innermost tree or table begun and not ended
    /// ([`TreeKind::Table`] for a table); `None` outside any.
    pub fn current_kind(&self) -> Option<TreeKind> {
        self.path.last().map(Frame::kind)
    }

    /// Takes the next item of the stream.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an item that cannot come where it does (an entry
    /// outside a tree, a tree nested in anything but a B+tree, a fixed-size entry of the
    /// wrong value size, an `End` with nothing open); errors of the writes (a key too
    /// large, a duplicate primary key, [`Error::WrongTreeKind`] where the target holds
    /// another kind of tree under the name, scratch full). After an error the loader must
    /// be dropped.
    pub fn push(&mut self, item: Item<'_>) -> Result<()> {
        match item {
            Item::Tree { name, kind } => {
                if !self.path.is_empty() {
                    return Err(misplaced("a named tree begins inside another tree"));
                }
                if kind == TreeKind::Table {
                    return Err(misplaced("a table begins as a tree, without its schema"));
                }
                self.path.push(Frame::Tree {
                    key: name.as_bytes().to_vec(),
                    kind,
                });
                self.counts.trees += 1;
            }
            Item::Table { name, schema } => {
                if !self.path.is_empty() {
                    return Err(misplaced("a table begins inside a tree"));
                }
                schema.validate()?;
                self.path.push(Frame::Table {
                    name: name.to_owned(),
                    schema: schema.clone(),
                });
                self.counts.tables += 1;
            }
            Item::Nested { key, kind } => {
                if self.current_kind() != Some(TreeKind::BTree) {
                    return Err(misplaced("a nested tree outside a B+tree"));
                }
                if kind == TreeKind::Table {
                    return Err(misplaced("a table nested under a key"));
                }
                // The entries so far belong to the enclosing tree.
                self.apply()?;
                self.path.push(Frame::Tree {
                    key: key.to_vec(),
                    kind,
                });
                self.counts.nested_trees += 1;
            }
            Item::Entry { key, value } => {
                if !matches!(self.current_kind(), Some(TreeKind::BTree | TreeKind::Multi)) {
                    return Err(misplaced("an entry outside a B+tree or multi-value tree"));
                }
                let key = self.pending.keep(key);
                let value = self.pending.keep(value);
                self.pending.changes.push(Change::Entry { key, value });
                self.counts.entries += 1;
            }
            Item::Fixed { key, value } => {
                let Some(TreeKind::Fixed { value_size }) = self.current_kind() else {
                    return Err(misplaced("a fixed-size entry outside a fixed-size tree"));
                };
                if value.len() != usize::from(value_size) {
                    return Err(Error::InvalidArgument(format!(
                        "a value of {} bytes for a fixed-size tree of {value_size}-byte values",
                        value.len()
                    )));
                }
                let value = self.pending.keep(value);
                self.pending.changes.push(Change::Fixed { key, value });
                self.counts.entries += 1;
            }
            Item::Record { fields } => {
                if self.current_kind() != Some(TreeKind::Table) {
                    return Err(misplaced("a record outside a table"));
                }
                let start = self.pending.fields.len();
                for field in fields {
                    let range = self.pending.keep(field);
                    self.pending.fields.push(range);
                }
                let fields = start..self.pending.fields.len();
                self.pending.changes.push(Change::Record { fields });
                self.counts.records += 1;
            }
            Item::End => {
                if self.path.is_empty() {
                    return Err(misplaced("an end with no tree or table begun"));
                }
                self.apply()?;
                self.path.pop();
                self.made = self.made.min(self.path.len());
            }
        }
        if self.pending.bytes.len() >= PENDING_BYTES_MAX {
            self.apply()?;
        }
        Ok(())
    }

    /// Applies the buffered changes and commits what the last transaction holds.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if a tree or table was begun and not ended; errors of
    /// the writes and of the commit.
    pub fn finish(mut self) -> Result<LoadCounts> {
        if !self.path.is_empty() {
            return Err(misplaced("the stream ends inside a tree or table"));
        }
        if let Some(txn) = self.txn.take() {
            txn.commit()?;
            self.counts.commits += 1;
        }
        Ok(self.counts)
    }

    /// Applies the buffered changes to the innermost tree or table (making every tree of
    /// the path that does not exist yet), and commits once the transaction is big enough.
    fn apply(&mut self) -> Result<()> {
        if self.pending.changes.is_empty() && self.made == self.path.len() {
            return Ok(());
        }
        let txn = match self.txn.take() {
            Some(txn) => txn,
            None => self.env.begin_write()?,
        };
        let txn = self.txn.insert(txn);
        apply_path(txn, &self.path, &self.pending)?;
        self.made = self.path.len();
        let changes = self.pending.changes.len() as u64;
        let bytes = self.pending.bytes.len() as u64;
        self.counts.bytes += bytes;
        // Sized by the pages changed too: a small nested tree loads a few bytes but takes
        // a page of its own, and thousands of them would pass the scratch limit at once.
        self.txn_bytes = (self.txn_bytes + bytes + changes * CHANGE_OVERHEAD_BYTES)
            .max(txn.dirty_size_bytes() as u64);
        self.pending.clear();
        if self.txn_bytes >= self.transaction_bytes
            && let Some(txn) = self.txn.take()
        {
            txn.commit()?;
            self.counts.commits += 1;
            self.txn_bytes = 0;
        }
        Ok(())
    }
}

fn misplaced(what: &str) -> Error {
    Error::InvalidArgument(format!("cannot load {what}"))
}

/// Opens (making if needed) the innermost tree or table of `path` and applies `pending`.
fn apply_path(txn: &mut WriteTxn<'_>, path: &[Frame], pending: &Pending) -> Result<()> {
    let Some((first, rest)) = path.split_first() else {
        return Ok(());
    };
    match first {
        Frame::Table { name, schema } => {
            let mut table = txn.open_table(name, schema)?;
            let mut fields: Vec<&[u8]> = Vec::new();
            for change in &pending.changes {
                if let Change::Record { fields: range } = change {
                    fields.clear();
                    fields.extend(
                        pending.fields[range.clone()]
                            .iter()
                            .map(|f| &pending.bytes[f.clone()]),
                    );
                    table.insert(&fields)?;
                }
            }
            Ok(())
        }
        Frame::Tree { key, kind } => {
            let name = std::str::from_utf8(key)
                .map_err(|_| Error::InvalidArgument("a tree name that is not UTF-8".into()))?;
            match *kind {
                TreeKind::BTree => apply_in(&mut txn.open_tree(name)?, rest, pending),
                TreeKind::Fixed { value_size } => {
                    let mut tree = txn.open_fixed_tree(name, usize::from(value_size))?;
                    for change in &pending.changes {
                        if let Change::Fixed { key, value } = change {
                            tree.insert(*key, &pending.bytes[value.clone()])?;
                        }
                    }
                    Ok(())
                }
                TreeKind::Multi => {
                    let mut tree = txn.open_multi_tree(name)?;
                    for change in &pending.changes {
                        if let Change::Entry { key, value } = change {
                            tree.add(&pending.bytes[key.clone()], &pending.bytes[value.clone()])?;
                        }
                    }
                    Ok(())
                }
                TreeKind::Table => Err(misplaced("a table begun as a tree")),
            }
        }
    }
}

/// Goes down the nested keys of `rest` from `tree` and applies `pending` to the last.
fn apply_in(tree: &mut TreeMut<'_, '_>, rest: &[Frame], pending: &Pending) -> Result<()> {
    let Some((Frame::Tree { key, kind }, rest)) = rest.split_first() else {
        for change in &pending.changes {
            if let Change::Entry { key, value } = change {
                tree.insert(&pending.bytes[key.clone()], &pending.bytes[value.clone()])?;
            }
        }
        return Ok(());
    };
    match *kind {
        TreeKind::BTree => apply_in(&mut tree.open_tree(key)?, rest, pending),
        TreeKind::Fixed { value_size } => {
            let mut nested = tree.open_fixed_tree(key, usize::from(value_size))?;
            for change in &pending.changes {
                if let Change::Fixed { key, value } = change {
                    nested.insert(*key, &pending.bytes[value.clone()])?;
                }
            }
            Ok(())
        }
        TreeKind::Multi => {
            let mut nested = tree.open_multi_tree(key)?;
            for change in &pending.changes {
                if let Change::Entry { key, value } = change {
                    nested.add(&pending.bytes[key.clone()], &pending.bytes[value.clone()])?;
                }
            }
            Ok(())
        }
        TreeKind::Table => Err(misplaced("a table nested under a key")),
    }
}
