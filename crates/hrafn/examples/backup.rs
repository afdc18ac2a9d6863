//! Backups: a full backup and an incremental one taken while the environment stays open,
//! each verified, then restored as a chain into a new directory and opened there.
//!
//! Run it with:
//!
//! ```sh
//! cargo run --release -p hrafn --example backup
//! ```

use hrafn::{Environment, Options, WriteBatch};

fn insert_range(env: &Environment, from: u64, to: u64) -> hrafn::Result<()> {
    let mut batch = WriteBatch::new();
    for i in from..to {
        batch.insert("orders", i.to_be_bytes(), format!("order {i}"));
    }
    env.write(batch)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (db, full, incremental, restored) = (
        dir.path().join("db"),
        dir.path().join("backup-full"),
        dir.path().join("backup-incr-1"),
        dir.path().join("restored"),
    );

    // Incremental backups need journals kept until a backup copies them: the option is
    // fixed when the environment is created.
    let env = Environment::open(&db, Options::default().incremental_backups(true))?;
    insert_range(&env, 0, 1_000)?;

    // A full backup: the pages of the last commit, copied while writes go on. It also
    // starts the chain the incremental backups continue.
    let manifest = env.backup_to(&full)?;
    println!(
        "full backup: transactions up to {}, {} files",
        manifest.last_txn_id,
        manifest.files.len()
    );

    insert_range(&env, 1_000, 1_500)?;

    // An incremental backup: the journal records committed since the last backup.
    let manifest = env.incremental_backup_to(&incremental)?;
    println!(
        "incremental backup: transactions {}..={}",
        manifest.first_txn_id, manifest.last_txn_id
    );

    // Verify each backup without restoring it: manifest, sizes and checksums.
    for path in [&full, &incremental] {
        let manifest = hrafn::backup::verify(path)?;
        println!("{}: {:?}, ok", path.display(), manifest.kind);
    }

    // Restore the chain (the full backup, then each incremental in order) into an empty
    // directory; restore replays the journal records and runs the integrity check.
    let report = hrafn::backup::restore(&[&full, &incremental], &restored)?;
    println!(
        "restored to transaction {} from {} backups ({} journal records replayed)",
        report.last_txn_id, report.backups, report.records_replayed
    );

    let copy = Environment::open(&restored, Options::default())?;
    {
        let rtx = copy.begin_read()?;
        let orders = rtx.open_tree("orders")?;
        assert_eq!(orders.len(), 1_500);
        assert_eq!(
            orders.get(1_499u64.to_be_bytes())?,
            Some(&b"order 1499"[..])
        );
    }
    copy.close()?;
    env.close()?;
    Ok(())
}
