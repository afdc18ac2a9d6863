//! `hrafn compact`: a compacted copy of an environment (`Environment::compact_to`), written
//! into another directory or swapped in place of the original.
//!
//! In place, the copy is written into a sibling directory `<name>.compacting` while the
//! original is held open for writing (so no other writer can change it meanwhile); then,
//! with the writer's lock taken again (and the original's newest transaction unchanged
//! since it was closed), the two directories are exchanged in one atomic rename,
//! and the original is removed. A file system without that exchange is refused. Since the
//! whole directory is replaced, one that holds no environment, holds other entries, or is
//! a mount point is refused before anything is written.

use crate::{Failure, fail};
use hrafn::storage::{FileStorage, Storage};
use hrafn::{CompactProgress, CompactReport, Environment, Error, Options};
use indicatif::{HumanBytes, ProgressBar};
use std::io::Write;
use std::path::Path;

/// Runs the command and prints what it did.
pub fn compact(dir: &Path, into: Option<&Path>, out: &mut impl Write) -> Result<(), Failure> {
    let report = match into {
        // Read-only: a writer may go on meanwhile; the copy is one snapshot.
        Some(target) => copy(&crate::open(dir)?, target)?,
        None => in_place(dir)?,
    };
    writeln!(out, "bytes before\t{}", report.bytes_before)?;
    writeln!(out, "bytes after\t{}", report.bytes_after)?;
    writeln!(out, "ratio\t{:.3}", report.ratio())?;
    writeln!(out, "snapshot\t{}", report.txn_id)?;
    writeln!(out, "trees\t{}", report.trees)?;
    writeln!(out, "tables\t{}", report.tables)?;
    writeln!(out, "global indexes\t{}", report.global_indexes)?;
    writeln!(out, "nested trees\t{}", report.nested_trees)?;
    writeln!(out, "entries\t{}", report.entries)?;
    writeln!(out, "records\t{}", report.records)?;
    Ok(())
}

/// The bar of a compaction (by trees; the message counts entries and bytes).
pub(crate) fn progress_bar() -> ProgressBar {
    crate::backup::progress_bar("[{bar:30}] {pos}/{len} trees  {msg}")
}

/// Shows where a compaction is.
pub(crate) fn show(bar: &ProgressBar, p: &CompactProgress<'_>) {
    bar.set_length(p.trees_total);
    bar.set_position(p.trees_done);
    let tree = if p.tree.is_empty() {
        String::new()
    } else {
        format!("  {}", p.tree)
    };
    bar.set_message(format!(
        "{} entries, {}{tree}",
        p.entries,
        HumanBytes(p.data_bytes)
    ));
}

/// Compacts `env` into `target`, with a progress bar when standard error is a terminal.
fn copy(env: &Environment, target: &Path) -> Result<CompactReport, Failure> {
    let bar = progress_bar();
    let report = env.compact_to_with_progress(target, |p| show(&bar, p));
    bar.finish_and_clear();
    report.map_err(|e| {
        let Failure { code, message } = Failure::from(e);
        fail(
            code,
            format!("compacting into {}: {message}", target.display()),
        )
    })
}

/// The entries of an environment's directory (`docs/format.md`, "Files"): anything else in
/// it would be deleted with the original by an in-place compaction.
const ENVIRONMENT_ENTRIES: [&str; 6] = [
    hrafn::DATA_FILE,
    "header.a",
    "header.b",
    "journal",
    "LOCK",
    "scratch",
];

/// Compacts `dir` into a sibling directory and swaps the copy in.
fn in_place(dir: &Path) -> Result<CompactReport, Failure> {
    crate::require_dir(dir)?;
    let dir = std::fs::canonicalize(dir).map_err(|e| fail(3, format!("{}: {e}", dir.display())))?;
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(fail(
            2,
            "cannot compact the root directory in place: use --into",
        ));
    };
    let name = name.to_string_lossy();
    let temp = parent.join(format!("{name}.compacting"));
    if temp.symlink_metadata().is_ok() {
        return Err(fail(
            3,
            format!(
                "{} exists (left by an interrupted compaction?): remove it, then compact again",
                temp.display()
            ),
        ));
    }
    refuse_mount_point(&dir, parent)?;
    // A directory with no environment is refused here, as every read-only command refuses
    // it: a writer's open would create one in it, and the swap would then delete what the
    // directory held.
    drop(crate::open(&dir)?);
    refuse_foreign_entries(&dir)?;
    // No spare journals: they would only count in the size before.
    let options = Options::default().journal_spare_files(0);
    let env = Environment::open(&dir, options).map_err(|e| match e {
        Error::Locked => fail(
            3,
            format!(
                "{}: {e}: close every writer before compacting in place, or compact into \
                 another directory with --into",
                dir.display()
            ),
        ),
        e => crate::opening_failed(&dir, e),
    })?;
    // Made empty with the original's permissions, which the copy keeps.
    let made = std::fs::create_dir(&temp)
        .and_then(|()| std::fs::set_permissions(&temp, std::fs::metadata(&dir)?.permissions()));
    if let Err(e) = made {
        let _ = std::fs::remove_dir(&temp);
        return Err(fail(3, format!("creating {}: {e}", temp.display())));
    }
    // The swap needs an atomic exchange: found out now, on two empty directories, not
    // after the whole copy.
    let probe = parent.join(format!("{name}.exchange-probe"));
    let probed = std::fs::create_dir(&probe)
        .map_err(|e| fail(3, format!("creating {}: {e}", probe.display())))
        .and_then(|()| {
            // Exchanged twice, so `temp` is the directory made above again.
            exchange(&temp, &probe)
                .and_then(|()| exchange(&temp, &probe))
                .map_err(|e| exchange_failed(&dir, e))
        });
    let _ = std::fs::remove_dir(&probe);
    if let Err(e) = probed {
        let _ = std::fs::remove_dir(&temp);
        return Err(e);
    }
    let report = copy(&env, &temp);
    // A close that fails (its last flush, say) may leave the environment's files in a state
    // the next open must recover: nothing is swapped in then.
    let closed = env
        .close()
        .map_err(|e| fail(3, format!("closing {}: {e}", dir.display())));
    let report = report
        .and_then(|report| closed.map(|()| report))
        .inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&temp); // the copy, if any, is not used
        })?;
    let left_as_it_was = |why: String| {
        let _ = std::fs::remove_dir_all(&temp);
        fail(3, format!("{}: {why}; it is left as it was", dir.display()))
    };
    // Keep writers out until the copy is in place.
    let lock = match FileStorage::existing(&dir).and_then(|storage| storage.lock()) {
        Ok(lock) => lock,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            return Err(left_as_it_was(
                "another process opened it for writing as compaction ended".into(),
            ));
        }
        Err(e) => return Err(left_as_it_was(format!("locking it: {e}"))),
    };
    // Between the close and the lock another writer could have committed, and the copy
    // would not hold that: the newest transaction, read under the lock, shows it.
    match newest_txn_id(&dir) {
        Ok(newest) if newest == report.txn_id => {}
        Ok(newest) => {
            return Err(left_as_it_was(format!(
                "another process committed to it as compaction ended (transaction {newest}, \
                 the copy holds up to {}); compact again",
                report.txn_id
            )));
        }
        Err(f) => return Err(left_as_it_was(format!("reading it again: {}", f.message))),
    }
    swap(&dir, &temp)?;
    // The exchange is made durable before anything of the original is deleted.
    let sync_parent = || {
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail(3, format!("syncing {}: {e}", parent.display())))
    };
    sync_parent()?;
    drop(lock);
    // `temp` now holds the original.
    std::fs::remove_dir_all(&temp).map_err(|e| {
        fail(
            3,
            format!(
                "the compacted copy is in place, but the original, moved to {}, could not be \
                 removed: {e}",
                temp.display()
            ),
        )
    })?;
    sync_parent()?;
    Ok(report)
}

/// The newest committed transaction of the environment in `dir`, read through a read-only
/// open (which a writer's lock, held by the caller, does not exclude).
fn newest_txn_id(dir: &Path) -> Result<u64, Failure> {
    let env = crate::open(dir)?;
    let txn_id = env
        .begin_read()
        .map_err(|e| crate::opening_failed(dir, e))?
        .txn_id();
    Ok(txn_id)
}

/// Refuses a directory that is a mount point: the copy is written beside it, on the
/// parent's file system, and could not be swapped in.
fn refuse_mount_point(dir: &Path, parent: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::MetadataExt;
    let dev = |path: &Path| {
        std::fs::metadata(path)
            .map(|m| m.dev())
            .map_err(|e| fail(3, format!("{}: {e}", path.display())))
    };
    if dev(dir)? != dev(parent)? {
        return Err(fail(
            2,
            format!(
                "{} is a mount point: an in-place compaction writes its copy beside it, on \
                 another file system, and cannot swap it in; use --into",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Refuses a directory holding entries that are not the environment's own.
fn refuse_foreign_entries(dir: &Path) -> Result<(), Failure> {
    let listing = std::fs::read_dir(dir).map_err(|e| fail(3, format!("{}: {e}", dir.display())))?;
    let mut foreign = Vec::new();
    for entry in listing {
        let entry = entry.map_err(|e| fail(3, format!("{}: {e}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !ENVIRONMENT_ENTRIES.contains(&name.as_str()) {
            foreign.push(name);
        }
    }
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort();
    Err(fail(
        2,
        format!(
            "{} holds entries that are not the environment's ({}): compacting in place \
             replaces the whole directory and would delete them; move them out, or use --into",
            dir.display(),
            foreign.join(", ")
        ),
    ))
}

/// Puts the copy at `temp` in place of `dir`, and the original at `temp`, in one atomic
/// exchange. A file system without one is refused (checked before the copy): two renames
/// leave a moment with no directory at `dir`, where a crash, or another process's open
/// (which would create an empty environment there), strands the data beside it.
fn swap(dir: &Path, temp: &Path) -> Result<(), Failure> {
    exchange(temp, dir).map_err(|e| {
        let _ = std::fs::remove_dir_all(temp);
        exchange_failed(dir, e)
    })
}

/// Exchanges the directories at `a` and `b` atomically.
fn exchange(a: &Path, b: &Path) -> rustix::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE)
}

/// The failure of an exchange for the in-place compaction of `dir`, which is left as it was.
fn exchange_failed(dir: &Path, e: rustix::io::Errno) -> Failure {
    use rustix::io::Errno;
    let hint = if e == Errno::INVAL || e == Errno::NOSYS || e == Errno::OPNOTSUPP {
        "this file system cannot exchange two directories atomically; compact into another \
         directory with --into, then move it in place while nothing has it open"
    } else {
        "exchanging the directories"
    };
    fail(
        3,
        format!("{}: {hint}: {e}; it is left as it was", dir.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the in-place swap compares with the copy's snapshot: a commit after it shows.
    #[test]
    fn the_newest_transaction_names_a_later_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let commit = |value: &[u8]| {
            let mut wtx = env.begin_write().expect("write");
            wtx.open_tree("t")
                .expect("tree")
                .insert(b"k", value)
                .expect("insert");
            wtx.commit().expect("commit");
        };
        commit(b"1");
        let snapshot = env.begin_read().expect("read").txn_id();
        assert_eq!(newest_txn_id(dir.path()).ok(), Some(snapshot));
        // Same lengths, likely the same timestamp tick: only the transaction shows it.
        commit(b"2");
        assert_eq!(newest_txn_id(dir.path()).ok(), Some(snapshot + 1));
    }
}
