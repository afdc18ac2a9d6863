//! Scratch files: where committed page copies go when scratch memory passes its budget.
//!
//! A page version newer than the oldest reader cannot reach the data file, so while a
//! reader lives for long under heavy writes, the copies pile up in scratch. Past
//! [`crate::Options::scratch_memory_bytes`] the flusher writes the oldest of them into
//! `scratch/<n>.scratch` (buffered, never synced: scratch is not durable, the journal is)
//! and swaps the page translation table's entries to copies read through the file's
//! read-only mapping; the memory copies are freed once no state refers to them. Each region
//! of a file is written once, before any state can refer to it, and never again. A file is
//! removed when its last copy is dropped; open removes files a crash left behind.

use super::{PageBuf, Ptt, ScratchUsage};
use crate::limits::PAGE_SIZE_BYTES;
use crate::storage::{FileKind, Mapping, Storage, StorageFile, write_all_at};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// Directory of the scratch files, inside the environment's directory.
pub const SCRATCH_DIR: &str = "scratch";

/// Largest size of one scratch file (a run larger than this gets a file of its own size).
pub const SCRATCH_FILE_SIZE_BYTES: usize = 64 << 20;

/// Size of a new scratch file under `scratch_limit_bytes`: an eighth of the limit, at most
/// [`SCRATCH_FILE_SIZE_BYTES`], so that files kept alive by a few copies each cannot take
/// the limit in a handful of files.
pub fn scratch_file_size_bytes(scratch_limit_bytes: u64) -> usize {
    let eighth = usize::try_from(scratch_limit_bytes / 8).unwrap_or(usize::MAX);
    (eighth.min(SCRATCH_FILE_SIZE_BYTES) / PAGE_SIZE_BYTES * PAGE_SIZE_BYTES).max(PAGE_SIZE_BYTES)
}

/// Name of scratch file `number`.
pub fn scratch_file_name(number: u64) -> String {
    format!("{SCRATCH_DIR}/{number:019}.scratch")
}

/// Whether `name` (inside [`SCRATCH_DIR`]) is a scratch file's name.
pub fn is_scratch_file_name(name: &str) -> bool {
    name.strip_suffix(".scratch")
        .is_some_and(|stem| stem.len() == 19 && stem.bytes().all(|b| b.is_ascii_digit()))
}

/// The size of a new scratch file for a copy of `len` bytes, if making it keeps scratch
/// within `limit_bytes` (memory copies and files counted whole).
fn new_file_size_bytes(usage: &ScratchUsage, len: usize, limit_bytes: u64) -> Option<usize> {
    let size = scratch_file_size_bytes(limit_bytes).max(len);
    (usage.held_bytes() + size as u64 <= limit_bytes).then_some(size)
}

/// Removes scratch files left by an earlier process (their contents died with it).
///
/// # Errors
/// I/O errors listing or removing them.
pub fn remove_leftovers(storage: &dyn Storage) -> io::Result<()> {
    let names = match storage.list(SCRATCH_DIR) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names.iter().filter(|n| is_scratch_file_name(n)) {
        storage.remove(&format!("{SCRATCH_DIR}/{name}"))?;
    }
    Ok(())
}

/// One scratch file, mapped whole.
pub struct ScratchFile {
    storage: Arc<dyn Storage>,
    name: String,
    file: Arc<dyn StorageFile>,
    map: Arc<dyn Mapping>,
    usage: Arc<ScratchUsage>,
}

impl ScratchFile {
    fn create(
        storage: &Arc<dyn Storage>,
        number: u64,
        size_bytes: usize,
        usage: &Arc<ScratchUsage>,
    ) -> io::Result<ScratchFile> {
        storage.create_dir(SCRATCH_DIR)?;
        let name = scratch_file_name(number);
        let file = storage.open(&name, FileKind::Data, true)?;
        // Allocated, not sparse: a write into a hole could fail with ENOSPC after the
        // mapping was handed out.
        let prepared = file
            .allocate(size_bytes as u64)
            .and_then(|()| file.map(size_bytes as u64));
        let map = match prepared {
            Ok(map) => map,
            Err(e) => {
                let _ = storage.remove(&name); // the error above is the one that matters
                return Err(e);
            }
        };
        usage.file_count.fetch_add(1, Ordering::Relaxed);
        usage
            .file_bytes
            .fetch_add(size_bytes as u64, Ordering::Relaxed);
        Ok(ScratchFile {
            storage: Arc::clone(storage),
            name,
            file,
            map,
            usage: Arc::clone(usage),
        })
    }

    /// The file's bytes, through its mapping.
    pub fn bytes(&self) -> &[u8] {
        self.map.bytes()
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        self.usage.file_count.fetch_sub(1, Ordering::Relaxed);
        self.usage
            .file_bytes
            .fetch_sub(self.bytes().len() as u64, Ordering::Relaxed);
        if let Err(error) = self.storage.remove(&self.name) {
            tracing::warn!(%error, name = %self.name, "could not remove a scratch file");
        }
    }
}

/// The flusher's writer of scratch files: the file being filled and where. It holds the
/// file weakly, so a file none of whose copies is alive is removed at once.
#[derive(Default)]
pub struct Spiller {
    current: Option<(Weak<ScratchFile>, usize)>,
    next_number: u64,
}

/// An entry group of the page translation table moved to a scratch file: the pages of one
/// buffer, the buffer they referred to, and its copy in the file.
pub struct Spilled {
    pub first_page: u64,
    pub old: Arc<PageBuf>,
    pub new: Arc<PageBuf>,
}

impl Spiller {
    /// Copies `bytes` (whole pages) into a scratch file; `None` when that takes a new file
    /// and the file would take scratch past `limit_bytes`.
    fn copy(
        &mut self,
        storage: &Arc<dyn Storage>,
        usage: &Arc<ScratchUsage>,
        bytes: &[u8],
        limit_bytes: u64,
    ) -> io::Result<Option<PageBuf>> {
        let len = bytes.len();
        // A full file lives on while its copies do.
        let (file, at) = match self.room_in_current(len) {
            Some(current) => current,
            None => {
                let Some(size) = new_file_size_bytes(usage, len, limit_bytes) else {
                    return Ok(None);
                };
                self.next_number += 1;
                let file = ScratchFile::create(storage, self.next_number, size, usage)?;
                (Arc::new(file), 0)
            }
        };
        write_all_at(&*file.file, bytes, at as u64)?;
        self.current = Some((Arc::downgrade(&file), at + len));
        Ok(Some(PageBuf::in_file(file, at, len, usage)))
    }

    /// The file being filled and where a copy of `len` bytes goes in it, if it is alive and
    /// has that room.
    fn room_in_current(&self, len: usize) -> Option<(Arc<ScratchFile>, usize)> {
        let (file, at) = self.current.as_ref()?;
        let file = file.upgrade()?;
        (at + len <= file.bytes().len()).then_some((file, *at))
    }

    /// Copies in-memory buffers of `ptt` into scratch files, oldest versions first, until
    /// about `bytes_wanted` are copied, or until a new file would take scratch past
    /// `limit_bytes` (the rest stays in memory, and writers wait for room). A buffer is
    /// found through its first page (a run of an overflow value is one buffer); [`swap_in`] then moves only the pages that still
    /// map to it, so a run whose first page was reused stays in memory until it is
    /// flushed.
    ///
    /// # Errors
    /// I/O errors writing a scratch file (a full disk): what was copied before is returned
    /// through `out`, and the caller keeps the rest in memory.
    pub fn spill(
        &mut self,
        storage: &Arc<dyn Storage>,
        usage: &Arc<ScratchUsage>,
        ptt: &Ptt,
        bytes_wanted: u64,
        limit_bytes: u64,
        out: &mut Vec<Spilled>,
    ) -> io::Result<()> {
        // Nothing can go anywhere: skip the scan of the whole table, which a flusher kicked
        // by writers waiting for room would otherwise repeat every few milliseconds.
        if self.room_in_current(PAGE_SIZE_BYTES).is_none()
            && new_file_size_bytes(usage, PAGE_SIZE_BYTES, limit_bytes).is_none()
        {
            return Ok(());
        }
        let mut candidates: Vec<(u64, u64)> = ptt
            .iter()
            .filter(|(_, e)| e.index_in_buf == 0 && e.buf.is_in_memory())
            .map(|(page_number, e)| (e.txn_id, page_number))
            .collect();
        candidates.sort_unstable();
        let mut copied = 0u64;
        for (_, page_number) in candidates {
            if copied >= bytes_wanted {
                break;
            }
            let entry = ptt.get(page_number).expect("listed from this table");
            let old = Arc::clone(&entry.buf);
            let Some(new) = self.copy(storage, usage, old.bytes(), limit_bytes)? else {
                break;
            };
            copied += new.bytes().len() as u64;
            out.push(Spilled {
                first_page: page_number,
                old,
                new: Arc::new(new),
            });
        }
        Ok(())
    }
}

/// `ptt` with the spilled buffers swapped in, for the pages that still map to the buffers
/// that were copied (a commit since may have replaced some).
pub fn swap_in(ptt: &Ptt, spilled: &[Spilled]) -> Ptt {
    let mut out = ptt.clone();
    for s in spilled {
        for i in 0..s.old.page_count() {
            let number = s.first_page + i as u64;
            // Checked before `get_mut`, which copies the page's path: a page a commit
            // replaced meanwhile leaves the table as it is.
            if out.get(number).is_some_and(|e| Arc::ptr_eq(&e.buf, &s.old))
                && let Some(entry) = out.get_mut(number)
            {
                entry.buf = Arc::clone(&s.new);
            }
        }
    }
    debug_assert!(
        out.iter()
            .all(|(_, e)| e.index_in_buf as usize * PAGE_SIZE_BYTES < e.buf.bytes().len())
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::PttEntry;
    use crate::storage::sim::SimStorage;

    #[test]
    fn scratch_file_names_roundtrip() {
        let name = scratch_file_name(3);
        assert_eq!(name, "scratch/0000000000000000003.scratch");
        assert!(is_scratch_file_name(name.trim_start_matches("scratch/")));
        assert!(!is_scratch_file_name("notes.scratch"));
        assert!(!is_scratch_file_name("0000000000000000003.journal"));
    }

    #[test]
    fn scratch_files_are_an_eighth_of_the_limit_in_whole_pages() {
        assert_eq!(scratch_file_size_bytes(4 << 30), SCRATCH_FILE_SIZE_BYTES);
        assert_eq!(scratch_file_size_bytes(8 << 20), 1 << 20);
        assert_eq!(
            scratch_file_size_bytes(10 * PAGE_SIZE_BYTES as u64 + 5),
            PAGE_SIZE_BYTES
        );
        assert_eq!(scratch_file_size_bytes(0), PAGE_SIZE_BYTES);
        assert_eq!(scratch_file_size_bytes(u64::MAX), SCRATCH_FILE_SIZE_BYTES);
    }

    #[test]
    fn spilled_copies_read_back_and_their_file_goes_with_the_last_one() {
        let storage: Arc<dyn Storage> = Arc::new(SimStorage::new(1));
        let usage = Arc::new(ScratchUsage::default());
        let mut ptt = Ptt::new();
        let page = |fill: u8, count: usize| {
            Arc::new(PageBuf::copy_of(
                &vec![fill; count * PAGE_SIZE_BYTES],
                &usage,
            ))
        };
        // Page 10 (txn 2), a three-page run at 20 (txn 1), page 30 (txn 3).
        for (number, txn_id, buf) in [
            (10, 2, page(1, 1)),
            (20, 1, page(2, 3)),
            (30, 3, page(3, 1)),
        ] {
            for i in 0..buf.page_count() {
                ptt.insert(
                    number + i as u64,
                    PttEntry {
                        txn_id,
                        first_unflushed_txn_id: txn_id,
                        buf: Arc::clone(&buf),
                        index_in_buf: i as u32,
                    },
                );
            }
        }
        let before = usage.memory_bytes();
        let mut spiller = Spiller::default();
        let mut spilled = Vec::new();
        // Four pages wanted: the oldest buffers first, the run (txn 1) then page 10.
        spiller
            .spill(
                &storage,
                &usage,
                &ptt,
                4 * PAGE_SIZE_BYTES as u64,
                u64::MAX,
                &mut spilled,
            )
            .expect("spill");
        assert_eq!(
            spilled.iter().map(|s| s.first_page).collect::<Vec<_>>(),
            vec![20, 10]
        );
        let swapped = swap_in(&ptt, &spilled);
        drop((ptt, spilled));
        let ptt = swapped;
        assert_eq!(usage.file_count(), 1);
        assert!(!ptt.get(21).expect("in the table").buf.is_in_memory());
        assert!(ptt.get(30).expect("in the table").buf.is_in_memory());
        assert_eq!(ptt.get(20).expect("in the table").bytes().len(), 3 * PAGE_SIZE_BYTES);
        assert!(ptt.get(20).expect("in the table").bytes().iter().all(|&b| b == 2));
        assert!(ptt.get(22).expect("in the table").bytes().iter().all(|&b| b == 2));
        assert!(ptt.get(10).expect("in the table").bytes().iter().all(|&b| b == 1));
        assert_eq!(
            usage.memory_bytes(),
            before - 4 * PAGE_SIZE_BYTES as u64,
            "the memory copies went with the last reference"
        );
        assert_eq!(usage.file_count(), 1, "the copies keep their file");
        drop(ptt);
        assert_eq!(usage.file_count(), 0);
        assert_eq!(usage.used_bytes(), 0);
        assert_eq!(
            storage.list(SCRATCH_DIR).expect("list"),
            Vec::<String>::new()
        );
    }
}
