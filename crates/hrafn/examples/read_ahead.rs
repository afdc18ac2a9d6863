//! What [`Options::read_ahead`] does to reads from a cold page cache, on your disk.
//!
//! Fills an environment with 2M random keys (about 265 MiB), then times a full scan and
//! 20,000 random reads with read-ahead on and off, emptying the page cache before each
//! of the four.
//! Emptying it needs root (it writes `/proc/sys/vm/drop_caches`); without root the
//! figures are of a warm cache and the example says so.
//!
//! Run it with:
//!
//! ```sh
//! cargo run --release -p hrafn --example read_ahead
//! ```

use hrafn::{Environment, Options};
use std::path::Path;
use std::time::{Duration, Instant};

const TXNS: u64 = 200;
const KEYS_PER_TXN: u64 = 10_000;
const RANDOM_READS: u64 = 20_000;

/// Spreads consecutive numbers over the key space (a bijection on u64).
fn key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()
}

fn fill(dir: &Path) -> hrafn::Result<()> {
    let env = Environment::open(dir, Options::default())?;
    for t in 0..TXNS {
        let mut txn = env.begin_write()?;
        let mut tree = txn.open_tree("t")?;
        for i in 0..KEYS_PER_TXN {
            tree.insert(key(t * KEYS_PER_TXN + i), [7u8; 100])?;
        }
        txn.commit()?;
    }
    // Everything into the data file, so that the reads below come from it.
    env.flush_and_sync()
}

/// Empties the page cache; false when this process may not.
fn drop_page_cache() -> bool {
    let synced = std::process::Command::new("sync")
        .status()
        .is_ok_and(|s| s.success());
    synced && std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Times a full scan (`scan`) or the random reads, with read-ahead on or off.
fn read(dir: &Path, read_ahead: bool, scan: bool) -> hrafn::Result<Duration> {
    let env = Environment::open(dir, Options::default().read_ahead(read_ahead))?;
    let txn = env.begin_read()?;
    let tree = txn.open_tree("t")?;
    let start = Instant::now();
    if scan {
        let mut scanned = 0u64;
        for entry in tree.range::<&[u8], _>(..)? {
            entry?;
            scanned += 1;
        }
        assert_eq!(scanned, TXNS * KEYS_PER_TXN, "the scan saw every key");
    } else {
        for i in 0..RANDOM_READS {
            let found = tree.get(key(i * 97))?;
            assert!(found.is_some(), "key {i} is there");
        }
    }
    Ok(start.elapsed())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    fill(dir.path())?;
    for round in 1..=2 {
        for read_ahead in [true, false] {
            // Each pass starts from an empty cache, so its reads come from the disk.
            let cold = drop_page_cache();
            let scan = read(dir.path(), read_ahead, true)?;
            let cold = drop_page_cache() && cold;
            let random = read(dir.path(), read_ahead, false)?;
            println!(
                "round {round}, read_ahead {read_ahead:5}, {} cache: full scan {scan:.2?}, \
                 {RANDOM_READS} random reads {random:.2?}",
                if cold { "cold" } else { "warm (not root)" },
            );
        }
    }
    Ok(())
}
