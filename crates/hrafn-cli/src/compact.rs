//! `hrafn compact`: a compacted copy of an environment (`Environment::compact_to`), written
//! into another directory or swapped in place of the original.
//!
//! In place, the copy is written into a sibling directory `<name>.compacting` while the
//! original is held open for writing (so no other writer can change it meanwhile); then,
//! with the writer's lock taken again, the two directories are exchanged in one atomic
//! rename where the file system allows it (else renamed one after the other), and the
//! original is removed.

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
        e => fail(3, format!("opening {}: {e}", dir.display())),
    })?;
    let report = copy(&env, &temp);
    drop(env);
    let report = report?;

    // Keep writers out until the copy is in place.
    let lock = match FileStorage::existing(&dir).and_then(|storage| storage.lock()) {
        Ok(lock) => lock,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&temp);
            return Err(if e.kind() == std::io::ErrorKind::WouldBlock {
                fail(
                    3,
                    format!(
                        "{}: another process opened it for writing as compaction ended; it \
                         is left as it was",
                        dir.display()
                    ),
                )
            } else {
                fail(3, format!("locking {}: {e}", dir.display()))
            });
        }
    };
    swap(&dir, &temp, &parent.join(format!("{name}.precompact")))?;
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
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail(3, format!("syncing {}: {e}", parent.display())))?;
    Ok(report)
}

/// Puts the copy at `temp` in place of `dir`, and the original at `temp`: one atomic
/// exchange, or (where the file system has none) renames through `aside`.
fn swap(dir: &Path, temp: &Path, aside: &Path) -> Result<(), Failure> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    use rustix::io::Errno;
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        fail(
            3,
            format!(
                "{what}: {e}; the original is at {} or {}, the compacted copy at {} or {}",
                dir.display(),
                aside.display(),
                temp.display(),
                dir.display()
            ),
        )
    };
    match renameat_with(CWD, temp, CWD, dir, RenameFlags::EXCHANGE) {
        Ok(()) => return Ok(()),
        Err(e) if e == Errno::INVAL || e == Errno::NOSYS || e == Errno::OPNOTSUPP => {}
        Err(e) => return Err(failed("exchanging the directories", &e)),
    }
    if aside.symlink_metadata().is_ok() {
        return Err(fail(
            3,
            format!("{} exists: remove it, then compact again", aside.display()),
        ));
    }
    std::fs::rename(dir, aside).map_err(|e| failed("moving the original aside", &e))?;
    if let Err(e) = std::fs::rename(temp, dir) {
        if std::fs::rename(aside, dir).is_ok() {
            return Err(fail(
                3,
                format!(
                    "moving the compacted copy in place: {e}; the original is back at {}, the \
                     copy at {}",
                    dir.display(),
                    temp.display()
                ),
            ));
        }
        return Err(failed("moving the copy in place", &e));
    }
    std::fs::rename(aside, temp).map_err(|e| failed("moving the original", &e))
}
