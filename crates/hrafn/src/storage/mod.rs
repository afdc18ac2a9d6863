//! Storage: the only layer that touches files.
//!
//! The engine never calls the file system directly; it goes through the [`Storage`] trait so
//! that tests can swap the real files ([`FileStorage`]) for a deterministic simulated disk
//! that cuts power, tears writes and injects errors. Everything above this module speaks in
//! whole-file names relative to the environment directory.
//!
//! Invariants this layer provides to the engine:
//! - `write_all_at` / `read_exact_at` loop over short transfers and `EINTR` (Linux moves at
//!   most 0x7ffff000 bytes per call).
//! - A [`Mapping`] returned by [`StorageFile::map`] stays valid (same bytes for pages not
//!   written since) for as long as the `Arc` lives, even after the file grows and is mapped
//!   again; that is what lets an old reader keep its view while the file is remapped.

pub(crate) mod file;
mod io_loop;
pub(crate) mod lock_file;
/// The simulated disk of the crash suites (feature `internals`).
#[cfg(any(test, feature = "internals"))]
pub mod sim;

pub use file::FileStorage;
pub use io_loop::{read_exact_at, write_all_at};

use std::any::Any;
use std::io;
use std::sync::Arc;

/// What a file is used for; decides how it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// The data file: buffered writes, read through a read-only mapping, synced rarely.
    Data,
    /// A journal file written with `O_DIRECT|O_DSYNC`: a write that returns is durable.
    /// Every write (and read) must be 4 KiB aligned in offset, length and memory; read
    /// through a second handle opened as `JournalBuffered`.
    JournalDurable,
    /// A journal file with buffered writes (the non-durable mode): durable only after
    /// [`StorageFile::sync_data`].
    JournalBuffered,
    /// A header file: buffered writes followed by `fdatasync`.
    Header,
}

/// A directory of files the engine owns. Names are relative paths using `/`.
pub trait Storage: Send + Sync + 'static {
    /// Opens `name`; creates it empty if `create` is set and it does not exist.
    fn open(&self, name: &str, kind: FileKind, create: bool) -> io::Result<Arc<dyn StorageFile>>;
    /// Whether `name` exists.
    fn exists(&self, name: &str) -> io::Result<bool>;
    /// Removes a file.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Atomically renames a file (replacing `to` if it exists).
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// File names directly inside directory `dir` (`""` is the environment directory).
    fn list(&self, dir: &str) -> io::Result<Vec<String>>;
    /// Creates a directory (and its parents); no error if it exists.
    fn create_dir(&self, dir: &str) -> io::Result<()>;
    /// Makes the directory entries of `dir` durable (after creating or renaming files).
    fn sync_dir(&self, dir: &str) -> io::Result<()>;
    /// Takes the exclusive environment lock. Fails with `ErrorKind::WouldBlock` when someone
    /// else holds it. The lock is held until the returned guard drops.
    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>>;
    /// Reports an engine event, so a simulated disk can check ordering rules (write-ahead).
    /// Real storage ignores it.
    fn note(&self, _event: StorageEvent) {}
    /// The table of processes holding a read-only snapshot of this environment, where
    /// other processes can share the directory (`None` for the simulated disk). No default:
    /// a storage that wraps another must pass its table on, or a writer through it would
    /// write pages under other processes' snapshots.
    fn process_readers(&self) -> io::Result<Option<Arc<dyn ProcessReaders>>>;
    /// Bytes the environment's files take: their lengths, summed over the directory and
    /// its subdirectories, where the storage can tell (`None` for the simulated disk).
    fn size_bytes(&self) -> io::Result<Option<u64>> {
        Ok(None)
    }
}

/// Processes that hold a read-only snapshot of the environment (see `storage/lock_file.rs`
/// for the protocol). The writer's flusher writes no page version newer than the oldest.
pub trait ProcessReaders: Send + Sync {
    /// Claims a slot for a snapshot of at least `floor_txn_id`, held until
    /// [`ProcessReaders::release`] or the process ends. `WouldBlock` when all are taken.
    fn claim(&self, floor_txn_id: u64) -> io::Result<usize>;
    /// Raises a claimed slot to the transaction its snapshot reads.
    fn raise(&self, slot: usize, floor_txn_id: u64) -> io::Result<()>;
    /// Frees a slot.
    fn release(&self, slot: usize);
    /// The oldest snapshot a live reader process holds.
    fn oldest(&self) -> io::Result<Option<u64>>;
    /// The writer starts writing data pages, a header, or retiring journals; it reads
    /// [`ProcessReaders::oldest`] after this.
    fn begin_data_writes(&self) -> io::Result<()>;
    /// The writer is done with them.
    fn end_data_writes(&self) -> io::Result<()>;
    /// A reader that has claimed its slot waits for a phase that began before (and so may
    /// not have seen the slot) to end.
    fn wait_for_data_writes(&self) -> io::Result<()>;
}

/// Engine events reported to [`Storage::note`], for rule checking in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageEvent {
    /// The journal record of transaction `txn_id` is durable.
    JournalDurable { txn_id: u64 },
    /// The flusher is about to write pages of transactions up to `txn_id` to the data file.
    DataWrite { txn_id_max: u64 },
    /// A header declaring transactions up to `txn_id` synced to the data file is durable.
    HeaderDurable { synced_txn_id: u64 },
    /// Journal file `journal_number` is about to be recycled or removed.
    JournalRetire {
        journal_number: u64,
        last_txn_id: u64,
    },
}

/// One open file.
pub trait StorageFile: Send + Sync {
    /// Reads at `offset`; may return fewer bytes than asked (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes at `offset`; may write fewer bytes than asked.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// `fdatasync`: makes earlier writes and the file size durable.
    fn sync_data(&self) -> io::Result<()>;
    /// Current size in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Grows the file to at least `len_bytes` with allocated zeroed blocks (`fallocate`), so
    /// a later write into that range cannot fail with ENOSPC and a mapping never faults.
    fn allocate(&self, len_bytes: u64) -> io::Result<()>;
    /// Shrinks the file to `len_bytes` (nothing if it is not longer). No mapping may be read
    /// past `len_bytes` afterwards.
    fn truncate(&self, len_bytes: u64) -> io::Result<()>;
    /// Maps the first `len_bytes` read-only. Bytes written later with `write_at` become
    /// visible through the mapping.
    fn map(&self, len_bytes: u64) -> io::Result<Arc<dyn Mapping>>;
}

/// A read-only view of a file's first bytes.
pub trait Mapping: Send + Sync {
    /// The mapped bytes.
    fn bytes(&self) -> &[u8];

    /// Tells the kernel the bytes will be read in no particular order, so a page fault
    /// reads that page alone, not its neighbours too (for [`crate::Options::read_ahead`]).
    /// Only a hint: mappings that cannot take it ignore it.
    fn advise_random(&self) -> io::Result<()> {
        Ok(())
    }
}
