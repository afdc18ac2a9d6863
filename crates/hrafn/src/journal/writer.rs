//! Appends records to the current journal file; rotates to a new (or recycled) file when the
//! next record does not fit.
//!
//! Writes go through an aligned buffer so that `O_DIRECT` accepts them; with
//! `FileKind::JournalDurable` a returned write is durable. Files are zero-filled when created
//! (a durable write into a zero-filled file costs about half of one into merely allocated
//! blocks: no extent conversion to log) and then reused by renaming.

use super::record::{
    FLAG_BUFFERED, FLAG_COMPRESSED, RECORD_HEADER_SIZE_BYTES, RecordHeader, record_size_for,
};
use crate::error::{Error, Result};
use crate::limits::JOURNAL_ALIGN_BYTES;
use crate::storage::{FileKind, Storage, StorageEvent, StorageFile, write_all_at};
use std::collections::VecDeque;
use std::sync::Arc;

/// A record under construction. Its payload is encoded right after room for the header, in
/// a buffer where the record starts 4 KiB-aligned, so a record stored uncompressed goes to
/// the `O_DIRECT` write without another copy of its payload (for a large transaction, a copy
/// as large as everything it changed).
pub struct RecordBuf {
    buf: Vec<u8>,
    start: usize,
}

impl RecordBuf {
    /// Room for `payload_capacity_bytes` of payload (a payload that outgrows it still works
    /// but is copied when written), in the memory of `buf`: the buffer an earlier record
    /// left (see [`RecordBuf::take_buf`]), or a new one. A reused buffer's pages are mapped
    /// already, where a fresh allocation as large as a big transaction's record takes a
    /// page fault for every page the payload reaches.
    pub fn reusing(mut buf: Vec<u8>, payload_capacity_bytes: usize) -> RecordBuf {
        buf.clear();
        buf.reserve(payload_capacity_bytes + RECORD_HEADER_SIZE_BYTES + 2 * JOURNAL_ALIGN_BYTES);
        let start = buf.as_ptr().align_offset(JOURNAL_ALIGN_BYTES);
        buf.resize(start + RECORD_HEADER_SIZE_BYTES, 0);
        RecordBuf { buf, start }
    }

    /// The buffer, for [`RecordBuf::reusing`] once the record is written; leaves this one
    /// empty, fit for nothing but dropping.
    pub fn take_buf(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// The buffer the payload is encoded into, by appending only (what lies before the
    /// payload is the header's room).
    pub fn encoder(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// The payload encoded so far.
    pub fn payload(&self) -> &[u8] {
        &self.buf[self.start + RECORD_HEADER_SIZE_BYTES..]
    }

    /// Whether the record can be written from this buffer as it is.
    fn is_aligned(&self) -> bool {
        self.buf[self.start..]
            .as_ptr()
            .align_offset(JOURNAL_ALIGN_BYTES)
            == 0
    }
}

/// Name of journal file `number`.
pub fn journal_file_name(number: u64) -> String {
    format!("journal/{number:019}.journal")
}

/// Parses a journal file name (inside `journal/`) back to its number. Only the names
/// [`journal_file_name`] makes count: a stray `+000…1.journal` would be listed under a
/// name that opening it by number does not find, and a number the header cannot hold
/// (past `COUNTER_MAX`, or at it, since the next journal must fit too) would make the
/// open write a header no later open could read.
pub fn parse_journal_file_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".journal")?;
    if stem.len() != 19 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse()
        .ok()
        .filter(|&number| number < crate::header::COUNTER_MAX)
}

/// Where a committed record ends, kept until a sync covers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordEnd {
    pub txn_id: u64,
    pub journal_number: u64,
    /// Offset just past the record: where replay resumes after this transaction.
    pub end_offset_bytes: u64,
    /// The record's chain checksum.
    pub checksum: u64,
    /// Next page number after the transaction.
    pub next_page_number: u64,
}

/// A sync point is kept for at most one record per this many journal bytes (the last record
/// ending in each granule, and always the newest record), so the index holds at most
/// `journal size / granule + 1` entries per journal file waiting for a sync, however small
/// the records are. A sync then covers up to the last kept record at or before what it
/// could cover, lagging by at most one granule of journal.
pub const SYNC_POINT_GRANULE_BYTES: u64 = 256 * 1024;

/// Serializes the fsyncs of journal files and remembers a failure. The writer (rotating,
/// or syncing a durable record written through the page cache) and the flusher (before
/// its data writes) sync the same file through the same handle, and Linux reports a
/// writeback error once per open file: the second to sync after a failure would be told
/// the file is on disk. Once a sync failed, every later one fails too.
#[derive(Debug, Default)]
pub struct SyncGate {
    /// The first failure's error, told again to every later sync.
    failed: parking_lot::Mutex<Option<String>>,
}

impl SyncGate {
    /// Syncs `file`'s data, or fails if this or an earlier journal sync failed.
    ///
    /// # Errors
    /// The sync's error, or [`std::io::ErrorKind::Other`] naming an earlier failure.
    pub fn sync(&self, file: &dyn StorageFile) -> std::io::Result<()> {
        let mut failed = self.failed.lock();
        if let Some(first) = &*failed {
            return Err(std::io::Error::other(format!(
                "an earlier journal sync failed ({first}): what it covered may not be on disk"
            )));
        }
        let result = file.sync_data();
        if let Err(e) = &result {
            *failed = Some(e.to_string());
        }
        result
    }
}

/// Bookkeeping shared by the writer (appends) and the flusher (syncs, retires files).
#[derive(Debug, Default)]
pub struct JournalIndex {
    /// Every fsync of a journal file goes through here (see [`SyncGate`]).
    pub sync_gate: Arc<SyncGate>,
    /// Possible sync points: ends of records not yet covered by a durable header, oldest
    /// first, thinned to one per [`SYNC_POINT_GRANULE_BYTES`] of journal.
    pub records: VecDeque<RecordEnd>,
    /// Journal files holding records newer than the last sync: (number, last txn id).
    pub active: VecDeque<(u64, u64)>,
    /// Journal files a sync covers that incremental backups still need: (number, last
    /// txn id), oldest first. A backup that copies them releases them.
    pub kept_for_backup: VecDeque<(u64, u64)>,
    /// Retired journal files that may be renamed and reused.
    pub recyclable: Vec<u64>,
    /// Retired journal files to remove, oldest first; the flusher removes a few per tick
    /// (see `crate::flush::JOURNAL_REMOVALS_PER_TICK`).
    pub removable: VecDeque<u64>,
    /// The current journal when it is full: the writer will not append to it again, so
    /// it may be retired like any older file once a sync covers it.
    pub sealed: Option<u64>,
    /// Zero-filled spare files ready for rotation (see [`super::spare`]), and the last id
    /// given to one.
    pub spares: Vec<u64>,
    pub next_spare_id: u64,
    /// Spares made, spares the writer moved into, and journal files of the standard size
    /// the writer had to zero-fill itself because no file was ready (the first at open
    /// included).
    pub spares_made: u64,
    pub spares_used: u64,
    pub filled_by_writer: u64,
    /// The newest record written without `O_DSYNC` that no sync is known to cover (0:
    /// none). Only the current file can hold one: rotation syncs first. The flusher syncs
    /// before writing data pages; a durable record after it must cover it too.
    pub buffered_unsynced_txn_id: u64,
    /// Size of the next journal file made new (by the writer or as a spare): the first is
    /// [`FIRST_FILE_SIZE_BYTES`], each rotation doubles it up to the options' size. A
    /// small environment keeps small journals; one under load rotates rarely.
    pub file_size_bytes: u64,
    /// Most files seen in the journal directory (journals and spares), counted each time
    /// one is made: the high-water mark of the disk journals take.
    pub files_peak: u64,
}

/// Counts the files of the journal directory into [`JournalIndex::files_peak`]. Called
/// where files are made (a new journal, a spare), the only moments the count can rise. A
/// failed listing only skips the count: it is a statistic.
pub(crate) fn note_files(storage: &dyn Storage, index: &parking_lot::Mutex<JournalIndex>) {
    if let Ok(names) = storage.list("journal") {
        let mut index = index.lock();
        index.files_peak = index.files_peak.max(names.len() as u64);
    }
}

/// Size of an environment's first journal file (or the configured size, if smaller).
pub const FIRST_FILE_SIZE_BYTES: u64 = 1 << 20;

impl JournalIndex {
    /// The size a spare should have to serve the next rotation: the writer doubles its
    /// file size then.
    pub fn next_file_size_bytes(&self, largest_bytes: u64) -> u64 {
        (self.file_size_bytes * 2).min(largest_bytes)
    }
}

impl JournalIndex {
    /// Forgets records up to `synced_txn_id` and returns the journal numbers (other than
    /// `current`) whose records are all covered, for recycling. With `backed_up_txn_id`
    /// (incremental backups), a covered file holding a record after it is kept for the
    /// next backup instead.
    pub fn retire_through(
        &mut self,
        synced_txn_id: u64,
        current: u64,
        backed_up_txn_id: Option<u64>,
    ) -> Vec<u64> {
        while self
            .records
            .front()
            .is_some_and(|r| r.txn_id <= synced_txn_id)
        {
            self.records.pop_front();
        }
        let mut retired = Vec::new();
        while let Some(&(number, last_txn_id)) = self.active.front() {
            if (number == current && self.sealed != Some(number)) || last_txn_id > synced_txn_id {
                break;
            }
            self.active.pop_front();
            match backed_up_txn_id {
                Some(backed_up) if last_txn_id > backed_up => {
                    self.kept_for_backup.push_back((number, last_txn_id));
                }
                _ => retired.push(number),
            }
        }
        retired
    }

    /// Returns the journal files kept for a backup whose records a backup through
    /// `backed_up_txn_id` now holds, for recycling.
    pub fn release_backed_up(&mut self, backed_up_txn_id: u64) -> Vec<u64> {
        let mut released = Vec::new();
        while let Some(&(number, last_txn_id)) = self.kept_for_backup.front() {
            if last_txn_id > backed_up_txn_id {
                break;
            }
            self.kept_for_backup.pop_front();
            released.push(number);
        }
        released
    }

    /// The newest kept sync point at or before `txn_id`.
    pub fn sync_point_at_or_before(&self, txn_id: u64) -> Option<RecordEnd> {
        self.records
            .iter()
            .rev()
            .find(|r| r.txn_id <= txn_id)
            .copied()
    }

    /// Records the end of a newly appended record, replacing the newest kept one when both
    /// end in the same granule of the same journal.
    pub fn push_record(&mut self, end: RecordEnd) {
        let granule = |r: &RecordEnd| {
            (
                r.journal_number,
                (r.end_offset_bytes - 1) / SYNC_POINT_GRANULE_BYTES,
            )
        };
        debug_assert!(self.records.back().is_none_or(|b| b.txn_id < end.txn_id));
        match self.records.back_mut() {
            Some(back) if granule(back) == granule(&end) => *back = end,
            _ => self.records.push_back(end),
        }
    }
}

/// The single journal writer of an environment (owned by the write lock).
pub struct JournalWriter {
    storage: Arc<dyn Storage>,
    kind: FileKind,
    standard_file_size_bytes: u64,
    file: Arc<dyn StorageFile>,
    /// A buffered handle of the current file, for records of non-durable transactions in
    /// a durable environment (opened when first needed).
    buffered_file: Option<Arc<dyn StorageFile>>,
    journal_number: u64,
    position_bytes: u64,
    file_size_bytes: u64,
    prev_checksum: u64,
    last_txn_id: u64,
    backoff: CompressionBackoff,
    /// Records that are compressed, or whose payload is not aligned, are written from
    /// here. Kept at its largest length (only growth is zero-filled) while [`keep_buffer`]
    /// says so.
    aligned: Vec<u8>,
    /// Bytes written to journals (records, padding included).
    pub bytes_written: u64,
    /// Uncompressed payload bytes (diffs) submitted.
    pub payload_bytes: u64,
    /// Payload bytes as stored (after compression; no header, no padding).
    pub stored_bytes: u64,
}

impl JournalWriter {
    /// Starts writing at offset 0 of journal `journal_number`, creating or recycling its
    /// file, with `prev_checksum` continuing the hash chain.
    ///
    /// # Errors
    /// I/O errors creating the file.
    pub fn start(
        storage: Arc<dyn Storage>,
        durable: bool,
        standard_file_size_bytes: u64,
        journal_number: u64,
        prev_checksum: u64,
        last_txn_id: u64,
        index: &parking_lot::Mutex<JournalIndex>,
    ) -> Result<JournalWriter> {
        let kind = if durable {
            FileKind::JournalDurable
        } else {
            FileKind::JournalBuffered
        };
        let first_size_bytes = {
            let mut index = index.lock();
            if index.file_size_bytes == 0 {
                index.file_size_bytes = FIRST_FILE_SIZE_BYTES.min(standard_file_size_bytes);
            }
            index.file_size_bytes
        };
        let (file, file_size_bytes) = prepare_file(
            &*storage,
            kind,
            journal_number,
            first_size_bytes,
            0,
            standard_file_size_bytes,
            index,
        )?;
        Ok(JournalWriter {
            storage,
            kind,
            standard_file_size_bytes,
            file,
            buffered_file: None,
            journal_number,
            position_bytes: 0,
            file_size_bytes,
            prev_checksum,
            last_txn_id,
            backoff: CompressionBackoff::default(),
            aligned: Vec::new(),
            bytes_written: 0,
            payload_bytes: 0,
            stored_bytes: 0,
        })
    }

    /// The last transaction appended (or recovered).
    pub fn last_txn_id(&self) -> u64 {
        self.last_txn_id
    }

    /// The file being written.
    pub fn current_file(&self) -> Arc<dyn StorageFile> {
        Arc::clone(&self.file)
    }

    /// Where the next record goes (journal number, byte offset) and the chain checksum of
    /// the last one.
    pub fn position(&self) -> (u64, u64, u64) {
        (self.journal_number, self.position_bytes, self.prev_checksum)
    }

    /// Number of the journal being written.
    pub fn journal_number(&self) -> u64 {
        self.journal_number
    }

    /// Where in `aligned` a 4 KiB-aligned record of a header and `payload_bytes` starts;
    /// grows the buffer to hold the record and its padding. A new buffer comes zeroed from
    /// the allocator (`calloc`), so no byte is filled twice.
    fn aligned_window(&mut self, payload_bytes: usize) -> usize {
        let needed = record_size_for(payload_bytes) + JOURNAL_ALIGN_BYTES;
        if self.aligned.len() < needed {
            self.aligned = vec![0; needed];
        }
        self.aligned.as_ptr().align_offset(JOURNAL_ALIGN_BYTES)
    }

    /// Whether the current file is at least half full.
    pub fn past_half(&self) -> bool {
        self.position_bytes * 2 >= self.file_size_bytes
    }

    /// Appends the record of `header.txn_id` with the payload of `record` (uncompressed
    /// diffs). With `durable`, the record and every one before it are on disk when this
    /// returns `Ok`. `record` is used as the write buffer and holds nothing useful
    /// afterwards.
    ///
    /// A durable record goes through `O_DIRECT|O_DSYNC` when nothing buffered precedes it
    /// unsynced; otherwise it is written buffered and the file synced, one flush covering
    /// both. A non-durable record is written buffered and flagged, so that recovery knows it
    /// may have reached the disk out of order.
    ///
    /// # Errors
    /// I/O errors; the caller must poison the environment (a failed `O_DIRECT` write may
    /// have written part of its range).
    pub fn append(
        &mut self,
        mut header: RecordHeader,
        record: &mut RecordBuf,
        durable: bool,
        index: &parking_lot::Mutex<JournalIndex>,
    ) -> Result<RecordEnd> {
        assert_eq!(
            header.txn_id,
            self.last_txn_id + 1,
            "records are appended in transaction order"
        );
        let payload = record.payload();
        let payload_len = payload.len();
        // LZ4 when it pays; incompressible payloads (random values) are stored raw. A large
        // payload is probed first so that incompressible data is not compressed in vain,
        // and after records that compressed poorly the next few are not tried (see
        // `CompressionBackoff`). It is compressed straight into the aligned buffer the
        // write goes from.
        let mut compressed_len = None;
        // The largest payload the write buffer was asked to hold for this record.
        let mut window_bytes = 0;
        if worth_compressing(payload) && self.backoff.try_now() {
            let max = lz4_flex::block::get_maximum_output_size(payload_len);
            window_bytes = max;
            let at = self.aligned_window(max) + RECORD_HEADER_SIZE_BYTES;
            let n = lz4_flex::block::compress_into(payload, &mut self.aligned[at..at + max])
                .map_err(|e| {
                    Error::InvalidArgument(format!("compressing a journal record: {e}"))
                })?;
            self.backoff.record(payload_len, n);
            // Only a saved 4 KiB block saves write time; otherwise replay would just pay
            // for decompression.
            if record_size_for(n) < record_size_for(payload_len) {
                compressed_len = Some(n);
            }
        }
        let stored_len = compressed_len.unwrap_or(payload_len);
        let record_size = record_size_for(stored_len);
        if self.position_bytes + record_size as u64 > self.file_size_bytes {
            self.rotate(record_size as u64, index)?;
        }
        // Decided after a rotation, which syncs what the old file held.
        let direct = durable
            && self.kind == FileKind::JournalDurable
            && index.lock().buffered_unsynced_txn_id == 0;
        let flags = if compressed_len.is_some() {
            FLAG_COMPRESSED
        } else {
            0
        };
        header.flags = if direct { flags } else { flags | FLAG_BUFFERED };
        header.journal_number = self.journal_number;
        header.prev_checksum = self.prev_checksum;
        header.payload_size_bytes = stored_len as u64;
        header.uncompressed_size_bytes = payload_len as u64;
        header.record_size_bytes = record_size as u64;

        let in_place = compressed_len.is_none() && record.is_aligned();
        let (buf, start) = if in_place {
            // Header and padding around the payload where it already lies.
            let start = record.start;
            record.buf.resize(start + record_size, 0);
            (&mut record.buf, start)
        } else {
            let start = self.aligned_window(stored_len);
            window_bytes = window_bytes.max(stored_len);
            if compressed_len.is_none() {
                let at = start + RECORD_HEADER_SIZE_BYTES;
                self.aligned[at..at + payload_len].copy_from_slice(record.payload());
            }
            (&mut self.aligned, start)
        };
        let block = &mut buf[start..start + record_size];
        let (head, rest) = block.split_at_mut(RECORD_HEADER_SIZE_BYTES);
        let (stored, padding) = rest.split_at_mut(stored_len);
        if !in_place {
            // The kept buffer may hold an older, longer record here; in place, the resize
            // above wrote these zeros.
            padding.fill(0);
        }
        header.payload_checksum = super::record::payload_checksum(stored, header.txn_id);
        let checksum = header.encode(head);
        let block = &buf[start..start + record_size];
        debug_assert_eq!(block.as_ptr().align_offset(JOURNAL_ALIGN_BYTES), 0);
        let what = |doing: &str| {
            format!(
                "{doing} journal {} record {}",
                self.journal_number, header.txn_id
            )
        };
        let file = if direct || self.kind == FileKind::JournalBuffered {
            &self.file
        } else {
            if self.buffered_file.is_none() {
                let name = journal_file_name(self.journal_number);
                let handle = self
                    .storage
                    .open(&name, FileKind::JournalBuffered, false)
                    .map_err(|e| Error::io(format!("opening {name} for buffered writes"), e))?;
                self.buffered_file = Some(handle);
            }
            self.buffered_file.as_ref().expect("opened above")
        };
        write_all_at(&**file, block, self.position_bytes)
            .map_err(|e| Error::io(what("writing"), e))?;
        if durable && !direct {
            let gate = Arc::clone(&index.lock().sync_gate);
            gate.sync(&**file).map_err(|e| Error::io(what("syncing"), e))?;
        }
        if durable {
            self.storage.note(StorageEvent::JournalDurable {
                txn_id: header.txn_id,
            });
        }
        self.position_bytes += record_size as u64;
        self.prev_checksum = checksum;
        self.last_txn_id = header.txn_id;
        self.bytes_written += record_size as u64;
        self.payload_bytes += payload_len as u64;
        self.stored_bytes += header.payload_size_bytes;
        let end = RecordEnd {
            txn_id: header.txn_id,
            journal_number: self.journal_number,
            end_offset_bytes: self.position_bytes,
            checksum,
            next_page_number: header.next_page_number,
        };
        if !keep_buffer(self.aligned.len(), window_bytes) {
            self.aligned = Vec::new();
        }
        let mut index = index.lock();
        if self.position_bytes == self.file_size_bytes {
            index.sealed = Some(self.journal_number);
        }
        index.push_record(end);
        index.buffered_unsynced_txn_id = if durable { 0 } else { header.txn_id };
        match index.active.back_mut() {
            Some((number, last)) if *number == self.journal_number => *last = header.txn_id,
            _ => index.active.push_back((self.journal_number, header.txn_id)),
        }
        Ok(end)
    }

    fn rotate(
        &mut self,
        min_size_bytes: u64,
        index: &parking_lot::Mutex<JournalIndex>,
    ) -> Result<()> {
        // Buffered records in the finished file must be durable before records move on,
        // since the flusher only syncs the current file.
        let (buffered, gate) = {
            let index = index.lock();
            (index.buffered_unsynced_txn_id != 0, Arc::clone(&index.sync_gate))
        };
        if buffered {
            gate.sync(&*self.file)
                .map_err(|e| Error::io(format!("syncing journal {}", self.journal_number), e))?;
            self.storage.note(StorageEvent::JournalDurable {
                txn_id: self.last_txn_id,
            });
            index.lock().buffered_unsynced_txn_id = 0;
        }
        self.buffered_file = None;
        let next = self.journal_number + 1;
        let target = {
            let mut index = index.lock();
            index.file_size_bytes = index.next_file_size_bytes(self.standard_file_size_bytes);
            index.file_size_bytes
        };
        let (file, file_size) = prepare_file(
            &*self.storage,
            self.kind,
            next,
            target.max(min_size_bytes),
            min_size_bytes,
            self.standard_file_size_bytes,
            index,
        )?;
        self.file = file;
        self.file_size_bytes = file_size;
        self.journal_number = next;
        self.position_bytes = 0;
        Ok(())
    }
}

/// Skips compressing records while recent ones compressed poorly. Compression costs about
/// as much time as writing the bytes it saves unless it removes a quarter of them (see
/// [`worth_compressing`]); diffs of random values save about a tenth. After a record that
/// saved less than a quarter, the next 1, 2, 4 … up to 64 records are stored raw, and the
/// next one is tried again: a workload that turns compressible is noticed within 64
/// records, and one that stays incompressible pays for one attempt in 65.
#[derive(Debug, Default)]
struct CompressionBackoff {
    skips_left: u32,
    next_skips: u32,
}

impl CompressionBackoff {
    const SKIPS_MAX: u32 = 64;

    /// Whether to try compressing this record (counts a skipped one).
    fn try_now(&mut self) -> bool {
        if self.skips_left == 0 {
            return true;
        }
        self.skips_left -= 1;
        false
    }

    /// Learns from an attempt that turned `payload_bytes` into `compressed_bytes`.
    fn record(&mut self, payload_bytes: usize, compressed_bytes: usize) {
        if compressed_bytes <= payload_bytes - payload_bytes / 4 {
            self.next_skips = 0;
        } else {
            self.next_skips = (self.next_skips * 2).clamp(1, Self::SKIPS_MAX);
            self.skips_left = self.next_skips;
        }
    }
}

/// Write buffers up to this size are always kept for the next record.
const RETAINED_BUFFER_BYTES: usize = 4 << 20;

/// Whether a record buffer of `size_bytes` (its length, or its capacity where the part
/// it has touched is not known) is kept for the next record after this one used
/// `used_bytes` of it. One up to [`RETAINED_BUFFER_BYTES`] always is. A larger one is kept
/// while records stay larger than that (a bulk load's, whose commits would otherwise each
/// fault in, and have the kernel zero, a fresh allocation as large as their record), and
/// released by the first record below it, so a rare large transaction does not pin its
/// memory.
pub(crate) fn keep_buffer(size_bytes: usize, used_bytes: usize) -> bool {
    size_bytes <= RETAINED_BUFFER_BYTES || used_bytes > RETAINED_BUFFER_BYTES
}

/// Payloads above this size are probed before being compressed whole.
const COMPRESSION_PROBE_BYTES: usize = 64 * 1024;

/// Whether compressing `payload` is worth its time. A record of one 4 KiB block cannot get
/// smaller, so it is not tried. Other small payloads are always tried (cheap, and each saved
/// block is a saved write). For a large one, compression costs about
/// as much time as writing the bytes it saves unless it removes a quarter of them, so it is
/// compressed whole only if a 64 KiB sample from its middle shrinks by that much (the role
/// Voron's adaptive acceleration plays).
fn worth_compressing(payload: &[u8]) -> bool {
    if record_size_for(payload.len()) <= JOURNAL_ALIGN_BYTES {
        return false;
    }
    if payload.len() <= 2 * COMPRESSION_PROBE_BYTES {
        return true;
    }
    let start = (payload.len() / 2).saturating_sub(COMPRESSION_PROBE_BYTES / 2);
    let sample = &payload[start..start + COMPRESSION_PROBE_BYTES];
    let compressed = lz4_flex::block::compress(sample);
    compressed.len() < sample.len() - sample.len() / 4
}

/// Creates journal `number` of `size_bytes`, or reuses a retired file or a spare (at its
/// own size, which may be smaller while journals grow, if the record to write fits, that
/// is up to `size_bytes` or the standard size), and makes its name durable. Files up to the
/// standard size are zero-filled (a durable write into written blocks needs no extent
/// conversion); a file made for one oversized record is only allocated, since zero-filling
/// it would cost more than it saves.
fn prepare_file(
    storage: &dyn Storage,
    kind: FileKind,
    number: u64,
    size_bytes: u64,
    needed_bytes: u64,
    standard_size_bytes: u64,
    index: &parking_lot::Mutex<JournalIndex>,
) -> Result<(Arc<dyn StorageFile>, u64)> {
    let name = journal_file_name(number);
    let io = |what: &str, e| Error::io(format!("{what} {name}"), e);
    let reused = {
        let mut index = index.lock();
        match index.recyclable.pop() {
            Some(old) => Some(journal_file_name(old)),
            None if size_bytes <= standard_size_bytes => {
                let spare = index.spares.pop();
                index.spares_used += u64::from(spare.is_some());
                spare.map(super::spare::spare_file_name)
            }
            None => None,
        }
    };
    if let Some(old_name) = &reused {
        storage
            .rename(old_name, &name)
            .map_err(|e| io("reusing a file as", e))?;
    }
    let file = storage
        .open(&name, kind, true)
        .map_err(|e| io("opening", e))?;
    let len = file.len().map_err(|e| io("sizing", e))?;
    // Buffered records gain nothing from written blocks (no O_DIRECT write needs its
    // extent converted), and a record is durable only once a sync covers it, which makes
    // the file's length durable too: the file simply grows as records are appended.
    let reused_fits = reused.is_some() && len >= needed_bytes.max(JOURNAL_ALIGN_BYTES as u64);
    let capacity_bytes = if kind == FileKind::JournalBuffered {
        size_bytes
    } else if reused_fits {
        len
    } else {
        if len < size_bytes {
            let standard = size_bytes <= standard_size_bytes;
            extend_file(storage, &name, len, size_bytes, standard)
                .map_err(|e| io("preparing", e))?;
            if standard {
                index.lock().filled_by_writer += 1;
            }
        }
        len.max(size_bytes)
    };
    storage
        .sync_dir("journal")
        .map_err(|e| io("syncing the directory of", e))?;
    if reused.is_none() {
        note_files(storage, index);
    }
    Ok((file, capacity_bytes))
}

/// Grows file `name` (created if missing) from `len_bytes` to `size_bytes`, by writing
/// zeros or by allocating only, and syncs it: the length and the zeros are durable.
pub(crate) fn extend_file(
    storage: &dyn Storage,
    name: &str,
    len_bytes: u64,
    size_bytes: u64,
    zero_fill: bool,
) -> std::io::Result<()> {
    // Through a buffered handle (O_DIRECT would need aligned buffers).
    let filler = storage.open(name, FileKind::Data, true)?;
    if zero_fill {
        let zeros = vec![0u8; 1 << 20];
        let mut offset = len_bytes;
        while offset < size_bytes {
            let n = (size_bytes - offset).min(zeros.len() as u64) as usize;
            write_all_at(&*filler, &zeros[..n], offset)?;
            offset += n as u64;
        }
    } else {
        filler.allocate(size_bytes)?;
    }
    filler.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that reports a failed writeback once (as Linux does per open file) is
    /// told to the second caller too.
    #[test]
    fn a_failed_journal_sync_fails_every_later_one() {
        use crate::storage::sim::{Fault, SimStorage};
        let sim = SimStorage::new(2);
        let file = sim
            .open("j", FileKind::JournalBuffered, true)
            .expect("open");
        crate::storage::write_all_at(&*file, &[7u8; 4096], 0).expect("write");
        sim.fail_at(sim.ops_count(), Fault::Eio, false);
        let gate = SyncGate::default();
        assert!(gate.sync(&*file).is_err());
        assert!(file.sync_data().is_ok(), "the device says it once");
        assert!(gate.sync(&*file).is_err(), "the gate says it again");
    }

    /// Records of every kind read back as they were given: compressed; stored raw from
    /// the record's own buffer; stored raw through the write buffer (a payload that
    /// outgrew its record buffer, and so moved off alignment). Large ones keep the write
    /// buffer for the next while records stay large; the first small one releases it.
    #[test]
    fn records_of_every_kind_read_back_and_large_buffers_last_while_records_are_large() {
        use crate::error::CorruptionSite;
        use crate::storage::read_exact_at;
        use rand::{Rng, SeedableRng};

        let storage: Arc<dyn Storage> = Arc::new(crate::storage::sim::SimStorage::new(1));
        storage.create_dir("journal").expect("journal directory");
        let index = parking_lot::Mutex::new(JournalIndex::default());
        index.lock().file_size_bytes = 64 << 20; // one file holds every record
        let mut writer =
            JournalWriter::start(Arc::clone(&storage), true, 64 << 20, 1, 0, 0, &index)
                .expect("start");
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut random = |len: usize| -> Vec<u8> { (0..len).map(|_| rng.r#gen()).collect() };
        let compressible = |len: usize| -> Vec<u8> { (0..len).map(|i| (i / 300) as u8).collect() };
        const MIB: usize = 1 << 20;
        // (payload, room reserved for it, compressed?, write buffer kept afterwards?)
        let cases = [
            (compressible(6 * MIB), 6 * MIB, true, true),
            (compressible(5 * MIB), 5 * MIB, true, true),
            (random(6 * MIB), 6 * MIB, false, false),
            (compressible(9 * MIB), 9 * MIB, true, true),
            (compressible(20_000), 20_000, true, false),
            (random(10_000), 10_000, false, false),
            (random(100_000), 16, false, false),
        ];
        for (i, (payload, room, _, kept)) in cases.iter().enumerate() {
            let mut record = RecordBuf::reusing(Vec::new(), *room);
            record.encoder().extend_from_slice(payload);
            let header = RecordHeader {
                flags: 0,
                txn_id: i as u64 + 1,
                journal_number: 0,
                prev_checksum: 0,
                payload_size_bytes: 0,
                uncompressed_size_bytes: 0,
                record_size_bytes: 0,
                page_count: 0,
                next_page_number: 0,
                root_page: 0,
                timestamp_ms: 0,
                payload_checksum: 0,
                checksum: 0,
            };
            writer
                .append(header, &mut record, true, &index)
                .expect("append");
            assert_eq!(
                writer.aligned.len() > RETAINED_BUFFER_BYTES,
                *kept,
                "record {i}: write buffer of {} bytes",
                writer.aligned.len()
            );
        }
        assert_eq!(writer.journal_number(), 1, "no rotation");

        let file = storage
            .open(&journal_file_name(1), FileKind::JournalBuffered, false)
            .expect("open");
        let site = CorruptionSite::Journal {
            journal_number: 1,
            offset_bytes: 0,
        };
        let mut offset = 0u64;
        for (i, (payload, _, compressed, _)) in cases.iter().enumerate() {
            let mut head = [0u8; RECORD_HEADER_SIZE_BYTES];
            read_exact_at(&*file, &mut head, offset).expect("read header");
            let header = RecordHeader::decode(&head, &site).expect("a valid header");
            assert_eq!(header.txn_id, i as u64 + 1);
            assert_eq!(header.flags & FLAG_COMPRESSED != 0, *compressed, "record {i}");
            let mut stored = vec![0u8; header.payload_size_bytes as usize];
            read_exact_at(&*file, &mut stored, offset + RECORD_HEADER_SIZE_BYTES as u64)
                .expect("read payload");
            assert_eq!(
                super::super::record::payload_checksum(&stored, header.txn_id),
                header.payload_checksum
            );
            let back = if *compressed {
                lz4_flex::block::decompress(&stored, payload.len()).expect("decompress")
            } else {
                stored
            };
            assert!(back == *payload, "record {i} reads back as written");
            offset += header.record_size_bytes;
        }
    }

    #[test]
    fn compression_backs_off_while_records_compress_poorly_and_recovers() {
        let mut b = CompressionBackoff::default();
        let mut tried = 0;
        for _ in 0..1_000 {
            if b.try_now() {
                tried += 1;
                b.record(40_000, 36_000); // saves a tenth
            }
        }
        assert!((15..=25).contains(&tried), "{tried} attempts in 1,000 poor records");
        // Compressible again: noticed within 65 records, then tried every time.
        let mut waited = 0;
        while !b.try_now() {
            waited += 1;
        }
        assert!(waited <= CompressionBackoff::SKIPS_MAX, "{waited}");
        b.record(40_000, 10_000);
        assert!((0..100).all(|_| {
            let now = b.try_now();
            b.record(40_000, 10_000);
            now
        }));
    }

    #[test]
    fn names_roundtrip() {
        let name = journal_file_name(42);
        assert_eq!(name, "journal/0000000000000000042.journal");
        assert_eq!(
            parse_journal_file_name(name.trim_start_matches("journal/")),
            Some(42)
        );
        assert_eq!(parse_journal_file_name("x.journal"), None);
        // Not names this engine writes: a sign, a number past what a header holds.
        assert_eq!(parse_journal_file_name("+000000000000000001.journal"), None);
        assert_eq!(parse_journal_file_name("9999999999999999999.journal"), None);
        let last = crate::header::COUNTER_MAX - 1;
        assert_eq!(
            parse_journal_file_name(journal_file_name(last).trim_start_matches("journal/")),
            Some(last)
        );
    }

    #[test]
    fn record_buf_keeps_room_for_the_header_and_stays_aligned_within_capacity() {
        let mut record = RecordBuf::reusing(Vec::new(), 10_000);
        assert!(record.is_aligned());
        assert!(record.payload().is_empty());
        record.encoder().extend((0..10_000u32).map(|i| i as u8));
        assert!(record.is_aligned(), "no reallocation within the capacity");
        assert_eq!(record.payload().len(), 10_000);
        assert_eq!(record.payload()[9_999], (9_999u32 % 256) as u8);
        // Outgrowing the capacity keeps the payload intact (it is then copied when written).
        record.encoder().extend(std::iter::repeat_n(7u8, 100_000));
        assert_eq!(record.payload().len(), 110_000);
        assert_eq!(record.payload()[10_000], 7);
        // A buffer taken back for the next record starts it empty and aligned, in the
        // same memory when it is large enough, and grows when it is not.
        let mut buf = record.take_buf();
        let old_ptr = buf.as_ptr();
        buf.truncate(1); // what is left in it must not matter
        let mut next = RecordBuf::reusing(buf, 50_000);
        assert!(next.payload().is_empty() && next.is_aligned());
        assert_eq!(next.buf.as_ptr(), old_ptr, "reused, not reallocated");
        let mut bigger = RecordBuf::reusing(next.take_buf(), 1 << 20);
        assert!(bigger.payload().is_empty() && bigger.is_aligned());
        bigger.encoder().extend(std::iter::repeat_n(9u8, 1 << 20));
        assert!(bigger.is_aligned(), "no reallocation within the capacity");
    }

    #[test]
    fn sync_points_stay_bounded_per_journal_and_keep_the_newest() {
        let mut index = JournalIndex::default();
        let record_bytes = 4096u64;
        let per_file = (4u64 << 20) / record_bytes;
        for txn_id in 1..=3 * per_file {
            let number = 1 + (txn_id - 1) / per_file;
            let end_offset_bytes = ((txn_id - 1) % per_file + 1) * record_bytes;
            index.push_record(RecordEnd {
                txn_id,
                journal_number: number,
                end_offset_bytes,
                checksum: txn_id,
                next_page_number: 1,
            });
        }
        let granules_per_file = (4u64 << 20) / SYNC_POINT_GRANULE_BYTES;
        assert_eq!(index.records.len() as u64, 3 * granules_per_file);
        assert_eq!(index.records.back().map(|r| r.txn_id), Some(3 * per_file));
        // A sync wanting a point inside a granule gets the end of the granule before it.
        let wanted = per_file + 10;
        let point = index.sync_point_at_or_before(wanted).expect("a point");
        assert!(point.txn_id <= wanted);
        assert!(wanted - point.txn_id < SYNC_POINT_GRANULE_BYTES / record_bytes);
        assert_eq!(index.sync_point_at_or_before(0), None);
    }

    #[test]
    fn retire_keeps_current_and_uncovered() {
        let mut index = JournalIndex::default();
        index.active.extend([(1, 10), (2, 20), (3, 30)]);
        assert_eq!(index.retire_through(20, 3, None), vec![1, 2]);
        assert_eq!(
            index.retire_through(30, 3, None),
            Vec::<u64>::new(),
            "current stays"
        );
    }

    #[test]
    fn files_a_backup_has_not_copied_are_kept_until_one_does() {
        let mut index = JournalIndex::default();
        index.active.extend([(1, 10), (2, 20), (3, 30), (4, 40)]);
        // Backed up through 10: file 1 goes, 2 and 3 are kept, 4 is current.
        assert_eq!(index.retire_through(40, 4, Some(10)), vec![1]);
        assert_eq!(index.kept_for_backup, [(2, 20), (3, 30)]);
        assert_eq!(index.release_backed_up(25), vec![2]);
        assert_eq!(index.release_backed_up(30), vec![3]);
        assert!(index.kept_for_backup.is_empty());
    }
}
