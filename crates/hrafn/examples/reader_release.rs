//! What a writer waits for when a long reader ends.
//!
//! While a read transaction is open, no page version newer than it may reach the data
//! file, so the flusher's log of commits to look at grows with every commit. When the
//! reader ends, the next flush pass takes all of it. This example commits non-durable
//! transactions of 50 random keys over 100,000 keys (with default options otherwise) from
//! one thread, holds a reader open for a while, and prints the slowest commit before the
//! reader, while it is open, and in the seconds after it ends, with the flush pass's
//! pages examined, and the process's resident memory when the reader began and ended
//! (the flusher's log of commits must not grow with them).
//!
//! Run it with (`HRAFN_PIN_SECS` sets how long the reader stays open, default 2 s):
//!
//! ```sh
//! HRAFN_PIN_SECS=60 cargo run --release -p hrafn --example reader_release
//! ```

use hrafn::{Durability, Environment, Options};
use std::time::{Duration, Instant};

const KEYS: u64 = 100_000;
const KEYS_PER_TXN: usize = 50;

/// Commits for `secs` and returns the slowest commit.
fn commit_for(env: &Environment, secs: f64, state: &mut u64) -> hrafn::Result<(Duration, u64)> {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let (mut slowest, mut commits) = (Duration::ZERO, 0);
    let value = [7u8; 100];
    while Instant::now() < until {
        let started = Instant::now();
        let mut txn = env.begin_write()?;
        {
            let mut tree = txn.open_tree("t")?;
            for _ in 0..KEYS_PER_TXN {
                *state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                tree.insert(((*state >> 20) % KEYS).to_be_bytes(), value)?;
            }
        }
        txn.commit()?;
        slowest = slowest.max(started.elapsed());
        commits += 1;
    }
    Ok((slowest, commits))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pin_secs: f64 = std::env::var("HRAFN_PIN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let dir = tempfile::tempdir()?;
    let env = Environment::open(dir.path(), Options::default().durability(Durability::None))?;
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let (before, commits) = commit_for(&env, 2.0, &mut state)?;
    println!("before the reader: {commits} commits, slowest {before:?}");
    let examined_before = env.stats().flush_pages_examined;
    let rss_before = hrafn::steady::rss_bytes();
    let reader = env.begin_read()?;
    let (pinned, commits) = commit_for(&env, pin_secs, &mut state)?;
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    println!(
        "reader open {pin_secs} s: {commits} commits, slowest {pinned:?}; resident memory \
         {:.1} MiB when it began, {:.1} MiB when it ended",
        mib(rss_before),
        mib(hrafn::steady::rss_bytes())
    );
    drop(reader);
    let (after, commits) = commit_for(&env, 2.0, &mut state)?;
    let examined = env.stats().flush_pages_examined - examined_before;
    println!(
        "2 s after it ends: {commits} commits, slowest {after:?}; pages examined since the \
         reader began {examined}"
    );
    Ok(())
}
