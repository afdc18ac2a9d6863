//! Spare journal files: the flusher zero-fills the next journals ahead of time, so commits
//! that fill a journal rotate into a ready file; spares never outlive the environment.

use hrafn::{Environment, Options};
use rand::{RngCore, SeedableRng, rngs::StdRng};
use std::path::Path;
use std::time::{Duration, Instant};

const JOURNAL_BYTES: u64 = 64 * 1024;

fn options() -> Options {
    // No data-file sync during the test (no journal retires), so every rotation needs a
    // new file and only spares can spare the writer the zero-filling.
    Options::default()
        .journal_file_size_bytes(JOURNAL_BYTES)
        .journal_spare_files(2)
        .sync_interval_ms(3_600_000)
        .sync_threshold_bytes(1 << 40)
}

fn spare_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("journal"))
        .expect("journal dir")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .ends_with(".spare")
        })
        .count()
}

/// Commits random 2,000-byte values (incompressible diffs) under `keys` into tree `t`.
fn commit_values(env: &Environment, rng: &mut StdRng, keys: std::ops::Range<u32>) {
    let mut value = vec![0u8; 2000];
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("t").expect("tree");
        for key in keys {
            rng.fill_bytes(&mut value);
            t.insert(key.to_be_bytes(), &value).expect("insert");
        }
    }
    wtx.commit().expect("commit");
}

/// Waits until `done` holds; fails the test after 20 s (the flusher is a thread of its own).
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn rotations_use_spares_made_in_the_background_and_close_removes_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = StdRng::seed_from_u64(5);
    let rounds = 12u32;
    {
        let env = Environment::open(dir.path(), options()).expect("open");
        let pool_full = || env.stats().journal_files_ready >= 2;
        wait_for("the first spares", pool_full);
        assert_eq!(
            spare_files(dir.path()),
            2,
            "a fresh environment has no retired journal"
        );
        let filled_at_start = env.stats().journals_filled_by_writer;
        for round in 0..rounds {
            // About 30 KB of incompressible diffs: a 64 KiB journal rotates every other
            // commit or so.
            commit_values(&env, &mut rng, round * 100..round * 100 + 15);
            wait_for("the pool to be refilled", pool_full);
        }
        let stats = env.stats();
        assert_eq!(
            stats.journals_filled_by_writer, filled_at_start,
            "a rotation zero-filled its journal on the commit path"
        );
        assert!(
            stats.journal_spares_used >= u64::from(rounds) / 3,
            "only {} spares used in {rounds} commits of half a journal each",
            stats.journal_spares_used
        );
        assert!(stats.journal_spares_made >= stats.journal_spares_used);
    }
    assert_eq!(spare_files(dir.path()), 0, "a clean close removes spares");

    // A spare left by a crash (here: made by hand, half written) is removed at open.
    std::fs::write(
        dir.path().join("journal/0000000000000000042.spare"),
        [7u8; 100],
    )
    .expect("leftover");
    let env = Environment::open(dir.path(), options().journal_spare_files(0)).expect("reopen");
    assert_eq!(spare_files(dir.path()), 0, "open removes leftover spares");
    env.check().expect("integrity");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("tree");
    assert_eq!(t.len(), u64::from(rounds) * 15);
}

/// Journal files start at 1 MiB and double at each rotation up to the configured size: a
/// small environment keeps small journals, one under load rotates rarely.
#[test]
fn journals_start_small_and_grow_to_the_configured_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options::default()
        .journal_file_size_bytes(8 << 20)
        .journal_spare_files(0)
        .sync_interval_ms(3_600_000)
        .sync_threshold_bytes(1 << 40);
    let env = Environment::open(dir.path(), options).expect("open");
    let mut sizes = std::collections::BTreeMap::new();
    let mut most_files = 0;
    let mut record = |dir: &Path| {
        most_files = most_files.max(std::fs::read_dir(dir.join("journal")).expect("dir").count());
        for e in std::fs::read_dir(dir.join("journal")).expect("journal dir") {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".journal") {
                sizes.insert(name, e.metadata().expect("metadata").len());
            }
        }
    };
    record(dir.path());
    let mut rng = StdRng::seed_from_u64(5);
    let mut value = vec![0u8; 100_000];
    for i in 0..400u32 {
        rng.fill_bytes(&mut value);
        let mut wtx = env.begin_write().expect("write");
        wtx.open_tree("t")
            .expect("tree")
            .insert(i.to_be_bytes(), &value)
            .expect("insert");
        wtx.commit().expect("commit");
        record(dir.path());
    }
    // The engine's own high-water mark of the directory sees at least what was listed
    // after each commit (it counts at the moments a file is made).
    let peak = env.stats().journal_files_peak;
    assert!(
        peak as usize >= most_files && most_files >= 2,
        "{peak} {most_files}"
    );
    let sizes: Vec<u64> = sizes.into_values().collect();
    assert_eq!(sizes[0], 1 << 20, "{sizes:?}");
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    assert_eq!(sizes[1..4], [2 << 20, 4 << 20, 8 << 20], "{sizes:?}");
    assert_eq!(*sizes.last().expect("files"), 8 << 20, "{sizes:?}");
}

/// A journal half full asks for spares, so a young environment's first rotation finds one
/// ready even when the flusher's timer is far off (here an hour).
#[test]
fn a_half_full_journal_has_its_successor_made_before_it_fills() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), options().flush_interval_ms(3_600_000)).expect("open");
    let mut rng = StdRng::seed_from_u64(9);
    // About 20 KB of incompressible diffs: under half of the 64 KiB journal.
    commit_values(&env, &mut rng, 0..10);
    assert_eq!(env.stats().journal_files_ready, 0, "no spare asked for yet");
    // Past half: the flusher is asked for the next journal.
    commit_values(&env, &mut rng, 10..20);
    wait_for("a spare", || env.stats().journal_files_ready >= 1);
    let filled_before = env.stats().journals_filled_by_writer;
    commit_values(&env, &mut rng, 20..40);
    let stats = env.stats();
    assert!(stats.journal_spares_used >= 1, "the rotation took a spare");
    assert_eq!(
        stats.journals_filled_by_writer, filled_before,
        "a rotation zero-filled its journal on the commit path"
    );
}
