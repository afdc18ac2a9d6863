//! Compaction: the live content of an environment, copied from one snapshot into a fresh
//! environment, which then holds no free pages, no half-empty pages and no journal backlog.
//!
//! Deleting data frees pages for reuse but never shrinks the data file: a database that
//! once held much more than it holds now keeps its size. [`Environment::compact_to`] writes
//! a copy as dense as a fresh load. The `hrafn compact` command swaps such a copy in place
//! of the original.
//!
//! The copy goes through the public write path ([`crate::walk`]): every tree is rebuilt by
//! inserting its entries in key order, every table by inserting its records, which rebuilds
//! its indexes. **Table record ids change**: an id is a record's location, and the copy
//! lays records out afresh. An application that stored ids somewhere other than in the
//! table's own indexes must map them again (through a key), as after Voron's compaction.

use crate::env::{Durability, Environment, Options};
use crate::error::{Error, Result};
use crate::storage::file::parent_of;
use crate::storage::{FileStorage, Storage};
use crate::txn::ReadTxn;
use crate::walk::{self, Item, LOADER_TRANSACTION_BYTES, Loader, RecordOrder};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What a compaction did ([`Environment::compact_to`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactReport {
    /// The transaction the copy is a snapshot of: it holds everything committed up to it
    /// and nothing later.
    pub txn_id: u64,
    /// The copy's last transaction: the copy numbers its own transactions from 1.
    pub copy_txn_id: u64,
    /// Bytes the source's files took on disk when the copy began: data file, journals,
    /// headers and the rest of its directory (the data file alone for a storage that is
    /// not a directory).
    pub bytes_before: u64,
    /// Bytes the copy's files take on disk, counted the same way, once it is closed.
    pub bytes_after: u64,
    /// Named trees copied: B+trees, fixed-size and multi-value trees (global indexes not
    /// included, tables not included).
    pub trees: u64,
    /// Tables copied.
    pub tables: u64,
    /// Named trees rebuilt as global indexes of the copied tables.
    pub global_indexes: u64,
    /// Trees nested under keys (at any depth), embedded fixed-size trees included.
    pub nested_trees: u64,
    /// Entries copied: B+tree entries, fixed-size tree entries, values of multi-value
    /// trees (nested trees' included, global indexes' not).
    pub entries: u64,
    /// Table records copied.
    pub records: u64,
    /// Key, value and field bytes copied.
    pub data_bytes: u64,
    /// Write transactions the copy took.
    pub commits: u64,
    /// How long the compaction took.
    pub elapsed_ms: u64,
}

impl CompactReport {
    /// `bytes_after / bytes_before` (1 for an empty source).
    pub fn ratio(&self) -> f64 {
        if self.bytes_before == 0 {
            return 1.0;
        }
        self.bytes_after as f64 / self.bytes_before as f64
    }
}

/// Where a compaction is, given to the callback of
/// [`Environment::compact_to_with_progress`]: at the start of every named tree, every
/// [`PROGRESS_EVERY_ENTRIES`] entries or records, and once at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactProgress<'a> {
    /// The named tree or table being copied (empty once done).
    pub tree: &'a str,
    /// Named trees and tables copied so far.
    pub trees_done: u64,
    /// Named trees and tables to copy (global indexes not counted: they are rebuilt with
    /// their tables).
    pub trees_total: u64,
    /// Entries and records copied so far.
    pub entries: u64,
    /// Key, value and field bytes copied so far.
    pub data_bytes: u64,
    /// Whether every tree is copied and the copy synced: the last call. The copy is renamed
    /// into place after it returns, which can still fail (the call then returns the error).
    pub done: bool,
}

/// How often (in entries and records) the progress callback is called within a tree.
pub const PROGRESS_EVERY_ENTRIES: u64 = 16_384;

impl Environment {
    /// Writes a compacted copy of this environment into a new environment at `path`, from
    /// one snapshot, while this one stays open for readers and the writer.
    ///
    /// Every named tree is copied as it is in the snapshot, of every kind: B+trees with
    /// the trees nested under their keys at any depth (B+trees, fixed-size trees, embedded
    /// ones included, multi-value trees), fixed-size trees with their value size,
    /// multi-value trees, and tables with their schemas. Tables are copied by inserting
    /// their records, which rebuilds their indexes; a named tree that serves tables as a
    /// global index is rebuilt that way too, from all the tables naming it. **Record ids
    /// change**: an id is a physical location and the copy places records afresh (see the
    /// [module](crate::compact) documentation).
    ///
    /// The copy commits in transactions of about [`LOADER_TRANSACTION_BYTES`] (a sixteenth
    /// of the scratch limit, if that is less), without waiting for each to be durable,
    /// then writes every page to its data file and syncs it before it returns: the copy
    /// is durable when this returns. It is written into the
    /// sibling directory `<path>.unfinished` and renamed to `path` only once complete, so
    /// `path` never holds a partial copy: an error removes the sibling, and a process
    /// killed meanwhile leaves it, which the next call refuses until it is removed. The
    /// snapshot stays open throughout, so pages that commits to this environment replace
    /// meanwhile stay in its scratch until the copy is done.
    ///
    /// `path` must not exist, or be an empty directory on its parent's file system (not a
    /// mount point: the rename cannot replace one, and an existing one keeps its
    /// permissions); its parent must be writable, and missing ancestors are created. If
    /// syncing the parent after the rename fails, the error is returned with the complete
    /// copy at `path`, whose new name may not survive a crash.
    ///
    /// The copy is opened with this environment's options (except durability), and may be
    /// opened with any. It keeps incremental backups on if this environment was created
    /// with them, whatever this open's options say; a copy is a new environment, so its
    /// chain starts with a new full backup.
    ///
    /// ```
    /// use hrafn::{Environment, Options};
    /// # fn main() -> hrafn::Result<()> {
    /// let dir = tempfile::tempdir().expect("temporary directory");
    /// let env = Environment::open(dir.path().join("db"), Options::default())?;
    /// let mut wtx = env.begin_write()?;
    /// let mut log = wtx.open_fixed_tree("log", 256)?;
    /// for i in 0..10_000 {
    ///     log.insert(i, &[7; 256])?;
    /// }
    /// log.delete_range(..9_990)?;
    /// wtx.commit()?;
    ///
    /// let report = env.compact_to(dir.path().join("compacted"))?;
    /// assert_eq!(report.entries, 10);
    /// assert!(report.bytes_after < report.bytes_before);
    /// let copy = Environment::open(dir.path().join("compacted"), Options::default())?;
    /// assert_eq!(copy.begin_read()?.open_fixed_tree("log")?.len(), 10);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `path` exists and is not an empty directory, or is a
    /// mount point, if `<path>.unfinished` exists, or if a global index holds entries that
    /// its tables' records do not give (written to it directly: compaction cannot carry
    /// them); errors
    /// of the snapshot, of creating and writing the copy ([`Error::NoSpace`], I/O),
    /// corruption met in the source.
    pub fn compact_to(&self, path: impl AsRef<Path>) -> Result<CompactReport> {
        self.compact_to_with_progress(path, |_| {})
    }

    /// [`Environment::compact_to`], calling `progress` as the copy advances (see
    /// [`CompactProgress`]), for a progress display.
    ///
    /// # Errors
    /// As [`Environment::compact_to`].
    pub fn compact_to_with_progress(
        &self,
        path: impl AsRef<Path>,
        progress: impl FnMut(&CompactProgress<'_>),
    ) -> Result<CompactReport> {
        // Incremental backups are a property of the environment, stored when it was
        // created, not of the options it was opened with this time: the copy keeps it.
        let incremental_backups = self.inner.flush_book.lock().header.backup.enabled;
        let options = self
            .inner
            .options
            .clone()
            .incremental_backups(incremental_backups);
        self.compact_with_options(path.as_ref(), options, progress)
    }

    /// [`Environment::compact_to_with_progress`] creating the copy with `options` (a
    /// compacted backup keeps no journals for incremental backups: it starts no chain).
    pub(crate) fn compact_with_options(
        &self,
        path: &Path,
        options: Options,
        mut progress: impl FnMut(&CompactProgress<'_>),
    ) -> Result<CompactReport> {
        // Armed until the copy is complete and renamed: an error, or a panic of the
        // progress callback unwinding through here, removes the unfinished copy.
        let unfinished = Unfinished::new(path, "compaction")?;
        let report = self.copy_into(unfinished.path(), options, &mut progress)?;
        unfinished.finished()?;
        Ok(report)
    }

    /// Bytes this environment's files take on disk (see [`CompactReport::bytes_before`]).
    fn size_on_disk(&self) -> Result<u64> {
        let measured = self
            .inner
            .storage
            .size_bytes()
            .map_err(|e| Error::io("measuring the environment's files", e))?;
        match measured {
            Some(bytes) => Ok(bytes),
            None => self
                .inner
                .data_file
                .len()
                .map_err(|e| Error::io("measuring the data file", e)),
        }
    }

    fn copy_into(
        &self,
        path: &Path,
        options: Options,
        progress: &mut impl FnMut(&CompactProgress<'_>),
    ) -> Result<CompactReport> {
        let started = Instant::now();
        let source = self.begin_read()?;
        let bytes_before = self.size_on_disk()?;
        // A write transaction pins every page committed before it began and not flushed
        // yet, so scratch drains only between transactions: the copy's transactions and
        // what waits in scratch stay well under the limit.
        let scratch_limit = options.scratch_limit_bytes;
        let options = Options {
            durability: Durability::None,
            journal_spare_files: 0,
            flush_threshold_bytes: options.flush_threshold_bytes.min(scratch_limit / 4),
            ..options
        };
        let transaction_bytes = LOADER_TRANSACTION_BYTES.min(scratch_limit / 16);
        let target = Environment::open(path, options)?;
        let mut loader = Loader::new(&target).transaction_bytes(transaction_bytes);

        let globals = walk::global_index_names(&source)?;
        let names: Vec<String> = source
            .list_trees()?
            .into_iter()
            .filter(|name| !globals.contains(name))
            .collect();
        let mut at = CompactProgress {
            tree: "",
            trees_done: 0,
            trees_total: names.len() as u64,
            entries: 0,
            data_bytes: 0,
            done: false,
        };
        for name in &names {
            at.tree = name;
            progress(&at);
            walk::walk_named(&source, name, RecordOrder::Id, &mut |item| {
                if let Item::Entry { .. } | Item::Fixed { .. } | Item::Record { .. } = item {
                    at.entries += 1;
                    if at.entries.is_multiple_of(PROGRESS_EVERY_ENTRIES) {
                        at.data_bytes = loader.counts().bytes;
                        progress(&at);
                    }
                }
                loader.push(item)
            })?;
            at.trees_done += 1;
        }
        let counts = loader.finish()?;

        let copy = target.begin_read()?;
        for name in &globals {
            let (before, after) = (index_size(&source, name)?, index_size(&copy, name)?);
            if before != after {
                return Err(Error::InvalidArgument(format!(
                    "tree {name:?} is a global index holding {} keys and {} entries, but its \
                     tables' records give {} keys and {} entries: entries written to it \
                     directly cannot be carried over by compaction",
                    before.0, before.1, after.0, after.1
                )));
            }
        }
        drop(copy);
        target.flush_and_sync()?;
        let copy_txn_id = target.stats().txn_id;
        target.close()?;
        let bytes_after = FileStorage::existing(path)
            .and_then(|storage| storage.size_bytes())
            .map_err(|e| Error::io(format!("measuring {}", path.display()), e))?
            .unwrap_or_default();

        at.tree = "";
        at.data_bytes = counts.bytes;
        at.done = true;
        progress(&at);
        Ok(CompactReport {
            txn_id: source.txn_id(),
            copy_txn_id,
            bytes_before,
            bytes_after,
            trees: counts.trees,
            tables: counts.tables,
            global_indexes: globals.len() as u64,
            nested_trees: counts.nested_trees,
            entries: counts.entries,
            records: counts.records,
            data_bytes: counts.bytes,
            commits: counts.commits,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }
}

/// A global index's keys and entries (entries: values of a multi-value tree).
fn index_size(txn: &ReadTxn<'_>, name: &str) -> Result<(u64, u64)> {
    match txn.tree_header(name)?.kind {
        crate::btree::TreeKind::Multi => {
            let tree = txn.open_multi_tree(name)?;
            let mut values = 0;
            for key in tree.keys::<&[u8], _>(..)? {
                values += tree.count(key?)?;
            }
            Ok((tree.key_count(), values))
        }
        _ => {
            let entries = txn.tree_header(name)?.entry_count;
            Ok((entries, entries))
        }
    }
}

/// A new environment being written for a directory (a compaction, a restore). It is
/// written into a sibling directory, `<target>.unfinished`, and renamed to the target only
/// once complete, so the target never holds a partial copy, even after the process is
/// killed: an unfinished copy would open as an environment missing trees. Dropped before
/// [`Unfinished::finished`] (an error, a panic), the sibling is removed; the target is
/// left as it was found throughout (absent, or an empty directory).
pub(crate) struct Unfinished<'a> {
    target: &'a Path,
    partial: PathBuf,
    armed: bool,
}

impl<'a> Unfinished<'a> {
    /// Refuses a target that exists and is not an empty directory or is a mount point, and
    /// one whose sibling `<target>.unfinished` exists (an interrupted copy, or one still
    /// running); otherwise creates the sibling (and missing ancestors). `what` names the
    /// operation in the error.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for such a target; I/O errors examining it.
    pub(crate) fn new(target: &'a Path, what: &str) -> Result<Unfinished<'a>> {
        refuse_target(target, what)?;
        let Some(name) = target.file_name() else {
            return Err(Error::InvalidArgument(format!(
                "{what} target {} must end in a directory's name: the new environment \
                 is written beside it first",
                target.display()
            )));
        };
        let mut partial_name = name.to_os_string();
        partial_name.push(".unfinished");
        let partial = target.with_file_name(partial_name);
        let parent = parent_of(target);
        refuse_mount_point(target, parent, what)?;
        create_dirs_synced(parent)?;
        // Created here, not merely looked for: of two calls for one target, exactly one
        // makes the sibling, so neither removes the other's copy when it is dropped.
        match std::fs::create_dir(&partial) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::InvalidArgument(format!(
                    "{} exists: a {what} into {} was interrupted (or is still running); \
                     remove it, then try again",
                    partial.display(),
                    target.display()
                )));
            }
            Err(e) => return Err(Error::io(format!("creating {}", partial.display()), e)),
        }
        Ok(Unfinished {
            target,
            partial,
            armed: true,
        })
    }

    /// Where the new environment is written until it is finished.
    pub(crate) fn path(&self) -> &Path {
        &self.partial
    }

    /// The new environment is complete (its files synced): renames it to the target, and
    /// syncs the directory holding both so the rename survives a crash.
    ///
    /// # Errors
    /// I/O errors of the rename (the target gained files meanwhile, say), and the copy is
    /// removed; or of the directory's sync, and the copy is in place but its new name may
    /// not survive a crash.
    pub(crate) fn finished(mut self) -> Result<()> {
        // An empty target directory the caller made keeps its permissions (the rename
        // replaces it with the sibling, made with the process's defaults). Set last, so
        // a read-only mode does not stop the copy's own writes.
        if let Ok(metadata) = std::fs::metadata(self.target) {
            std::fs::set_permissions(&self.partial, metadata.permissions()).map_err(|e| {
                Error::io(
                    format!("giving {} its target's permissions", self.partial.display()),
                    e,
                )
            })?;
        }
        std::fs::rename(&self.partial, self.target).map_err(|e| {
            Error::io(
                format!(
                    "renaming {} to {}",
                    self.partial.display(),
                    self.target.display()
                ),
                e,
            )
        })?;
        self.armed = false;
        sync_dir(parent_of(self.target))
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| Error::io(format!("syncing {}", dir.display()), e))
}

/// [`crate::storage::file::create_dirs_synced`], its error naming `dir`.
fn create_dirs_synced(dir: &Path) -> Result<()> {
    crate::storage::file::create_dirs_synced(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))
}

/// Refuses an existing target on another file system than its parent (a mount point): the
/// copy is written beside the target and renamed onto it, which cannot cross file systems
/// nor replace a mount point. Refused before any work, not at the rename after all of it.
fn refuse_mount_point(target: &Path, parent: &Path, what: &str) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let Ok(target_metadata) = std::fs::symlink_metadata(target) else {
            return Ok(()); // absent: made by the rename, on the parent's file system
        };
        let parent_metadata = std::fs::metadata(parent)
            .map_err(|e| Error::io(format!("examining {}", parent.display()), e))?;
        if target_metadata.dev() != parent_metadata.dev() {
            return Err(Error::InvalidArgument(format!(
                "{what} target {} is a mount point (another file system than {}): the new \
                 environment is written beside the target and renamed onto it; give a \
                 directory inside it instead",
                target.display(),
                parent.display()
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = (target, parent, what);
    Ok(())
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if self.armed {
            // Best effort: the error being returned (or the panic) is what matters.
            let _ = std::fs::remove_dir_all(&self.partial);
        }
    }
}

/// Refuses a target that exists and is not an empty directory.
fn refuse_target(path: &Path, what: &str) -> Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("examining {}", path.display()), e)),
    };
    if !metadata.is_dir() {
        return Err(Error::InvalidArgument(format!(
            "{what} target {} exists and is not a directory",
            path.display()
        )));
    }
    let mut entries =
        std::fs::read_dir(path).map_err(|e| Error::io(format!("listing {}", path.display()), e))?;
    if entries.next().is_some() {
        return Err(Error::InvalidArgument(format!(
            "{what} target {} is not empty: {what} writes a new environment into a \
             directory that does not exist or is empty",
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_copy_for_one_target_is_refused_while_the_first_runs() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let target = dir.path().join("copy");
        let first = Unfinished::new(&target, "compaction").expect("the first call");
        assert!(first.path().is_dir(), "the sibling is made by the call");
        match Unfinished::new(&target, "compaction") {
            Err(Error::InvalidArgument(message)) => assert!(message.contains(".unfinished")),
            Err(other) => panic!("refused with the wrong kind: {other}"),
            Ok(_) => panic!("a second copy into the same sibling was let through"),
        }
        assert!(
            first.path().is_dir(),
            "the refused call left the first one's copy"
        );
        drop(first);
        assert!(!dir.path().join("copy.unfinished").exists());
        assert!(
            !target.exists(),
            "the target is never touched before the rename"
        );
        let again = Unfinished::new(&target, "compaction").expect("free again");
        std::fs::write(again.path().join("file"), b"x").expect("write");
        again.finished().expect("rename");
        assert!(target.join("file").is_file());
    }

    #[cfg(unix)]
    #[test]
    fn an_empty_target_directory_keeps_its_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temporary directory");
        let target = dir.path().join("copy");
        std::fs::create_dir(&target).expect("mkdir");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o710)).expect("chmod");
        let copy = Unfinished::new(&target, "restore").expect("new");
        std::fs::write(copy.path().join("file"), b"x").expect("write");
        copy.finished().expect("rename");
        let mode = std::fs::metadata(&target)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o710);
        assert!(target.join("file").is_file());
    }

    #[test]
    fn missing_ancestors_are_created() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let target = dir.path().join("a/b/copy");
        let copy = Unfinished::new(&target, "restore").expect("new");
        assert!(dir.path().join("a/b/copy.unfinished").is_dir());
        copy.finished().expect("rename");
        assert!(target.is_dir());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_target_on_another_file_system_than_its_parent_is_refused() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let parent = dir.path().parent().expect("a parent");
        refuse_mount_point(dir.path(), parent, "restore").expect("same file system");
        refuse_mount_point(&dir.path().join("absent"), parent, "restore").expect("absent");
        // /proc is always another file system than a temporary directory's.
        match refuse_mount_point(dir.path(), Path::new("/proc"), "restore") {
            Err(Error::InvalidArgument(message)) => assert!(message.contains("mount point")),
            other => panic!("not refused: {other:?}"),
        }
    }
}
