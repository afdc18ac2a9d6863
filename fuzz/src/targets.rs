//! Bodies of the fuzz targets, as plain functions of the input bytes.
//!
//! The cargo-fuzz binaries in `fuzz_targets/` call these, and so does the stable smoke test
//! `crates/hrafn/tests/fuzz_smoke.rs` (which includes this file by path), so every target
//! also runs in CI without a nightly toolchain. A body panics only when it finds a bug:
//! a panic inside the engine, or a broken property it checks itself.
//!
//! Decoding: every body reads its input through [`Input`], which yields zeros once the
//! bytes run out, so any input (including an empty one) is valid.
//!
//! Several bodies have a *repair* mode: after writing the fuzzer's bytes, they recompute the
//! checksums (of headers, journal records or pages) with the engine's own encoders, so the
//! bytes get past the checksum and reach the code that interprets them.

use hrafn::btree::node::{self, ValueRef};
use hrafn::btree::{PageSource, TreeHeader};
use hrafn::header::Header;
use hrafn::journal::diff::{DiffReader, encode_page};
use hrafn::journal::record::{
    self, FLAG_COMPRESSED, RECORD_HEADER_SIZE_BYTES, RECORD_MAGIC, RecordHeader,
};
use hrafn::journal::writer::{journal_file_name, parse_journal_file_name};
use hrafn::limits::{JOURNAL_ALIGN_BYTES, PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES};
use hrafn::meta::Meta;
use hrafn::page::{self, PageKind};
use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::storage::{FileKind, Storage};
use hrafn::{CorruptionSite, DATA_FILE, Durability, Environment, Error, Options};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

// Outcomes for the smoke run's report: how deep the inputs got. Per thread, as the smoke
// tests run in parallel.
thread_local! {
    static OPENS: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
    static CRASH_RUNS: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
}

/// Opens tried by this thread so far: (opened, refused as corruption, refused otherwise).
pub fn open_outcomes() -> (u64, u64, u64) {
    OPENS.with(Cell::get)
}

/// `ops_crash` runs of this thread so far: (crashed workloads, commits acknowledged in
/// the dry runs, storage operations of the dry runs).
pub fn crash_outcomes() -> (u64, u64, u64) {
    CRASH_RUNS.with(Cell::get)
}

fn count_open(outcome: usize) {
    OPENS.with(|c| {
        let mut v = c.get();
        match outcome {
            0 => v.0 += 1,
            1 => v.1 += 1,
            _ => v.2 += 1,
        }
        c.set(v);
    });
}

/// Opens a damaged disk and, if it opens, exercises it.
fn open_and_exercise(disk: SimStorage) {
    match Environment::open_with_storage(Arc::new(disk), quiet_options()) {
        Ok(env) => {
            count_open(0);
            exercise(&env);
        }
        Err(e) if e.is_corruption() => count_open(1),
        Err(_) => count_open(2),
    }
}

// ---------------------------------------------------------------------------------------
// Input decoding and shared helpers.

/// A cursor over the fuzzer's bytes; reads past the end give zeros.
pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// Up to `n` of the remaining bytes.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = end.max(self.pos.saturating_add(0));
        &self.data[start..end]
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        self.bytes(usize::MAX)
    }
}

/// The splitmix64 finalizer: derived values and bytes.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `len` deterministic bytes from `seed`.
fn derived_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut state = seed;
    while out.len() < len {
        state = mix(state);
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Options that keep the flusher asleep unless asked, so a single-threaded workload issues
/// its storage operations in a fixed order (crash points then replay exactly).
fn quiet_options() -> Options {
    Options::default()
        .durability(Durability::Immediate)
        .journal_file_size_bytes(64 * 1024)
        .flush_threshold_bytes(1 << 40)
        .flush_interval_ms(3_600_000)
        .sync_interval_ms(3_600_000)
        .sync_threshold_bytes(1 << 40)
        .scratch_wait_ms(0)
}

/// Reads everything an environment holds, and writes to it: whatever the files held,
/// nothing may panic. Errors are fine. Bounded, so a damaged tree cannot make it spin.
fn exercise(env: &Environment) {
    let _ = env.check();
    if let Ok(rtx) = env.begin_read() {
        let names = rtx.list_trees().unwrap_or_default();
        for name in names.iter().take(16) {
            if let Ok(tree) = rtx.open_tree(name) {
                let _ = tree.get(b"k001");
                if let Ok(entries) = tree.iter() {
                    for entry in entries.take(2_000) {
                        if entry.is_err() {
                            break;
                        }
                    }
                }
                if let Ok(entries) = tree.iter() {
                    for entry in entries.rev().take(200) {
                        if entry.is_err() {
                            break;
                        }
                    }
                }
            }
        }
    }
    if let Ok(mut wtx) = env.begin_write() {
        let result = (|| -> hrafn::Result<()> {
            let mut t = wtx.open_tree("a")?;
            t.insert(b"k001", b"after the damage")?;
            t.insert(b"fuzz-new-key", vec![7u8; 5000])?;
            t.remove(b"k002")?;
            Ok(())
        })();
        if result.is_ok() {
            let _ = wtx.commit();
        }
    }
}

/// Key `id` of the workloads: short, or long enough to make nodes split early.
fn workload_key(id: u8) -> Vec<u8> {
    let mut key = format!("k{id:03}").into_bytes();
    if id % 5 == 4 {
        key.resize(300 + usize::from(id) * 3, b'x');
    }
    key
}

/// Value of size class `size` for key `id` in transaction `salt`.
fn workload_value(id: u8, size: u8, salt: u64) -> Vec<u8> {
    let len = match size % 8 {
        0 => 0,
        1..=4 => usize::from(size),
        5 | 6 => 200 + usize::from(size) * 8,
        _ => 3_000 + usize::from(size) * 70, // overflow pages
    };
    derived_bytes(mix(u64::from(id) ^ (salt << 8)), len)
}

/// A disk holding an environment with flushed data and journal records after the last
/// sync: a clean file set for `open_files`, a crash state for `recover_journal`.
struct BaseDisk {
    disk: SimStorage,
    /// The journal holding the records after the header's position.
    journal: String,
    /// Where those records start.
    journal_offset_bytes: u64,
    /// Where they end, and the id and chain checksum of the last one: where the next
    /// record would go.
    log_end_offset_bytes: u64,
    last_txn_id: u64,
    last_checksum: u64,
}

fn build_base(seed: u64, crash: bool) -> BaseDisk {
    let disk = SimStorage::new(seed);
    let env = Environment::open_with_storage(Arc::new(disk.clone()), quiet_options())
        .expect("creating the base environment");
    let commit = |round: u64, count: u8| {
        let mut wtx = env.begin_write().expect("base write");
        for i in 0..count {
            let id = (round as u8).wrapping_mul(7).wrapping_add(i) % 64;
            let tree = ["a", "b", "c"][usize::from(id % 3)];
            wtx.open_tree(tree)
                .expect("base tree")
                .insert(
                    workload_key(id),
                    workload_value(id, i.wrapping_mul(37), round),
                )
                .expect("base insert");
        }
        if round % 4 == 3 {
            wtx.open_tree("a")
                .expect("base tree")
                .remove(workload_key(3))
                .expect("base remove");
        }
        wtx.commit().expect("base commit");
    };
    for round in 0..12 {
        commit(round, 12);
    }
    env.flush_and_sync().expect("base flush");
    for round in 12..16 {
        commit(round, 3);
    }
    let base = if crash {
        // What a kill -9 leaves: the records after the last sync are still to replay.
        disk.power_cut(Damage::KeepAll)
    } else {
        // Everything synced, with the journal still on disk (a clean close would remove
        // it): whatever damage it takes, nothing in it is needed.
        env.flush_and_sync().expect("base sync");
        disk.power_cut(Damage::KeepAll)
    };
    let header = hrafn::header::read_newest(&base)
        .expect("reading the base header")
        .expect("the base has a header");
    // Records to replay all sit in the journal the header points into, so damage to them
    // is a torn tail rather than a hole before later journals (which fails the open).
    let later_journals = base
        .file_names()
        .iter()
        .filter_map(|n| parse_journal_file_name(n.trim_start_matches("journal/")))
        .filter(|&n| n > header.journal_number)
        .count();
    assert_eq!(later_journals, 0, "the base's replay spans one journal");
    // Walk the records after the header's position to find the end of the log.
    let journal = journal_file_name(header.journal_number);
    let image = base.read_file(&journal).expect("reading the base journal");
    let (mut end, mut last_txn_id, mut last_checksum) = (
        header.journal_offset_bytes,
        header.synced_txn_id,
        header.chain_checksum,
    );
    let site = CorruptionSite::Environment;
    while let Some(head) = image.get(end as usize..end as usize + RECORD_HEADER_SIZE_BYTES) {
        match RecordHeader::decode(head, &site) {
            Ok(h) if h.txn_id == last_txn_id + 1 && h.prev_checksum == last_checksum => {
                end += h.record_size_bytes;
                last_txn_id = h.txn_id;
                last_checksum = h.checksum;
            }
            _ => break,
        }
    }
    assert!(
        !crash || last_txn_id > header.synced_txn_id,
        "the crashed base has records to replay"
    );
    BaseDisk {
        disk: base,
        journal,
        journal_offset_bytes: header.journal_offset_bytes,
        log_end_offset_bytes: end,
        last_txn_id,
        last_checksum,
    }
}

fn crashed_base() -> &'static BaseDisk {
    static BASE: OnceLock<BaseDisk> = OnceLock::new();
    BASE.get_or_init(|| build_base(0x4a52_4e4c, true))
}

fn clean_base() -> &'static BaseDisk {
    static BASE: OnceLock<BaseDisk> = OnceLock::new();
    BASE.get_or_init(|| build_base(0x4f50_454e, false))
}

/// A fresh copy of a base disk (the base itself is frozen and only copied).
fn copy(base: &BaseDisk) -> SimStorage {
    base.disk.power_cut(Damage::KeepAll)
}

/// Re-seals every journal record found at a 4 KiB boundary of `bytes`: repairs the payload
/// checksum (when the payload fits), the chain (`prev_checksum` from the record before),
/// the transaction ids (consecutive from the first) and the journal number, then the
/// header checksum. What is left to the fuzzer is the meaning of the fields and payloads.
fn reseal_records(bytes: &mut [u8], journal_number: u64, chain: bool) {
    use record::offsets as o;
    let mut prev: Option<(u64, u64)> = None; // (txn id, checksum)
    let mut at = 0;
    while bytes.len().saturating_sub(at) >= RECORD_HEADER_SIZE_BYTES {
        if bytes[at..at + 8] != RECORD_MAGIC {
            at += JOURNAL_ALIGN_BYTES;
            continue;
        }
        let field = |b: &[u8], off: usize| page::get_u64(b, at + off);
        let mut h = RecordHeader {
            flags: page::get_u32(bytes, at + o::FLAGS),
            txn_id: field(bytes, o::TXN_ID),
            journal_number: field(bytes, o::JOURNAL_NUMBER),
            prev_checksum: field(bytes, o::PREV_CHECKSUM),
            payload_size_bytes: field(bytes, o::PAYLOAD_SIZE),
            uncompressed_size_bytes: field(bytes, o::UNCOMPRESSED_SIZE),
            record_size_bytes: field(bytes, o::RECORD_SIZE),
            page_count: page::get_u32(bytes, at + o::PAGE_COUNT),
            next_page_number: field(bytes, o::NEXT_PAGE_NUMBER),
            root_page: field(bytes, o::ROOT_PAGE),
            timestamp_ms: field(bytes, o::TIMESTAMP_MS),
            payload_checksum: field(bytes, o::PAYLOAD_CHECKSUM),
            checksum: 0,
        };
        if chain {
            h.journal_number = journal_number;
            if let Some((txn_id, checksum)) = prev {
                h.txn_id = txn_id + 1;
                h.prev_checksum = checksum;
            }
        }
        let payload_start = at + RECORD_HEADER_SIZE_BYTES;
        if let Ok(size) = usize::try_from(h.payload_size_bytes)
            && let Some(end) = payload_start.checked_add(size)
            && end <= bytes.len()
        {
            // Keep the record size consistent with the payload, as the writer does.
            h.record_size_bytes = record::record_size_for(size) as u64;
            h.payload_checksum = record::payload_checksum(&bytes[payload_start..end], h.txn_id);
        }
        let checksum = h.encode(&mut bytes[at..at + RECORD_HEADER_SIZE_BYTES]);
        prev = Some((h.txn_id, checksum));
        // Checked: a size just below 2^64 rounds up to 0 when wrapping, and the loop would
        // re-seal the same record forever.
        let step = usize::try_from(h.record_size_bytes)
            .unwrap_or(usize::MAX)
            .max(JOURNAL_ALIGN_BYTES);
        match step
            .checked_next_multiple_of(JOURNAL_ALIGN_BYTES)
            .and_then(|step| at.checked_add(step))
        {
            Some(next) => at = next,
            None => break,
        }
    }
}

// ---------------------------------------------------------------------------------------
// recover_journal

/// Arbitrary bytes as a journal file of a crashed environment: opening must return `Ok` or
/// `Err`, never panic; an environment that opens must stand being read and written.
///
/// Input: a mode byte, then mode arguments, then the bytes.
/// - mode 0: the bytes replace the journal the header points into;
/// - mode 1: they overwrite it from a 512-byte-aligned offset (earlier records stay);
/// - mode 2: as mode 1, then every record in the file is re-sealed (checksums, chain), so
///   the payload and fields are interpreted;
/// - mode 3: the bytes form a new journal file after the last one (mode bit 2: re-sealed);
/// - mode 4: the bytes are a payload, written as one well-formed record (optionally
///   flagged compressed, with arbitrary sizes and next page number) after the last record
///   (mode bit 3: instead of the first record to replay).
pub fn recover_journal(data: &[u8]) {
    let base = crashed_base();
    let disk = copy(base);
    let mut input = Input::new(data);
    let mode = input.u8();
    match mode % 5 {
        0 => {
            let bytes = input.rest();
            disk.truncate_raw(&base.journal, 0)
                .expect("cutting the journal");
            disk.write_raw(&base.journal, 0, bytes)
                .expect("writing the journal");
        }
        1 | 2 => {
            let offset = base.journal_offset_bytes + u64::from(input.u16() % 512) * 512;
            let bytes = input.rest();
            disk.write_raw(&base.journal, offset, bytes)
                .expect("overwriting the journal");
            if mode % 5 == 2 {
                let number = parse_journal_file_name(base.journal.trim_start_matches("journal/"))
                    .expect("a journal name");
                let mut image = disk.read_file(&base.journal).expect("reading the journal");
                let start = usize::try_from(base.journal_offset_bytes).expect("small offset");
                reseal_records(&mut image[start..], number, mode & 8 == 0);
                disk.write_raw(&base.journal, 0, &image)
                    .expect("writing the journal");
            }
        }
        3 => {
            let last = disk
                .file_names()
                .iter()
                .filter_map(|n| parse_journal_file_name(n.trim_start_matches("journal/")))
                .max()
                .unwrap_or(1);
            let number = last + 1 + u64::from(input.u8() % 3);
            let name = journal_file_name(number);
            let mut bytes = input.rest().to_vec();
            if mode & 4 != 0 {
                reseal_records(&mut bytes, number, true);
            }
            disk.open(&name, FileKind::JournalBuffered, true)
                .expect("creating a journal");
            disk.write_raw(&name, 0, &bytes)
                .expect("writing the new journal");
        }
        _ => {
            // One record whose header is right for its place (after the last record, or
            // with bit 3 of the mode instead of the first record to replay); the payload
            // and the sizes are the input.
            let (offset, txn_id, prev_checksum) = if mode & 8 == 0 {
                (
                    base.log_end_offset_bytes,
                    base.last_txn_id + 1,
                    base.last_checksum,
                )
            } else {
                let header = hrafn::header::read_newest(&disk)
                    .expect("reading the header")
                    .expect("a header");
                (
                    header.journal_offset_bytes,
                    header.synced_txn_id + 1,
                    header.chain_checksum,
                )
            };
            let number = parse_journal_file_name(base.journal.trim_start_matches("journal/"))
                .expect("a journal name");
            let compressed = input.u8() & 1 == 1;
            let declared = input.u64();
            let next_page_number = input.u64();
            let payload = input.rest();
            let mut h = RecordHeader {
                flags: if compressed { FLAG_COMPRESSED } else { 0 },
                txn_id,
                journal_number: number,
                prev_checksum,
                payload_size_bytes: payload.len() as u64,
                uncompressed_size_bytes: if compressed {
                    declared
                } else {
                    payload.len() as u64
                },
                record_size_bytes: record::record_size_for(payload.len()) as u64,
                page_count: 1,
                next_page_number,
                root_page: 0,
                timestamp_ms: 0,
                payload_checksum: record::payload_checksum(payload, txn_id),
                checksum: 0,
            };
            let mut block = vec![0u8; record::record_size_for(payload.len())];
            h.encode(&mut block[..RECORD_HEADER_SIZE_BYTES]);
            block[RECORD_HEADER_SIZE_BYTES..RECORD_HEADER_SIZE_BYTES + payload.len()]
                .copy_from_slice(payload);
            disk.write_raw(&base.journal, offset, &block)
                .expect("writing the record");
        }
    }
    open_and_exercise(disk);
}

// ---------------------------------------------------------------------------------------
// open_files

/// Arbitrary bytes in the header files or the data file of a cleanly closed environment:
/// opening must return `Ok` or `Err`, never panic; an environment that opens must stand
/// being read, checked and written.
///
/// Input: a target byte (header.a, header.b, data file, both headers), a flags byte, an
/// offset, then the bytes. Flag 1: re-seal (header checksum, or the checksum of every page
/// the bytes touched), so the fields themselves are interpreted. Flag 2: cut the file
/// to the end of the bytes.
pub fn open_files(data: &[u8]) {
    let base = clean_base();
    let disk = copy(base);
    let mut input = Input::new(data);
    let target = input.u8() % 4;
    let flags = input.u8();
    let offset_hint = input.u32();
    let bytes = input.rest();
    let names: &[&str] = match target {
        0 => &["header.a"],
        1 => &["header.b"],
        2 => &[DATA_FILE],
        _ => &["header.a", "header.b"],
    };
    for &name in names {
        let Ok(image) = disk.read_file(name) else {
            continue;
        };
        let len = image.len().max(1) as u64;
        let offset = if name == DATA_FILE {
            u64::from(offset_hint) % len
        } else {
            u64::from(offset_hint) % 4096
        };
        disk.write_raw(name, offset, bytes).expect("writing a file");
        let end = offset + bytes.len() as u64;
        if flags & 2 != 0 {
            disk.truncate_raw(name, end).expect("cutting a file");
        }
        if flags & 1 != 0 {
            let mut image = disk.read_file(name).expect("reading a file");
            if name == DATA_FILE {
                reseal_pages(&mut image, offset, end);
            } else if image.len() >= hrafn::header::HEADER_SIZE_BYTES {
                reseal_header(&mut image);
            }
            disk.write_raw(name, 0, &image).expect("writing a file");
        }
    }
    open_and_exercise(disk);
}

/// Recomputes a header's checksum over whatever its fields hold.
fn reseal_header(image: &mut [u8]) {
    use hrafn::header::offsets as o;
    let mut env_id = [0u8; 16];
    env_id.copy_from_slice(&image[o::ENV_ID..o::ENV_ID + 16]);
    let h = Header {
        revision: page::get_u64(image, o::REVISION),
        env_id,
        synced_txn_id: page::get_u64(image, o::SYNCED_TXN_ID),
        journal_number: page::get_u64(image, o::JOURNAL_NUMBER),
        journal_offset_bytes: page::get_u64(image, o::JOURNAL_OFFSET),
        chain_checksum: page::get_u64(image, o::CHAIN_CHECKSUM),
        next_page_number: page::get_u64(image, o::NEXT_PAGE_NUMBER),
        backup: hrafn::header::BackupPoint {
            enabled: page::get_u64(image, o::BACKUP_FLAGS) & 1 != 0,
            txn_id: page::get_u64(image, o::BACKUP_TXN_ID),
            journal_number: page::get_u64(image, o::BACKUP_JOURNAL_NUMBER),
            journal_offset_bytes: page::get_u64(image, o::BACKUP_JOURNAL_OFFSET),
        },
    };
    let encoded = h.encode();
    let n = encoded.len().min(image.len());
    image[..n].copy_from_slice(&encoded[..n]);
}

/// Re-seals the pages (and overflow runs) overlapping `from..to` of a data-file image.
fn reseal_pages(image: &mut [u8], from: u64, to: u64) {
    let page_size = PAGE_SIZE_BYTES as u64;
    let pages = image.len() as u64 / page_size;
    let first = from / page_size;
    let last = to.div_ceil(page_size).min(pages);
    for number in first..last {
        let at = (number * page_size) as usize;
        let run = &mut image[at..];
        page::put_u64(run, page::OFFSET_PAGE_NUMBER, number);
        let span = page::span_pages(run, number)
            .unwrap_or(1)
            .min(pages - number)
            .max(1);
        let len = (span * page_size) as usize;
        page::seal(&mut run[..len], number);
    }
}

// ---------------------------------------------------------------------------------------
// record_decode

/// The journal record header decoder and the diff payload reader on arbitrary bytes: no
/// panic; a header that decodes re-encodes to the same fields; diffs apply within the page;
/// and diffs the encoder writes reproduce the page they describe, also onto a torn mix of
/// old and new sectors.
///
/// Input: a mode byte, then the bytes. Mode bit 0: make the header's checksum right so the
/// field checks run. Mode bit 1: treat the rest as two page images for the diff encoder.
pub fn record_decode(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let bytes = input.rest();
    let site = CorruptionSite::Journal {
        journal_number: 1,
        offset_bytes: 0,
    };

    // Record header.
    let mut head = bytes[..bytes.len().min(RECORD_HEADER_SIZE_BYTES)].to_vec();
    if mode & 1 == 1 && head.len() == RECORD_HEADER_SIZE_BYTES {
        head[..8].copy_from_slice(&RECORD_MAGIC);
        page::put_u32(&mut head, record::offsets::VERSION, record::RECORD_VERSION);
        let checksum = xxh3_of_header(&head);
        page::put_u64(&mut head, record::offsets::HEADER_CHECKSUM, checksum);
    }
    if let Ok(h) = RecordHeader::decode(&head, &site) {
        let mut again = vec![0u8; RECORD_HEADER_SIZE_BYTES];
        let mut copy = h;
        copy.encode(&mut again);
        let back = RecordHeader::decode(&again, &site).expect("an encoded header decodes");
        assert_eq!(
            RecordHeader {
                checksum: 0,
                ..back
            },
            RecordHeader { checksum: 0, ..h },
            "record header fields survive a re-encode"
        );
        assert_eq!(
            h.record_size_bytes,
            record::record_size_for(h.payload_size_bytes as usize) as u64
        );
    }

    // Diff payload.
    let payload = bytes
        .get(RECORD_HEADER_SIZE_BYTES.min(bytes.len())..)
        .unwrap_or(&[]);
    let mut page_buf = derived_bytes(u64::from(mode), PAGE_SIZE_BYTES);
    let mut reader = DiffReader::new(payload, site.clone());
    for _ in 0..10_000 {
        match reader.next_entry() {
            Ok(Some(entry)) => entry.apply(&mut page_buf),
            Ok(None) | Err(_) => break,
        }
    }
    assert_eq!(page_buf.len(), PAGE_SIZE_BYTES);

    // Encoder round trip: old page from the input, new page = old with input edits.
    if mode & 2 == 2 {
        let mut edits = Input::new(bytes);
        let mut old = derived_bytes(edits.u64(), PAGE_SIZE_BYTES);
        for _ in 0..usize::from(edits.u8() % 4) {
            // Zeroed stretches, which the encoder stores without bytes.
            let at = usize::from(edits.u16()) % PAGE_SIZE_BYTES;
            let len = usize::from(edits.u16()) % (PAGE_SIZE_BYTES - at + 1);
            old[at..at + len].fill(0);
        }
        let mut new = old.clone();
        while !edits.is_empty() {
            let at = usize::from(edits.u16()) % PAGE_SIZE_BYTES;
            let len = (usize::from(edits.u8()) % 64).min(PAGE_SIZE_BYTES - at);
            let fill = edits.u8();
            if fill == 0 {
                new[at..at + len].fill(0);
            } else {
                for (i, b) in new[at..at + len].iter_mut().enumerate() {
                    *b = fill.wrapping_add(i as u8);
                }
            }
        }
        let mut diff = Vec::new();
        let changed = encode_page(&mut diff, 42, &new, Some(&old));
        assert_eq!(
            changed,
            new != old,
            "encode_page reports whether the page changed"
        );
        let tear = mix(u64::from(mode) ^ diff.len() as u64);
        for base in [old.clone(), torn_mix(&old, &new, tear)] {
            let mut page_bytes = base;
            let mut reader = DiffReader::new(&diff, site.clone());
            while let Some(entry) = reader.next_entry().expect("an encoded diff decodes") {
                assert_eq!(entry.page_number, 42);
                entry.apply(&mut page_bytes);
            }
            assert!(page_bytes == new, "a diff rebuilds the new page");
        }
    }
}

/// A page whose 512-byte sectors come from `old` or `new` by the bits of `tear`.
fn torn_mix(old: &[u8], new: &[u8], tear: u64) -> Vec<u8> {
    let mut out = old.to_vec();
    for s in 0..PAGE_SIZE_BYTES / 512 {
        if tear >> s & 1 == 1 {
            out[s * 512..(s + 1) * 512].copy_from_slice(&new[s * 512..(s + 1) * 512]);
        }
    }
    out
}

/// The record header checksum, computed as the encoder does (through `encode`, which
/// rewrites the fixed fields, so compare field by field instead of reusing its bytes).
fn xxh3_of_header(head: &[u8]) -> u64 {
    // RecordHeader::encode computes xxh3-64 of bytes 0..120 of what it wrote; decoding our
    // fields and encoding them gives the checksum only when the reserved bytes are zero, so
    // zero them in our copy too.
    use record::offsets as o;
    let mut h = RecordHeader {
        flags: page::get_u32(head, o::FLAGS),
        txn_id: page::get_u64(head, o::TXN_ID),
        journal_number: page::get_u64(head, o::JOURNAL_NUMBER),
        prev_checksum: page::get_u64(head, o::PREV_CHECKSUM),
        payload_size_bytes: page::get_u64(head, o::PAYLOAD_SIZE),
        uncompressed_size_bytes: page::get_u64(head, o::UNCOMPRESSED_SIZE),
        record_size_bytes: page::get_u64(head, o::RECORD_SIZE),
        page_count: page::get_u32(head, o::PAGE_COUNT),
        next_page_number: page::get_u64(head, o::NEXT_PAGE_NUMBER),
        root_page: page::get_u64(head, o::ROOT_PAGE),
        timestamp_ms: page::get_u64(head, o::TIMESTAMP_MS),
        payload_checksum: page::get_u64(head, o::PAYLOAD_CHECKSUM),
        checksum: 0,
    };
    let mut scratch = vec![0u8; RECORD_HEADER_SIZE_BYTES];
    h.encode(&mut scratch)
}

// ---------------------------------------------------------------------------------------
// page_decode

/// Pages of a small file built from the fuzzer's bytes, read like the data-file mapping:
/// a page's bytes run to the end of the file.
struct Pages {
    bytes: Vec<u8>,
}

impl<'a> PageSource<'a> for &'a Pages {
    fn page(self, page_number: u64) -> hrafn::Result<&'a [u8]> {
        let count = (self.bytes.len() / PAGE_SIZE_BYTES) as u64;
        if page_number >= count {
            return Err(page::corrupt(page_number, "beyond the file"));
        }
        Ok(&self.bytes[page_number as usize * PAGE_SIZE_BYTES..])
    }
}

/// B+tree node accessors, page header helpers, the meta page, free-space bitmaps, and
/// lookups, iteration and the integrity check over a small file of arbitrary pages: no
/// panic, no out-of-bounds read, no hang.
///
/// Input: a flags byte, a key, then page bytes. Flag 1: give page 1 a plausible node header
/// (kind, entry count, free bounds) so the accessors go deeper. Flag 2: give page 0 a meta
/// page pointing into the file. Flag 4: seal every page. Flag 64: make page 1 a fixed-size
/// leaf (flag 128: a slotted one).
pub fn page_decode(data: &[u8]) {
    let mut input = Input::new(data);
    let flags = input.u8();
    let key_len = usize::from(input.u8() % 32);
    let key = input.bytes(key_len).to_vec();
    let raw = input.rest();
    let page_count = raw.len().div_ceil(PAGE_SIZE_BYTES).clamp(2, 4);
    let mut bytes = vec![0u8; page_count * PAGE_SIZE_BYTES];
    bytes[..raw.len().min(page_count * PAGE_SIZE_BYTES)]
        .copy_from_slice(&raw[..raw.len().min(page_count * PAGE_SIZE_BYTES)]);
    if flags & 1 == 1 {
        let p = &mut bytes[PAGE_SIZE_BYTES..2 * PAGE_SIZE_BYTES];
        p[page::OFFSET_KIND] = if flags & 8 == 0 {
            PageKind::Leaf as u8
        } else {
            PageKind::Branch as u8
        };
        let count = page::get_u16(p, page::OFFSET_ENTRY_COUNT) % 200;
        page::put_u16(p, page::OFFSET_ENTRY_COUNT, count);
        let lower = PAGE_HEADER_SIZE_BYTES as u16 + count * 2;
        page::put_u16(p, page::OFFSET_FREE_LOWER, lower);
        let upper = page::get_u16(p, page::OFFSET_FREE_UPPER);
        page::put_u16(
            p,
            page::OFFSET_FREE_UPPER,
            lower + upper % (PAGE_SIZE_BYTES as u16 - lower + 1),
        );
    }
    if flags & 64 == 64 {
        // Page 1 a fixed-size leaf (flag 128: slotted) of the value size the fixed-size
        // readers below use, its count within that layout's capacity; slots stay as given.
        let p = &mut bytes[PAGE_SIZE_BYTES..2 * PAGE_SIZE_BYTES];
        let value_size = key.len() * 37 % (hrafn::fixed::FIXED_VALUE_SIZE_MAX_BYTES + 1);
        let (kind, entry_bytes) = if flags & 128 == 0 {
            (PageKind::FixedLeaf, 8 + value_size)
        } else {
            (PageKind::FixedLeafSlotted, 10 + value_size)
        };
        p[page::OFFSET_KIND] = kind as u8;
        page::put_u64(p, page::OFFSET_AUX, value_size as u64);
        let capacity = (PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES) / entry_bytes;
        let count = usize::from(page::get_u16(p, page::OFFSET_ENTRY_COUNT)) % (capacity + 1);
        page::put_u16(p, page::OFFSET_ENTRY_COUNT, count as u16);
    }
    if flags & 2 == 2 {
        let p = &mut bytes[..PAGE_SIZE_BYTES];
        page::init(p, 0, PageKind::Meta);
        let root = if flags & 16 == 0 { 1 } else { 0 };
        let next = page_count as u64;
        Meta {
            root_page: root,
            tree_count: 1,
            next_page_number: next,
            section_count: u64::from(flags & 32 != 0),
            directories: if flags & 32 == 0 {
                vec![]
            } else {
                vec![next - 1]
            },
        }
        .encode(p);
    }
    if flags & 4 == 4 {
        for number in 0..page_count as u64 {
            let at = number as usize * PAGE_SIZE_BYTES;
            page::put_u64(&mut bytes[at..], page::OFFSET_PAGE_NUMBER, number);
            page::seal(&mut bytes[at..at + PAGE_SIZE_BYTES], number);
        }
    }

    // Node accessors on every page.
    for number in 0..page_count {
        let p = &bytes[number * PAGE_SIZE_BYTES..(number + 1) * PAGE_SIZE_BYTES];
        let n = number as u64;
        decode_node(p, n, &key);
        let _ = page::kind(p, n);
        let _ = page::span_pages(p, n);
        let _ = page::verify(&bytes[number * PAGE_SIZE_BYTES..], n);
        let _ = Meta::decode(p);
        let _ = TreeHeader::decode(&p[..24], n);
        let _ = hrafn::freespace::count_free(p);
        let from = (n as usize * 977) % 65_000;
        let _ = hrafn::freespace::find_run(p, 1 + key.len(), from, from + 5_000);
        let _ = hrafn::freespace::find_run_near(p, 1 + key.len(), from, 65_280);
        let _ = hrafn::freespace::read_entry(p, n, key.len() % 510, page_count as u64);
    }

    // The file as a whole.
    let pages = Pages { bytes };
    let src = &pages;
    for root in 0..page_count as u64 {
        // Fixed-size tree readers, with a value size taken from the input.
        let value_size = key.len() * 37 % (hrafn::fixed::FIXED_VALUE_SIZE_MAX_BYTES + 1);
        let probe = u64::from_le_bytes(std::array::from_fn(|i| key.get(i).copied().unwrap_or(0)));
        let _ = hrafn::fixed::get(src, root, value_size, probe);
        let _ = hrafn::fixed::last(src, root, value_size);
        if let Ok(range) = hrafn::fixed::FixedRange::new(src, root, value_size, probe..) {
            for _ in range.take(2_000) {}
        }
        if let Ok(range) = hrafn::fixed::FixedRange::new_rev(src, root, value_size, ..=probe) {
            for _ in range.take(2_000) {}
        }
        let _ = hrafn::btree::get(src, root, &key);
        if let Ok(range) = hrafn::btree::Range::new(
            src,
            root,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
        ) {
            for entry in range.take(1_000) {
                if entry.is_err() {
                    break;
                }
            }
        }
        if let Ok(range) = hrafn::btree::Range::new(
            src,
            root,
            std::ops::Bound::Included(&key[..]),
            std::ops::Bound::Unbounded,
        ) {
            for entry in range.rev().take(1_000) {
                if entry.is_err() {
                    break;
                }
            }
        }
    }
    let _ = hrafn::check::check(src);
}

/// Every node accessor on one page, as a leaf and as a branch.
fn decode_node(p: &[u8], n: u64, key: &[u8]) {
    let header_ok = node::validate_header(p, n).is_ok();
    let count = node::count(p).min(600);
    let _ = node::free_bytes(p);
    let _ = node::leftmost_child(p);
    let _ = node::is_leaf(p, n);
    for leaf in [true, false] {
        for i in 0..=count {
            let _ = node::key(p, i, leaf, n);
            let _ = node::entry_size_at(p, i, leaf, n);
        }
        let _ = node::search(p, key, leaf, n);
        let _ = node::used_bytes(p, leaf, n);
        if header_ok {
            let mut copy = p.to_vec();
            if node::compact(&mut copy, leaf, n).is_ok() {
                // A compacted node holds the same entries.
                for i in 0..node::count(&copy).min(600) {
                    let before = node::key(p, i, leaf, n).ok();
                    let after = node::key(&copy, i, leaf, n).ok();
                    assert_eq!(before, after, "compaction keeps entry {i} of page {n}");
                }
            }
            let mut fresh = vec![0u8; PAGE_SIZE_BYTES];
            page::init(&mut fresh, n, PageKind::Leaf);
            for i in 0..count.min(8) {
                let _ = node::copy_entry(p, i, &mut fresh, 0, leaf, n);
            }
        }
    }
    for i in 0..=count {
        if let Ok((_, value)) = node::leaf_entry(p, i, n) {
            let size = match value {
                ValueRef::Inline(v) => {
                    // Any inline value might be a multi-value tree's embedded set.
                    let _ = hrafn::multi::decode_set(v, n);
                    v.len()
                }
                ValueRef::Tree(v) => {
                    let _ = hrafn::btree::TreeHeader::decode(v, n);
                    v.len()
                }
                ValueRef::Embedded(v) => {
                    if let Ok(tree) = hrafn::fixed::Embedded::decode(v, n) {
                        let _ = tree.validate_order(n);
                        for i in 0..tree.len().min(200) {
                            let _ = (tree.key(i), tree.value(i), tree.get(tree.key(i)));
                        }
                    }
                    v.len()
                }
                ValueRef::Overflow { len_bytes, .. } => len_bytes.min(1 << 20) as usize,
            };
            let _ = hrafn::btree::fits_inline(key.len(), size);
        }
        let _ = node::branch_entry(p, i, n);
        let _ = node::child_at(p, i, n);
    }
    let _ = node::child_index_for(p, key, n);
}

// ---------------------------------------------------------------------------------------
// ops_crash

/// One operation of a workload.
#[derive(Debug, Clone, Copy)]
enum Op {
    Insert { tree: u8, key: u8, size: u8 },
    Remove { tree: u8, key: u8 },
    DeleteTree { tree: u8 },
    Commit,
    Abort,
    FlushAndSync,
    Reopen,
}

fn decode_ops(input: &mut Input<'_>) -> Vec<Op> {
    let mut ops = Vec::new();
    while !input.is_empty() && ops.len() < 400 {
        let b = input.u8();
        let op = match b % 16 {
            0..=6 => Op::Insert {
                tree: input.u8() % 3,
                key: input.u8() % 64,
                size: input.u8(),
            },
            7 | 8 => Op::Remove {
                tree: input.u8() % 3,
                key: input.u8() % 64,
            },
            9 => Op::DeleteTree {
                tree: input.u8() % 3,
            },
            10..=12 => Op::Commit,
            13 => Op::Abort,
            14 => Op::FlushAndSync,
            _ => Op::Reopen,
        };
        ops.push(op);
    }
    ops
}

type Model = BTreeMap<(u8, Vec<u8>), Vec<u8>>;

const TREES: [&str; 3] = ["a", "b", "c"];

/// What a workload run saw.
struct Outcome {
    /// Committed states, in order; the first is the empty environment.
    acked: Vec<Model>,
    /// The state of a commit that returned an error: it may or may not be durable.
    in_flight: Option<Model>,
    /// The first error, if any (expected only after a crash point).
    error: Option<String>,
    /// Storage operations issued.
    ops_count: u64,
}

fn open_sim(disk: &SimStorage) -> hrafn::Result<Environment> {
    Environment::open_with_storage(Arc::new(disk.clone()), quiet_options())
}

/// Runs `ops` on `disk` until their end or the first error. A transaction runs from its
/// first change to a `Commit` or `Abort`; `FlushAndSync` and `Reopen` (a clean close and
/// open) abort an open transaction first.
fn run_ops(disk: &SimStorage, ops: &[Op]) -> Outcome {
    let mut out = Outcome {
        acked: vec![Model::new()],
        in_flight: None,
        error: None,
        ops_count: 0,
    };
    let mut i = 0;
    let mut salt = 0u64;
    'envs: loop {
        let env = match open_sim(disk) {
            Ok(env) => env,
            Err(e) => {
                out.error = Some(format!("open: {e}"));
                break;
            }
        };
        loop {
            let Some(&op) = ops.get(i) else {
                break 'envs;
            };
            match op {
                Op::Reopen => {
                    i += 1;
                    continue 'envs; // drops `env`: a clean close
                }
                Op::FlushAndSync => {
                    i += 1;
                    if let Err(e) = env.flush_and_sync() {
                        out.error = Some(format!("flush_and_sync: {e}"));
                        break 'envs;
                    }
                    continue;
                }
                Op::Commit | Op::Abort => {
                    i += 1; // no transaction open: nothing to end
                    continue;
                }
                Op::Insert { .. } | Op::Remove { .. } | Op::DeleteTree { .. } => {}
            }
            let mut wtx = match env.begin_write() {
                Ok(wtx) => wtx,
                Err(e) => {
                    out.error = Some(format!("begin_write: {e}"));
                    break 'envs;
                }
            };
            salt += 1;
            let mut model = out.acked.last().expect("the empty state at least").clone();
            let commit = loop {
                let Some(&op) = ops.get(i) else {
                    break false;
                };
                let result = match op {
                    Op::Insert { tree, key, size } => {
                        let k = workload_key(key);
                        let v = workload_value(key, size, salt);
                        model.insert((tree, k.clone()), v.clone());
                        wtx.open_tree(TREES[usize::from(tree)])
                            .and_then(|mut t| t.insert(&k, &v).map(|_| ()))
                    }
                    Op::Remove { tree, key } => {
                        let k = workload_key(key);
                        model.remove(&(tree, k.clone()));
                        wtx.open_tree(TREES[usize::from(tree)])
                            .and_then(|mut t| t.remove(&k).map(|_| ()))
                    }
                    Op::DeleteTree { tree } => {
                        model.retain(|(t, _), _| *t != tree);
                        wtx.delete_tree(TREES[usize::from(tree)]).map(|_| ())
                    }
                    Op::Commit => {
                        i += 1;
                        break true;
                    }
                    Op::Abort => {
                        i += 1;
                        break false;
                    }
                    Op::FlushAndSync | Op::Reopen => break false,
                };
                i += 1;
                if let Err(e) = result {
                    out.error = Some(format!("{op:?}: {e}"));
                    break 'envs;
                }
            };
            if commit {
                match wtx.commit() {
                    Ok(()) => out.acked.push(model),
                    Err(e) => {
                        out.error = Some(format!("commit: {e}"));
                        out.in_flight = Some(model);
                        break 'envs;
                    }
                }
            }
        }
    }
    out.ops_count = disk.ops_count();
    out
}

/// Everything the environment holds, in model form.
fn read_model(env: &Environment) -> hrafn::Result<Model> {
    let mut model = Model::new();
    let rtx = env.begin_read()?;
    for (t, name) in TREES.iter().enumerate() {
        let tree = match rtx.open_tree(name) {
            Ok(tree) => tree,
            Err(Error::TreeNotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        for entry in tree.iter()? {
            let (k, v) = entry?;
            model.insert((t as u8, k.to_vec()), v.to_vec());
        }
    }
    Ok(model)
}

fn describe(model: &Model) -> String {
    format!(
        "{} entries: {:?}",
        model.len(),
        model
            .iter()
            .take(6)
            .map(|((t, k), v)| format!(
                "{t}/{}={}B",
                String::from_utf8_lossy(&k[..k.len().min(4)]),
                v.len()
            ))
            .collect::<Vec<_>>()
    )
}

/// A workload of transactions, aborts, flushes and clean reopens on the simulated disk,
/// cut by a power loss at an operation chosen by the input (then, optionally, a second
/// power loss during recovery). The recovered environment must open, hold exactly the last
/// acknowledged state or the one whose commit was in flight (the prefix property, with
/// every acknowledged commit), pass the integrity check, and the write-ahead checker must
/// have seen no broken rule.
///
/// Input: a flags byte (bit 0: create the environment before the workload; the other bits
/// seed the disk), the crash point, the damage, the recovery crash point, then the
/// operations (see [`decode_ops`]).
pub fn ops_crash(data: &[u8]) {
    let mut input = Input::new(data);
    let flags = input.u8();
    let seed = u64::from(flags >> 1);
    // Flag 1: the environment exists before the workload, so the crash point falls in the
    // workload; otherwise it may also fall in the creation of the environment.
    let precreate = flags & 1 == 1;
    let crash_pick = u64::from(input.u16());
    let damage = match input.u8() % 3 {
        0 => Damage::KeepAll,
        1 => Damage::DropAll,
        _ => Damage::Random,
    };
    let recovery_crash = input.u8();
    let ops = decode_ops(&mut input);
    let fresh_disk = || {
        let disk = SimStorage::new(seed);
        if precreate {
            drop(open_sim(&disk).expect("creating the environment"));
        }
        disk
    };

    // Without a crash every operation succeeds, and a clean reopen shows the last state.
    let disk = fresh_disk();
    let first_op = disk.ops_count();
    let dry = run_ops(&disk, &ops);
    assert!(
        dry.error.is_none(),
        "no crash, yet: {:?} (ops {ops:?})",
        dry.error
    );
    assert!(
        disk.violations().is_empty(),
        "write-ahead rules: {:?}",
        disk.violations()
    );
    {
        let env = open_sim(&disk).expect("a clean reopen");
        let state = read_model(&env).expect("reading after a clean reopen");
        let want = dry.acked.last().expect("the empty state at least");
        assert!(
            state == *want,
            "clean reopen: found {}, expected {} (ops {ops:?})",
            describe(&state),
            describe(want)
        );
        env.check().expect("integrity after a clean reopen");
    }

    CRASH_RUNS.with(|c| {
        let (runs, commits, ops) = c.get();
        c.set((
            runs + 1,
            commits + dry.acked.len() as u64 - 1,
            ops + dry.ops_count - first_op,
        ));
    });

    // The same workload, cut at operation `crash_at`.
    let crash_at = first_op + crash_pick % (dry.ops_count - first_op + 1);
    let disk = fresh_disk();
    disk.crash_at(crash_at);
    let run = run_ops(&disk, &ops);
    assert!(
        disk.violations().is_empty(),
        "write-ahead rules: {:?}",
        disk.violations()
    );
    let mut after = disk.power_cut(damage);
    if recovery_crash != 0 {
        // Power fails again while recovering; recovery must start over cleanly.
        after.crash_at(after.ops_count() + u64::from(recovery_crash));
        if let Ok(env) = open_sim(&after) {
            drop(env);
        }
        assert!(
            after.violations().is_empty(),
            "write-ahead rules in recovery: {:?}",
            after.violations()
        );
        after = after.power_cut(damage);
    }
    let context = format!(
        "seed {seed}, precreated {precreate}, crash at op {crash_at} of {}, {damage:?}, \
         recovery crash {recovery_crash}, {} acked, in flight: {}, ops {ops:?}",
        dry.ops_count,
        run.acked.len() - 1,
        run.in_flight.is_some()
    );
    let env =
        open_sim(&after).unwrap_or_else(|e| panic!("recovered environment opens: {e}; {context}"));
    let state =
        read_model(&env).unwrap_or_else(|e| panic!("reading the recovered state: {e}; {context}"));
    let last = run.acked.last().expect("the empty state at least");
    assert!(
        state == *last || run.in_flight.as_ref() == Some(&state),
        "recovered {} but the last acknowledged state is {}; {context}",
        describe(&state),
        describe(last)
    );
    env.check()
        .unwrap_or_else(|e| panic!("integrity of the recovered state: {e}; {context}"));
    drop(env);
    assert!(
        after.violations().is_empty(),
        "write-ahead rules after recovery: {:?}",
        after.violations()
    );
}
