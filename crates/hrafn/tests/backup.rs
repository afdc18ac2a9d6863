//! Online backups: a full backup taken during heavy writes restores to exactly one
//! committed state at or after the moment it started; a chain of full and incremental
//! backups restores to the last one (and each prefix to its own last); a crash during a
//! backup leaves the source untouched and the partial backup rejected by `verify`; a
//! manifest with any damage is rejected.

mod common;

use hrafn::backup::{self, BackupKind, Manifest};
use hrafn::storage::Storage;
use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::{Environment, Error, Options, WriteBatch};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The state a consistent commit leaves: in tree "log", keys `1..=last` and "last";
/// in tree "merged", per writer `w`, keys `w/0..=n` and `w/last` = n.
fn assert_consistent(env: &Environment) -> hrafn::Result<u64> {
    let rtx = env.begin_read()?;
    let Ok(log) = rtx.open_tree("log") else {
        return Ok(0);
    };
    let last = log
        .get(b"last")?
        .map_or(0, |v| u64::from_be_bytes(v.try_into().expect("8 bytes")));
    assert_eq!(log.len(), last + u64::from(last > 0), "log keys 1..=last");
    for i in 1..=last {
        assert!(log.get(i.to_be_bytes())?.is_some(), "log key {i} of {last}");
    }
    if let Ok(merged) = rtx.open_tree("merged") {
        let mut per_writer: BTreeMap<u8, u64> = BTreeMap::new();
        for entry in merged.range::<&[u8], _>(..)? {
            let (k, _) = entry?;
            if k.len() == 9 {
                *per_writer.entry(k[0]).or_default() += 1;
            }
        }
        for (w, count) in per_writer {
            let last = merged
                .get([w, b'L'])?
                .map(|v| u64::from_be_bytes(v.try_into().expect("8 bytes")))
                .expect("a writer's last");
            assert_eq!(count, last + 1, "writer {w}: keys 0..=last");
        }
    }
    Ok(last)
}

/// Commits until `stop`: transactions on "log", merged batches on "merged".
fn heavy_writes(
    env: &Arc<Environment>,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    {
        let (env, stop) = (Arc::clone(env), Arc::clone(stop));
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let mut txn = env.begin_write().expect("begin");
                {
                    let mut log = txn.open_tree("log").expect("log");
                    log.insert(i.to_be_bytes(), [7u8; 200]).expect("insert");
                    log.insert(b"last", i.to_be_bytes()).expect("last");
                    let mut noise = txn.open_tree("noise").expect("noise");
                    for j in 0..20 {
                        noise
                            .insert(common::mix(i * 31 + j).to_be_bytes(), [1u8; 100])
                            .expect("noise");
                    }
                }
                txn.commit().expect("commit");
            }
        }));
    }
    for w in 0..2u8 {
        let (env, stop) = (Arc::clone(env), Arc::clone(stop));
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut key = vec![w];
                key.extend_from_slice(&n.to_be_bytes());
                let mut batch = WriteBatch::new();
                batch.insert("merged", key, [w; 50]);
                batch.insert("merged", [w, b'L'], n.to_be_bytes());
                env.write(batch).expect("merged write");
                n += 1;
            }
        }));
    }
    threads
}

#[test]
fn a_backup_taken_during_heavy_writes_restores_to_one_committed_state_at_or_after_its_start()
-> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options::default()
        .journal_file_size_bytes(256 << 10)
        .sync_interval_ms(200);
    let env = Arc::new(Environment::open(dir.path().join("db"), options)?);
    let stop = Arc::new(AtomicBool::new(false));
    let threads = heavy_writes(&env, &stop);
    let mut held_ms_max = 0f64;
    for round in 0..4 {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let started_at = env.stats().txn_id;
        let path = dir.path().join(format!("backup{round}"));
        let manifest = env.backup_to(&path)?;
        held_ms_max = held_ms_max.max(manifest.writer_held.as_secs_f64() * 1000.0);
        assert!(
            manifest.last_txn_id >= started_at,
            "the backup holds transaction {}, older than {started_at} committed before it began",
            manifest.last_txn_id
        );
        assert_eq!(
            backup::verify(&path)?,
            Manifest {
                writer_held: std::time::Duration::ZERO,
                ..manifest.clone()
            }
        );
        let target = dir.path().join(format!("restored{round}"));
        let report = backup::restore(&[&path], &target)?;
        assert_eq!(report.last_txn_id, manifest.last_txn_id);
        let restored = Environment::open(&target, Options::default())?;
        assert_eq!(restored.stats().txn_id, manifest.last_txn_id);
        let last = assert_consistent(&restored)?;
        assert!(last > 0 || round == 0);
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    assert!(
        held_ms_max < 1_000.0,
        "the writer was held {held_ms_max:.1} ms by a backup"
    );
    common::summary(&format!(
        "backup: 4 full backups during writes restored to one commit each; writer held at \
         most {held_ms_max:.2} ms, {} commits in all",
        env.stats().txn_id
    ));
    Ok(())
}

#[test]
fn a_backup_during_writes_on_the_simulated_disk_restores_to_one_committed_state()
-> hrafn::Result<()> {
    let source: Arc<dyn Storage> = Arc::new(SimStorage::new(0x5eed));
    let env = Arc::new(Environment::open_with_storage(source, Options::default())?);
    let stop = Arc::new(AtomicBool::new(false));
    let threads = heavy_writes(&env, &stop);
    for round in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let started_at = env.stats().txn_id;
        let dest = SimStorage::new(round);
        let manifest = env.backup_into(&dest, BackupKind::Full, &mut |_, _| {})?;
        assert!(manifest.last_txn_id >= started_at);
        let target = Arc::new(SimStorage::new(100 + round));
        backup::restore_into(&[(&dest, "backup".into())], target.clone())?;
        let restored = Environment::open_with_storage(target, Options::default())?;
        assert_eq!(restored.stats().txn_id, manifest.last_txn_id);
        assert_consistent(&restored)?;
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    Ok(())
}

/// Everything in the environment, for comparing a restore with the source at a backup.
type Contents = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

fn contents(env: &Environment) -> hrafn::Result<Contents> {
    let rtx = env.begin_read()?;
    let mut out = BTreeMap::new();
    for name in rtx.list_trees()? {
        let tree = rtx.open_tree(&name)?;
        let entries = tree
            .range::<&[u8], _>(..)?
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<hrafn::Result<_>>()?;
        out.insert(name, entries);
    }
    Ok(out)
}

fn commit_round(env: &Environment, round: u64, txns: u64) -> hrafn::Result<()> {
    for t in 0..txns {
        let mut txn = env.begin_write()?;
        {
            let mut tree = txn.open_tree(&format!("round{}", round % 3))?;
            for k in 0..30 {
                let key = common::mix(round << 32 | t << 8 | k) % 5_000;
                if k % 5 == 0 {
                    tree.remove(key.to_be_bytes())?;
                } else {
                    tree.insert(key.to_be_bytes(), [round as u8; 120])?;
                }
            }
        }
        txn.commit()?;
    }
    Ok(())
}

fn journal_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("journal")).map_or(0, |d| d.count())
}

#[test]
fn a_chain_of_full_and_incremental_backups_restores_to_the_last_one() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let options = Options::default()
        .incremental_backups(true)
        .journal_file_size_bytes(64 << 10)
        .sync_interval_ms(50);
    let mut env = Environment::open(&db, options.clone())?;
    commit_round(&env, 0, 50)?;
    let mut chain = vec![dir.path().join("full")];
    let mut expected = vec![contents(&env)?];
    let full = env.backup_to(&chain[0])?;
    assert_eq!(full.kind, BackupKind::Full);
    let mut manifests = vec![full];
    for round in 1..=4u64 {
        commit_round(&env, round, 40 + round * 10)?;
        env.flush_and_sync()?; // the journals are synced: only the backup keeps them
        if round == 2 {
            // The kept journals survive a restart.
            drop(env);
            env = Environment::open(&db, options.clone())?;
        }
        let path = dir.path().join(format!("incr{round}"));
        let manifest = env.incremental_backup_to(&path)?;
        assert_eq!(manifest.kind, BackupKind::Incremental);
        assert_eq!(
            manifest.first_txn_id,
            manifests.last().expect("one").last_txn_id + 1
        );
        assert_eq!(manifest.last_txn_id, env.stats().txn_id);
        manifests.push(manifest);
        chain.push(path);
        expected.push(contents(&env)?);
    }
    assert!(
        manifests.iter().any(|m| m.files.len() > 1),
        "an incremental spans several journal files"
    );
    // Once backed up and synced, the journals are released.
    commit_round(&env, 5, 5)?;
    env.flush_and_sync()?;
    // Left: the journals a reopen would replay and those kept ready for reuse.
    let kept = journal_files(&db) as u64;
    let stats = env.stats();
    assert!(
        kept <= stats.journal_files_waiting + stats.journal_files_ready && kept <= 12,
        "{kept} journal files after the last backup and a sync: {stats:?}"
    );
    for n in 1..=chain.len() {
        let target = dir.path().join(format!("restored{n}"));
        let report = backup::restore(&chain[..n], &target)?;
        assert_eq!(report.backups, n);
        assert_eq!(report.last_txn_id, manifests[n - 1].last_txn_id);
        let restored = Environment::open(&target, Options::default())?;
        assert_eq!(contents(&restored)?, expected[n - 1], "chain of {n}");
        restored.check()?;
    }
    // A gap, a chain without its full backup, and a chain out of order are refused.
    for bad in [
        vec![chain[0].clone(), chain[2].clone()],
        vec![chain[1].clone(), chain[2].clone()],
        vec![chain[0].clone(), chain[2].clone(), chain[1].clone()],
    ] {
        let target = dir.path().join("refused");
        let refused = backup::restore(&bad, &target);
        assert!(
            matches!(refused, Err(Error::InvalidBackup { .. })),
            "{refused:?}"
        );
        assert!(!target.join("data.hrafn").exists(), "nothing laid down");
    }
    common::summary(&format!(
        "backup chain: 1 full + 4 incrementals ({} transactions, a restart in between), every \
         prefix restored exactly; {kept} journal files left after the last backup",
        env.stats().txn_id
    ));
    Ok(())
}

#[test]
fn refusals_without_the_option_and_into_a_used_directory() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path().join("db"), Options::default())?;
    commit_round(&env, 0, 3)?;
    assert!(matches!(
        env.incremental_backup_to(dir.path().join("incr")),
        Err(Error::InvalidArgument(_))
    ));
    let used = dir.path().join("used");
    std::fs::create_dir_all(&used).expect("dir");
    std::fs::write(used.join("something"), b"x").expect("file");
    assert!(matches!(
        env.backup_to(&used),
        Err(Error::InvalidArgument(_))
    ));
    let not_a_backup = backup::verify(&used);
    assert!(
        matches!(not_a_backup, Err(Error::InvalidBackup { .. })),
        "{not_a_backup:?}"
    );
    Ok(())
}

/// Power cut at every storage operation of a full and then of an incremental backup (the
/// backup's disk is the one that fails), each followed by three kinds of damage: the
/// source stays as it was and keeps working, and the partial backup is rejected by
/// `verify` unless its manifest made it, in which case it restores to the right state.
/// The first run that reaches its end is the backup the chain goes on with.
#[test]
fn a_crash_during_backup_leaves_the_source_untouched_and_the_partial_backup_rejected()
-> hrafn::Result<()> {
    let source = Arc::new(SimStorage::new(0x6261_636b));
    let options = Options::default()
        .incremental_backups(true)
        .journal_file_size_bytes(64 << 10);
    let env = Environment::open_with_storage(source as Arc<dyn Storage>, options)?;
    commit_round(&env, 0, 20)?;
    let (mut rejected, mut accepted) = (0, 0);
    let mut chain: Vec<SimStorage> = Vec::new();
    let mut manifests: Vec<Manifest> = Vec::new();
    for (round, kind) in [(1, BackupKind::Full), (2, BackupKind::Incremental)] {
        commit_round(&env, round, 20)?;
        let want = contents(&env)?;
        for op in 0.. {
            let dest = SimStorage::new(op);
            dest.crash_at(op);
            let before = env.stats().txn_id;
            let result = env.backup_into(&dest, kind, &mut |_, _| {});
            assert_eq!(env.stats().txn_id, before);
            if let Ok(manifest) = result {
                assert!(
                    !dest.is_frozen(),
                    "{kind:?}: succeeded past its crash point"
                );
                // What survives a power cut now: the backup is durable once it returns.
                chain.push(dest.power_cut(Damage::DropAll));
                manifests.push(manifest);
                break;
            }
            for damage in [Damage::DropAll, Damage::KeepAll, Damage::Random] {
                let disk = dest.power_cut(damage);
                match backup::verify_storage(&disk, "partial") {
                    Err(Error::InvalidBackup { .. }) => rejected += 1,
                    Err(e) => panic!("{kind:?} op {op} {damage:?}: {e}"),
                    Ok(_) => {
                        // The manifest was durable: the backup is whole.
                        accepted += 1;
                        let mut laid: Vec<(&dyn Storage, String)> = chain
                            .iter()
                            .map(|s| (s as &dyn Storage, "earlier".to_string()))
                            .collect();
                        laid.push((&disk, "partial".into()));
                        let target = Arc::new(SimStorage::new(3));
                        backup::restore_into(&laid, target.clone())?;
                        let restored = Environment::open_with_storage(target, Options::default())?;
                        assert_eq!(contents(&restored)?, want, "{kind:?} op {op} {damage:?}");
                    }
                }
            }
        }
        // The source is untouched and keeps working.
        env.check()?;
        assert_eq!(contents(&env)?, want);
    }
    // No failed incremental moved the backup point: the one that went through starts
    // right after the full backup, and the chain restores to the source's state.
    assert_eq!(manifests[1].first_txn_id, manifests[0].last_txn_id + 1);
    let target = Arc::new(SimStorage::new(5));
    let laid: Vec<(&dyn Storage, String)> = chain
        .iter()
        .map(|s| (s as &dyn Storage, "chain".to_string()))
        .collect();
    backup::restore_into(&laid, target.clone())?;
    let restored = Environment::open_with_storage(target, Options::default())?;
    assert_eq!(contents(&restored)?, contents(&env)?);
    assert!(
        rejected > 0 && accepted > 0,
        "{rejected} rejected, {accepted} accepted"
    );
    common::summary(&format!(
        "backup crash: power cut at every operation of a full and an incremental backup \
         (3 damage variants each): {rejected} partial backups rejected by verify, {accepted} \
         whole ones restored; the source untouched"
    ));
    Ok(())
}

#[test]
fn a_damaged_manifest_is_rejected_never_a_panic() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path().join("db"), Options::default())?;
    commit_round(&env, 0, 3)?;
    let dest = SimStorage::new(9);
    let manifest = env.backup_into(&dest, BackupKind::Full, &mut |_, _| {})?;
    let text = manifest.encode().into_bytes();
    assert!(Manifest::decode(&text, "m").is_ok());
    for cut in 0..text.len() {
        assert!(Manifest::decode(&text[..cut], "m").is_err(), "cut at {cut}");
    }
    for bit in 0..text.len() * 8 {
        let mut damaged = text.clone();
        damaged[bit / 8] ^= 1 << (bit % 8);
        assert!(Manifest::decode(&damaged, "m").is_err(), "bit {bit}");
    }
    // A flipped bit in a file the manifest lists.
    let data = dest.read_file("data.hrafn").expect("data file");
    dest.flip_bit("data.hrafn", (data.len() as u64 / 2) * 8)
        .expect("flip");
    assert!(matches!(
        backup::verify_storage(&dest, "flipped"),
        Err(Error::InvalidBackup { .. })
    ));
    Ok(())
}

/// Power cut at every storage operation of an environment with incremental backups while
/// it commits and takes backups: it reopens, its integrity check passes, and an incremental
/// backup taken after the reopen continues a chain of the backups that finished (the last
/// one whose point the environment recorded), which restores to exactly what it holds.
#[test]
fn power_loss_in_an_environment_keeping_journals_for_backups() -> hrafn::Result<()> {
    let options = Options::default()
        .incremental_backups(true)
        .journal_file_size_bytes(64 << 10)
        .sync_interval_ms(1)
        .flush_interval_ms(1);
    /// Commits and backups on `sim` until the first failure; the backups that finished
    /// (one whose manifest is durable finished, even if the environment failed to record
    /// that afterwards).
    fn run(sim: &SimStorage, options: &Options) -> Vec<(SimStorage, Manifest)> {
        let mut done = Vec::new();
        let mut last_dest = None;
        let attempt = (|| -> hrafn::Result<()> {
            let env = Environment::open_with_storage(Arc::new(sim.clone()), options.clone())?;
            for round in 0..5u64 {
                commit_round(&env, round, 6)?;
                let kind = if round == 0 {
                    BackupKind::Full
                } else {
                    BackupKind::Incremental
                };
                let dest = SimStorage::new(round);
                last_dest = Some(dest.clone());
                env.backup_into(&dest, kind, &mut |_, _| {})?;
                last_dest = None;
                let durable = dest.power_cut(Damage::DropAll);
                let manifest = backup::verify_storage(&durable, "finished")?;
                done.push((durable, manifest));
            }
            Ok(())
        })();
        if let Err(e) = attempt {
            assert!(
                e.to_string().contains("simulated power loss"),
                "only the power cut fails: {e}"
            );
            if let Some(dest) = last_dest {
                let durable = dest.power_cut(Damage::DropAll);
                if let Ok(manifest) = backup::verify_storage(&durable, "interrupted") {
                    done.push((durable, manifest));
                }
            }
        }
        done
    }
    let seed = 0x6b65_6570;
    let dry = SimStorage::new(seed);
    assert_eq!(run(&dry, &options).len(), 5);
    let ops = dry.ops_count();
    let (mut states, mut chains) = (0, 0);
    for op in (0..ops).step_by(3) {
        let sim = SimStorage::new(seed);
        sim.crash_at(op);
        let done = run(&sim, &options);
        for damage in [Damage::DropAll, Damage::KeepAll, Damage::Random] {
            let disk = Arc::new(sim.power_cut(damage));
            let env = Environment::open_with_storage(disk, options.clone())
                .unwrap_or_else(|e| panic!("op {op} {damage:?}: reopen: {e}"));
            env.check()?;
            states += 1;
            if done.is_empty() {
                continue; // no full backup finished
            }
            let dest = SimStorage::new(77);
            let next = env.backup_into(&dest, BackupKind::Incremental, &mut |_, _| {})?;
            // The last backup the environment recorded is where the new one starts: the
            // finished ones after it (if any) overlap it.
            assert!(
                done.iter().any(|(_, m)| m.end == next.start) || next.first_txn_id == 1,
                "op {op} {damage:?}: the new incremental starts at no backup's end"
            );
            let mut chain: Vec<(&dyn Storage, String)> = done
                .iter()
                .map(|(s, _)| (s as &dyn Storage, "finished".to_string()))
                .collect();
            chain.push((&dest, "after the reopen".into()));
            let target = Arc::new(SimStorage::new(78));
            backup::restore_into(&chain, target.clone()).unwrap_or_else(|e| {
                let ms: Vec<_> = done
                    .iter()
                    .map(|(_, m)| (m.first_txn_id, m.last_txn_id, m.start, m.end))
                    .collect();
                panic!(
                    "op {op} {damage:?}: restore: {e}; finished {ms:?}; new {:?}",
                    (next.first_txn_id, next.last_txn_id, next.start, next.end)
                )
            });
            let restored = Environment::open_with_storage(target, Options::default())?;
            assert_eq!(contents(&restored)?, contents(&env)?, "op {op} {damage:?}");
            chains += 1;
        }
    }
    common::summary(&format!(
        "backup power loss: {states} crash states of an environment keeping journals for \
         backups (every third of {ops} operations × 3 damage variants) reopened and checked; \
         {chains} chains continued after the reopen and restored exactly"
    ));
    Ok(())
}

/// Every step in its own process lifetime (each open starts a new journal file, so the
/// numbers of the files holding records skip): the chain still restores exactly.
#[test]
fn a_chain_across_reopens_between_every_step() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let options = Options::default().incremental_backups(true);
    let write = |from: u64| -> hrafn::Result<()> {
        let env = Environment::open(&db, options.clone())?;
        let mut wtx = env.begin_write()?;
        {
            let mut t = wtx.open_tree("t")?;
            for i in from..from + 100 {
                t.insert(i.to_be_bytes(), [i as u8; 40])?;
            }
        }
        wtx.commit()
    };
    write(0)?;
    let mut chain = vec![dir.path().join("full")];
    Environment::open(&db, options.clone())?.backup_to(&chain[0])?;
    for round in 1..4u64 {
        write(round * 100)?;
        let path = dir.path().join(format!("i{round}"));
        Environment::open(&db, options.clone())?.incremental_backup_to(&path)?;
        chain.push(path);
    }
    let want = contents(&Environment::open(&db, options.clone())?)?;
    let target = dir.path().join("restored");
    let report = backup::restore(&chain, &target)?;
    assert_eq!(report.records_replayed, 3);
    assert_eq!(
        contents(&Environment::open(&target, Options::default())?)?,
        want
    );
    Ok(())
}

/// A compacted backup holds only live data, verifies and restores as a full backup does,
/// and never starts a chain: an incremental of the source does not continue it.
#[test]
fn a_compacted_backup_is_smaller_restores_the_same_and_starts_no_chain() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options::default().incremental_backups(true);
    let env = Environment::open(dir.path().join("db"), options)?;
    let mut wtx = env.begin_write()?;
    {
        let mut tree = wtx.open_tree("t")?;
        for i in 0..20_000u32 {
            tree.insert(i.to_be_bytes(), [i as u8; 200])?;
        }
    }
    wtx.commit()?;
    let mut wtx = env.begin_write()?;
    wtx.open_tree("t")?.retain(|k, _| k[3] == 0)?;
    wtx.commit()?;
    env.backup_to(dir.path().join("full"))?;
    let compacted = env.compacted_backup_to(dir.path().join("compacted"))?;
    assert_eq!(compacted.kind, BackupKind::Full);
    let (full_bytes, compacted_bytes) = (
        common::dir_bytes(&dir.path().join("full")),
        common::dir_bytes(&dir.path().join("compacted")),
    );
    eprintln!("full backup {full_bytes} bytes, compacted backup {compacted_bytes} bytes");
    assert!(
        compacted_bytes * 10 < full_bytes,
        "{compacted_bytes} vs {full_bytes}"
    );
    assert_eq!(backup::verify(dir.path().join("compacted"))?, {
        let mut m = compacted.clone();
        m.writer_held = std::time::Duration::ZERO;
        m
    });
    backup::restore(&[dir.path().join("compacted")], dir.path().join("restored"))?;
    let restored = Environment::open(dir.path().join("restored"), Options::default())?;
    assert_eq!(contents(&restored)?, contents(&env)?);
    assert_eq!(restored.begin_read()?.open_tree("t")?.len(), 79);
    drop(restored);

    // An incremental of the source continues the page backup, never the compacted one.
    let mut wtx = env.begin_write()?;
    wtx.open_tree("t")?.insert(b"later", b"x")?;
    wtx.commit()?;
    env.incremental_backup_to(dir.path().join("incremental"))?;
    let refused = backup::restore(
        &[dir.path().join("compacted"), dir.path().join("incremental")],
        dir.path().join("mixed"),
    );
    assert!(
        matches!(&refused, Err(Error::InvalidBackup { reason, .. }) if reason.contains("another environment")),
        "{refused:?}"
    );
    backup::restore(
        &[dir.path().join("full"), dir.path().join("incremental")],
        dir.path().join("chained"),
    )?;
    // A compacted backup into a used directory is refused before anything is written.
    let used = env.compacted_backup_to(dir.path().join("full"));
    assert!(matches!(used, Err(Error::InvalidArgument(_))), "{used:?}");
    backup::verify(dir.path().join("full"))?;
    Ok(())
}

// Chains put together wrongly: a restore either gives exactly the state of the chain's last
// backup or fails with a typed error, never a silently different state.

fn restored_contents(chain: &[PathBuf], target: &Path) -> hrafn::Result<Contents> {
    backup::restore(chain, target)?;
    let env = Environment::open(target, Options::default())?;
    env.check()?;
    contents(&env)
}

fn options() -> Options {
    Options::default().incremental_backups(true)
}

/// A full backup taken read-only (as `hrafn backup` takes one while another process
/// writes) starts no chain; the first incremental after it starts where the environment
/// began. Restoring the two must give the incremental's state or be refused.
#[test]
fn a_read_only_full_backup_then_an_incremental_restores_exactly_or_is_refused() -> hrafn::Result<()>
{
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let full = dir.path().join("full");
    let incr = dir.path().join("incr");
    {
        let env = Environment::open(&db, options())?;
        commit_round(&env, 1, 6)?;
    }
    {
        let env = Environment::open_read_only(&db, options())?;
        env.backup_to(&full)?;
    }
    let env = Environment::open(&db, options())?;
    commit_round(&env, 2, 4)?;
    env.incremental_backup_to(&incr)?;
    let expected = contents(&env)?;
    drop(env);
    let target = dir.path().join("restored");
    match restored_contents(&[full, incr], &target) {
        Ok(got) => assert_eq!(got, expected),
        Err(e) => {
            assert!(matches!(e, Error::InvalidBackup { .. }), "{e:?}");
            assert!(!target.join("data.hrafn").exists(), "laid down");
        }
    }
    Ok(())
}

/// Two chains of one environment, and an incremental given twice: each full backup goes
/// only with its own incrementals; a repeated incremental changes nothing.
#[test]
fn incrementals_on_the_wrong_full_backup_are_refused_and_a_repeat_is_harmless() -> hrafn::Result<()>
{
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |name: &str| dir.path().join(name);
    let env = Environment::open(p("db"), options())?;
    commit_round(&env, 1, 5)?;
    env.backup_to(p("full_a"))?;
    commit_round(&env, 2, 5)?;
    env.incremental_backup_to(p("incr_a"))?;
    let after_a = contents(&env)?;
    commit_round(&env, 3, 5)?;
    env.backup_to(p("full_b"))?;
    commit_round(&env, 4, 5)?;
    env.incremental_backup_to(p("incr_b"))?;
    let after_b = contents(&env)?;

    // Another environment's incremental never continues this one's full backup.
    let other = Environment::open(p("other"), options())?;
    commit_round(&other, 1, 5)?;
    other.backup_to(p("other_full"))?;
    commit_round(&other, 2, 5)?;
    other.incremental_backup_to(p("other_incr"))?;

    for (i, bad) in [
        vec![p("full_b"), p("incr_a")],
        vec![p("full_a"), p("incr_b")],
        vec![p("full_a"), p("incr_a"), p("incr_b")],
        vec![p("full_a"), p("other_incr")],
        vec![p("other_full"), p("incr_a")],
        vec![p("incr_a")],
    ]
    .into_iter()
    .enumerate()
    {
        let target = p(&format!("refused{i}"));
        let refused = backup::restore(&bad, &target);
        assert!(
            matches!(refused, Err(Error::InvalidBackup { .. })),
            "chain {i}: {refused:?}"
        );
        assert!(!target.join("data.hrafn").exists(), "chain {i}: laid down");
    }
    let twice = restored_contents(
        &[p("full_a"), p("incr_a"), p("incr_a")],
        &p("restored_twice"),
    )?;
    assert_eq!(twice, after_a);
    assert_eq!(
        restored_contents(&[p("full_b"), p("incr_b")], &p("restored_b"))?,
        after_b
    );
    Ok(())
}

/// A restore into a directory that holds anything is refused and leaves it as it was.
#[test]
fn a_restore_into_a_used_directory_is_refused_untouched() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path().join("db"), Options::default())?;
    commit_round(&env, 1, 3)?;
    env.backup_to(dir.path().join("full"))?;
    let used = dir.path().join("used");
    std::fs::create_dir(&used).expect("dir");
    std::fs::write(used.join("keep"), b"mine").expect("file");
    let refused = backup::restore(&[dir.path().join("full")], &used);
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    let left: Vec<_> = std::fs::read_dir(&used)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["keep"]);
    Ok(())
}

/// A backup kept inside the environment's own directory goes when the directory goes
/// (an in-place compaction replaces it), so it is refused.
#[test]
fn a_backup_inside_the_environment_directory_is_refused() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let options = options();
    let env = Environment::open(&db, options)?;
    commit_round(&env, 1, 3)?;
    for attempt in [
        env.backup_to(db.join("b1")),
        env.backup_to(&db),
        env.incremental_backup_to(db.join("journal").join("b2")),
        env.compacted_backup_to(db.join("b3")),
        env.backup_to(dir.path().join("missing").join("..").join("db").join("b4")),
    ] {
        assert!(
            matches!(attempt, Err(Error::InvalidArgument(_))),
            "{attempt:?}"
        );
    }
    for name in ["b1", "b3", "b4", "journal/b2"] {
        assert!(!db.join(name).exists(), "{name} left behind");
    }
    env.check()?;
    Ok(())
}

/// A backup that fails once it has begun writing (here its progress callback panics
/// after the first chunk) removes what it wrote: a directory it made goes, an empty one
/// it was given is empty again, so the retry is not refused as "not empty". A directory
/// left by a crash (files, no manifest) is refused with a word on what it may be.
#[test]
fn a_failed_backup_leaves_its_directory_as_found_and_a_retry_succeeds() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path().join("db"), Options::default())?;
    commit_round(&env, 1, 3)?;
    let given = dir.path().join("given");
    std::fs::create_dir(&given).expect("dir");
    for (target, made) in [(dir.path().join("made"), true), (given.clone(), false)] {
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            env.backup_to_with_progress(&target, BackupKind::Full, &mut |done, _| {
                assert!(std::fs::read_dir(&target).expect("list").count() > 0);
                panic!("failing after {done} bytes");
            })
        }));
        assert!(failed.is_err(), "the backup was to fail");
        if made {
            assert!(!target.exists(), "the directory it made is left");
        } else {
            assert_eq!(std::fs::read_dir(&target).expect("list").count(), 0);
        }
        let manifest = env.backup_to(&target)?;
        assert_eq!(backup::verify(&target)?.last_txn_id, manifest.last_txn_id);
    }
    let interrupted = dir.path().join("interrupted");
    std::fs::create_dir(&interrupted).expect("dir");
    std::fs::write(interrupted.join("data.hrafn"), b"partial").expect("file");
    let refused = env.backup_to(&interrupted);
    assert!(
        matches!(&refused, Err(Error::InvalidArgument(m)) if m.contains("interrupted")),
        "{refused:?}"
    );
    Ok(())
}

/// Journal numbers skip legitimately: a clean close removes the journal when all is synced
/// and backed up, and a session with no commits makes and removes one. The incremental
/// after such a session copies what follows the backup point and restores.
#[test]
fn an_incremental_after_a_session_without_commits_restores() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let full = dir.path().join("full");
    let incremental = dir.path().join("i1");
    {
        let env = Environment::open(&db, options())?;
        commit_round(&env, 1, 3)?;
        env.backup_to(&full)?;
    }
    drop(Environment::open(&db, options())?);
    let want = {
        let env = Environment::open(&db, options())?;
        commit_round(&env, 2, 3)?;
        env.incremental_backup_to(&incremental)?;
        contents(&env)?
    };
    let got = restored_contents(&[full, incremental], &dir.path().join("restored"))?;
    assert_eq!(got, want);
    Ok(())
}

/// Two backups at once: the second waits for the first. Otherwise a full backup finishing
/// while an incremental copies releases the journals the incremental reads, the writer
/// reuses them under it, and the incremental verifies but cannot be restored.
#[test]
fn backups_run_one_at_a_time_and_each_restores() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = options().journal_file_size_bytes(64 << 10);
    let env = Environment::open(dir.path().join("db"), options)?;
    let full1 = dir.path().join("full1");
    let full2 = dir.path().join("full2");
    let incremental = dir.path().join("i1");
    commit_round(&env, 1, 3)?;
    env.backup_to(&full1)?;
    commit_round(&env, 2, 40)?;
    env.flush_and_sync()?;
    let want = contents(&env)?;
    let finished_early = AtomicBool::new(false);
    std::thread::scope(|s| -> hrafn::Result<()> {
        let mut other = None;
        env.backup_to_with_progress(&incremental, BackupKind::Incremental, &mut |_, _| {
            if other.is_some() {
                return;
            }
            let (env, full2, finished_early) = (&env, &full2, &finished_early);
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            other = Some(s.spawn(move || -> hrafn::Result<()> {
                env.backup_to(full2)?;
                let _ = done_tx.send(());
                // New records rotate into the journals a finished backup released.
                commit_round(env, 3, 40)
            }));
            if done_rx
                .recv_timeout(std::time::Duration::from_secs(2))
                .is_ok()
            {
                finished_early.store(true, Ordering::SeqCst);
                // Let it write over the journals this backup is still to copy.
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        })?;
        other
            .expect("the progress was called")
            .join()
            .expect("no panic")
    })?;
    assert!(
        !finished_early.load(Ordering::SeqCst),
        "a second backup finished while the first was copying"
    );
    let got = restored_contents(&[full1, incremental], &dir.path().join("restored"))?;
    assert_eq!(got, want);
    restored_contents(&[full2], &dir.path().join("restored2"))?;
    Ok(())
}

/// With commits that skip the sync, a backup makes their records durable before the
/// backup point moves past them: after a power cut the source still holds what the
/// backup holds, so the next incremental continues the chain and restores.
#[test]
fn a_backup_point_never_runs_ahead_of_the_source_journal() -> hrafn::Result<()> {
    let sim = SimStorage::new(7);
    let options = options()
        .durability(hrafn::Durability::None)
        .flush_interval_ms(60_000)
        .sync_interval_ms(60_000);
    let full = SimStorage::new(8);
    {
        let env = Environment::open_with_storage(Arc::new(sim.clone()), options.clone())?;
        commit_round(&env, 1, 3)?;
        env.backup_into(&full, BackupKind::Full, &mut |_, _| {})?;
        std::mem::forget(env); // no clean close: the power goes
    }
    let after_cut = sim.power_cut(Damage::DropAll);
    let incremental = SimStorage::new(9);
    let want = {
        let env = Environment::open_with_storage(Arc::new(after_cut), options.clone())?;
        commit_round(&env, 2, 3)?;
        env.backup_into(&incremental, BackupKind::Incremental, &mut |_, _| {})?;
        contents(&env)?
    };
    let full = full.power_cut(Damage::DropAll);
    let incremental = incremental.power_cut(Damage::DropAll);
    let target = SimStorage::new(10);
    backup::restore_into(
        &[(&full, "full".into()), (&incremental, "i1".into())],
        Arc::new(target.clone()),
    )?;
    let restored = Environment::open_with_storage(Arc::new(target), Options::default())?;
    assert_eq!(contents(&restored)?, want);
    Ok(())
}

/// Two backups into one new directory, the second started while the first waits for an
/// open write transaction (before it has written anything): the second is refused as
/// into a used directory once the first is done, and the first's backup stays whole.
#[test]
fn two_backups_into_one_directory_leave_one_whole_backup() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path().join("db"), Options::default())?;
    commit_round(&env, 1, 20)?;
    let target = dir.path().join("b");
    let results: Vec<hrafn::Result<Manifest>> = std::thread::scope(|s| {
        let wtx = env.begin_write().expect("write");
        let first = s.spawn(|| env.backup_to(&target));
        std::thread::sleep(std::time::Duration::from_millis(100));
        let second = s.spawn(|| env.backup_to(&target));
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(wtx);
        vec![
            first.join().expect("no panic"),
            second.join().expect("no panic"),
        ]
    });
    assert!(results[0].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(Error::InvalidArgument(_))),
        "{results:?}"
    );
    backup::verify(&target)?;
    Ok(())
}

/// A backup that finds its directory taken by another backup while it waited for the
/// backup lock refuses without removing what the other one wrote (its clean-up was
/// armed before that check and emptied the directory).
#[test]
fn a_backup_refused_under_the_lock_removes_nothing() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path().join("db"), Options::default())?;
    let mut wtx = env.begin_write()?;
    wtx.open_tree("t")?.insert(b"k", [1u8; 100])?;
    wtx.commit()?;
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let (holding, release) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|scope| -> hrafn::Result<()> {
        let env = &env;
        let (holding, release, first) = (&holding, &release, &first);
        // Holds the backup lock until released.
        let slow = scope.spawn(move || {
            env.backup_to_with_progress(first, BackupKind::Full, &mut |_, _| {
                holding.store(true, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            })
        });
        while !holding.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Made first (the backup then finds it empty), so that the other backup's file
        // below has a directory whatever the waiting thread has done by then.
        std::fs::create_dir(&second).expect("mkdir");
        let waiting = scope.spawn(|| env.backup_to(&second));
        // The second backup passed its first check (the directory was empty) and waits
        // for the lock; another backup's file appears meanwhile.
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::fs::write(second.join("data.hrafn"), b"another backup's").expect("write");
        release.store(true, Ordering::SeqCst);
        slow.join().expect("first backup")?;
        let refused = waiting.join().expect("second backup");
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
        Ok(())
    })?;
    assert_eq!(
        std::fs::read(second.join("data.hrafn")).expect("the other backup's file stays"),
        b"another backup's"
    );
    Ok(())
}

/// An incremental backup copies journals, which stay until a backup takes them: it holds
/// no snapshot while it copies, which would keep the flusher from writing newer pages
/// (and fill scratch under steady writes during a long copy).
#[test]
fn an_incremental_backup_holds_no_snapshot_while_it_copies() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(
        dir.path().join("db"),
        Options::default().incremental_backups(true),
    )?;
    env.backup_to(dir.path().join("full"))?;
    let mut wtx = env.begin_write()?;
    wtx.open_tree("t")?.insert(b"k", [1u8; 100])?;
    wtx.commit()?;
    let mut readers_seen = Vec::new();
    let manifest = env.backup_to_with_progress(
        dir.path().join("incr"),
        BackupKind::Incremental,
        &mut |_, _| readers_seen.push(env.stats().readers_active),
    )?;
    assert_eq!(manifest.last_txn_id, env.stats().txn_id);
    assert!(!readers_seen.is_empty());
    assert!(readers_seen.iter().all(|&r| r == 0), "{readers_seen:?}");
    let restored = dir.path().join("restored");
    backup::restore(
        &[dir.path().join("full"), dir.path().join("incr")],
        &restored,
    )?;
    let copy = Environment::open(&restored, Options::default())?;
    assert_eq!(
        copy.begin_read()?.open_tree("t")?.get(b"k")?,
        Some(&[1u8; 100][..])
    );
    Ok(())
}
