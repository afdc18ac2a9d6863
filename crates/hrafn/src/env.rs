//! The environment: opens or creates the files, recovers, owns the state, the writer, the
//! reader table and the background flusher.

use crate::error::{CorruptionSite, Error, Result};
use crate::flush::{FlushBook, Flusher};
use crate::header::{self, Header};
use crate::journal::{JournalIndex, JournalWriter, recovery};
use crate::limits::PAGE_SIZE_BYTES;
use crate::meta::{META_PAGE_NUMBER, Meta};
use crate::page::{PageKind, init, seal};
use crate::scratch::{Ptt, ScratchUsage};
use crate::storage::{
    FileKind, FileStorage, Mapping, ProcessReaders, Storage, StorageEvent, StorageFile,
    write_all_at,
};
use crate::sync::StateCell;
use crate::txn::merge::{self, Merger, WriteBatch};
use crate::txn::readers::ReaderTable;
use crate::txn::state::{DataView, State};
use crate::txn::{ReadTxn, WriteTxn, WriterCore};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Name of the data file.
pub const DATA_FILE: &str = "data.hrafn";

/// When a commit is durable: the environment's default ([`Options::durability`]), which one
/// transaction ([`crate::WriteTxn::set_durability`]) or batch
/// ([`crate::WriteBatch::durability`]) may override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A commit returns once its journal record is on disk (`O_DIRECT|O_DSYNC`).
    #[default]
    Immediate,
    /// Commits return after a buffered journal write. **Not crash-safe**: a power loss
    /// (not a process crash) can lose recent commits. What survives is still a consistent
    /// prefix, since the flusher syncs the journal before writing data pages.
    None,
}

/// Settings of an environment. Start from [`Options::default`] and change what you need
/// with the setters, each named after its field:
///
/// ```
/// use hrafn::{Durability, Options};
/// let options = Options::default()
///     .durability(Durability::None)
///     .journal_file_size_bytes(16 << 20);
/// assert_eq!(options.durability, Durability::None);
/// ```
///
/// New settings may come in any release, so it cannot be built field by field outside
/// this crate (`#[non_exhaustive]`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// When commits are durable.
    pub durability: Durability,
    /// Largest size of a preallocated journal file: the first is 1 MiB (or this, if
    /// smaller) and each rotation doubles the size up to this, so a small environment keeps
    /// small journals and a busy one rotates rarely. A larger record gets a file of its own
    /// size.
    pub journal_file_size_bytes: u64,
    /// Journal files the flusher thread keeps ready for rotation, counting retired ones,
    /// by zero-filling spares in the background, so that a commit filling its journal does
    /// not zero-fill and sync the next one itself (durable mode only; 0: no spares).
    pub journal_spare_files: usize,
    /// Committed page bytes waiting in scratch that trigger a flush (at most half of
    /// [`Options::scratch_limit_bytes`] in effect, so commits never fill scratch before a
    /// flush can make room).
    pub flush_threshold_bytes: u64,
    /// The flusher's tick: the sync rules (time, bytes) and the flush rules are checked
    /// this often, whatever wakes the flusher between ticks; a flush also runs after a
    /// tick with no commit since the last one.
    pub flush_interval_ms: u64,
    /// Longest time between data-file syncs (each sync lets journals be recycled).
    pub sync_interval_ms: u64,
    /// Data bytes written since the last sync that trigger a sync (4 GiB; a page written
    /// twice counts twice). A backstop: the interval and the journals waiting for a sync
    /// bound recovery, and a low value makes heavy random writes sync, and so write back
    /// pages, far more often.
    pub sync_threshold_bytes: u64,
    /// Most scratch held: page copies in memory plus scratch files on disk, each file
    /// counted whole (it lives while any copy in it does; files are an eighth of this, at
    /// most 64 MiB). Past it writes wait, then fail with [`Error::ScratchFull`], and the
    /// flusher makes no scratch file that would pass it (a file made while a write takes
    /// its room may pass it by at most that file). Only a reader that stays open while much
    /// is written makes scratch grow, so this is a disk-space limit in effect.
    pub scratch_limit_bytes: u64,
    /// Scratch memory past which the flusher moves committed page copies that must stay
    /// in scratch into memory-mapped scratch files (so long-lived readers cost disk, not
    /// memory).
    pub scratch_memory_bytes: u64,
    /// How long a write waits for the flusher to drain scratch before failing.
    pub scratch_wait_ms: u64,
    /// Most concurrent read transactions.
    pub readers_max: usize,
    /// Most merged write requests waiting at once; callers past it wait.
    pub merge_queue_max_requests: usize,
    /// Most requests merged into one transaction.
    pub merge_batch_max_requests: usize,
    /// Most batch bytes (keys and values) merged into one transaction. Since a submitted
    /// closure's size is known only once it ran, the scratch bytes of the pages the
    /// transaction changed count too: once they reach this size, the requests after the
    /// one that ran last wait for the next transaction.
    pub merge_batch_max_bytes: usize,
    /// How long a caller waits for room in the merge queue before [`Error::Timeout`].
    pub merge_wait_timeout_ms: u64,
    /// When the journal goes idle right after a merged transaction of several requests,
    /// how long the leader waits for the first of those callers to come back with its
    /// next request before it closes the transaction it is building (0: never waits).
    /// Without it, concurrent callers split into two groups that take turns, each
    /// journal write carrying only half of them.
    pub merge_linger_us: u64,
    /// Keep journals until a backup copies them, so that
    /// [`Environment::incremental_backup_to`] can copy what was journaled since the last
    /// backup. Read when the environment is created and stored in it; an existing
    /// environment keeps what it was created with. Journals then take disk until the next
    /// backup.
    pub incremental_backups: bool,
    /// Let the kernel read pages around each data-file page a reader faults in (its
    /// read-ahead). Turn it off (LMDB's `MDB_NORDAHEAD`) when the data file is much larger
    /// than memory and reads are scattered: each fault then reads one page instead of up
    /// to the device's read-ahead window, which would evict pages still wanted.
    pub read_ahead: bool,
}

impl Options {
    /// Sets [`Options::durability`].
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Options {
        self.durability = durability;
        self
    }

    /// Sets [`Options::journal_file_size_bytes`].
    #[must_use]
    pub fn journal_file_size_bytes(mut self, journal_file_size_bytes: u64) -> Options {
        self.journal_file_size_bytes = journal_file_size_bytes;
        self
    }

    /// Sets [`Options::journal_spare_files`].
    #[must_use]
    pub fn journal_spare_files(mut self, journal_spare_files: usize) -> Options {
        self.journal_spare_files = journal_spare_files;
        self
    }

    /// Sets [`Options::flush_threshold_bytes`].
    #[must_use]
    pub fn flush_threshold_bytes(mut self, flush_threshold_bytes: u64) -> Options {
        self.flush_threshold_bytes = flush_threshold_bytes;
        self
    }

    /// Sets [`Options::flush_interval_ms`].
    #[must_use]
    pub fn flush_interval_ms(mut self, flush_interval_ms: u64) -> Options {
        self.flush_interval_ms = flush_interval_ms;
        self
    }

    /// Sets [`Options::sync_interval_ms`].
    #[must_use]
    pub fn sync_interval_ms(mut self, sync_interval_ms: u64) -> Options {
        self.sync_interval_ms = sync_interval_ms;
        self
    }

    /// Sets [`Options::sync_threshold_bytes`].
    #[must_use]
    pub fn sync_threshold_bytes(mut self, sync_threshold_bytes: u64) -> Options {
        self.sync_threshold_bytes = sync_threshold_bytes;
        self
    }

    /// Sets [`Options::scratch_limit_bytes`].
    #[must_use]
    pub fn scratch_limit_bytes(mut self, scratch_limit_bytes: u64) -> Options {
        self.scratch_limit_bytes = scratch_limit_bytes;
        self
    }

    /// Sets [`Options::scratch_memory_bytes`].
    #[must_use]
    pub fn scratch_memory_bytes(mut self, scratch_memory_bytes: u64) -> Options {
        self.scratch_memory_bytes = scratch_memory_bytes;
        self
    }

    /// Sets [`Options::scratch_wait_ms`].
    #[must_use]
    pub fn scratch_wait_ms(mut self, scratch_wait_ms: u64) -> Options {
        self.scratch_wait_ms = scratch_wait_ms;
        self
    }

    /// Sets [`Options::readers_max`].
    #[must_use]
    pub fn readers_max(mut self, readers_max: usize) -> Options {
        self.readers_max = readers_max;
        self
    }

    /// Sets [`Options::merge_queue_max_requests`].
    #[must_use]
    pub fn merge_queue_max_requests(mut self, merge_queue_max_requests: usize) -> Options {
        self.merge_queue_max_requests = merge_queue_max_requests;
        self
    }

    /// Sets [`Options::merge_batch_max_requests`].
    #[must_use]
    pub fn merge_batch_max_requests(mut self, merge_batch_max_requests: usize) -> Options {
        self.merge_batch_max_requests = merge_batch_max_requests;
        self
    }

    /// Sets [`Options::merge_batch_max_bytes`].
    #[must_use]
    pub fn merge_batch_max_bytes(mut self, merge_batch_max_bytes: usize) -> Options {
        self.merge_batch_max_bytes = merge_batch_max_bytes;
        self
    }

    /// Sets [`Options::merge_wait_timeout_ms`].
    #[must_use]
    pub fn merge_wait_timeout_ms(mut self, merge_wait_timeout_ms: u64) -> Options {
        self.merge_wait_timeout_ms = merge_wait_timeout_ms;
        self
    }

    /// Sets [`Options::merge_linger_us`].
    #[must_use]
    pub fn merge_linger_us(mut self, merge_linger_us: u64) -> Options {
        self.merge_linger_us = merge_linger_us;
        self
    }

    /// Sets [`Options::incremental_backups`].
    #[must_use]
    pub fn incremental_backups(mut self, incremental_backups: bool) -> Options {
        self.incremental_backups = incremental_backups;
        self
    }

    /// Sets [`Options::read_ahead`].
    #[must_use]
    pub fn read_ahead(mut self, read_ahead: bool) -> Options {
        self.read_ahead = read_ahead;
        self
    }

    /// Whether the flusher makes spare journals ([`Options::journal_spare_files`]): only a
    /// durable journal gains from zero-filled files.
    pub(crate) fn makes_spare_journals(&self) -> bool {
        self.journal_spare_files > 0 && self.durability == Durability::Immediate
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            durability: Durability::Immediate,
            journal_file_size_bytes: 16 << 20,
            journal_spare_files: 2,
            flush_threshold_bytes: 8 << 20,
            flush_interval_ms: 100,
            sync_interval_ms: 10_000,
            sync_threshold_bytes: 4 << 30,
            scratch_limit_bytes: 4 << 30,
            scratch_memory_bytes: 512 << 20,
            scratch_wait_ms: 2_000,
            readers_max: 1024,
            merge_queue_max_requests: 4096,
            merge_batch_max_requests: 1024,
            merge_batch_max_bytes: 16 << 20,
            merge_wait_timeout_ms: 30_000,
            merge_linger_us: 50,
            incremental_backups: false,
            read_ahead: true,
        }
    }
}

/// The cause a merged closure's run reports when the closure returned the caller's own
/// error (`Environment::try_submit`), which travels beside the run.
const CALLER_ERROR_CAUSE: &str = "the request returned an error";

/// Counters and gauges of an environment (see [`Environment::stats`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Last committed transaction id.
    pub txn_id: u64,
    /// Last transaction whose changes are durable in the data file.
    pub synced_txn_id: u64,
    /// Scratch bytes held now, and the most held since open.
    pub scratch_used_bytes: u64,
    pub scratch_peak_bytes: u64,
    /// Pages in the current page translation table (committed, not yet flushed).
    pub ptt_page_count: u64,
    /// Registered read (and write) transactions.
    pub readers_active: usize,
    /// Commits that wrote a journal record.
    pub commits: u64,
    /// Journal records written, bytes written to journals (headers and padding
    /// included), uncompressed diff bytes, and those diff bytes as stored (compressed
    /// where that paid).
    pub journal_writes: u64,
    pub journal_bytes_written: u64,
    pub journal_payload_bytes: u64,
    pub journal_stored_bytes: u64,
    /// Page bytes changed by commits (before diffing and compression).
    pub dirty_page_bytes: u64,
    /// Flush passes that wrote pages, pages written, syncs done.
    pub flushes: u64,
    pub pages_flushed: u64,
    pub syncs: u64,
    /// Pages the flusher looked up to find what it could flush: its passes' cost, which
    /// follows what they flush, not the size of scratch.
    pub flush_pages_examined: u64,
    /// Data file size.
    pub data_file_size_bytes: u64,
    /// Merged write requests (see [`Environment::submit`]): transactions and requests.
    pub merged_transactions: u64,
    pub merged_requests: u64,
    /// Most merged requests ever waiting at once (bounded by the queue limit).
    pub merge_queue_peak: u64,
    /// Write transactions that began while the previous one's journal write was still in
    /// flight (pipelined commit).
    pub pipelined_commits: u64,
    /// Times a merge leader waited for callers of the previous merged transaction to come
    /// back ([`Options::merge_linger_us`]).
    pub merge_lingers: u64,
    /// Spare journal files made ahead of rotation ([`Options::journal_spare_files`]), and
    /// those the writer moved into.
    pub journal_spares_made: u64,
    pub journal_spares_used: u64,
    /// Journal files ready for the next rotation now: spares and retired journals.
    pub journal_files_ready: u64,
    /// Journal files the writer had to zero-fill itself because none was ready (the first
    /// one at open included).
    pub journals_filled_by_writer: u64,
    /// Most files the journal directory held at once since open (journals and spares).
    pub journal_files_peak: u64,
    /// Journal files holding records newer than the last sync: what a reopen would replay.
    /// The flusher syncs once more than 8 wait, so in steady state journal files on disk
    /// number at most this plus the ready and the retiring ones (see `docs/design.md`,
    /// "Steady state").
    pub journal_files_waiting: u64,
    /// Retired journal files still on disk: the flusher removes a few per tick of
    /// [`Options::flush_interval_ms`] rather than hundreds at once after a long reader.
    pub journal_files_retiring: u64,
    /// The oldest open read transaction: how long it has been open and the state it reads.
    pub oldest_reader_age_ms: Option<u64>,
    pub oldest_reader_txn_id: Option<u64>,
    /// Scratch bytes the current state does not reference: older page versions kept only
    /// for open readers (and the write transaction's own copies).
    pub scratch_pinned_bytes: u64,
    /// Scratch bytes held in memory, and scratch files on disk: how many, and their whole
    /// size (see [`Options::scratch_memory_bytes`]). Memory plus files is what
    /// [`Options::scratch_limit_bytes`] bounds.
    pub scratch_memory_bytes: u64,
    pub scratch_files: u64,
    pub scratch_file_bytes: u64,
    /// Journal records replayed when this environment was opened, and how long the open
    /// took, recovery included.
    pub recovered_records: u64,
    pub open_ms: u64,
    /// Commit latency since open (µs, the bound of its histogram bucket: within a factor
    /// of two): median and 99th percentile; `None` before the first commit.
    pub commit_p50_us: Option<u64>,
    pub commit_p99_us: Option<u64>,
    /// 99th percentile of journal record writes, flush passes and data-file syncs (µs).
    pub journal_write_p99_us: Option<u64>,
    pub flush_p99_us: Option<u64>,
    pub sync_p99_us: Option<u64>,
}

/// An environment is a directory: a path to a file (say, the data file itself) is a
/// mistake worth naming, not an I/O error about creating a directory.
fn refuse_file(path: &Path) -> Result<()> {
    if path.is_file() {
        return Err(Error::InvalidArgument(format!(
            "{} is a file; an environment is a directory",
            path.display()
        )));
    }
    Ok(())
}

/// Counters updated as the engine runs.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub commits: AtomicU64,
    pub journal_writes: AtomicU64,
    pub journal_bytes_written: AtomicU64,
    pub journal_payload_bytes: AtomicU64,
    pub journal_stored_bytes: AtomicU64,
    pub dirty_page_bytes: AtomicU64,
    pub flushes: AtomicU64,
    pub pages_flushed: AtomicU64,
    /// The durable header's synced transaction, for `stats` (which must not wait on the
    /// flush book, held through a whole pass and its syncs).
    pub synced_txn_id: AtomicU64,
    pub flush_pages_examined: AtomicU64,
    pub syncs: AtomicU64,
    pub merged_transactions: AtomicU64,
    pub merged_requests: AtomicU64,
    pub pipelined_commits: AtomicU64,
    pub merge_lingers: AtomicU64,
    pub recovered_records: AtomicU64,
    pub open_ms: AtomicU64,
    pub latencies: crate::metrics::Latencies,
}

/// Everything an environment owns; shared with the flusher thread.
pub(crate) struct EnvInner {
    pub storage: Arc<dyn Storage>,
    pub options: Options,
    pub state: StateCell<State>,
    pub readers: ReaderTable,
    pub writer: Mutex<WriterCore>,
    /// The thread holding `writer` for a write transaction (`txn::write::thread_token`),
    /// 0 when none does.
    pub writer_holder: AtomicU64,
    /// The journal writer (none when read-only); records are appended in transaction
    /// order (`journal_turn`).
    pub journal: Mutex<Option<JournalWriter>>,
    pub journal_turn: parking_lot::Condvar,
    /// Held through a backup: one that moves the backup point releases journals another
    /// may still be copying, which the writer then reuses under it.
    pub backup: Mutex<()>,
    /// The state of the last prepared transaction while its record is being written: the
    /// next write transaction builds on it (pipelined commit).
    pub pending_state: Mutex<Option<Arc<State>>>,
    /// Transactions prepared but not yet through their journal write.
    pub commits_in_flight: AtomicU64,
    /// Serializes publishing states (commit and flush both derive from the current one).
    pub publish: Mutex<()>,
    pub data_file: Arc<dyn StorageFile>,
    pub journal_index: Mutex<JournalIndex>,
    /// The journal file being written, for the flusher's write-ahead sync in buffered mode.
    pub journal_file: Mutex<Option<Arc<dyn StorageFile>>>,
    pub current_journal: AtomicU64,
    pub usage: Arc<ScratchUsage>,
    pub poison: Mutex<Option<String>>,
    pub counters: Counters,
    pub flush_book: Mutex<FlushBook>,
    /// Pages commits wrote that the flusher has not taken yet (`flush_log.rs`).
    pub flush_log: crate::flush_log::FlushLog,
    /// Allocated size of the data file (see `flush::grow_data_file`).
    pub data_allocated_bytes: AtomicU64,
    pub flusher: Flusher,
    /// Page tables a commit no longer needs that may hold the last references to copies
    /// a flush wrote out: the flusher thread drops them, so that freeing thousands of
    /// copies never lands on a commit.
    pub retired: Mutex<Vec<crate::scratch::Ptt>>,
    /// The buffer of the last record written, for the next commit to encode into (see
    /// `RecordBuf::reusing`); one is enough, as at most two records are in flight.
    pub record_spare: Mutex<Option<Vec<u8>>>,
    pub merger: Merger,
    pub access: Access,
}

/// How an environment holds its directory.
pub(crate) enum Access {
    /// The one writer: holds the writer's lock, and reads the table of reader processes
    /// (`None` where the storage is not shared between processes).
    Writer {
        process_readers: Option<Arc<dyn ProcessReaders>>,
        _lock: Box<dyn std::any::Any + Send + Sync>,
    },
    /// Read-only: holds a slot in the table of reader processes for its snapshot.
    ReadOnly { _slot: Option<ProcessSlot> },
}

/// What an open hands to [`EnvInner::new`]; the writer adds its journal afterwards.
struct Opened {
    storage: Arc<dyn Storage>,
    options: Options,
    state: State,
    data_file: Arc<dyn StorageFile>,
    header: Header,
    data_len: u64,
    writer: WriterCore,
    usage: Arc<ScratchUsage>,
    access: Access,
    recovered_records: u64,
    opening: std::time::Instant,
}

impl EnvInner {
    fn new(o: Opened) -> EnvInner {
        let inner = EnvInner {
            storage: o.storage,
            state: StateCell::from_pointee(o.state),
            readers: ReaderTable::new(o.options.readers_max),
            writer: Mutex::new(o.writer),
            writer_holder: AtomicU64::new(0),
            journal: Mutex::new(None),
            journal_turn: parking_lot::Condvar::new(),
            backup: Mutex::new(()),
            commits_in_flight: AtomicU64::new(0),
            pending_state: Mutex::new(None),
            publish: Mutex::new(()),
            data_file: o.data_file,
            journal_index: Mutex::new(JournalIndex::default()),
            journal_file: Mutex::new(None),
            current_journal: AtomicU64::new(0),
            usage: o.usage,
            poison: Mutex::new(None),
            counters: Counters {
                synced_txn_id: AtomicU64::new(o.header.synced_txn_id),
                ..Counters::default()
            },
            flush_book: Mutex::new(FlushBook::new(o.header, o.data_len)),
            flush_log: Default::default(),
            data_allocated_bytes: AtomicU64::new(o.data_len),
            flusher: Flusher::default(),
            retired: Mutex::new(Vec::new()),
            record_spare: Mutex::new(None),
            merger: Merger::default(),
            options: o.options,
            access: o.access,
        };
        let c = &inner.counters;
        c.recovered_records
            .store(o.recovered_records, Ordering::Relaxed);
        c.open_ms
            .store(o.opening.elapsed().as_millis() as u64, Ordering::Relaxed);
        inner
    }

    /// Refuses writes on a read-only environment.
    pub fn check_writable(&self) -> Result<()> {
        match self.access {
            Access::Writer { .. } => Ok(()),
            Access::ReadOnly { .. } => Err(Error::ReadOnly),
        }
    }

    /// The table of reader processes a writer must respect.
    pub fn process_readers(&self) -> Option<&dyn ProcessReaders> {
        match &self.access {
            Access::Writer {
                process_readers, ..
            } => process_readers.as_deref(),
            Access::ReadOnly { .. } => None,
        }
    }
}

impl EnvInner {
    /// Refuses writes after a failed sync or journal write.
    pub fn check_poison(&self) -> Result<()> {
        match &*self.poison.lock() {
            Some(cause) => Err(Error::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Marks the environment unusable for writes until reopened. Never retried: after a
    /// failed fsync the kernel may have dropped the dirty pages (PostgreSQL's fsyncgate).
    pub fn poison_with(&self, error: &Error) {
        self.poison_with_cause(error.to_string());
    }

    /// [`EnvInner::poison_with`] for a cause that is no [`Error`] (a panic).
    pub fn poison_with_cause(&self, cause: String) {
        let mut poison = self.poison.lock();
        if poison.is_none() {
            tracing::error!(%cause, "environment poisoned");
            *poison = Some(cause);
        }
    }
}

/// An open environment: a directory holding one Hrafn database.
///
/// `Environment` is `Send + Sync`; share it with `Arc`. Dropping it flushes and syncs
/// everything committed, then releases the directory lock.
pub struct Environment {
    pub(crate) inner: Arc<EnvInner>,
    flusher_thread: Option<std::thread::JoinHandle<()>>,
}

impl Environment {
    /// Opens the environment in directory `path`, creating it if it does not exist, and
    /// recovers from the journal.
    ///
    /// # Errors
    /// [`Error::Locked`] if another handle has it open; [`Error::Corruption`] if the files
    /// are damaged beyond a torn journal tail, or if a directory with no environment holds
    /// files that creating one would write over (a `LOCK` file with content, a data file);
    /// I/O errors.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Environment> {
        refuse_file(path.as_ref())?;
        let storage = FileStorage::new(path.as_ref())
            .map_err(|e| Error::io(format!("creating {}", path.as_ref().display()), e))?;
        Environment::open_with_storage(Arc::new(storage), options)
    }

    /// Opens an environment on any [`Storage`] (a simulated disk in tests).
    ///
    /// # Errors
    /// As [`Environment::open`].
    pub fn open_with_storage(storage: Arc<dyn Storage>, options: Options) -> Result<Environment> {
        let opening = std::time::Instant::now();
        validate_options(&options)?;
        let lock = storage.lock().map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Error::Locked
            } else {
                Error::io("locking", e)
            }
        })?;
        let process_readers = storage
            .process_readers()
            .map_err(|e| Error::io("opening the reader-process table", e))?;
        let header = match header::read_newest(&*storage)? {
            Some(h) => h,
            None => {
                refuse_unless_never_created(&*storage)?;
                create(&*storage, options.incremental_backups)?
            }
        };
        let data_file = open_data_file(&*storage)?;

        // Recovery reads and checks everything before it changes anything, so an open that
        // fails leaves every file as it was.
        let replayed = recovery::replay(&*storage, &header, &*data_file)?;
        recovery::validate(&replayed, &*data_file, |_, _| {})?;
        let phase = DataWritePhase::begin(process_readers.as_deref())?;
        if replayed.record_count > 0
            && let Some(oldest) = phase.oldest_process_reader()?
            && oldest < replayed.last_txn_id
        {
            // Writing the replayed pages would change pages under its snapshot.
            return Err(Error::Locked);
        }
        crate::scratch::spill::remove_leftovers(&*storage)
            .map_err(|e| Error::io("removing scratch files of an earlier process", e))?;
        if replayed.record_count > 0 {
            // Write-ahead rule: the records are durable before any page built from them.
            recovery::sync_journals(&*storage, header.journal_number)?;
            storage.note(StorageEvent::JournalDurable {
                txn_id: replayed.last_txn_id,
            });
        }
        // Empty the tail, write the replayed pages, sync both at once (when either wrote
        // anything: a clean open syncs nothing), then a header that no longer needs the
        // pages.
        let tail_cut = empty_data_tail(&*data_file, replayed.next_page_number)?;
        let data_pages_needed = replayed.next_page_number;
        if replayed.record_count > 0 {
            data_file
                .allocate(data_pages_needed * PAGE_SIZE_BYTES as u64)
                .map_err(|e| Error::io("growing the data file in recovery", e))?;
            for (page_number, page) in &replayed.pages {
                write_all_at(&*data_file, page, page_number * PAGE_SIZE_BYTES as u64)
                    .map_err(|e| Error::io("writing recovered pages", e))?;
            }
        }
        if tail_cut || replayed.record_count > 0 {
            data_file
                .sync_data()
                .map_err(|e| Error::io("syncing the data file in recovery", e))?;
        }
        let journal_index = Mutex::new(JournalIndex::default());
        let next_journal = replayed.highest_journal_number.max(header.journal_number) + 1;
        if next_journal > header::COUNTER_MAX {
            // A header that names it could not be read back.
            return Err(Error::corruption(
                CorruptionSite::Environment,
                format!("journal number {next_journal} is past what a header holds"),
            ));
        }
        // The header moves replay to the (still empty) next journal first; only then are
        // the old journals unnecessary, and the writer can start by reusing one of them.
        let new_header = Header {
            revision: header.revision + 1,
            env_id: header.env_id,
            synced_txn_id: replayed.last_txn_id,
            journal_number: next_journal,
            journal_offset_bytes: 0,
            chain_checksum: replayed.chain_checksum,
            next_page_number: replayed.next_page_number,
            backup: header.backup,
        };
        header::write(&*storage, &new_header)?;
        // Both header files' entries must be durable before journals are retired: an
        // earlier open may have created `header.b` and failed before syncing its entry,
        // and later writes to it would otherwise rest on a name a power cut can take.
        storage
            .sync_dir("")
            .map_err(|e| Error::io("syncing the environment directory", e))?;
        storage.note(StorageEvent::HeaderDurable {
            synced_txn_id: replayed.last_txn_id,
        });
        retire_old_journals(
            &*storage,
            next_journal,
            &options,
            &journal_index,
            replayed.last_txn_id,
            header.backup,
        )?;
        // Nothing is committed yet, so nothing waits behind the removals.
        crate::flush::remove_retired(&*storage, &journal_index, usize::MAX)?;
        phase.end()?;
        let durable = options.durability == Durability::Immediate;
        let journal = JournalWriter::start(
            Arc::clone(&storage),
            durable,
            options.journal_file_size_bytes,
            next_journal,
            replayed.chain_checksum,
            replayed.last_txn_id,
            &journal_index,
        )?;

        // Map the data file and check the meta page.
        let data_len = data_file
            .len()
            .map_err(|e| Error::io("sizing the data file", e))?;
        let page_count = data_len / PAGE_SIZE_BYTES as u64;
        let map = map_data_file(&*data_file, page_count * PAGE_SIZE_BYTES as u64, &options)?;
        let state = State {
            txn_id: replayed.last_txn_id,
            ptt: Ptt::new(),
            data: DataView::new(map, page_count, None),
        };
        let meta = {
            use crate::btree::PageSource;
            Meta::decode((&state).page(META_PAGE_NUMBER)?)?
        };
        // `recovery::validate` checked it against the size recovery grew the file to.
        debug_assert!(meta.next_page_number <= page_count);
        let journal_file = journal.current_file();
        let writer = WriterCore::new(replayed.last_txn_id, &state, &meta)?;
        let inner = Arc::new(EnvInner {
            journal: Mutex::new(Some(journal)),
            journal_file: Mutex::new(Some(journal_file)),
            current_journal: AtomicU64::new(next_journal),
            journal_index,
            ..EnvInner::new(Opened {
                storage,
                options,
                state,
                data_file,
                header: new_header,
                data_len,
                writer,
                usage: Arc::new(ScratchUsage::default()),
                access: Access::Writer {
                    process_readers,
                    _lock: lock,
                },
                recovered_records: replayed.record_count,
                opening,
            })
        });
        let flusher_thread = crate::flush::spawn(Arc::clone(&inner))?;
        Ok(Environment {
            inner,
            flusher_thread: Some(flusher_thread),
        })
    }

    /// Opens the environment in directory `path` read-only: recovery runs in memory and
    /// nothing in the directory changes but this process's slot in the `LOCK` file. It
    /// can open an environment another process has open for writing; it sees the state of
    /// the last commit whose record was in the journal at the time it opens (reopen to see
    /// later ones; a non-durable commit there may still be lost to a power cut), and while
    /// it is open that process's flusher keeps newer page versions in scratch (as for a
    /// long-lived reader).
    ///
    /// # Errors
    /// [`Error::Corruption`] when there is no environment in `path` or its files are
    /// damaged; [`Error::ReadersFull`] when 64 processes hold read-only snapshots;
    /// [`Error::Locked`] on a read-only mount (where `LOCK` cannot be written, so no reader
    /// slot can be taken) while a writer has it open, and such a reader keeps writers out
    /// while it is open; I/O errors. Writes on it fail with [`Error::ReadOnly`].
    pub fn open_read_only(path: impl AsRef<Path>, options: Options) -> Result<Environment> {
        refuse_file(path.as_ref())?;
        let storage = FileStorage::read_only(path.as_ref())
            .map_err(|e| Error::io(format!("opening {}", path.as_ref().display()), e))?;
        Environment::open_read_only_with_storage(Arc::new(storage), options)
    }

    /// [`Environment::open_read_only`] on any [`Storage`].
    ///
    /// # Errors
    /// As [`Environment::open_read_only`].
    pub fn open_read_only_with_storage(
        storage: Arc<dyn Storage>,
        options: Options,
    ) -> Result<Environment> {
        let opening = std::time::Instant::now();
        validate_options(&options)?;
        // Before the slot: claiming one creates the lock file, which a directory holding
        // no environment must not be left with.
        if header::read_newest(&*storage)?.is_none() {
            return Err(no_environment());
        }
        let slot = ProcessSlot::claim(&*storage)?;
        let usage = Arc::new(ScratchUsage::default());
        let (header, data_file, replayed, meta, runs) = recover_in_memory(&*storage)?;
        if let Some(slot) = &slot {
            slot.raise(replayed.last_txn_id)?;
        }
        // Every replayed page in the snapshot's table, as the writer's holds them: each page
        // of a run (an overflow value) names the run's buffer at its index, since a page
        // read alone (a backup's copy, a table's probe of an old id) must not fall through
        // to the data file's older version; and replayed pages the map calls free (a freed
        // record page) are there too.
        let mut ptt = Ptt::new();
        let entry =
            |buf: &Arc<crate::scratch::PageBuf>, index_in_buf: u32| crate::scratch::PttEntry {
                txn_id: replayed.last_txn_id,
                first_unflushed_txn_id: replayed.last_txn_id,
                buf: Arc::clone(buf),
                index_in_buf,
            };
        for (page_number, run) in runs {
            let buf = Arc::new(crate::scratch::PageBuf::copy_of(&run, &usage));
            let pages = (run.len() / PAGE_SIZE_BYTES) as u32;
            for (run_page, index_in_buf) in (page_number..).zip(0..pages) {
                ptt.insert(run_page, entry(&buf, index_in_buf));
            }
        }
        for (&page_number, page) in &replayed.pages {
            if page_number < meta.next_page_number && ptt.get(page_number).is_none() {
                let buf = Arc::new(crate::scratch::PageBuf::copy_of(page, &usage));
                ptt.insert(page_number, entry(&buf, 0));
            }
        }
        let data_len = data_file
            .len()
            .map_err(|e| Error::io("sizing the data file", e))?;
        // Pages past the snapshot's end are never read; the writer may trim them away.
        let page_count = (data_len / PAGE_SIZE_BYTES as u64).min(meta.next_page_number);
        let map = map_data_file(&*data_file, page_count * PAGE_SIZE_BYTES as u64, &options)?;
        let state = State {
            txn_id: replayed.last_txn_id,
            ptt,
            data: DataView::new(map, page_count, None),
        };
        let writer = WriterCore::new(replayed.last_txn_id, &state, &meta)?;
        let inner = Arc::new(EnvInner::new(Opened {
            storage,
            options,
            state,
            data_file,
            header,
            data_len,
            writer,
            usage,
            access: Access::ReadOnly { _slot: slot },
            recovered_records: replayed.record_count,
            opening,
        }));
        Ok(Environment {
            inner,
            flusher_thread: None,
        })
    }

    /// Starts a read transaction on the latest committed state. Never blocks on writers.
    ///
    /// # Errors
    /// [`Error::ReadersFull`] when `readers_max` transactions are open.
    pub fn begin_read(&self) -> Result<ReadTxn<'_>> {
        ReadTxn::begin(&self.inner)
    }

    /// Starts the write transaction, waiting for the previous one to end. Open readers
    /// never block it (it takes no reader slot).
    ///
    /// # Errors
    /// [`Error::Poisoned`] after a failed write or sync; corruption of the meta page.
    pub fn begin_write(&self) -> Result<WriteTxn<'_>> {
        self.inner.check_writable()?;
        WriteTxn::begin(&self.inner)
    }

    /// Applies `batch` atomically, merged with concurrent callers' requests into one
    /// transaction and one journal write, and returns once it is committed: durable with
    /// [`Durability::Immediate`]; with [`Durability::None`], visible to new readers and
    /// surviving a crash of the process, but not necessarily a power loss.
    ///
    /// # Errors
    /// [`Error::Conflict`] when an expectation of the batch fails (only this batch fails);
    /// [`Error::Timeout`] when the merge queue stays full; errors of the transaction.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.inner.check_writable()?;
        let started = std::time::Instant::now();
        let result = merge::write(&self.inner, batch);
        self.inner
            .counters
            .latencies
            .commit
            .record(started.elapsed());
        result
    }

    /// Runs `f` inside a merged write transaction and returns its value once the
    /// transaction is committed (as [`Environment::write`]). `f` may run more than once: the
    /// requests of a merged transaction in which another request failed run again, so it
    /// must not have side effects outside `wtx`. A request that fails when it
    /// ran first in its transaction (as it would alone) is not run again. A panic inside
    /// `f` fails only this request, with [`Error::RequestPanicked`]. For a closure with
    /// its own error type, see [`Environment::try_submit`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    /// let count = env.submit(|wtx| {
    ///     let mut tree = wtx.open_tree("t")?;
    ///     tree.insert(b"k", b"v")?;
    ///     Ok(tree.len())
    /// })?;
    /// assert_eq!(count, 1);
    /// # Ok::<(), hrafn::Error>(())
    /// ```
    ///
    /// # Errors
    /// The error `f` returned, or an error of the transaction.
    pub fn submit<T, F>(&self, f: F) -> Result<T>
    where
        F: Fn(&mut WriteTxn<'_>) -> Result<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        self.try_submit(f)
    }

    /// [`Environment::submit`] for a closure that returns the caller's own error type:
    /// its error aborts the request and comes back as it is; the engine's errors come back
    /// through `From<Error>`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    /// #[derive(Debug)]
    /// enum AppError {
    ///     Empty,
    ///     Db(hrafn::Error),
    /// }
    /// impl From<hrafn::Error> for AppError {
    ///     fn from(e: hrafn::Error) -> AppError {
    ///         AppError::Db(e)
    ///     }
    /// }
    /// let refused = env.try_submit(|wtx| -> Result<(), AppError> {
    ///     if wtx.open_tree("t")?.is_empty() {
    ///         return Err(AppError::Empty);
    ///     }
    ///     Ok(())
    /// });
    /// assert!(matches!(refused, Err(AppError::Empty)));
    /// # Ok::<(), hrafn::Error>(())
    /// ```
    ///
    /// # Errors
    /// The error `f` returned, or an error of the transaction converted with `From`.
    pub fn try_submit<T, E, F>(&self, f: F) -> std::result::Result<T, E>
    where
        F: Fn(&mut WriteTxn<'_>) -> std::result::Result<T, E> + Send + Sync + 'static,
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        self.inner.check_writable()?;
        // The merger runs closures of one type; the value and the caller's error travel
        // beside it. Each run starts by clearing the error: the last run decides.
        let value: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
        let failure: Arc<Mutex<Option<E>>> = Arc::new(Mutex::new(None));
        let (value_slot, failure_slot) = (Arc::clone(&value), Arc::clone(&failure));
        let run = move |wtx: &mut WriteTxn<'_>| -> Result<()> {
            *failure_slot.lock() = None;
            match f(wtx) {
                Ok(v) => {
                    *value_slot.lock() = Some(v);
                    Ok(())
                }
                Err(e) => {
                    *failure_slot.lock() = Some(e);
                    Err(Error::TransactionFailed {
                        cause: CALLER_ERROR_CAUSE.into(),
                    })
                }
            }
        };
        let started = std::time::Instant::now();
        let result = merge::submit(&self.inner, Box::new(run));
        self.inner
            .counters
            .latencies
            .commit
            .record(started.elapsed());
        match result {
            Ok(()) => Ok(value
                .lock()
                .take()
                .expect("a committed request ran to its value")),
            // The caller's error only if the last run returned it: a run that never
            // began (the environment failed meanwhile) leaves an earlier run's error in
            // the slot, and the engine's error is the one that stands.
            Err(Error::TransactionFailed { cause }) if cause == CALLER_ERROR_CAUSE => Err(failure
                .lock()
                .take()
                .expect("a run that returned the caller's error stored it")),
            Err(error) => Err(E::from(error)),
        }
    }

    /// Writes every committed page to the data file, syncs it and writes a header, so the
    /// journals can be recycled. Pages an open reader may still need stay in scratch. Every
    /// commit is durable when it returns `Ok`, non-durable ones too: their journal records
    /// are synced first, also when no page could be written.
    ///
    /// # Errors
    /// I/O errors (which poison the environment).
    pub fn flush_and_sync(&self) -> Result<()> {
        self.inner.check_writable()?;
        crate::flush::flush(&self.inner, true)
    }

    /// Checks the integrity of the latest committed state: page checksums, tree invariants
    /// and free-space accounting.
    ///
    /// # Errors
    /// [`Error::Corruption`] describing the first problem found.
    pub fn check(&self) -> Result<crate::check::CheckReport> {
        let rtx = self.begin_read()?;
        rtx.check()
    }

    /// The counters and gauges of [`Environment::stats`] in the Prometheus text exposition
    /// format (names prefixed `hrafn_`), ready to serve on a metrics endpoint.
    pub fn metrics_text(&self) -> String {
        crate::metrics::render(&self.stats(), &self.inner.counters.latencies)
    }

    /// Current counters.
    pub fn stats(&self) -> Stats {
        let inner = &self.inner;
        let state = inner.state.load();
        let c = &inner.counters;
        let index = inner.journal_index.lock();
        let (journal_spares_made, journal_spares_used, journals_filled_by_writer) =
            (index.spares_made, index.spares_used, index.filled_by_writer);
        let journal_files_ready = (index.spares.len() + index.recyclable.len()) as u64;
        let journal_files_waiting = index.active.len() as u64;
        let journal_files_retiring = index.removable.len() as u64;
        let journal_files_peak = index.files_peak;
        drop(index);
        let oldest = inner.readers.oldest_reader();
        let scratch_used_bytes = inner.usage.used_bytes();
        let current_bytes = state.ptt.len() as u64 * PAGE_SIZE_BYTES as u64;
        Stats {
            txn_id: state.txn_id,
            synced_txn_id: c.synced_txn_id.load(Ordering::Relaxed),
            scratch_used_bytes,
            scratch_peak_bytes: inner.usage.peak_bytes(),
            ptt_page_count: state.ptt.len() as u64,
            readers_active: inner.readers.active_count(),
            commits: c.commits.load(Ordering::Relaxed),
            journal_writes: c.journal_writes.load(Ordering::Relaxed),
            journal_bytes_written: c.journal_bytes_written.load(Ordering::Relaxed),
            journal_payload_bytes: c.journal_payload_bytes.load(Ordering::Relaxed),
            journal_stored_bytes: c.journal_stored_bytes.load(Ordering::Relaxed),
            dirty_page_bytes: c.dirty_page_bytes.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            pages_flushed: c.pages_flushed.load(Ordering::Relaxed),
            flush_pages_examined: c.flush_pages_examined.load(Ordering::Relaxed),
            syncs: c.syncs.load(Ordering::Relaxed),
            data_file_size_bytes: inner.data_allocated_bytes.load(Ordering::Relaxed),
            merged_transactions: c.merged_transactions.load(Ordering::Relaxed),
            merged_requests: c.merged_requests.load(Ordering::Relaxed),
            merge_queue_peak: inner.merger.queue_peak.load(Ordering::Relaxed),
            pipelined_commits: c.pipelined_commits.load(Ordering::Relaxed),
            merge_lingers: c.merge_lingers.load(Ordering::Relaxed),
            journal_spares_made,
            journal_spares_used,
            journal_files_ready,
            journals_filled_by_writer,
            journal_files_waiting,
            journal_files_retiring,
            journal_files_peak,
            oldest_reader_age_ms: oldest.map(|r| r.age_ms),
            oldest_reader_txn_id: oldest.map(|r| r.txn_id),
            scratch_pinned_bytes: scratch_used_bytes.saturating_sub(current_bytes),
            scratch_memory_bytes: inner.usage.memory_bytes(),
            scratch_files: inner.usage.file_count(),
            scratch_file_bytes: inner.usage.file_bytes(),
            recovered_records: c.recovered_records.load(Ordering::Relaxed),
            open_ms: c.open_ms.load(Ordering::Relaxed),
            commit_p50_us: c.latencies.commit.quantile_us(0.5),
            commit_p99_us: c.latencies.commit.quantile_us(0.99),
            journal_write_p99_us: c.latencies.journal_write.quantile_us(0.99),
            flush_p99_us: c.latencies.flush.quantile_us(0.99),
            sync_p99_us: c.latencies.sync.quantile_us(0.99),
        }
    }
}

impl Environment {
    /// Closes the environment: the flusher writes and syncs what is committed, the data
    /// file gives back its growth slack, and journals nothing needs any more are removed.
    /// Dropping the environment does the same but can only log a failure; `close` returns
    /// it. Open transactions borrow the environment, so none can outlive this call.
    ///
    /// # Errors
    /// [`Error::Poisoned`] if a write or sync failed earlier or during the final sync
    /// (the journal keeps every acknowledged commit: the next open replays it); I/O errors
    /// tidying up files.
    pub fn close(mut self) -> Result<()> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<()> {
        if self.inner.check_writable().is_err() {
            return Ok(()); // read-only: nothing to write back; the slot goes with `inner`
        }
        let Some(handle) = self.flusher_thread.take() else {
            return Ok(()); // closed already
        };
        self.inner.flusher.shutdown();
        if handle.join().is_err() {
            return Err(Error::Poisoned {
                cause: "the flusher thread panicked".into(),
            });
        }
        // The flusher's last pass may have failed without poisoning (a full disk growing
        // the data file): one more, whose error is returned.
        crate::flush::flush(&self.inner, true)?;
        // Journals that pass retired are only queued: close promises them gone.
        crate::flush::remove_retired(&*self.inner.storage, &self.inner.journal_index, usize::MAX)?;
        crate::flush::trim_data_file(&self.inner)?;
        crate::journal::spare::remove_ready(&*self.inner.storage, &self.inner.journal_index)?;
        remove_synced_journal(&self.inner)
    }
}

impl Drop for Environment {
    fn drop(&mut self) {
        if let Err(error) = self.shut_down() {
            tracing::warn!(%error, "closing the environment");
        }
    }
}

/// On a clean close, removes the journal file being written when everything in it is
/// synced to the data file (and no incremental backup still needs it): recovery needs
/// nothing from it, and a small environment then takes only its data file on disk.
fn remove_synced_journal(inner: &EnvInner) -> Result<()> {
    inner.check_poison()?;
    let book = inner.flush_book.lock();
    let last_txn_id = inner.state.load().txn_id;
    let backup = book.header.backup;
    if book.header.synced_txn_id != last_txn_id || (backup.enabled && backup.txn_id < last_txn_id) {
        return Ok(());
    }
    // Retired journals kept for reuse go too: reuse only pays while writing.
    let (recyclable, retired_while_current) = {
        let mut index = inner.journal_index.lock();
        let retired = index
            .sealed
            .filter(|sealed| !index.active.iter().any(|&(number, _)| number == *sealed));
        (std::mem::take(&mut index.recyclable), retired)
    };
    for number in recyclable {
        let name = crate::journal::writer::journal_file_name(number);
        inner
            .storage
            .remove(&name)
            .map_err(|e| Error::io(format!("removing {name}"), e))?;
    }
    let Some(journal) = inner.journal.lock().take() else {
        return Ok(());
    };
    let number = journal.journal_number();
    let name = crate::journal::writer::journal_file_name(number);
    drop(journal);
    *inner.journal_file.lock() = None;
    // A journal that filled up exactly is sealed and may already have been retired (kept
    // for reuse, and so removed above, or removed) while still the writer's current one.
    if retired_while_current != Some(number) {
        inner
            .storage
            .remove(&name)
            .map_err(|e| Error::io(format!("removing {name}"), e))?;
    }
    inner
        .storage
        .sync_dir("journal")
        .map_err(|e| Error::io("syncing the journal directory", e))
}

/// Pages a new data file starts with.
const CREATED_DATA_PAGES: u64 = 16;

/// Maps the data file's first `len_bytes`, advised as [`Options::read_ahead`] asks.
pub(crate) fn map_data_file(
    file: &dyn StorageFile,
    len_bytes: u64,
    options: &Options,
) -> Result<Arc<dyn Mapping>> {
    let map = file
        .map(len_bytes)
        .map_err(|e| Error::io("mapping the data file", e))?;
    if !options.read_ahead {
        map.advise_random()
            .map_err(|e| Error::io("advising the data file's mapping", e))?;
    }
    Ok(map)
}

/// Creates the files of a new environment. The header is written last, through a
/// temporary file and a rename, so a crash during creation leaves no header and the next
/// open starts over (after [`refuse_unless_never_created`] has shown that nothing but
/// what creation writes is there).
fn create(storage: &dyn Storage, incremental_backups: bool) -> Result<Header> {
    let io = |what: &'static str| move |e| Error::io(what, e);
    storage
        .create_dir("journal")
        .map_err(io("creating the journal directory"))?;
    for name in storage.list("journal").map_err(io("listing journals"))? {
        storage
            .remove(&format!("journal/{name}"))
            .map_err(io("removing a stale journal"))?;
    }
    if storage
        .exists(DATA_FILE)
        .map_err(io("checking the data file"))?
    {
        storage
            .remove(DATA_FILE)
            .map_err(io("removing a stale data file"))?;
    }
    let data = storage
        .open(DATA_FILE, FileKind::Data, true)
        .map_err(io("creating the data file"))?;
    data.allocate(PAGE_SIZE_BYTES as u64 * CREATED_DATA_PAGES)
        .map_err(io("allocating the data file"))?;
    write_all_at(&*data, &empty_meta_page(), 0).map_err(io("writing the meta page"))?;
    data.sync_data().map_err(io("syncing the data file"))?;
    // The data file's and the journal directory's entries must be durable before a header
    // can name them: a power cut could otherwise keep the header and lose them.
    storage
        .sync_dir("")
        .map_err(io("syncing the environment directory"))?;
    storage
        .sync_dir("journal")
        .map_err(io("syncing the journal directory"))?;
    let header = Header {
        revision: 0,
        env_id: random_id(),
        synced_txn_id: 0,
        journal_number: 1,
        journal_offset_bytes: 0,
        chain_checksum: 0,
        next_page_number: 1,
        backup: crate::header::BackupPoint {
            enabled: incremental_backups,
            txn_id: 0,
            journal_number: 1,
            journal_offset_bytes: 0,
        },
    };
    let tmp = "header.a.tmp";
    let file = storage
        .open(tmp, FileKind::Header, true)
        .map_err(io("creating the header"))?;
    write_all_at(&*file, &header.encode(), 0).map_err(io("writing the header"))?;
    file.sync_data().map_err(io("syncing the header"))?;
    storage
        .rename(tmp, header.file_name())
        .map_err(io("renaming the header"))?;
    storage
        .sync_dir("")
        .map_err(io("syncing the environment directory"))?;
    Ok(header)
}

/// Most reader slots: the table is allocated whole at open (16 bytes a slot).
const READERS_MAX_LIMIT: usize = 1 << 20;
/// Most spare journals: each takes a journal file of disk, made at once.
const JOURNAL_SPARE_FILES_LIMIT: usize = 64;
/// Longest linger: the transaction's own callers wait through it (1 s).
const MERGE_LINGER_US_LIMIT: u64 = 1_000_000;

/// Refuses options that cannot work, naming the option, so that none fails later (a
/// panic, a hang, a disk filled with spares).
fn validate_options(options: &Options) -> Result<()> {
    let refuse = |what: String| Err(Error::InvalidArgument(what));
    if options.readers_max == 0 || options.readers_max > READERS_MAX_LIMIT {
        return refuse(format!(
            "readers_max is {}; it must be between 1 and {READERS_MAX_LIMIT}",
            options.readers_max
        ));
    }
    if options.journal_file_size_bytes < 64 * 1024 {
        return refuse(format!(
            "journal_file_size_bytes is {}; it must be at least 64 KiB",
            options.journal_file_size_bytes
        ));
    }
    if options.journal_spare_files > JOURNAL_SPARE_FILES_LIMIT {
        return refuse(format!(
            "journal_spare_files is {}; it must be at most {JOURNAL_SPARE_FILES_LIMIT}",
            options.journal_spare_files
        ));
    }
    for (name, value) in [
        ("merge_queue_max_requests", options.merge_queue_max_requests),
        ("merge_batch_max_requests", options.merge_batch_max_requests),
        // 0 would make every merged transaction full before its first request runs.
        ("merge_batch_max_bytes", options.merge_batch_max_bytes),
    ] {
        if value == 0 {
            return refuse(format!("{name} is 0; it must be positive"));
        }
    }
    if options.merge_linger_us > MERGE_LINGER_US_LIMIT {
        return refuse(format!(
            "merge_linger_us is {}; it must be at most {MERGE_LINGER_US_LIMIT} (the callers \
             of the transaction being built wait through it)",
            options.merge_linger_us
        ));
    }
    Ok(())
}

/// Makes the data file read as zeros from page `next_page_number` (the recovered
/// high-water mark) on, keeping its length: cut there and grown back; returns whether it
/// cut anything, which the caller then syncs before any commit relies on it. A commit
/// diffs a page it takes from past the mark against zeros (`docs/format.md`, "Payload:
/// page diffs"). The engine never writes past the durable mark (the flusher syncs the
/// journal before it writes a page), so this only clears what something else left there
/// (an older version, a tool, damage), but it makes the rule hold without depending on
/// how the file got its tail.
fn empty_data_tail(data_file: &dyn StorageFile, next_page_number: u64) -> Result<bool> {
    let io = |what: &'static str| move |e| Error::io(what, e);
    let len_bytes = data_file.len().map_err(io("sizing the data file"))?;
    let kept_bytes = next_page_number * PAGE_SIZE_BYTES as u64;
    if len_bytes <= kept_bytes {
        return Ok(false);
    }
    data_file
        .truncate(kept_bytes)
        .map_err(io("cutting the data file's unused tail"))?;
    data_file
        .allocate(len_bytes)
        .map_err(io("growing the data file back"))?;
    Ok(true)
}

fn open_data_file(storage: &dyn Storage) -> Result<Arc<dyn StorageFile>> {
    storage
        .open(DATA_FILE, FileKind::Data, false)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::corruption(CorruptionSite::Environment, "data file missing")
            }
            _ => Error::io("opening the data file", e),
        })
}

/// The writer's data-write phase (see `storage/lock_file.rs`): reader processes that
/// claim a slot wait for it to end. Ends on drop if not ended explicitly.
pub(crate) struct DataWritePhase<'a> {
    readers: Option<&'a dyn ProcessReaders>,
}

impl<'a> DataWritePhase<'a> {
    pub(crate) fn begin(readers: Option<&'a dyn ProcessReaders>) -> Result<DataWritePhase<'a>> {
        if let Some(readers) = readers {
            readers
                .begin_data_writes()
                .map_err(|e| Error::io("marking data writes in the LOCK file", e))?;
        }
        Ok(DataWritePhase { readers })
    }

    /// The oldest snapshot a reader process holds (read inside the phase, so a reader
    /// that claims its slot later waits for the phase to end).
    pub(crate) fn oldest_process_reader(&self) -> Result<Option<u64>> {
        match self.readers {
            Some(readers) => readers
                .oldest()
                .map_err(|e| Error::io("reading the reader-process table", e)),
            None => Ok(None),
        }
    }

    pub(crate) fn end(mut self) -> Result<()> {
        match self.readers.take() {
            Some(readers) => readers
                .end_data_writes()
                .map_err(|e| Error::io("marking data writes in the LOCK file", e)),
            None => Ok(()),
        }
    }
}

impl Drop for DataWritePhase<'_> {
    fn drop(&mut self) {
        if let Some(readers) = self.readers {
            // An error path: a reader process waits for the writer to end the phase or die.
            let _ = readers.end_data_writes();
        }
    }
}

/// A read-only environment's slot in the table of reader processes; freed on drop.
pub(crate) struct ProcessSlot {
    readers: Arc<dyn ProcessReaders>,
    slot: usize,
}

impl ProcessSlot {
    /// Claims a slot before anything is read (`None` where the storage is not shared
    /// between processes), at transaction 0 until the snapshot is known, and waits for a
    /// data-write phase that may have missed it.
    fn claim(storage: &dyn Storage) -> Result<Option<ProcessSlot>> {
        let Some(readers) = storage.process_readers().map_err(|e| match e.kind() {
            // A read-only mount, where a reader keeps writers out: one is in.
            std::io::ErrorKind::WouldBlock => Error::Locked,
            _ => Error::io("opening the reader-process table", e),
        })?
        else {
            return Ok(None);
        };
        let slot = readers.claim(0).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock => Error::ReadersFull {
                readers_max: crate::storage::lock_file::PROCESS_READERS_MAX,
            },
            _ => Error::io("claiming a reader-process slot", e),
        })?;
        let slot = ProcessSlot { readers, slot };
        slot.readers
            .wait_for_data_writes()
            .map_err(|e| Error::io("waiting for the writer's data writes", e))?;
        Ok(Some(slot))
    }

    fn raise(&self, txn_id: u64) -> Result<()> {
        self.readers
            .raise(self.slot, txn_id)
            .map_err(|e| Error::io("raising a reader-process slot", e))
    }
}

impl Drop for ProcessSlot {
    fn drop(&mut self) {
        self.readers.release(self.slot);
    }
}

/// What an in-memory recovery found.
type InMemory = (
    Header,
    Arc<dyn StorageFile>,
    recovery::Replayed,
    Meta,
    Vec<(u64, Vec<u8>)>,
);

/// A read-only open of a directory without either header file.
fn no_environment() -> Error {
    Error::corruption(
        CorruptionSite::Environment,
        "no environment here: header.a and header.b are missing",
    )
}

/// Recovery without writing: replays and validates, keeping the replayed pages in use.
/// A writer in another process may sync meanwhile and retire the journals being read (the
/// header's revision tells), or be appending the record at the end of the log (which can
/// look like a hole for a moment): then recovery starts over. Damage that stays fails
/// every attempt.
fn recover_in_memory(storage: &dyn Storage) -> Result<InMemory> {
    /// Attempts while the header keeps changing.
    const ATTEMPTS: u32 = 100;
    /// Attempts that fail with the same header before the error is believed.
    const FAILED_ATTEMPTS: u32 = 5;
    let mut attempt = 0;
    let mut failed = 0;
    loop {
        attempt += 1;
        let Some(header) = header::read_newest(storage)? else {
            return Err(no_environment());
        };
        let recovered = open_data_file(storage).and_then(|data_file| {
            let replayed = recovery::replay(storage, &header, &*data_file)?;
            let mut runs = Vec::new();
            let meta = recovery::validate(&replayed, &*data_file, |page_number, run| {
                runs.push((page_number, run));
            })?;
            Ok((data_file, replayed, meta, runs))
        });
        let unchanged =
            header::read_newest(storage)?.is_some_and(|h| h.revision == header.revision);
        match recovered {
            Ok((data_file, replayed, meta, runs)) if unchanged => {
                return Ok((header, data_file, replayed, meta, runs));
            }
            Err(e) => {
                failed += u32::from(unchanged);
                if failed == FAILED_ATTEMPTS || attempt >= ATTEMPTS {
                    return Err(e);
                }
            }
            Ok(_) if attempt >= ATTEMPTS => {
                return Err(Error::Timeout {
                    what: format!(
                        "a moment between the writer's syncs to read the journals \
                         ({ATTEMPTS} attempts)"
                    ),
                    waited_ms: 0,
                });
            }
            Ok(_) => {}
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// With no header, the directory is new or holds what a creation that never finished left:
/// an empty journal directory, a data file holding only the empty meta page (or part of
/// it), `header.a.tmp`, and a blank `header.b`. Anything more is an environment that lost its headers: open refuses
/// rather than creating a new environment over it.
///
/// # Errors
/// [`Error::Corruption`] naming what the directory holds; I/O errors.
fn refuse_unless_never_created(storage: &dyn Storage) -> Result<()> {
    let io = |what: &'static str| move |e| Error::io(what, e);
    let listed = |dir: &str| match storage.list(dir) {
        Ok(names) => Ok(names),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io(format!("listing {dir:?}"), e)),
    };
    // A blank `header.b` (its first write failed) is no evidence: `read_newest` only
    // reports no header when `header.b` is blank or absent.
    let mut found = Vec::new();
    let journals = listed("journal")?.len();
    if journals > 0 {
        found.push(format!("{journals} file(s) in journal/"));
    }
    let scratch = listed(crate::scratch::spill::SCRATCH_DIR)?
        .iter()
        .filter(|name| crate::scratch::spill::is_scratch_file_name(name))
        .count();
    if scratch > 0 {
        found.push(format!("{scratch} scratch file(s)"));
    }
    if storage
        .exists(DATA_FILE)
        .map_err(io("checking the data file"))?
    {
        let data = storage
            .open(DATA_FILE, FileKind::Data, false)
            .map_err(io("opening the data file"))?;
        let len = data.len().map_err(io("sizing the data file"))?;
        if !holds_only_an_empty_meta_page(&*data, len)? {
            found.push(format!("a data file of {len} bytes with content"));
        }
    }
    // Nothing is written into `LOCK` until the first data write after creation: one with
    // content is another program's file, or the lock of an environment whose other files
    // are gone, and writing the writer's generation into it would change its bytes.
    let lock_file = crate::storage::lock_file::LOCK_FILE;
    if storage.exists(lock_file).map_err(io("checking LOCK"))? {
        let len = storage
            .open(lock_file, FileKind::Data, false)
            .and_then(|file| file.len())
            .map_err(io("sizing LOCK"))?;
        if len > 0 {
            found.push(format!(
                "a {lock_file} file of {len} bytes (another program's? remove it if none uses it)"
            ));
        }
    }
    if found.is_empty() {
        return Ok(());
    }
    Err(Error::corruption(
        CorruptionSite::Environment,
        format!(
            "header.a and header.b are missing, but the directory holds {}; refusing to \
             create a new environment over it",
            found.join(", ")
        ),
    ))
}

/// Whether a data file is what an unfinished creation leaves: at most its first
/// allocation, holding zeros or the meta page of an empty environment.
fn holds_only_an_empty_meta_page(data: &dyn StorageFile, len: u64) -> Result<bool> {
    if len > CREATED_DATA_PAGES * PAGE_SIZE_BYTES as u64 {
        return Ok(false);
    }
    let mut bytes = vec![0u8; len as usize];
    crate::storage::read_exact_at(data, &mut bytes, 0)
        .map_err(|e| Error::io("reading the data file", e))?;
    let (first, rest) = bytes.split_at(PAGE_SIZE_BYTES.min(bytes.len()));
    // Creation's only write may be torn: each sector is zeros or what creation wrote.
    let sector = crate::limits::SECTOR_SIZE_BYTES;
    let expected = empty_meta_page();
    let meta_or_torn = first
        .chunks(sector)
        .zip(expected.chunks(sector))
        .all(|(found, written)| found == &written[..found.len()] || found.iter().all(|&b| b == 0));
    Ok(meta_or_torn && rest.iter().all(|&b| b == 0))
}

/// The meta page of an empty environment, sealed.
fn empty_meta_page() -> Vec<u8> {
    let mut page = vec![0u8; PAGE_SIZE_BYTES];
    init(&mut page, META_PAGE_NUMBER, PageKind::Meta);
    Meta::empty().encode(&mut page);
    seal(&mut page, META_PAGE_NUMBER);
    page
}

/// Every journal before `current` is covered by the durable header: keep a couple for
/// reuse, remove the rest.
fn retire_old_journals(
    storage: &dyn Storage,
    current: u64,
    options: &Options,
    index: &Mutex<JournalIndex>,
    synced_txn_id: u64,
    backup: crate::header::BackupPoint,
) -> Result<()> {
    let names = storage
        .list("journal")
        .map_err(|e| Error::io("listing journals", e))?;
    crate::journal::spare::remove_leftovers(storage, &names)?;
    let mut numbers: Vec<u64> = names
        .iter()
        .filter_map(|n| crate::journal::writer::parse_journal_file_name(n))
        .filter(|&n| n < current)
        .collect();
    numbers.sort_unstable();
    for number in numbers {
        if backup.enabled && number >= backup.journal_number && synced_txn_id > backup.txn_id {
            // Records the next incremental backup copies; their last transaction is at
            // most the last one recovered.
            index
                .lock()
                .kept_for_backup
                .push_back((number, synced_txn_id));
            continue;
        }
        storage.note(StorageEvent::JournalRetire {
            journal_number: number,
            last_txn_id: synced_txn_id,
        });
        crate::flush::recycle_or_remove(storage, options, index, number);
    }
    Ok(())
}

fn random_id() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut id = [0u8; 16];
    for chunk in id.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    id
}
