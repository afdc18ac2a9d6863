//! Scratch: page copies of recent transactions, and the page translation table (PTT).
//!
//! A write transaction copies each page it changes into a [`PageBuf`]; at commit the buffers
//! become immutable (`Arc`) and enter the PTT of the new state. Readers that started earlier
//! keep their own state and so their own `Arc`s: a buffer is freed only when no state that
//! can see it is alive, which is exactly "no reader older than its release" without a
//! separate epoch scheme. [`ScratchUsage`] counts the bytes held, for the limit and stats.
//!
//! Copies start in memory. Past a memory budget, the flusher moves committed copies that
//! must stay in scratch (a reader pins older versions, so they cannot reach the data file
//! yet) into memory-mapped scratch files ([`spill`]): a long-lived reader then costs disk,
//! not memory. A scratch file is removed when its last copy is dropped.

mod ptt;
pub(crate) mod spill;

pub use ptt::{Ptt, PttEntry};

use crate::limits::PAGE_SIZE_BYTES;
use spill::ScratchFile;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Single-page buffers kept for reuse, at most this many (32 MiB): a write transaction
/// copies every page it touches, and a freed buffer handed straight to the next copy costs
/// neither the allocator (whose arena lock the writer and the freeing flusher would share)
/// nor fresh memory's page faults. A flush pass frees what came in while the last one ran,
/// which under a steady writer is often more than the default `flush_threshold_bytes`
/// (8 MiB); a pool of that size sent the rest of each pass back to the allocator.
const POOLED_PAGES_MAX: usize = 4096;

/// Bytes of scratch in use, shared by every buffer of one environment, and the pool of
/// freed single-page buffers.
#[derive(Default)]
pub struct ScratchUsage {
    used_bytes: AtomicU64,
    peak_bytes: AtomicU64,
    memory_bytes: AtomicU64,
    file_count: AtomicU64,
    /// Whole sizes of the scratch files on disk: a file lives while any copy in it does.
    file_bytes: AtomicU64,
    pool: parking_lot::Mutex<Vec<Box<[u8]>>>,
}

impl std::fmt::Debug for ScratchUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScratchUsage")
            .field("used_bytes", &self.used_bytes())
            .field("memory_bytes", &self.memory_bytes())
            .field("file_count", &self.file_count())
            .field("pooled_pages", &self.pool.lock().len())
            .finish()
    }
}

impl ScratchUsage {
    /// Bytes currently held by page copies, in memory and in scratch files.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    /// Highest `used_bytes` seen since open.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes.load(Ordering::Relaxed)
    }

    /// Bytes of page copies held in memory.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes.load(Ordering::Relaxed)
    }

    /// Scratch files on disk now.
    pub fn file_count(&self) -> u64 {
        self.file_count.load(Ordering::Relaxed)
    }

    /// Bytes of the scratch files on disk now, each counted whole.
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes.load(Ordering::Relaxed)
    }

    /// What scratch takes, as [`crate::Options::scratch_limit_bytes`] counts it: copies
    /// in memory plus the scratch files' whole size. A file kept by a few live copies
    /// takes its whole size on disk, so live copies alone would undercount it.
    pub fn held_bytes(&self) -> u64 {
        self.memory_bytes() + self.file_bytes()
    }

    fn add(&self, bytes: u64, in_memory: bool) {
        let now = self.used_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_bytes.fetch_max(now, Ordering::Relaxed);
        if in_memory {
            self.memory_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// A single-page buffer from the pool, with stale contents.
    fn pooled_page(&self) -> Option<Box<[u8]>> {
        self.pool.lock().pop()
    }

    /// Keeps a freed single-page buffer for reuse, if the pool has room.
    fn recycle(&self, page: Box<[u8]>) {
        debug_assert_eq!(page.len(), PAGE_SIZE_BYTES);
        let mut pool = self.pool.lock();
        if pool.len() < POOLED_PAGES_MAX {
            pool.push(page);
        }
    }

    fn sub(&self, bytes: u64, in_memory: bool) {
        let before = self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
        debug_assert!(before >= bytes, "scratch accounting underflow");
        if in_memory {
            let before = self.memory_bytes.fetch_sub(bytes, Ordering::Relaxed);
            debug_assert!(before >= bytes, "scratch memory accounting underflow");
        }
    }
}

/// Where a page copy lives.
enum Backing {
    Memory(Box<[u8]>),
    /// `len` bytes at `offset` of a scratch file, written once before the copy was made.
    File {
        file: Arc<ScratchFile>,
        offset: usize,
        len: usize,
    },
}

/// A copy of one page, or of a run of pages holding one large value, in scratch: in
/// memory, or (once spilled) in a scratch file.
pub struct PageBuf {
    backing: Backing,
    usage: Arc<ScratchUsage>,
}

impl PageBuf {
    /// A zeroed buffer of `page_count` pages, counted against `usage`.
    pub fn zeroed(page_count: usize, usage: &Arc<ScratchUsage>) -> PageBuf {
        assert!(page_count >= 1, "a page buffer holds at least one page");
        let len = page_count * PAGE_SIZE_BYTES;
        usage.add(len as u64, true);
        // Only a one-page buffer asks the pool: a page taken for a longer run would be freed.
        let pooled = (page_count == 1).then(|| usage.pooled_page()).flatten();
        let bytes = match pooled {
            Some(mut page) => {
                page.fill(0);
                page
            }
            None => vec![0u8; len].into_boxed_slice(),
        };
        PageBuf {
            backing: Backing::Memory(bytes),
            usage: Arc::clone(usage),
        }
    }

    /// A buffer holding a copy of `bytes` (a whole number of pages).
    pub fn copy_of(bytes: &[u8], usage: &Arc<ScratchUsage>) -> PageBuf {
        assert!(
            !bytes.is_empty() && bytes.len().is_multiple_of(PAGE_SIZE_BYTES),
            "page copies are whole pages"
        );
        usage.add(bytes.len() as u64, true);
        let copy = match (bytes.len() == PAGE_SIZE_BYTES)
            .then(|| usage.pooled_page())
            .flatten()
        {
            Some(mut page) => {
                page.copy_from_slice(bytes);
                page
            }
            None => bytes.into(),
        };
        PageBuf {
            backing: Backing::Memory(copy),
            usage: Arc::clone(usage),
        }
    }

    /// A copy held in `file` at `offset` (written there already).
    fn in_file(
        file: Arc<ScratchFile>,
        offset: usize,
        len: usize,
        usage: &Arc<ScratchUsage>,
    ) -> PageBuf {
        assert!(
            len > 0 && len.is_multiple_of(PAGE_SIZE_BYTES),
            "page copies are whole pages"
        );
        assert!(
            offset + len <= file.bytes().len(),
            "the copy lies inside its file"
        );
        usage.add(len as u64, false);
        PageBuf {
            backing: Backing::File { file, offset, len },
            usage: Arc::clone(usage),
        }
    }

    /// Number of pages held.
    pub fn page_count(&self) -> usize {
        self.bytes().len() / PAGE_SIZE_BYTES
    }

    /// All bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Memory(bytes) => bytes,
            Backing::File { file, offset, len } => &file.bytes()[*offset..*offset + *len],
        }
    }

    /// Whether the copy is held in memory (not spilled).
    pub fn is_in_memory(&self) -> bool {
        matches!(self.backing, Backing::Memory(_))
    }

    /// All bytes, mutable (only while owned by the writing transaction, whose copies are
    /// always in memory).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.backing {
            Backing::Memory(bytes) => bytes,
            Backing::File { .. } => {
                unreachable!("only committed copies are spilled, and those are immutable")
            }
        }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        let len = self.bytes().len() as u64;
        self.usage.sub(len, self.is_in_memory());
        if let Backing::Memory(bytes) = &mut self.backing
            && bytes.len() == PAGE_SIZE_BYTES
        {
            self.usage.recycle(std::mem::take(bytes));
        }
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageBuf({} pages)", self.page_count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_follows_buffers() {
        let usage = Arc::new(ScratchUsage::default());
        let a = PageBuf::zeroed(2, &usage);
        let b = PageBuf::copy_of(a.bytes(), &usage);
        assert_eq!(usage.used_bytes(), 4 * PAGE_SIZE_BYTES as u64);
        assert_eq!(usage.memory_bytes(), 4 * PAGE_SIZE_BYTES as u64);
        drop(a);
        drop(b);
        assert_eq!(usage.used_bytes(), 0);
        assert_eq!(usage.memory_bytes(), 0);
        assert_eq!(usage.peak_bytes(), 4 * PAGE_SIZE_BYTES as u64);
    }

    #[test]
    fn a_run_of_pages_leaves_the_pool_its_pages() {
        let usage = Arc::new(ScratchUsage::default());
        drop(PageBuf::zeroed(1, &usage));
        assert_eq!(usage.pool.lock().len(), 1, "a freed page is kept");
        let run = PageBuf::zeroed(3, &usage);
        assert_eq!(usage.pool.lock().len(), 1, "a run does not take a pooled page");
        assert!(run.bytes().iter().all(|&b| b == 0));
        let mut page = PageBuf::zeroed(1, &usage);
        assert_eq!(usage.pool.lock().len(), 0, "a one-page buffer reuses it");
        assert!(page.bytes().iter().all(|&b| b == 0), "and zeroes it");
        page.bytes_mut()[100] = 1;
        drop(page);
        assert!(PageBuf::zeroed(1, &usage).bytes().iter().all(|&b| b == 0));
    }
}
