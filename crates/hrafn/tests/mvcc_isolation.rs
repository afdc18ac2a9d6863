//! Snapshot isolation under concurrency: readers on several threads never see a partial
//! transaction or a changing view while a writer commits and the flusher runs.

mod common;

use hrafn::{Environment, Options};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const ACCOUNTS: u64 = 200;
const TOTAL: u64 = ACCOUNTS * 1000;

fn balance(v: &[u8]) -> u64 {
    u64::from_le_bytes(v.try_into().expect("8-byte balance"))
}

#[test]
fn readers_see_consistent_snapshots_during_writes_and_flushes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        flush_interval_ms: 1,
        flush_threshold_bytes: 64 * 1024,
        sync_interval_ms: 20,
        ..common::small_options()
    };
    let env = Arc::new(Environment::open(dir.path(), options).expect("open"));
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("accounts").expect("tree");
        for a in 0..ACCOUNTS {
            t.insert(a.to_be_bytes(), 1000u64.to_le_bytes())
                .expect("insert");
        }
    }
    wtx.commit().expect("commit");

    let stop = Arc::new(AtomicBool::new(false));
    let snapshots = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (env, stop, snapshots) =
                (Arc::clone(&env), Arc::clone(&stop), Arc::clone(&snapshots));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let rtx = env.begin_read().expect("read");
                    let t = rtx.open_tree("accounts").expect("tree");
                    let first: Vec<u64> = t
                        .iter()
                        .expect("iter")
                        .map(|e| balance(e.expect("entry").1))
                        .collect();
                    assert_eq!(first.len() as u64, ACCOUNTS);
                    assert_eq!(
                        first.iter().sum::<u64>(),
                        TOTAL,
                        "a transfer was seen half-applied"
                    );
                    std::thread::yield_now();
                    let again: Vec<u64> = t
                        .iter()
                        .expect("iter")
                        .rev()
                        .map(|e| balance(e.expect("entry").1))
                        .collect();
                    assert!(
                        again.iter().rev().eq(first.iter()),
                        "a snapshot changed under its reader"
                    );
                    snapshots.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    let mut x = 0x2545_f491_4f6c_dd1du64;
    let transfers = 2000 * common::scale();
    for _ in 0..transfers {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (from, to) = (x % ACCOUNTS, (x >> 20) % ACCOUNTS);
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("accounts").expect("tree");
            let a = balance(t.get(from.to_be_bytes()).expect("get").expect("account"));
            let amount = (x >> 40) % (a + 1);
            t.insert(from.to_be_bytes(), (a - amount).to_le_bytes())
                .expect("debit");
            let b = balance(t.get(to.to_be_bytes()).expect("get").expect("account"));
            t.insert(to.to_be_bytes(), (b + amount).to_le_bytes())
                .expect("credit");
        }
        wtx.commit().expect("commit");
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader");
    }
    assert!(snapshots.load(Ordering::Relaxed) > 10, "readers ran");
    let stats = env.stats();
    assert!(
        stats.flushes > 0,
        "the flusher ran during the test: {stats:?}"
    );
    env.check().expect("integrity");
}
