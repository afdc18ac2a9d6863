//! Gorilla-compressed sample chunks.
//!
//! A chunk holds the samples of one series in strictly increasing time order, bit-packed as in
//! Facebook's Gorilla paper and Prometheus' XOR chunks: timestamps as delta-of-delta in
//! variable-size buckets, values as the XOR with the previous value. One addition: a value
//! that is an integer, like the previous one, may instead be stored as the (small) integer
//! difference, which costs a counter about a third less than its XOR. A chunk whose first
//! value has a few decimals (12345.67, 1.25) counts in those decimals instead: its values
//! are integers times 10^-k, and the difference is taken between those integers, where the
//! XOR of such values would cost 40 bits or more.
//!
//! Two forms share one bit stream:
//! - a *sealed* chunk ([`encode`], [`header`], [`decode`], [`iter`]) is immutable and compact;
//! - an *open* chunk ([`open_empty`], [`open_append`], [`open_samples`], [`seal`]) is a value
//!   of exactly [`OPEN_CHUNK_BYTES`] that takes appends in place. Its header keeps the
//!   encoder's state, so an append does not decode anything and changes only the header and
//!   the bytes its new bits land in. [`seal`] copies its bit stream into a sealed chunk.
//!
//! `docs/timeseries-chunk-format.md` describes the bytes.

mod packed;

use crate::error::{Error, Result};
use std::iter::FusedIterator;

/// One sample: a timestamp in milliseconds since the Unix epoch and a value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The value.
    pub value: f64,
}

/// The size of an open chunk value in bytes.
pub const OPEN_CHUNK_BYTES: usize = 256;

/// An open chunk holds at most this many samples; the store seals it then.
pub const CHUNK_SAMPLES_MAX: usize = 120;

/// The header fields both forms share: sample count (u16), first and last timestamp (i64),
/// little-endian.
const SHARED_HEADER_BYTES: usize = 18;
/// Sealed header: the shared fields, then the body's codec (u8).
const SEALED_HEADER_BYTES: usize = 19;
/// Open header: the shared fields, then the encoder state.
const OPEN_HEADER_BYTES: usize = 39;
const OPEN_STREAM_BITS: usize = (OPEN_CHUNK_BYTES - OPEN_HEADER_BYTES) * 8;

// Header field offsets; the first three are shared by both forms.
const COUNT_AT: usize = 0;
const FIRST_TIMESTAMP_AT: usize = 2;
const LAST_TIMESTAMP_AT: usize = 10;
const CODEC_AT: usize = 18;
const STREAM_BITS_AT: usize = 18;
const DELTA_AT: usize = 20;
const VALUE_AT: usize = 28;
const LEADING_AT: usize = 36;
const TRAILING_AT: usize = 37;
const SCALE_AT: usize = 38;

/// Sealed body codecs: the appendable bit stream, or [`packed`] fields sized for the chunk.
const CODEC_STREAM: u8 = 0;
const CODEC_PACKED: u8 = 1;

/// Payload widths of the non-zero delta-of-delta buckets (symbols 1..=5; symbol 0 is zero).
const DOD_WIDTHS: [u32; 5] = [4, 8, 16, 32, 64];
/// Payload widths of the integer-difference buckets (symbols 0..=3).
const INT_WIDTHS: [u32; 4] = [5, 12, 24, 32];

// Value symbols, in prefix code order.
const VALUE_SAME: usize = 0;
const VALUE_INT: usize = 1;
const VALUE_XOR_REUSE: usize = 2;
const VALUE_SYMBOLS: usize = 4;

/// Integers up to 2^53 in magnitude are exact in an f64.
const EXACT_INT_MAX: f64 = 9_007_199_254_740_992.0;

/// 10^k for the decimal scales k; each is exact in an f64. Scaled values are decoded by
/// dividing by these (never multiplying by 0.01, which is not exact), the same operation
/// the encoder checks.
const POW10: [f64; 7] = [1.0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6];
const SCALE_MAX: u8 = POW10.len() as u8 - 1;

/// What [`header`] and [`open_header`] tell without decoding the bit stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Number of samples in the chunk (at least 1).
    pub sample_count: u32,
    /// Timestamp of the first sample.
    pub first_timestamp_ms: i64,
    /// Timestamp of the last sample.
    pub last_timestamp_ms: i64,
}

/// The outcome of [`open_append`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Append {
    /// The sample is in the chunk.
    Appended,
    /// The chunk cannot take the sample (it holds [`CHUNK_SAMPLES_MAX`] samples, or the
    /// sample's bits would not fit); the buffer is unchanged.
    Full,
}

fn corrupt(why: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("chunk: {why}"))
}

/// The bits of the previous value's XOR that carried information: the window a later XOR
/// may reuse without restating it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    leading: u32,
    trailing: u32,
}

/// The encoder's state after some samples, which is also the decoder's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct State {
    count: usize,
    first_timestamp_ms: i64,
    last_timestamp_ms: i64,
    /// Last timestamp minus the one before, wrapping (a span may exceed `i64::MAX`).
    delta_ms: i64,
    value_bits: u64,
    window: Option<Window>,
    /// The decimal scale k, chosen by the first value (see [`choose_scale`]).
    scale: u8,
}

/// The bits one sample adds to a stream, as `(value, width)` fields.
struct SampleBits {
    fields: [(u64, u32); 6],
    len: usize,
    total_bits: usize,
}

impl SampleBits {
    fn new() -> SampleBits {
        SampleBits {
            fields: [(0, 0); 6],
            len: 0,
            total_bits: 0,
        }
    }

    fn push(&mut self, value: u64, width_bits: u32) {
        self.fields[self.len] = (value, width_bits);
        self.len += 1;
        self.total_bits += width_bits as usize;
    }

    /// Symbol `symbol` of a prefix code of `symbols` symbols: that many one bits, then a
    /// zero bit unless it is the last symbol.
    fn push_symbol(&mut self, symbol: usize, symbols: usize) {
        let ones = (1u64 << symbol) - 1;
        let width_bits = symbol_bits(symbol, symbols);
        self.push(ones << (width_bits - symbol as u32), width_bits);
    }

    fn write(&self, stream: &mut [u8], pos_bits: &mut usize) {
        for &(value, width_bits) in &self.fields[..self.len] {
            put_bits(stream, pos_bits, value, width_bits);
        }
    }
}

fn symbol_bits(symbol: usize, symbols: usize) -> u32 {
    if symbol + 1 < symbols {
        symbol as u32 + 1
    } else {
        symbol as u32
    }
}

fn low_mask(width_bits: u32) -> u64 {
    if width_bits >= 64 {
        u64::MAX
    } else {
        (1 << width_bits) - 1
    }
}

fn fits_signed(value: i64, width_bits: u32) -> bool {
    width_bits >= 64 || (-(1i64 << (width_bits - 1))..(1i64 << (width_bits - 1))).contains(&value)
}

fn sign_extend(raw: u64, width_bits: u32) -> i64 {
    if width_bits >= 64 {
        raw as i64
    } else {
        let shift = 64 - width_bits;
        ((raw << shift) as i64) >> shift
    }
}

/// Writes the low `width_bits` bits of `value`, most significant first, at `pos_bits`,
/// replacing what was there. The caller has made room.
fn put_bits(stream: &mut [u8], pos_bits: &mut usize, value: u64, width_bits: u32) {
    let mut left = width_bits;
    while left > 0 {
        let free = 8 - (*pos_bits % 8) as u32;
        let take = free.min(left);
        let shift = free - take;
        let mask = (low_mask(take) as u8) << shift;
        let chunk = ((value >> (left - take)) & low_mask(take)) as u8;
        let byte = &mut stream[*pos_bits / 8];
        *byte = (*byte & !mask) | (chunk << shift);
        *pos_bits += take as usize;
        left -= take;
    }
}

/// Reads a bit stream most significant bit first, never past `limit_bits`.
struct BitReader<'a> {
    stream: &'a [u8],
    pos_bits: usize,
    limit_bits: usize,
}

impl<'a> BitReader<'a> {
    fn new(stream: &'a [u8], limit_bits: usize) -> BitReader<'a> {
        BitReader {
            stream,
            pos_bits: 0,
            limit_bits: limit_bits.min(stream.len() * 8),
        }
    }

    fn read(&mut self, width_bits: u32) -> Result<u64> {
        if width_bits as usize > self.limit_bits - self.pos_bits {
            return Err(corrupt("the bit stream ends inside a sample"));
        }
        let mut value = 0u64;
        let mut left = width_bits;
        while left > 0 {
            let byte = self
                .stream
                .get(self.pos_bits / 8)
                .copied()
                .unwrap_or_default();
            let avail = 8 - (self.pos_bits % 8) as u32;
            let take = avail.min(left);
            let chunk = (u64::from(byte) >> (avail - take)) & low_mask(take);
            value = (value << take) | chunk;
            self.pos_bits += take as usize;
            left -= take;
        }
        Ok(value)
    }

    /// The inverse of [`SampleBits::push_symbol`].
    fn read_symbol(&mut self, symbols: usize) -> Result<usize> {
        let mut symbol = 0;
        while symbol + 1 < symbols && self.read(1)? == 1 {
            symbol += 1;
        }
        Ok(symbol)
    }

    fn remaining_bits(&self) -> usize {
        self.limit_bits - self.pos_bits
    }

    /// Whether every bit after the read position, to the end of the stream, is zero.
    fn rest_is_zero(&self) -> bool {
        // The bits of the current byte not yet read, then the whole bytes after it.
        let unread_in_byte = (8 - self.pos_bits % 8) as u32 % 8;
        let partial = self
            .stream
            .get(self.pos_bits / 8)
            .copied()
            .unwrap_or_default();
        let whole_from = self.pos_bits.div_ceil(8).min(self.stream.len());
        u64::from(partial) & low_mask(unread_in_byte) == 0
            && self.stream[whole_from..].iter().all(|&b| b == 0)
    }
}

impl std::fmt::Debug for BitReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BitReader")
            .field("pos_bits", &self.pos_bits)
            .field("limit_bits", &self.limit_bits)
            .finish_non_exhaustive()
    }
}

/// The value of the scaled integer `n` at scale `scale`. The encoder checks its values with
/// this very function, so a decoder that uses it gets them back bit for bit.
fn unscale(n: i64, scale: u8) -> f64 {
    n as f64 / POW10[usize::from(scale)]
}

/// The integer `n` with `unscale(n, scale) == value` bit for bit, if `value` is one.
fn scaled(value: f64, scale: u8) -> Option<i64> {
    let x = value * POW10[usize::from(scale)];
    // Past 2^53 the integers are not all exact, and `as` would saturate.
    if !x.is_finite() || x.abs() > EXACT_INT_MAX {
        return None;
    }
    let n = x.round() as i64;
    (unscale(n, scale).to_bits() == value.to_bits()).then_some(n)
}

/// The chunk's scale: the fewest decimals that hold its first value exactly, 0 (no scaling)
/// when no scale up to [`SCALE_MAX`] does. Later values are not looked at, so that an open
/// chunk can fix it at its first append.
fn choose_scale(first_value: f64) -> u8 {
    (0..=SCALE_MAX)
        .find(|&scale| scaled(first_value, scale).is_some())
        .unwrap_or(0)
}

/// What an integer-difference code means: the value `difference` steps of 10^-scale after
/// `previous`. `None` where the encoder cannot have written the code.
fn add_difference(previous: f64, difference: i64, scale: u8) -> Option<f64> {
    if scale == 0 {
        // Unscaled, the sum is taken in f64, which keeps -0.0 + 1 and the like as they were.
        return Some(previous + difference as f64);
    }
    let n = scaled(previous, scale)?.checked_add(difference)?;
    (n.unsigned_abs() <= 1 << 53).then(|| unscale(n, scale))
}

/// The integer difference that [`add_difference`] turns back into `value` bit for bit.
fn int_difference(previous: f64, value: f64, scale: u8) -> Option<i64> {
    let difference = if scale == 0 {
        let exact_int = |x: f64| x.is_finite() && x.trunc() == x && x.abs() <= EXACT_INT_MAX;
        if !exact_int(previous) || !exact_int(value) {
            return None;
        }
        value as i64 - previous as i64
    } else {
        scaled(value, scale)? - scaled(previous, scale)?
    };
    // A sum can still lose the sign of a zero; check with the decoder's own arithmetic.
    let decoded = add_difference(previous, difference, scale)?;
    (decoded.to_bits() == value.to_bits()).then_some(difference)
}

/// Encodes `sample` after `state`: the bits to append and the state after them.
fn encode_next(state: &State, sample: Sample) -> (SampleBits, State) {
    let mut bits = SampleBits::new();
    let value_bits = sample.value.to_bits();
    if state.count == 0 {
        bits.push(value_bits, 64);
        let next = State {
            count: 1,
            first_timestamp_ms: sample.timestamp_ms,
            last_timestamp_ms: sample.timestamp_ms,
            delta_ms: 0,
            value_bits,
            window: None,
            scale: choose_scale(sample.value),
        };
        return (bits, next);
    }

    let delta_ms = sample.timestamp_ms.wrapping_sub(state.last_timestamp_ms);
    let dod_ms = delta_ms.wrapping_sub(state.delta_ms);
    if dod_ms == 0 {
        bits.push_symbol(0, DOD_WIDTHS.len() + 1);
    } else {
        let bucket = DOD_WIDTHS
            .iter()
            .position(|&w| fits_signed(dod_ms, w))
            .unwrap_or_default();
        let width_bits = DOD_WIDTHS[bucket];
        bits.push_symbol(bucket + 1, DOD_WIDTHS.len() + 1);
        bits.push(dod_ms as u64 & low_mask(width_bits), width_bits);
    }

    let window = encode_value(&mut bits, state, sample.value);
    let next = State {
        count: state.count + 1,
        first_timestamp_ms: state.first_timestamp_ms,
        last_timestamp_ms: sample.timestamp_ms,
        delta_ms,
        value_bits,
        window,
        scale: state.scale,
    };
    (bits, next)
}

/// Pushes the cheapest code for `value` after `state`'s value; returns the XOR window after it.
fn encode_value(bits: &mut SampleBits, state: &State, value: f64) -> Option<Window> {
    let xor = value.to_bits() ^ state.value_bits;
    if xor == 0 {
        bits.push_symbol(VALUE_SAME, VALUE_SYMBOLS);
        return state.window;
    }
    // The leading count has a 5-bit field.
    let leading = xor.leading_zeros().min(31);
    let trailing = xor.trailing_zeros();
    let reuse = state
        .window
        .filter(|w| leading >= w.leading && trailing >= w.trailing);
    let xor_cost_bits = match reuse {
        Some(w) => 3 + 64 - w.leading - w.trailing,
        None => 3 + 5 + 6 + 64 - leading - trailing,
    };

    let previous = f64::from_bits(state.value_bits);
    let int = int_difference(previous, value, state.scale).and_then(|difference| {
        let bucket = INT_WIDTHS
            .iter()
            .position(|&w| fits_signed(difference, w))?;
        Some((difference, bucket))
    });
    if let Some((difference, bucket)) = int {
        let width_bits = INT_WIDTHS[bucket];
        let int_cost_bits = 2 + symbol_bits(bucket, INT_WIDTHS.len()) + width_bits;
        if int_cost_bits <= xor_cost_bits {
            bits.push_symbol(VALUE_INT, VALUE_SYMBOLS);
            bits.push_symbol(bucket, INT_WIDTHS.len());
            bits.push(difference as u64 & low_mask(width_bits), width_bits);
            return state.window;
        }
    }

    match reuse {
        Some(w) => {
            bits.push_symbol(VALUE_XOR_REUSE, VALUE_SYMBOLS);
            bits.push(xor >> w.trailing, 64 - w.leading - w.trailing);
            state.window
        }
        None => {
            let significant_bits = 64 - leading - trailing;
            bits.push_symbol(VALUE_SYMBOLS - 1, VALUE_SYMBOLS);
            bits.push(u64::from(leading), 5);
            // 64 significant bits do not fit 6 bits; 0 stands for them (0 never occurs).
            bits.push(u64::from(significant_bits & 63), 6);
            bits.push(xor >> trailing, significant_bits);
            Some(Window { leading, trailing })
        }
    }
}

/// Decodes the sample after `state` (the first one takes `first_timestamp_ms`).
fn decode_next(
    state: &State,
    reader: &mut BitReader<'_>,
    first_timestamp_ms: i64,
) -> Result<(Sample, State)> {
    if state.count == 0 {
        let value_bits = reader.read(64)?;
        let next = State {
            count: 1,
            first_timestamp_ms,
            last_timestamp_ms: first_timestamp_ms,
            delta_ms: 0,
            value_bits,
            window: None,
            scale: choose_scale(f64::from_bits(value_bits)),
        };
        let sample = Sample {
            timestamp_ms: first_timestamp_ms,
            value: f64::from_bits(value_bits),
        };
        return Ok((sample, next));
    }

    let dod_ms = match reader.read_symbol(DOD_WIDTHS.len() + 1)? {
        0 => 0,
        symbol => {
            let width_bits = DOD_WIDTHS[symbol - 1];
            sign_extend(reader.read(width_bits)?, width_bits)
        }
    };
    let delta_ms = state.delta_ms.wrapping_add(dod_ms);
    let timestamp_ms = state.last_timestamp_ms.wrapping_add(delta_ms);
    if timestamp_ms <= state.last_timestamp_ms {
        return Err(corrupt(format!(
            "timestamp {timestamp_ms} after {} is not increasing",
            state.last_timestamp_ms
        )));
    }

    let (value_bits, window) = match reader.read_symbol(VALUE_SYMBOLS)? {
        VALUE_SAME => (state.value_bits, state.window),
        VALUE_INT => {
            let width_bits = INT_WIDTHS[reader.read_symbol(INT_WIDTHS.len())?];
            let difference = sign_extend(reader.read(width_bits)?, width_bits);
            let previous = f64::from_bits(state.value_bits);
            let value = add_difference(previous, difference, state.scale).ok_or_else(|| {
                corrupt(format!(
                    "an integer difference at scale {} after {previous}, which is off that scale",
                    state.scale
                ))
            })?;
            (value.to_bits(), state.window)
        }
        VALUE_XOR_REUSE => {
            let w = state
                .window
                .ok_or_else(|| corrupt("an XOR reuses a window never set"))?;
            let xor = reader.read(64 - w.leading - w.trailing)? << w.trailing;
            (state.value_bits ^ xor, state.window)
        }
        _ => {
            let leading = reader.read(5)? as u32;
            let significant_bits = match reader.read(6)? as u32 {
                0 => 64,
                n => n,
            };
            if leading + significant_bits > 64 {
                return Err(corrupt(format!(
                    "an XOR of {significant_bits} bits after {leading} leading zeros"
                )));
            }
            let trailing = 64 - leading - significant_bits;
            let xor = reader.read(significant_bits)? << trailing;
            (state.value_bits ^ xor, Some(Window { leading, trailing }))
        }
    };

    let next = State {
        count: state.count + 1,
        first_timestamp_ms: state.first_timestamp_ms,
        last_timestamp_ms: timestamp_ms,
        delta_ms,
        value_bits,
        window,
        scale: state.scale,
    };
    Ok((
        Sample {
            timestamp_ms,
            value: f64::from_bits(value_bits),
        },
        next,
    ))
}

fn le_u16(bytes: &[u8], at: usize) -> u16 {
    let mut raw = [0; 2];
    raw.copy_from_slice(&bytes[at..at + 2]);
    u16::from_le_bytes(raw)
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut raw = [0; 8];
    raw.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(raw)
}

fn le_i64(bytes: &[u8], at: usize) -> i64 {
    le_u64(bytes, at) as i64
}

/// The fewest stream bits that can hold `count` samples.
fn min_stream_bits(count: usize) -> usize {
    if count == 0 { 0 } else { 64 + 2 * (count - 1) }
}

/// Checks the shared header fields: a count of at least one and a matching time span.
fn check_span(count: usize, first_timestamp_ms: i64, last_timestamp_ms: i64) -> Result<()> {
    let ok = match count {
        0 => false,
        1 => first_timestamp_ms == last_timestamp_ms,
        _ => first_timestamp_ms < last_timestamp_ms,
    };
    if ok {
        Ok(())
    } else {
        Err(corrupt(format!(
            "{count} samples from {first_timestamp_ms} to {last_timestamp_ms}"
        )))
    }
}

/// Encodes samples as a sealed chunk: its body is the appendable stream (what [`seal`]
/// writes) or, when that is shorter, the packed form sized for the whole chunk. Both are
/// encoded to compare them; compaction calls this, the append path does not.
///
/// # Panics
/// Unless there are 1 to `u16::MAX` samples with strictly increasing timestamps; the caller
/// guarantees both.
pub fn encode(samples: &[Sample]) -> Vec<u8> {
    assert!(
        !samples.is_empty() && samples.len() <= usize::from(u16::MAX),
        "a chunk holds 1 to {} samples, not {}",
        u16::MAX,
        samples.len()
    );
    assert!(
        samples
            .windows(2)
            .all(|w| w[0].timestamp_ms < w[1].timestamp_ms),
        "chunk timestamps must increase strictly"
    );
    let mut out = encode_stream(samples);
    // The chunk is whole now: packing it for its own ranges is often shorter.
    if let Some(body) = packed::encode(samples)
        && SEALED_HEADER_BYTES + body.len() < out.len()
    {
        out.truncate(SEALED_HEADER_BYTES);
        out[CODEC_AT] = CODEC_PACKED;
        out.extend_from_slice(&body);
    }
    out
}

/// The sealed chunk of `samples` with the stream body, as [`seal`] makes it.
fn encode_stream(samples: &[Sample]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SEALED_HEADER_BYTES + 8 + samples.len() * 2);
    out.resize(SEALED_HEADER_BYTES, 0);
    out[CODEC_AT] = CODEC_STREAM;
    let mut state = State::default();
    let mut pos_bits = 0;
    for &sample in samples {
        let (bits, next) = encode_next(&state, sample);
        out.resize(
            SEALED_HEADER_BYTES + (pos_bits + bits.total_bits).div_ceil(8),
            0,
        );
        bits.write(&mut out[SEALED_HEADER_BYTES..], &mut pos_bits);
        state = next;
    }
    out[COUNT_AT..COUNT_AT + 2].copy_from_slice(&(samples.len() as u16).to_le_bytes());
    out[FIRST_TIMESTAMP_AT..FIRST_TIMESTAMP_AT + 8]
        .copy_from_slice(&state.first_timestamp_ms.to_le_bytes());
    out[LAST_TIMESTAMP_AT..LAST_TIMESTAMP_AT + 8]
        .copy_from_slice(&state.last_timestamp_ms.to_le_bytes());
    out
}

/// Reads a sealed chunk's header: its sample count and time span, in O(1).
///
/// # Errors
/// [`Error::Corrupt`] for a chunk too short for its count or with an impossible span. The bit
/// stream is not checked; [`decode`] and [`iter`] do that.
pub fn header(bytes: &[u8]) -> Result<ChunkHeader> {
    if bytes.len() < SEALED_HEADER_BYTES {
        return Err(corrupt(format!("a sealed chunk of {} bytes", bytes.len())));
    }
    let count = usize::from(le_u16(bytes, COUNT_AT));
    let first_timestamp_ms = le_i64(bytes, FIRST_TIMESTAMP_AT);
    let last_timestamp_ms = le_i64(bytes, LAST_TIMESTAMP_AT);
    check_span(count, first_timestamp_ms, last_timestamp_ms)?;
    let stream_bits = (bytes.len() - SEALED_HEADER_BYTES) * 8;
    match bytes[CODEC_AT] {
        CODEC_STREAM if stream_bits < min_stream_bits(count) => {
            return Err(corrupt(format!("{count} samples in {stream_bits} bits")));
        }
        CODEC_STREAM | CODEC_PACKED => {}
        codec => return Err(corrupt(format!("sealed chunk codec {codec}"))),
    }
    Ok(ChunkHeader {
        sample_count: count as u32,
        first_timestamp_ms,
        last_timestamp_ms,
    })
}

/// Decodes a sealed chunk.
///
/// # Errors
/// [`Error::Corrupt`] for bytes [`encode`] cannot have produced, as [`iter`] finds them.
pub fn decode(bytes: &[u8]) -> Result<Vec<Sample>> {
    let mut samples = iter(bytes)?;
    match samples.unpacked.take() {
        Some(unpacked) => Ok(unpacked.collect()),
        None => collect(samples),
    }
}

fn collect(samples: ChunkIter<'_>) -> Result<Vec<Sample>> {
    // A corrupt count must not reserve much memory: the open chunk's limit is a typical size.
    let mut out = Vec::with_capacity(samples.count.min(CHUNK_SAMPLES_MAX));
    for sample in samples {
        out.push(sample?);
    }
    Ok(out)
}

/// Iterates over a sealed chunk's samples, checking the chunk as it goes.
///
/// # Errors
/// [`Error::Corrupt`] from the header, as [`header`]; the iterator yields a corrupt bit stream
/// as an error in place of the sample where it is found, then ends.
pub fn iter(bytes: &[u8]) -> Result<ChunkIter<'_>> {
    let h = header(bytes)?;
    let body = &bytes[SEALED_HEADER_BYTES..];
    let count = h.sample_count as usize;
    let (stream, unpacked) = if bytes[CODEC_AT] == CODEC_PACKED {
        let samples = packed::decode(body, count, h.first_timestamp_ms, h.last_timestamp_ms)?;
        (&[][..], Some(samples.into_iter()))
    } else {
        (body, None)
    };
    Ok(ChunkIter {
        reader: BitReader::new(stream, stream.len() * 8),
        state: State::default(),
        count,
        first_timestamp_ms: h.first_timestamp_ms,
        last_timestamp_ms: h.last_timestamp_ms,
        end: End::Sealed,
        failed: false,
        unpacked,
    })
}

/// What the stream must look like after its last sample.
#[derive(Debug)]
enum End {
    /// Fewer than 8 bits left, all zero.
    Sealed,
    /// No bit left before the header's length, zeros after, and the header's encoder state.
    Open(State),
}

/// The samples of a chunk, from [`iter`]. Each item is a sample, or the error that ends the
/// iteration: a bit stream that ends early or holds a sample out of order, a last timestamp
/// that is not the header's, or bits beyond the last sample.
#[derive(Debug)]
pub struct ChunkIter<'a> {
    reader: BitReader<'a>,
    state: State,
    count: usize,
    first_timestamp_ms: i64,
    last_timestamp_ms: i64,
    end: End,
    failed: bool,
    /// A packed chunk's samples, decoded and checked whole by [`iter`].
    unpacked: Option<std::vec::IntoIter<Sample>>,
}

impl ChunkIter<'_> {
    fn step(&mut self) -> Result<Sample> {
        let (sample, next) = decode_next(&self.state, &mut self.reader, self.first_timestamp_ms)?;
        self.state = next;
        if next.count == self.count {
            self.check_end()?;
        }
        Ok(sample)
    }

    fn check_end(&self) -> Result<()> {
        if self.state.last_timestamp_ms != self.last_timestamp_ms {
            return Err(corrupt(format!(
                "the last timestamp is {}, the header says {}",
                self.state.last_timestamp_ms, self.last_timestamp_ms
            )));
        }
        if let End::Open(expected) = &self.end
            && self.state != *expected
        {
            return Err(corrupt(
                "the open chunk's header does not match its samples",
            ));
        }
        let left_bits = self.reader.remaining_bits();
        let ends = match &self.end {
            End::Sealed => left_bits < 8,
            End::Open(_) => left_bits == 0,
        };
        if ends && self.reader.rest_is_zero() {
            Ok(())
        } else {
            Err(corrupt(format!(
                "the stream does not end after its last sample ({left_bits} bits left)"
            )))
        }
    }
}

impl Iterator for ChunkIter<'_> {
    type Item = Result<Sample>;

    fn next(&mut self) -> Option<Result<Sample>> {
        if let Some(samples) = &mut self.unpacked {
            return samples.next().map(Ok);
        }
        if self.failed || self.state.count >= self.count {
            return None;
        }
        let item = self.step();
        self.failed = item.is_err();
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if let Some(samples) = &self.unpacked {
            return samples.size_hint();
        }
        let left = if self.failed {
            0
        } else {
            self.count - self.state.count
        };
        (0, Some(left))
    }
}

impl FusedIterator for ChunkIter<'_> {}

/// An empty open chunk: all zero bytes.
pub fn open_empty() -> [u8; OPEN_CHUNK_BYTES] {
    [0; OPEN_CHUNK_BYTES]
}

/// Reads an open chunk's header: the encoder state and the stream length in bits. O(1): the
/// checks are those that need no decoding.
fn open_state(buf: &[u8]) -> Result<(State, usize)> {
    if buf.len() != OPEN_CHUNK_BYTES {
        return Err(corrupt(format!("an open chunk of {} bytes", buf.len())));
    }
    let count = usize::from(le_u16(buf, COUNT_AT));
    let stream_bits = usize::from(le_u16(buf, STREAM_BITS_AT));
    let leading = buf[LEADING_AT];
    let trailing = u32::from(buf[TRAILING_AT]);
    let scale = buf[SCALE_AT];
    if scale > SCALE_MAX {
        return Err(corrupt(format!("open chunk scale {scale}")));
    }
    let window = match leading {
        0 if trailing == 0 => None,
        1..=32 if u32::from(leading) - 1 + trailing < 64 => Some(Window {
            leading: u32::from(leading) - 1,
            trailing,
        }),
        _ => {
            return Err(corrupt(format!(
                "open chunk XOR window {leading}/{trailing}"
            )));
        }
    };
    let state = State {
        count,
        first_timestamp_ms: le_i64(buf, FIRST_TIMESTAMP_AT),
        last_timestamp_ms: le_i64(buf, LAST_TIMESTAMP_AT),
        delta_ms: le_i64(buf, DELTA_AT),
        value_bits: le_u64(buf, VALUE_AT),
        window,
        scale,
    };
    if count == 0 {
        if buf[..OPEN_HEADER_BYTES].iter().any(|&b| b != 0) {
            return Err(corrupt("an empty open chunk with a header"));
        }
        return Ok((state, 0));
    }
    check_span(count, state.first_timestamp_ms, state.last_timestamp_ms)?;
    let ok = count <= CHUNK_SAMPLES_MAX
        && stream_bits <= OPEN_STREAM_BITS
        && stream_bits >= min_stream_bits(count)
        && (count > 1 || (stream_bits == 64 && state.delta_ms == 0 && window.is_none()));
    if !ok {
        return Err(corrupt(format!(
            "an open chunk of {count} samples in {stream_bits} bits"
        )));
    }
    Ok((state, stream_bits))
}

fn write_open_header(buf: &mut [u8], state: &State, stream_bits: usize) {
    buf[COUNT_AT..COUNT_AT + 2].copy_from_slice(&(state.count as u16).to_le_bytes());
    buf[FIRST_TIMESTAMP_AT..FIRST_TIMESTAMP_AT + 8]
        .copy_from_slice(&state.first_timestamp_ms.to_le_bytes());
    buf[LAST_TIMESTAMP_AT..LAST_TIMESTAMP_AT + 8]
        .copy_from_slice(&state.last_timestamp_ms.to_le_bytes());
    buf[STREAM_BITS_AT..STREAM_BITS_AT + 2].copy_from_slice(&(stream_bits as u16).to_le_bytes());
    buf[DELTA_AT..DELTA_AT + 8].copy_from_slice(&state.delta_ms.to_le_bytes());
    buf[VALUE_AT..VALUE_AT + 8].copy_from_slice(&state.value_bits.to_le_bytes());
    let (leading, trailing) = match state.window {
        Some(w) => (w.leading as u8 + 1, w.trailing as u8),
        None => (0, 0),
    };
    buf[LEADING_AT] = leading;
    buf[TRAILING_AT] = trailing;
    buf[SCALE_AT] = state.scale;
}

/// Appends a sample to an open chunk in place, in O(1): only the header and the bytes the
/// sample's bits land in change.
///
/// # Errors
/// [`Error::Corrupt`] for a buffer that is not [`OPEN_CHUNK_BYTES`] long or whose header is
/// inconsistent. Only the header is checked; [`open_samples`] and [`seal`] check the rest.
///
/// # Panics
/// If the chunk is not empty and `sample.timestamp_ms` is not after its last timestamp; the
/// caller guarantees the order.
pub fn open_append(buf: &mut [u8], sample: Sample) -> Result<Append> {
    let (state, stream_bits) = open_state(buf)?;
    if state.count >= CHUNK_SAMPLES_MAX {
        return Ok(Append::Full);
    }
    assert!(
        state.count == 0 || sample.timestamp_ms > state.last_timestamp_ms,
        "appended timestamp {} is not after the chunk's last {}",
        sample.timestamp_ms,
        state.last_timestamp_ms
    );
    let (bits, next) = encode_next(&state, sample);
    if stream_bits + bits.total_bits > OPEN_STREAM_BITS {
        return Ok(Append::Full);
    }
    if state.count == 0 {
        // A fresh start whatever stray bytes the empty chunk held.
        buf.fill(0);
    }
    let mut pos_bits = stream_bits;
    bits.write(&mut buf[OPEN_HEADER_BYTES..], &mut pos_bits);
    write_open_header(buf, &next, pos_bits);
    Ok(Append::Appended)
}

/// Reads an open chunk's header: `None` when it holds no sample.
///
/// # Errors
/// [`Error::Corrupt`] as [`open_append`].
pub fn open_header(buf: &[u8]) -> Result<Option<ChunkHeader>> {
    let (state, _) = open_state(buf)?;
    Ok((state.count > 0).then_some(ChunkHeader {
        sample_count: state.count as u32,
        first_timestamp_ms: state.first_timestamp_ms,
        last_timestamp_ms: state.last_timestamp_ms,
    }))
}

/// A checking iterator over an open chunk's samples.
fn open_iter(buf: &[u8]) -> Result<ChunkIter<'_>> {
    let (state, stream_bits) = open_state(buf)?;
    let stream = &buf[OPEN_HEADER_BYTES..];
    if state.count == 0 && stream.iter().any(|&b| b != 0) {
        return Err(corrupt("an empty open chunk with bits"));
    }
    Ok(ChunkIter {
        reader: BitReader::new(stream, stream_bits),
        state: State::default(),
        count: state.count,
        first_timestamp_ms: state.first_timestamp_ms,
        last_timestamp_ms: state.last_timestamp_ms,
        end: End::Open(state),
        failed: false,
        unpacked: None,
    })
}

/// Decodes an open chunk's samples.
///
/// # Errors
/// [`Error::Corrupt`] for bytes [`open_append`] cannot have produced: a header that does not
/// match the bit stream, a bad stream, or non-zero bytes after it.
pub fn open_samples(buf: &[u8]) -> Result<Vec<Sample>> {
    collect(open_iter(buf)?)
}

/// The sealed chunk of an open chunk's samples, `None` when it holds none. The bit stream is
/// copied, not re-encoded, so sealing stays cheap on the append path; the result is
/// [`encode`]'s stream form of [`open_samples`], byte for byte, which [`encode`] returns
/// unless the packed form is shorter (compaction re-encodes).
///
/// # Errors
/// [`Error::Corrupt`] as [`open_samples`]: the chunk is checked before it is copied.
pub fn seal(buf: &[u8]) -> Result<Option<Vec<u8>>> {
    let samples = open_iter(buf)?;
    let count = samples.count;
    for sample in samples {
        sample?;
    }
    if count == 0 {
        return Ok(None);
    }
    let stream_bits = usize::from(le_u16(buf, STREAM_BITS_AT));
    let stream_bytes = stream_bits.div_ceil(8);
    let mut out = Vec::with_capacity(SEALED_HEADER_BYTES + stream_bytes);
    out.extend_from_slice(&buf[..SHARED_HEADER_BYTES]);
    out.push(CODEC_STREAM);
    out.extend_from_slice(&buf[OPEN_HEADER_BYTES..OPEN_HEADER_BYTES + stream_bytes]);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(super) fn s(timestamp_ms: i64, value: f64) -> Sample {
        Sample {
            timestamp_ms,
            value,
        }
    }

    /// Timestamps and value bits, so that NaN payloads and signed zeros compare exactly.
    pub(super) fn exact(samples: &[Sample]) -> Vec<(i64, u64)> {
        samples
            .iter()
            .map(|s| (s.timestamp_ms, s.value.to_bits()))
            .collect()
    }

    /// Appends `samples` to an empty open chunk until it is full; returns it and how many
    /// samples went in.
    fn fill_open(samples: &[Sample]) -> ([u8; OPEN_CHUNK_BYTES], usize) {
        let mut buf = open_empty();
        for (i, &sample) in samples.iter().enumerate() {
            let before = buf;
            match open_append(&mut buf, sample).expect("a valid open chunk") {
                Append::Appended => {}
                Append::Full => {
                    assert_eq!(buf, before, "Full leaves the chunk as it was");
                    return (buf, i);
                }
            }
        }
        (buf, samples.len())
    }

    fn check_round_trip(samples: &[Sample]) {
        let sealed = encode(samples);
        let expected_header = ChunkHeader {
            sample_count: samples.len() as u32,
            first_timestamp_ms: samples[0].timestamp_ms,
            last_timestamp_ms: samples[samples.len() - 1].timestamp_ms,
        };
        assert_eq!(header(&sealed).ok(), Some(expected_header));
        let decoded = decode(&sealed).expect("an encoded chunk decodes");
        assert_eq!(exact(&decoded), exact(samples));
        let iterated: Vec<Sample> = iter(&sealed)
            .expect("header")
            .collect::<Result<_>>()
            .expect("an encoded chunk");
        assert_eq!(exact(&iterated), exact(samples));

        // The open form writes the same bit stream.
        let (buf, appended) = fill_open(samples);
        assert!(appended >= 1, "an empty open chunk takes any first sample");
        let open = open_samples(&buf).expect("an appended chunk decodes");
        assert_eq!(exact(&open), exact(&samples[..appended]));
        let open_h = open_header(&buf)
            .expect("an appended chunk")
            .expect("not empty");
        assert_eq!(open_h.sample_count as usize, appended);
        let sealed_prefix = encode_stream(&samples[..appended]);
        assert_eq!(
            seal(&buf).expect("seal").as_deref(),
            Some(sealed_prefix.as_slice())
        );
    }

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A scraped counter: every 15 s with 0..=5 ms of jitter, rising by 0..=10 a scrape.
    fn counter(n: usize, seed: u64) -> Vec<Sample> {
        let mut rng = Rng(seed);
        let mut value = 1_000.0 + rng.below(1_000_000) as f64;
        let start_ms = 1_700_000_000_000 + rng.below(15_000) as i64;
        (0..n)
            .map(|i| {
                let sample = s(start_ms + 15_000 * i as i64 + rng.below(6) as i64, value);
                value += rng.below(11) as f64;
                sample
            })
            .collect()
    }

    fn regular(values: &[f64]) -> Vec<Sample> {
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| s(1_000 + 15_000 * i as i64, v))
            .collect()
    }

    /// The value an exporter's text `n / 10^scale` parses to, e.g. "12345.67".
    fn decimal(n: i64, scale: u8) -> f64 {
        let unit = 10i64.pow(u32::from(scale));
        let sign = if n < 0 { "-" } else { "" };
        let (whole, fraction) = (
            n.unsigned_abs() / unit as u64,
            n.unsigned_abs() % unit as u64,
        );
        let text = if scale == 0 {
            format!("{sign}{whole}")
        } else {
            format!(
                "{sign}{whole}.{fraction:0width$}",
                width = usize::from(scale)
            )
        };
        text.parse().expect("a decimal")
    }

    /// A counter of CPU seconds with two decimals, from 12345.67 up by 0.00..=`max_step` a
    /// scrape, scraped every 15 s give or take 5 ms.
    fn cpu_seconds(n: usize, seed: u64, max_step: f64) -> Vec<Sample> {
        let mut rng = Rng(seed);
        let max_step = (max_step * 100.0).round() as u64;
        let mut hundredths = 1_234_567i64;
        let start_ms = 1_700_000_000_000 + rng.below(15_000) as i64;
        (0..n)
            .map(|i| {
                let jitter_ms = rng.below(11) as i64 - 5;
                let sample = s(
                    start_ms + 15_000 * i as i64 + jitter_ms,
                    decimal(hundredths, 2),
                );
                hundredths += rng.below(max_step + 1) as i64;
                sample
            })
            .collect()
    }

    /// The scale a chunk of `samples` takes, as its open form records it.
    fn scale_of(samples: &[Sample]) -> u8 {
        fill_open(samples).0[SCALE_AT]
    }

    /// The sealed size of `samples` with decimal scaling off, to compare with.
    fn unscaled_len(samples: &[Sample]) -> usize {
        let mut state = State::default();
        let mut stream_bits = 0;
        for &sample in samples {
            let (bits, next) = encode_next(&state, sample);
            stream_bits += bits.total_bits;
            state = State { scale: 0, ..next };
        }
        SEALED_HEADER_BYTES + stream_bits.div_ceil(8)
    }

    /// Sealed bytes a sample over `chunks` chunks of 120 samples each, and the same with
    /// decimal scaling off.
    fn bytes_a_sample(chunks: impl Iterator<Item = Vec<Sample>>) -> (f64, f64) {
        let (mut samples, mut sealed, mut unscaled) = (0, 0, 0);
        for chunk in chunks {
            let bytes = encode_stream(&chunk);
            assert_eq!(exact(&decode(&bytes).expect("sealed")), exact(&chunk));
            samples += chunk.len();
            sealed += bytes.len();
            unscaled += unscaled_len(&chunk);
        }
        (
            sealed as f64 / samples as f64,
            unscaled as f64 / samples as f64,
        )
    }

    #[test]
    fn one_sample_round_trips() {
        check_round_trip(&[s(0, 1.0)]);
        check_round_trip(&[s(i64::MIN, f64::NAN)]);
        check_round_trip(&[s(i64::MAX, -0.0)]);
        // Header plus the first value's 64 bits.
        assert_eq!(encode_stream(&[s(5, 2.5)]).len(), SEALED_HEADER_BYTES + 8);
    }

    #[test]
    fn equal_values_cost_two_bits() {
        let samples = regular(&[42.0; 120]);
        check_round_trip(&samples);
        // First value, the first delta (20 bits), then one bit per timestamp and per value.
        let stream_bits = 64 + 20 + 1 + 118 * 2;
        assert_eq!(
            encode_stream(&samples).len(),
            SEALED_HEADER_BYTES + usize::div_ceil(stream_bits, 8)
        );
    }

    #[test]
    fn special_values_round_trip_bit_exactly() {
        let values = [
            0.0,
            -0.0,
            0.0,
            f64::NAN,
            f64::from_bits(0x7ff8_0000_0000_0001),
            f64::from_bits(0xfff0_0000_0000_0001),
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            f64::from_bits(1),
            -f64::from_bits(1),
            1.0,
            0.0,
            -0.0,
            -1.0,
            -0.0,
            f64::NAN,
            f64::NAN,
            1.0,
        ];
        check_round_trip(&regular(&values));
    }

    #[test]
    fn negative_and_extreme_timestamps_round_trip() {
        let negative: Vec<Sample> = (0..50).map(|i| s(-1_000_000 + i * 7, i as f64)).collect();
        check_round_trip(&negative);
        check_round_trip(&[s(i64::MIN, 1.0), s(i64::MAX, 2.0)]);
        check_round_trip(&[s(i64::MIN, 1.0), s(-1, 2.0), s(0, 3.0), s(i64::MAX, 4.0)]);
        check_round_trip(&[
            s(i64::MIN, 1.0),
            s(i64::MIN + 1, 1.0),
            s(i64::MAX - 1, 1.0),
            s(i64::MAX, 1.0),
        ]);
        check_round_trip(&[s(i64::MAX - 2, 0.0), s(i64::MAX - 1, 0.0), s(i64::MAX, 0.0)]);
        check_round_trip(&[s(i64::MIN, 0.0), s(i64::MIN + 1, 0.0), s(i64::MIN + 2, 0.0)]);
    }

    #[test]
    fn irregular_intervals_round_trip() {
        let deltas_ms = [
            1, 1, 2, 15_000, 14_999, 60_000, 1, 86_400_000, 3, 15_000, 15_000, 7,
        ];
        let mut timestamp_ms = 1_700_000_000_000;
        let mut samples = vec![s(timestamp_ms, 0.0)];
        for (i, delta_ms) in deltas_ms.iter().enumerate() {
            timestamp_ms += delta_ms;
            samples.push(s(timestamp_ms, i as f64 * 0.25));
        }
        check_round_trip(&samples);
    }

    #[test]
    fn every_dod_bucket_boundary_round_trips_at_its_cost() {
        let cases: [(i64, usize); 21] = [
            (0, 1),
            (1, 6),
            (-1, 6),
            (7, 6),
            (-8, 6),
            (8, 11),
            (-9, 11),
            (127, 11),
            (-128, 11),
            (128, 20),
            (-129, 20),
            (32_767, 20),
            (-32_768, 20),
            (32_768, 37),
            (-32_769, 37),
            (i64::from(i32::MAX), 37),
            (i64::from(i32::MIN), 37),
            (i64::from(i32::MAX) + 1, 69),
            (i64::from(i32::MIN) - 1, 69),
            (1 << 50, 69),
            (-(1 << 50), 69),
        ];
        let base_ms = 1i64 << 52;
        for (dod_ms, cost_bits) in cases {
            let samples = [
                s(0, 1.0),
                s(base_ms, 1.0),
                s(2 * base_ms + dod_ms, 1.0),
                s(3 * base_ms + dod_ms, 1.0),
            ];
            check_round_trip(&samples);
            let state = State {
                count: 2,
                first_timestamp_ms: 0,
                last_timestamp_ms: base_ms,
                delta_ms: base_ms,
                value_bits: 1f64.to_bits(),
                window: None,
                scale: 0,
            };
            let (bits, _) = encode_next(&state, samples[2]);
            // The bucket plus one bit for the unchanged value.
            assert_eq!(bits.total_bits, cost_bits + 1, "dod {dod_ms}");
        }
    }

    #[test]
    fn xor_extremes_round_trip() {
        // XORs with 63 leading zeros, none, 63 trailing, none, all 64 bits significant.
        let patterns: [u64; 10] = [
            0,
            1,
            u64::MAX,
            1 << 63,
            (1 << 63) | 1,
            0x0000_0000_0000_0003,
            0x0000_ffff_0000_0000,
            0x0000_fff0_0000_0000,
            0x0000_0ff0_0000_0000,
            0x7fff_ffff_ffff_fffe,
        ];
        let mut values = Vec::new();
        for &a in &patterns {
            for &b in &patterns {
                values.push(f64::from_bits(a));
                values.push(f64::from_bits(b));
                values.push(f64::from_bits(a ^ b));
            }
        }
        check_round_trip(&regular(&values));
    }

    #[test]
    fn integer_differences_round_trip_at_every_bucket_boundary() {
        let two_53 = EXACT_INT_MAX;
        let mut values = vec![1_000.0];
        for difference in [
            15.0,
            -16.0,
            16.0,
            -17.0,
            2_047.0,
            -2_048.0,
            2_048.0,
            -2_049.0,
            8_388_607.0,
            -8_388_608.0,
            8_388_608.0,
            2_147_483_647.0,
            -2_147_483_648.0,
            2_147_483_648.0,
            -2_147_483_649.0,
        ] {
            let last = values[values.len() - 1];
            values.push(last + difference);
        }
        values.extend([
            two_53,
            two_53 - 1.0,
            two_53,
            -two_53,
            2.0 * two_53,
            2.0 * two_53 + 2.0,
            1.0,
            0.0,
            -0.0,
            0.0,
            1.0,
            -0.0,
            -1.0,
            0.5,
            1.0,
        ]);
        check_round_trip(&regular(&values));
        // A small counter step costs a 2-bit symbol, a 1-bit bucket and 5 bits.
        let state = State {
            count: 2,
            value_bits: 1_000f64.to_bits(),
            ..State::default()
        };
        let (bits, _) = encode_next(&state, s(0, 1_003.0));
        assert_eq!(bits.total_bits, 1 + 2 + 1 + 5);
    }

    #[test]
    fn open_chunk_fills_to_the_sample_limit_and_seals_as_encode() {
        let samples = regular(&[7.0; 200]);
        let (mut buf, appended) = fill_open(&samples);
        assert_eq!(appended, CHUNK_SAMPLES_MAX);
        let before = buf;
        assert_eq!(
            open_append(&mut buf, s(i64::MAX, 1.0)).ok(),
            Some(Append::Full)
        );
        assert_eq!(buf, before);
        let sealed = seal(&buf).expect("seal").expect("not empty");
        assert_eq!(sealed, encode_stream(&samples[..CHUNK_SAMPLES_MAX]));
        assert_eq!(decode(&sealed).ok(), open_samples(&buf).ok());
    }

    #[test]
    fn open_chunk_fills_to_its_size_and_seals_as_encode() {
        let mut rng = Rng(7);
        let values: Vec<f64> = (0..120).map(|_| f64::from_bits(rng.next())).collect();
        let samples = regular(&values);
        let (buf, appended) = fill_open(&samples);
        assert!(
            appended < CHUNK_SAMPLES_MAX,
            "random values fill the bytes first"
        );
        let sealed = seal(&buf).expect("seal").expect("not empty");
        assert_eq!(sealed, encode_stream(&samples[..appended]));
        assert_eq!(
            exact(&decode(&sealed).expect("sealed")),
            exact(&samples[..appended])
        );
    }

    #[test]
    fn an_empty_open_chunk() {
        let buf = open_empty();
        assert_eq!(open_header(&buf).ok(), Some(None));
        assert_eq!(open_samples(&buf).ok(), Some(Vec::new()));
        assert_eq!(seal(&buf).ok(), Some(None));
    }

    #[test]
    fn an_append_changes_few_bytes() {
        let mut most_changed = 0;
        for samples in [
            counter(CHUNK_SAMPLES_MAX, 11),
            cpu_seconds(CHUNK_SAMPLES_MAX, 11, 0.15),
        ] {
            let mut buf = open_empty();
            for &sample in &samples {
                let before = buf;
                if open_append(&mut buf, sample).ok() == Some(Append::Full) {
                    break;
                }
                let changed = before.iter().zip(&buf).filter(|(a, b)| a != b).count();
                most_changed = most_changed.max(changed);
            }
            assert!(
                open_header(&buf)
                    .ok()
                    .flatten()
                    .expect("samples")
                    .sample_count
                    > 60
            );
        }
        println!("most bytes changed by one append: {most_changed}");
        assert!(most_changed <= 40, "{most_changed} bytes changed");
    }

    #[test]
    fn a_scraped_counter_takes_under_two_bytes_a_sample() {
        let mut total_bytes = 0;
        let chunks = 20;
        for seed in 1..=chunks {
            let samples = counter(CHUNK_SAMPLES_MAX, seed);
            let sealed = encode_stream(&samples);
            assert_eq!(exact(&decode(&sealed).expect("sealed")), exact(&samples));
            let (buf, appended) = fill_open(&samples);
            assert_eq!(
                appended, CHUNK_SAMPLES_MAX,
                "a counter chunk fits an open chunk"
            );
            assert_eq!(seal(&buf).ok().flatten(), Some(sealed.clone()));
            total_bytes += sealed.len();
        }
        let per_sample = total_bytes as f64 / (chunks as usize * CHUNK_SAMPLES_MAX) as f64;
        let constant = encode_stream(&regular(&[0.25; CHUNK_SAMPLES_MAX])).len() as f64
            / CHUNK_SAMPLES_MAX as f64;
        println!("bytes/sample: counter {per_sample:.3}, constant gauge {constant:.3}");
        assert!(per_sample < 2.0, "{per_sample} bytes a sample");
        assert!(constant <= 0.5, "{constant} bytes a sample");
        // Integer counters are not scaled: the bytes are those of the integer code alone.
        let (scaled, unscaled) =
            bytes_a_sample((1..=chunks).map(|seed| counter(CHUNK_SAMPLES_MAX, seed)));
        assert_eq!(scaled, per_sample);
        assert_eq!(unscaled, per_sample);
    }

    #[test]
    fn decimal_counters_take_a_fraction_of_their_xor() {
        let (light, light_unscaled) =
            bytes_a_sample((1..=20).map(|seed| cpu_seconds(CHUNK_SAMPLES_MAX, seed, 0.15)));
        let (busy, busy_unscaled) =
            bytes_a_sample((1..=20).map(|seed| cpu_seconds(CHUNK_SAMPLES_MAX, seed, 15.0)));
        println!(
            "bytes/sample: cpu seconds +0.00..=0.15 {light:.3} (unscaled {light_unscaled:.3}), \
             +0.00..=15.00 {busy:.3} (unscaled {busy_unscaled:.3})"
        );
        assert!(light < 2.2, "{light} bytes a sample");
        assert!(light < light_unscaled / 3.0);
        assert!(busy < busy_unscaled / 2.0);
    }

    #[test]
    fn encode_keeps_the_shorter_body() {
        // A compacted CPU-seconds chunk: jittered scrapes, cents. Packed is shorter.
        let busy = cpu_seconds(COMPACTED, 3, 15.0);
        let sealed = encode(&busy);
        assert_eq!(sealed[CODEC_AT], CODEC_PACKED);
        assert!(sealed.len() * 4 < encode_stream(&busy).len() * 3);
        assert_eq!(exact(&decode(&sealed).expect("packed")), exact(&busy));
        let iterated: Vec<Sample> = iter(&sealed)
            .expect("header")
            .collect::<Result<_>>()
            .expect("packed");
        assert_eq!(exact(&iterated), exact(&busy));
        // Values off any decimal scale keep the stream.
        let thirds = regular(&[1.0 / 3.0, 2.0 / 3.0, 1.0]);
        assert_eq!(encode(&thirds)[CODEC_AT], CODEC_STREAM);
        // An unknown codec is corrupt.
        let mut unknown = sealed;
        unknown[CODEC_AT] = 2;
        assert!(header(&unknown).is_err());
        assert!(decode(&unknown).is_err());
    }

    /// Samples in a chunk the store's compaction writes.
    const COMPACTED: usize = crate::maintenance::COMPACTED_CHUNK_SAMPLES;

    #[test]
    fn corrupt_sealed_chunks_are_refused() {
        let samples = regular(&[1.0, 1.0]);
        let sealed = encode_stream(&samples);
        // 64 + 20 + 1 bits: three padding bits.
        assert_eq!(sealed.len(), SEALED_HEADER_BYTES + 11);
        assert!(decode(&sealed).is_ok());

        assert!(header(&sealed[..SEALED_HEADER_BYTES - 1]).is_err());
        assert!(decode(&sealed[..sealed.len() - 1]).is_err());
        let mut longer = sealed.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut padded = sealed.clone();
        *padded.last_mut().expect("not empty") |= 1;
        assert!(decode(&padded).is_err());
        let mut more = sealed.clone();
        more[COUNT_AT] = 3;
        assert!(decode(&more).is_err());
        let mut none = sealed.clone();
        none[COUNT_AT] = 0;
        assert!(header(&none).is_err());
        let mut later = sealed.clone();
        later[LAST_TIMESTAMP_AT] ^= 1;
        assert!(header(&later).is_ok());
        assert!(decode(&later).is_err());

        // The iterator reports the error once, then ends.
        let mut it = iter(&later).expect("header");
        assert!(matches!(it.next(), Some(Ok(_))));
        assert!(matches!(it.next(), Some(Err(Error::Corrupt(_)))));
        assert!(it.next().is_none());
    }

    #[test]
    fn corrupt_open_chunks_are_refused() {
        let (buf, _) = fill_open(&counter(10, 3));
        assert!(open_samples(&buf).is_ok());

        let short = &buf[..OPEN_CHUNK_BYTES - 1];
        assert!(open_header(short).is_err());
        assert!(open_samples(short).is_err());
        assert!(seal(short).is_err());
        let mut short_vec = short.to_vec();
        assert!(open_append(&mut short_vec, s(i64::MAX, 0.0)).is_err());

        let mut stray = buf;
        stray[OPEN_CHUNK_BYTES - 1] = 1;
        assert!(open_samples(&stray).is_err());
        assert!(seal(&stray).is_err());

        let mut value = buf;
        value[VALUE_AT] ^= 1;
        assert!(open_header(&value).is_ok());
        assert!(open_samples(&value).is_err());

        let mut count = buf;
        count[COUNT_AT] = 11;
        assert!(open_samples(&count).is_err());
        count[COUNT_AT] = CHUNK_SAMPLES_MAX as u8 + 1;
        assert!(open_header(&count).is_err());
        assert!(open_append(&mut count, s(i64::MAX, 0.0)).is_err());

        let mut empty_with_bits = open_empty();
        empty_with_bits[OPEN_HEADER_BYTES] = 1;
        assert!(open_samples(&empty_with_bits).is_err());
        let mut empty_with_header = open_empty();
        empty_with_header[VALUE_AT] = 1;
        assert!(open_header(&empty_with_header).is_err());
        empty_with_header[VALUE_AT] = 0;
        empty_with_header[SCALE_AT] = 2;
        assert!(open_header(&empty_with_header).is_err());
    }

    #[test]
    fn a_bad_scale_is_refused() {
        let samples = cpu_seconds(10, 5, 15.0);
        let (buf, _) = fill_open(&samples);
        assert_eq!(buf[SCALE_AT], 2);
        assert!(open_samples(&buf).is_ok());

        for bad in [SCALE_MAX + 1, 200, u8::MAX] {
            let mut scale = buf;
            scale[SCALE_AT] = bad;
            assert!(matches!(open_header(&scale), Err(Error::Corrupt(_))));
            assert!(matches!(open_samples(&scale), Err(Error::Corrupt(_))));
            assert!(matches!(seal(&scale), Err(Error::Corrupt(_))));
            assert!(matches!(
                open_append(&mut scale, s(i64::MAX, 1.0)),
                Err(Error::Corrupt(_))
            ));
        }
        // A scale in range that the first value does not choose: the header is readable,
        // the samples are not.
        for other in [0, 1, 3, SCALE_MAX] {
            let mut scale = buf;
            scale[SCALE_AT] = other;
            assert!(open_header(&scale).is_ok());
            assert!(matches!(open_samples(&scale), Err(Error::Corrupt(_))));
            assert!(matches!(seal(&scale), Err(Error::Corrupt(_))));
        }

        // An integer code after a value off the scale cannot have been written.
        assert_eq!(
            add_difference(0.25, 1, 2).map(f64::to_bits),
            Some(0.26f64.to_bits())
        );
        assert_eq!(add_difference(0.30000000000000004, 1, 1), None);
        assert_eq!(add_difference(f64::NAN, 1, 2), None);
        assert_eq!(add_difference(f64::INFINITY, 1, 2), None);
        assert_eq!(scaled(EXACT_INT_MAX / 100.0, 2), Some(1 << 53));
        assert_eq!(add_difference(EXACT_INT_MAX / 100.0, 1, 2), None);
    }

    #[test]
    fn the_scale_is_the_fewest_exact_decimals_of_the_first_value() {
        let cases: [(f64, u8); 22] = [
            (0.0, 0),
            (-0.0, 0),
            (7.0, 0),
            (-12_346.0, 0),
            (EXACT_INT_MAX, 0),
            (2.0 * EXACT_INT_MAX, 0),
            (41.5, 1),
            (0.1, 1),
            (-0.5, 1),
            (1.25, 2),
            (12_345.67, 2),
            (0.001, 3),
            (2.0625, 4),
            (0.00001, 5),
            (123_456.789_012, 6),
            (0.000_000_1, 0),
            (0.30000000000000004, 0),
            (1.0 / 3.0, 0),
            (1e300, 0),
            (f64::NAN, 0),
            (f64::INFINITY, 0),
            (f64::MIN_POSITIVE, 0),
        ];
        for (value, scale) in cases {
            assert_eq!(choose_scale(value), scale, "{value}");
            assert_eq!(scale_of(&[s(0, value)]), scale, "{value}");
        }
        // Up to 2^53 in its units, and no further.
        let top = EXACT_INT_MAX as i64;
        assert_eq!(choose_scale(decimal(top, 3)), 3);
        assert_eq!(choose_scale(12_345_678_901.123_456), 0);
    }

    #[test]
    fn two_decimal_counters_round_trip() {
        let mut rng = Rng(17);
        let mut hundredths = 1_234_567;
        let mut values = Vec::new();
        for _ in 0..CHUNK_SAMPLES_MAX {
            values.push(decimal(hundredths, 2));
            hundredths += rng.below(1_501) as i64;
        }
        assert_eq!(values[0], 12_345.67);
        let samples = regular(&values);
        assert_eq!(scale_of(&samples), 2);
        check_round_trip(&samples);
        assert!(encode(&samples).len() * 2 < unscaled_len(&samples));
        for seed in 1..=5 {
            check_round_trip(&cpu_seconds(CHUNK_SAMPLES_MAX, seed, 15.0));
        }

        // A step of 0.03 costs what a step of 3 costs an integer counter.
        let state = State {
            count: 2,
            value_bits: 12_345.67f64.to_bits(),
            scale: 2,
            ..State::default()
        };
        let (bits, _) = encode_next(&state, s(0, 12_345.7));
        assert_eq!(bits.total_bits, 1 + 2 + 1 + 5);
    }

    #[test]
    fn scaled_differences_round_trip_at_every_bucket_boundary() {
        // 10.01: a first value of 10.00 would be an integer and turn scaling off.
        let mut hundredths = 1_001;
        let mut values = vec![decimal(hundredths, 2)];
        for difference in [
            15,
            -16,
            16,
            -17,
            2_047,
            -2_048,
            2_048,
            -2_049,
            8_388_607,
            -8_388_608,
            8_388_608,
            2_147_483_647,
            -2_147_483_648,
            2_147_483_648,
            -2_147_483_649,
            -1_000,
            -1,
            1,
        ] {
            hundredths += difference;
            values.push(decimal(hundredths, 2));
        }
        let top = EXACT_INT_MAX as i64;
        for n in [top - 1, top, top + 1, -top, -top - 1, 1, -1, 0, 1] {
            values.push(decimal(n, 2));
        }
        let samples = regular(&values);
        assert_eq!(scale_of(&samples), 2);
        check_round_trip(&samples);

        // Each bucket costs its symbol and payload after the 2-bit value symbol and the 1-bit
        // timestamp.
        let state = State {
            count: 2,
            value_bits: 10.01f64.to_bits(),
            scale: 2,
            ..State::default()
        };
        for (difference, cost_bits) in [
            (15, 1 + 5),
            (-16, 1 + 5),
            (16, 2 + 12),
            (-2_048, 2 + 12),
            (2_048, 3 + 24),
            (8_388_608, 3 + 32),
            (-2_147_483_648, 3 + 32),
        ] {
            let (bits, _) = encode_next(&state, s(0, decimal(1_001 + difference, 2)));
            assert_eq!(bits.total_bits, 1 + 2 + cost_bits, "{difference}");
        }
    }

    #[test]
    fn one_decimal_gauges_round_trip() {
        let mut rng = Rng(23);
        for start in [415, 5, -3, 0] {
            let mut tenths: i64 = start;
            let mut values = Vec::new();
            for _ in 0..CHUNK_SAMPLES_MAX {
                values.push(decimal(tenths, 1));
                tenths += rng.below(41) as i64 - 20;
            }
            let samples = regular(&values);
            assert_eq!(scale_of(&samples), if start == 0 { 0 } else { 1 });
            check_round_trip(&samples);
        }
        let load = regular(&[1.25, 1.5, 0.75, 0.02, 0.0, 0.01, 3.99, 12.5]);
        assert_eq!(scale_of(&load), 2);
        check_round_trip(&load);
    }

    #[test]
    fn scaled_and_unscaled_values_mix() {
        let values = [
            0.1,
            0.30000000000000004,
            f64::NAN,
            -0.0,
            1e300,
            0.2,
            0.3,
            0.30000000000000004,
            0.4,
            -0.0,
            0.0,
            -0.1,
            -0.0,
            f64::INFINITY,
            0.5,
            1e-7,
            0.7,
            123_456.7,
            -123_456.7,
            0.05,
            0.1,
            1e8,
            1e12,
            0.1,
            f64::from_bits(0.1f64.to_bits() + 1),
            0.1,
            decimal(EXACT_INT_MAX as i64, 1),
            decimal(EXACT_INT_MAX as i64 + 1, 1),
            0.1,
        ];
        let samples = regular(&values);
        assert_eq!(scale_of(&samples), 1);
        check_round_trip(&samples);
    }

    #[test]
    fn a_first_value_without_decimals_turns_scaling_off() {
        // An integer first value too: 12346.00 prints as "12346".
        for first in [
            1.0 / 3.0,
            0.30000000000000004,
            f64::NAN,
            -0.0,
            12_346.0,
            41.0,
        ] {
            let samples = regular(&[first, 1.25, 1.5, 41.5, 41.6, 12_345.67, 12_345.68, 3.0, 4.0]);
            assert_eq!(scale_of(&samples), 0);
            check_round_trip(&samples);
            // Unscaled, integers still take the integer code, decimals do not.
            assert_eq!(encode_stream(&samples).len(), unscaled_len(&samples));
        }
    }

    /// A value: given outright, or as a step from the previous one (to make counters).
    #[derive(Clone, Copy, Debug)]
    enum Value {
        Is(f64),
        Step(i64),
    }

    fn samples_strategy() -> impl Strategy<Value = Vec<Sample>> {
        let step_ms = prop_oneof![
            4 => 14_995i64..15_006,
            2 => Just(15_000i64),
            2 => 1i64..100,
            1 => 1i64..(1 << 40),
            1 => 1i64..i64::MAX,
        ];
        let value = prop_oneof![
            3 => (0i64..20).prop_map(Value::Step),
            1 => (-3_000i64..3_000).prop_map(Value::Step),
            2 => any::<f64>().prop_map(Value::Is),
            2 => any::<u64>().prop_map(|b| Value::Is(f64::from_bits(b))),
            1 => (-100i64..100).prop_map(|i| Value::Is(i as f64 / 4.0)),
        ];
        let start_ms = prop_oneof![any::<i64>(), -(1i64 << 45)..(1i64 << 45)];
        (start_ms, prop::collection::vec((step_ms, value), 1..160)).prop_map(|(start_ms, steps)| {
            let mut samples: Vec<Sample> = Vec::with_capacity(steps.len());
            let mut timestamp_ms = start_ms;
            let mut last = 0.0;
            for (step_ms, value) in steps {
                if !samples.is_empty() {
                    match timestamp_ms.checked_add(step_ms) {
                        Some(t) => timestamp_ms = t,
                        None => break,
                    }
                }
                last = match value {
                    Value::Is(v) => v,
                    Value::Step(step) => last + step as f64,
                };
                samples.push(s(timestamp_ms, last));
            }
            samples
        })
    }

    /// Feeds `bytes` to every sealed-chunk reader; none may panic.
    fn poke_sealed(bytes: &[u8]) {
        let h = header(bytes);
        let decoded = decode(bytes);
        if let Ok(samples) = &decoded {
            assert_eq!(h.ok().map(|h| h.sample_count as usize), Some(samples.len()));
        }
        if let Ok(it) = iter(bytes) {
            assert_eq!(
                it.map(|r| r.ok()).last().flatten().is_some(),
                decoded.is_ok()
            );
        }
    }

    /// Feeds `buf` to every open-chunk function; none may panic.
    fn poke_open(buf: &mut [u8], sample: Sample) {
        let samples = open_samples(buf);
        let sealed = seal(buf);
        if let (Ok(samples), Ok(Some(sealed))) = (&samples, &sealed) {
            assert_eq!(decode(sealed).ok().map(|d| exact(&d)), Some(exact(samples)));
        }
        match open_header(buf) {
            Err(_) => assert!(open_append(buf, sample).is_err()),
            Ok(h) => {
                if h.is_none_or(|h| h.last_timestamp_ms < sample.timestamp_ms) {
                    let _ = open_append(buf, sample);
                    let _ = open_samples(buf);
                }
            }
        }
    }

    /// Series of decimals: a random scale, a random start and random steps in its units,
    /// now and then a value off the scale.
    fn decimal_samples_strategy() -> impl Strategy<Value = (u8, Vec<Sample>)> {
        let start = prop_oneof![
            4 => -1_000_000i64..1_000_000,
            1 => -(1i64 << 53)..=(1i64 << 53),
        ];
        let step = prop_oneof![
            4 => (0i64..=15).prop_map(Value::Step),
            4 => (-2_000i64..2_000).prop_map(Value::Step),
            1 => (-(1i64 << 33)..(1i64 << 33)).prop_map(Value::Step),
            1 => any::<f64>().prop_map(Value::Is),
        ];
        let step_ms = prop_oneof![14_995i64..=15_005, 1i64..100];
        (
            0..=SCALE_MAX,
            start,
            -(1i64 << 45)..(1i64 << 45),
            prop::collection::vec((step_ms, step), 0..140),
        )
            .prop_map(|(scale, start, start_ms, steps)| {
                let mut n = start;
                let mut samples = vec![s(start_ms, decimal(n, scale))];
                let mut timestamp_ms = start_ms;
                for (step_ms, step) in steps {
                    timestamp_ms += step_ms;
                    let value = match step {
                        Value::Is(v) => v,
                        Value::Step(step) => {
                            n = n.saturating_add(step).clamp(-(1i64 << 60), 1i64 << 60);
                            decimal(n, scale)
                        }
                    };
                    samples.push(s(timestamp_ms, value));
                }
                (scale, samples)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn random_samples_round_trip(samples in samples_strategy()) {
            check_round_trip(&samples);
        }

        #[test]
        fn random_decimal_series_round_trip((scale, samples) in decimal_samples_strategy()) {
            check_round_trip(&samples);
            // The first value may need fewer decimals than the series was drawn with.
            prop_assert!(scale_of(&samples) <= scale);
        }

        #[test]
        fn random_bytes_never_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..300),
            timestamp_ms in any::<i64>(),
        ) {
            poke_sealed(&bytes);
            let mut buf = bytes.clone();
            buf.resize(OPEN_CHUNK_BYTES, 0);
            poke_open(&mut buf, s(timestamp_ms, 1.0));
            // A plausible header over random bits.
            buf[..OPEN_HEADER_BYTES].fill(0);
            buf[COUNT_AT] = bytes.first().copied().unwrap_or_default() % 121;
            buf[STREAM_BITS_AT] = 200;
            buf[LAST_TIMESTAMP_AT] = 100;
            poke_open(&mut buf, s(timestamp_ms, 1.0));
            // Scales in range, just past it, and far past it.
            buf[SCALE_AT] = match bytes.get(1).copied().unwrap_or_default() {
                b @ 0..=127 => b % (SCALE_MAX + 2),
                b => b,
            };
            poke_open(&mut buf, s(timestamp_ms, 0.25));
        }

        #[test]
        fn mutated_chunks_never_panic(
            samples in samples_strategy(),
            flips in prop::collection::vec((any::<usize>(), 1u8..=255), 1..4),
            cut in any::<usize>(),
            next in any::<f64>(),
        ) {
            let mut sealed = encode(&samples);
            for &(at, bits) in &flips {
                let len = sealed.len();
                sealed[at % len] ^= bits;
            }
            poke_sealed(&sealed);
            poke_sealed(&sealed[..cut % (sealed.len() + 1)]);

            let (mut buf, _) = fill_open(&samples);
            for &(at, bits) in &flips {
                buf[at % OPEN_CHUNK_BYTES] ^= bits;
            }
            let after_ms = samples[samples.len() - 1].timestamp_ms.saturating_add(1);
            poke_open(&mut buf, s(after_ms, next));
        }
    }
}
