//! journal_raw: what the disk itself allows for synced appends, with no engine in the way.
//!
//! A file is preallocated by writing zeros and syncing it, then overwritten from the start in
//! fixed-size blocks: either opened with `O_DIRECT|O_DSYNC` (from an aligned buffer; if the
//! file system refuses `O_DIRECT` with `EINVAL`, with `O_DSYNC` alone) or written through the
//! page cache with an `fdatasync` after every write.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use rand::{RngCore, SeedableRng, rngs::StdRng};

use crate::result::BenchResult;
use crate::workloads::{Config, DISK};

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
        match open_synced(&path, true) {
            Ok(f) => f,
            Err(e) if is_einval(&e) => {
                mode = "O_DSYNC (O_DIRECT refused with EINVAL)";
                open_synced(&path, false)?
            }
            Err(e) => return Err(e.into()),
        }
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
