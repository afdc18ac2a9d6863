//! Test support for steady-state tests of the engine and the stores built on it (the
//! `internals` feature; not a stable API): samples what a user would watch over an hour
//! of load (data file, journal files, syncs, resident memory, progress) and asserts that
//! it settles.

use crate::Environment;
use std::path::Path;
use std::time::{Duration, Instant};

/// One sample of a running environment.
#[derive(Clone, Copy, Debug)]
pub struct Point {
    /// Since the run started.
    pub t: Duration,
    /// The load's own progress counter (samples appended, rounds done, ...).
    pub progress: u64,
    /// The data file's size.
    pub data_file_bytes: u64,
    /// Journal files on disk.
    pub journal_files: u64,
    /// The newest transaction the data file holds.
    pub synced_txn_id: u64,
    /// This process's resident memory.
    pub rss_bytes: u64,
}

/// What a steady state may do.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Growth of the data file allowed after the first third of the run, as a fraction of
    /// its size then (plus 1 MiB, the file's growth granularity).
    pub data_file_growth: f64,
    /// Most journal files on disk.
    pub journal_files: u64,
    /// Most resident memory.
    pub rss_bytes: u64,
    /// Longest stretch without the synced transaction id moving.
    pub sync_stall: Duration,
    /// Progress is compared window by window: none below half the median window.
    pub window: Duration,
}

impl Bounds {
    /// The bounds a store under `options` should keep: after the first third the data
    /// file grows by at most one growth step (a quarter, rounded up to a MiB: a live set
    /// near a step's edge may take one more, a leak takes many), at most 24 journal files,
    /// 512 MiB resident, a sync at least every two sync intervals, no 5 s window below half
    /// the median.
    pub fn for_options(options: &crate::Options) -> Bounds {
        Bounds {
            data_file_growth: 0.25,
            journal_files: 24,
            rss_bytes: 512 << 20,
            sync_stall: 2 * Duration::from_millis(options.sync_interval_ms),
            window: Duration::from_secs(5),
        }
    }
}

/// How often [`record`] samples.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// This process's resident memory (`/proc/self/status`), 0 where it cannot be read.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let kib: u64 = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

/// Journal files on disk in the environment directory `dir`, spares included.
pub fn journal_files_on_disk(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("journal")).map_or(0, |entries| entries.count() as u64)
}

/// Samples `env` (stored in `dir`) every [`SAMPLE_EVERY`] for `run_for`.
pub fn record(
    env: &Environment,
    dir: &Path,
    run_for: Duration,
    progress: &dyn Fn() -> u64,
) -> Vec<Point> {
    let started = Instant::now();
    let mut points = Vec::new();
    while started.elapsed() < run_for {
        std::thread::sleep(SAMPLE_EVERY);
        let stats = env.stats();
        points.push(Point {
            t: started.elapsed(),
            progress: progress(),
            data_file_bytes: stats.data_file_size_bytes,
            journal_files: journal_files_on_disk(dir),
            synced_txn_id: stats.synced_txn_id,
            rss_bytes: rss_bytes(),
        });
    }
    points
}

/// Asserts that the run `points` describe settled within `bounds`, printing what it
/// measured.
///
/// # Panics
/// When a bound is broken, or there are too few points to judge.
pub fn assert_steady(points: &[Point], bounds: &Bounds) {
    assert!(points.len() >= 6, "{} points are too few", points.len());
    let third = &points[points.len() / 3];
    let last = points[points.len() - 1];
    eprintln!(
        "data file {} bytes at {:.0} s, {} at the end",
        third.data_file_bytes,
        third.t.as_secs_f64(),
        last.data_file_bytes
    );
    // One growth step of the file rounds up to a whole granule (`flush::grow_data_file`).
    let granularity_bytes = crate::flush::GROWTH_GRANULARITY_BYTES as f64;
    assert!(
        last.data_file_bytes as f64
            <= third.data_file_bytes as f64 * (1.0 + bounds.data_file_growth) + granularity_bytes,
        "the data file grew from {} to {} bytes after the first third",
        third.data_file_bytes,
        last.data_file_bytes
    );

    let journals_peak = points.iter().map(|p| p.journal_files).max().unwrap_or(0);
    let rss_peak = points.iter().map(|p| p.rss_bytes).max().unwrap_or(0);
    eprintln!(
        "journal files on disk at most {journals_peak}, resident memory at most {rss_peak} bytes"
    );
    assert!(
        journals_peak <= bounds.journal_files,
        "{journals_peak} journal files on disk"
    );
    assert!(
        rss_peak <= bounds.rss_bytes,
        "resident memory reached {rss_peak} bytes"
    );

    let mut since = Duration::ZERO;
    let mut longest = Duration::ZERO;
    for w in points.windows(2) {
        if w[1].synced_txn_id > w[0].synced_txn_id {
            since = w[1].t;
        }
        longest = longest.max(w[1].t - since);
    }
    eprintln!(
        "longest stretch without a sync: {:.1} s",
        longest.as_secs_f64()
    );
    assert!(
        longest <= bounds.sync_stall,
        "no sync for {:.1} s",
        longest.as_secs_f64()
    );

    // Progress per window, from the sample times (windows of whole samples).
    let every = points[1]
        .t
        .saturating_sub(points[0].t)
        .max(Duration::from_millis(1));
    let per_window = ((bounds.window.as_millis() / every.as_millis()) as usize).max(1);
    let windows: Vec<u64> = points
        .chunks_exact(per_window)
        .scan(0u64, |before, w| {
            let end = w[w.len() - 1].progress;
            let n = end - *before;
            *before = end;
            Some(n)
        })
        .collect();
    let median = median(&windows);
    eprintln!("progress per window: {windows:?}");
    assert!(
        windows_below_median(&windows, 0.5).is_empty(),
        "a window fell below half the median {median}: {windows:?}"
    );
}

/// The median of `values` (the upper middle one of an even count; 0 for none).
pub fn median(values: &[u64]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}

/// The windows (`(index, progress)`, from the progress made in each) below `fraction` of
/// the median window: a run whose pace is flat has none.
pub fn windows_below_median(per_window: &[u64], fraction: f64) -> Vec<(usize, u64)> {
    let floor = median(per_window) as f64 * fraction;
    per_window
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, progress)| (progress as f64) < floor)
        .collect()
}

/// Asserts that the p99 of `latencies` (each `(when, how long)`) in the last third of a
/// run of `run_for` is at most `growth` × the first third's plus `slack`, printing both.
///
/// # Panics
/// When it grew more, or a third has no latency.
pub fn assert_latency_flat(
    what: &str,
    latencies: &[(Duration, Duration)],
    run_for: Duration,
    growth: f64,
    slack: Duration,
) {
    let p99 = |from: Duration, to: Duration| {
        let mut v: Vec<Duration> = latencies
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|&(_, l)| l)
            .collect();
        assert!(!v.is_empty(), "no {what} between {from:?} and {to:?}");
        v.sort_unstable();
        v[(v.len() - 1) * 99 / 100]
    };
    let early = p99(Duration::ZERO, run_for / 3);
    let late = p99(run_for * 2 / 3, Duration::MAX);
    eprintln!(
        "{what} p99: {:.2} ms in the first third, {:.2} ms in the last",
        early.as_secs_f64() * 1e3,
        late.as_secs_f64() * 1e3
    );
    assert!(
        late.as_secs_f64() <= early.as_secs_f64() * growth + slack.as_secs_f64(),
        "the {what} p99 grew from {early:?} to {late:?}"
    );
}
