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
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
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

/// How a file opened with [`open_direct_or_dsync`] writes.
const DIRECT: &str = "O_DIRECT|O_DSYNC";
const DSYNC_FALLBACK: &str = "O_DSYNC (O_DIRECT refused with EINVAL)";

/// Opens `path` with `O_DIRECT|O_DSYNC`, or `O_DSYNC` alone where `O_DIRECT` is refused;
/// returns the file and the mode it got.
fn open_direct_or_dsync(path: &Path) -> Result<(File, &'static str)> {
    match open_synced(path, true) {
        Ok(f) => Ok((f, DIRECT)),
        Err(e) if is_einval(&e) => Ok((open_synced(path, false)?, DSYNC_FALLBACK)),
        Err(e) => Err(e.into()),
    }
}

/// Writes `buf` at `off` of `file` (opened from `path` in `mode`). Some file systems accept
/// `O_DIRECT` at open and refuse the write itself with `EINVAL`: on the first write, the
/// file is then reopened with `O_DSYNC` alone and `mode` says so.
fn write_block(
    file: &mut File,
    mode: &mut &'static str,
    path: &Path,
    buf: &[u8],
    off: u64,
    first: bool,
) -> Result<()> {
    match file.write_all_at(buf, off) {
        Ok(()) => Ok(()),
        Err(e) if first && *mode == DIRECT && is_einval(&e) => {
            *mode = DSYNC_FALLBACK;
            *file = open_synced(path, false)?;
            Ok(file.write_all_at(buf, off)?)
        }
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
        DIRECT
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
        write_block(&mut file, &mut mode, &path, buf.as_slice(), off, i == 0)?;
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

/// Where one queued request of [`group_loop`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AckState {
    Waiting,
    Written,
    /// The write of its group failed.
    Failed,
}

/// One queued request: set and signalled once its block is written or the write failed.
type Ack = Arc<(Mutex<AckState>, Condvar)>;

/// Requests queued for the writer thread, and whether the callers are all done.
struct GroupQueue {
    pending: Vec<Ack>,
    closed: bool,
    /// The writer's error once it has stopped: a request queued after it fails at once.
    failed: Option<String>,
}

/// Locks `m`; a poisoned lock still holds consistent data here (plain flags and lists).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn set(ack: &Ack, state: AckState) {
    *lock(&ack.0) = state;
    ack.1.notify_one();
}

/// The `journal_raw_group_4k` row: `threads` threads × `cfg.n(1_000)` requests, each
/// returning once a synced 4 KiB write issued after it was queued has completed.
pub fn group(workload: &str, cfg: &Config, dir: &Path, threads: u64) -> Result<BenchResult> {
    const RING_BLOCKS: u64 = 4096;
    let per_thread = cfg.n(1_000);
    let path = dir.join("journal.raw");
    preallocate(&path, RING_BLOCKS * ALIGN as u64)?;
    let (mut file, mut mode) = open_direct_or_dsync(&path)?;
    let mut buf = AlignedBuf::new(ALIGN);
    StdRng::seed_from_u64(9).fill_bytes(buf.as_mut_slice());
    let (elapsed, writes, mut lat) = group_loop(threads, per_thread, |n| {
        let off = (n % RING_BLOCKS) * ALIGN as u64;
        write_block(&mut file, &mut mode, &path, buf.as_slice(), off, n == 0)
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

/// The closed loop of [`group`]: `threads` threads × `per_thread` requests, each queued and
/// waited for; one writer thread takes everything queued, calls `write(n)` for its `n`th
/// write and wakes those requests. Returns the time, the writes and every request's
/// latency; if a write fails, every request waiting or still to come fails with it (they
/// would otherwise wait forever) and so does the loop, with the write's error.
fn group_loop(
    threads: u64,
    per_thread: u64,
    mut write: impl FnMut(u64) -> Result<()> + Send,
) -> Result<(Duration, u64, Vec<Duration>)> {
    let queue = (
        Mutex::new(GroupQueue {
            pending: Vec::new(),
            closed: false,
            failed: None,
        }),
        Condvar::new(),
    );
    std::thread::scope(|s| {
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
                if let Err(e) = write(writes) {
                    let mut q = lock(&queue.0);
                    q.failed = Some(format!("{e:#}"));
                    let queued = std::mem::take(&mut q.pending);
                    for ack in batch.iter().chain(&queued) {
                        set(ack, AckState::Failed);
                    }
                    return Err(e);
                }
                writes += 1;
                for ack in &batch {
                    set(ack, AckState::Written);
                }
            }
        });
        // Timed as concurrent_writers, which this row is the reference of.
        let timed = timed_together(threads, |_| {
            let mut lat = Vec::with_capacity(per_thread as usize);
            for _ in 0..per_thread {
                let t0 = Instant::now();
                let ack: Ack = Arc::new((Mutex::new(AckState::Waiting), Condvar::new()));
                {
                    let mut q = lock(&queue.0);
                    if let Some(e) = &q.failed {
                        bail!("the journal write failed: {e}");
                    }
                    q.pending.push(Arc::clone(&ack));
                }
                queue.1.notify_one();
                let mut state = lock(&ack.0);
                while *state == AckState::Waiting {
                    state = ack.1.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                ensure!(
                    *state == AckState::Written,
                    "the journal write of this request's group failed"
                );
                drop(state);
                lat.push(t0.elapsed());
            }
            Ok(lat)
        });
        lock(&queue.0).closed = true;
        queue.1.notify_all();
        // The writer's error first: the requests' errors only echo it.
        let writes = writer
            .join()
            .map_err(|_| anyhow::anyhow!("writer panicked"))??;
        let (elapsed, lats) = timed?;
        Ok((
            elapsed,
            writes,
            lats.into_iter().flatten().collect::<Vec<_>>(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Runs [`group_loop`] on a thread of its own; `None` if it has not ended in 30 s.
    fn group_loop_within_30s(
        threads: u64,
        per_thread: u64,
        fail_at: Option<u64>,
    ) -> Option<Result<(u64, usize), String>> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let r = group_loop(threads, per_thread, |n| {
                if Some(n) == fail_at {
                    return Err(io::Error::other("injected write error").into());
                }
                Ok(())
            });
            let _ = tx.send(
                r.map(|(_, writes, lat)| (writes, lat.len()))
                    .map_err(|e| format!("{e:#}")),
            );
        });
        rx.recv_timeout(Duration::from_secs(30)).ok()
    }

    #[test]
    fn group_loop_acknowledges_every_request() {
        let (writes, lats) = group_loop_within_30s(4, 100, None)
            .expect("the loop ended")
            .expect("no error");
        assert_eq!(lats, 400);
        assert!((1..=400).contains(&writes), "{writes} writes");
    }

    /// A failed write used to leave the requests waiting for ever: the row hung.
    #[test]
    fn a_failed_write_fails_the_group_row() {
        for fail_at in [0, 3] {
            let err = group_loop_within_30s(4, 100, Some(fail_at))
                .expect("the loop ended instead of hanging")
                .expect_err("the write's error fails the loop");
            assert!(err.contains("injected write error"), "{err}");
        }
    }
}
