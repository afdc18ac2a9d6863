//! Snapshot isolation under concurrency: readers on several threads never see a partial
//! transaction or a changing view while a writer commits and the flusher runs.

mod common;

use hrafn::Environment;
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
    let options = common::small_options()
        .flush_interval_ms(1)
        .flush_threshold_bytes(64 * 1024)
        .sync_interval_ms(20);
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

/// Growing the data file maps it again; a reader that started before keeps reading through
/// its own (old) mapping and its own PTT, and sees exactly its snapshot.
#[test]
fn remapping_keeps_old_readers_valid() {
    let dir = tempfile::tempdir().expect("tempdir");
    // No background flushes: the test decides when pages move to the data file.
    let options = common::small_options()
        .flush_interval_ms(3_600_000)
        .flush_threshold_bytes(u64::MAX);
    let env = Environment::open(dir.path(), options).expect("open");
    let size_before = env.stats().data_file_size_bytes;
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("t").expect("tree");
        for i in 0..20_000u32 {
            t.insert(i.to_be_bytes(), [1u8; 400]).expect("insert");
        }
    }
    wtx.commit().expect("commit");
    let reader = env.begin_read().expect("read");
    // The reader's pages are flushed (they are not newer than it), which grows the file.
    env.flush_and_sync().expect("flush");
    let stats = env.stats();
    assert!(
        stats.data_file_size_bytes > 4 * size_before.max(1 << 20),
        "the data file grew: {stats:?}"
    );
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("tree")
        .insert(5u32.to_be_bytes(), [9u8; 400])
        .expect("update");
    wtx.commit().expect("commit");
    let t = reader.open_tree("t").expect("tree");
    assert_eq!(
        t.get(5u32.to_be_bytes()).expect("get"),
        Some(&[1u8; 400][..]),
        "old view kept"
    );
    assert_eq!(t.iter().expect("iter").count(), 20_000);
    drop(reader);
    let rtx = env.begin_read().expect("read");
    assert_eq!(
        rtx.open_tree("t")
            .expect("tree")
            .get(5u32.to_be_bytes())
            .expect("get"),
        Some(&[9u8; 400][..])
    );
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Environment>();
    send::<hrafn::ReadTxn<'static>>();
    send::<hrafn::WriteTxn<'static>>();
}
