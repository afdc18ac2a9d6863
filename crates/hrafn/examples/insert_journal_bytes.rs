//! What random inserts cost in journal bytes: a fixed-size tree against a B+tree.
//!
//! Inserts 1M random `u64` keys with 16-byte values in 100 transactions (the shape of
//! `hrafn-bench`'s `u64_insert_*` rows), once into a fixed-size tree and once into a B+tree
//! with 8-byte big-endian keys, and prints each run's journal payload (page diffs before
//! compression), what was stored after compression, the bytes of the pages the
//! transactions changed, and the pages the environment uses at the end. A random insert
//! into a fixed-size leaf writes one entry and moves the 2-byte slots after its place (the
//! leaf is slotted), as a B+tree insert does; before slotted leaves it shifted every entry
//! after it, so its diff carried half the leaf.
//!
//! Run it with:
//!
//! ```sh
//! cargo run --release -p hrafn --example insert_journal_bytes
//! ```

use hrafn::{Durability, Environment, Options};

const TXNS: u64 = 100;
const KEYS_PER_TXN: u64 = 10_000;
const VALUE: [u8; 16] = [7; 16];

/// Spreads consecutive numbers over the key space as a random generator would (SplitMix64's
/// finalizer, a bijection on u64). A bare multiplication would spread them too evenly:
/// every leaf would fill at the same pace, and the pages in use would swing with the count.
fn key(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn main() -> hrafn::Result<()> {
    for fixed in [true, false] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let env = Environment::open(dir.path(), Options::default().durability(Durability::None))?;
        let start = std::time::Instant::now();
        for t in 0..TXNS {
            let mut wtx = env.begin_write()?;
            let keys = (t * KEYS_PER_TXN..(t + 1) * KEYS_PER_TXN).map(key);
            if fixed {
                let mut tree = wtx.open_fixed_tree("u64", VALUE.len())?;
                for k in keys {
                    tree.insert(k, &VALUE)?;
                }
            } else {
                let mut tree = wtx.open_tree("u64")?;
                for k in keys {
                    tree.insert(k.to_be_bytes(), VALUE)?;
                }
            }
            wtx.commit()?;
        }
        let elapsed = start.elapsed();
        let stats = env.stats();
        println!(
            "{:<16} {:>6.2} s  journal payload {:>6.1} MiB, stored {:>6.1} MiB; changed pages {:>7.1} MiB; {} pages in use",
            if fixed { "fixed-size tree" } else { "B+tree" },
            elapsed.as_secs_f64(),
            mib(stats.journal_payload_bytes),
            mib(stats.journal_stored_bytes),
            mib(stats.dirty_page_bytes),
            env.check()?.used_pages,
        );
        let report = env.storage_report()?;
        let tree = &report.structures[0];
        println!(
            "{:<16} tree: {} leaf and {} branch pages, filled {:.0}%",
            "",
            tree.pages.leaf + tree.pages.fixed_leaf,
            tree.pages.branch + tree.pages.fixed_branch,
            tree.fill_factor() * 100.0,
        );
    }
    Ok(())
}
