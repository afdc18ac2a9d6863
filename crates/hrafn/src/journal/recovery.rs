//! Recovery: replays journal records written after the last sync onto the data file.
//!
//! Starting at the header's position, each record must have a valid header checksum, the
//! expected journal number, the next transaction id, the previous record's checksum, and a
//! valid payload checksum. The first record failing any of these ends the log — then no
//! valid record of the same generation may follow anywhere later (that would be a hole:
//! `Corruption`, never a silent truncation). Replay writes the final version of every touched
//! page; diffs carry only new bytes, so replaying again after a crash in recovery gives the
//! same pages. Replay and [`validate`] only read: the caller writes nothing (no page, no
//! header, no journal retired) until both have passed.

use super::diff::DiffReader;
use super::record::{FLAG_BUFFERED, FLAG_COMPRESSED, RECORD_HEADER_SIZE_BYTES, RecordHeader};
use super::writer::{journal_file_name, parse_journal_file_name};
use crate::error::{CorruptionSite, Error, Result};
use crate::freespace;
use crate::header::Header;
use crate::limits::{JOURNAL_ALIGN_BYTES, PAGE_SIZE_BYTES};
use crate::meta::{META_PAGE_NUMBER, Meta};
use crate::page::{PageKind, corrupt, span_pages, verify};
use crate::storage::{FileKind, Storage, StorageFile, read_exact_at};
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

/// What replay found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Last transaction replayed (the header's synced id if none).
    pub last_txn_id: u64,
    /// Chain checksum of that transaction's record.
    pub chain_checksum: u64,
    /// Next page number after the last replayed record (the header's if none).
    pub next_page_number: u64,
    /// Records replayed.
    pub record_count: u64,
    /// Highest journal number present on disk.
    pub highest_journal_number: u64,
    /// The final version of every page the records touched.
    pub pages: BTreeMap<u64, Box<[u8]>>,
}

/// Reads the records after `header`'s position and returns the resulting pages. Nothing is
/// written; the caller writes the pages and a new header.
///
/// # Errors
/// [`Error::Corruption`] for a hole, a repeated or skipped transaction id, a broken chain,
/// or undecodable payloads; I/O errors.
pub fn replay(storage: &dyn Storage, header: &Header, data: &dyn StorageFile) -> Result<Replayed> {
    let journals = list_journals(storage)?;
    let mut out = Replayed {
        last_txn_id: header.synced_txn_id,
        chain_checksum: header.chain_checksum,
        next_page_number: header.next_page_number,
        record_count: 0,
        highest_journal_number: journals.last().copied().unwrap_or(0),
        pages: BTreeMap::new(),
    };
    let data_len = data
        .len()
        .map_err(|e| Error::io("sizing the data file", e))?;
    let mut number = header.journal_number;
    let mut offset = header.journal_offset_bytes;
    let mut payload = Vec::new();
    let mut decompressed = Vec::new();
    loop {
        let Some(file) = open_journal(storage, &journals, number)? else {
            // The file the header points into may be retired already when its last record
            // was the last synced one: the log continues at the start of the next file.
            if let Some(next) = next_journal(&journals, number)
                && next_starts_chain(storage, &journals, next, &out)?
            {
                number = next;
                offset = 0;
                continue;
            }
            check_no_hole(storage, &journals, number, offset, out.last_txn_id + 1)?;
            break;
        };
        let site = CorruptionSite::Journal {
            journal_number: number,
            offset_bytes: offset,
        };
        match read_record(&*file.0, file.1, number, offset, &out, &mut payload, &site)? {
            Some(rec) => {
                apply(
                    &rec,
                    &payload,
                    &mut decompressed,
                    data,
                    data_len,
                    &mut out,
                    &site,
                )?;
                offset += rec.record_size_bytes;
            }
            None => match next_journal(&journals, number) {
                Some(next) if next_starts_chain(storage, &journals, next, &out)? => {
                    // The writer moved on to the next file because this record did not
                    // fit (or the process ended and the next one started a new file).
                    number = next;
                    offset = 0;
                }
                _ => {
                    check_no_hole(storage, &journals, number, offset, out.last_txn_id + 1)?;
                    break;
                }
            },
        }
    }
    Ok(out)
}

/// Checks the state replay recovered before anything is written: the meta page, the
/// free-space pages it lists, and every replayed page or run that is in use (page number
/// and checksum), reading the pages replay did not touch from the data file. A replayed
/// page the map counts free is skipped: it may be a stale part of a freed run. Calls
/// `on_run` with each checked run in use (first page number, bytes) and returns the meta.
///
/// # Errors
/// [`Error::Corruption`] naming the page; I/O errors reading the data file.
pub fn validate(
    replayed: &Replayed,
    data: &dyn StorageFile,
    mut on_run: impl FnMut(u64, Vec<u8>),
) -> Result<Meta> {
    let data_len = data
        .len()
        .map_err(|e| Error::io("sizing the data file", e))?;
    let pages = RecoveredPages {
        replayed,
        data,
        data_len,
    };
    let meta = Meta::decode(&pages.checked(META_PAGE_NUMBER)?)?;
    // Every record carries the meta page's high-water mark as of its commit, so the last
    // one names the replayed meta page's (and recovery grows the data file to it).
    if replayed.record_count > 0 && replayed.next_page_number != meta.next_page_number {
        return Err(Error::corruption(
            CorruptionSite::Environment,
            format!(
                "the journal ends at {} pages, the meta page counts {}",
                replayed.next_page_number, meta.next_page_number
            ),
        ));
    }
    // With nothing replayed the header's mark is the synced state's, whose meta page the
    // data file holds: one below the meta page's would have the tail cut of the open
    // empty live pages (the header checksums, but its writer could be wrong).
    if replayed.record_count == 0 && meta.next_page_number > replayed.next_page_number {
        return Err(Error::corruption(
            CorruptionSite::Environment,
            format!(
                "the header counts {} pages, the meta page {}",
                replayed.next_page_number, meta.next_page_number
            ),
        ));
    }
    // Recovery grows the data file to the replayed end before it writes pages.
    let mut page_count = data_len / PAGE_SIZE_BYTES as u64;
    if replayed.record_count > 0 {
        page_count = page_count.max(replayed.next_page_number);
    }
    if meta.next_page_number > page_count {
        return Err(Error::corruption(
            CorruptionSite::Environment,
            format!(
                "data file holds {page_count} pages, the meta page counts {}",
                meta.next_page_number
            ),
        ));
    }
    let mut directories = BTreeMap::new();
    for &page_number in &meta.directories {
        let page = pages.checked(page_number)?;
        if crate::page::kind(&page, page_number)? != PageKind::FreeDirectory {
            return Err(corrupt(
                page_number,
                "listed directory is not a directory page",
            ));
        }
        directories.insert(page_number, page);
    }
    let mut bitmaps: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut is_free = |page_number: u64| -> Result<bool> {
        let (section, bit) = freespace::locate(page_number);
        if section >= meta.section_count {
            return Ok(false); // the map never covered it: in use
        }
        if let std::collections::btree_map::Entry::Vacant(slot) = bitmaps.entry(section) {
            let (directory, entry) = freespace::locate_section(section);
            let directory_page = meta.directories[directory];
            let entry = freespace::read_entry(
                &directories[&directory_page],
                directory_page,
                entry,
                meta.next_page_number,
            )?;
            let bitmap = pages.checked(entry.bitmap_page)?;
            if crate::page::kind(&bitmap, entry.bitmap_page)? != PageKind::Bitmap {
                return Err(corrupt(
                    entry.bitmap_page,
                    "listed bitmap is not a bitmap page",
                ));
            }
            slot.insert(bitmap);
        }
        Ok(freespace::is_free(&bitmaps[&section], bit))
    };
    let mut covered_end = 0;
    for (&page_number, head) in &replayed.pages {
        if page_number < covered_end
            || page_number >= meta.next_page_number
            || is_free(page_number)?
        {
            continue;
        }
        let span = span_pages(head, page_number)?;
        if page_number + span > meta.next_page_number {
            return Err(corrupt(page_number, "page run past the end of the file"));
        }
        let run = pages.run(page_number, span)?;
        verify(&run, page_number)?;
        covered_end = page_number + span;
        on_run(page_number, run);
    }
    Ok(meta)
}

/// Pages as recovery leaves them: the replayed version, else the data file's.
struct RecoveredPages<'a> {
    replayed: &'a Replayed,
    data: &'a dyn StorageFile,
    data_len: u64,
}

impl RecoveredPages<'_> {
    fn run(&self, first: u64, count: u64) -> Result<Vec<u8>> {
        let len = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(PAGE_SIZE_BYTES))
            .ok_or_else(|| corrupt(first, "page run too long"))?;
        let mut run = vec![0u8; len];
        for (i, page) in run.chunks_exact_mut(PAGE_SIZE_BYTES).enumerate() {
            let page_number = first + i as u64;
            if let Some(replayed) = self.replayed.pages.get(&page_number) {
                page.copy_from_slice(replayed);
            } else {
                let at = page_number * PAGE_SIZE_BYTES as u64;
                if at + PAGE_SIZE_BYTES as u64 <= self.data_len {
                    read_exact_at(self.data, page, at)
                        .map_err(|e| Error::io("reading a data page", e))?;
                }
            }
        }
        Ok(run)
    }

    /// One page, its checksum verified.
    fn checked(&self, page_number: u64) -> Result<Vec<u8>> {
        let page = self.run(page_number, 1)?;
        verify(&page, page_number)?;
        Ok(page)
    }
}

type JournalFile = (Arc<dyn StorageFile>, u64);

/// Syncs every journal file from number `from` on. Replay reads journals through the page
/// cache, so it may see records that are not on disk (commits that skipped the sync, by a
/// process killed since): they must be durable before any page built from them reaches the
/// data file, or a power cut would keep the pages and lose the records that explain them.
///
/// # Errors
/// I/O errors listing, opening or syncing a journal.
pub fn sync_journals(storage: &dyn Storage, from: u64) -> Result<()> {
    for number in list_journals(storage)?.into_iter().filter(|&n| n >= from) {
        let name = journal_file_name(number);
        storage
            .open(&name, FileKind::JournalBuffered, false)
            .and_then(|file| file.sync_data())
            .map_err(|e| Error::io(format!("syncing {name} before writing replayed pages"), e))?;
    }
    Ok(())
}

fn list_journals(storage: &dyn Storage) -> Result<Vec<u64>> {
    let names = match storage.list("journal") {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io("listing journals", e)),
    };
    let mut numbers: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_journal_file_name(n))
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

fn open_journal(
    storage: &dyn Storage,
    journals: &[u64],
    number: u64,
) -> Result<Option<JournalFile>> {
    if journals.binary_search(&number).is_err() {
        return Ok(None);
    }
    let name = journal_file_name(number);
    let file = storage
        .open(&name, FileKind::JournalBuffered, false)
        .map_err(|e| Error::io(format!("opening {name}"), e))?;
    let len = file
        .len()
        .map_err(|e| Error::io(format!("sizing {name}"), e))?;
    Ok(Some((file, len)))
}

/// The journal after `number` on disk. Numbers may skip (every open starts a new file, and
/// a restored backup holds only the files with records), which is safe to follow: the next
/// file's first record must continue the chain (transaction id and chain checksum).
fn next_journal(journals: &[u64], number: u64) -> Option<u64> {
    journals.iter().copied().find(|&n| n > number)
}

fn next_starts_chain(
    storage: &dyn Storage,
    journals: &[u64],
    number: u64,
    out: &Replayed,
) -> Result<bool> {
    let Some((file, len)) = open_journal(storage, journals, number)? else {
        return Ok(false);
    };
    let site = CorruptionSite::Journal {
        journal_number: number,
        offset_bytes: 0,
    };
    let mut payload = Vec::new();
    Ok(read_record(&*file, len, number, 0, out, &mut payload, &site)?.is_some())
}

/// Reads and fully validates the record at `offset`. `Ok(None)` = not a valid next record
/// (end of log candidate); `Err` only for definite corruption (valid header, wrong order).
fn read_record(
    file: &dyn StorageFile,
    file_len: u64,
    number: u64,
    offset: u64,
    out: &Replayed,
    payload: &mut Vec<u8>,
    site: &CorruptionSite,
) -> Result<Option<RecordHeader>> {
    if offset + JOURNAL_ALIGN_BYTES as u64 > file_len {
        return Ok(None);
    }
    let mut head = [0u8; RECORD_HEADER_SIZE_BYTES];
    read_exact_at(file, &mut head, offset).map_err(|e| Error::io("reading a journal record", e))?;
    let Ok(rec) = RecordHeader::decode(&head, site) else {
        return Ok(None);
    };
    if rec.journal_number != number {
        return Ok(None); // a record from an earlier use of a recycled file
    }
    let expected = out.last_txn_id + 1;
    if rec.txn_id != expected {
        return Err(Error::corruption(
            site.clone(),
            format!(
                "transaction id {} where {expected} was expected",
                rec.txn_id
            ),
        ));
    }
    if rec.prev_checksum != out.chain_checksum {
        return Err(Error::corruption(site.clone(), "hash chain broken"));
    }
    if offset + rec.record_size_bytes > file_len {
        return Ok(None);
    }
    let size = usize::try_from(rec.payload_size_bytes)
        .map_err(|_| Error::corruption(site.clone(), "payload too large"))?;
    resize_or_fail(payload, size)?;
    read_exact_at(file, payload, offset + RECORD_HEADER_SIZE_BYTES as u64)
        .map_err(|e| Error::io("reading a journal payload", e))?;
    if super::record::payload_checksum(payload, rec.txn_id) != rec.payload_checksum {
        return Ok(None); // torn payload
    }
    Ok(Some(rec))
}

/// Resizes `buffer` to `size_bytes`, failing with an error where the allocator cannot give
/// the memory (a record's sizes are checked against its file and payload, not against
/// memory: a crafted or huge record must not abort the process).
fn resize_or_fail(buffer: &mut Vec<u8>, size_bytes: usize) -> Result<()> {
    if let Some(more) = size_bytes.checked_sub(buffer.len())
        && buffer.try_reserve_exact(more).is_err()
    {
        return Err(Error::io(
            format!("reading a journal record of {size_bytes} bytes"),
            std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        ));
    }
    buffer.resize(size_bytes, 0);
    Ok(())
}

fn apply(
    rec: &RecordHeader,
    payload: &[u8],
    decompressed: &mut Vec<u8>,
    data: &dyn StorageFile,
    data_len: u64,
    out: &mut Replayed,
    site: &CorruptionSite,
) -> Result<()> {
    let diffs: &[u8] = if rec.flags & FLAG_COMPRESSED != 0 {
        let size = usize::try_from(rec.uncompressed_size_bytes)
            .map_err(|_| Error::corruption(site.clone(), "payload too large"))?;
        resize_or_fail(decompressed, size)?;
        let n = lz4_flex::block::decompress_into(payload, decompressed).map_err(|e| {
            Error::corruption(site.clone(), format!("payload does not decode: {e}"))
        })?;
        if n != size {
            return Err(Error::corruption(
                site.clone(),
                "payload decodes to the wrong size",
            ));
        }
        decompressed
    } else {
        payload
    };
    let mut reader = DiffReader::new(diffs, site.clone());
    while let Some(entry) = reader.next_entry()? {
        let page_number = entry.page_number;
        if page_number >= rec.next_page_number {
            return Err(Error::corruption(
                site.clone(),
                "diff for a page beyond the file's end",
            ));
        }
        let page = match out.pages.entry(page_number) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let mut page = vec![0u8; PAGE_SIZE_BYTES].into_boxed_slice();
                let at = page_number * PAGE_SIZE_BYTES as u64;
                if at + PAGE_SIZE_BYTES as u64 <= data_len {
                    read_exact_at(data, &mut page, at)
                        .map_err(|e| Error::io("reading a data page", e))?;
                }
                e.insert(page)
            }
        };
        entry.apply(page);
    }
    out.last_txn_id = rec.txn_id;
    out.chain_checksum = rec.checksum;
    out.next_page_number = rec.next_page_number;
    out.record_count += 1;
    Ok(())
}

/// After the log ended at (`number`, `offset`), no valid record of transaction
/// `>= next_txn_id` written into its own journal may exist later: that would be a hole.
///
/// One exception: the record that was in flight. It is the record of `next_txn_id`, and
/// it starts either at `offset` (skipped by starting the scan a block later) or, when the
/// writer had rotated because it did not fit, at the start of journal `number + 1`. A
/// valid header there with a torn payload is a torn tail, not a hole.
fn check_no_hole(
    storage: &dyn Storage,
    journals: &[u64],
    number: u64,
    offset: u64,
    next_txn_id: u64,
) -> Result<()> {
    let later = journals.iter().copied().filter(|&n| n > number);
    for (n, start) in
        std::iter::once((number, offset + JOURNAL_ALIGN_BYTES as u64)).chain(later.map(|n| (n, 0)))
    {
        let Some((file, len)) = open_journal(storage, journals, n)? else {
            continue;
        };
        let mut chunk = vec![
            0u8;
            usize::try_from(len.saturating_sub(start))
                .map_or(1 << 20, |n| n.min(1 << 20))
        ];
        let mut at = start;
        while at + JOURNAL_ALIGN_BYTES as u64 <= len {
            let want =
                ((len - at) as usize).min(chunk.len()) / JOURNAL_ALIGN_BYTES * JOURNAL_ALIGN_BYTES;
            read_exact_at(&*file, &mut chunk[..want], at)
                .map_err(|e| Error::io("scanning a journal", e))?;
            for block in 0..want / JOURNAL_ALIGN_BYTES {
                let site = CorruptionSite::Journal {
                    journal_number: n,
                    offset_bytes: at + (block * JOURNAL_ALIGN_BYTES) as u64,
                };
                let bytes = &chunk[block * JOURNAL_ALIGN_BYTES..][..RECORD_HEADER_SIZE_BYTES];
                let in_flight_slot = n == number + 1 && at == 0 && block == 0;
                if let Ok(rec) = RecordHeader::decode(bytes, &site)
                    && rec.journal_number == n
                    && rec.txn_id >= next_txn_id
                    && rec.flags & FLAG_BUFFERED == 0
                    && !(in_flight_slot && rec.txn_id == next_txn_id)
                {
                    return Err(Error::corruption(
                        site,
                        format!(
                            "valid record of transaction {} after the end of the log at journal \
                             {number} byte {offset}: a hole",
                            rec.txn_id
                        ),
                    ));
                }
            }
            at += want as u64;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A size no allocator can give is an error, not an abort.
    #[test]
    fn a_record_larger_than_memory_is_an_error() {
        let mut buffer = vec![1u8; 4];
        assert!(resize_or_fail(&mut buffer, 1 << 62).is_err());
        resize_or_fail(&mut buffer, 10).expect("ten bytes");
        assert_eq!(buffer, [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]);
        resize_or_fail(&mut buffer, 2).expect("shrink");
        assert_eq!(buffer, [1, 1]);
    }
}
