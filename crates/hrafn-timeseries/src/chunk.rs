//! Temporary raw chunk codec (stand-in until the compressed codec lands).
#![allow(missing_docs)]
use crate::error::{Error, Result};

/// One sample: a timestamp in milliseconds since the Unix epoch and a value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The value.
    pub value: f64,
}

pub const OPEN_CHUNK_BYTES: usize = 256;
pub const CHUNK_SAMPLES_MAX: usize = 120;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub sample_count: u32,
    pub first_timestamp_ms: i64,
    pub last_timestamp_ms: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Append {
    Appended,
    Full,
}

fn bad(w: &str) -> Error {
    Error::Corrupt(w.into())
}

pub fn encode(samples: &[Sample]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(samples.len() as u16).to_le_bytes());
    v.extend_from_slice(&samples[0].timestamp_ms.to_le_bytes());
    v.extend_from_slice(&samples[samples.len() - 1].timestamp_ms.to_le_bytes());
    for s in samples {
        v.extend_from_slice(&s.timestamp_ms.to_le_bytes());
        v.extend_from_slice(&s.value.to_bits().to_le_bytes());
    }
    v
}
pub fn header(bytes: &[u8]) -> Result<ChunkHeader> {
    if bytes.len() < 18 {
        return Err(bad("short"));
    }
    Ok(ChunkHeader {
        sample_count: u16::from_le_bytes([bytes[0], bytes[1]]) as u32,
        first_timestamp_ms: i64::from_le_bytes(bytes[2..10].try_into().map_err(|_| bad("x"))?),
        last_timestamp_ms: i64::from_le_bytes(bytes[10..18].try_into().map_err(|_| bad("x"))?),
    })
}
pub fn decode(bytes: &[u8]) -> Result<Vec<Sample>> {
    let h = header(bytes)?;
    let body = &bytes[18..];
    if body.len() != h.sample_count as usize * 16 {
        return Err(bad("len"));
    }
    Ok(body
        .chunks(16)
        .map(|c| Sample {
            timestamp_ms: i64::from_le_bytes(c[..8].try_into().unwrap_or_default()),
            value: f64::from_bits(u64::from_le_bytes(c[8..].try_into().unwrap_or_default())),
        })
        .collect())
}
pub fn open_empty() -> [u8; OPEN_CHUNK_BYTES] {
    [0; OPEN_CHUNK_BYTES]
}
pub fn open_header(buf: &[u8]) -> Result<Option<ChunkHeader>> {
    if buf.len() != OPEN_CHUNK_BYTES {
        return Err(bad("open len"));
    }
    let h = header(buf)?;
    Ok((h.sample_count > 0).then_some(h))
}
pub fn open_samples(buf: &[u8]) -> Result<Vec<Sample>> {
    match open_header(buf)? {
        None => Ok(vec![]),
        Some(h) => decode(&buf[..18 + h.sample_count as usize * 16]),
    }
}
pub fn open_append(buf: &mut [u8], s: Sample) -> Result<Append> {
    let n = open_header(buf)?.map_or(0, |h| h.sample_count as usize);
    if 18 + (n + 1) * 16 > OPEN_CHUNK_BYTES {
        return Ok(Append::Full);
    }
    if n == 0 {
        buf[2..10].copy_from_slice(&s.timestamp_ms.to_le_bytes());
    }
    buf[0..2].copy_from_slice(&((n + 1) as u16).to_le_bytes());
    buf[10..18].copy_from_slice(&s.timestamp_ms.to_le_bytes());
    let at = 18 + n * 16;
    buf[at..at + 8].copy_from_slice(&s.timestamp_ms.to_le_bytes());
    buf[at + 8..at + 16].copy_from_slice(&s.value.to_bits().to_le_bytes());
    Ok(Append::Appended)
}
pub fn seal(buf: &[u8]) -> Result<Option<Vec<u8>>> {
    Ok(open_header(buf)?.map(|h| buf[..18 + h.sample_count as usize * 16].to_vec()))
}
