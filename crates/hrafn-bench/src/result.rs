//! The record one (workload, engine) run produces, and the statistics behind it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One measured row: what a `run-one` child prints as a single JSON line, and what `--json`
/// writes (an array of these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    pub workload: String,
    pub engine: String,
    /// The `--scale` this row ran at (1.0 = the full counts).
    pub scale: f64,
    /// Operations counted in the measured part (entries, reads, commits, scans or writes).
    pub ops: u64,
    /// What one operation is, e.g. `entries`, `reads`, `commits`.
    pub unit: String,
    pub ops_per_sec: f64,
    /// Commits in the measured part, for rows that write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commits: Option<u64>,
    /// Wall time of the measured part only (fills done to prepare a read are not included).
    pub total_ms: f64,
    /// Sum of the lengths of the files in the engine's directory once the engine was closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// Peak resident set of the child process that ran this row (VmHWM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    /// Free text: how the row was run when that matters (e.g. the write path used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Set when the run failed; the figures are then zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The measured part took less than [`MIN_MEASURED_MS`]: the figure is mostly timer,
    /// scheduling and cache noise (marked `~` in the tables).
    #[serde(default)]
    pub unreliable: bool,
    /// How many times the measured part was repeated to last at least [`MIN_MEASURED_MS`]
    /// (rows that are cheap to repeat); absent when it ran once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passes: Option<u64>,
    /// Rows run several times: every run's operations per second, lowest first (the row
    /// reports the median one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_ops_per_sec: Vec<f64>,
    /// The sustained row: throughput, latency and files on disk per time window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Vec<Window>>,
    /// The sustained row: the lowest window's throughput over the median window's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_window_ratio: Option<f64>,
    /// The sustained row: the most journal (Hrafn) or WAL (RocksDB) files seen on disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_files_max: Option<u64>,
    /// The journal_bytes rows: bytes journaled per transaction against whole pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<JournalBytes>,
    /// commit_latency: bytes on disk of a database holding one key (one durable commit,
    /// then closed), made in a directory of its own before the row's commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_key_disk_bytes: Option<u64>,
    /// The u64 insert rows: pages the engine's data holds after the inserts, for engines
    /// that count them (Hrafn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages_in_use: Option<u64>,
}

/// Rows whose measured part is shorter than this are marked unreliable.
pub const MIN_MEASURED_MS: f64 = 50.0;

/// One time window of the sustained row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Seconds from the start of the measured part to the end of this window.
    pub t_s: f64,
    /// Operations (entries) committed in this window per second of the window.
    pub ops_per_sec: f64,
    /// 99th percentile commit latency of the commits that ended in this window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    /// Journal files (Hrafn: files in `journal/`) or WAL files (RocksDB: `*.log`) on disk
    /// when the window ended; absent for engines without either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_files: Option<u64>,
    /// Size of the engine's data file when the window ended (Hrafn, LMDB, redb).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_file_bytes: Option<u64>,
    /// Sum of the lengths of all files in the engine's directory when the window ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
}

/// What the journal_bytes rows measure, per transaction, from counter deltas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalBytes {
    /// Transactions in the measured part.
    pub txns: u64,
    /// Bytes written to journals (records with header and padding).
    pub journal_bytes_per_txn: f64,
    /// Page diff bytes before compression.
    pub payload_bytes_per_txn: f64,
    /// Whole pages the commits changed, in bytes (pages written × page size).
    pub page_bytes_per_txn: f64,
    pub pages_per_txn: f64,
    /// `journal_bytes_per_txn / page_bytes_per_txn`.
    pub ratio: f64,
}

impl BenchResult {
    /// A result for a measured part of `ops` operations that took `elapsed`.
    pub fn measured(
        workload: &str,
        engine: &str,
        scale: f64,
        ops: u64,
        unit: &str,
        elapsed: Duration,
    ) -> Self {
        let secs = elapsed.as_secs_f64();
        BenchResult {
            workload: workload.to_string(),
            engine: engine.to_string(),
            scale,
            ops,
            unit: unit.to_string(),
            commits: None,
            ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
            total_ms: secs * 1e3,
            disk_bytes: None,
            peak_rss_bytes: None,
            p50_us: None,
            p99_us: None,
            note: None,
            error: None,
            unreliable: false,
            passes: None,
            runs_ops_per_sec: Vec::new(),
            windows: None,
            min_window_ratio: None,
            one_key_disk_bytes: None,
            pages_in_use: None,
            journal_files_max: None,
            journal: None,
        }
    }

    /// Sets [`BenchResult::unreliable`] from the measured time: a successful row shorter
    /// than [`MIN_MEASURED_MS`].
    pub fn mark_short(&mut self) {
        self.unreliable = self.ok() && self.total_ms < MIN_MEASURED_MS;
    }

    /// Appends `text` to the note, after a `; `.
    pub fn add_note(&mut self, text: &str) {
        self.note = Some(match self.note.take() {
            Some(n) if !n.is_empty() => format!("{n}; {text}"),
            _ => text.to_string(),
        });
    }

    /// A row that records a failure.
    pub fn failed(workload: &str, engine: &str, scale: f64, error: String) -> Self {
        let mut r = Self::measured(workload, engine, scale, 0, "", Duration::ZERO);
        r.error = Some(error);
        r
    }

    /// Attaches p50/p99 of the given latency samples.
    pub fn with_latencies(mut self, samples: &mut [Duration]) -> Self {
        self.p50_us = percentile(samples, 50.0).map(|d| d.as_secs_f64() * 1e6);
        self.p99_us = percentile(samples, 99.0).map(|d| d.as_secs_f64() * 1e6);
        self
    }

    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// The median of `values`: the middle one, or the mean of the two middle ones; `None` for
/// an empty slice.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// The `p`th percentile (0..=100) by the nearest-rank method; sorts `samples` in place.
/// `None` for an empty slice.
pub fn percentile(samples: &mut [Duration], p: f64) -> Option<Duration> {
    samples.sort_unstable();
    percentile_sorted(samples, p)
}

/// [`percentile`] of values already sorted.
pub fn percentile_sorted<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    // Nearest rank: the smallest value with at least p% of the samples at or below it.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let idx = rank.saturating_sub(1).min(sorted.len() - 1);
    Some(sorted[idx])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: u64) -> Duration {
        Duration::from_micros(v)
    }

    #[test]
    fn percentile_nearest_rank() {
        let mut s: Vec<Duration> = (1..=100).rev().map(us).collect();
        assert_eq!(percentile(&mut s, 50.0), Some(us(50)));
        assert_eq!(percentile(&mut s, 99.0), Some(us(99)));
        assert_eq!(percentile(&mut s, 100.0), Some(us(100)));
        assert_eq!(percentile(&mut s, 0.0), Some(us(1)));
        let mut one = vec![us(7)];
        assert_eq!(percentile(&mut one, 99.0), Some(us(7)));
        assert_eq!(percentile(&mut [], 50.0), None);
        // 10 samples: p99 is the largest, p50 the fifth smallest.
        let mut ten: Vec<Duration> = [5, 1, 9, 3, 7, 2, 8, 4, 10, 6].map(us).to_vec();
        assert_eq!(percentile(&mut ten, 99.0), Some(us(10)));
        assert_eq!(percentile(&mut ten, 50.0), Some(us(5)));
    }

    #[test]
    fn short_rows_are_marked_unreliable() {
        let mut r = BenchResult::measured("x", "y", 1.0, 10, "reads", Duration::from_millis(49));
        r.mark_short();
        assert!(r.unreliable);
        let mut r = BenchResult::measured("x", "y", 1.0, 10, "reads", Duration::from_millis(50));
        r.mark_short();
        assert!(!r.unreliable);
        let mut failed = BenchResult::failed("x", "y", 1.0, "boom".into());
        failed.mark_short();
        assert!(!failed.unreliable, "a failure is an error, not a short row");
        let mut r = BenchResult::measured("x", "y", 1.0, 10, "reads", Duration::from_millis(1));
        r.mark_short();
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&r).expect("serialize")).expect("parse");
        assert_eq!(v["unreliable"], serde_json::Value::Bool(true));
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn json_round_trip() {
        let mut samples = vec![us(10), us(20), us(30)];
        let mut r = BenchResult::measured(
            "commit_latency",
            "lmdb",
            0.2,
            2_000,
            "commits",
            Duration::from_millis(500),
        )
        .with_latencies(&mut samples);
        r.disk_bytes = Some(12_345);
        r.peak_rss_bytes = Some(1 << 20);
        let line = serde_json::to_string(&r).expect("serialize");
        assert!(!line.contains('\n'), "one result is one line");
        let v: serde_json::Value = serde_json::from_str(&line).expect("parse as value");
        for field in [
            "workload",
            "engine",
            "ops_per_sec",
            "total_ms",
            "disk_bytes",
            "peak_rss_bytes",
            "p50_us",
            "p99_us",
        ] {
            assert!(v.get(field).is_some(), "missing {field}");
        }
        assert_eq!(v["ops_per_sec"].as_f64(), Some(4_000.0));
        assert_eq!(v["p50_us"].as_f64(), Some(20.0));
        let back: BenchResult = serde_json::from_str(&line).expect("deserialize");
        assert_eq!(back, r);
        // Unmeasured fields are left out rather than written as null.
        let plain = BenchResult::measured("x", "y", 1.0, 1, "reads", Duration::from_secs(1));
        let line = serde_json::to_string(&plain).expect("serialize");
        assert!(!line.contains("p50_us"));
    }
}
