//! Tables as a transaction sees them (the layout is in `crate::table`).

use super::handle::TableHandle;
use super::state::State;
use super::write::WriteTxn;
use crate::btree::write::{self as tree_write, NewEntry};
use crate::btree::{self, PageSource, Range, TreeHeader, TreeKind};
use crate::error::{Error, Result};
use crate::fixed::{self, FixedRange};
use crate::meta::{META_PAGE_NUMBER, Meta};
use crate::multi::Values;
use crate::table::{
    self, IndexKind, Record, STATE_BYTES, Schema, TableView, index_tree_kind, keys, local_index_key,
};
use std::ops::RangeBounds;

/// A table open in a write transaction: its view, with headers not yet stored.
pub(crate) struct OpenTable {
    pub(crate) name: Box<str>,
    pub(crate) view: TableView,
    pub(crate) changed: bool,
}

fn state_bytes(view: &TableView) -> [u8; STATE_BYTES] {
    let mut out = [0u8; STATE_BYTES];
    out[..8].copy_from_slice(&view.tag.to_le_bytes());
    out[8..].copy_from_slice(&view.active_page.to_le_bytes());
    out
}

impl<'env> WriteTxn<'env> {
    /// Opens the named table, creating it with `schema` if it does not exist.
    ///
    /// # Errors
    /// [`Error::SchemaMismatch`] if it exists with another schema (see
    /// [`WriteTxn::migrate_table`]); [`Error::WrongTreeKind`] if the name (or a global
    /// index's name) holds another kind of tree; [`Error::InvalidArgument`] for a schema
    /// that cannot work; scratch full; corruption.
    pub fn open_table(&mut self, name: &str, schema: &Schema) -> Result<TableMut<'_, 'env>> {
        let index = self.table_index(name, schema, false)?;
        Ok(TableMut { txn: self, index })
    }

    /// A handle on the named table (created with `schema` if it does not exist) that does
    /// not borrow this transaction: keep it, with handles on other tables and trees, in a
    /// struct next to the transaction, and bind it for each use with
    /// [`TableHandle::table_mut`].
    ///
    /// ```
    /// use hrafn::table::Schema;
    /// let schema = Schema::new(2).primary_key(0);
    /// # let dir = tempfile::tempdir().unwrap();
    /// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    /// let mut txn = env.begin_write()?;
    /// let people = txn.table_handle("people", &schema)?;
    /// let pets = txn.table_handle("pets", &schema)?;
    /// txn.open_tree("owners")?;
    /// let owners = txn.tree_handle("owners")?;
    /// for (person, pet) in [("ada", "tabby"), ("grace", "rex")] {
    ///     let person_id = people.table_mut(&mut txn)?.insert(&[person.as_bytes(), b""])?;
    ///     let pet_id = pets.table_mut(&mut txn)?.insert(&[pet.as_bytes(), b""])?;
    ///     owners.tree_mut(&mut txn)?.insert(pet_id.to_be_bytes(), person_id.to_be_bytes())?;
    /// }
    /// txn.commit()?;
    /// let rtx = env.begin_read()?;
    /// assert_eq!(people.table(&rtx)?.len(), 2);
    /// assert_eq!(owners.tree(&rtx)?.len(), 2);
    /// # Ok::<(), hrafn::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`WriteTxn::open_table`].
    pub fn table_handle(&mut self, name: &str, schema: &Schema) -> Result<TableHandle> {
        self.table_index(name, schema, false)?;
        Ok(TableHandle::new(name, schema))
    }

    /// Opens the named table with `schema`, rebuilding its indexes if its stored schema
    /// differs: indexes no longer named are dropped, new or changed ones are built from
    /// every record. The field count cannot change.
    ///
    /// # Errors
    /// As [`WriteTxn::open_table`]; [`Error::SchemaMismatch`] for another field count.
    pub fn migrate_table(&mut self, name: &str, schema: &Schema) -> Result<TableMut<'_, 'env>> {
        let index = self.table_index(name, schema, true)?;
        Ok(TableMut { txn: self, index })
    }

    fn table_index(&mut self, name: &str, schema: &Schema, migrate: bool) -> Result<usize> {
        schema.validate()?;
        if let Some(i) = self.tables.iter().position(|t| &*t.name == name) {
            if let Some(reason) = self.tables[i].view.schema.difference(schema) {
                if !migrate {
                    return Err(Error::SchemaMismatch {
                        table: name.to_owned(),
                        reason,
                    });
                }
                self.write_back_table(i)?;
                self.tables.remove(i);
                return self.table_index(name, schema, true);
            }
            // Refresh global indexes: they may have changed through their own handles.
            for (slot, index) in schema.indexes.iter().enumerate() {
                if index.global {
                    let tree = self.global_index(index)?;
                    self.tables[i].view.indexes[slot] = tree;
                }
            }
            return Ok(i);
        }
        // A table opened as stored has nothing to write back until a change: a
        // transaction that only reads it commits without a journal record.
        let mut changed = true;
        let view = match self.find_tree_header(name)? {
            Some(header) => {
                header.expect_kind(name, TreeKind::Table)?;
                let stored = Schema::decode(
                    btree::get(&*self, header.root_page, keys::SCHEMA)?
                        .ok_or_else(|| crate::page::corrupt(header.root_page, "no schema"))?,
                    header.root_page,
                )?;
                match stored.difference(schema) {
                    None => {
                        changed = false;
                        self.load_table(header, schema)?
                    }
                    Some(reason) if !migrate || stored.field_count != schema.field_count => {
                        return Err(Error::SchemaMismatch {
                            table: name.to_owned(),
                            reason,
                        });
                    }
                    Some(_) => {
                        // Refusals first: the migration changes pages from its first step.
                        self.check_global_names(name, schema)?;
                        let migrated = self.migrate(name, header, &stored, schema);
                        self.fail_on_error(migrated)?
                    }
                }
            }
            None => {
                let view = self.create_table(name, schema)?;
                self.set_named_header(name, view.header)?;
                view
            }
        };
        self.tables.push(OpenTable {
            name: name.into(),
            view,
            changed,
        });
        Ok(self.tables.len() - 1)
    }

    fn global_index(&mut self, index: &table::IndexDef) -> Result<TreeHeader> {
        let i = self.tree_index_pub(&index.name, index_tree_kind(index.kind))?;
        Ok(self.trees[i].header)
    }

    fn load_table(&mut self, header: TreeHeader, schema: &Schema) -> Result<TableView> {
        let mut globals = Vec::new();
        for index in schema.indexes.iter().filter(|i| i.global) {
            globals.push((index.name.clone(), self.global_index(index)?));
        }
        TableView::load(&*self, header, &mut |index| {
            Ok(globals
                .iter()
                .find(|(n, _)| *n == index.name)
                .expect("every global index looked up above")
                .1)
        })
    }

    /// Refuses global index names that cannot work: the table's own, or one held by a
    /// tree of another kind.
    fn check_global_names(&mut self, name: &str, schema: &Schema) -> Result<()> {
        for index in schema.indexes.iter().filter(|i| i.global) {
            if index.name == name {
                return Err(Error::InvalidArgument(format!(
                    "global index {:?} has the name of its table",
                    index.name
                )));
            }
            if let Some(existing) = self.find_tree_header(&index.name)? {
                existing.expect_kind(&index.name, index_tree_kind(index.kind))?;
            }
        }
        Ok(())
    }

    fn create_table(&mut self, name: &str, schema: &Schema) -> Result<TableView> {
        // Refuse before allocating anything.
        self.check_global_names(name, schema)?;
        let mut header = TreeHeader {
            kind: TreeKind::Table,
            ..tree_write::create(self)?
        };
        // The tag tells this table's record pages from every other's, a table dropped and
        // made again under the same name in one transaction included: the root page is
        // one no live tree holds.
        let tag = crate::checksum::xxh3_64_with_seed(
            name.as_bytes(),
            self.txn_id ^ header.root_page.rotate_left(32),
        );
        let pages = fixed::write::create(self, 4)?;
        let candidates = fixed::write::create(self, 0)?;
        let primary_key = match schema.primary_key {
            Some(_) => Some(tree_write::create(self)?),
            None => None,
        };
        let mut indexes = Vec::new();
        for index in &schema.indexes {
            indexes.push(if index.global {
                self.global_index(index)?
            } else {
                self.new_index_tree(index.kind)?
            });
        }
        tree_write::insert(self, &mut header, keys::SCHEMA, &schema.encode())?;
        header.entry_count = 0; // a table's count is its records'
        let view = TableView {
            tag,
            active_page: 0,
            header,
            schema: schema.clone(),
            pages,
            candidates,
            primary_key,
            indexes,
        };
        let mut view = view;
        self.store_table_trees(&mut view)?;
        Ok(view)
    }

    fn new_index_tree(&mut self, kind: IndexKind) -> Result<TreeHeader> {
        match kind {
            IndexKind::Variable => Ok(TreeHeader {
                kind: TreeKind::Multi,
                ..tree_write::create(self)?
            }),
            IndexKind::Fixed => fixed::write::create(self, 8),
        }
    }

    /// Rebuilds a table's indexes for a new schema with the same fields.
    fn migrate(
        &mut self,
        name: &str,
        header: TreeHeader,
        stored: &Schema,
        schema: &Schema,
    ) -> Result<TableView> {
        let mut view = self.load_table(header, stored)?;
        // Drop every old index (global ones: remove this table's entries), then build the
        // new ones from the records.
        let records = self.unindex_globally(name, &mut view)?;
        self.store_globals(&view)?;
        // Local trees are dropped whole, as stored (nothing changed them above).
        for index in stored.indexes.iter().filter(|i| !i.global) {
            let mut table_tree = view.header;
            tree_write::remove(self, &mut table_tree, &local_index_key(&index.name))?;
            view.header.root_page = table_tree.root_page;
        }
        if stored.primary_key.is_some() {
            let mut table_tree = view.header;
            tree_write::remove(self, &mut table_tree, keys::PRIMARY_KEY)?;
            view.header.root_page = table_tree.root_page;
        }
        view.schema = schema.clone();
        view.primary_key = match schema.primary_key {
            Some(_) => Some(tree_write::create(self)?),
            None => None,
        };
        view.indexes.clear();
        for index in &schema.indexes {
            let tree = if index.global {
                self.global_index(index)?
            } else {
                self.new_index_tree(index.kind)?
            };
            view.indexes.push(tree);
        }
        let mut table_tree = view.header;
        tree_write::insert(self, &mut table_tree, keys::SCHEMA, &schema.encode())?;
        view.header.root_page = table_tree.root_page;
        for (id, fields) in &records {
            let fields: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
            table::write::reindex(self, &mut view, name, &fields, *id)?;
        }
        self.store_globals(&view)?;
        self.store_table_trees(&mut view)?;
        self.set_named_header(name, view.header)?;
        Ok(view)
    }

    /// Stores a table's state and local trees' headers in its own B+tree.
    fn store_table_trees(&mut self, view: &mut TableView) -> Result<()> {
        let entry_count = view.header.entry_count;
        let mut tree = view.header;
        tree_write::insert(self, &mut tree, keys::STATE, &state_bytes(view))?;
        let mut nested = vec![
            (keys::PAGES.to_vec(), view.pages),
            (keys::CANDIDATES.to_vec(), view.candidates),
        ];
        if let Some(pk) = view.primary_key {
            nested.push((keys::PRIMARY_KEY.to_vec(), pk));
        }
        for (index, header) in view.schema.indexes.iter().zip(&view.indexes) {
            if !index.global {
                nested.push((local_index_key(&index.name), *header));
            }
        }
        for (key, header) in nested {
            tree_write::insert_entry(
                self,
                &mut tree,
                &key,
                NewEntry::Tree(&header.encode()),
                &mut tree_write::InsertHint::default(),
            )?;
        }
        view.header = TreeHeader {
            entry_count,
            ..tree
        };
        Ok(())
    }

    /// Stores the headers of a table's global indexes as their named trees' headers.
    fn store_globals(&mut self, view: &TableView) -> Result<()> {
        for (index, header) in view.schema.indexes.iter().zip(&view.indexes) {
            if index.global {
                let i = self.tree_index_pub(&index.name, index_tree_kind(index.kind))?;
                self.set_tree_header(i, *header)?;
                // The table's changes may have split the leaf a direct insert into this
                // index left its append hint on.
                self.trees[i].fixed_append_hint = None;
            }
        }
        Ok(())
    }

    /// Stores open table `i`'s headers (before commit, or before it is reopened).
    pub(crate) fn write_back_table(&mut self, i: usize) -> Result<()> {
        if !self.tables[i].changed {
            return Ok(());
        }
        let mut view = self.tables[i].view.clone();
        self.store_table_trees(&mut view)?;
        let name = self.tables[i].name.clone();
        self.set_named_header(&name, view.header)?;
        self.tables[i].view = view;
        self.tables[i].changed = false;
        Ok(())
    }

    /// Takes every record of a table out of its global indexes; returns the records (id,
    /// fields).
    fn unindex_globally(
        &mut self,
        name: &str,
        view: &mut TableView,
    ) -> Result<Vec<(u64, Vec<Vec<u8>>)>> {
        let records: Vec<(u64, Vec<Vec<u8>>)> = view
            .scan(&*self)?
            .map(|e| e.map(|(id, r)| (id, r.fields().iter().map(|f| f.to_vec()).collect())))
            .collect::<Result<_>>()?;
        for (id, fields) in &records {
            let fields: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
            table::write::unindex(self, view, name, &fields, *id, true)?;
        }
        Ok(records)
    }

    /// Before a table is deleted: takes its records out of its global indexes (its own
    /// trees and pages go with it).
    pub(crate) fn unindex_table_globally(&mut self, name: &str, header: TreeHeader) -> Result<()> {
        let stored = Schema::decode(
            btree::get(&*self, header.root_page, keys::SCHEMA)?
                .ok_or_else(|| crate::page::corrupt(header.root_page, "no schema"))?,
            header.root_page,
        )?;
        if !stored.indexes.iter().any(|i| i.global) {
            return Ok(());
        }
        let mut view = self.load_table(header, &stored)?;
        self.unindex_globally(name, &mut view)?;
        self.store_globals(&view)
    }

    /// A table (open here, or stored) whose schema names `tree` as a global index.
    pub(crate) fn table_indexed_by(&mut self, tree: &str) -> Result<Option<String>> {
        let names_it = |schema: &Schema| schema.indexes.iter().any(|i| i.global && i.name == tree);
        if let Some(t) = self.tables.iter().find(|t| names_it(&t.view.schema)) {
            return Ok(Some(t.name.to_string()));
        }
        // Tables made or set aside in this transaction (a refused migration) may be only
        // among the open trees, not yet in the root tree.
        let mut names = super::read::list_trees_in(&*self, self.root_tree())?;
        let open: Vec<String> = self
            .open_tree_names()
            .filter(|open| !names.iter().any(|n| n == open))
            .map(str::to_owned)
            .collect();
        names.extend(open);
        for name in names {
            let Some(header) = self.find_tree_header(&name)? else {
                continue;
            };
            if header.kind != TreeKind::Table {
                continue;
            }
            let stored = btree::get(&*self, header.root_page, keys::SCHEMA)?
                .ok_or_else(|| crate::page::corrupt(header.root_page, "no schema"))?;
            if names_it(&Schema::decode(stored, header.root_page)?) {
                return Ok(Some(name));
            }
        }
        Ok(None)
    }

    /// The high-water mark as this transaction sees it.
    fn next_page_number(&self) -> u64 {
        self.meta.next_page_number
    }
}

/// A table opened in a write transaction; borrows it.
///
/// A record's id is its location: reading it is one page lookup. Ids change when records
/// move (an update that outgrows its slot, a sparse page compacted or emptied: every index
/// follows in the same transaction) and are reused after a delete, so keep a key to find a
/// record again across changes.
///
/// ```
/// use hrafn::table::{Schema, index_key};
/// # let dir = tempfile::tempdir().unwrap();
/// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
/// // (email, name, city)
/// let schema = Schema::new(3).primary_key(0).index("by-city", &[2]);
/// let mut wtx = env.begin_write()?;
/// let mut people = wtx.open_table("people", &schema)?;
/// let ada = people.insert(&[b"ada@example.com", b"Ada", b"London"])?;
/// people.insert(&[b"alan@example.com", b"Alan", b"London"])?;
/// people.insert(&[b"grace@example.com", b"Grace", b"Arlington"])?;
/// assert_eq!(people.get(ada)?.and_then(|r| r.field(1)), Some(&b"Ada"[..]));
/// wtx.commit()?;
///
/// let rtx = env.begin_read()?;
/// let people = rtx.open_table("people", &schema)?;
/// let londoners = people.index_ids("by-city", &index_key(&[b"London"]))?;
/// assert_eq!(londoners.len(), 2);
/// let (id, grace) = people.get_by_key(b"grace@example.com")?.expect("present");
/// assert_eq!(grace.field(2), Some(&b"Arlington"[..]));
/// assert_eq!(people.get(id)?, Some(grace)); // O(1): the id is the record's location
/// # Ok::<(), hrafn::Error>(())
/// ```
pub struct TableMut<'t, 'env> {
    txn: &'t mut WriteTxn<'env>,
    index: usize,
}

impl<'env> TableMut<'_, 'env> {
    fn view(&self) -> &TableView {
        &self.txn.tables[self.index].view
    }

    fn name(&self) -> String {
        self.txn.tables[self.index].name.to_string()
    }

    /// Runs a change on the table's view, then stores global index headers.
    fn change<T>(
        &mut self,
        op: impl FnOnce(&mut WriteTxn<'env>, &mut TableView, &str, u64) -> Result<T>,
    ) -> Result<T> {
        let name = self.name();
        let next_page = self.txn.next_page_number();
        let mut view = self.txn.tables[self.index].view.clone();
        let result = op(self.txn, &mut view, &name, next_page);
        // Refusals come before any change (see `table::write`); any other failure may have
        // left a half-done change, so the transaction can no longer commit.
        if let Err(e) = &result
            && !matches!(
                e,
                Error::DuplicateKey { .. }
                    | Error::InvalidArgument(_)
                    | Error::KeyTooLarge { .. }
                    | Error::ValueTooLarge { .. }
            )
        {
            self.txn.failed.get_or_insert_with(|| e.to_string());
        }
        self.txn.tables[self.index].changed = true;
        let stored = self.txn.store_globals(&view);
        self.txn.tables[self.index].view = view;
        let value = result?;
        self.txn.fail_on_error(stored)?;
        Ok(value)
    }

    /// Inserts a record (one byte string per field); returns its id.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for the wrong number of fields or a fixed-index field
    /// that is not 8 bytes; [`Error::KeyTooLarge`] for an index key past the key limit;
    /// [`Error::ValueTooLarge`] for a record whose stored form would pass
    /// [`crate::limits::VALUE_SIZE_MAX_BYTES`]; [`Error::DuplicateKey`] for a primary or
    /// fixed-index key already taken (nothing is changed); scratch full; corruption.
    pub fn insert(&mut self, fields: &[&[u8]]) -> Result<u64> {
        self.change(|txn, view, name, _| table::write::insert(txn, view, name, fields))
    }

    /// Replaces the record `id`; returns its id afterwards, which differs when it had to
    /// move (every index follows). `None` if `id` is not a record of this table.
    ///
    /// Ids are locations: any insert, update or delete may also move *other* records (a
    /// sparse page is emptied, a reuse candidate compacted), their indexes following in
    /// the same transaction. Find a record again by its primary key or an index, not by an
    /// id kept across write transactions.
    ///
    /// # Errors
    /// As [`TableMut::insert`].
    pub fn update(&mut self, id: u64, fields: &[&[u8]]) -> Result<Option<u64>> {
        self.change(|txn, view, name, next| table::write::update(txn, view, name, next, id, fields))
    }

    /// Deletes the record `id`. Returns false if it is not a record of this table.
    ///
    /// # Errors
    /// Scratch full; corruption.
    pub fn delete(&mut self, id: u64) -> Result<bool> {
        self.change(|txn, view, _, next| table::write::delete(txn, view, next, id))
    }

    /// The record `id` (O(1): the id is its location), if it is one of this table's.
    ///
    /// # Errors
    /// Corruption.
    pub fn get(&self, id: u64) -> Result<Option<Record<'_>>> {
        self.view().get(&*self.txn, self.txn.next_page_number(), id)
    }

    /// The record whose primary key is `key`, with its id.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the table has no primary key; corruption.
    pub fn get_by_key(&self, key: &[u8]) -> Result<Option<(u64, Record<'_>)>> {
        get_by_key(&*self.txn, self.view(), self.txn.next_page_number(), key)
    }

    /// The ids under `key` in index `index`, ascending (for a fixed index, `key` is the
    /// field's 8 bytes). A global index answers with the ids of every table sharing it;
    /// `get` on this table is `None` for another table's id.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown index, or a key of a fixed index that is
    /// not 8 bytes; corruption.
    pub fn index_ids(&self, index: &str, key: &[u8]) -> Result<Vec<u64>> {
        index_ids(&*self.txn, self.view(), index, key)
    }

    /// Every record in id order (physical order).
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn scan(&self) -> Result<crate::iter::TableScanMut<'_, 'env>> {
        self.view().scan(&*self.txn)
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.view().header.entry_count
    }

    /// A cursor over the records in id order that can delete where it stands. Deleting may
    /// move other records of the same page (a page emptied below 15% moves its survivors
    /// to other pages): a walk that deletes as it goes can meet such a record again under
    /// its new id, or not at all.
    pub fn cursor(&mut self) -> super::cursor::KeyCursor<&mut Self> {
        super::cursor::KeyCursor::new(self)
    }

    pub(crate) fn record_next(
        &self,
        bound: std::ops::Bound<u64>,
        reverse: bool,
    ) -> Result<Option<(u64, Record<'_>)>> {
        self.view().record_next(&*self.txn, bound, reverse)
    }

    /// Whether the table has no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn get_by_key<'a, S: PageSource<'a>>(
    src: S,
    view: &TableView,
    next_page: u64,
    key: &[u8],
) -> Result<Option<(u64, Record<'a>)>> {
    let pk = view
        .primary_key
        .ok_or_else(|| Error::InvalidArgument("the table has no primary key".into()))?;
    let Some(id) = btree::get(src, pk.root_page, key)? else {
        return Ok(None);
    };
    let id = id_of(id, pk.root_page)?;
    match view.get(src, next_page, id)? {
        Some(record) => Ok(Some((id, record))),
        None => Err(crate::page::corrupt(
            pk.root_page,
            "primary key names no record",
        )),
    }
}

fn id_of(bytes: &[u8], page_number: u64) -> Result<u64> {
    bytes
        .try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| crate::page::corrupt(page_number, "index value is not a record id"))
}

/// The kind and tree of index `name` (of `kind`, if given).
fn index_tree(
    view: &TableView,
    name: &str,
    kind: Option<IndexKind>,
) -> Result<(IndexKind, TreeHeader)> {
    view.schema
        .indexes
        .iter()
        .zip(&view.indexes)
        .find(|(i, _)| i.name == name && kind.is_none_or(|k| k == i.kind))
        .map(|(i, tree)| (i.kind, *tree))
        .ok_or_else(|| Error::InvalidArgument(format!("no index {name:?} of that kind")))
}

fn index_ids<'a, S: PageSource<'a>>(
    src: S,
    view: &TableView,
    index: &str,
    key: &[u8],
) -> Result<Vec<u64>> {
    let (kind, tree) = index_tree(view, index, None)?;
    match kind {
        IndexKind::Variable => Values::new(src, tree.root_page, key)?
            .map(|v| v.and_then(|v| id_of(v, tree.root_page)))
            .collect(),
        IndexKind::Fixed => {
            let Ok(n) = <[u8; 8]>::try_from(key) else {
                // No such key can exist: a caller passing one has a bug to hear about.
                return Err(Error::InvalidArgument(format!(
                    "index {index:?} is a fixed index: its keys are 8 bytes, not {}",
                    key.len()
                )));
            };
            match fixed::get(src, tree.root_page, 8, u64::from_be_bytes(n))? {
                Some(id) => Ok(vec![id_of(id, tree.root_page)?]),
                None => Ok(Vec::new()),
            }
        }
    }
}

/// A table in a read transaction. It holds only its own view of the table (headers and
/// schema), borrowing the transaction's pages.
pub struct Table<'t> {
    src: &'t State,
    view: TableView,
    next_page_number: u64,
}

impl<'t> Table<'t> {
    pub(crate) fn open(src: &'t State, name: &str, schema: &Schema) -> Result<Table<'t>> {
        let header = super::read::require_tree(src, name)?;
        header.expect_kind(name, TreeKind::Table)?;
        let view = TableView::load(src, header, &mut |index| {
            let tree = super::read::lookup_tree(src, &index.name)?
                .ok_or_else(|| crate::page::corrupt(header.root_page, "global index missing"))?;
            Ok(tree)
        })?;
        if let Some(reason) = view.schema.difference(schema) {
            return Err(Error::SchemaMismatch {
                table: name.to_owned(),
                reason,
            });
        }
        let meta = Meta::decode(src.page(META_PAGE_NUMBER)?)?;
        Ok(Table {
            src,
            view,
            next_page_number: meta.next_page_number,
        })
    }

    /// The record `id` (O(1): the id is its location), if it is one of this table's.
    ///
    /// # Errors
    /// Corruption.
    pub fn get(&self, id: u64) -> Result<Option<Record<'t>>> {
        self.view.get(self.src, self.next_page_number, id)
    }

    /// The record whose primary key is `key`, with its id.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the table has no primary key; corruption.
    pub fn get_by_key(&self, key: &[u8]) -> Result<Option<(u64, Record<'t>)>> {
        get_by_key(self.src, &self.view, self.next_page_number, key)
    }

    /// The ids under `key` in index `index`, ascending (for a fixed index, `key` is the
    /// field's 8 bytes). A global index answers with the ids of every table sharing it;
    /// `get` on this table is `None` for another table's id.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown index, or a key of a fixed index that is
    /// not 8 bytes; corruption.
    pub fn index_ids(&self, index: &str, key: &[u8]) -> Result<Vec<u64>> {
        index_ids(self.src, &self.view, index, key)
    }

    /// `(index key, id)` pairs of a variable index with keys in `range`, in key order, then
    /// id order (of every table sharing it, for a global index).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown or fixed index; corruption.
    pub fn index_range<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        index: &str,
        range: R,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let (_, tree) = index_tree(&self.view, index, Some(IndexKind::Variable))?;
        let (start, end) = super::read::bounds(&range);
        let mut out = Vec::new();
        for key in Range::new(self.src, tree.root_page, start, end)? {
            let (key, _) = key?;
            for id in Values::new(self.src, tree.root_page, key)? {
                out.push((key.to_vec(), id_of(id?, tree.root_page)?));
            }
        }
        Ok(out)
    }

    /// `(key, id)` pairs of a fixed index with numbers in `range`, ascending (of every
    /// table sharing it, for a global index).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown or variable index; corruption.
    pub fn fixed_index_range(
        &self,
        index: &str,
        range: impl RangeBounds<u64>,
    ) -> Result<Vec<(u64, u64)>> {
        let (_, tree) = index_tree(&self.view, index, Some(IndexKind::Fixed))?;
        FixedRange::new(self.src, tree.root_page, 8, range)?
            .map(|e| e.and_then(|(k, v)| Ok((k, id_of(v, tree.root_page)?))))
            .collect()
    }

    /// Records with primary keys in `range`, in key order: `(id, record)`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the table has no primary key; corruption.
    pub fn scan_by_key<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
    ) -> Result<Vec<(u64, Record<'t>)>> {
        let pk = self
            .view
            .primary_key
            .ok_or_else(|| Error::InvalidArgument("the table has no primary key".into()))?;
        let (start, end) = super::read::bounds(&range);
        let mut out = Vec::new();
        for entry in Range::new(self.src, pk.root_page, start, end)? {
            let id = id_of(entry?.1, pk.root_page)?;
            let record = self
                .get(id)?
                .ok_or_else(|| crate::page::corrupt(pk.root_page, "primary key names no record"))?;
            out.push((id, record));
        }
        Ok(out)
    }

    /// A cursor over the records in id order.
    pub fn cursor(&self) -> super::cursor::KeyCursor<&Table<'t>> {
        super::cursor::KeyCursor::new(self)
    }

    pub(crate) fn record_next(
        &self,
        bound: std::ops::Bound<u64>,
        reverse: bool,
    ) -> Result<Option<(u64, Record<'t>)>> {
        self.view.record_next(self.src, bound, reverse)
    }

    /// Every record in id order (physical order).
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn scan(&self) -> Result<crate::iter::TableScan<'t>> {
        self.view.scan(self.src)
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.view.header.entry_count
    }

    /// Whether the table has no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
