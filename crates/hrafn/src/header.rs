//! The environment header: two small files, `header.a` and `header.b`, written alternately.
//!
//! Revision `r` goes to `header.a` when `r` is even and `header.b` when odd, so a write never
//! overwrites the only valid copy; opening takes the valid copy with the higher revision.
//! The header says where journal replay starts. It is the only metadata rewritten in place.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `HRAFNHDR` |
//! | 8 | 4 | format version |
//! | 12 | 4 | page size in bytes |
//! | 16 | 8 | revision |
//! | 24 | 16 | environment id (random) |
//! | 40 | 8 | last synced transaction id: every change up to it is durable in the data file |
//! | 48 | 8 | journal number where replay starts |
//! | 56 | 8 | byte offset in that journal where replay starts |
//! | 64 | 8 | chain checksum of the record of the last synced transaction (0 for none) |
//! | 72 | 8 | next page number at the sync point |
//! | 80 | 8 | backup flags: bit 0 = incremental backups enabled (journals kept until backed up) |
//! | 88 | 8 | last transaction in a backup (incremental backups only) |
//! | 96 | 8 | journal number where the next incremental backup starts |
//! | 104 | 8 | byte offset in that journal |
//! | 112 | 8 | reserved, 0 |
//! | 120 | 8 | checksum: xxh3-64 of bytes 0..120 |
//!
//! The header occupies the first 128 bytes of a 4 KiB file; one 512-byte sector holds it.

use crate::error::{CorruptionSite, Error, Result};
use crate::limits::PAGE_SIZE_BYTES;
use crate::page::{get_u32, get_u64, put_u32, put_u64};
use crate::storage::{FileKind, Storage, read_exact_at, write_all_at};

/// Header magic.
pub const HEADER_MAGIC: [u8; 8] = *b"HRAFNHDR";
/// On-disk format version; bump together with `docs/format.md`.
pub const FORMAT_VERSION: u32 = 6;
/// Oldest format this build opens: versions 2 to 5 differ only by what later versions added
/// (fixed-size trees; nested and multi-value trees, tables; the backup fields, zero before;
/// slotted fixed-size leaves), so they are read as they are and become the current version
/// at their next header write.
pub const FORMAT_VERSION_OLDEST: u32 = 2;
/// Bytes of the header that carry data.
pub const HEADER_SIZE_BYTES: usize = 128;
/// Size of a header file.
pub const HEADER_FILE_SIZE_BYTES: usize = 4096;
/// Largest revision, transaction id, journal number or journal offset a valid header
/// holds (a counter never gets near it; the margin keeps `+ 1` and offset sums exact).
pub const COUNTER_MAX: u64 = 1 << 62;
/// Largest next page number a valid header holds: the data file's byte size must fit a
/// `u64` with room to spare.
pub const PAGE_NUMBER_MAX: u64 = (1 << 62) / PAGE_SIZE_BYTES as u64;

/// File names, by revision parity.
pub const HEADER_FILES: [&str; 2] = ["header.a", "header.b"];

/// Field offsets (documented in `docs/format.md`).
pub mod offsets {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const PAGE_SIZE: usize = 12;
    pub const REVISION: usize = 16;
    pub const ENV_ID: usize = 24;
    pub const SYNCED_TXN_ID: usize = 40;
    pub const JOURNAL_NUMBER: usize = 48;
    pub const JOURNAL_OFFSET: usize = 56;
    pub const CHAIN_CHECKSUM: usize = 64;
    pub const NEXT_PAGE_NUMBER: usize = 72;
    pub const BACKUP_FLAGS: usize = 80;
    pub const BACKUP_TXN_ID: usize = 88;
    pub const BACKUP_JOURNAL_NUMBER: usize = 96;
    pub const BACKUP_JOURNAL_OFFSET: usize = 104;
    pub const RESERVED: usize = 112;
    pub const CHECKSUM: usize = 120;
}
const _: () = assert!(offsets::CHECKSUM + 8 == HEADER_SIZE_BYTES);

/// Where the next incremental backup starts: every journal record after it is kept until
/// a backup copies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BackupPoint {
    /// Incremental backups were enabled when the environment was created.
    pub enabled: bool,
    /// The last transaction a backup holds.
    pub txn_id: u64,
    /// The journal and byte offset just past that transaction's record.
    pub journal_number: u64,
    pub journal_offset_bytes: u64,
}

/// Bit of the backup flags: incremental backups enabled.
const BACKUP_INCREMENTAL: u64 = 1;

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub revision: u64,
    pub env_id: [u8; 16],
    pub synced_txn_id: u64,
    pub journal_number: u64,
    pub journal_offset_bytes: u64,
    pub chain_checksum: u64,
    pub next_page_number: u64,
    pub backup: BackupPoint,
}

impl Header {
    /// Encodes into a full header-file block.
    pub fn encode(&self) -> Vec<u8> {
        use offsets as o;
        let mut out = vec![0u8; HEADER_FILE_SIZE_BYTES];
        out[o::MAGIC..o::MAGIC + 8].copy_from_slice(&HEADER_MAGIC);
        put_u32(&mut out, o::VERSION, FORMAT_VERSION);
        put_u32(&mut out, o::PAGE_SIZE, PAGE_SIZE_BYTES as u32);
        put_u64(&mut out, o::REVISION, self.revision);
        out[o::ENV_ID..o::ENV_ID + 16].copy_from_slice(&self.env_id);
        put_u64(&mut out, o::SYNCED_TXN_ID, self.synced_txn_id);
        put_u64(&mut out, o::JOURNAL_NUMBER, self.journal_number);
        put_u64(&mut out, o::JOURNAL_OFFSET, self.journal_offset_bytes);
        put_u64(&mut out, o::CHAIN_CHECKSUM, self.chain_checksum);
        put_u64(&mut out, o::NEXT_PAGE_NUMBER, self.next_page_number);
        let flags = if self.backup.enabled {
            BACKUP_INCREMENTAL
        } else {
            0
        };
        put_u64(&mut out, o::BACKUP_FLAGS, flags);
        put_u64(&mut out, o::BACKUP_TXN_ID, self.backup.txn_id);
        put_u64(
            &mut out,
            o::BACKUP_JOURNAL_NUMBER,
            self.backup.journal_number,
        );
        put_u64(
            &mut out,
            o::BACKUP_JOURNAL_OFFSET,
            self.backup.journal_offset_bytes,
        );
        let checksum = crate::checksum::xxh3_64(&out[..o::CHECKSUM]);
        put_u64(&mut out, o::CHECKSUM, checksum);
        out
    }

    /// Decodes and validates a header block read from `file`.
    ///
    /// # Errors
    /// [`Error::Corruption`] for bad magic or checksum, [`Error::UnsupportedVersion`] for a
    /// newer format.
    pub fn decode(bytes: &[u8], file: &str) -> Result<Header> {
        use offsets as o;
        let bad = |reason: &str| {
            Error::corruption(
                CorruptionSite::Header {
                    file: file.to_owned(),
                },
                reason.to_owned(),
            )
        };
        if bytes.len() < HEADER_SIZE_BYTES {
            return Err(bad("header file too short"));
        }
        if bytes[o::MAGIC..o::MAGIC + 8] != HEADER_MAGIC {
            return Err(bad("no header magic"));
        }
        if crate::checksum::xxh3_64(&bytes[..o::CHECKSUM]) != get_u64(bytes, o::CHECKSUM) {
            return Err(bad("header checksum mismatch"));
        }
        let version = get_u32(bytes, o::VERSION);
        if !(FORMAT_VERSION_OLDEST..=FORMAT_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if get_u32(bytes, o::PAGE_SIZE) as usize != PAGE_SIZE_BYTES {
            return Err(bad("page size differs from this build's"));
        }
        let mut env_id = [0u8; 16];
        env_id.copy_from_slice(&bytes[o::ENV_ID..o::ENV_ID + 16]);
        let header = Header {
            revision: get_u64(bytes, o::REVISION),
            env_id,
            synced_txn_id: get_u64(bytes, o::SYNCED_TXN_ID),
            journal_number: get_u64(bytes, o::JOURNAL_NUMBER),
            journal_offset_bytes: get_u64(bytes, o::JOURNAL_OFFSET),
            chain_checksum: get_u64(bytes, o::CHAIN_CHECKSUM),
            next_page_number: get_u64(bytes, o::NEXT_PAGE_NUMBER),
            backup: BackupPoint {
                enabled: get_u64(bytes, o::BACKUP_FLAGS) & BACKUP_INCREMENTAL != 0,
                txn_id: get_u64(bytes, o::BACKUP_TXN_ID),
                journal_number: get_u64(bytes, o::BACKUP_JOURNAL_NUMBER),
                journal_offset_bytes: get_u64(bytes, o::BACKUP_JOURNAL_OFFSET),
            },
        };
        // Counters and positions far beyond anything a real environment reaches: recovery
        // adds to them and multiplies page numbers by the page size, which must not overflow.
        if header.revision > COUNTER_MAX
            || header.synced_txn_id > COUNTER_MAX
            || header.journal_number > COUNTER_MAX
            || header.journal_offset_bytes > COUNTER_MAX
            || header.next_page_number > PAGE_NUMBER_MAX
            || header.backup.txn_id > COUNTER_MAX
            || header.backup.journal_number > COUNTER_MAX
            || header.backup.journal_offset_bytes > COUNTER_MAX
        {
            return Err(bad("header field out of range"));
        }
        Ok(header)
    }

    /// File this revision is written to.
    pub fn file_name(&self) -> &'static str {
        HEADER_FILES[(self.revision % 2) as usize]
    }
}

/// Reads both header files and returns the valid one with the higher revision.
/// `Ok(None)` when neither file exists (no environment yet).
///
/// # Errors
/// [`Error::Corruption`] when a header file exists but no copy is valid; I/O errors.
pub fn read_newest(storage: &dyn Storage) -> Result<Option<Header>> {
    let mut best: Option<Header> = None;
    let mut first_error = None;
    // `header.a` is created first (by rename, at the end of creation) and never removed.
    // Without it, creation never completed and nothing was ever acknowledged; a `header.b`
    // that holds nothing yet (empty or zeros: its first write failed) changes nothing.
    let mut a_missing = false;
    let mut b_blank = true;
    for name in HEADER_FILES {
        let exists = storage
            .exists(name)
            .map_err(|e| Error::io(format!("checking {name}"), e))?;
        if !exists {
            a_missing |= name == HEADER_FILES[0];
            continue;
        }
        let file = storage
            .open(name, FileKind::Header, false)
            .map_err(|e| Error::io(format!("opening {name}"), e))?;
        let mut bytes = vec![0u8; HEADER_SIZE_BYTES];
        let decoded = match read_exact_at(&*file, &mut bytes, 0) {
            Ok(()) => {
                if name == HEADER_FILES[1] {
                    b_blank = bytes.iter().all(|&b| b == 0);
                }
                Header::decode(&bytes, name)
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(Error::corruption(
                CorruptionSite::Header {
                    file: name.to_owned(),
                },
                "header file too short",
            )),
            Err(e) => return Err(Error::io(format!("reading {name}"), e)),
        };
        match decoded {
            Ok(h) => {
                if best.is_none_or(|b| h.revision > b.revision) {
                    best = Some(h);
                }
            }
            Err(e @ Error::UnsupportedVersion { .. }) => return Err(e),
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    match (best, first_error) {
        (Some(h), _) => Ok(Some(h)),
        (None, _) if a_missing && b_blank => Ok(None),
        (None, Some(e)) => Err(e),
        (None, None) => Err(Error::corruption(
            CorruptionSite::Environment,
            "no valid header",
        )),
    }
}

/// Writes `header` to its file and makes it durable (`fdatasync`).
///
/// # Errors
/// I/O errors; the caller must treat them as fatal (poison).
pub fn write(storage: &dyn Storage, header: &Header) -> Result<()> {
    let name = header.file_name();
    let existed = storage
        .exists(name)
        .map_err(|e| Error::io(format!("checking {name}"), e))?;
    let file = storage
        .open(name, FileKind::Header, true)
        .map_err(|e| Error::io(format!("opening {name}"), e))?;
    write_all_at(&*file, &header.encode(), 0)
        .map_err(|e| Error::io(format!("writing {name}"), e))?;
    file.sync_data()
        .map_err(|e| Error::io(format!("syncing {name}"), e))?;
    if !existed {
        // A new file is durable only once its directory entry is (rule: fsync the file,
        // then the directory).
        storage
            .sync_dir("")
            .map_err(|e| Error::io("syncing the environment directory", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_the_oldest_readable_up_to_this_one_open() {
        let h = Header {
            revision: 1,
            env_id: [3; 16],
            synced_txn_id: 0,
            journal_number: 1,
            journal_offset_bytes: 0,
            chain_checksum: 0,
            next_page_number: 1,
            backup: BackupPoint::default(),
        };
        for version in 0..FORMAT_VERSION + 2 {
            let mut bytes = h.encode();
            put_u32(&mut bytes, offsets::VERSION, version);
            let checksum = crate::checksum::xxh3_64(&bytes[..offsets::CHECKSUM]);
            put_u64(&mut bytes, offsets::CHECKSUM, checksum);
            let decoded = Header::decode(&bytes, "header.a");
            if (FORMAT_VERSION_OLDEST..=FORMAT_VERSION).contains(&version) {
                assert_eq!(decoded.expect("readable"), h);
            } else {
                assert!(matches!(decoded, Err(Error::UnsupportedVersion { .. })));
            }
        }
        assert_eq!(get_u32(&h.encode(), offsets::VERSION), FORMAT_VERSION);
    }

    #[test]
    fn roundtrip_and_flips() {
        let h = Header {
            revision: 5,
            env_id: [7; 16],
            synced_txn_id: 9,
            journal_number: 2,
            journal_offset_bytes: 8192,
            chain_checksum: 1234,
            next_page_number: 99,
            backup: BackupPoint {
                enabled: true,
                txn_id: 7,
                journal_number: 2,
                journal_offset_bytes: 4096,
            },
        };
        let bytes = h.encode();
        assert_eq!(Header::decode(&bytes, "header.b").expect("valid"), h);
        for out_of_range in [
            Header {
                journal_number: u64::MAX,
                ..h
            },
            Header {
                journal_offset_bytes: COUNTER_MAX + 1,
                ..h
            },
            Header {
                synced_txn_id: u64::MAX,
                ..h
            },
            Header {
                revision: u64::MAX,
                ..h
            },
            Header {
                next_page_number: PAGE_NUMBER_MAX + 1,
                ..h
            },
            Header {
                backup: BackupPoint {
                    journal_offset_bytes: COUNTER_MAX + 1,
                    ..h.backup
                },
                ..h
            },
        ] {
            let bytes = out_of_range.encode();
            assert!(
                Header::decode(&bytes, "header.b").is_err(),
                "{out_of_range:?}"
            );
        }
        assert_eq!(h.file_name(), "header.b");
        for bit in 0..HEADER_SIZE_BYTES * 8 {
            let mut d = bytes.clone();
            d[bit / 8] ^= 1 << (bit % 8);
            assert!(Header::decode(&d, "header.b").is_err(), "bit {bit}");
        }
    }

    /// Regression (io-errors suite, seed 0xaf8cf854e5782e6f op 17, ENOSPC): creation failed
    /// before `header.a` was durable and the first write of `header.b` failed; a power cut
    /// left only an empty `header.b`. That is a never-created environment, not corruption.
    #[test]
    fn blank_header_b_without_header_a_is_a_new_environment() {
        use crate::storage::sim::SimStorage;
        let sim = SimStorage::new(1);
        let file = sim
            .open("header.b", FileKind::Header, true)
            .expect("create");
        assert_eq!(read_newest(&sim).expect("no environment"), None);
        write_all_at(&*file, &[0u8; 512], 0).expect("zeros");
        assert_eq!(read_newest(&sim).expect("no environment"), None);
        write_all_at(&*file, &[7u8; 512], 0).expect("garbage");
        assert!(
            read_newest(&sim)
                .expect_err("garbage is corruption")
                .is_corruption()
        );
    }
}
