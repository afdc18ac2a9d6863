//! The write transaction: copy-on-write into scratch, commit through the journal, publish.

use super::commit::{Prepared, with_pages};
use super::handle::TreeHandle;
use super::read::{bounds, list_trees_in, lookup_tree_in, prefix_end};
use super::state::State;
use crate::btree::node::ValueRef;
use crate::btree::write::NewEntry;
use crate::btree::{self, PageSource, PageStore, Range, TreeHeader, TreeKind, write as tree_write};
use crate::env::EnvInner;
use crate::error::{Error, Result};
use crate::journal::diff::encode_page;
use crate::journal::record::RecordHeader;
use crate::journal::writer::RecordBuf;
use crate::limits::{KEY_SIZE_MAX_BYTES, PAGE_SIZE_BYTES, VALUE_SIZE_MAX_BYTES};
use crate::meta::{META_PAGE_NUMBER, Meta};
use crate::page::{PageKind, init, seal, span_pages};
use crate::scratch::PageBuf;
use parking_lot::MutexGuard;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::RangeBounds;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Hasher for page numbers: one multiply, no per-lookup state (page numbers are not
/// attacker-chosen keys).
#[derive(Default)]
pub struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

type DirtyMap = HashMap<u64, PageBuf, BuildHasherDefault<PageHasher>>;

/// State the single writer keeps between transactions (guarded by the write lock).
pub struct WriterCore {
    pub(crate) last_txn_id: u64,
    /// Free pages in the free-space map.
    pub(crate) free_pages: u64,
}

impl WriterCore {
    /// Sums the free counts of the free-space directory (one page read per 510 sections).
    pub(crate) fn new(last_txn_id: u64, state: &State, meta: &Meta) -> Result<WriterCore> {
        use crate::freespace::{locate_section, read_entry};
        let mut free_pages = 0;
        for section in 0..meta.section_count {
            let (directory, entry) = locate_section(section);
            let directory_page = meta.directories[directory];
            let page = state.page(directory_page)?;
            free_pages += u64::from(
                read_entry(page, directory_page, entry, meta.next_page_number)?.free_pages,
            );
        }
        Ok(WriterCore {
            last_txn_id,
            free_pages,
        })
    }
}

/// A tree being written: a named tree, or a nested one under a key of an open tree.
pub(crate) struct OpenTree {
    name: Box<str>,
    /// For a nested tree, its parent (an index into the open trees) and key. A nested
    /// tree's header is written through to its parent's entry on every change, so it
    /// never waits for commit and is forgotten once its handle ends (see
    /// [`WriteTxn::forget_nested_after`]).
    parent: Option<(usize, Box<[u8]>)>,
    pub(crate) header: TreeHeader,
    pub(crate) changed: bool,
    /// Where sequential inserts can go without a descent; dropped by any other change.
    insert_hint: tree_write::InsertHint,
    /// The same for a fixed-size tree.
    pub(crate) fixed_append_hint: Option<crate::fixed::write::AppendHint>,
    /// A nested fixed-size tree embedded in its parent's entry: its entries (the header's
    /// root page is then 0).
    pub(crate) embedded: Option<Vec<u8>>,
}

/// The write transaction. Only one exists at a time; [`crate::Environment::begin_write`]
/// waits for the previous one to end. Dropping it without [`WriteTxn::commit`] aborts.
pub struct WriteTxn<'env> {
    pub(crate) env: &'env EnvInner,
    pub(crate) core: WriterGuard<'env>,
    pub(crate) base: Arc<State>,
    pub(crate) txn_id: u64,
    pub(crate) dirty: DirtyMap,
    /// Scratch bytes of this transaction's own page copies.
    dirty_size_bytes: u64,
    pub(crate) meta: Meta,
    meta_at_begin: Meta,
    pub(crate) trees: Vec<OpenTree>,
    pub(crate) tables: Vec<super::table::OpenTable>,
    /// Why the transaction can no longer commit: an operation failed after changing pages.
    pub(crate) failed: Option<String>,
    pub(crate) freed: Vec<(u64, u64)>,
    pub(crate) free_pages: u64,
    /// The page last changed or allocated: allocation looks for free pages near it.
    pub(crate) near_page: u64,
    /// Whether commit waits for the journal record to be on disk.
    durability: crate::Durability,
    /// Bitmap pages searched by allocations so far (tests check allocation cost with it).
    #[cfg(test)]
    pub(crate) bitmaps_searched: u32,
}

/// A number naming the calling thread, never 0.
pub(crate) fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TOKEN.with(|t| *t)
}

/// The writer's lock, held by a write transaction, with the thread holding it noted so
/// that the same thread asking for it again gets an error instead of waiting on itself.
pub(crate) struct WriterGuard<'env> {
    guard: MutexGuard<'env, WriterCore>,
    holder: &'env AtomicU64,
}

impl<'env> WriterGuard<'env> {
    /// Takes the writer's lock, waiting for another thread's transaction to end.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when this thread holds it already (a second write
    /// transaction, or a merged write or backup asked for while one is open).
    pub(crate) fn lock(env: &'env EnvInner) -> Result<WriterGuard<'env>> {
        refuse_if_writing(env)?;
        let guard = env.writer.lock();
        env.writer_holder.store(thread_token(), Ordering::Relaxed);
        Ok(WriterGuard {
            guard,
            holder: &env.writer_holder,
        })
    }
}

/// [`Error::InvalidArgument`] when the calling thread holds `env`'s write transaction:
/// what it asks for would wait for that transaction to end. Only this thread stores its
/// own token, so the check is exact for it whatever other threads do.
pub(crate) fn refuse_if_writing(env: &EnvInner) -> Result<()> {
    if env.writer_holder.load(Ordering::Relaxed) == thread_token() {
        return Err(Error::InvalidArgument(
            "this thread holds the environment's write transaction: a second one, a merged \
             write or a backup would wait for it forever"
                .into(),
        ));
    }
    Ok(())
}

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        self.holder.store(0, Ordering::Relaxed); // before the lock is released
    }
}

impl std::ops::Deref for WriterGuard<'_> {
    type Target = WriterCore;
    fn deref(&self) -> &WriterCore {
        &self.guard
    }
}

impl std::ops::DerefMut for WriterGuard<'_> {
    fn deref_mut(&mut self) -> &mut WriterCore {
        &mut self.guard
    }
}

impl<'env> WriteTxn<'env> {
    pub(crate) fn begin(env: &'env EnvInner) -> Result<WriteTxn<'env>> {
        env.check_writable()?;
        env.check_poison()?;
        let core = WriterGuard::lock(env)?;
        env.check_poison()?;
        // A prepared transaction whose record is still being written is newer than the
        // published state: build on it (its pages reach readers only at its publish).
        // The published state is loaded under the pending lock: a publish stores the new
        // state before it clears the pending one, so the two are never both stale.
        // The writer takes no reader slot (so readers can never block it): the flusher
        // writes to the data file only versions at or below the published state, and the
        // writer's base is that state or newer, holding in its own PTT every version the
        // data file lacks, so nothing the writer reads from the data file can change.
        let pending = env.pending_state.lock();
        let published = env.state.load_full();
        let base = match &*pending {
            Some(pending) if pending.txn_id > published.txn_id => {
                env.counters
                    .pipelined_commits
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Arc::clone(pending)
            }
            _ => published,
        };
        drop(pending);
        let meta = (&*base).page(META_PAGE_NUMBER).and_then(Meta::decode)?;
        // Building on an older state would silently drop the commits in between.
        assert_eq!(
            base.txn_id, core.last_txn_id,
            "the writer sees the last commit"
        );
        Ok(WriteTxn {
            env,
            txn_id: core.last_txn_id + 1,
            free_pages: core.free_pages,
            near_page: 0,
            durability: env.options.durability,
            #[cfg(test)]
            bitmaps_searched: 0,
            core,
            base,
            dirty: DirtyMap::default(),
            dirty_size_bytes: 0,
            meta_at_begin: meta.clone(),
            meta,
            trees: Vec::new(),
            tables: Vec::new(),
            failed: None,
            freed: Vec::new(),
        })
    }

    /// The id this transaction commits as.
    pub fn txn_id(&self) -> u64 {
        self.txn_id
    }

    /// Opens the named tree, creating it if it does not exist.
    ///
    /// # Errors
    /// [`Error::KeyTooLarge`] for a name over the key limit; corruption; scratch full.
    pub fn open_tree(&mut self, name: &str) -> Result<TreeMut<'_, 'env>> {
        let index = self.tree_index(name, TreeKind::BTree)?;
        Ok(TreeMut { txn: self, index })
    }

    /// Opens the named fixed-size tree (`u64` keys, values of `value_size` bytes), creating
    /// it if it does not exist.
    ///
    /// # Errors
    /// [`Error::WrongTreeKind`] if the name holds another kind of tree or another value
    /// size; [`Error::ValueTooLarge`] past [`crate::fixed::FIXED_VALUE_SIZE_MAX_BYTES`];
    /// corruption; scratch full.
    pub fn open_fixed_tree(
        &mut self,
        name: &str,
        value_size: usize,
    ) -> Result<super::fixed::FixedTreeMut<'_, 'env>> {
        let kind = fixed_kind(value_size)?;
        let index = self.tree_index(name, kind)?;
        Ok(super::fixed::FixedTreeMut::new(self, index))
    }

    /// Opens the named multi-value tree, creating it if it does not exist.
    ///
    /// # Errors
    /// [`Error::WrongTreeKind`] if the name holds another kind of tree; corruption;
    /// scratch full.
    pub fn open_multi_tree(&mut self, name: &str) -> Result<super::multi::MultiTreeMut<'_, 'env>> {
        let index = self.tree_index(name, TreeKind::Multi)?;
        Ok(super::multi::MultiTreeMut::new(self, index))
    }

    /// Deletes the named tree and frees its pages. Returns false if it did not exist.
    ///
    /// # Errors
    /// Corruption; scratch full.
    pub fn delete_tree(&mut self, name: &str) -> Result<bool> {
        // No handle is live: every nested tree is forgotten, so none refers to a position
        // the removal shifts.
        self.trees.retain(|t| t.parent.is_none());
        if let Some(i) = self.tables.iter().position(|t| &*t.name == name) {
            self.write_back_table(i)?;
            self.tables.remove(i);
        }
        let Some(index) = self.find_tree(name)? else {
            return Ok(false);
        };
        if self.trees[index].header.kind == TreeKind::Table {
            let header = self.trees[index].header;
            // From here on a failure may leave global indexes half cleaned.
            let unindexed = self.unindex_table_globally(name, header);
            self.fail_on_error(unindexed)?;
        } else if let Some(table) = self.table_indexed_by(name)? {
            return Err(Error::InvalidArgument(format!(
                "tree {name:?} is a global index of table {table:?}: delete or migrate the \
                 table first"
            )));
        }
        let index = self.find_tree(name)?.expect("found above");
        let tree = self.trees.remove(index);
        // The tree is out of the open list: a failure past here must fail the transaction.
        let dropped = tree_write::drop_tree(self, &tree.header);
        self.fail_on_error(dropped)?;
        if self.meta.root_page == 0 {
            return Ok(true); // created and deleted in this transaction
        }
        let mut root = self.root_tree();
        let removed = tree_write::remove(self, &mut root, name.as_bytes());
        self.fail_on_error(removed)?;
        self.meta.root_page = root.root_page;
        self.meta.tree_count = root.entry_count;
        Ok(true)
    }

    /// A handle on the named tree (of any kind, made by an `open_*` call in this
    /// transaction or an earlier one) that does not borrow this transaction: keep several
    /// in a struct next to it and bind each for one use with [`TreeHandle::tree_mut`] and
    /// its siblings.
    ///
    /// ```
    /// use hrafn::{TreeHandle, WriteTxn};
    /// /// A writer a program keeps around: the transaction and its trees, no borrow between.
    /// struct Ingest<'env> {
    ///     txn: WriteTxn<'env>,
    ///     names: TreeHandle,
    ///     readings: TreeHandle,
    /// }
    /// impl Ingest<'_> {
    ///     fn record(&mut self, sensor: u64, name: &str, at_ms: u64, value: f64) -> hrafn::Result<()> {
    ///         self.names.tree_mut(&mut self.txn)?.insert(sensor.to_be_bytes(), name)?;
    ///         let mut readings = self.readings.tree_mut(&mut self.txn)?;
    ///         readings
    ///             .open_fixed_tree(sensor.to_be_bytes(), 8)?
    ///             .insert(at_ms, &value.to_le_bytes())?;
    ///         Ok(())
    ///     }
    /// }
    /// # let dir = tempfile::tempdir().unwrap();
    /// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    /// let mut txn = env.begin_write()?;
    /// txn.open_tree("names")?;
    /// txn.open_tree("readings")?;
    /// let names = txn.tree_handle("names")?;
    /// let readings = txn.tree_handle("readings")?;
    /// let mut ingest = Ingest { txn, names, readings };
    /// ingest.record(7, "boiler", 1_000, 71.5)?;
    /// ingest.record(7, "boiler", 2_000, 72.0)?;
    /// ingest.txn.commit()?;
    /// let rtx = env.begin_read()?;
    /// assert_eq!(rtx.open_tree("readings")?.open_fixed_tree(7u64.to_be_bytes())?.len(), 2);
    /// # Ok::<(), hrafn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::TreeNotFound`]; corruption.
    pub fn tree_handle(&mut self, name: &str) -> Result<TreeHandle> {
        let index = self.find_tree(name)?.ok_or_else(|| Error::TreeNotFound {
            name: name.to_owned(),
        })?;
        Ok(TreeHandle::new(
            name,
            std::sync::Weak::new(),
            self.trees[index].header,
        ))
    }

    /// The open named tree `name`, which must exist and be of a kind `wanted` accepts.
    pub(crate) fn existing_tree(
        &mut self,
        name: &str,
        wanted: impl Fn(TreeKind) -> bool,
        wanted_name: &str,
    ) -> Result<usize> {
        let index = self.find_tree(name)?.ok_or_else(|| Error::TreeNotFound {
            name: name.to_owned(),
        })?;
        let kind = self.trees[index].header.kind;
        if !wanted(kind) {
            return Err(Error::WrongTreeKind {
                name: name.to_owned(),
                found: kind.to_string(),
                wanted: wanted_name.to_owned(),
            });
        }
        Ok(index)
    }

    /// Names of all trees, as this transaction sees them.
    ///
    /// # Errors
    /// Corruption.
    pub fn list_trees(&mut self) -> Result<Vec<String>> {
        self.write_back_trees()?;
        list_trees_in(&*self, self.root_tree())
    }

    /// Names of the top-level trees open in this transaction (one made here is not in the
    /// root tree until it is written back).
    pub(crate) fn open_tree_names(&self) -> impl Iterator<Item = &str> {
        self.trees
            .iter()
            .filter(|t| t.parent.is_none())
            .map(|t| &*t.name)
    }

    /// The root tree as this transaction has it: its meta page is written only at commit.
    pub(crate) fn root_tree(&self) -> TreeHeader {
        TreeHeader::btree(self.meta.root_page, self.meta.tree_count)
    }

    /// The open tree `name`, of whatever kind, opened from the root tree if needed.
    fn find_tree(&mut self, name: &str) -> Result<Option<usize>> {
        if name.len() > KEY_SIZE_MAX_BYTES {
            return Err(Error::KeyTooLarge {
                size_bytes: name.len(),
                limit_bytes: KEY_SIZE_MAX_BYTES,
            });
        }
        if let Some(i) = self
            .trees
            .iter()
            .position(|t| t.parent.is_none() && &*t.name == name)
        {
            return Ok(Some(i));
        }
        let Some(header) = lookup_tree_in(&*self, self.root_tree(), name)? else {
            return Ok(None);
        };
        self.trees.push(OpenTree {
            name: name.into(),
            parent: None,
            header,
            changed: false,
            insert_hint: tree_write::InsertHint::default(),
            fixed_append_hint: None,
            embedded: None,
        });
        Ok(Some(self.trees.len() - 1))
    }

    /// The header of the named tree, of any kind, as this transaction sees it.
    pub(crate) fn find_tree_header(&mut self, name: &str) -> Result<Option<TreeHeader>> {
        Ok(self.find_tree(name)?.map(|i| self.trees[i].header))
    }

    /// Sets the header of the named tree (registering it if new), to be stored at commit.
    pub(crate) fn set_named_header(&mut self, name: &str, header: TreeHeader) -> Result<()> {
        match self.find_tree(name)? {
            Some(i) => self.set_tree_header(i, header),
            None => {
                self.push_new_named(name, header);
                Ok(())
            }
        }
    }

    /// Registers a named tree made in this transaction; returns its index.
    fn push_new_named(&mut self, name: &str, header: TreeHeader) -> usize {
        self.trees.push(OpenTree {
            name: name.into(),
            parent: None,
            header,
            changed: true,
            insert_hint: tree_write::InsertHint::default(),
            fixed_append_hint: None,
            embedded: None,
        });
        self.trees.len() - 1
    }

    /// [`WriteTxn::tree_index`] for the table code.
    pub(crate) fn tree_index_pub(&mut self, name: &str, kind: TreeKind) -> Result<usize> {
        self.tree_index(name, kind)
    }

    /// The open tree `name` as `kind`, made if it does not exist.
    fn tree_index(&mut self, name: &str, kind: TreeKind) -> Result<usize> {
        if let Some(i) = self.find_tree(name)? {
            self.trees[i].header.expect_kind(name, kind)?;
            return Ok(i);
        }
        let header = create_tree(self, kind)?;
        Ok(self.push_new_named(name, header))
    }

    /// Opens the tree nested under `key` of open tree `parent` as `kind`, creating it (and
    /// its entry in the parent) if the key is absent.
    pub(crate) fn nested_index(
        &mut self,
        parent: usize,
        key: &[u8],
        kind: TreeKind,
    ) -> Result<usize> {
        if key.len() > KEY_SIZE_MAX_BYTES {
            return Err(Error::KeyTooLarge {
                size_bytes: key.len(),
                limit_bytes: KEY_SIZE_MAX_BYTES,
            });
        }
        let mut nesting = 1;
        let mut up = self.trees[parent].parent.as_ref().map(|(p, _)| *p);
        while let Some(p) = up {
            nesting += 1;
            up = self.trees[p].parent.as_ref().map(|(p, _)| *p);
        }
        if nesting > btree::NESTING_DEPTH_MAX {
            return Err(Error::LimitExceeded {
                what: format!("trees nested deeper than {}", btree::NESTING_DEPTH_MAX),
            });
        }
        self.forget_nested_after(parent);
        let name = String::from_utf8_lossy(key);
        let parent_header = self.trees[parent].header;
        let mut embedded = None;
        let header = match btree::get_stored(&*self, parent_header.root_page, key)? {
            Some(ValueRef::Tree(bytes)) => {
                let header = TreeHeader::decode(bytes, parent_header.root_page)?;
                header.expect_kind(&name, kind)?;
                header
            }
            Some(ValueRef::Embedded(bytes)) => {
                let tree = crate::fixed::Embedded::decode(bytes, parent_header.root_page)?;
                let header = super::read::Nested::Embedded(tree).header();
                header.expect_kind(&name, kind)?;
                embedded = Some(bytes[crate::fixed::embedded::EMBEDDED_HEADER_BYTES..].to_vec());
                header
            }
            Some(_) => {
                return Err(Error::WrongTreeKind {
                    name: name.into_owned(),
                    found: "a value".into(),
                    wanted: kind.to_string(),
                });
            }
            None => match kind {
                // A new fixed-size tree starts embedded in its entry.
                TreeKind::Fixed { value_size } => {
                    let stored = crate::fixed::embedded::encode(usize::from(value_size), &[]);
                    self.store_nested(parent, key, NewEntry::Embedded(&stored))?;
                    embedded = Some(Vec::new());
                    TreeHeader {
                        root_page: 0,
                        entry_count: 0,
                        kind,
                    }
                }
                _ => {
                    let header = create_tree(self, kind)?;
                    self.store_nested(parent, key, NewEntry::Tree(&header.encode()))?;
                    header
                }
            },
        };
        self.trees.push(OpenTree {
            name: name.into(),
            parent: Some((parent, key.into())),
            header,
            changed: false,
            insert_hint: tree_write::InsertHint::default(),
            fixed_append_hint: None,
            embedded,
        });
        Ok(self.trees.len() - 1)
    }

    /// Forgets the nested trees opened after open tree `index`, whose handles have ended.
    ///
    /// Handles borrow like a stack: a nested handle borrows its parent's, a named tree's
    /// borrows the transaction. So while the handle of tree `index` is in use, every tree
    /// opened after it has no live handle: not a descendant (it would borrow this
    /// handle), not another branch (it would borrow an ancestor this one borrows). Named
    /// trees stay, since their headers wait for commit; they are found by name, so their
    /// positions may shift, and nested trees refer only to their ancestors, which come
    /// first.
    fn forget_nested_after(&mut self, index: usize) {
        let mut i = 0;
        self.trees.retain(|t| {
            i += 1;
            i <= index + 1 || t.parent.is_none()
        });
    }

    /// Writes `entry` (a nested tree's header, or an embedded tree) as the entry `key` of
    /// open tree `parent`.
    fn store_nested(&mut self, parent: usize, key: &[u8], entry: NewEntry<'_>) -> Result<()> {
        let mut parent_header = self.trees[parent].header;
        // An in-place replacement leaves the leaf where it was, but a new entry may split
        // it: the parent's append position is no longer known.
        self.trees[parent].insert_hint = tree_write::InsertHint::default();
        let mut hint = tree_write::InsertHint::default();
        tree_write::insert_entry(self, &mut parent_header, key, entry, &mut hint)?;
        self.set_tree_header(parent, parent_header)
    }

    /// The page to name when open tree `index` proves damaged: its root, or for a
    /// fixed-size tree embedded in its parent's entry, the parent's root.
    pub(crate) fn tree_site(&self, index: usize) -> u64 {
        let tree = &self.trees[index];
        match (&tree.embedded, &tree.parent) {
            (Some(_), Some((parent, _))) => self.trees[*parent].header.root_page,
            _ => tree.header.root_page,
        }
    }

    /// Whether open tree `index` is nested under a key of another.
    pub(crate) fn is_nested(&self, index: usize) -> bool {
        self.trees[index].parent.is_some()
    }

    /// Makes nested fixed-size tree `index` an embedded one holding `entries`, and writes
    /// it into its parent's entry.
    pub(crate) fn store_embedded(&mut self, index: usize, entries: Vec<u8>) -> Result<()> {
        let tree = &mut self.trees[index];
        let value_size = tree
            .header
            .kind
            .fixed_value_size()
            .expect("only fixed-size trees embed");
        assert!(
            entries.len() <= crate::fixed::embedded::EMBEDDED_FIXED_MAX_BYTES,
            "an embedded tree within its limit"
        );
        tree.header.root_page = 0;
        tree.header.entry_count = (entries.len() / (8 + value_size)) as u64;
        let stored = crate::fixed::embedded::encode(value_size, &entries);
        tree.embedded = Some(entries);
        let (parent, key) = tree.parent.take().expect("only nested trees embed");
        let written = self.store_nested(parent, &key, NewEntry::Embedded(&stored));
        self.trees[index].parent = Some((parent, key));
        self.fail_on_error(written)
    }

    /// Passes `result` on; an error also marks the transaction unable to commit (the
    /// operation that failed had already changed pages).
    pub(crate) fn fail_on_error<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result
            && self.failed.is_none()
        {
            self.failed = Some(e.to_string());
        }
        result
    }

    /// Records an open tree's new header: a named tree's is stored at commit, a nested
    /// tree's at once into its parent (and so on up).
    pub(crate) fn set_tree_header(&mut self, index: usize, header: TreeHeader) -> Result<()> {
        let tree = &mut self.trees[index];
        if tree.header == header {
            return Ok(());
        }
        tree.header = header;
        let Some((parent, key)) = tree.parent.take() else {
            tree.changed = true;
            return Ok(());
        };
        let stored = self.store_nested(parent, &key, NewEntry::Tree(&header.encode()));
        self.trees[index].parent = Some((parent, key));
        self.fail_on_error(stored)
    }

    /// Stores changed tree headers into the root tree.
    fn write_back_trees(&mut self) -> Result<()> {
        let mut trees = std::mem::take(&mut self.trees);
        let result = (|| {
            for tree in trees.iter_mut().filter(|t| t.changed && t.parent.is_none()) {
                if self.meta.root_page == 0 {
                    self.meta.root_page = tree_write::create(self)?.root_page;
                }
                let mut root = self.root_tree();
                tree_write::insert(self, &mut root, tree.name.as_bytes(), &tree.header.encode())?;
                self.meta.root_page = root.root_page;
                self.meta.tree_count = root.entry_count;
                tree.changed = false;
            }
            Ok(())
        })();
        self.trees = trees;
        result
    }

    /// Sets when this transaction's commit returns, overriding [`crate::Options::durability`]
    /// for this transaction only (as redb's `set_durability`).
    ///
    /// With [`crate::Durability::None`] the commit returns after a buffered journal write:
    /// the transaction is visible at once and survives a crash of the process, but a power
    /// loss may lose it, together with any later non-durable ones. It becomes durable with
    /// the next durable commit (which syncs the journal first) or the flusher's next pass.
    /// With [`crate::Durability::Immediate`] in an environment opened with `None`, this
    /// commit returns once its record and every earlier one are on disk.
    ///
    /// What survives a power loss is always a prefix of the committed transactions.
    /// Inside [`crate::Environment::submit`] the merged transaction's durability is decided
    /// by its requests, so setting it there has no effect.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use hrafn::{Durability, Environment, Options};
    /// let env = Environment::open(dir.path(), Options::default())?;
    /// let mut wtx = env.begin_write()?;
    /// wtx.set_durability(Durability::None); // a cache entry: speed over durability
    /// wtx.open_tree("cache")?.insert(b"k", b"v")?;
    /// wtx.commit()?;
    /// # Ok::<(), hrafn::Error>(())
    /// ```
    pub fn set_durability(&mut self, durability: crate::Durability) {
        self.durability = durability;
    }

    /// This transaction's durability ([`WriteTxn::set_durability`]).
    pub fn durability(&self) -> crate::Durability {
        self.durability
    }

    /// Makes the transaction durable and visible. Returns when its journal record is on
    /// disk (with [`crate::Durability::Immediate`], the default; see
    /// [`WriteTxn::set_durability`]).
    ///
    /// # Errors
    /// I/O errors writing the journal poison the environment (the record may be partly
    /// written); [`Error::ScratchFull`]; corruption met while finishing tree updates.
    pub fn commit(self) -> Result<()> {
        let started = std::time::Instant::now();
        let env = self.env;
        let result = match self.prepare()? {
            Some(prepared) => prepared.finish(),
            None => Ok(()),
        };
        env.counters.latencies.commit.record(started.elapsed());
        result
    }

    /// Steps 1 and 2 of the commit protocol: finish tree headers, bitmaps and the meta
    /// page, then seal and diff every dirty page. `None` when nothing changed.
    pub(crate) fn prepare(mut self) -> Result<Option<Prepared<'env>>> {
        self.env.check_poison()?;
        if let Some(cause) = self.failed.take() {
            return Err(Error::TransactionFailed { cause });
        }
        for i in 0..self.tables.len() {
            self.write_back_table(i)?;
        }
        self.write_back_trees()?;
        let freed = std::mem::take(&mut self.freed);
        for (page_number, count) in freed {
            self.release_run(page_number, count)?;
        }
        if self.dirty.is_empty() && self.meta == self.meta_at_begin {
            // Nothing to journal; but what it read may come from a commit whose record is
            // still being written, which must not be acknowledged before that commit, nor,
            // when this transaction is durable, before that commit is.
            wait_for_record(self.env, self.base.txn_id)?;
            if self.durability == crate::Durability::Immediate {
                crate::flush::sync_buffered_journal(
                    self.env,
                    self.base.txn_id,
                    "syncing the journal under a durable transaction that changed nothing",
                )?;
            }
            return Ok(None);
        }
        if self.meta != self.meta_at_begin {
            let meta = self.meta.clone();
            let page = self.page_mut(META_PAGE_NUMBER)?;
            meta.encode(page);
        }
        let txn_id = self.txn_id;

        // Seal and diff, in page order (sequential for replay, deterministic for tests).
        let mut page_numbers: Vec<u64> = self.dirty.keys().copied().collect();
        page_numbers.sort_unstable();
        // Sized for the worst case (every page whole) so it never reallocates; untouched
        // capacity costs no memory.
        let pages_total: usize = self.dirty.values().map(PageBuf::page_count).sum();
        let spare = self.env.record_spare.lock().take().unwrap_or_default();
        let mut record = RecordBuf::reusing(spare, pages_total * (PAGE_SIZE_BYTES + 16));
        let mut page_count = 0u32;
        let mut dirty_bytes = 0u64;
        let mut pages = Vec::with_capacity(page_numbers.len());
        for &page_number in &page_numbers {
            let mut buf = self.dirty.remove(&page_number).expect("listed above");
            seal(buf.bytes_mut(), page_number);
            dirty_bytes += buf.bytes().len() as u64;
            for (i, new) in buf.bytes().chunks_exact(PAGE_SIZE_BYTES).enumerate() {
                let number = page_number + i as u64;
                // A page taken from past the high-water mark has no earlier version: the
                // file holds zeros there (opening makes sure). Not reading it keeps the
                // mapping's read-ahead from filling that range with large page-cache
                // folios, which every later one-page write of the flusher would walk.
                let old = if number >= self.meta_at_begin.next_page_number {
                    None
                } else {
                    self.base.page_raw(number)
                };
                if encode_page(record.encoder(), number, new, old) {
                    page_count += 1;
                }
            }
            pages.push((page_number, Arc::new(buf)));
        }
        let header = RecordHeader {
            flags: 0,
            txn_id,
            journal_number: 0,
            prev_checksum: 0,
            payload_size_bytes: 0,
            uncompressed_size_bytes: 0,
            record_size_bytes: 0,
            page_count,
            next_page_number: self.meta.next_page_number,
            root_page: self.meta.root_page,
            timestamp_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            payload_checksum: 0,
            checksum: 0,
        };
        // The next write transaction starts from this one's pages while its record is
        // still being written (pipelined commit); readers do not see them until publish.
        let ptt = with_pages(&self.base.ptt, &pages, txn_id);
        let pending = State {
            txn_id,
            ptt: ptt.clone(),
            data: self.base.data.clone(),
        };
        *self.env.pending_state.lock() = Some(Arc::new(pending));
        self.env
            .commits_in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.core.last_txn_id = txn_id;
        self.core.free_pages = self.free_pages;
        Ok(Some(Prepared {
            env: self.env,
            txn_id,
            header,
            record,
            pages,
            base_ptt: self.base.ptt.clone(),
            ptt,
            dirty_bytes,
            durable: self.durability == crate::Durability::Immediate,
            finished: false,
        }))
    }

    /// Discards every change (the same as dropping the transaction).
    pub fn abort(self) {}

    /// Moves the base to the published state when that is the same commit with fewer
    /// versions in scratch (a flush wrote them to the data file): the old base would keep
    /// those copies alive for as long as this transaction runs, so a transaction waiting
    /// for scratch room would wait on itself. Safe under `&mut self`: no page of the old
    /// base is borrowed, and both states read the same bytes for every page.
    fn rebase_on_flushed(&mut self) {
        let published = self.env.state.load_full();
        if published.txn_id == self.base.txn_id && !Arc::ptr_eq(&published, &self.base) {
            debug_assert!(published.ptt.len() <= self.base.ptt.len());
            self.base = published;
        }
    }

    /// Scratch bytes of the pages this transaction changed so far.
    pub(crate) fn dirty_size_bytes(&self) -> usize {
        self.dirty_size_bytes as usize
    }

    /// Waits for scratch room for `bytes` more, then fails with [`Error::ScratchFull`]; a
    /// transaction that alone outgrows the limit fails at once with
    /// [`Error::TransactionTooLarge`], since no flush can make room for it.
    fn reserve_scratch(&mut self, bytes: u64) -> Result<()> {
        let limit = self.env.options.scratch_limit_bytes;
        let own_bytes = self.dirty_size_bytes + bytes;
        if own_bytes > limit {
            // Met in the middle of an operation that may have changed pages already (a
            // split half done): the transaction can no longer commit.
            return self.fail_on_error(Err(Error::TransactionTooLarge {
                size_bytes: own_bytes,
                scratch_limit_bytes: limit,
            }));
        }
        let mut waited_ms = 0;
        loop {
            let used = self.env.usage.held_bytes();
            if used + bytes <= limit {
                self.dirty_size_bytes = own_bytes;
                return Ok(());
            }
            if let Err(error) = self.env.check_poison() {
                return self.fail_on_error(Err(error)); // no flush will come
            }
            if waited_ms >= self.env.options.scratch_wait_ms {
                return self.fail_on_error(Err(Error::ScratchFull {
                    used_bytes: used,
                    limit_bytes: limit,
                    oldest_reader_age_ms: self.env.readers.oldest_reader().map(|r| r.age_ms),
                }));
            }
            self.env.flusher.kick();
            std::thread::sleep(Duration::from_millis(5));
            waited_ms += 5;
            self.rebase_on_flushed();
        }
    }
}

/// The error of a `delete_range` whose range yielded a key that `remove` then did not
/// find: damage (keys out of order), and the key would come back forever.
pub(crate) fn unremovable(page_number: u64) -> Error {
    crate::page::corrupt(
        page_number,
        "a key in the tree cannot be found to remove (keys out of order?)",
    )
}

/// Waits until the journal holds the record of transaction `txn_id` (a pending commit's,
/// that a later transaction built on or a backup copies), failing if the environment is
/// poisoned meanwhile (that record was not written).
pub(crate) fn wait_for_record(env: &EnvInner, txn_id: u64) -> Result<()> {
    // Published states' records are written: publishing follows the append.
    if env.state.load().txn_id >= txn_id {
        return Ok(());
    }
    let mut journal = env.journal.lock();
    loop {
        env.check_poison()?;
        match journal.as_ref() {
            Some(j) if j.last_txn_id() < txn_id => {
                env.journal_turn
                    .wait_for(&mut journal, Duration::from_millis(10));
            }
            _ => return Ok(()),
        }
    }
}

impl WriteTxn<'_> {
    /// A copy of the base's page `page_number`, for this transaction to change.
    fn copy_for_writing(&self, page_number: u64) -> Result<PageBuf> {
        let source = (&*self.base).page(page_number)?;
        if span_pages(source, page_number)? != 1 {
            return Err(crate::page::corrupt(
                page_number,
                "in-place edit of an overflow run",
            ));
        }
        Ok(PageBuf::copy_of(
            &source[..PAGE_SIZE_BYTES],
            &self.env.usage,
        ))
    }
}

impl<'a> PageSource<'a> for &'a WriteTxn<'_> {
    #[inline]
    fn page(self, page_number: u64) -> Result<&'a [u8]> {
        match self.dirty.get(&page_number) {
            Some(buf) => Ok(buf.bytes()),
            None => (&*self.base).page(page_number),
        }
    }

    fn page_unverified(self, page_number: u64) -> Option<&'a [u8]> {
        match self.dirty.get(&page_number) {
            Some(buf) => Some(&buf.bytes()[..PAGE_SIZE_BYTES]),
            None => (&*self.base).page_unverified(page_number),
        }
    }
}

impl PageStore for WriteTxn<'_> {
    #[inline]
    fn page(&self, page_number: u64) -> Result<&[u8]> {
        PageSource::page(self, page_number)
    }

    fn page_unverified(&self, page_number: u64) -> Option<&[u8]> {
        PageSource::page_unverified(self, page_number)
    }

    fn page_mut(&mut self, page_number: u64) -> Result<&mut [u8]> {
        self.near_page = page_number;
        if !self.dirty.contains_key(&page_number) {
            self.reserve_scratch(PAGE_SIZE_BYTES as u64)?;
            // Failures here and in `allocate` fail the transaction: the tree operation
            // asking may already have changed other pages (a split's left half, a leaf
            // whose entry it moves).
            let copied = self.copy_for_writing(page_number);
            let buf = self.fail_on_error(copied)?;
            return Ok(self.dirty.entry(page_number).or_insert(buf).bytes_mut());
        }
        Ok(self
            .dirty
            .get_mut(&page_number)
            .expect("dirty: checked above")
            .bytes_mut())
    }

    fn allocate(&mut self, page_count: u64, kind: PageKind) -> Result<u64> {
        let pages = usize::try_from(page_count).map_err(|_| Error::LimitExceeded {
            what: "run length".into(),
        })?;
        self.reserve_scratch(page_count * PAGE_SIZE_BYTES as u64)?;
        let first = self.allocate_run(page_count);
        let first = self.fail_on_error(first)?;
        let mut buf = PageBuf::zeroed(pages, &self.env.usage);
        init(buf.bytes_mut(), first, kind);
        let replaced = self.dirty.insert(first, buf);
        debug_assert!(
            replaced.is_none(),
            "allocated page {first} was already dirty"
        );
        Ok(first)
    }

    fn free(&mut self, page_number: u64, page_count: u64) {
        self.freed.push((page_number, page_count));
    }
}

/// Makes an empty tree of `kind`.
fn create_tree(txn: &mut WriteTxn<'_>, kind: TreeKind) -> Result<TreeHeader> {
    match kind {
        TreeKind::BTree | TreeKind::Multi => Ok(TreeHeader {
            kind,
            ..tree_write::create(txn)?
        }),
        TreeKind::Fixed { value_size } => crate::fixed::write::create(txn, value_size),
        TreeKind::Table => Err(Error::InvalidArgument(
            "a table is made by open_table, with its schema".into(),
        )),
    }
}

/// A tree opened for writing (named, or nested under a key of another tree); borrows the
/// write transaction, or its parent tree's handle.
///
/// A key holds either a value or a nested tree. Reads of a key that holds a nested tree
/// yield the tree's 24-byte stored header (as LMDB's main database yields a named
/// database's record); [`TreeMut::insert`] refuses to overwrite it and
/// [`TreeMut::remove`] frees the whole nested tree.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
/// let mut wtx = env.begin_write()?;
/// let mut series = wtx.open_tree("series")?;
/// for id in [7u64, 9] {
///     let mut samples = series.open_fixed_tree(&id.to_be_bytes(), 8)?;
///     samples.insert(1_000, &1.5f64.to_le_bytes())?;
///     samples.insert(2_000, &2.5f64.to_le_bytes())?;
/// }
/// series.remove(&9u64.to_be_bytes())?; // frees series 9's samples
/// wtx.commit()?;
///
/// let rtx = env.begin_read()?;
/// let series = rtx.open_tree("series")?;
/// assert_eq!(series.len(), 1);
/// assert_eq!(series.open_fixed_tree(&7u64.to_be_bytes())?.len(), 2);
/// # Ok::<(), hrafn::Error>(())
/// ```
pub struct TreeMut<'t, 'env> {
    txn: &'t mut WriteTxn<'env>,
    index: usize,
}

impl<'t, 'env> TreeMut<'t, 'env> {
    pub(crate) fn new(txn: &'t mut WriteTxn<'env>, index: usize) -> TreeMut<'t, 'env> {
        TreeMut { txn, index }
    }

    /// Opens the B+tree nested under `key`, creating it if the key is absent.
    ///
    /// # Errors
    /// [`Error::WrongTreeKind`] if the key holds a value or another kind of tree;
    /// [`Error::KeyTooLarge`]; [`Error::LimitExceeded`] past
    /// [`btree::NESTING_DEPTH_MAX`] levels; scratch full; corruption.
    pub fn open_tree(&mut self, key: impl AsRef<[u8]>) -> Result<TreeMut<'_, 'env>> {
        let index = self
            .txn
            .nested_index(self.index, key.as_ref(), TreeKind::BTree)?;
        Ok(TreeMut {
            txn: &mut *self.txn,
            index,
        })
    }

    /// Opens the fixed-size tree nested under `key`, creating it with `value_size`-byte
    /// values if the key is absent.
    ///
    /// # Errors
    /// As [`TreeMut::open_tree`]; [`Error::ValueTooLarge`] past
    /// [`crate::fixed::FIXED_VALUE_SIZE_MAX_BYTES`].
    pub fn open_fixed_tree(
        &mut self,
        key: impl AsRef<[u8]>,
        value_size: usize,
    ) -> Result<super::fixed::FixedTreeMut<'_, 'env>> {
        let kind = fixed_kind(value_size)?;
        let index = self.txn.nested_index(self.index, key.as_ref(), kind)?;
        Ok(super::fixed::FixedTreeMut::new(&mut *self.txn, index))
    }

    /// Opens the multi-value tree nested under `key`, creating it if the key is absent.
    ///
    /// # Errors
    /// As [`TreeMut::open_tree`].
    pub fn open_multi_tree(
        &mut self,
        key: impl AsRef<[u8]>,
    ) -> Result<super::multi::MultiTreeMut<'_, 'env>> {
        let index = self
            .txn
            .nested_index(self.index, key.as_ref(), TreeKind::Multi)?;
        Ok(super::multi::MultiTreeMut::new(&mut *self.txn, index))
    }

    fn header(&self) -> TreeHeader {
        self.txn.trees[self.index].header
    }

    fn set_header(&mut self, header: TreeHeader) -> Result<()> {
        self.txn.set_tree_header(self.index, header)
    }

    /// Inserts or replaces `key`. Returns true if a value was replaced.
    ///
    /// # Errors
    /// [`Error::KeyTooLarge`], [`Error::ValueTooLarge`], [`Error::ScratchFull`], corruption.
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        let (key, value) = (key.as_ref(), value.as_ref());
        if key.len() > KEY_SIZE_MAX_BYTES {
            return Err(Error::KeyTooLarge {
                size_bytes: key.len(),
                limit_bytes: KEY_SIZE_MAX_BYTES,
            });
        }
        if value.len() > VALUE_SIZE_MAX_BYTES {
            return Err(Error::ValueTooLarge {
                size_bytes: value.len(),
                limit_bytes: VALUE_SIZE_MAX_BYTES,
            });
        }
        let mut header = self.header();
        let mut hint = std::mem::take(&mut self.txn.trees[self.index].insert_hint);
        // A failure other than the refusal to put a value over a nested tree (checked
        // before anything changes) may come after a split or an old value's pages were
        // freed: the transaction must not commit that half.
        let replaced = match tree_write::insert_hinted(self.txn, &mut header, key, value, &mut hint)
        {
            Err(e @ Error::WrongTreeKind { .. }) => return Err(e),
            result => self.txn.fail_on_error(result)?,
        };
        self.txn.trees[self.index].insert_hint = hint;
        self.set_header(header)?;
        Ok(replaced)
    }

    /// Removes `key`. Returns true if it was present.
    ///
    /// # Errors
    /// [`Error::ScratchFull`], corruption.
    pub fn remove(&mut self, key: impl AsRef<[u8]>) -> Result<bool> {
        let key = key.as_ref();
        if key.len() > KEY_SIZE_MAX_BYTES {
            return Ok(false);
        }
        self.txn.trees[self.index].insert_hint = tree_write::InsertHint::default();
        let mut header = self.header();
        // A failure may come after part of a nested tree was freed: the transaction must
        // not commit those pages free while the entry still names them.
        let removed = tree_write::remove(self.txn, &mut header, key);
        let removed = self.txn.fail_on_error(removed)?;
        self.set_header(header)?;
        Ok(removed)
    }

    /// Changes the value of `key` in place: `f` gets the value's bytes and may change them
    /// but not their length. Returns false (without calling `f`) when the key is absent.
    /// Cheaper than [`TreeMut::get`] then [`TreeMut::insert`] of a value of the same length:
    /// one descent and no copy of the value; a value kept in overflow pages is read, changed
    /// and written back.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    /// let mut wtx = env.begin_write()?;
    /// let mut tree = wtx.open_tree("counters")?;
    /// tree.insert(b"hits", 41u64.to_le_bytes())?;
    /// tree.update_in_place(b"hits", |v| {
    ///     let n = u64::from_le_bytes(v.try_into().unwrap()) + 1;
    ///     v.copy_from_slice(&n.to_le_bytes());
    /// })?;
    /// assert_eq!(tree.get(b"hits")?, Some(&42u64.to_le_bytes()[..]));
    /// # Ok::<(), hrafn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::WrongTreeKind`] when the key holds a nested tree; scratch full; corruption.
    pub fn update_in_place(
        &mut self,
        key: impl AsRef<[u8]>,
        mut f: impl FnMut(&mut [u8]),
    ) -> Result<bool> {
        self.update_in_place_hinted(key.as_ref(), &mut f, &mut None)
    }

    /// [`TreeMut::update_in_place`] for each of `keys`: `f(i, value)` changes the value of
    /// the `i`-th key in place. Returns the indices of the keys that are absent (`f` is not
    /// called for them). Any order is correct; in ascending order, keys that fall in one
    /// leaf share one descent (a batch of counters or open chunks, sorted by key).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    /// let mut wtx = env.begin_write()?;
    /// let mut tree = wtx.open_tree("counters")?;
    /// tree.insert(b"a", [1])?;
    /// tree.insert(b"c", [3])?;
    /// let absent = tree.update_in_place_each(&[&b"a"[..], b"b", b"c"], |_, v| v[0] += 10)?;
    /// assert_eq!(absent, vec![1]);
    /// assert_eq!(tree.get(b"c")?, Some(&[13u8][..]));
    /// # Ok::<(), hrafn::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`TreeMut::update_in_place`].
    pub fn update_in_place_each<K: AsRef<[u8]>>(
        &mut self,
        keys: &[K],
        mut f: impl FnMut(usize, &mut [u8]),
    ) -> Result<Vec<usize>> {
        let mut absent = Vec::new();
        let mut leaf_hint = None;
        for (i, key) in keys.iter().enumerate() {
            if !self.update_in_place_hinted(key.as_ref(), &mut |v| f(i, v), &mut leaf_hint)? {
                absent.push(i);
            }
        }
        Ok(absent)
    }

    fn update_in_place_hinted(
        &mut self,
        key: &[u8],
        f: &mut dyn FnMut(&mut [u8]),
        leaf_hint: &mut Option<u64>,
    ) -> Result<bool> {
        if key.len() > KEY_SIZE_MAX_BYTES {
            return Ok(false);
        }
        let header = self.header();
        match tree_write::update_in_place(self.txn, &header, key, f, leaf_hint)? {
            tree_write::InPlace::Updated => Ok(true),
            tree_write::InPlace::Absent => Ok(false),
            tree_write::InPlace::Tree => Err(Error::WrongTreeKind {
                name: String::from_utf8_lossy(key).into_owned(),
                found: "a nested tree".into(),
                wanted: "a value".into(),
            }),
            tree_write::InPlace::Overflow => {
                // Rewriting an overflow value may move pages: the leaf hint goes.
                *leaf_hint = None;
                let mut value = self.get(key)?.map(<[u8]>::to_vec).unwrap_or_default();
                f(&mut value);
                self.insert(key, &value)?;
                Ok(true)
            }
        }
    }

    /// The value of `key` as this transaction sees it.
    ///
    /// # Errors
    /// Corruption.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<&[u8]>> {
        btree::get(&*self.txn, self.header().root_page, key.as_ref())
    }

    /// Entries with keys in `range`, in order.
    ///
    /// # Errors
    /// None here: positioning waits for the first step, so corruption met then comes as
    /// an `Err` item of the iterator.
    pub fn range<'s, K: AsRef<[u8]>, R: RangeBounds<K>>(
        &'s self,
        range: R,
    ) -> Result<crate::iter::TreeRangeMut<'s>>
    where
        Self: 's,
    {
        let (start, end) = bounds(&range);
        let txn: &'s WriteTxn<'_> = self.txn;
        Range::new(shorten(txn), self.header().root_page, start, end)
    }

    /// All entries in order, as this transaction sees them.
    ///
    /// # Errors
    /// None here: positioning waits for the first step, so corruption met then comes as
    /// an `Err` item of the iterator.
    pub fn iter<'s>(&'s self) -> Result<crate::iter::TreeRangeMut<'s>>
    where
        Self: 's,
    {
        self.range::<&[u8], _>(..)
    }

    /// Entries whose keys start with `prefix`.
    ///
    /// # Errors
    /// None here: positioning waits for the first step, so corruption met then comes as
    /// an `Err` item of the iterator.
    pub fn prefix<'s>(&'s self, prefix: impl AsRef<[u8]>) -> Result<crate::iter::TreeRangeMut<'s>> {
        use std::ops::Bound;
        let prefix = prefix.as_ref();
        let root = self.header().root_page;
        let txn = shorten(self.txn);
        match prefix_end(prefix) {
            Some(end) => Range::new(txn, root, Bound::Included(prefix), Bound::Excluded(&end)),
            None => Range::new(txn, root, Bound::Included(prefix), Bound::Unbounded),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.header().entry_count
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.header().entry_count == 0
    }

    /// A cursor over this tree that can delete where it stands (see
    /// [`super::cursor::KeyCursor`]).
    pub fn cursor(&mut self) -> super::cursor::KeyCursor<&mut Self> {
        super::cursor::KeyCursor::new(self)
    }

    /// Removes every entry with a key in `range` (a nested tree with all it holds).
    /// Returns how many were removed.
    ///
    /// # Errors
    /// Scratch full; corruption.
    pub fn delete_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&mut self, range: R) -> Result<u64> {
        let (start, end) = bounds(&range);
        let (start, end) = (start.map(<[u8]>::to_vec), end.map(<[u8]>::to_vec));
        let mut removed = 0;
        loop {
            let first = self
                .range::<Vec<u8>, _>((start.clone(), end.clone()))?
                .next()
                .transpose()?
                .map(|(k, _)| k.to_vec());
            let Some(key) = first else {
                return Ok(removed);
            };
            // The range just yielded it: a miss means damage, and the key would come back
            // forever.
            if !self.remove(&key)? {
                return Err(unremovable(self.header().root_page));
            }
            removed += 1;
        }
    }

    /// Keeps only the entries for which `keep(key, value)` is true. Returns how many were
    /// removed.
    ///
    /// # Errors
    /// Scratch full; corruption.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64> {
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

/// The kind of a fixed-size tree of `value_size`-byte values, if that size is allowed.
fn fixed_kind(value_size: usize) -> Result<TreeKind> {
    if value_size > crate::fixed::FIXED_VALUE_SIZE_MAX_BYTES {
        return Err(Error::ValueTooLarge {
            size_bytes: value_size,
            limit_bytes: crate::fixed::FIXED_VALUE_SIZE_MAX_BYTES,
        });
    }
    Ok(TreeKind::Fixed {
        value_size: value_size as u16,
    })
}

fn shorten<'s>(txn: &'s WriteTxn<'_>) -> &'s WriteTxn<'s> {
    txn
}
