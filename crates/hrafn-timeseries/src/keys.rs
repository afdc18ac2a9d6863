//! The trees the store keeps and how their keys are laid out (see `docs/timeseries.md`).
//!
//! Every integer in a key is big-endian so byte order is numeric order; a timestamp is
//! stored with its sign bit flipped so negative times sort before positive ones.

use crate::error::{Error, Result};

/// Series by label hash: `hash u64 | series id u64` → empty. Several ids under one hash
/// are told apart by their labels, so a hash collision never merges two series.
pub const TREE_SERIES: &str = "ts.series";
/// Labels by series id: `series id u64` → canonical label bytes.
pub const TREE_LABELS: &str = "ts.labels";
/// The label index (multi-value): `name 0x00 value` → the ids of the series carrying it.
pub const TREE_POSTINGS: &str = "ts.postings";
/// Open chunks: `series id u64` → a fixed-size open chunk, rewritten in place on append.
pub const TREE_HEAD: &str = "ts.head";
/// Sealed chunks: `series id u64 | first timestamp` → a compressed chunk.
pub const TREE_CHUNKS: &str = "ts.chunks";
/// Sealed chunks by age: `last timestamp | series id u64 | first timestamp` → empty.
/// Retention walks it from the start and stops at the first chunk it keeps.
pub const TREE_BLOCKS: &str = "ts.blocks";
/// Out-of-order and overwriting samples: `series id u64` → a nested fixed-size tree of
/// `timestamp` → `f64` bits.
pub const TREE_OOO: &str = "ts.ooo";
/// Store-wide values: the next series id and the layout version.
pub const TREE_META: &str = "ts.meta";

/// Meta key of the next series id to hand out (u64 big-endian).
pub const META_NEXT_SERIES_ID: &[u8] = b"next_series_id";
/// Meta key of the layout version (u32 big-endian).
pub const META_LAYOUT_VERSION: &[u8] = b"layout_version";
/// The layout this code writes and reads.
pub const LAYOUT_VERSION: u32 = 2;

/// Value bytes of an out-of-order sample (`f64` bits, little-endian).
pub const OOO_VALUE_BYTES: usize = 8;

/// A timestamp as an order-preserving `u64`.
pub fn time_key(timestamp_ms: i64) -> u64 {
    (timestamp_ms as u64) ^ (1 << 63)
}

/// The inverse of [`time_key`].
pub fn time_from_key(key: u64) -> i64 {
    (key ^ (1 << 63)) as i64
}

/// A series id as key bytes.
pub fn id_key(series_id: u64) -> [u8; 8] {
    series_id.to_be_bytes()
}

/// Reads a series id key.
///
/// # Errors
/// [`Error::Corrupt`] when `bytes` is not 8 bytes long.
pub fn id_from(bytes: &[u8]) -> Result<u64> {
    bytes
        .try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| Error::Corrupt(format!("series id of {} bytes", bytes.len())))
}

/// `a u64 | b u64`, big-endian.
pub fn pair_key(a: u64, b: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&a.to_be_bytes());
    k[8..].copy_from_slice(&b.to_be_bytes());
    k
}

/// Splits a [`pair_key`].
///
/// # Errors
/// [`Error::Corrupt`] when `bytes` is not 16 bytes long.
pub fn pair_from(bytes: &[u8]) -> Result<(u64, u64)> {
    if bytes.len() != 16 {
        return Err(Error::Corrupt(format!("pair key of {} bytes", bytes.len())));
    }
    Ok((id_from(&bytes[..8])?, id_from(&bytes[8..])?))
}

/// The [`TREE_CHUNKS`] key of a series' chunk starting at `first_timestamp_ms`.
pub fn chunk_key(series_id: u64, first_timestamp_ms: i64) -> [u8; 16] {
    pair_key(series_id, time_key(first_timestamp_ms))
}

/// The [`TREE_BLOCKS`] key of a chunk.
pub fn block_key(last_timestamp_ms: i64, series_id: u64, first_timestamp_ms: i64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&time_key(last_timestamp_ms).to_be_bytes());
    k[8..16].copy_from_slice(&series_id.to_be_bytes());
    k[16..].copy_from_slice(&time_key(first_timestamp_ms).to_be_bytes());
    k
}

/// Splits a [`block_key`] into `(last timestamp, series id, first timestamp)`.
///
/// # Errors
/// [`Error::Corrupt`] when `bytes` is not 24 bytes long.
pub fn block_from(bytes: &[u8]) -> Result<(i64, u64, i64)> {
    if bytes.len() != 24 {
        return Err(Error::Corrupt(format!(
            "block key of {} bytes",
            bytes.len()
        )));
    }
    Ok((
        time_from_key(id_from(&bytes[..8])?),
        id_from(&bytes[8..16])?,
        time_from_key(id_from(&bytes[16..])?),
    ))
}

/// The [`TREE_POSTINGS`] key of one label pair.
pub fn posting_key(name: &str, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + 1 + value.len());
    k.extend_from_slice(name.as_bytes());
    k.push(0);
    k.extend_from_slice(value.as_bytes());
    k
}

/// Splits a [`posting_key`] into name and value.
///
/// # Errors
/// [`Error::Corrupt`] for bytes `posting_key` cannot have produced.
pub fn posting_from(bytes: &[u8]) -> Result<(&str, &str)> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| Error::Corrupt("posting key is not UTF-8".into()))?;
    text.split_once('\0')
        .ok_or_else(|| Error::Corrupt("posting key without a separator".into()))
}

/// The hash [`TREE_SERIES`] files a label set under.
pub fn labels_hash(canonical: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_keys_sort_like_times() {
        let times = [i64::MIN, -5_000, -1, 0, 1, 15_000, i64::MAX];
        for w in times.windows(2) {
            assert!(time_key(w[0]) < time_key(w[1]));
            assert!(chunk_key(3, w[0]) < chunk_key(3, w[1]));
        }
        for t in times {
            assert_eq!(time_from_key(time_key(t)), t);
        }
    }

    #[test]
    fn keys_split_back() {
        assert_eq!(pair_from(&pair_key(7, 9)).ok(), Some((7, 9)));
        assert_eq!(block_from(&block_key(-3, 4, -9)).ok(), Some((-3, 4, -9)));
        assert_eq!(
            posting_from(&posting_key("job", "a=b")).ok(),
            Some(("job", "a=b"))
        );
        assert!(pair_from(b"short").is_err());
        assert!(block_from(&[0u8; 23]).is_err());
        assert!(posting_from(b"nosep").is_err());
        assert!(id_from(&[1, 2]).is_err());
    }
}
