//! The targets from the benchmark issues, and whether a run met them.
//!
//! Every target is one line of [`TARGETS`]: a figure of one (row, engine), optionally
//! divided by a figure of another (row, engine) of the same run, compared with a threshold.
//! To add a target, add a line.

use std::fmt::Write as _;

use crate::report::{self, fmt_bytes, fmt_rate};
use crate::result::BenchResult;
use crate::workloads::DISK;

/// Which figure of a result a target reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Operations per second.
    OpsPerSec,
    /// Median latency per commit (µs).
    P50Us,
    /// journal_bytes rows: bytes journaled per whole-page byte.
    JournalRatio,
    /// sustained row: the lowest window's throughput over the median window's.
    MinWindowRatio,
    /// commit_latency: bytes on disk of a closed one-key database.
    OneKeyDiskBytes,
    /// u64 insert rows: pages the data holds after the inserts.
    PagesInUse,
}

/// A figure: `metric` of the result of `row` on `engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figure {
    pub row: &'static str,
    pub engine: &'static str,
    pub metric: Metric,
}

/// `value` must be at least or at most the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    AtLeast,
    AtMost,
}

/// One target: `value` (divided by `base` when there is one) compared with `threshold`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub value: Figure,
    /// The figure `value` is divided by; `None` when the threshold is an absolute figure.
    pub base: Option<Figure>,
    pub cmp: Cmp,
    pub threshold: f64,
}

const fn fig(row: &'static str, engine: &'static str, metric: Metric) -> Figure {
    Figure {
        row,
        engine,
        metric,
    }
}

/// Hrafn's ops/s in `row` against `engine`'s in the same row, at least `threshold`.
const fn vs(row: &'static str, engine: &'static str, threshold: f64) -> Target {
    Target {
        value: fig(row, "hrafn", Metric::OpsPerSec),
        base: Some(fig(row, engine, Metric::OpsPerSec)),
        cmp: Cmp::AtLeast,
        threshold,
    }
}

/// Hrafn's ops/s in `row` against Hrafn's in `base_row`, at least `threshold`.
const fn vs_row(row: &'static str, base_row: &'static str, threshold: f64) -> Target {
    Target {
        value: fig(row, "hrafn", Metric::OpsPerSec),
        base: Some(fig(base_row, "hrafn", Metric::OpsPerSec)),
        cmp: Cmp::AtLeast,
        threshold,
    }
}

/// A figure of Hrafn's own, compared with an absolute threshold.
const fn absolute(row: &'static str, metric: Metric, cmp: Cmp, threshold: f64) -> Target {
    Target {
        value: fig(row, "hrafn", metric),
        base: None,
        cmp,
        threshold,
    }
}

/// The targets, in the order the verdicts are printed.
pub const TARGETS: &[Target] = &[
    vs("fill_seq", "lmdb", 1.0),
    vs("read_seq", "lmdb", 0.9),
    vs("read_parallel_t1", "lmdb", 0.9),
    vs("read_parallel_t2", "lmdb", 0.9),
    vs("read_parallel_t4", "lmdb", 0.9),
    vs("range_scan_full", "lmdb", 0.9),
    vs("range_scan_rnd100", "lmdb", 0.9),
    vs("fill_rnd_tx_nosync", "lmdb", 1.0),
    vs("fill_rnd_tx_durable", "rocksdb", 1.0),
    vs("bulk_seq_small", "lmdb", 1.5),
    absolute("bulk_seq_small", Metric::OpsPerSec, Cmp::AtLeast, 2.5e6),
    Target {
        value: fig("commit_latency", "hrafn", Metric::P50Us),
        base: Some(fig("journal_raw_direct_4k", DISK, Metric::P50Us)),
        cmp: Cmp::AtMost,
        threshold: 1.5,
    },
    Target {
        value: fig("concurrent_writers", "hrafn", Metric::OpsPerSec),
        base: Some(fig("journal_raw_group_4k", DISK, Metric::OpsPerSec)),
        cmp: Cmp::AtLeast,
        threshold: 0.9,
    },
    vs("sustained_rnd_durable", "rocksdb", 1.0),
    absolute(
        "sustained_rnd_durable",
        Metric::MinWindowRatio,
        Cmp::AtLeast,
        0.5,
    ),
    absolute(
        "journal_bytes_insert",
        Metric::JournalRatio,
        Cmp::AtMost,
        0.63,
    ),
    absolute(
        "journal_bytes_update",
        Metric::JournalRatio,
        Cmp::AtMost,
        0.2,
    ),
    // A tiny database: one key, one durable commit, closed.
    absolute(
        "commit_latency",
        Metric::OneKeyDiskBytes,
        Cmp::AtMost,
        1024.0 * 1024.0,
    ),
    vs_row("u64_get_fixed", "u64_get_btree", 1.3),
    vs_row("u64_insert_fixed", "u64_insert_btree", 1.5),
    Target {
        value: fig("u64_insert_fixed", "hrafn", Metric::PagesInUse),
        base: Some(fig("u64_insert_btree", "hrafn", Metric::PagesInUse)),
        cmp: Cmp::AtMost,
        threshold: 0.7,
    },
    vs("table_get_by_id", "lmdb", 1.5),
];

/// What a run says about one target.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Met,
    NotMet,
    /// Why not: a row or engine missing from the run, or failed.
    NotMeasured(String),
}

/// A target and what this run measured for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub target: Target,
    pub status: Status,
    /// The value compared with the threshold (a ratio when the target has a base).
    pub measured: Option<f64>,
    /// The two figures behind a ratio, as text (e.g. `1.63M / 1.54M entries/s`).
    pub detail: String,
    /// A figure behind it came from a row marked unreliable (too short).
    pub unreliable: bool,
}

fn lookup<'a>(results: &'a [BenchResult], f: &Figure) -> Result<&'a BenchResult, String> {
    match results
        .iter()
        .find(|r| r.workload == f.row && r.engine == f.engine)
    {
        None => Err(format!("{} on {} not in this run", f.row, f.engine)),
        Some(r) if !r.ok() => Err(format!("{} on {} failed", f.row, f.engine)),
        Some(r) => Ok(r),
    }
}

fn value_of(r: &BenchResult, metric: Metric) -> Result<f64, String> {
    let missing = |what: &str| format!("{} on {} has no {what}", r.workload, r.engine);
    match metric {
        Metric::OpsPerSec => Ok(r.ops_per_sec),
        Metric::P50Us => r.p50_us.ok_or_else(|| missing("p50")),
        // A zero count is a counter that did not move or files not found, not a figure:
        // judged, it would pass every "at most" target.
        Metric::JournalRatio => r
            .journal
            .as_ref()
            .filter(|j| j.page_bytes_per_txn > 0.0 && j.journal_bytes_per_txn > 0.0)
            .map(|j| j.ratio)
            .ok_or_else(|| missing("journal bytes and whole-page bytes")),
        Metric::MinWindowRatio => r.min_window_ratio.ok_or_else(|| missing("windows")),
        Metric::OneKeyDiskBytes => r
            .one_key_disk_bytes
            .filter(|&b| b > 0)
            .map(|b| b as f64)
            .ok_or_else(|| missing("one-key database bytes")),
        Metric::PagesInUse => r
            .pages_in_use
            .filter(|&p| p > 0)
            .map(|p| p as f64)
            .ok_or_else(|| missing("pages in use")),
    }
}

/// A figure as text, in its unit.
fn fmt_figure(r: &BenchResult, metric: Metric, v: f64) -> String {
    match metric {
        Metric::OpsPerSec => format!("{} {}/s", fmt_rate(v), r.unit),
        Metric::P50Us => format!("{v:.1} µs"),
        Metric::OneKeyDiskBytes => fmt_bytes(v as u64),
        Metric::PagesInUse => format!("{v:.0} pages"),
        Metric::JournalRatio | Metric::MinWindowRatio => format!("{v:.2}×"),
    }
}

/// Whether a figure comes from a clock, so that a too-short measured part makes it
/// unreliable (bytes counted are exact however short the run).
fn timed(metric: Metric) -> bool {
    matches!(
        metric,
        Metric::OpsPerSec | Metric::P50Us | Metric::MinWindowRatio
    )
}

/// The figures behind an absolute target's value.
fn absolute_detail(r: &BenchResult, metric: Metric, v: f64) -> String {
    match metric {
        Metric::JournalRatio => match &r.journal {
            Some(j) => format!(
                "{} journaled / {} in {:.1} whole pages per txn",
                fmt_bytes(j.journal_bytes_per_txn as u64),
                fmt_bytes(j.page_bytes_per_txn as u64),
                j.pages_per_txn
            ),
            None => String::new(),
        },
        Metric::MinWindowRatio => {
            let rates: Vec<f64> = r.windows.iter().flatten().map(|w| w.ops_per_sec).collect();
            match (
                rates.iter().copied().reduce(f64::min),
                crate::result::median(&rates),
            ) {
                (Some(min), Some(median)) => format!(
                    "lowest {} / median {} {}/s over {} windows",
                    fmt_rate(min),
                    fmt_rate(median),
                    r.unit,
                    rates.len()
                ),
                _ => String::new(),
            }
        }
        _ => fmt_figure(r, metric, v),
    }
}

/// Judges one target against the results of a run.
pub fn judge(target: &Target, results: &[BenchResult]) -> Verdict {
    let not_measured = |why: String| Verdict {
        target: *target,
        status: Status::NotMeasured(why),
        measured: None,
        detail: String::new(),
        unreliable: false,
    };
    let figure = |f: &Figure| -> Result<(&BenchResult, f64), String> {
        let r = lookup(results, f)?;
        Ok((r, value_of(r, f.metric)?))
    };
    let (r, v) = match figure(&target.value) {
        Ok(x) => x,
        Err(why) => return not_measured(why),
    };
    let (measured, detail, unreliable) = match &target.base {
        None => (
            v,
            absolute_detail(r, target.value.metric, v),
            timed(target.value.metric) && r.unreliable,
        ),
        Some(base) => {
            let (b, bv) = match figure(base) {
                Ok(x) => x,
                Err(why) => return not_measured(why),
            };
            if bv <= 0.0 {
                return not_measured(format!("{} on {} is zero", base.row, base.engine));
            }
            let detail = format!(
                "{} / {}",
                fmt_figure(r, target.value.metric, v),
                fmt_figure(b, base.metric, bv)
            );
            let unreliable = (timed(target.value.metric) && r.unreliable)
                || (timed(base.metric) && b.unreliable);
            (v / bv, detail, unreliable)
        }
    };
    let met = match target.cmp {
        Cmp::AtLeast => measured >= target.threshold,
        Cmp::AtMost => measured <= target.threshold,
    };
    Verdict {
        target: *target,
        status: if met { Status::Met } else { Status::NotMet },
        measured: Some(measured),
        detail,
        unreliable,
    }
}

/// Judges every target of [`TARGETS`].
pub fn judge_all(results: &[BenchResult]) -> Vec<Verdict> {
    TARGETS.iter().map(|t| judge(t, results)).collect()
}

/// The threshold of `target` for the verdict lines and the journal_bytes table, e.g.
/// `≥ 0.90× lmdb`, `≤ 1.50× disk journal_raw_direct_4k p50`, `≥ 2.50M entries/s`.
pub fn target_text(t: &Target) -> String {
    let cmp = match t.cmp {
        Cmp::AtLeast => "≥",
        Cmp::AtMost => "≤",
    };
    match (&t.base, t.value.metric) {
        (Some(b), _) => {
            let mut s = format!("{cmp} {:.2}× {}", t.threshold, b.engine);
            if b.row != t.value.row {
                let _ = write!(s, " {}", b.row);
            }
            if b.metric == Metric::P50Us {
                s.push_str(" p50");
            }
            s
        }
        (None, Metric::OpsPerSec) => format!("{cmp} {}/s", fmt_rate(t.threshold)),
        (None, Metric::OneKeyDiskBytes) => {
            format!("{cmp} {} on disk", fmt_bytes(t.threshold as u64))
        }
        (None, Metric::P50Us) => format!("{cmp} {:.0} µs p50", t.threshold),
        (None, Metric::PagesInUse) => format!("{cmp} {:.0} pages", t.threshold),
        (None, Metric::JournalRatio) => format!("{cmp} {:.2}× whole pages", t.threshold),
        (None, Metric::MinWindowRatio) => {
            format!("lowest window {cmp} {:.2}× the median window", t.threshold)
        }
    }
}

/// What the target is about: the row, and the metric when it is not throughput.
fn subject(t: &Target) -> String {
    let v = &t.value;
    let what = match v.metric {
        Metric::OpsPerSec | Metric::JournalRatio | Metric::MinWindowRatio => "",
        Metric::P50Us => " p50",
        Metric::OneKeyDiskBytes => " one-key db bytes",
        Metric::PagesInUse => " pages",
    };
    format!("{}{what}", v.row)
}

/// The verdict block: one line per target.
pub fn text(verdicts: &[Verdict]) -> String {
    let headers: Vec<String> = ["target", "threshold", "measured", "verdict", "from"]
        .map(String::from)
        .into();
    let rows: Vec<Vec<String>> = verdicts
        .iter()
        .map(|v| {
            let measured = match (v.measured, v.target.base, v.target.value.metric) {
                (None, _, _) => "-".to_string(),
                (Some(m), None, Metric::JournalRatio) => format!("{m:.3}×"),
                (Some(m), Some(_), _) | (Some(m), None, Metric::MinWindowRatio) => {
                    format!("{m:.2}×")
                }
                (Some(m), None, Metric::OpsPerSec) => fmt_rate(m),
                (Some(m), None, Metric::OneKeyDiskBytes) => fmt_bytes(m as u64),
                (Some(m), None, Metric::P50Us) => format!("{m:.1} µs"),
                (Some(m), None, Metric::PagesInUse) => format!("{m:.0}"),
            };
            let measured = if v.unreliable {
                format!("{measured}{}", report::UNRELIABLE_MARK)
            } else {
                measured
            };
            let (status, from) = match &v.status {
                Status::Met => ("met", v.detail.clone()),
                Status::NotMet => ("NOT met", v.detail.clone()),
                Status::NotMeasured(why) => ("not measured", why.clone()),
            };
            vec![
                subject(&v.target),
                target_text(&v.target),
                measured,
                status.to_string(),
                from,
            ]
        })
        .collect();
    let met = verdicts.iter().filter(|v| v.status == Status::Met).count();
    let not_met = verdicts
        .iter()
        .filter(|v| v.status == Status::NotMet)
        .count();
    let mut out = format!(
        "Verdicts ({} targets: {met} met, {not_met} NOT met, {} not measured; ratios within this run)\n",
        verdicts.len(),
        verdicts.len() - met - not_met
    );
    out.push_str(&report::render_with(&headers, &rows, &[0, 1, 3, 4]));
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::result::JournalBytes;

    fn result(w: &str, e: &str, ops_per_sec: f64) -> BenchResult {
        BenchResult::measured(
            w,
            e,
            1.0,
            ops_per_sec as u64,
            "entries",
            Duration::from_secs(1),
        )
    }

    fn find<'a>(verdicts: &'a [Verdict], row: &str, base_engine: Option<&str>) -> &'a Verdict {
        verdicts
            .iter()
            .find(|v| v.target.value.row == row && v.target.base.map(|b| b.engine) == base_engine)
            .expect("verdict")
    }

    #[test]
    fn ratios_thresholds_and_missing_rows() {
        let mut commit = result("commit_latency", "hrafn", 5_000.0);
        commit.p50_us = Some(120.0);
        commit.disk_bytes = Some(2 << 20);
        commit.one_key_disk_bytes = Some(2 << 20);
        let mut raw = result("journal_raw_direct_4k", DISK, 8_000.0);
        raw.p50_us = Some(100.0);
        let mut short = result("read_seq", "hrafn", 950.0);
        short.unreliable = true;
        let mut insert = result("journal_bytes_insert", "hrafn", 100.0);
        insert.journal = Some(JournalBytes {
            txns: 100,
            journal_bytes_per_txn: 50_000.0,
            payload_bytes_per_txn: 48_000.0,
            page_bytes_per_txn: 100_000.0,
            pages_per_txn: 100_000.0 / 8192.0,
            ratio: 0.5,
        });
        let mut fixed_insert = result("u64_insert_fixed", "hrafn", 1_400.0);
        fixed_insert.pages_in_use = Some(4_000);
        let mut btree_insert = result("u64_insert_btree", "hrafn", 1_000.0);
        btree_insert.pages_in_use = Some(6_000);
        let all = vec![
            result("fill_seq", "hrafn", 1_000.0),
            result("fill_seq", "lmdb", 1_000.0),
            short,
            result("read_seq", "lmdb", 1_000.0),
            result("fill_rnd_tx_durable", "hrafn", 1_000.0),
            BenchResult::failed("read_parallel_t1", "lmdb", 1.0, "boom".into()),
            result("read_parallel_t1", "hrafn", 1_000.0),
            result("bulk_seq_small", "hrafn", 3_000_000.0),
            commit,
            raw,
            insert,
            result("u64_get_fixed", "hrafn", 1_200.0),
            result("u64_get_btree", "hrafn", 1_000.0),
            fixed_insert,
            btree_insert,
        ];
        let v = judge_all(&all);
        assert_eq!(v.len(), TARGETS.len());
        // Exactly at the threshold is met.
        let fill = find(&v, "fill_seq", Some("lmdb"));
        assert_eq!(fill.status, Status::Met);
        assert_eq!(fill.measured, Some(1.0));
        // 0.95 >= 0.9, and the short row shows up.
        let read = find(&v, "read_seq", Some("lmdb"));
        assert_eq!(read.status, Status::Met);
        assert!(read.unreliable);
        // RocksDB is not in the run.
        let durable = find(&v, "fill_rnd_tx_durable", Some("rocksdb"));
        assert!(
            matches!(&durable.status, Status::NotMeasured(w) if w.contains("rocksdb")),
            "{durable:?}"
        );
        assert!(matches!(
            find(&v, "read_parallel_t1", Some("lmdb")).status,
            Status::NotMeasured(_)
        ));
        // Absolute: 3M entries/s >= 2.5M; bulk vs LMDB not measured.
        assert_eq!(find(&v, "bulk_seq_small", None).status, Status::Met);
        // p50 120 / 100 = 1.2 <= 1.5.
        let lat = find(&v, "commit_latency", Some(DISK));
        assert_eq!(lat.status, Status::Met);
        assert!((lat.measured.expect("measured") - 1.2).abs() < 1e-9);
        // A one-key database of 2 MiB > 1 MiB.
        let disk = v
            .iter()
            .find(|v| v.target.value.metric == Metric::OneKeyDiskBytes)
            .expect("disk target");
        assert_eq!(disk.status, Status::NotMet);
        // Journal ratio 0.5 <= 0.63; the update row did not run.
        assert_eq!(find(&v, "journal_bytes_insert", None).status, Status::Met);
        assert!(matches!(
            find(&v, "journal_bytes_update", None).status,
            Status::NotMeasured(_)
        ));
        // Hrafn against Hrafn: 1.2 < 1.3.
        let fixed = find(&v, "u64_get_fixed", Some("hrafn"));
        assert_eq!(fixed.status, Status::NotMet);
        // Pages: 4,000 / 6,000 <= 0.7, while 1.4x the inserts < 1.5.
        let by_metric = |metric| {
            v.iter()
                .find(|v| {
                    v.target.value.row == "u64_insert_fixed" && v.target.value.metric == metric
                })
                .expect("u64_insert_fixed target")
        };
        let pages = by_metric(Metric::PagesInUse);
        assert_eq!(pages.status, Status::Met);
        assert!(
            pages.detail.contains("4000 pages / 6000 pages"),
            "{}",
            pages.detail
        );
        assert_eq!(by_metric(Metric::OpsPerSec).status, Status::NotMet);
        let text = text(&v);
        assert_eq!(text.lines().count(), TARGETS.len() + 3, "{text}");
        assert!(text.contains("not measured"), "{text}");
        assert!(text.contains("NOT met"), "{text}");
        assert!(text.contains("0.95×~"), "{text}");
    }

    /// Zero counts (a counter that did not move, a directory with no files) are missing
    /// figures, not a pass of an "at most" target.
    #[test]
    fn zero_counts_are_not_measured() {
        let mut insert = result("journal_bytes_insert", "hrafn", 100.0);
        insert.journal = Some(JournalBytes {
            txns: 100,
            journal_bytes_per_txn: 0.0,
            payload_bytes_per_txn: 0.0,
            page_bytes_per_txn: 0.0,
            pages_per_txn: 0.0,
            ratio: 0.0,
        });
        let mut commit = result("commit_latency", "hrafn", 5_000.0);
        commit.one_key_disk_bytes = Some(0);
        let mut fixed = result("u64_insert_fixed", "hrafn", 1_000.0);
        fixed.pages_in_use = Some(0);
        let mut btree = result("u64_insert_btree", "hrafn", 1_000.0);
        btree.pages_in_use = Some(6_000);
        let v = judge_all(&[insert, commit, fixed, btree]);
        let by = |row: &str, metric: Metric| {
            v.iter()
                .find(|v| v.target.value.row == row && v.target.value.metric == metric)
                .expect("target")
        };
        for verdict in [
            by("journal_bytes_insert", Metric::JournalRatio),
            by("commit_latency", Metric::OneKeyDiskBytes),
            by("u64_insert_fixed", Metric::PagesInUse),
        ] {
            assert!(
                matches!(verdict.status, Status::NotMeasured(_)),
                "{verdict:?}"
            );
        }
    }

    #[test]
    fn sustained_targets_read_the_windows() {
        let mut h = result("sustained_rnd_durable", "hrafn", 1_000.0);
        h.min_window_ratio = Some(0.4);
        let r = result("sustained_rnd_durable", "rocksdb", 900.0);
        let v = judge_all(&[h, r]);
        assert_eq!(
            find(&v, "sustained_rnd_durable", Some("rocksdb")).status,
            Status::Met
        );
        let windows = find(&v, "sustained_rnd_durable", None);
        assert_eq!(windows.status, Status::NotMet);
        assert_eq!(
            target_text(&windows.target),
            "lowest window ≥ 0.50× the median window"
        );
    }

    #[test]
    fn target_texts() {
        assert_eq!(target_text(&vs("read_seq", "lmdb", 0.9)), "≥ 0.90× lmdb");
        assert_eq!(
            target_text(&vs_row("u64_get_fixed", "u64_get_btree", 1.3)),
            "≥ 1.30× hrafn u64_get_btree"
        );
        assert_eq!(
            target_text(&TARGETS[11]),
            "≤ 1.50× disk journal_raw_direct_4k p50"
        );
        assert_eq!(
            target_text(&absolute(
                "bulk_seq_small",
                Metric::OpsPerSec,
                Cmp::AtLeast,
                2.5e6
            )),
            "≥ 2.50M/s"
        );
    }
}
