//! Quick start: open an environment, write two kinds of trees in one transaction, apply a
//! `WriteBatch`, and read from a snapshot that later commits do not change.
//!
//! Run it with:
//!
//! ```sh
//! cargo run --release -p hrafn --example quickstart
//! ```

use hrafn::{Environment, Options, WriteBatch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An environment is a directory; it is created if it does not exist.
    let dir = tempfile::tempdir()?;
    let env = Environment::open(dir.path(), Options::default())?;

    // One write transaction, two structures. Nothing is visible to readers until commit,
    // and commit returns once the transaction is durable.
    let mut wtx = env.begin_write()?;
    {
        let mut users = wtx.open_tree("users")?; // created on first open
        users.insert(b"alice", b"admin")?;
        users.insert(b"bob", b"reader")?;
    }
    {
        // A fixed-size tree: u64 keys, 8-byte values (here an f64 per second).
        let mut cpu = wtx.open_fixed_tree("cpu", 8)?;
        for second in 0..60u64 {
            let load = 0.5 + (second % 10) as f64 / 20.0;
            cpu.insert(second, &load.to_le_bytes())?;
        }
    }
    wtx.commit()?;

    // A read transaction is a snapshot of the last commit.
    let before = env.begin_read()?;

    // A batch is applied atomically; concurrent callers' batches share one journal write.
    let mut batch = WriteBatch::new();
    batch
        .insert("users", b"carol", b"writer")
        .remove("users", b"bob");
    env.write(batch)?;

    // The old snapshot still sees bob and not carol.
    let users_then = before.open_tree("users")?;
    assert_eq!(users_then.get(b"bob")?, Some(&b"reader"[..]));
    assert_eq!(users_then.get(b"carol")?, None);

    // A new one sees the batch.
    let now = env.begin_read()?;
    let users = now.open_tree("users")?;
    println!("users at transaction {}:", now.txn_id());
    for entry in users.iter()? {
        let (name, role) = entry?;
        println!(
            "  {} = {}",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(role)
        );
    }

    // Ranges over a fixed-size tree are numeric; `range_rev` walks from the largest key.
    let cpu = now.open_fixed_tree("cpu")?;
    let mut sum = 0.0;
    for entry in cpu.range(10..20)? {
        let (_, value) = entry?;
        sum += f64::from_le_bytes(value.try_into()?);
    }
    println!(
        "cpu: {} samples, mean of seconds 10..20 = {:.3}",
        cpu.len(),
        sum / 10.0
    );
    if let Some((second, _)) = cpu.range_rev(..)?.next().transpose()? {
        println!("cpu: last sample at second {second}");
    }

    // Read transactions borrow the environment: end them before closing it. `close`
    // writes everything committed into the data file and reports any failure (dropping
    // the environment does the same but can only log it).
    drop(before);
    drop(now);
    env.close()?;
    Ok(())
}
