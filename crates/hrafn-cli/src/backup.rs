//! `hrafn backup`, `restore` and `verify`.

use crate::{Failure, fail, open};
use hrafn::backup::{BackupKind, Manifest};
use hrafn::storage::{FileStorage, Storage};
use hrafn::{Environment, Error, Options};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// A progress bar on standard error drawn with `template`, hidden unless standard error is
/// a terminal (so scripts and pipes get no escape codes).
pub(crate) fn progress_bar(template: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}

fn describe(out: &mut impl Write, shown: &str, m: &Manifest) -> Result<(), Failure> {
    let kind = match m.kind {
        BackupKind::Full => "full",
        BackupKind::Incremental => "incremental",
    };
    let bytes: u64 = m.files.iter().map(|f| f.size_bytes).sum();
    writeln!(
        out,
        "{shown}\t{kind}\ttransactions {}..={}\t{} files\t{bytes} bytes",
        m.first_txn_id,
        m.last_txn_id,
        m.files.len()
    )?;
    Ok(())
}

pub(crate) fn backup(
    dir: &PathBuf,
    target: &Path,
    incremental: bool,
    chain: bool,
    compacted: bool,
    out: &mut impl Write,
) -> Result<(), Failure> {
    crate::require_dir(dir)?;
    let env = if incremental || chain {
        // A directory with no environment is refused as the read-only backup refuses it:
        // opening for writing would create one there.
        drop(open(dir)?);
        Environment::open(dir, Options::default()).map_err(|e| match e {
            Error::Locked => fail(
                3,
                format!(
                    "{}: open in another process; incremental backups and chain starts are \
                     taken by the process that writes (Environment::incremental_backup_to)",
                    dir.display()
                ),
            ),
            e => fail(3, format!("opening {}: {e}", dir.display())),
        })?
    } else {
        open(dir)?
    };
    // A backup inside the environment's own directory would go with it.
    env.check_backup_target(target)
        .map_err(|e| fail(2, e.to_string()))?;
    if compacted {
        let bar = crate::compact::progress_bar();
        let manifest =
            env.compacted_backup_with_progress(target, |p| crate::compact::show(&bar, p));
        bar.finish_and_clear();
        let manifest = manifest.map_err(|e| into_failure(e, target))?;
        describe(out, &target.display().to_string(), &manifest)?;
        return Ok(());
    }
    let kind = if incremental {
        BackupKind::Incremental
    } else {
        BackupKind::Full
    };
    let bar = progress_bar("backup [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}");
    let manifest = env
        .backup_to_with_progress(target, kind, &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })
        .map_err(|e| into_failure(e, target))?;
    bar.finish_and_clear();
    describe(out, &target.display().to_string(), &manifest)?;
    Ok(())
}

/// An engine error met writing into `target`, with its path.
fn into_failure(e: Error, target: &Path) -> Failure {
    let Failure { code, message } = Failure::from(e);
    fail(code, format!("{}: {message}", target.display()))
}

fn open_backups(backups: &[PathBuf]) -> Result<Vec<(FileStorage, String)>, Failure> {
    backups
        .iter()
        .map(|path| {
            let shown = path.display().to_string();
            FileStorage::read_only(path)
                .map(|s| (s, shown.clone()))
                .map_err(|e| fail(1, format!("backup {shown}: {e}")))
        })
        .collect()
}

pub(crate) fn restore(
    backups: &[PathBuf],
    into: &Path,
    out: &mut impl Write,
) -> Result<(), Failure> {
    // The engine's restore refuses a used target and leaves it as found on failure.
    let report = hrafn::backup::restore(backups, into).map_err(|e| into_failure(e, into))?;
    writeln!(
        out,
        "restored {} backups into {}: last transaction {}, {} journal records replayed, \
         integrity check passed",
        report.backups,
        into.display(),
        report.last_txn_id,
        report.records_replayed
    )?;
    Ok(())
}

pub(crate) fn verify(backups: &[PathBuf], deep: bool, out: &mut impl Write) -> Result<(), Failure> {
    let opened = open_backups(backups)?;
    let chain: Vec<(&dyn Storage, String)> = opened
        .iter()
        .map(|(s, shown)| (s as &dyn Storage, shown.clone()))
        .collect();
    let manifests = if chain.len() == 1 {
        vec![hrafn::backup::verify_storage(chain[0].0, &chain[0].1)?]
    } else {
        hrafn::backup::verify_chain(&chain)?
    };
    for ((_, shown), m) in chain.iter().zip(&manifests) {
        describe(out, shown, m)?;
    }
    if deep {
        let scratch = tempfile::tempdir()
            .map_err(|e| fail(3, format!("making a temporary directory: {e}")))?;
        let target = FileStorage::new(scratch.path().join("restored"))
            .map_err(|e| fail(3, format!("making a temporary directory: {e}")))?;
        let report = hrafn::backup::restore_into(&chain, std::sync::Arc::new(target))?;
        writeln!(
            out,
            "deep: restored to transaction {} in a temporary directory; integrity check passed",
            report.last_txn_id
        )?;
    }
    writeln!(out, "ok")?;
    Ok(())
}
