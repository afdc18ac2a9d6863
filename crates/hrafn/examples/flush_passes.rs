//! How many pages a flush pass writes under a steady writer of random keys.
//!
//! Commits 10,000 non-durable transactions of 100 random 16-byte keys with 100-byte values
//! (the shape of `hrafn-bench`'s `fill_rnd_tx_nosync` row) with default options, then
//! prints the flusher's passes and the pages they wrote. A pass writes what came in while
//! the last one ran, so under a steady writer it can exceed `flush_threshold_bytes`; the
//! pool of freed page buffers (`scratch/mod.rs`) is sized by this.
//!
//! Run it with:
//!
//! ```sh
//! cargo run --release -p hrafn --example flush_passes
//! ```

use hrafn::{Durability, Environment, Options};

const TXNS: usize = 10_000;
const KEYS_PER_TXN: usize = 100;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let env = Environment::open(dir.path(), Options::default().durability(Durability::None))?;
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let value = [7u8; 100];
    let started = std::time::Instant::now();
    for _ in 0..TXNS {
        let mut txn = env.begin_write()?;
        {
            let mut tree = txn.open_tree("t")?;
            for _ in 0..KEYS_PER_TXN {
                // xorshift64: a cheap, repeatable spread over the key space.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let mut key = [0u8; 16];
                key[..8].copy_from_slice(&state.to_be_bytes());
                key[8..].copy_from_slice(&state.rotate_left(17).to_be_bytes());
                tree.insert(key, value)?;
            }
        }
        txn.commit()?;
    }
    let stats = env.stats();
    println!(
        "{TXNS} transactions in {:.2} s: {} flush passes wrote {} pages, {:.0} a pass",
        started.elapsed().as_secs_f64(),
        stats.flushes,
        stats.pages_flushed,
        stats.pages_flushed as f64 / stats.flushes.max(1) as f64
    );
    Ok(())
}
