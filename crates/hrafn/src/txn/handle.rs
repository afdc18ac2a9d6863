//! Handles: named trees and tables that do not borrow a transaction.
//!
//! A handle is a name (and, for a table, its schema) plus what it last saw. A program
//! keeps any number of them in a struct next to its transaction, read or write, and binds
//! one for each use (`handle.tree(&rtx)`, `handle.tree_mut(&mut wtx)`), as LMDB's database
//! handles and heed's `Database` are used. Binding never copies data: for a read
//! transaction of the same commit it costs nothing, otherwise one lookup by name.

use super::read::{ReadTxn, Tree, require_tree};
use super::state::State;
use super::table::{Table, TableMut};
use super::write::{TreeMut, WriteTxn};
use super::{FixedTree, FixedTreeMut, MultiTree, MultiTreeMut};
use crate::btree::{TreeHeader, TreeKind};
use crate::error::Result;
use crate::table::Schema;
use std::sync::{Arc, Weak};

/// A named tree, not borrowing any transaction (see [`ReadTxn::tree_handle`] and
/// [`WriteTxn::tree_handle`]). Bind it to a read transaction with [`TreeHandle::tree`] and
/// its siblings, to the write transaction with [`TreeHandle::tree_mut`] and its siblings.
///
/// A handle borrows nothing, so it can live in a struct beside the transaction it is bound
/// to, with no lifetime tying the two:
///
/// ```
/// use hrafn::{ReadTxn, TreeHandle};
///
/// struct Catalog<'env> {
///     rtx: ReadTxn<'env>,
///     prices: TreeHandle,
/// }
///
/// impl Catalog<'_> {
///     fn price(&self, item: &str) -> hrafn::Result<Option<u64>> {
///         let prices = self.prices.tree(&self.rtx)?;
///         Ok(prices
///             .get(item.as_bytes())?
///             .map(|v| u64::from_be_bytes(v.try_into().expect("8 bytes"))))
///     }
/// }
///
/// # let dir = tempfile::tempdir().unwrap();
/// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
/// let mut wtx = env.begin_write()?;
/// wtx.open_tree("prices")?.insert(b"tea", 4u64.to_be_bytes())?;
/// wtx.commit()?;
///
/// let rtx = env.begin_read()?;
/// let prices = rtx.tree_handle("prices")?;
/// let catalog = Catalog { rtx, prices };
/// assert_eq!(catalog.price("tea")?, Some(4));
/// assert_eq!(catalog.price("coffee")?, None);
/// # Ok::<(), hrafn::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TreeHandle {
    name: Arc<str>,
    /// The snapshot the header belongs to (none for a handle made in a write
    /// transaction). A weak reference keeps its allocation (not its pages), so no other
    /// snapshot can later have the same address.
    state: Weak<State>,
    header: TreeHeader,
}

impl TreeHandle {
    pub(super) fn new(name: &str, state: Weak<State>, header: TreeHeader) -> TreeHandle {
        TreeHandle {
            name: name.into(),
            state,
            header,
        }
    }

    fn header_in(&self, txn: &ReadTxn<'_>) -> Result<TreeHeader> {
        if std::ptr::eq(self.state.as_ptr(), Arc::as_ptr(&txn.state)) {
            return Ok(self.header);
        }
        require_tree(&*txn.state, &self.name)
    }

    /// The tree's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The B+tree as `txn` sees it.
    ///
    /// # Errors
    /// [`crate::Error::TreeNotFound`] if `txn` does not have it; [`crate::Error::WrongTreeKind`];
    /// corruption.
    pub fn tree<'t>(&self, txn: &'t ReadTxn<'_>) -> Result<Tree<'t>> {
        let header = self.header_in(txn)?;
        header.expect_kind(&self.name, TreeKind::BTree)?;
        Ok(Tree::new(&txn.state, header))
    }

    /// The fixed-size tree as `txn` sees it.
    ///
    /// # Errors
    /// As [`TreeHandle::tree`].
    pub fn fixed_tree<'t>(&self, txn: &'t ReadTxn<'_>) -> Result<FixedTree<'t>> {
        let header = self.header_in(txn)?;
        FixedTree::new(&txn.state, &self.name, header)
    }

    /// The multi-value tree as `txn` sees it.
    ///
    /// # Errors
    /// As [`TreeHandle::tree`].
    pub fn multi_tree<'t>(&self, txn: &'t ReadTxn<'_>) -> Result<MultiTree<'t>> {
        let header = self.header_in(txn)?;
        MultiTree::new(&txn.state, &self.name, header)
    }

    /// The B+tree in the write transaction `txn`, for one use: the handle stays free, so
    /// other handles bind in turn.
    ///
    /// # Errors
    /// [`crate::Error::TreeNotFound`] if `txn` does not have it (deleted since);
    /// [`crate::Error::WrongTreeKind`]; corruption.
    pub fn tree_mut<'t, 'env>(&self, txn: &'t mut WriteTxn<'env>) -> Result<TreeMut<'t, 'env>> {
        let index = txn.existing_tree(&self.name, |kind| kind == TreeKind::BTree, "a B+tree")?;
        Ok(TreeMut::new(txn, index))
    }

    /// The fixed-size tree in the write transaction `txn`.
    ///
    /// # Errors
    /// As [`TreeHandle::tree_mut`].
    pub fn fixed_tree_mut<'t, 'env>(
        &self,
        txn: &'t mut WriteTxn<'env>,
    ) -> Result<FixedTreeMut<'t, 'env>> {
        let index = txn.existing_tree(
            &self.name,
            |kind| kind.fixed_value_size().is_some(),
            "a fixed-size tree",
        )?;
        Ok(FixedTreeMut::new(txn, index))
    }

    /// The multi-value tree in the write transaction `txn`.
    ///
    /// # Errors
    /// As [`TreeHandle::tree_mut`].
    pub fn multi_tree_mut<'t, 'env>(
        &self,
        txn: &'t mut WriteTxn<'env>,
    ) -> Result<MultiTreeMut<'t, 'env>> {
        let index = txn.existing_tree(
            &self.name,
            |kind| kind == TreeKind::Multi,
            "a multi-value tree",
        )?;
        Ok(MultiTreeMut::new(txn, index))
    }
}

/// A table, not borrowing any transaction (see [`ReadTxn::table_handle`] and
/// [`WriteTxn::table_handle`]): its name and schema. Bind it with [`TableHandle::table`] or
/// [`TableHandle::table_mut`].
#[derive(Clone, Debug)]
pub struct TableHandle {
    name: Arc<str>,
    schema: Arc<Schema>,
}

impl TableHandle {
    pub(super) fn new(name: &str, schema: &Schema) -> TableHandle {
        TableHandle {
            name: name.into(),
            schema: Arc::new(schema.clone()),
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema the handle opens the table with.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The table as the read transaction `txn` sees it.
    ///
    /// # Errors
    /// As [`ReadTxn::open_table`].
    pub fn table<'t>(&self, txn: &'t ReadTxn<'_>) -> Result<Table<'t>> {
        txn.open_table(&self.name, &self.schema)
    }

    /// The table in the write transaction `txn`, for one use: the handle stays free, so
    /// other handles bind in turn. A table already open in `txn` is found without a
    /// lookup in the pages.
    ///
    /// # Errors
    /// As [`WriteTxn::open_table`].
    pub fn table_mut<'t, 'env>(&self, txn: &'t mut WriteTxn<'env>) -> Result<TableMut<'t, 'env>> {
        txn.open_table(&self.name, &self.schema)
    }
}
