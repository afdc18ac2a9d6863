//! journal_raw: what the disk itself allows for synced appends, with no engine in the way.
//!
//! A file is preallocated by writing zeros and syncing it, then overwritten from the start in
//! fixed-size blocks: either opened with `O_DIRECT|O_DSYNC` (from an aligned buffer; if the
//! file system refuses `O_DIRECT` with `EINVAL`, with `O_DSYNC` alone) or written through the
//! page cache with an `fdatasync` after every write.
//!
//! `journal_raw_group_4k` is the closed loop of `concurrent_writers` with no engine: each
//! of the writer threads queues a request and sleeps until it is acknowledged; one thread
//! takes everything queued, writes one 4 KiB block with `O_DIRECT|O_DSYNC` and wakes those
//! requests. What is left is the disk and the cost of waking threads, so it is the reference
//! group commit is measured against.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use anyhow::{Context, Result};
use rand::{RngCore, SeedableRng, rngs::StdRng};

use crate::result::BenchResult;
use crate::workloads::{Config, DISK, timed_together};

const ALIGN: usize = 4096;

/// A block-sized buffer aligned for `O_DIRECT`, carved out of a larger allocation.
struct AlignedBuf {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let storage = vec![0u8; len + ALIGN];
        let offset = storage.as_ptr().align_offset(ALIGN);
        AlignedBuf {
            storage,
            offset,
            len,
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.storage[self.offset..self.offset + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
}

fn preallocate(path: &Path, bytes: u64) -> Result<()> {
    let mut f = File::create(path).context("creating journal file")?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    Ok(())
}

/// Opens `path` with `O_DIRECT|O_DSYNC`, or `O_DSYNC` alone where `O_DIRECT` is refused;
/// returns the file and the mode it got.
fn open_direct_or_dsync(path: &Path) -> Result<(File, &'static str)> {
    match open_synced(path, true) {
        Ok(f) => Ok((f, "O_DIRECT|O_DSYNC")),
        Err(e) if is_einval(&e) => Ok((
            open_synced(path, false)?,
            "O_DSYNC (O_DIRECT refused with EINVAL)",
        )),
        Err(e) => Err(e.into()),
    }
}

fn open_synced(path: &Path, direct: bool) -> io::Result<File> {
    let flags = if direct {
        libc::O_DIRECT | libc::O_DSYNC
    } else {
        libc::O_DSYNC
    };
    OpenOptions::new()
        .write(true)
        .custom_flags(flags)
        .open(path)
}

fn is_einval(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// Runs one journal_raw row: `cfg.n(10_000)` writes of `block` bytes.
pub fn run(
    workload: &str,
    cfg: &Config,
    dir: &Path,
    block: usize,
    direct: bool,
) -> Result<BenchResult> {
    let writes = cfg.n(10_000);
    let path = dir.join("journal.raw");
    preallocate(&path, writes * block as u64)?;
    let mut buf = AlignedBuf::new(block);
    StdRng::seed_from_u64(9).fill_bytes(buf.as_mut_slice());

    let mut mode = if direct {
        "O_DIRECT|O_DSYNC"
    } else {
        "buffered write + fdatasync"
    };
    let mut file = if direct {
        let (file, opened) = open_direct_or_dsync(&path)?;
        mode = opened;
        file
    } else {
        OpenOptions::new().write(true).open(&path)?
    };

    let mut lat = Vec::with_capacity(writes as usize);
    let start = Instant::now();
    for i in 0..writes {
        let off = i * block as u64;
        let t0 = Instant::now();
        match file.write_all_at(buf.as_slice(), off) {
            Ok(()) => {}
            Err(e) if direct && i == 0 && is_einval(&e) => {
                // Some file systems accept O_DIRECT at open and refuse the write itself.
                mode = "O_DSYNC (O_DIRECT refused with EINVAL)";
                file = open_synced(&path, false)?;
                file.write_all_at(buf.as_slice(), off)?;
            }
            Err(e) => return Err(e.into()),
        }
        if !direct {
            file.sync_data()?;
        }
        lat.push(t0.elapsed());
    }
    let elapsed = start.elapsed();
    let mut r = BenchResult::measured(workload, DISK, cfg.scale, writes, "writes", elapsed)
        .with_latencies(&mut lat);
    r.note = Some(format!("{} B per write, {mode}", block));
    Ok(r)
}

/// One queued request of [`group`]: set to true and signalled once its block is written.
type Ack = Arc<(Mutex<bool>, Condvar)>;

/// Requests queued for the writer thread, and whether the callers are all done.
#[derive(Default)]
struct GroupQueue {
    pending: Vec<Ack>,
    closed: bool,
}

/// Locks `m`; a poisoned lock still holds consistent data here (plain flags and lists).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `journal_raw_group_4k` row: `threads` threads × `cfg.n(1_000)` requests, each
/// returning once a synced 4 KiB write issued after it was queued has completed.
pub fn group(workload: &str, cfg: &Config, dir: &Path, threads: u64) -> Result<BenchResult> {
    const RING_BLOCKS: u64 = 4096;
    let per_thread = cfg.n(1_000);
    let path = dir.join("journal.raw");
    preallocate(&path, RING_BLOCKS * ALIGN as u64)?;
    let (file, mode) = open_direct_or_dsync(&path)?;
    let mut buf = AlignedBuf::new(ALIGN);
    StdRng::seed_from_u64(9).fill_bytes(buf.as_mut_slice());
    let queue = (Mutex::new(GroupQueue::default()), Condvar::new());

    let (elapsed, writes, mut lat) = std::thread::scope(|s| -> Result<_> {
        let writer = s.spawn(|| -> Result<u64> {
            let mut writes = 0u64;
            loop {
                let batch = {
                    let mut q = lock(&queue.0);
                    while q.pending.is_empty() && !q.closed {
                        q = queue.1.wait(q).unwrap_or_else(|p| p.into_inner());
                    }
                    if q.pending.is_empty() {
                        return Ok(writes);
                    }
                    std::mem::take(&mut q.pending)
                };
                file.write_all_at(buf.as_slice(), (writes % RING_BLOCKS) * ALIGN as u64)?;
                writes += 1;
                for ack in batch {
                    *lock(&ack.0) = true;
                    ack.1.notify_one();
                }
            }
        });
        // Timed as concurrent_writers, which this row is the reference of.
        let timed = timed_together(threads, |_| {
            let mut lat = Vec::with_capacity(per_thread as usize);
            for _ in 0..per_thread {
                let t0 = Instant::now();
                let ack: Ack = Arc::default();
                lock(&queue.0).pending.push(Arc::clone(&ack));
                queue.1.notify_one();
                let mut done = lock(&ack.0);
                while !*done {
                    done = ack.1.wait(done).unwrap_or_else(|p| p.into_inner());
                }
                lat.push(t0.elapsed());
            }
            Ok(lat)
        });
        lock(&queue.0).closed = true;
        queue.1.notify_all();
        let writes = writer
            .join()
            .map_err(|_| anyhow::anyhow!("writer panicked"))??;
        let (elapsed, lats) = timed?;
        Ok((
            elapsed,
            writes,
            lats.into_iter().flatten().collect::<Vec<_>>(),
        ))
    })?;
    let requests = threads * per_thread;
    let mut r = BenchResult::measured(workload, DISK, cfg.scale, requests, "commits", elapsed)
        .with_latencies(&mut lat);
    r.commits = Some(requests);
    r.note = Some(format!(
        "{threads} threads x {per_thread} requests, one {ALIGN} B {mode} write per group; \
         {:.1} requests per write",
        requests as f64 / writes.max(1) as f64
    ));
    Ok(r)
}
