//! Merged writers: several threads write at once through `Environment::write` (a
//! `WriteBatch`) and `Environment::submit` (a closure run inside the write transaction).
//! Concurrent requests are merged into one transaction and one journal write, and each
//! caller still gets its own result. The end shows an optimistic batch (`expect`) failing
//! with `Error::Conflict` when another commit changed what it read.
//!
//! Run it with:
//!
//! ```sh
//! cargo run --release -p hrafn --example merged_writers
//! ```

use hrafn::{Environment, Error, Options, WriteBatch};
use std::sync::Arc;

const THREADS: u64 = 4;
const REQUESTS_PER_THREAD: u64 = 50;

/// Reads a counter stored as 8 big-endian bytes (absent: 0).
fn counter(bytes: Option<&[u8]>) -> u64 {
    bytes.map_or(0, |b| {
        u64::from_be_bytes(b.try_into().expect("counters are 8 bytes"))
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // `Environment` is `Send + Sync`: share it with `Arc`.
    let env = Arc::new(Environment::open(dir.path(), Options::default())?);

    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let env = Arc::clone(&env);
            std::thread::spawn(move || -> hrafn::Result<()> {
                for i in 0..REQUESTS_PER_THREAD {
                    // A batch is data: inserts and removes applied atomically.
                    let mut batch = WriteBatch::new();
                    batch.insert("events", format!("t{thread}-{i:04}"), b"payload");
                    env.write(batch)?;

                    // A closure can read before it writes (a read-modify-write). It may
                    // run more than once, so it must not act outside the transaction.
                    env.submit(|wtx| {
                        let mut counters = wtx.open_tree("counters")?;
                        let total = counter(counters.get(b"total")?);
                        counters.insert(b"total", (total + 1).to_be_bytes())?;
                        Ok(())
                    })?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a writer thread panicked")?;
    }

    let requests = THREADS * REQUESTS_PER_THREAD;
    {
        let rtx = env.begin_read()?;
        assert_eq!(rtx.open_tree("events")?.len(), requests);
        let total = counter(rtx.open_tree("counters")?.get(b"total")?);
        assert_eq!(total, requests, "no increment was lost");
    }
    let stats = env.stats();
    println!(
        "{} requests from {THREADS} threads committed in {} merged transactions",
        stats.merged_requests, stats.merged_transactions
    );

    // `submit` returns the closure's value once the transaction is committed.
    let events = env.submit(|wtx| Ok(wtx.open_tree("events")?.len()))?;
    println!("events: {events}");

    // Optimistic concurrency: read in a snapshot, then write only if nothing changed.
    let seen = {
        let rtx = env.begin_read()?;
        rtx.open_tree("counters")?
            .get(b"total")?
            .map(<[u8]>::to_vec)
    };
    // Another writer gets in first...
    env.submit(|wtx| {
        let mut counters = wtx.open_tree("counters")?;
        let total = counter(counters.get(b"total")?);
        counters.insert(b"total", (total + 100).to_be_bytes())?;
        Ok(())
    })?;
    // ...so a batch that expects the old value fails alone and applies nothing.
    let mut reset = WriteBatch::new();
    reset.expect("counters", b"total", seen.as_deref()).insert(
        "counters",
        b"total",
        0u64.to_be_bytes(),
    );
    match env.write(reset) {
        Err(Error::Conflict { tree, key }) => println!(
            "conflict on {tree}/{}: read again and retry",
            String::from_utf8_lossy(&key)
        ),
        Err(e) => return Err(e.into()),
        Ok(()) => unreachable!("the expectation cannot hold"),
    }

    // Every `Arc` clone is gone once the threads are joined.
    let env = Arc::into_inner(env).expect("the threads have ended");
    env.close()?;
    Ok(())
}
