//! The engine's counters and gauges in the Prometheus text exposition format, so a server
//! or an application exposes them with one call ([`crate::Environment::metrics_text`]).

use crate::env::Stats;
use std::fmt::Write;

/// What a metric is, for its `# TYPE` line.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

/// Renders `stats` as Prometheus text: one `# HELP`, one `# TYPE` and one sample line per
/// metric, every name prefixed `hrafn_`.
pub(crate) fn render(stats: &Stats) -> String {
    use Kind::{Counter, Gauge};
    let metrics: [(&str, Kind, &str, u64); 27] = [
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
    out
}
