//! The packed body of a sealed chunk: frame-of-reference bit packing of the whole chunk.
//!
//! A sealed chunk is immutable, so its encoder sees every sample before it writes a bit and
//! can size its fields for the chunk instead of for one sample at a time, as the appendable
//! stream must. Timestamps are stored as their deltas minus the smallest delta, each in the
//! same width; values, when all of them are on one decimal scale, as the differences of
//! their scaled integers divided by their greatest common divisor (4 KiB pages, whole
//! cents), minus the smallest, again each in one width. A series that mostly holds still
//! spends one flag bit on each unchanged sample instead ("sparse").
//!
//! For a scrape every 15 s with a few milliseconds of jitter, a timestamp costs 4 bits,
//! where the stream's delta-of-delta code takes 6 for most (1 when a delta equals the one
//! before, 11 past ±8 ms); a counter growing by up to 1,500 cents costs 11 bits, where the
//! stream needs 16. [`super::encode`] keeps whichever body is shorter, so irregular chunks
//! (a missed scrape, a counter reset) keep the stream.
//!
//! `docs/timeseries-chunk-format.md` describes the bits.

use super::{BitReader, SCALE_MAX, Sample, corrupt, put_bits, scaled, unscale};
use crate::error::Result;

/// Bits of a width field: 0 ..= 64.
const WIDTH_BITS: u32 = 7;
/// Bits of the decimal scale field.
const SCALE_BITS: u32 = 3;
/// Scaled integers stay within 2^53 in magnitude, where every integer is an exact f64.
const SCALED_MAX: i128 = 1 << 53;

/// Bits needed for `value`: 0 for 0.
fn bit_len(value: u64) -> u32 {
    64 - value.leading_zeros()
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Bit fields, appended most significant bit first.
#[derive(Default)]
struct Writer {
    bytes: Vec<u8>,
    pos_bits: usize,
}

impl Writer {
    fn put(&mut self, value: u64, width_bits: u32) {
        self.bytes
            .resize((self.pos_bits + width_bits as usize).div_ceil(8), 0);
        put_bits(&mut self.bytes, &mut self.pos_bits, value, width_bits);
    }

    /// An unsigned integer of any size: its bit length, then its bits.
    fn put_uint(&mut self, value: u64) {
        let width_bits = bit_len(value);
        self.put(u64::from(width_bits), WIDTH_BITS);
        self.put(value, width_bits);
    }
}

fn read_width(reader: &mut BitReader<'_>) -> Result<u32> {
    let width_bits = reader.read(WIDTH_BITS)? as u32;
    if width_bits > 64 {
        return Err(corrupt(format!("a packed field of {width_bits} bits")));
    }
    Ok(width_bits)
}

fn read_uint(reader: &mut BitReader<'_>) -> Result<u64> {
    let width_bits = read_width(reader)?;
    reader.read(width_bits)
}

/// How the value differences of a chunk are packed.
struct ValueFrame {
    /// Every difference is a multiple of this (at least 1).
    divisor: u64,
    /// Unchanged samples cost a flag bit and no width.
    sparse: bool,
    /// The smallest quotient packed (of the non-zero ones, when sparse).
    base: i64,
    width_bits: u32,
}

impl ValueFrame {
    /// The cheapest frame for the scaled-integer differences `differences`.
    fn choose(differences: &[i64]) -> ValueFrame {
        let divisor = differences
            .iter()
            .fold(0, |g, &d| gcd(g, d.unsigned_abs()))
            .max(1);
        // Quotients of numbers within ±2^54 stay in i64 (the divisor divides them exactly).
        let quotient = |d: i64| d / divisor as i64;
        let span = |qs: &mut dyn Iterator<Item = i64>| {
            let (min, max) = qs.fold((i64::MAX, i64::MIN), |(lo, hi), q| (lo.min(q), hi.max(q)));
            if min > max {
                (0, 0)
            } else {
                (min, bit_len(max.wrapping_sub(min) as u64))
            }
        };
        let (dense_base, dense_width) = span(&mut differences.iter().map(|&d| quotient(d)));
        let (sparse_base, sparse_width) = span(
            &mut differences
                .iter()
                .filter(|&&d| d != 0)
                .map(|&d| quotient(d)),
        );
        let changed = differences.iter().filter(|&&d| d != 0).count();
        let dense_bits = differences.len() * dense_width as usize;
        let sparse_bits = differences.len() + changed * sparse_width as usize;
        if sparse_bits < dense_bits {
            ValueFrame {
                divisor,
                sparse: true,
                base: sparse_base,
                width_bits: sparse_width,
            }
        } else {
            ValueFrame {
                divisor,
                sparse: false,
                base: dense_base,
                width_bits: dense_width,
            }
        }
    }
}

/// The packed body of `samples` (1 or more, timestamps strictly increasing), or `None` when
/// their values are not all on one decimal scale (NaN, −0.0, 1/3, a counter past 2^53).
pub(super) fn encode(samples: &[Sample]) -> Option<Vec<u8>> {
    let (scale, scaled_values) = (0..=SCALE_MAX).find_map(|scale| {
        let values: Option<Vec<i64>> = samples.iter().map(|s| scaled(s.value, scale)).collect();
        values.map(|v| (scale, v))
    })?;
    let mut out = Writer::default();
    out.put(u64::from(scale), SCALE_BITS);
    out.put_uint(zigzag(scaled_values[0]));
    if samples.len() == 1 {
        return Some(out.bytes);
    }

    let deltas: Vec<u64> = samples
        .windows(2)
        .map(|w| w[1].timestamp_ms.wrapping_sub(w[0].timestamp_ms) as u64)
        .collect();
    let delta_base = deltas.iter().copied().min().unwrap_or_default();
    let delta_max = deltas.iter().copied().max().unwrap_or_default();
    let delta_width = bit_len(delta_max - delta_base);
    let differences: Vec<i64> = scaled_values.windows(2).map(|w| w[1] - w[0]).collect();
    let frame = ValueFrame::choose(&differences);

    out.put_uint(delta_base);
    out.put(u64::from(delta_width), WIDTH_BITS);
    out.put_uint(frame.divisor);
    out.put(u64::from(frame.sparse), 1);
    out.put_uint(zigzag(frame.base));
    out.put(u64::from(frame.width_bits), WIDTH_BITS);
    for &delta in &deltas {
        out.put(delta - delta_base, delta_width);
    }
    for &difference in &differences {
        if frame.sparse {
            out.put(u64::from(difference != 0), 1);
            if difference == 0 {
                continue;
            }
        }
        let quotient = difference / frame.divisor as i64;
        out.put(quotient.wrapping_sub(frame.base) as u64, frame.width_bits);
    }
    Some(out.bytes)
}

/// Decodes a packed body of `count` samples (at least 1) whose first and last timestamps the
/// header gives.
///
/// # Errors
/// [`crate::Error::Corrupt`] for bits [`encode`] cannot have written: a field past the end,
/// a width over 64, a divisor of 0, timestamps that do not increase or do not end at
/// `last_timestamp_ms`, a value off the exact range of its scale, or non-zero padding.
pub(super) fn decode(
    body: &[u8],
    count: usize,
    first_timestamp_ms: i64,
    last_timestamp_ms: i64,
) -> Result<Vec<Sample>> {
    let mut reader = BitReader::new(body, body.len() * 8);
    let scale = reader.read(SCALE_BITS)? as u8;
    if scale > SCALE_MAX {
        return Err(corrupt(format!("packed chunk scale {scale}")));
    }
    let in_range = |n: i128| -> Result<i64> {
        if n.abs() > SCALED_MAX {
            return Err(corrupt(format!("a packed value {n} past 2^53")));
        }
        Ok(n as i64)
    };
    let mut scaled_value = in_range(i128::from(unzigzag(read_uint(&mut reader)?)))?;
    // Each sample costs at least a bit when sparse; a count past the body is corrupt
    // before it can reserve memory.
    let mut out = Vec::with_capacity(count.min(body.len() * 8 + 1));
    out.push(Sample {
        timestamp_ms: first_timestamp_ms,
        value: unscale(scaled_value, scale),
    });
    if count > 1 {
        let delta_base = read_uint(&mut reader)?;
        let delta_width = read_width(&mut reader)?;
        let divisor = read_uint(&mut reader)?;
        if divisor == 0 {
            return Err(corrupt("a packed value divisor of 0"));
        }
        let sparse = reader.read(1)? == 1;
        let base = unzigzag(read_uint(&mut reader)?);
        let width_bits = read_width(&mut reader)?;

        let mut timestamp_ms = first_timestamp_ms;
        let mut timestamps = Vec::with_capacity(out.capacity());
        for _ in 1..count {
            let delta = i128::from(delta_base) + i128::from(reader.read(delta_width)?);
            let next = i128::from(timestamp_ms) + delta;
            if delta <= 0 || next > i128::from(i64::MAX) {
                return Err(corrupt(format!(
                    "a packed timestamp delta of {delta} after {timestamp_ms}"
                )));
            }
            timestamp_ms = next as i64;
            timestamps.push(timestamp_ms);
        }
        if timestamp_ms != last_timestamp_ms {
            return Err(corrupt(format!(
                "the last timestamp is {timestamp_ms}, the header says {last_timestamp_ms}"
            )));
        }
        for timestamp_ms in timestamps {
            let changed = !sparse || reader.read(1)? == 1;
            if changed {
                let quotient = i128::from(base) + i128::from(reader.read(width_bits)?);
                let next = quotient
                    .checked_mul(i128::from(divisor))
                    .and_then(|difference| difference.checked_add(i128::from(scaled_value)))
                    .ok_or_else(|| corrupt("a packed value difference past i128"))?;
                scaled_value = in_range(next)?;
            }
            out.push(Sample {
                timestamp_ms,
                value: unscale(scaled_value, scale),
            });
        }
    }
    if reader.remaining_bits() >= 8 || !reader.rest_is_zero() {
        return Err(corrupt(format!(
            "the packed body does not end after its last sample ({} bits left)",
            reader.remaining_bits()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::tests::{exact, s};

    fn round_trip(samples: &[Sample]) -> usize {
        let body = encode(samples).expect("values on one scale");
        let last = samples[samples.len() - 1].timestamp_ms;
        let decoded = decode(&body, samples.len(), samples[0].timestamp_ms, last).expect("decodes");
        assert_eq!(exact(&decoded), exact(samples));
        body.len()
    }

    #[test]
    fn regular_scrapes_of_a_cents_counter_pack_to_their_ranges() {
        // Deltas 14_996 ..= 15_004 (4 bits), differences 0 ..= 1_500 cents (11 bits).
        let mut value = 123_456.78_f64;
        let mut samples = Vec::new();
        for i in 0..480_i64 {
            let jitter = (i * 7) % 5;
            value = ((value * 100.0).round() + ((i * 37) % 1501) as f64).round() / 100.0;
            samples.push(s(1_700_000_000_000 + i * 15_000 + jitter, value));
        }
        let bytes = round_trip(&samples);
        assert!(bytes <= 479 * (4 + 11) / 8 + 24, "{bytes} bytes");
    }

    #[test]
    fn page_sized_steps_divide_by_their_common_divisor() {
        let samples: Vec<Sample> = (0..100_i64)
            .map(|i| {
                s(
                    i * 1_000,
                    8e9 + ((i * 13) % 7 - 3) as f64 * 4096.0 * i as f64,
                )
            })
            .collect();
        round_trip(&samples);
        let steps: Vec<Sample> = (0..100_i64)
            .map(|i| s(i * 1_000, (i % 3) as f64 * 4096.0))
            .collect();
        // Quotients -2 ..= 1: 2 bits each.
        assert!(round_trip(&steps) <= 99 * 2 / 8 + 16);
    }

    #[test]
    fn a_mostly_still_series_is_sparse() {
        let samples: Vec<Sample> = (0..200_i64)
            .map(|i| s(i * 15_000, if i < 190 { 5e10 } else { 5e10 + 4096.0 }))
            .collect();
        // One flag bit per sample, one quotient of width 0.
        assert!(round_trip(&samples) <= 200 / 8 + 16);
    }

    #[test]
    fn extremes_round_trip() {
        round_trip(&[s(i64::MIN, 0.0)]);
        round_trip(&[
            s(i64::MIN, 9_007_199_254_740_992.0),
            s(i64::MAX, -9_007_199_254_740_992.0),
        ]);
        round_trip(&[s(-5, 0.5), s(0, -0.25), s(1, 1e-6)]);
        assert!(encode(&[s(0, 1.0), s(1, f64::NAN)]).is_none());
        assert!(encode(&[s(0, -0.0)]).is_none());
        assert!(encode(&[s(0, 1.0 / 3.0)]).is_none());
    }

    #[test]
    fn corrupt_bodies_are_errors() {
        let samples: Vec<Sample> = (0..50_i64).map(|i| s(i * 10, i as f64)).collect();
        let body = encode(&samples).expect("integers");
        // A count, a last timestamp or trailing bits that do not match.
        assert!(decode(&body, 51, 0, 490).is_err());
        assert!(decode(&body, 50, 0, 491).is_err());
        let mut longer = body.clone();
        longer.push(0);
        assert!(decode(&longer, 50, 0, 490).is_err());
        // Every truncation and every single bit flip decodes to an error or to samples,
        // never a panic.
        for len in 0..body.len() {
            let _ = decode(&body[..len], 50, 0, 490);
        }
        for bit in 0..body.len() * 8 {
            let mut flipped = body.clone();
            flipped[bit / 8] ^= 0x80 >> (bit % 8);
            let _ = decode(&flipped, 50, 0, 490);
        }
    }
}
