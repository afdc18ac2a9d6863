//! Journal record layout: a 128-byte header, the LZ4-compressed diff payload, zero padding
//! to a 4 KiB boundary. All integers little-endian.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `HRAFNJR1` |
//! | 8 | 4 | format version |
//! | 12 | 4 | flags (bit 0: payload is LZ4-compressed; bit 1: written through the page cache, not `O_DIRECT`; see `docs/format.md`) |
//! | 16 | 8 | transaction id |
//! | 24 | 8 | journal number of the file the record was written into |
//! | 32 | 8 | previous record's checksum (hash chain) |
//! | 40 | 8 | stored payload size in bytes |
//! | 48 | 8 | uncompressed payload size in bytes |
//! | 56 | 8 | record size in bytes, header and padding included (multiple of 4 KiB) |
//! | 64 | 4 | page count |
//! | 68 | 4 | reserved, 0 |
//! | 72 | 8 | next page number after this transaction |
//! | 80 | 8 | root tree's root page after this transaction |
//! | 88 | 8 | commit time, ms since the Unix epoch |
//! | 96 | 8 | payload checksum: xxh3-64 of the stored payload, seeded with the transaction id |
//! | 104 | 16 | reserved for an encryption nonce and MAC, 0 |
//! | 120 | 8 | header checksum: xxh3-64 of bytes 0..120; also this record's chain checksum |

use crate::error::{CorruptionSite, Error, Result};
use crate::limits::JOURNAL_ALIGN_BYTES;
use crate::page::{get_u32, get_u64, put_u32, put_u64};

/// Record magic.
pub const RECORD_MAGIC: [u8; 8] = *b"HRAFNJR1";
/// Journal record format version.
pub const RECORD_VERSION: u32 = 1;
/// Header size in bytes.
pub const RECORD_HEADER_SIZE_BYTES: usize = 128;
/// Flag: payload compressed with LZ4 (block format).
pub const FLAG_COMPRESSED: u32 = 1;
/// Flag: written without `O_DSYNC` (`Durability::None`). Buffered records may reach the
/// disk out of order, so a valid one after the end of the log is not a hole.
pub const FLAG_BUFFERED: u32 = 2;

/// Offsets of the header fields (documented in `docs/format.md`).
pub mod offsets {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const FLAGS: usize = 12;
    pub const TXN_ID: usize = 16;
    pub const JOURNAL_NUMBER: usize = 24;
    pub const PREV_CHECKSUM: usize = 32;
    pub const PAYLOAD_SIZE: usize = 40;
    pub const UNCOMPRESSED_SIZE: usize = 48;
    pub const RECORD_SIZE: usize = 56;
    pub const PAGE_COUNT: usize = 64;
    pub const NEXT_PAGE_NUMBER: usize = 72;
    pub const ROOT_PAGE: usize = 80;
    pub const TIMESTAMP_MS: usize = 88;
    pub const PAYLOAD_CHECKSUM: usize = 96;
    pub const RESERVED: usize = 104;
    pub const HEADER_CHECKSUM: usize = 120;
}
const _: () = assert!(offsets::HEADER_CHECKSUM + 8 == RECORD_HEADER_SIZE_BYTES);

/// The decoded header of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub flags: u32,
    pub txn_id: u64,
    pub journal_number: u64,
    pub prev_checksum: u64,
    pub payload_size_bytes: u64,
    pub uncompressed_size_bytes: u64,
    pub record_size_bytes: u64,
    pub page_count: u32,
    pub next_page_number: u64,
    pub root_page: u64,
    pub timestamp_ms: u64,
    pub payload_checksum: u64,
    /// Checksum of the header; the next record's `prev_checksum`.
    pub checksum: u64,
}

/// Record size for a stored payload of `payload_size_bytes`: header + payload, padded.
pub fn record_size_for(payload_size_bytes: usize) -> usize {
    (RECORD_HEADER_SIZE_BYTES + payload_size_bytes).next_multiple_of(JOURNAL_ALIGN_BYTES)
}

/// Most bytes an LZ4 block of `compressed_size_bytes` can decompress to: a match length
/// grows by at most 255 per input byte.
pub fn lz4_decompressed_size_max(compressed_size_bytes: u64) -> u64 {
    compressed_size_bytes.saturating_mul(255).saturating_add(64)
}

/// Checksum of a stored payload.
pub fn payload_checksum(payload: &[u8], txn_id: u64) -> u64 {
    crate::checksum::xxh3_64_with_seed(payload, txn_id)
}

impl RecordHeader {
    /// Writes the header (computing its checksum) into `out[..128]`; returns the checksum.
    pub fn encode(&mut self, out: &mut [u8]) -> u64 {
        use offsets as o;
        out[..RECORD_HEADER_SIZE_BYTES].fill(0);
        out[o::MAGIC..o::MAGIC + 8].copy_from_slice(&RECORD_MAGIC);
        put_u32(out, o::VERSION, RECORD_VERSION);
        put_u32(out, o::FLAGS, self.flags);
        put_u64(out, o::TXN_ID, self.txn_id);
        put_u64(out, o::JOURNAL_NUMBER, self.journal_number);
        put_u64(out, o::PREV_CHECKSUM, self.prev_checksum);
        put_u64(out, o::PAYLOAD_SIZE, self.payload_size_bytes);
        put_u64(out, o::UNCOMPRESSED_SIZE, self.uncompressed_size_bytes);
        put_u64(out, o::RECORD_SIZE, self.record_size_bytes);
        put_u32(out, o::PAGE_COUNT, self.page_count);
        put_u64(out, o::NEXT_PAGE_NUMBER, self.next_page_number);
        put_u64(out, o::ROOT_PAGE, self.root_page);
        put_u64(out, o::TIMESTAMP_MS, self.timestamp_ms);
        put_u64(out, o::PAYLOAD_CHECKSUM, self.payload_checksum);
        self.checksum = crate::checksum::xxh3_64(&out[..o::HEADER_CHECKSUM]);
        put_u64(out, o::HEADER_CHECKSUM, self.checksum);
        self.checksum
    }

    /// Decodes and validates a header (magic, version, checksum, sizes). It does not check
    /// the payload or the chain; the reader does.
    ///
    /// # Errors
    /// [`Error::Corruption`] at `site` when the bytes are not a valid header.
    pub fn decode(bytes: &[u8], site: &CorruptionSite) -> Result<RecordHeader> {
        use offsets as o;
        let bad = |reason: &str| Error::corruption(site.clone(), reason.to_owned());
        if bytes.len() < RECORD_HEADER_SIZE_BYTES {
            return Err(bad("record header truncated"));
        }
        if bytes[o::MAGIC..o::MAGIC + 8] != RECORD_MAGIC {
            return Err(bad("no record magic"));
        }
        let checksum = get_u64(bytes, o::HEADER_CHECKSUM);
        if crate::checksum::xxh3_64(&bytes[..o::HEADER_CHECKSUM]) != checksum {
            return Err(bad("record header checksum mismatch"));
        }
        if get_u32(bytes, o::VERSION) != RECORD_VERSION {
            return Err(bad("unknown record version"));
        }
        let header = RecordHeader {
            flags: get_u32(bytes, o::FLAGS),
            txn_id: get_u64(bytes, o::TXN_ID),
            journal_number: get_u64(bytes, o::JOURNAL_NUMBER),
            prev_checksum: get_u64(bytes, o::PREV_CHECKSUM),
            payload_size_bytes: get_u64(bytes, o::PAYLOAD_SIZE),
            uncompressed_size_bytes: get_u64(bytes, o::UNCOMPRESSED_SIZE),
            record_size_bytes: get_u64(bytes, o::RECORD_SIZE),
            page_count: get_u32(bytes, o::PAGE_COUNT),
            next_page_number: get_u64(bytes, o::NEXT_PAGE_NUMBER),
            root_page: get_u64(bytes, o::ROOT_PAGE),
            timestamp_ms: get_u64(bytes, o::TIMESTAMP_MS),
            payload_checksum: get_u64(bytes, o::PAYLOAD_CHECKSUM),
            checksum,
        };
        let Ok(payload_size) = usize::try_from(header.payload_size_bytes) else {
            return Err(bad("payload size beyond the address space"));
        };
        if header.payload_size_bytes > (1 << 40)
            || header.uncompressed_size_bytes > (1 << 40)
            || header.record_size_bytes != record_size_for(payload_size) as u64
        {
            return Err(bad("record sizes inconsistent"));
        }
        // Ids and page numbers far beyond any real environment: replay adds to them and
        // sizes the data file from the next page number, which must not overflow.
        if header.txn_id > crate::header::COUNTER_MAX
            || header.journal_number > crate::header::COUNTER_MAX
            || header.next_page_number > crate::header::PAGE_NUMBER_MAX
        {
            return Err(bad("record field out of range"));
        }
        // Replay allocates the uncompressed size before decompressing: a size LZ4 cannot
        // reach from this payload would make a damaged file exhaust memory (abort).
        if header.flags & FLAG_COMPRESSED != 0
            && header.uncompressed_size_bytes > lz4_decompressed_size_max(header.payload_size_bytes)
        {
            return Err(bad("uncompressed size beyond what the payload can hold"));
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RecordHeader {
        RecordHeader {
            flags: FLAG_COMPRESSED,
            txn_id: 42,
            journal_number: 3,
            prev_checksum: 77,
            payload_size_bytes: 5000,
            uncompressed_size_bytes: 9000,
            record_size_bytes: record_size_for(5000) as u64,
            page_count: 2,
            next_page_number: 10,
            root_page: 4,
            timestamp_ms: 1,
            payload_checksum: 99,
            checksum: 0,
        }
    }

    #[test]
    fn header_roundtrip_and_every_flip_detected() {
        let mut h = sample();
        let mut bytes = vec![0u8; RECORD_HEADER_SIZE_BYTES];
        h.encode(&mut bytes);
        let site = CorruptionSite::Environment;
        assert_eq!(RecordHeader::decode(&bytes, &site).expect("valid"), h);
        for bit in 0..RECORD_HEADER_SIZE_BYTES * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                RecordHeader::decode(&damaged, &site).is_err(),
                "flip of bit {bit}"
            );
        }
    }

    #[test]
    fn ids_and_page_numbers_out_of_range_are_rejected() {
        let site = CorruptionSite::Environment;
        let mut bytes = vec![0u8; RECORD_HEADER_SIZE_BYTES];
        for mut h in [
            RecordHeader {
                next_page_number: 1 << 60,
                ..sample()
            },
            RecordHeader {
                txn_id: u64::MAX,
                ..sample()
            },
            RecordHeader {
                journal_number: u64::MAX,
                ..sample()
            },
        ] {
            h.encode(&mut bytes);
            assert!(RecordHeader::decode(&bytes, &site).is_err(), "{h:?}");
        }
    }

    #[test]
    fn compressed_size_claims_are_bounded_by_the_payload() {
        let site = CorruptionSite::Environment;
        let mut bytes = vec![0u8; RECORD_HEADER_SIZE_BYTES];
        let mut h = sample();
        h.uncompressed_size_bytes = 1 << 40;
        h.encode(&mut bytes);
        assert!(RecordHeader::decode(&bytes, &site).is_err());
        h.uncompressed_size_bytes = lz4_decompressed_size_max(h.payload_size_bytes);
        h.encode(&mut bytes);
        assert!(RecordHeader::decode(&bytes, &site).is_ok());
        // The most compressible input LZ4 knows stays within the bound.
        let zeros = vec![0u8; 1 << 20];
        let packed = lz4_flex::block::compress(&zeros);
        assert!(lz4_decompressed_size_max(packed.len() as u64) >= zeros.len() as u64);
    }

    #[test]
    fn record_sizes_are_aligned() {
        assert_eq!(record_size_for(0), 4096);
        assert_eq!(record_size_for(4096 - 128), 4096);
        assert_eq!(record_size_for(4096 - 127), 8192);
    }
}
