//! Backups: full and incremental, online; verify; restore.
//!
//! A **full backup** writes the pages of one snapshot as a data file, with a header that
//! declares them synced: a directory that opens as the environment was at that commit.
//! The writer is held only while the snapshot is taken (until every commit before it has
//! its journal record written), never while pages are copied, so writes go on.
//!
//! An **incremental backup** (for environments created with
//! [`crate::Options::incremental_backups`]) copies the journal bytes written since the last
//! backup, at their offsets, into files of the same names; the environment keeps its
//! journals until a backup has copied them. **Restore** lays a full backup and the
//! incrementals taken after it into an empty directory, and opening that directory
//! replays the journal bytes through normal recovery.
//!
//! Each backup ends with its manifest ([`MANIFEST_FILE`]), written after every other file
//! is durable: it lists each file's byte range and checksum and is checksummed itself, so a
//! backup cut short has no valid manifest and [`verify`] rejects it. The layout is in
//! `docs/format.md`.

use crate::env::{DATA_FILE, Environment, Options};
use crate::error::{Error, Result};
use crate::header::{BackupPoint, FORMAT_VERSION, Header};
use crate::journal::writer::journal_file_name;
use crate::limits::PAGE_SIZE_BYTES;
use crate::meta::{META_PAGE_NUMBER, Meta};
use crate::storage::FileStorage;
use crate::storage::{FileKind, Storage, StorageFile, read_exact_at, write_all_at};
use crate::txn::ReadTxn;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of a backup's manifest, its last file.
pub const MANIFEST_FILE: &str = "BACKUP";
/// First line of a manifest: what it is and its layout version.
const MANIFEST_MAGIC: &str = "hrafn-backup 1";
/// Bytes copied at a time.
const COPY_CHUNK_BYTES: usize = 1 << 20;

/// What a backup holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupKind {
    /// Every page of one commit.
    Full,
    /// The journal records since the previous backup of a chain.
    Incremental,
}

/// A place in the journal: a file and a byte offset in it (ordered as the journal is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct JournalPosition {
    /// The journal file's number.
    pub journal_number: u64,
    /// The byte offset in it.
    pub offset_bytes: u64,
}

/// One file of a backup: the bytes `offset_bytes..offset_bytes + size_bytes` of `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupFile {
    /// Path inside the backup (and inside a restored environment).
    pub name: String,
    /// Where the copied bytes start in the file (journal bytes keep their offsets).
    pub offset_bytes: u64,
    /// How many bytes were copied.
    pub size_bytes: u64,
    /// xxh3-64 of those bytes.
    pub checksum: u64,
}

/// A backup's manifest: what it holds and how it links to the backups before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Full or incremental.
    pub kind: BackupKind,
    /// The environment it was taken from (a chain never mixes environments).
    pub env_id: [u8; 16],
    /// The format version of the files.
    pub format_version: u32,
    /// The first transaction it adds (0 for a full backup: everything from the start).
    pub first_txn_id: u64,
    /// The last transaction it holds: a restore ends at this commit.
    pub last_txn_id: u64,
    /// Where its journal bytes start (for a full backup, equal to `end`).
    pub start: JournalPosition,
    /// Where the next incremental backup of the chain starts.
    pub end: JournalPosition,
    /// Chain checksum of the last transaction's journal record.
    pub chain_checksum: u64,
    /// Its files, in the order they are laid down.
    pub files: Vec<BackupFile>,
    /// How long the writer was held while the snapshot was taken (not stored).
    pub writer_held: Duration,
}

/// What a restore produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// The last transaction of the restored environment (the chain's last).
    pub last_txn_id: u64,
    /// Journal records recovery replayed (those of the incremental backups).
    pub records_replayed: u64,
    /// Backups laid down: one full, then the incrementals.
    pub backups: usize,
}

fn invalid(path: &str, reason: impl Into<String>) -> Error {
    Error::InvalidBackup {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |e| Error::io(context, e)
}

/// The commit a backup copies, with where the journal stood right after it.
struct Point<'env> {
    rtx: ReadTxn<'env>,
    /// The journal position and chain checksum after the snapshot's last record (none
    /// for a read-only environment, which has no journal writer).
    journal: Option<(JournalPosition, u64)>,
    writer_held: Duration,
}

impl Environment {
    /// Takes a full backup into directory `path` (created if missing; it must be empty),
    /// while writes go on: the copy is the last commit when the backup started. It holds
    /// that snapshot through the copy, as a long read transaction does, so newer page
    /// versions wait in scratch meanwhile: a long backup under heavy writes needs room
    /// there ([`Options::scratch_limit_bytes`]). An incremental backup holds none. With
    /// [`Options::incremental_backups`] it also starts a new chain: the next
    /// [`Environment::incremental_backup_to`] copies what is committed after it.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let (db, backup, restored) = (dir.path().join("db"), dir.path().join("b"), dir.path().join("r"));
    /// let env = hrafn::Environment::open(&db, hrafn::Options::default())?;
    /// let mut txn = env.begin_write()?;
    /// txn.open_tree("t")?.insert(b"k", b"v")?;
    /// txn.commit()?;
    /// let manifest = env.backup_to(&backup)?;
    /// assert_eq!(manifest.last_txn_id, 1);
    /// hrafn::backup::restore(&[&backup], &restored)?;
    /// let copy = hrafn::Environment::open(&restored, hrafn::Options::default())?;
    /// assert_eq!(copy.begin_read()?.open_tree("t")?.get(b"k")?, Some(&b"v"[..]));
    /// # Ok::<(), hrafn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `path` holds files; I/O errors writing the backup
    /// (the source is not changed); corruption of the meta page. Other pages are copied as
    /// they are, unchecked (free pages may hold anything): run [`Environment::check`]
    /// first, or `hrafn verify --deep` on the backup, to find damage before it is needed.
    pub fn backup_to(&self, path: impl AsRef<Path>) -> Result<Manifest> {
        self.backup_to_with_progress(path, BackupKind::Full, &mut |_, _| {})
    }

    /// Copies into directory `path` (created if missing; it must be empty) the journal
    /// records committed since the last backup, full or incremental. Restore a chain with
    /// [`restore`]: the full backup, then every incremental in order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless the environment was created with
    /// [`Options::incremental_backups`], or if `path` holds files; I/O errors.
    pub fn incremental_backup_to(&self, path: impl AsRef<Path>) -> Result<Manifest> {
        self.backup_to_with_progress(path, BackupKind::Incremental, &mut |_, _| {})
    }

    /// [`Environment::backup_to`] or [`Environment::incremental_backup_to`] (by `kind`),
    /// calling `progress(bytes_done, bytes_total)` as it copies. A backup that fails (or
    /// panics) once it has begun writing removes what it wrote, and the directory if it
    /// made it, so a retry into the same path is not refused as "not empty".
    ///
    /// # Errors
    /// As those.
    pub fn backup_to_with_progress(
        &self,
        path: impl AsRef<Path>,
        kind: BackupKind,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Manifest> {
        let path = path.as_ref();
        self.check_backup_target(path)?;
        let made = std::fs::symlink_metadata(path).is_err();
        let dest = FileStorage::new(path).map_err(io("creating the backup directory"))?;
        // Before the guard is armed, so that a refusal never removes what was there
        // (`backup_into` checks again, under the backup lock).
        refuse_used(&dest)?;
        let written = Written {
            dir: path,
            made,
            armed: false,
        };
        self.backup_claimed(&dest, kind, progress, Some(written))
    }

    /// A full backup of the live data only: [`Environment::compact_to`] into `path`
    /// (created if missing; it must be empty), then a manifest, so that [`verify`] and
    /// [`restore`] take it as any full backup. Smaller than [`Environment::backup_to`]
    /// when much was deleted, at the cost of a logical copy instead of a page copy. It
    /// starts no chain: it is an environment of its own (its own id; transactions and
    /// table record ids renumbered), so incremental backups never continue it. Use
    /// [`Environment::compacted_backup_with_progress`] for a progress bar.
    ///
    /// # Errors
    /// As [`Environment::compact_to`].
    pub fn compacted_backup_to(&self, path: impl AsRef<Path>) -> Result<Manifest> {
        self.compacted_backup_with_progress(path, |_| {})
    }

    /// [`Environment::compacted_backup_to`], calling `progress` as
    /// [`Environment::compact_to_with_progress`] does.
    ///
    /// # Errors
    /// As [`Environment::compact_to`].
    pub fn compacted_backup_with_progress(
        &self,
        path: impl AsRef<Path>,
        progress: impl FnMut(&crate::compact::CompactProgress<'_>),
    ) -> Result<Manifest> {
        let path = path.as_ref();
        self.check_backup_target(path)?;
        let shown = path.display().to_string();
        let options = self.inner.options.clone().incremental_backups(false);
        let report = self.compact_with_options(path, options, progress)?;
        let dest = FileStorage::existing(path).map_err(io("opening the compacted copy"))?;
        let header = crate::header::read_newest(&dest)?
            .ok_or_else(|| invalid(&shown, "the compacted copy has no header"))?;
        let mut names = vec![DATA_FILE.to_owned(), header.file_name().to_owned()];
        if dest.exists("journal").map_err(io("listing the copy"))? {
            let mut journals = dest.list("journal").map_err(io("listing the copy"))?;
            journals.sort();
            names.extend(journals.into_iter().map(|n| format!("journal/{n}")));
        }
        let mut files = Vec::with_capacity(names.len());
        for name in names {
            let file = dest
                .open(&name, FileKind::Data, false)
                .map_err(io(format!("opening the copy's {name}")))?;
            let size_bytes = file.len().map_err(io(format!("sizing {name}")))?;
            let checksum =
                checksum_range(&*file, 0, size_bytes).map_err(io(format!("reading {name}")))?;
            files.push(BackupFile {
                name,
                offset_bytes: 0,
                size_bytes,
                checksum,
            });
        }
        let end = JournalPosition {
            journal_number: header.journal_number,
            offset_bytes: header.journal_offset_bytes,
        };
        let manifest = Manifest {
            kind: BackupKind::Full,
            env_id: header.env_id,
            format_version: FORMAT_VERSION,
            first_txn_id: 0,
            last_txn_id: report.copy_txn_id,
            start: end,
            end,
            chain_checksum: header.chain_checksum,
            files,
            // Only the snapshot's begin: no writer is held.
            writer_held: Duration::ZERO,
        };
        write_manifest(&dest, &manifest)?;
        Ok(manifest)
    }

    /// [`Environment::backup_to`] or [`Environment::incremental_backup_to`] into any
    /// storage, calling `progress(bytes_done, bytes_total)` as it copies. Backups of one
    /// environment run one at a time (a second waits for the first), so `progress` must
    /// not start another.
    ///
    /// # Errors
    /// As those.
    pub fn backup_into(
        &self,
        dest: &dyn Storage,
        kind: BackupKind,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Manifest> {
        self.backup_claimed(dest, kind, progress, None)
    }

    /// [`Environment::backup_into`], with `cleanup` (of the directory `dest` is) armed
    /// once `dest` was found empty under the backup lock, and disarmed when the backup is
    /// complete: what `dest` holds from then on is this backup's, and a failure removes
    /// it while the lock is still held, before another backup may claim the directory.
    fn backup_claimed(
        &self,
        dest: &dyn Storage,
        kind: BackupKind,
        progress: &mut dyn FnMut(u64, u64),
        cleanup: Option<Written<'_>>,
    ) -> Result<Manifest> {
        // Checked under the lock: a backup into the same directory that took it first has
        // finished by then.
        let _one_at_a_time = self.inner.backup.lock();
        refuse_used(dest)?;
        // Declared after the lock, so it drops (and cleans up) before the lock is released.
        let mut written = cleanup.map(|w| Written { armed: true, ..w });
        let backup_point = self.inner.flush_book.lock().header.backup;
        if kind == BackupKind::Incremental && !backup_point.enabled {
            return Err(Error::InvalidArgument(
                "incremental backups need an environment created with \
                 Options::incremental_backups"
                    .into(),
            ));
        }
        let point = self.backup_point()?;
        let (journal, writer_held) = (point.journal, point.writer_held);
        let mut manifest = match kind {
            BackupKind::Full => write_full(self, &point, dest, progress)?,
            BackupKind::Incremental => {
                // An incremental copies journals, which stay until a backup takes them:
                // only the snapshot's position is needed, and holding the snapshot through
                // the copy would keep the flusher from writing newer pages meanwhile.
                let last_txn_id = point.rtx.txn_id();
                drop(point);
                write_incremental(self, last_txn_id, journal, backup_point, dest, progress)?
            }
        };
        manifest.writer_held = writer_held;
        for dir in ["", "journal"] {
            if dest.exists(dir).map_err(io("listing the backup"))? {
                dest.sync_dir(dir)
                    .map_err(io("syncing the backup directory"))?;
            }
        }
        write_manifest(dest, &manifest)?;
        if backup_point.enabled && journal.is_some() {
            self.move_backup_point(&manifest)?;
        }
        if let Some(written) = &mut written {
            written.armed = false;
        }
        Ok(manifest)
    }

    /// Refuses a backup directory inside this environment's directory (or the directory
    /// itself): the backup would go with what it backs up, and an in-place compaction
    /// would remove it. The environment is found as an ancestor of `path` holding a header
    /// with this environment's id. The backup calls that take a path check this first;
    /// call it before [`Environment::backup_into`] a storage of your own.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the environment's directory.
    pub fn check_backup_target(&self, path: &Path) -> Result<()> {
        let id = env_id(self);
        // The nearest ancestor that exists, resolved so that links count, then the rest
        // as written: missing directories are made as plain ones, so `..` after one goes
        // back up to where it was made.
        let mut rest = Vec::new();
        let mut at = path;
        let mut resolved = loop {
            if let Ok(resolved) = std::fs::canonicalize(at) {
                break resolved;
            }
            let (Some(last), Some(parent)) = (at.components().next_back(), at.parent()) else {
                return Ok(());
            };
            rest.push(last.as_os_str().to_owned());
            at = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
        };
        for name in rest.iter().rev() {
            if name == ".." {
                resolved.pop();
            } else {
                resolved.push(name);
            }
        }
        for dir in resolved.ancestors() {
            // A backup of this environment holds its id too, but is no environment: a
            // backup into it is refused as one into a used directory.
            if !dir.join(DATA_FILE).is_file() || dir.join(MANIFEST_FILE).exists() {
                continue;
            }
            let Ok(storage) = FileStorage::read_only(dir) else {
                continue;
            };
            if let Ok(Some(header)) = crate::header::read_newest(&storage)
                && header.env_id == id
            {
                return Err(Error::InvalidArgument(format!(
                    "{} is inside {}, a directory of this environment (or of a copy of it): \
                     back it up somewhere else",
                    path.display(),
                    dir.display()
                )));
            }
        }
        Ok(())
    }

    /// Waits until no transaction is in progress and every commit has its journal record
    /// written, then takes a snapshot and the journal position after it.
    fn backup_point(&self) -> Result<Point<'_>> {
        let inner = &self.inner;
        let started = Instant::now();
        if inner.journal.lock().is_none() {
            // Read-only: the snapshot is all there is.
            return Ok(Point {
                rtx: self.begin_read()?,
                journal: None,
                writer_held: Duration::ZERO,
            });
        }
        crate::txn::write::refuse_if_writing(inner)?;
        let core = inner.writer.lock();
        inner.check_poison()?;
        let last_txn_id = core.last_txn_id;
        crate::txn::write::wait_for_record(inner, last_txn_id)?;
        // The record is written; its state is published right after.
        while inner.state.load().txn_id != last_txn_id {
            inner.check_poison()?;
            std::thread::yield_now();
        }
        let rtx = self.begin_read()?;
        // The backup point moves past these records: with commits that skip the sync, a
        // power cut could otherwise take them from the source but not from the backup,
        // and the source would then reuse their transaction ids.
        crate::flush::sync_buffered_journal(
            inner,
            last_txn_id,
            "syncing the journal for a backup",
        )?;
        let journal = inner.journal.lock().as_ref().map(|j| j.position()).map(
            |(journal_number, offset_bytes, chain)| {
                (
                    JournalPosition {
                        journal_number,
                        offset_bytes,
                    },
                    chain,
                )
            },
        );
        drop(core);
        debug_assert_eq!(rtx.txn_id(), last_txn_id);
        Ok(Point {
            rtx,
            journal,
            writer_held: started.elapsed(),
        })
    }

    /// Records in the environment's header that a backup holds everything through
    /// `manifest`'s last transaction, and releases the journals kept for it.
    fn move_backup_point(&self, manifest: &Manifest) -> Result<()> {
        let inner = &self.inner;
        let mut book = inner.flush_book.lock();
        if book.header.backup.txn_id > manifest.last_txn_id {
            return Ok(()); // a later backup moved it already
        }
        let header = Header {
            revision: book.header.revision + 1,
            backup: BackupPoint {
                enabled: true,
                txn_id: manifest.last_txn_id,
                journal_number: manifest.end.journal_number,
                journal_offset_bytes: manifest.end.offset_bytes,
            },
            ..book.header
        };
        if let Err(error) = crate::header::write(&*inner.storage, &header) {
            inner.poison_with(&error);
            return Err(error);
        }
        book.header = header;
        drop(book);
        let released = inner
            .journal_index
            .lock()
            .release_backed_up(manifest.last_txn_id);
        for number in released {
            crate::flush::recycle_or_remove(
                &*inner.storage,
                &inner.options,
                &inner.journal_index,
                number,
            );
        }
        Ok(())
    }
}

/// What a backup into directory `dir` wrote, removed when dropped armed (the backup
/// failed): every entry, as the directory was empty when the backup began, and the
/// directory itself if the backup made it. Best effort: the backup's own error is what
/// the caller needs.
struct Written<'a> {
    dir: &'a Path,
    made: bool,
    armed: bool,
}

impl Drop for Written<'_> {
    fn drop(&mut self) {
        // A backup whose manifest is in place is complete, even if recording it in the
        // environment failed afterwards: the next incremental may start after it.
        if !self.armed || self.dir.join(MANIFEST_FILE).exists() {
            return;
        }
        if self.made {
            let _ = std::fs::remove_dir_all(self.dir);
            return;
        }
        for entry in std::fs::read_dir(self.dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let _ = match entry.file_type() {
                Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
        }
    }
}

/// Refuses a backup directory that holds anything.
fn refuse_used(dest: &dyn Storage) -> Result<()> {
    let listed = dest.list("").map_err(io("listing the backup directory"))?;
    let Some(first) = listed.first() else {
        return Ok(());
    };
    let interrupted = if listed.iter().any(|name| name == MANIFEST_FILE) {
        ""
    } else {
        "; with no BACKUP manifest in it, it may be a backup interrupted by a crash, which \
         is unusable: remove it and back up again"
    };
    Err(Error::InvalidArgument(format!(
        "the backup directory is not empty (it holds {first:?}){interrupted}"
    )))
}

fn env_id(env: &Environment) -> [u8; 16] {
    env.inner.flush_book.lock().header.env_id
}

/// Writes the snapshot's pages as `data.hrafn` and a header declaring them synced.
fn write_full(
    env: &Environment,
    point: &Point<'_>,
    dest: &dyn Storage,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Manifest> {
    let state = point.rtx.state();
    let meta = Meta::decode(crate::btree::PageSource::page(state, META_PAGE_NUMBER)?)?;
    let page_count = meta.next_page_number;
    let total_bytes = page_count * PAGE_SIZE_BYTES as u64;
    let file = dest
        .open(DATA_FILE, FileKind::Data, true)
        .map_err(io("creating the backup's data file"))?;
    let mut hasher = crate::checksum::Xxh3::new();
    let mut chunk = Vec::with_capacity(COPY_CHUNK_BYTES);
    let mut written = 0u64;
    for page_number in 0..page_count {
        match state.page_raw(page_number) {
            Some(bytes) => chunk.extend_from_slice(bytes),
            None => chunk.resize(chunk.len() + PAGE_SIZE_BYTES, 0),
        }
        if chunk.len() >= COPY_CHUNK_BYTES || page_number + 1 == page_count {
            hasher.update(&chunk);
            write_all_at(&*file, &chunk, written).map_err(io("writing the backup's data file"))?;
            written += chunk.len() as u64;
            chunk.clear();
            progress(written, total_bytes);
        }
    }
    file.sync_data()
        .map_err(io("syncing the backup's data file"))?;
    let (end, chain_checksum) = point.journal.unwrap_or((
        JournalPosition {
            journal_number: 1,
            offset_bytes: 0,
        },
        0,
    ));
    let header = Header {
        revision: 0,
        env_id: env_id(env),
        synced_txn_id: point.rtx.txn_id(),
        journal_number: end.journal_number,
        journal_offset_bytes: end.offset_bytes,
        chain_checksum,
        next_page_number: page_count,
        backup: BackupPoint::default(),
    };
    let header_bytes = header.encode();
    let header_file = dest
        .open(header.file_name(), FileKind::Header, true)
        .map_err(io("creating the backup's header"))?;
    write_all_at(&*header_file, &header_bytes, 0).map_err(io("writing the backup's header"))?;
    header_file
        .sync_data()
        .map_err(io("syncing the backup's header"))?;
    Ok(Manifest {
        kind: BackupKind::Full,
        env_id: header.env_id,
        format_version: FORMAT_VERSION,
        first_txn_id: 0,
        last_txn_id: point.rtx.txn_id(),
        start: end,
        end,
        chain_checksum,
        files: vec![
            BackupFile {
                name: DATA_FILE.to_owned(),
                offset_bytes: 0,
                size_bytes: written,
                checksum: hasher.digest(),
            },
            BackupFile {
                name: header.file_name().to_owned(),
                offset_bytes: 0,
                size_bytes: header_bytes.len() as u64,
                checksum: crate::checksum::xxh3_64(&header_bytes),
            },
        ],
        writer_held: Duration::ZERO,
    })
}

/// Copies the journal bytes from the backup point to the snapshot's position.
/// Copies the journal records after `from` up to `journal`, the position after
/// transaction `last_txn_id`'s record.
fn write_incremental(
    env: &Environment,
    last_txn_id: u64,
    journal: Option<(JournalPosition, u64)>,
    from: BackupPoint,
    dest: &dyn Storage,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Manifest> {
    let source = &*env.inner.storage;
    let (end, chain_checksum) = journal
        .ok_or_else(|| Error::InvalidArgument("an incremental backup needs the writer".into()))?;
    let start = JournalPosition {
        journal_number: from.journal_number,
        offset_bytes: from.journal_offset_bytes,
    };
    // The ranges first (sizes known), then the copy.
    let mut ranges = Vec::new();
    for number in start.journal_number..=end.journal_number {
        let name = journal_file_name(number);
        if !source
            .exists(&name)
            .map_err(io(format!("checking {name}")))?
        {
            // Retired, or never written: journals after the backup point are kept until a
            // backup takes them, so a missing one holds no record after it. A journal
            // lost to damage shows at restore, whose replay checks that transaction ids
            // and the chain checksum follow on.
            continue;
        }
        let file = source
            .open(&name, FileKind::JournalBuffered, false)
            .map_err(io(format!("opening {name}")))?;
        let from_bytes = if number == start.journal_number {
            start.offset_bytes
        } else {
            0
        };
        let to_bytes = if number == end.journal_number {
            end.offset_bytes
        } else {
            file.len().map_err(io(format!("sizing {name}")))?
        };
        if to_bytes > from_bytes {
            ranges.push((name, file, from_bytes, to_bytes));
        }
    }
    let total_bytes: u64 = ranges.iter().map(|r| r.3 - r.2).sum();
    let mut done_bytes = 0;
    let mut files = Vec::new();
    if !ranges.is_empty() {
        dest.create_dir("journal")
            .map_err(io("creating the backup's journal directory"))?;
    }
    for (name, file, from_bytes, to_bytes) in ranges {
        let out = dest
            .open(&name, FileKind::JournalBuffered, true)
            .map_err(io(format!("creating the backup's {name}")))?;
        let checksum = copy_range(&*file, &*out, from_bytes, to_bytes, &mut |n| {
            done_bytes += n;
            progress(done_bytes, total_bytes);
        })?;
        out.sync_data()
            .map_err(io(format!("syncing the backup's {name}")))?;
        files.push(BackupFile {
            name,
            offset_bytes: from_bytes,
            size_bytes: to_bytes - from_bytes,
            checksum,
        });
    }
    Ok(Manifest {
        kind: BackupKind::Incremental,
        env_id: env_id(env),
        format_version: FORMAT_VERSION,
        first_txn_id: from.txn_id + 1,
        last_txn_id,
        start,
        end,
        chain_checksum,
        files,
        writer_held: Duration::ZERO,
    })
}

/// Copies bytes `from..to` of `src` to the same offsets of `dst`; returns their xxh3.
fn copy_range(
    src: &dyn StorageFile,
    dst: &dyn StorageFile,
    from: u64,
    to: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let mut hasher = crate::checksum::Xxh3::new();
    let mut buf = vec![0u8; COPY_CHUNK_BYTES];
    let mut at = from;
    while at < to {
        let n = (to - at).min(COPY_CHUNK_BYTES as u64) as usize;
        read_exact_at(src, &mut buf[..n], at).map_err(io("reading for a backup"))?;
        hasher.update(&buf[..n]);
        write_all_at(dst, &buf[..n], at).map_err(io("writing a backup"))?;
        at += n as u64;
        progress(n as u64);
    }
    Ok(hasher.digest())
}

/// Checksums a byte range of `file` without copying it.
fn checksum_range(file: &dyn StorageFile, from: u64, to: u64) -> std::io::Result<u64> {
    let mut hasher = crate::checksum::Xxh3::new();
    let mut buf = vec![0u8; COPY_CHUNK_BYTES];
    let mut at = from;
    while at < to {
        let n = (to - at).min(COPY_CHUNK_BYTES as u64) as usize;
        read_exact_at(file, &mut buf[..n], at)?;
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hasher.digest())
}

// ---------------------------------------------------------------------------------------
// The manifest.

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Manifest {
    /// The manifest's text (see `docs/format.md`), its checksum line last.
    pub fn encode(&self) -> String {
        let kind = match self.kind {
            BackupKind::Full => "full",
            BackupKind::Incremental => "incremental",
        };
        let mut out = format!(
            "{MANIFEST_MAGIC}\nkind {kind}\nformat-version {}\nenv-id {}\nfirst-txn-id {}\n\
             last-txn-id {}\nstart {} {}\nend {} {}\nchain-checksum {:016x}\n",
            self.format_version,
            hex(&self.env_id),
            self.first_txn_id,
            self.last_txn_id,
            self.start.journal_number,
            self.start.offset_bytes,
            self.end.journal_number,
            self.end.offset_bytes,
            self.chain_checksum,
        );
        for f in &self.files {
            out.push_str(&format!(
                "file {} {} {} {:016x}\n",
                f.name, f.offset_bytes, f.size_bytes, f.checksum
            ));
        }
        let checksum = crate::checksum::xxh3_64(out.as_bytes());
        out.push_str(&format!("checksum {checksum:016x}\n"));
        out
    }

    /// Parses a manifest's text, checking its checksum line; `path` names it in errors.
    ///
    /// # Errors
    /// [`Error::InvalidBackup`] for anything but a whole, valid manifest.
    pub fn decode(text: &[u8], path: &str) -> Result<Manifest> {
        let bad = |reason: &str| invalid(path, format!("manifest: {reason}"));
        let text = std::str::from_utf8(text).map_err(|_| bad("not text"))?;
        let body_end = text
            .rfind("checksum ")
            .filter(|&at| at == 0 || text.as_bytes()[at - 1] == b'\n')
            .ok_or_else(|| bad("no checksum line: the backup did not finish"))?;
        let (body, last) = text.split_at(body_end);
        let stored = last
            .strip_prefix("checksum ")
            .and_then(|s| s.strip_suffix('\n'))
            // Exactly as written: 16 lowercase hex digits.
            .filter(|s| s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| bad("unreadable checksum line"))?;
        if crate::checksum::xxh3_64(body.as_bytes()) != stored {
            return Err(bad("checksum mismatch"));
        }
        let mut lines = body.lines();
        if lines.next() != Some(MANIFEST_MAGIC) {
            return Err(bad("not a Hrafn backup manifest of a known version"));
        }
        let mut field = |name: &str| -> Result<Vec<&str>> {
            let line = lines
                .next()
                .ok_or_else(|| bad(&format!("no {name} line")))?;
            let mut words = line.split(' ');
            if words.next() != Some(name) {
                return Err(bad(&format!("expected a {name} line, found {line:?}")));
            }
            Ok(words.collect())
        };
        let number = |words: &[&str], i: usize| -> Result<u64> {
            words
                .get(i)
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| bad("unreadable number"))
        };
        let kind = match field("kind")?.as_slice() {
            ["full"] => BackupKind::Full,
            ["incremental"] => BackupKind::Incremental,
            _ => return Err(bad("unknown kind")),
        };
        let format_version = u32::try_from(number(&field("format-version")?, 0)?)
            .map_err(|_| bad("format-version out of range"))?;
        let env_words = field("env-id")?;
        let env_hex = env_words.first().copied().unwrap_or("");
        let mut env_id = [0u8; 16];
        if env_hex.len() != 32 || !env_hex.is_ascii() {
            return Err(bad("unreadable env-id"));
        }
        for (i, byte) in env_id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&env_hex[i * 2..i * 2 + 2], 16)
                .map_err(|_| bad("unreadable env-id"))?;
        }
        let first_txn_id = number(&field("first-txn-id")?, 0)?;
        let last_txn_id = number(&field("last-txn-id")?, 0)?;
        let start = field("start")?;
        let start = JournalPosition {
            journal_number: number(&start, 0)?,
            offset_bytes: number(&start, 1)?,
        };
        let end = field("end")?;
        let end = JournalPosition {
            journal_number: number(&end, 0)?,
            offset_bytes: number(&end, 1)?,
        };
        let chain_checksum = field("chain-checksum")?
            .first()
            .and_then(|w| u64::from_str_radix(w, 16).ok())
            .ok_or_else(|| bad("unreadable chain-checksum"))?;
        let mut files = Vec::new();
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            let [_, name, offset, size, checksum] = words.as_slice() else {
                return Err(bad(&format!("unreadable line {line:?}")));
            };
            if words[0] != "file" || !safe_name(name) {
                return Err(bad(&format!("unreadable line {line:?}")));
            }
            files.push(BackupFile {
                name: (*name).to_owned(),
                offset_bytes: offset.parse().map_err(|_| bad("unreadable offset"))?,
                size_bytes: size.parse().map_err(|_| bad("unreadable size"))?,
                checksum: u64::from_str_radix(checksum, 16)
                    .map_err(|_| bad("unreadable checksum"))?,
            });
        }
        Ok(Manifest {
            kind,
            env_id,
            format_version,
            first_txn_id,
            last_txn_id,
            start,
            end,
            chain_checksum,
            files,
            writer_held: Duration::ZERO,
        })
    }
}

/// A file name a backup may hold: the data file, a header, or a journal, never a path
/// that leaves the directory.
fn safe_name(name: &str) -> bool {
    name == DATA_FILE
        || crate::header::HEADER_FILES.contains(&name)
        || name
            .strip_prefix("journal/")
            .and_then(crate::journal::writer::parse_journal_file_name)
            .is_some()
}

fn write_manifest(dest: &dyn Storage, manifest: &Manifest) -> Result<()> {
    let tmp = "BACKUP.tmp";
    let file = dest
        .open(tmp, FileKind::Header, true)
        .map_err(io("creating the backup manifest"))?;
    write_all_at(&*file, manifest.encode().as_bytes(), 0)
        .map_err(io("writing the backup manifest"))?;
    file.sync_data()
        .map_err(io("syncing the backup manifest"))?;
    dest.rename(tmp, MANIFEST_FILE)
        .map_err(io("naming the backup manifest"))?;
    dest.sync_dir("")
        .map_err(io("syncing the backup directory"))
}

// ---------------------------------------------------------------------------------------
// Verify and restore.

/// Checks one backup without restoring it: its manifest is whole and valid, and every file
/// it lists has exactly the bytes it lists. Returns the manifest.
///
/// # Errors
/// [`Error::InvalidBackup`] saying what is wrong; I/O errors.
pub fn verify(path: impl AsRef<Path>) -> Result<Manifest> {
    let shown = path.as_ref().display().to_string();
    let storage = FileStorage::read_only(path.as_ref())
        .map_err(|e| invalid(&shown, format!("cannot open the directory: {e}")))?;
    verify_storage(&storage, &shown)
}

/// [`verify`] on any storage; `shown` names it in errors.
///
/// # Errors
/// As [`verify`].
pub fn verify_storage(storage: &dyn Storage, shown: &str) -> Result<Manifest> {
    if !storage
        .exists(MANIFEST_FILE)
        .map_err(io("looking for the manifest"))?
    {
        return Err(invalid(
            shown,
            "no manifest: the backup did not finish (or this is not a backup)",
        ));
    }
    let file = storage
        .open(MANIFEST_FILE, FileKind::Header, false)
        .map_err(io("opening the manifest"))?;
    let len = file.len().map_err(io("sizing the manifest"))?;
    if len > 16 << 20 {
        return Err(invalid(shown, "manifest too large"));
    }
    let mut text = vec![0u8; len as usize];
    read_exact_at(&*file, &mut text, 0).map_err(io("reading the manifest"))?;
    let manifest = Manifest::decode(&text, shown)?;
    if manifest.format_version > FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            found: manifest.format_version,
            supported: FORMAT_VERSION,
        });
    }
    for f in &manifest.files {
        let bad = |reason: String| invalid(shown, format!("{}: {reason}", f.name));
        // A listed file that is missing makes the backup invalid; a device failing to
        // read one says nothing about the backup, and is an I/O error.
        let failed = |what: &str, e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::NotFound {
                bad(format!("cannot {what}: {e}"))
            } else {
                Error::io(format!("{shown}: {what} {}", f.name), e)
            }
        };
        let file = storage
            .open(&f.name, FileKind::Data, false)
            .map_err(|e| failed("open", e))?;
        let len = file.len().map_err(|e| failed("size", e))?;
        let end = f
            .offset_bytes
            .checked_add(f.size_bytes)
            .ok_or_else(|| bad("range out of bounds".into()))?;
        if len < end {
            return Err(bad(format!("{len} bytes, the manifest lists {end}")));
        }
        let checksum =
            checksum_range(&*file, f.offset_bytes, end).map_err(|e| failed("read", e))?;
        if checksum != f.checksum {
            return Err(bad("checksum mismatch".into()));
        }
    }
    let kind_files_ok = match manifest.kind {
        BackupKind::Full => manifest.files.iter().any(|f| f.name == DATA_FILE),
        BackupKind::Incremental => manifest
            .files
            .iter()
            .all(|f| f.name.starts_with("journal/")),
    };
    // Compared as `first - 1 > last`, so that no id read from the manifest overflows.
    if !kind_files_ok || manifest.first_txn_id.saturating_sub(1) > manifest.last_txn_id {
        return Err(invalid(
            shown,
            "manifest: files or transactions do not fit its kind",
        ));
    }
    Ok(manifest)
}

/// Whether `m` is a full backup that no incremental can continue: one taken read-only
/// records no journal position (its header says the journal starts afresh, yet it holds
/// transactions), so recovery would expect the records after its last transaction where
/// an incremental has those from the start.
fn starts_no_chain(m: &Manifest) -> bool {
    m.kind == BackupKind::Full
        && m.last_txn_id > 0
        && m.end
            == (JournalPosition {
                journal_number: 1,
                offset_bytes: 0,
            })
}

/// Checks a chain: each backup as [`verify`] does, the first full, each next one an
/// incremental of the same environment starting where the one before it ended (or
/// earlier) and ending no earlier.
///
/// # Errors
/// [`Error::InvalidBackup`] naming the backup and what is wrong.
pub fn verify_chain(storages: &[(&dyn Storage, String)]) -> Result<Vec<Manifest>> {
    let mut manifests: Vec<Manifest> = Vec::new();
    for (i, (storage, shown)) in storages.iter().enumerate() {
        let manifest = verify_storage(*storage, shown)?;
        match manifests.last() {
            None if manifest.kind != BackupKind::Full => {
                return Err(invalid(shown, "a chain starts with a full backup"));
            }
            None => {}
            Some(before) => {
                if manifest.kind != BackupKind::Incremental {
                    return Err(invalid(shown, "only incremental backups follow the first"));
                }
                if manifest.env_id != before.env_id {
                    return Err(invalid(shown, "taken from another environment"));
                }
                if starts_no_chain(before) {
                    return Err(invalid(
                        shown,
                        format!(
                            "backup {i} was taken read-only, which starts no chain: an \
                             incremental continues only a full backup taken by the writer"
                        ),
                    ));
                }
                // An incremental may overlap the one before it (when the environment could
                // not record that one's end, the next starts earlier): the journal bytes
                // of both are the same where they overlap, and recovery replays from the
                // full backup's position. A gap cannot be filled.
                if manifest.start > before.end
                    || manifest.first_txn_id.saturating_sub(1) > before.last_txn_id
                    || manifest.end < before.end
                    || manifest.last_txn_id < before.last_txn_id
                {
                    return Err(invalid(
                        shown,
                        format!(
                            "does not continue backup {} (which ends at transaction {}; this \
                             one starts at {}): a backup in between is missing",
                            i, before.last_txn_id, manifest.first_txn_id
                        ),
                    ));
                }
            }
        }
        manifests.push(manifest);
    }
    if manifests.is_empty() {
        return Err(Error::InvalidArgument("no backup to restore".into()));
    }
    Ok(manifests)
}

/// Restores a chain — a full backup, then incrementals in the order they were taken —
/// into directory `target` (created if missing; it must be empty, not a mount point, and
/// its parent writable). The chain is verified first; the files are laid down, and opening the
/// result replays the incrementals' journal records through normal recovery, then checks
/// its integrity. The restore is
/// written into the sibling directory `<target>.unfinished` and renamed to `target` once
/// complete, so `target` never holds a partial restore: one that fails leaves `target` as
/// it found it (absent, or empty), and a process killed meanwhile leaves the sibling, which
/// the next restore refuses until it is removed. The one exception: if syncing the parent
/// after the rename fails, the error is returned with the complete restore at `target`.
///
/// # Errors
/// [`Error::InvalidBackup`] for a backup or chain that does not verify;
/// [`Error::InvalidArgument`] if `target` holds files, is a mount point, or
/// `<target>.unfinished` exists; I/O
/// errors; corruption found by the integrity check.
pub fn restore(backups: &[impl AsRef<Path>], target: impl AsRef<Path>) -> Result<RestoreReport> {
    let mut opened = Vec::new();
    for path in backups {
        let shown = path.as_ref().display().to_string();
        let storage = FileStorage::read_only(path.as_ref())
            .map_err(|e| invalid(&shown, format!("cannot open the directory: {e}")))?;
        opened.push((storage, shown));
    }
    let chain: Vec<(&dyn Storage, String)> = opened
        .iter()
        .map(|(s, shown)| (s as &dyn Storage, shown.clone()))
        .collect();
    let path = target.as_ref();
    let unfinished = crate::compact::Unfinished::new(path, "restore")?;
    let target =
        FileStorage::new(unfinished.path()).map_err(io("creating the target directory"))?;
    let report = restore_into(&chain, Arc::new(target))?;
    unfinished.finished()?;
    Ok(report)
}

/// [`restore`] from and into any storage.
///
/// # Errors
/// As [`restore`].
pub fn restore_into(
    chain: &[(&dyn Storage, String)],
    target: Arc<dyn Storage>,
) -> Result<RestoreReport> {
    let manifests = verify_chain(chain)?;
    let listed = target
        .list("")
        .map_err(io("listing the target directory"))?;
    if !listed.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the restore target is not empty (it holds {:?})",
            listed[0]
        )));
    }
    target
        .create_dir("journal")
        .map_err(io("creating the journal directory"))?;
    for ((storage, shown), manifest) in chain.iter().zip(&manifests) {
        for f in &manifest.files {
            let kind = if f.name.starts_with("journal/") {
                FileKind::JournalBuffered
            } else {
                FileKind::Data
            };
            let src = storage
                .open(&f.name, kind, false)
                .map_err(io(format!("opening the backup's {}", f.name)))?;
            let dst = target
                .open(&f.name, kind, true)
                .map_err(io(format!("creating {}", f.name)))?;
            let copied = copy_range(
                &*src,
                &*dst,
                f.offset_bytes,
                f.offset_bytes + f.size_bytes,
                &mut |_| {},
            )?;
            // The chain was verified before: bytes that differ now (failing media, a copy
            // still being written) must not be laid down as the backup.
            if copied != f.checksum {
                return Err(invalid(
                    shown,
                    format!("{} changed while it was restored", f.name),
                ));
            }
            dst.sync_data().map_err(io(format!("syncing {}", f.name)))?;
        }
    }
    for dir in ["journal", ""] {
        target.sync_dir(dir).map_err(io("syncing the target"))?;
    }
    let last = manifests.last().expect("a chain is never empty");
    let env = Environment::open_with_storage(target, Options::default())?;
    let stats = env.stats();
    if stats.txn_id != last.last_txn_id {
        return Err(invalid(
            &chain[chain.len() - 1].1,
            format!(
                "restored to transaction {}, but the chain ends at {}",
                stats.txn_id, last.last_txn_id
            ),
        ));
    }
    env.check()?;
    Ok(RestoreReport {
        last_txn_id: stats.txn_id,
        records_replayed: stats.recovered_records,
        backups: manifests.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::sim::SimStorage;

    /// The text of a full backup's manifest of an empty data file, with each `(from, to)`
    /// of `changes` made and the checksum line made to fit.
    fn manifest_text(changes: &[(&str, &str)]) -> String {
        let manifest = Manifest {
            kind: BackupKind::Full,
            env_id: [7; 16],
            format_version: FORMAT_VERSION,
            first_txn_id: 0,
            last_txn_id: 5,
            start: JournalPosition::default(),
            end: JournalPosition::default(),
            chain_checksum: 0,
            files: vec![BackupFile {
                name: DATA_FILE.to_owned(),
                offset_bytes: 0,
                size_bytes: 0,
                checksum: crate::checksum::xxh3_64(&[]),
            }],
            writer_held: Duration::ZERO,
        };
        let text = manifest.encode();
        let mut body = text[..text.rfind("checksum ").expect("checksum line")].to_owned();
        for (from, to) in changes {
            assert!(body.contains(from), "{from} is in the manifest");
            body = body.replacen(from, to, 1);
        }
        let checksum = crate::checksum::xxh3_64(body.as_bytes());
        format!("{body}checksum {checksum:016x}\n")
    }

    /// A manifest's numbers are whatever its text says (its checksum is no secret): a
    /// format version past `u32` is refused, not wrapped into a known one, and the
    /// largest transaction id is checked without overflow.
    #[test]
    fn manifest_numbers_out_of_range_are_refused() {
        let wrapped = u64::from(FORMAT_VERSION) + (1 << 32);
        let version = manifest_text(&[(
            &format!("format-version {FORMAT_VERSION}\n"),
            &format!("format-version {wrapped}\n"),
        )]);
        assert!(Manifest::decode(version.as_bytes(), "m").is_err());
        let last = manifest_text(&[("last-txn-id 5\n", &format!("last-txn-id {}\n", u64::MAX))]);
        let decoded = Manifest::decode(last.as_bytes(), "m").expect("a valid manifest");
        assert_eq!(decoded.last_txn_id, u64::MAX);
        let storage = SimStorage::new(1);
        storage
            .open(DATA_FILE, FileKind::Data, true)
            .expect("create");
        let file = storage
            .open(MANIFEST_FILE, FileKind::Header, true)
            .expect("create");
        write_all_at(&*file, last.as_bytes(), 0).expect("write");
        let verified = verify_storage(&storage, "b").expect("its files are as listed");
        assert_eq!(verified.last_txn_id, u64::MAX);
    }

    /// A device failing to read a listed file is an I/O error, not an invalid backup; a
    /// listed file that is missing is an invalid backup.
    #[test]
    fn a_read_failure_is_an_io_error_and_a_missing_file_an_invalid_backup() {
        use crate::storage::sim::Fault;
        let bytes = vec![7u8; 8192];
        let checksum = crate::checksum::xxh3_64(&bytes);
        let empty = crate::checksum::xxh3_64(&[]);
        let text = manifest_text(&[(
            &format!("file {DATA_FILE} 0 0 {empty:016x}"),
            &format!("file {DATA_FILE} 0 8192 {checksum:016x}"),
        )]);
        let storage = SimStorage::new(2);
        storage.record_trace(true);
        for (name, content) in [(DATA_FILE, &bytes[..]), (MANIFEST_FILE, text.as_bytes())] {
            let file = storage.open(name, FileKind::Data, true).expect("create");
            write_all_at(&*file, content, 0).expect("write");
        }
        let start = storage.ops_count();
        verify_storage(&storage, "b").expect("a whole backup");
        let read_at = storage.trace()[start as usize..]
            .iter()
            .position(|l| l.contains("read") && l.contains(DATA_FILE))
            .expect("the data file is read") as u64;
        let again = storage.ops_count();
        storage.fail_at(again + read_at, Fault::Eio, false);
        let failed = verify_storage(&storage, "b");
        assert!(matches!(failed, Err(Error::Io { .. })), "{failed:?}");
        storage.remove(DATA_FILE).expect("remove");
        let missing = verify_storage(&storage, "b");
        assert!(
            matches!(missing, Err(Error::InvalidBackup { .. })),
            "{missing:?}"
        );
    }
}
