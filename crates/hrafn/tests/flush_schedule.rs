//! The flusher's timer keeps its schedule while commits wake the flusher thread far more
//! often than its interval: the sync that `sync_interval_ms` promises comes on time.

use hrafn::{Durability, Environment, Options};
use std::time::{Duration, Instant};

#[test]
fn syncs_keep_their_interval_while_commits_keep_waking_the_flusher() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let sync_interval_ms = 200;
    // A flush threshold a few commits reach: nearly every commit asks for a flush pass,
    // and each pass's end is announced by the next commit, so the flusher is woken many
    // times per tick of its timer.
    let options = Options::default()
        .durability(Durability::None)
        .flush_interval_ms(50)
        .flush_threshold_bytes(64 * 1024)
        .sync_interval_ms(sync_interval_ms);
    let env = Environment::open(tmp.path(), options).expect("open");
    let run_for = Duration::from_secs(3);
    let started = Instant::now();
    let mut key = 0u64;
    while started.elapsed() < run_for {
        let mut txn = env.begin_write().expect("begin_write");
        {
            let mut tree = txn.open_tree("t").expect("open_tree");
            for _ in 0..20 {
                key = key
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                tree.insert(key.to_be_bytes(), [7u8; 100]).expect("insert");
            }
        }
        txn.commit().expect("commit");
    }
    let stats = env.stats();
    let expected = run_for.as_millis() as u64 / sync_interval_ms;
    // Half the ticks, for a machine busy with other tests.
    assert!(
        stats.syncs >= expected / 2,
        "{} syncs in {run_for:?} at one per {sync_interval_ms} ms ({} commits, {} flushes)",
        stats.syncs,
        stats.commits,
        stats.flushes
    );
    eprintln!(
        "{} syncs and {} flushes in {run_for:?} ({} commits), one sync due per {sync_interval_ms} ms",
        stats.syncs, stats.flushes, stats.commits
    );
    assert!(
        stats.flushes > stats.syncs * 2,
        "the commits did not keep the flusher busy: {} flushes, {} syncs",
        stats.flushes,
        stats.syncs
    );
}
