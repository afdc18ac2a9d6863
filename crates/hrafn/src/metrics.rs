//! The engine's counters and gauges in the Prometheus text exposition format, so a server
//! or an application exposes them with one call ([`crate::Environment::metrics_text`]).

use crate::env::Stats;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket upper bounds of a latency histogram: 2^k µs for k in 0..BUCKETS (1 µs to about
/// 16.8 s), then `+Inf`.
const BUCKETS: usize = 25;

/// A latency histogram cheap enough for the commit path: one relaxed add per bucket hit,
/// no lock. Buckets double, so percentiles read from it are within a factor of two.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    /// Counts per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; BUCKETS + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub(crate) fn record(&self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        // Smallest k with us <= 2^k.
        let k = if us <= 1 {
            0
        } else {
            (64 - (us - 1).leading_zeros()) as usize
        };
        self.buckets[k.min(BUCKETS)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Cumulative counts per bucket bound (seconds; `None` = `+Inf`), and the sum in
    /// seconds.
    pub(crate) fn snapshot(&self) -> (Vec<(Option<f64>, u64)>, f64) {
        let mut cumulative = 0;
        let mut out = Vec::with_capacity(BUCKETS + 1);
        for (k, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let bound = (k < BUCKETS).then(|| (1u64 << k) as f64 / 1e6);
            out.push((bound, cumulative));
        }
        (out, self.sum_us.load(Ordering::Relaxed) as f64 / 1e6)
    }

    /// The smallest bucket bound at or above quantile `q` of the observations (µs), or
    /// `None` without observations.
    pub(crate) fn quantile_us(&self, q: f64) -> Option<u64> {
        let (buckets, _) = self.snapshot();
        let total = buckets.last().map_or(0, |b| b.1);
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        buckets
            .iter()
            .find(|(_, c)| *c >= rank)
            .map(|(bound, _)| bound.map_or(u64::MAX, |s| (s * 1e6).round() as u64))
    }
}

/// The engine's latency histograms.
#[derive(Debug, Default)]
pub(crate) struct Latencies {
    /// `WriteTxn::commit` (or a merged write), from the call to its return.
    pub commit: Histogram,
    /// One journal record's write (durable on return in `Immediate` mode).
    pub journal_write: Histogram,
    /// One flush pass that wrote pages to the data file.
    pub flush: Histogram,
    /// One data-file sync with its header write.
    pub sync: Histogram,
}

impl Latencies {
    fn all(&self) -> [(&'static str, &'static str, &Histogram); 4] {
        [
            (
                "commit_seconds",
                "Commit latency, from the call to its return.",
                &self.commit,
            ),
            (
                "journal_write_seconds",
                "Latency of one journal record write.",
                &self.journal_write,
            ),
            (
                "flush_seconds",
                "Duration of a flush pass that wrote pages.",
                &self.flush,
            ),
            (
                "sync_seconds",
                "Duration of a data-file sync and its header write.",
                &self.sync,
            ),
        ]
    }
}

/// What a metric is, for its `# TYPE` line.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

/// Renders `stats` as Prometheus text: one `# HELP`, one `# TYPE` and one sample line per
/// metric, every name prefixed `hrafn_`.
pub(crate) fn render(stats: &Stats, latencies: &Latencies) -> String {
    use Kind::{Counter, Gauge};
    let metrics: [(&str, Kind, &str, u64); 31] = [
        (
            "txn_id",
            Gauge,
            "Last committed transaction id.",
            stats.txn_id,
        ),
        (
            "synced_txn_id",
            Gauge,
            "Last transaction durable in the data file.",
            stats.synced_txn_id,
        ),
        (
            "commits_total",
            Counter,
            "Commits that wrote a journal record.",
            stats.commits,
        ),
        (
            "journal_writes_total",
            Counter,
            "Journal records written.",
            stats.journal_writes,
        ),
        (
            "journal_written_bytes_total",
            Counter,
            "Bytes written to journals, padding included.",
            stats.journal_bytes_written,
        ),
        (
            "journal_payload_bytes_total",
            Counter,
            "Page diff bytes before compression.",
            stats.journal_payload_bytes,
        ),
        (
            "journal_stored_bytes_total",
            Counter,
            "Page diff bytes as stored in records (after compression where it paid).",
            stats.journal_stored_bytes,
        ),
        (
            "dirty_page_bytes_total",
            Counter,
            "Page bytes changed by commits, before diffing.",
            stats.dirty_page_bytes,
        ),
        (
            "flushes_total",
            Counter,
            "Flush passes that wrote pages.",
            stats.flushes,
        ),
        (
            "pages_flushed_total",
            Counter,
            "Pages written to the data file.",
            stats.pages_flushed,
        ),
        ("syncs_total", Counter, "Data file syncs.", stats.syncs),
        (
            "flush_pages_examined_total",
            Counter,
            "Pages the flusher looked up.",
            stats.flush_pages_examined,
        ),
        (
            "data_file_bytes",
            Gauge,
            "Size of the data file.",
            stats.data_file_size_bytes,
        ),
        (
            "scratch_used_bytes",
            Gauge,
            "Scratch bytes held.",
            stats.scratch_used_bytes,
        ),
        (
            "scratch_peak_bytes",
            Gauge,
            "Most scratch bytes held since open.",
            stats.scratch_peak_bytes,
        ),
        (
            "scratch_pinned_bytes",
            Gauge,
            "Scratch bytes kept only for open readers.",
            stats.scratch_pinned_bytes,
        ),
        (
            "scratch_memory_bytes",
            Gauge,
            "Scratch bytes held in memory.",
            stats.scratch_memory_bytes,
        ),
        (
            "scratch_files",
            Gauge,
            "Scratch files on disk.",
            stats.scratch_files,
        ),
        (
            "scratch_file_bytes",
            Gauge,
            "Scratch files' whole size on disk.",
            stats.scratch_file_bytes,
        ),
        (
            "ptt_pages",
            Gauge,
            "Pages in the page translation table, not yet flushed.",
            stats.ptt_page_count,
        ),
        (
            "readers_active",
            Gauge,
            "Registered transactions.",
            stats.readers_active as u64,
        ),
        (
            "oldest_reader_age_ms",
            Gauge,
            "Age of the oldest open read transaction (0: none).",
            stats.oldest_reader_age_ms.unwrap_or(0),
        ),
        (
            "merged_transactions_total",
            Counter,
            "Transactions made of merged write requests.",
            stats.merged_transactions,
        ),
        (
            "merged_requests_total",
            Counter,
            "Merged write requests.",
            stats.merged_requests,
        ),
        (
            "pipelined_commits_total",
            Counter,
            "Write transactions begun while the previous record was being written.",
            stats.pipelined_commits,
        ),
        (
            "journal_files_waiting",
            Gauge,
            "Journal files newer than the last sync.",
            stats.journal_files_waiting,
        ),
        (
            "journal_files_retiring",
            Gauge,
            "Retired journal files not yet removed (a few go per flusher tick).",
            stats.journal_files_retiring,
        ),
        (
            "journal_files_peak",
            Gauge,
            "Most files the journal directory held at once since open.",
            stats.journal_files_peak,
        ),
        (
            "journal_files_ready",
            Gauge,
            "Journal files ready for the next rotation.",
            stats.journal_files_ready,
        ),
        (
            "recovered_records",
            Gauge,
            "Journal records replayed at open.",
            stats.recovered_records,
        ),
        (
            "open_ms",
            Gauge,
            "Time the open took, recovery included.",
            stats.open_ms,
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, value) in metrics {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# HELP hrafn_{name} {help}");
        let _ = writeln!(out, "# TYPE hrafn_{name} {kind}");
        let _ = writeln!(out, "hrafn_{name} {value}");
    }
    let ratio = if stats.journal_stored_bytes == 0 {
        1.0
    } else {
        stats.journal_payload_bytes as f64 / stats.journal_stored_bytes as f64
    };
    let _ = writeln!(
        out,
        "# HELP hrafn_journal_compression_ratio Page diff bytes per byte stored in journal \
         records (above 1: compression saves).\n# TYPE hrafn_journal_compression_ratio gauge\n\
         hrafn_journal_compression_ratio {ratio:.4}"
    );
    for (name, help, histogram) in latencies.all() {
        let (buckets, sum) = histogram.snapshot();
        let _ = writeln!(out, "# HELP hrafn_{name} {help}");
        let _ = writeln!(out, "# TYPE hrafn_{name} histogram");
        for (bound, count) in &buckets {
            match bound {
                Some(le) => {
                    let _ = writeln!(out, "hrafn_{name}_bucket{{le=\"{le}\"}} {count}");
                }
                None => {
                    let _ = writeln!(out, "hrafn_{name}_bucket{{le=\"+Inf\"}} {count}");
                }
            }
        }
        let _ = writeln!(out, "hrafn_{name}_sum {sum}");
        let _ = writeln!(
            out,
            "hrafn_{name}_count {}",
            buckets.last().map_or(0, |b| b.1)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double_and_quantiles_land_on_bounds() {
        let h = Histogram::default();
        for us in [1, 2, 3, 4, 5, 1000, 1_000_000] {
            h.record(Duration::from_micros(us));
        }
        let (buckets, sum) = h.snapshot();
        // 1 µs → le 1 µs; 2 → 2; 3, 4 → 4; 5 → 8; 1000 → 1024; 1e6 → 2^20.
        let at = |us: u64| {
            buckets
                .iter()
                .find(|(b, _)| b.is_some_and(|s| (s * 1e6).round() as u64 == us))
                .map(|(_, c)| *c)
        };
        assert_eq!(at(1), Some(1));
        assert_eq!(at(2), Some(2));
        assert_eq!(at(4), Some(4));
        assert_eq!(at(8), Some(5));
        assert_eq!(at(1024), Some(6));
        assert_eq!(at(1 << 20), Some(7));
        assert_eq!(buckets.last(), Some(&(None, 7)));
        assert!((sum - 1.001015).abs() < 1e-9, "{sum}");
        assert_eq!(h.quantile_us(0.5), Some(4));
        assert_eq!(h.quantile_us(1.0), Some(1 << 20));
        assert_eq!(Histogram::default().quantile_us(0.99), None);
        h.record(Duration::from_secs(100));
        assert_eq!(
            h.snapshot().0.last(),
            Some(&(None, 8)),
            "past the last bound: +Inf"
        );
    }
}
