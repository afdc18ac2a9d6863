//! The flusher's timer keeps its schedule while commits wake the flusher thread far more
//! often than its interval: the sync that `sync_interval_ms` promises comes on time.

use hrafn::storage::Storage;
use hrafn::storage::sim::SimStorage;
use hrafn::{Durability, Environment, Options};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn syncs_keep_their_interval_while_commits_keep_waking_the_flusher() {
    // In memory, so that a sync's cost does not depend on the machine's disk.
    let storage: Arc<dyn Storage> = Arc::new(SimStorage::new(7));
    let (flush_interval_ms, sync_interval_ms) = (50, 200);
    // Each commit changes more than the flush threshold, so each asks for a flush pass:
    // the flusher is woken about once a millisecond, far more often than its tick. Journal
    // files large enough that the rule for journals waiting never forces a sync here.
    let options = Options::default()
        .durability(Durability::None)
        .journal_file_size_bytes(64 << 20)
        .flush_interval_ms(flush_interval_ms)
        .flush_threshold_bytes(64 * 1024)
        .sync_interval_ms(sync_interval_ms);
    let env = Environment::open_with_storage(storage, options).expect("open");
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
        std::thread::sleep(Duration::from_millis(1));
    }
    let stats = env.stats();
    let elapsed_ms = started.elapsed().as_millis() as u64;
    eprintln!(
        "{} syncs and {} flushes in {elapsed_ms} ms ({} commits), one sync due every \
         {sync_interval_ms} ms",
        stats.syncs, stats.flushes, stats.commits
    );
    assert!(
        stats.flushes >= 2 * elapsed_ms / flush_interval_ms,
        "the commits did not wake the flusher more often than its tick: {} flushes",
        stats.flushes
    );
    // A third of the syncs due, for a machine busy with other tests; without the tick
    // kept, a stream of wakes put every timed sync off (none in such a run).
    let due = elapsed_ms / sync_interval_ms;
    assert!(
        stats.syncs >= due / 3,
        "{} syncs in {elapsed_ms} ms where {due} were due",
        stats.syncs
    );
}
