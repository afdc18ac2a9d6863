//! Turns results into the terminal tables.

use std::fmt::Write as _;

use crate::engines;
use crate::result::{BenchResult, MIN_MEASURED_MS, median};
use crate::verdict;
use crate::workloads::{self, Limit, Spec};

/// `1234567.0` -> `1.23M`, `45678.0` -> `45.7k`, `789.0` -> `789`, `0.5` -> `0.50`.
pub fn fmt_rate(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.2}k", v / 1e3)
    } else if a >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Binary-prefixed size: `1536` -> `1.5 KiB`.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Put after a figure whose measured part was shorter than [`MIN_MEASURED_MS`].
pub const UNRELIABLE_MARK: &str = "~";

/// `fmt_rate`, with [`UNRELIABLE_MARK`] for a row marked unreliable.
fn fmt_rate_of(r: &BenchResult) -> String {
    let mut s = fmt_rate(r.ops_per_sec);
    if r.unreliable {
        s.push_str(UNRELIABLE_MARK);
    }
    s
}

/// Renders a table: first column left-aligned, the rest right-aligned.
pub fn render(headers: &[String], rows: &[Vec<String>]) -> String {
    render_with(headers, rows, &[0])
}

/// Renders a table with the columns in `left` left-aligned and the rest right-aligned.
pub fn render_with(headers: &[String], rows: &[Vec<String>], left: &[usize]) -> String {
    let cols = headers.len();
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols) {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        for (i, w) in width.iter().enumerate() {
            let cell = cells.get(i).map(String::as_str).unwrap_or("");
            let pad = w - cell.chars().count();
            if i > 0 {
                out.push_str("  ");
            }
            if left.contains(&i) {
                out.push_str(cell);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            }
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(&mut out, headers);
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    line(&mut out, &rule);
    for row in rows {
        line(&mut out, row);
    }
    out
}

/// All results of one run, looked up by (workload, engine).
pub struct Results<'a> {
    pub all: &'a [BenchResult],
}

impl<'a> Results<'a> {
    pub fn get(&self, workload: &str, engine: &str) -> Option<&'a BenchResult> {
        self.all
            .iter()
            .find(|r| r.workload == workload && r.engine == engine)
    }

    fn ok(&self, workload: &str, engine: &str) -> Option<&'a BenchResult> {
        self.get(workload, engine).filter(|r| r.ok())
    }

    /// Best ops/s among the engines other than hrafn in this row.
    pub fn best_peer(&self, workload: &str) -> Option<f64> {
        self.all
            .iter()
            .filter(|r| r.workload == workload && r.engine != "hrafn" && r.ok())
            .map(|r| r.ops_per_sec)
            .reduce(f64::max)
    }

    /// The best writes/s among the given journal_raw rows that ran.
    fn best_disk(&self, rows: &[&str]) -> Option<f64> {
        rows.iter()
            .filter_map(|w| self.ok(w, workloads::DISK))
            .map(|r| r.ops_per_sec)
            .reduce(f64::max)
    }

    /// Synced 4 KiB writes per second: the better of O_DIRECT|O_DSYNC and write + fdatasync.
    pub fn sync_writes_per_sec(&self) -> Option<f64> {
        self.best_disk(&["journal_raw_direct_4k", "journal_raw_fdatasync_4k"])
    }

    /// Sequential synced bandwidth in bytes/s: the better of the two 16 KiB rows.
    pub fn sync_bandwidth(&self) -> Option<f64> {
        self.best_disk(&["journal_raw_direct_16k", "journal_raw_fdatasync_16k"])
            .map(|w| w * 16384.0)
    }

    /// The disk's ceiling for a durable row, in the row's own unit.
    pub fn limit(&self, spec: &Spec) -> Option<f64> {
        match spec.limit? {
            Limit::PerCommit => {
                let r = self
                    .all
                    .iter()
                    .find(|r| r.workload == spec.name && r.ok() && r.commits.is_some())?;
                let per_commit = r.ops as f64 / r.commits? as f64;
                Some(self.sync_writes_per_sec()? * per_commit)
            }
            Limit::Group => self
                .ok("journal_raw_group_4k", workloads::DISK)
                .map(|r| r.ops_per_sec),
            Limit::Bandwidth => None,
        }
    }

    /// The disk-limit cell for a row: the ceiling in the row's unit for per-commit rows, the
    /// synced append bandwidth for single-commit rows; empty for rows that do not sync.
    pub fn limit_text(&self, spec: &Spec) -> String {
        match spec.limit {
            None => return String::new(),
            Some(Limit::PerCommit) => self.limit(spec).map(fmt_rate),
            Some(Limit::Group) => self.limit(spec).map(|l| format!("{} (group)", fmt_rate(l))),
            Some(Limit::Bandwidth) => self
                .sync_bandwidth()
                .map(|b| format!("{:.0} MB/s (16K sync)", b / 1e6)),
        }
        .unwrap_or_else(|| "not measured".into())
    }

    /// The cell for (row, engine): ops/s, and for hrafn its ratio to the best peer.
    pub fn cell(&self, workload: &str, engine: &str) -> String {
        match self.get(workload, engine) {
            None => "-".into(),
            Some(r) if !r.ok() => "ERR".into(),
            Some(r) => {
                let mut s = fmt_rate_of(r);
                if let Some(best) = self
                    .best_peer(workload)
                    .filter(|b| *b > 0.0 && engine == "hrafn")
                {
                    let _ = write!(s, " ({:.2}×)", r.ops_per_sec / best);
                }
                s
            }
        }
    }
}

/// The engines that appear in `results`, in the canonical column order.
pub fn engines_in(results: &[BenchResult]) -> Vec<&'static str> {
    engines::ALL_ENGINES
        .iter()
        .copied()
        .filter(|e| results.iter().any(|r| r.engine == *e))
        .collect()
}

/// The full text report: throughput table, latencies, disk and memory, raw disk, notes.
pub fn text(results: &[BenchResult], specs: &[&Spec]) -> String {
    let res = Results { all: results };
    let engines = engines_in(results);
    let engine_specs: Vec<&&Spec> = specs.iter().filter(|s| !s.raw_disk).collect();
    let mut out = String::new();

    if !engine_specs.is_empty() {
        let mut headers = vec!["workload".to_string(), "unit/s".to_string()];
        headers.extend(engines.iter().map(|e| e.to_string()));
        headers.push("disk limit".into());
        let rows: Vec<Vec<String>> = engine_specs
            .iter()
            .map(|s| {
                let unit = engines
                    .iter()
                    .find_map(|e| res.ok(s.name, e).map(|r| r.unit.clone()))
                    .unwrap_or_default();
                let mut row = vec![s.name.to_string(), unit];
                row.extend(engines.iter().map(|e| res.cell(s.name, e)));
                row.push(res.limit_text(s));
                row
            })
            .collect();
        out.push_str(
            "Throughput (operations per second; hrafn cells show the ratio to the best peer)\n",
        );
        out.push_str(&render(&headers, &rows));

        let lat_specs: Vec<_> = engine_specs
            .iter()
            .filter(|s| {
                results
                    .iter()
                    .any(|r| r.workload == s.name && r.p50_us.is_some())
            })
            .collect();
        if !lat_specs.is_empty() {
            let mut headers = vec!["workload (p50 / p99 µs)".to_string()];
            headers.extend(engines.iter().map(|e| e.to_string()));
            let rows: Vec<Vec<String>> = lat_specs
                .iter()
                .map(|s| {
                    let mut row = vec![s.name.to_string()];
                    row.extend(engines.iter().map(|e| match res.ok(s.name, e) {
                        Some(r) => match (r.p50_us, r.p99_us) {
                            (Some(a), Some(b)) => format!("{} / {}", fmt_us(a), fmt_us(b)),
                            _ => "-".into(),
                        },
                        None => "-".into(),
                    }));
                    row
                })
                .collect();
            out.push_str("\nLatency per commit or scan\n");
            out.push_str(&render(&headers, &rows));
        }

        let mut headers = vec!["workload (disk / peak RSS)".to_string()];
        headers.extend(engines.iter().map(|e| e.to_string()));
        let rows: Vec<Vec<String>> = engine_specs
            .iter()
            .map(|s| {
                let mut row = vec![s.name.to_string()];
                row.extend(engines.iter().map(|e| match res.ok(s.name, e) {
                    Some(r) => format!(
                        "{} / {}",
                        r.disk_bytes.map(fmt_bytes).unwrap_or_else(|| "-".into()),
                        r.peak_rss_bytes.map(fmt_bytes).unwrap_or_else(|| "-".into())
                    ),
                    None => "-".into(),
                }));
                row
            })
            .collect();
        out.push_str("\nBytes on disk after the run / peak RSS of the child process\n");
        out.push_str(&render(&headers, &rows));
    }

    out.push_str(&sustained_text(&res, &engines));
    out.push_str(&journal_bytes_text(&res));
    out.push_str(&repeated_text(&res, specs, &engines));

    let disk_specs: Vec<_> = specs.iter().filter(|s| s.raw_disk).collect();
    if !disk_specs.is_empty() {
        let headers: Vec<String> = ["journal_raw", "writes/s", "MB/s", "p50 µs", "p99 µs", "how"]
            .map(String::from)
            .into();
        let rows: Vec<Vec<String>> = disk_specs
            .iter()
            .map(|s| match res.get(s.name, workloads::DISK) {
                Some(r) if r.ok() => {
                    let block = if s.name.ends_with("16k") {
                        16384.0
                    } else {
                        4096.0
                    };
                    // The group row counts acknowledged requests, not blocks written.
                    let (rate, mb) = if r.unit == "writes" {
                        (
                            fmt_rate_of(r),
                            format!("{:.1}", r.ops_per_sec * block / 1e6),
                        )
                    } else {
                        (format!("{} {}", fmt_rate_of(r), r.unit), "-".into())
                    };
                    vec![
                        s.name.to_string(),
                        rate,
                        mb,
                        r.p50_us.map(fmt_us).unwrap_or_default(),
                        r.p99_us.map(fmt_us).unwrap_or_default(),
                        r.note.clone().unwrap_or_default(),
                    ]
                }
                Some(_) => vec![s.name.to_string(), "ERR".into()],
                None => vec![s.name.to_string(), "-".into()],
            })
            .collect();
        out.push_str("\nDisk limit (no engine)\n");
        out.push_str(&render_with(&headers, &rows, &[0, 5]));
    }

    let mut notes = Vec::new();
    if engine_specs.iter().any(|s| s.limit.is_some()) {
        notes.push(
            "disk limit: for per-commit rows, synced 4 KiB writes/s (the better journal_raw 4k \
             row) x operations per commit, a ceiling if every commit needs one synced write; for fill_seq, the \
             synced 16 KiB append bandwidth (one large commit is written through the page \
             cache and synced once, so it is not a ceiling there); for concurrent_writers, \
             the same 16 threads with no engine, each request queued to one thread that \
             acknowledges everything queued with one synced 4 KiB write (journal_raw_group_4k)"
                .to_string(),
        );
    }
    for e in &engines {
        notes.push(format!(
            "{e}: durable = {}; non-durable = {}",
            engines::durability_setting(e, true),
            engines::durability_setting(e, false)
        ));
    }
    for r in results.iter().filter(|r| {
        matches!(
            r.workload.as_str(),
            "concurrent_writers" | "sustained_rnd_durable"
        ) && r.ok()
    }) {
        if let Some(n) = &r.note {
            notes.push(format!("{}/{}: {n}", r.workload, r.engine));
        }
    }
    if results.iter().any(|r| r.unreliable) {
        notes.push(format!(
            "{UNRELIABLE_MARK} after a figure: its measured part took less than \
             {MIN_MEASURED_MS:.0} ms, too short to trust (timer, scheduling and cache noise); \
             `unreliable: true` in the JSON. Rows that are cheap to repeat are sized up \
             instead; a larger --scale sizes up the others"
        ));
    }
    // Sized-up rows, grouped by row: `read_seq hrafn x12 lmdb x8`.
    let mut sized: Vec<(String, Vec<String>)> = Vec::new();
    for r in results {
        let Some(passes) = r.passes else { continue };
        let cell = format!("{} x{passes}", r.engine);
        match sized.iter_mut().find(|(w, _)| *w == r.workload) {
            Some((_, cells)) => cells.push(cell),
            None => sized.push((r.workload.clone(), vec![cell])),
        }
    }
    if !sized.is_empty() {
        let rows: Vec<String> = sized
            .iter()
            .map(|(w, cells)| format!("{w} {}", cells.join(" ")))
            .collect();
        notes.push(format!(
            "sized up (one pass was under {MIN_MEASURED_MS:.0} ms, so the measured part was \
             repeated that many times; shorter runs before it are not counted): {}",
            rows.join("; ")
        ));
    }
    for r in results.iter().filter(|r| !r.ok()) {
        let e = r.error.as_deref().unwrap_or("");
        notes.push(format!("ERR {}/{}: {}", r.workload, r.engine, e.trim()));
    }
    if !notes.is_empty() {
        out.push_str("\nNotes\n");
        for n in notes {
            let _ = writeln!(out, "- {n}");
        }
    }
    out
}

/// The sustained row: a summary per engine and its figures per window.
fn sustained_text(res: &Results<'_>, engines: &[&str]) -> String {
    const ROW: &str = "sustained_rnd_durable";
    let runs: Vec<&BenchResult> = engines
        .iter()
        .filter_map(|e| res.ok(ROW, e))
        .filter(|r| r.windows.is_some())
        .collect();
    let Some(first) = runs.first() else {
        return String::new();
    };
    let windows = |r: &BenchResult| r.windows.clone().unwrap_or_default();
    let window_secs = windows(first)
        .first()
        .map_or(0.0, |w| w.t_s.min(first.total_ms / 1e3));
    let mut out = format!(
        "\nSustained: {ROW}, {:.0} s per engine in {window_secs:.0} s windows \
         (durable txns of 100 random keys, default options)\n",
        first.total_ms / 1e3
    );
    let headers: Vec<String> = [
        "engine",
        "entries/s",
        "p50 / p99 µs",
        "lowest / median window",
        "journal files (max)",
        "data file (end)",
        "disk (end)",
    ]
    .map(String::from)
    .into();
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let ws = windows(r);
            let rates: Vec<f64> = ws.iter().map(|w| w.ops_per_sec).collect();
            let last = ws.last();
            vec![
                r.engine.clone(),
                fmt_rate_of(r),
                match (r.p50_us, r.p99_us) {
                    (Some(a), Some(b)) => format!("{} / {}", fmt_us(a), fmt_us(b)),
                    _ => "-".into(),
                },
                match (rates.iter().copied().reduce(f64::min), median(&rates)) {
                    (Some(min), Some(med)) => format!(
                        "{} / {} ({:.2}×)",
                        fmt_rate(min),
                        fmt_rate(med),
                        r.min_window_ratio.unwrap_or(0.0)
                    ),
                    _ => "-".into(),
                },
                r.journal_files_max
                    .map_or_else(|| "-".into(), |n| n.to_string()),
                last.and_then(|w| w.data_file_bytes)
                    .map_or_else(|| "-".into(), fmt_bytes),
                last.and_then(|w| w.disk_bytes)
                    .map_or_else(|| "-".into(), fmt_bytes),
            ]
        })
        .collect();
    out.push_str(&render(&headers, &rows));

    let mut headers = vec!["t (s)".to_string()];
    headers.extend(runs.iter().map(|r| r.engine.clone()));
    let count = runs.iter().map(|r| windows(r).len()).max().unwrap_or(0);
    let rows: Vec<Vec<String>> = (0..count)
        .map(|i| {
            let t = runs
                .iter()
                .find_map(|r| windows(r).get(i).map(|w| w.t_s))
                .unwrap_or(0.0);
            let mut row = vec![format!("{t:.0}")];
            row.extend(runs.iter().map(|r| match windows(r).get(i) {
                None => "-".into(),
                Some(w) => {
                    let mut cell = format!(
                        "{} / {}",
                        fmt_rate(w.ops_per_sec),
                        w.p99_us.map_or_else(|| "-".into(), fmt_us)
                    );
                    if let Some(j) = w.journal_files {
                        let _ = write!(cell, " / {j} files");
                    } else if let Some(b) = w.data_file_bytes {
                        let _ = write!(cell, " / {}", fmt_bytes(b));
                    }
                    cell
                }
            }));
            row
        })
        .collect();
    out.push_str(
        "\nPer window (t = end of window): entries/s / p99 µs / journal files (hrafn: \
         journal/, rocksdb: WAL *.log) or data file size (lmdb, redb)\n",
    );
    out.push_str(&render_with(&headers, &rows, &[]));
    out
}

/// The journal_bytes rows: bytes journaled per transaction against whole pages.
fn journal_bytes_text(res: &Results<'_>) -> String {
    let rows: Vec<Vec<String>> = ["journal_bytes_insert", "journal_bytes_update"]
        .iter()
        .filter_map(|row| {
            let r = res.ok(row, "hrafn")?;
            let j = r.journal.as_ref()?;
            let target = verdict::TARGETS
                .iter()
                .find(|t| t.value.row == *row && t.value.metric == verdict::Metric::JournalRatio)
                .map(verdict::target_text)
                .unwrap_or_default();
            Some(vec![
                row.to_string(),
                j.txns.to_string(),
                format!("{:.1}", j.pages_per_txn),
                fmt_bytes(j.page_bytes_per_txn as u64),
                fmt_bytes(j.journal_bytes_per_txn as u64),
                fmt_bytes(j.payload_bytes_per_txn as u64),
                format!("{:.3}×", j.ratio),
                target,
            ])
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let headers: Vec<String> = [
        "hrafn (peers: -)",
        "txns",
        "pages/txn",
        "full-page bytes/txn",
        "journal bytes/txn",
        "diff bytes/txn",
        "ratio",
        "target",
    ]
    .map(String::from)
    .into();
    let mut out = String::from(
        "\nJournal bytes per transaction (100 random keys per durable txn; full-page bytes = \
         pages written x 8192; ratio = journal bytes / full-page bytes)\n",
    );
    out.push_str(&render_with(&headers, &rows, &[0, 7]));
    out
}

/// Every run of the rows run several times (the tables show the median run).
fn repeated_text(res: &Results<'_>, specs: &[&Spec], engines: &[&str]) -> String {
    let rows: Vec<Vec<String>> = specs
        .iter()
        .filter(|s| s.rounds > 1)
        .filter(|s| {
            engines.iter().any(|e| {
                res.ok(s.name, e)
                    .is_some_and(|r| r.runs_ops_per_sec.len() > 1)
            })
        })
        .map(|s| {
            let mut row = vec![s.name.to_string()];
            row.extend(engines.iter().map(|e| {
                match res.ok(s.name, e) {
                    Some(r) if !r.runs_ops_per_sec.is_empty() => r
                        .runs_ops_per_sec
                        .iter()
                        .map(|v| fmt_rate(*v))
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => "-".into(),
                }
            }));
            row
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut headers = vec!["workload (each run, ops/s)".to_string()];
    headers.extend(engines.iter().map(|e| e.to_string()));
    let mut out = String::from(
        "\nRows run several times, engines taking turns: every run, lowest first (the tables \
         show the median run)\n",
    );
    out.push_str(&render(&headers, &rows));
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rates_are_short() {
        assert_eq!(fmt_rate(1_234_567.0), "1.23M");
        assert_eq!(fmt_rate(45_678.0), "45.7k");
        assert_eq!(fmt_rate(4_567.0), "4.57k");
        assert_eq!(fmt_rate(789.4), "789");
        assert_eq!(fmt_rate(0.5), "0.50");
        assert_eq!(fmt_rate(2.5e9), "2.50G");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
        assert_eq!(fmt_bytes(3 << 20), "3.0 MiB");
    }

    fn result(w: &str, e: &str, ops_per_sec: f64) -> BenchResult {
        let ops = ops_per_sec as u64;
        BenchResult::measured(w, e, 1.0, ops, "entries", Duration::from_secs(1))
    }

    #[test]
    fn hrafn_cell_shows_ratio_to_best_peer() {
        let all = vec![
            result("fill_seq", "hrafn", 1_020_000.0),
            result("fill_seq", "lmdb", 1_200_000.0),
            result("fill_seq", "redb", 600_000.0),
            BenchResult::failed("read_seq", "lmdb", 1.0, "boom".into()),
            result("read_seq", "hrafn", 5_000.0),
        ];
        let res = Results { all: &all };
        assert_eq!(res.cell("fill_seq", "hrafn"), "1.02M (0.85×)");
        assert_eq!(res.cell("fill_seq", "lmdb"), "1.20M");
        assert_eq!(res.cell("read_seq", "lmdb"), "ERR");
        // No working peer in the row: no ratio.
        assert_eq!(res.cell("read_seq", "hrafn"), "5.00k");
        assert_eq!(res.cell("read_seq", "redb"), "-");
    }

    #[test]
    fn short_rows_are_marked_in_the_tables() {
        let mut short = result("read_seq", "hrafn", 2_000_000.0);
        short.unreliable = true;
        let all = vec![short, result("read_seq", "lmdb", 1_000_000.0)];
        let res = Results { all: &all };
        assert_eq!(res.cell("read_seq", "hrafn"), "2.00M~ (2.00×)");
        assert_eq!(res.cell("read_seq", "lmdb"), "1.00M");
        let spec = workloads::spec("read_seq").expect("spec");
        let text = text(&all, &[spec]);
        assert!(text.contains("- ~ after a figure"), "{text}");
        assert!(text.contains("`unreliable: true`"), "{text}");
        // Nothing short: no note.
        let all = vec![result("read_seq", "lmdb", 1_000_000.0)];
        assert!(!super::text(&all, &[spec]).contains("~ after a figure"));
    }

    #[test]
    fn sustained_journal_bytes_and_repeated_rows_get_their_tables() {
        use crate::result::{JournalBytes, Window};
        let window = |t_s: f64, ops_per_sec: f64, journal_files: Option<u64>| Window {
            t_s,
            ops_per_sec,
            p99_us: Some(900.0),
            journal_files,
            data_file_bytes: Some(1 << 20),
            disk_bytes: Some(2 << 20),
        };
        let mut h = result("sustained_rnd_durable", "hrafn", 90_000.0);
        h.windows = Some(vec![
            window(1.0, 100_000.0, Some(4)),
            window(2.0, 80_000.0, Some(6)),
        ]);
        h.min_window_ratio = Some(0.89);
        h.journal_files_max = Some(6);
        let mut l = result("sustained_rnd_durable", "lmdb", 20_000.0);
        l.windows = Some(vec![
            window(1.0, 20_000.0, None),
            window(2.0, 20_000.0, None),
        ]);
        l.min_window_ratio = Some(1.0);
        let mut j = result("journal_bytes_update", "hrafn", 900.0);
        j.journal = Some(JournalBytes {
            txns: 100,
            journal_bytes_per_txn: 40_960.0,
            payload_bytes_per_txn: 40_000.0,
            page_bytes_per_txn: 819_200.0,
            pages_per_txn: 100.0,
            ratio: 0.05,
        });
        let mut r = result("read_seq", "hrafn", 2_000.0);
        r.runs_ops_per_sec = vec![1_000.0, 2_000.0, 3_000.0];
        let all = vec![h, l, j, r];
        let specs: Vec<&Spec> = ["sustained_rnd_durable", "journal_bytes_update", "read_seq"]
            .iter()
            .map(|n| workloads::spec(n).expect("spec"))
            .collect();
        let text = text(&all, &specs);
        assert!(text.contains("80.0k / 90.0k (0.89×)"), "{text}");
        assert!(text.contains("100.0k / 900 / 4 files"), "{text}");
        assert!(text.contains("20.0k / 900 / 1.0 MiB"), "{text}");
        let line = text
            .lines()
            .find(|l| l.starts_with("journal_bytes_update") && l.contains("0.050×"))
            .expect("journal bytes line");
        assert!(
            line.contains("800.0 KiB") && line.contains("40.0 KiB"),
            "{line}"
        );
        assert!(line.contains("≤ 0.20× whole pages"), "{line}");
        assert!(text.contains("1.00k 2.00k 3.00k"), "{text}");
        // The peers' cells of a Hrafn-only row.
        let res = Results { all: &all };
        assert_eq!(res.cell("journal_bytes_update", "lmdb"), "-");
    }

    #[test]
    fn table_columns_line_up() {
        let headers: Vec<String> = vec!["workload".into(), "hrafn".into(), "lmdb".into()];
        let rows = vec![
            vec!["fill_seq".into(), "1.02M (0.85×)".into(), "1.20M".into()],
            vec!["read_seq".into(), "-".into(), "12.3k".into()],
        ];
        let t = render(&headers, &rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|w| *w == widths[0]), "{t}");
        assert!(lines[2].ends_with("1.02M (0.85×)  1.20M"), "{t}");
        assert!(lines[3].starts_with("read_seq"), "{t}");
    }

    #[test]
    fn per_commit_limit_scales_by_ops_per_commit() {
        let mut fill = result("fill_rnd_tx_durable", "lmdb", 50_000.0);
        fill.commits = Some(fill.ops / 100);
        let mut disk = result("journal_raw_direct_4k", workloads::DISK, 1_000.0);
        disk.unit = "writes".into();
        let all = vec![fill, disk];
        let res = Results { all: &all };
        let spec = workloads::spec("fill_rnd_tx_durable").expect("spec");
        assert_eq!(res.limit(spec), Some(100_000.0));
        let text = text(&all, &[spec]);
        assert!(text.contains("100.0k"), "{text}");
    }

    #[test]
    fn concurrent_writers_limit_is_the_no_engine_group_loop() {
        let mut cw = result("concurrent_writers", "hrafn", 50_000.0);
        cw.commits = Some(cw.ops);
        let mut raw = result("journal_raw_direct_4k", workloads::DISK, 10_000.0);
        raw.unit = "writes".into();
        let mut group = result("journal_raw_group_4k", workloads::DISK, 60_000.0);
        group.unit = "commits".into();
        let all = vec![cw, raw, group];
        let res = Results { all: &all };
        let spec = workloads::spec("concurrent_writers").expect("spec");
        assert_eq!(res.limit(spec), Some(60_000.0));
        let specs = [
            spec,
            workloads::spec("journal_raw_direct_4k").expect("spec"),
            workloads::spec("journal_raw_group_4k").expect("spec"),
        ];
        let text = text(&all, &specs);
        assert!(text.contains("60.0k (group)"), "{text}");
        // The group row's rate is requests, so no MB/s figure is derived from it.
        let line = text
            .lines()
            .find(|l| l.starts_with("journal_raw_group_4k"))
            .expect("group row");
        assert!(line.contains("60.0k commits"), "{line}");
    }
}
