//! Where a durable commit's slow tail comes from under steady random writes.
//!
//! Commits durable transactions of 100 random 16-byte keys with 100 random bytes each
//! (the shape of `hrafn-bench`'s `sustained_rnd_durable` row) with default options, and
//! prints per window the commits made, the data-file syncs so far, and the p50 and p99 of
//! four of the engine's own latency histograms (read from
//! [`hrafn::Environment::metrics_text`], as a metrics scraper would): the commit, its
//! journal write, a flush pass and a sync. Percentiles are the histogram's bucket bounds
//! (powers of two microseconds).
//!
//! Run it with (`HRAFN_TAIL_SECS` sets the length, default 6 s in windows of 1 s; from
//! 30 s on, windows of 10 s):
//!
//! ```sh
//! HRAFN_TAIL_SECS=60 cargo run --release -p hrafn --example commit_tail
//! ```

use hrafn::{Environment, Options};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const KEYS_PER_TXN: usize = 100;
const VALUE_BYTES: usize = 100;
const HISTOGRAMS: [&str; 4] = [
    "commit_seconds",
    "journal_write_seconds",
    "flush_seconds",
    "sync_seconds",
];

/// Cumulative bucket counts of each histogram in `text`, by name: `(upper bound, count)`.
fn buckets(text: &str) -> HashMap<String, Vec<(String, u64)>> {
    let mut out: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line
            .strip_prefix("hrafn_")
            .and_then(|l| l.split_once("_bucket{le=\""))
        else {
            continue;
        };
        let Some((bound, count)) = rest.split_once("\"} ") else {
            continue;
        };
        if let Ok(count) = count.trim().parse() {
            out.entry(name.to_string())
                .or_default()
                .push((bound.to_string(), count));
        }
    }
    out
}

/// The bucket bound (in µs) at quantile `q` of what was recorded between `before` and
/// `after`, with the count.
fn quantile(before: &[(String, u64)], after: &[(String, u64)], q: f64) -> String {
    let total = after.last().map_or(0, |b| b.1) - before.last().map_or(0, |b| b.1);
    if total == 0 {
        return "-".into();
    }
    for ((bound, was), (_, now)) in before.iter().zip(after) {
        if (now - was) as f64 >= q * total as f64 {
            return match bound.parse::<f64>() {
                Ok(seconds) => format!("{:.0}", seconds * 1e6),
                Err(_) => bound.clone(),
            };
        }
    }
    "+Inf".into()
}

/// xorshift64: a cheap, repeatable stream of random bits.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: u64 = std::env::var("HRAFN_TAIL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let window = Duration::from_secs(if secs >= 30 { 10 } else { 1 });
    let dir = tempfile::tempdir()?;
    let env = Environment::open(dir.path(), Options::default())?;
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let started = Instant::now();
    let mut before = buckets(&env.metrics_text());
    let mut window_end = window;
    let mut commits = 0u64;
    println!("p50 / p99 in µs");
    println!(
        "{:>5}  {:>7}  {:>5}  {:>15}  {:>15}  {:>15}  {:>15}",
        "t (s)", "commits", "syncs", "commit", "journal write", "flush pass", "sync"
    );
    while started.elapsed() < Duration::from_secs(secs) {
        let mut txn = env.begin_write()?;
        {
            let mut tree = txn.open_tree("t")?;
            for _ in 0..KEYS_PER_TXN {
                let mut key = [0u8; 16];
                key[..8].copy_from_slice(&next(&mut state).to_be_bytes());
                key[8..].copy_from_slice(&next(&mut state).to_be_bytes());
                let mut value = [0u8; VALUE_BYTES];
                for chunk in value.chunks_mut(8) {
                    chunk.copy_from_slice(&next(&mut state).to_le_bytes()[..chunk.len()]);
                }
                tree.insert(key, value)?;
            }
        }
        txn.commit()?;
        commits += 1;
        if started.elapsed() >= window_end {
            let after = buckets(&env.metrics_text());
            let mut line = format!(
                "{:>5}  {commits:>7}  {:>5}",
                window_end.as_secs(),
                env.stats().syncs
            );
            for name in HISTOGRAMS {
                let (was, now) = (&before[name], &after[name]);
                let pair = format!("{} / {}", quantile(was, now, 0.5), quantile(was, now, 0.99));
                line += &format!("  {pair:>15}");
            }
            println!("{line}");
            before = after;
            window_end += window;
            commits = 0;
        }
    }
    Ok(())
}
