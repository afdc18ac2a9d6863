//! Spare journal files, zero-filled ahead of need by the flusher thread.
//!
//! When a record does not fit in the current journal, the writer moves to the next one. A
//! retired journal can be renamed and reused. If none is retired yet, as before the first
//! sync of the data file, the commit would have to zero-fill a new 4 MiB file and sync it
//! on its own commit path. That takes tens of milliseconds on a virtual disk. So the
//! flusher keeps `Options::journal_spare_files` files ready: retired journals and spares
//! together.
//!
//! A spare is `journal/<id>.spare`. Recovery reads only `*.journal` files, so it never sees
//! a spare. Rotation renames a spare to the next journal's name and syncs the directory,
//! as it does for a retired journal. The spare's zeros and length were synced when it was
//! made. Open removes spares left by a crash, and a clean close removes the ready ones, so
//! they take disk space only while the environment is open.

use super::writer::{JournalIndex, extend_file};
use crate::error::{Error, Result};
use crate::storage::Storage;
use parking_lot::Mutex;

/// Name of spare `id`.
pub fn spare_file_name(id: u64) -> String {
    format!("journal/{id:019}.spare")
}

/// Parses a spare's name (inside `journal/`) back to its id.
fn parse_spare_file_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".spare")?;
    (stem.len() == 19).then(|| stem.parse().ok()).flatten()
}

/// Makes spares of `size_bytes` until the pool holds `pool_files` files, at most
/// `pool_files` per call (the writer may take them as fast as they are made; the flusher
/// has flushing to do too). A failure
/// (a full disk, say) leaves no partial spare behind and costs the writer nothing but the
/// zero-filling it would have done anyway.
///
/// # Errors
/// I/O errors making a spare.
pub fn top_up(
    storage: &dyn Storage,
    size_bytes: u64,
    pool_files: usize,
    index: &Mutex<JournalIndex>,
) -> Result<()> {
    for _ in 0..pool_files {
        let id = {
            let mut index = index.lock();
            if index.recyclable.len() + index.spares.len() >= pool_files {
                return Ok(());
            }
            index.next_spare_id += 1;
            index.next_spare_id
        };
        let name = spare_file_name(id);
        if let Err(error) = extend_file(storage, &name, 0, size_bytes, true) {
            // Best effort: the error above is what matters.
            let _ = storage.remove(&name);
            return Err(Error::io(format!("making spare journal {name}"), error));
        }
        {
            let mut index = index.lock();
            index.spares.push(id);
            index.spares_made += 1;
        }
        super::writer::note_files(storage, index);
    }
    Ok(())
}

/// Removes the ready spares (on a clean close).
///
/// # Errors
/// I/O errors removing them.
pub fn remove_ready(storage: &dyn Storage, index: &Mutex<JournalIndex>) -> Result<()> {
    let ids = std::mem::take(&mut index.lock().spares);
    remove(storage, ids)
}

/// Removes every spare in `journal/` (at open, before any is made: leftovers of a crash,
/// possibly half made).
///
/// # Errors
/// I/O errors listing or removing them.
pub fn remove_leftovers(storage: &dyn Storage, names: &[String]) -> Result<()> {
    remove(
        storage,
        names.iter().filter_map(|n| parse_spare_file_name(n)),
    )
}

fn remove(storage: &dyn Storage, ids: impl IntoIterator<Item = u64>) -> Result<()> {
    for id in ids {
        let name = spare_file_name(id);
        storage
            .remove(&name)
            .map_err(|e| Error::io(format!("removing spare journal {name}"), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::writer::parse_journal_file_name;

    #[test]
    fn spare_names_roundtrip_and_are_not_journals() {
        let name = spare_file_name(7);
        let file = name.trim_start_matches("journal/");
        assert_eq!(parse_spare_file_name(file), Some(7));
        assert_eq!(parse_journal_file_name(file), None);
        assert_eq!(parse_spare_file_name("0000000000000000007.journal"), None);
        assert_eq!(parse_spare_file_name("7.spare"), None);
    }
}
