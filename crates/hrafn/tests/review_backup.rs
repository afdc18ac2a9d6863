//! Backup chains put together wrongly: a restore either gives exactly the state of the
//! chain's last backup or fails with a typed error, never a silently different state.

use hrafn::backup;
use hrafn::{Environment, Error, Options};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

type Contents = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

fn contents(env: &Environment) -> hrafn::Result<Contents> {
    let rtx = env.begin_read()?;
    let mut out = BTreeMap::new();
    for name in rtx.list_trees()? {
        let entries = rtx
            .open_tree(&name)?
            .range::<&[u8], _>(..)?
            .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<hrafn::Result<_>>()?;
        out.insert(name, entries);
    }
    Ok(out)
}

/// Commits `txns` transactions that overwrite and delete keys written before, so that
/// replaying a record twice or skipping one shows in the contents.
fn commit_round(env: &Environment, round: u64, txns: u64) -> hrafn::Result<()> {
    for t in 0..txns {
        let mut txn = env.begin_write()?;
        {
            let mut tree = txn.open_tree("t")?;
            for k in 0..20u64 {
                let key = (round * 7 + t * 3 + k) % 60;
                if k % 4 == 0 {
                    tree.remove(key.to_be_bytes())?;
                } else {
                    tree.insert(key.to_be_bytes(), [round as u8, t as u8, k as u8])?;
                }
            }
            tree.insert(b"round", round.to_be_bytes())?;
        }
        txn.commit()?;
    }
    Ok(())
}

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
