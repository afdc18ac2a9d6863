//! `hrafn ts` against real stores: ingest, query, export round trips, labels, compaction,
//! retention, and how bad input fails.

mod common;
use common::{hrafn, ok, path, stderr, stdout};

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs hrafn with `input` on standard input.
fn hrafn_with_input(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hrafn"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hrafn");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input.as_bytes()).expect("feed stdin");
    }
    child.wait_with_output().expect("wait for hrafn")
}

/// A failure must be a message, not a crash.
fn assert_clean_failure(o: &Output) {
    assert!(!o.status.success(), "{o:?}");
    let err = stderr(o);
    assert!(
        err.starts_with("hrafn: ") || err.contains("error:"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("RUST_BACKTRACE"), "{err}");
}

const METRICS: &str = "\
# HELP http_requests_total Requests served.
# TYPE http_requests_total counter
http_requests_total{job=\"api\",code=\"200\"} 10 1000
http_requests_total{job=\"api\",code=\"500\"} 1 1000
http_requests_total{job=\"web\",code=\"200\"} 5 1000
up{job=\"api\"} 1 1000

http_requests_total{job=\"api\",code=\"200\"} 20 2000
http_requests_total{job=\"api\",code=\"500\"} 3 2000
http_requests_total{job=\"web\",code=\"200\"} 7 2000
up{job=\"api\"} 0 2000
temperature{room=\"a \\\"quoted\\\", odd\\\\room\"} NaN 1000
temperature{room=\"a \\\"quoted\\\", odd\\\\room\"} -1.25e-7 2000
up{job=\"api\"} 0.5 1500
";

/// A store made from [`METRICS`], ingested in calls of 3 samples: the late `up` sample
/// comes in a call after the one holding `up`'s sample at 2000, so it is out of order (in
/// one call, a series' samples are taken in time order).
fn fixture() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("metrics.prom");
    std::fs::write(&file, METRICS).expect("write metrics");
    let db = dir.path().join("db");
    let summary = ok(&["ts", "ingest", path(&db), path(&file), "--batch", "3"]);
    assert!(
        summary.starts_with(
            "samples read 11, appended 10, out of order 1, too old 0, series created 5, elapsed "
        ),
        "{summary}"
    );
    assert!(summary.ends_with(" samples/s\n"), "{summary}");
    let db = path(&db).to_string();
    (dir, db)
}

#[test]
fn ingested_samples_query_raw_and_by_step() {
    let (_dir, db) = fixture();
    let raw = ok(&[
        "ts",
        "query",
        &db,
        "http_requests_total{job=\"api\"}",
        "--start",
        "0",
        "--end",
        "1500",
    ]);
    assert_eq!(
        raw,
        "http_requests_total{code=\"200\",job=\"api\"} 10 1000\n\
         http_requests_total{code=\"500\",job=\"api\"} 1 1000\n"
    );
    // The out-of-order sample is read back in its place.
    let up = ok(&["ts", "query", &db, "up", "--start", "0", "--end", "9999"]);
    assert_eq!(
        up,
        "up{job=\"api\"} 1 1000\nup{job=\"api\"} 0.5 1500\nup{job=\"api\"} 0 2000\n"
    );
    // Raw samples as JSON, one element per series with samples in the range.
    let json = ok(&[
        "ts",
        "query",
        &db,
        "http_requests_total",
        "--start",
        "0",
        "--end",
        "1500",
        "--format",
        "json",
    ]);
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("JSON output");
    assert_eq!(
        parsed,
        serde_json::json!([
            { "labels": { "__name__": "http_requests_total", "code": "200", "job": "api" },
              "points": [[1000, 10.0]] },
            { "labels": { "__name__": "http_requests_total", "code": "500", "job": "api" },
              "points": [[1000, 1.0]] },
            { "labels": { "__name__": "http_requests_total", "code": "200", "job": "web" },
              "points": [[1000, 5.0]] }
        ])
    );

    let summed = ok(&[
        "ts",
        "query",
        &db,
        "http_requests_total",
        "--start",
        "1000",
        "--end",
        "2000",
        "--step",
        "1000",
        "--agg",
        "sum",
        "--by",
        "job",
    ]);
    assert_eq!(
        summed,
        "{job=\"api\"}\n1000 11\n2000 23\n{job=\"web\"}\n1000 5\n2000 7\n"
    );

    let json = ok(&[
        "ts",
        "query",
        &db,
        "http_requests_total{code=~\"2..\"}",
        "--start",
        "1000",
        "--end",
        "2000",
        "--step",
        "1s",
        "--agg",
        "max",
        "--format",
        "json",
    ]);
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("JSON output");
    assert_eq!(
        parsed,
        serde_json::json!([{ "labels": {}, "points": [[1000, 10.0], [2000, 20.0]] }])
    );

    let rate = ok(&[
        "ts",
        "query",
        &db,
        "http_requests_total{job=\"api\",code=\"200\"}",
        "--start",
        "2000",
        "--end",
        "2000",
        "--step",
        "1000",
        "--rate",
        "2s",
    ]);
    assert_eq!(
        rate,
        "http_requests_total{code=\"200\",job=\"api\"}\n2000 10\n"
    );

    // Raw samples as JSON: NaN has no JSON number, so it is a string.
    let json = ok(&[
        "ts",
        "query",
        &db,
        "temperature",
        "--start",
        "0",
        "--end",
        "5000",
        "--format",
        "json",
    ]);
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("JSON output");
    assert_eq!(
        parsed,
        serde_json::json!([{
            "labels": { "__name__": "temperature", "room": "a \"quoted\", odd\\room" },
            "points": [[1000, "NaN"], [2000, -1.25e-7]]
        }])
    );

    let csv = ok(&[
        "ts", "query", &db, "up", "--start", "1500", "--end", "1500", "--format", "csv",
    ]);
    assert_eq!(
        csv,
        "series,timestamp_ms,value\n\"up{job=\"\"api\"\"}\",1500,0.5\n"
    );
}

#[test]
fn export_ingests_back_to_the_same_text_in_both_formats() {
    let (dir, db) = fixture();
    let all = "{__name__=~\".+\"}";
    let first = ok(&["ts", "export", &db, all, "--start", "0", "--end", "now"]);
    assert_eq!(first.lines().count(), 11, "{first}");
    assert!(first.contains(" NaN 1000\n"), "{first}");
    // Without a range, export writes everything.
    assert_eq!(ok(&["ts", "export", &db, all]), first);

    let file = dir.path().join("export.prom");
    std::fs::write(&file, &first).expect("write export");
    let copy = dir.path().join("copy");
    ok(&["ts", "ingest", path(&copy), path(&file)]);
    let second = ok(&["ts", "export", path(&copy), all]);
    assert_eq!(second, first);

    // CSV out, CSV in (chosen by the file's extension), the same samples.
    let csv = ok(&["ts", "export", &db, all, "--format", "csv"]);
    assert!(csv.starts_with("series,timestamp_ms,value\n"), "{csv}");
    let file = dir.path().join("export.csv");
    std::fs::write(&file, &csv).expect("write export");
    let from_csv = dir.path().join("from-csv");
    let summary = ok(&["ts", "ingest", path(&from_csv), path(&file)]);
    assert!(
        summary.starts_with("samples read 11, appended 11,"),
        "{summary}"
    );
    assert_eq!(ok(&["ts", "export", path(&from_csv), all]), first);
    assert_eq!(
        ok(&["ts", "export", path(&from_csv), all, "--format", "csv"]),
        csv
    );
}

#[test]
fn csv_and_standard_input_ingest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let d = path(&db);
    let input = "series,timestamp_ms,value\n\
                 \"disk_free{dev=\"\"sda\"\"}\",1000,40\n\
                 disk_free,1000,7\n\
                 \"disk_free{dev=\"\"sda\"\"}\",2000,+Inf\n";
    let o = hrafn_with_input(&["ts", "ingest", d, "-", "--format", "csv"], input);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(
            "samples read 3, appended 3, out of order 0, too old 0, series created 2,"
        ),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        ok(&["ts", "export", d, "disk_free"]),
        "disk_free{dev=\"sda\"} 40 1000\ndisk_free{dev=\"sda\"} +Inf 2000\ndisk_free 7 1000\n"
    );

    // Exposition lines without a timestamp are stamped now; `now-` times find them.
    let o = hrafn_with_input(&["ts", "ingest", d, "-"], "probe_ok 1\n");
    assert!(o.status.success(), "{}", stderr(&o));
    let recent = ok(&[
        "ts", "query", d, "probe_ok", "--start", "now-1h", "--end", "now",
    ]);
    assert!(recent.starts_with("probe_ok 1 "), "{recent}");
    let stamped: i64 = recent
        .trim_end()
        .rsplit(' ')
        .next()
        .and_then(|t| t.parse().ok())
        .expect("a timestamp");
    assert!(stamped > 1_600_000_000_000, "{recent}");
    let o = hrafn_with_input(
        &["ts", "ingest", d, "-", "--default-timestamp-ms", "5"],
        "probe_old 2\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        ok(&["ts", "query", d, "probe_old", "--start", "0", "--end", "10"]),
        "probe_old 2 5\n"
    );
}

#[test]
fn bad_input_fails_with_a_message() {
    let (dir, db) = fixture();

    let o = hrafn(&["ts", "query", &db, "up{job=", "--start", "0", "--end", "1"]);
    assert_clean_failure(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("selector \"up{job=\""),
        "{}",
        stderr(&o)
    );
    let o = hrafn(&["ts", "export", &db, "{job=~\".*\"}"]);
    assert_clean_failure(&o);
    assert_eq!(o.status.code(), Some(2));

    let bad = dir.path().join("bad.prom");
    std::fs::write(&bad, "up 1 1000\nup{job=\"x\" 2 2000\n").expect("write");
    let o = hrafn(&["ts", "ingest", &db, path(&bad)]);
    assert_clean_failure(&o);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("bad.prom"), "{}", stderr(&o));
    assert!(stderr(&o).contains("line 2"), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing was stored"), "{}", stderr(&o));

    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "series,value\nup,1\n").expect("write");
    let o = hrafn(&["ts", "ingest", &db, path(&bad)]);
    assert_clean_failure(&o);
    assert!(stderr(&o).contains("line 1"), "{}", stderr(&o));

    let missing = dir.path().join("missing.prom");
    let fresh = dir.path().join("fresh");
    let o = hrafn(&["ts", "ingest", path(&fresh), path(&missing)]);
    assert_clean_failure(&o);
    assert!(!fresh.exists(), "a failed ingest made a store");

    // Times, steps and ranges are checked before anything opens.
    for args in [
        &["--start", "yesterday", "--end", "1"][..],
        &["--start", "5", "--end", "1"],
        &["--start", "0", "--end", "1", "--step", "0"],
        &["--start", "0", "--end", "1", "--by", "job"],
    ] {
        let mut all = vec!["ts", "query", &db, "up"];
        all.extend_from_slice(args);
        let o = hrafn(&all);
        assert_clean_failure(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }

    // A directory without a store is not made into one by a read.
    let empty = tempfile::tempdir().expect("tempdir");
    let o = hrafn(&["ts", "labels", path(empty.path())]);
    assert_clean_failure(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no time-series store"),
        "{}",
        stderr(&o)
    );
    let left = std::fs::read_dir(empty.path()).expect("read dir").count();
    assert_eq!(left, 0, "the empty directory was written to");
    let nowhere = dir.path().join("nowhere");
    let o = hrafn(&["ts", "labels", path(&nowhere)]);
    assert_clean_failure(&o);
    assert!(!nowhere.exists());
    // Nor is an environment of other trees.
    let other = dir.path().join("other");
    drop(hrafn::Environment::open(&other, hrafn::Options::default()).expect("open"));
    let o = hrafn(&["ts", "labels", path(&other)]);
    assert_clean_failure(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no time-series store"),
        "{}",
        stderr(&o)
    );

    // Reading commands open the store read-only, so they work beside a writer; a writing
    // command is kept out.
    let writer = hrafn::Environment::open(&db, hrafn::Options::default()).expect("open");
    assert_eq!(ok(&["ts", "labels", &db, "job"]), "api\nweb\n");
    let o = hrafn(&["ts", "compact", &db]);
    assert_clean_failure(&o);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("open in another process"),
        "{}",
        stderr(&o)
    );
    drop(writer);

    // Nothing of the failed ingests is half there: the store reads as before.
    assert_eq!(
        ok(&["ts", "query", &db, "up", "--start", "0", "--end", "1000"]),
        "up{job=\"api\"} 1 1000\n"
    );
}

#[test]
fn labels_list_names_and_values() {
    let (_dir, db) = fixture();
    assert_eq!(ok(&["ts", "labels", &db]), "__name__\ncode\njob\nroom\n");
    assert_eq!(ok(&["ts", "labels", &db, "job"]), "api\nweb\n");
    assert_eq!(
        ok(&["ts", "labels", &db, "__name__"]),
        "http_requests_total\ntemperature\nup\n"
    );
    assert_eq!(ok(&["ts", "labels", &db, "nope"]), "");
}

/// A store with 1000 samples of one series (eight sealed chunks of 120 and an open one),
/// a series that is all old, and an out-of-order sample.
fn long_fixture() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::new();
    for i in 0..1000 {
        text.push_str(&format!("load{{host=\"a\"}} {i} {}\n", i * 1000));
    }
    for i in 0..5 {
        text.push_str(&format!("old_metric {i} {}\n", i * 10));
    }
    let file = dir.path().join("long.prom");
    std::fs::write(&file, text).expect("write");
    let db = dir.path().join("db");
    let summary = ok(&["ts", "ingest", path(&db), path(&file)]);
    assert!(
        summary.starts_with("samples read 1005, appended 1005, out of order 0,"),
        "{summary}"
    );
    // Late, in a call of its own (in one call, a series' samples are taken in time order).
    let late = dir.path().join("late.prom");
    std::fs::write(&late, "load{host=\"a\"} 0.5 150500\n").expect("write");
    let summary = ok(&["ts", "ingest", path(&db), path(&late)]);
    assert!(
        summary.starts_with("samples read 1, appended 0, out of order 1,"),
        "{summary}"
    );
    let db = path(&db).to_string();
    (dir, db)
}

fn field(report: &str, name: &str) -> u64 {
    report
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('\t')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name:?} in {report}"))
}

#[test]
fn compact_merges_chunks_and_keeps_the_samples() {
    let (_dir, db) = long_fixture();
    let all = "{__name__=~\".+\"}";
    let before = ok(&["ts", "export", &db, all]);
    let report = ok(&["ts", "compact", &db]);
    assert_eq!(field(&report, "series rewritten"), 1, "{report}");
    assert!(
        field(&report, "chunks written") < field(&report, "chunks rewritten"),
        "{report}"
    );
    assert_eq!(field(&report, "out-of-order samples folded"), 1, "{report}");
    assert_eq!(ok(&["ts", "export", &db, all]), before);
    // Nothing left to do the second time.
    let again = ok(&["ts", "compact", &db]);
    assert_eq!(field(&again, "series rewritten"), 0, "{again}");
}

#[test]
fn retain_drops_old_chunks_and_empty_series() {
    let (_dir, db) = long_fixture();
    let report = ok(&["ts", "retain", &db, "--before", "500000"]);
    assert_eq!(field(&report, "cutoff"), 500_000, "{report}");
    assert!(field(&report, "chunks dropped") > 0, "{report}");
    assert_eq!(field(&report, "series deleted"), 1, "{report}");
    let left = ok(&["ts", "export", &db, "load"]);
    let times: Vec<i64> = left
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    // Every sample from the cutoff on stays; a chunk straddling it stays whole.
    assert!(
        times.iter().filter(|&&t| t >= 500_000).count() == 500,
        "{left}"
    );
    assert!(times.len() < 1000, "{left}");
    assert_eq!(ok(&["ts", "labels", &db, "__name__"]), "load\n");

    // A cutoff later than now (microseconds, `now+`) is refused and drops nothing.
    for future in ["now+1d", "1700000000000000"] {
        let refused = hrafn(&["ts", "retain", &db, "--before", future]);
        assert_eq!(refused.status.code(), Some(2), "{future}: {refused:?}");
        assert!(stderr(&refused).contains("later than now"), "{refused:?}");
    }
    assert_eq!(ok(&["ts", "labels", &db, "__name__"]), "load\n");

    // A `now-` cutoff well after all samples leaves nothing.
    let report = ok(&["ts", "retain", &db, "--before", "now-30d"]);
    assert!(field(&report, "cutoff") > 1_600_000_000_000, "{report}");
    assert_eq!(field(&report, "series deleted"), 1, "{report}");
    assert_eq!(ok(&["ts", "labels", &db]), "");
}

/// An export is a copy to ingest back: one whose reader closes the pipe early is
/// incomplete, and `hrafn ts export` fails (it exited 0, as a cut `query` does).
#[test]
fn an_export_into_a_closed_pipe_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::new();
    for i in 0..40_000 {
        text.push_str(&format!("load{{host=\"a\"}} {i} {}\n", i * 1000));
    }
    let file = dir.path().join("long.prom");
    std::fs::write(&file, text).expect("write");
    let db = dir.path().join("db");
    ok(&["ts", "ingest", path(&db), path(&file)]);
    let mut export = Command::new(env!("CARGO_BIN_EXE_hrafn"))
        .args(["ts", "export", path(&db), "load"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn export");
    {
        use std::io::Read;
        let mut first = [0u8; 64];
        export
            .stdout
            .take()
            .expect("stdout")
            .read_exact(&mut first)
            .expect("the export begins");
    } // the reader goes away
    let out = export.wait_with_output().expect("export");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(stderr(&out).contains("incomplete"), "{out:?}");
}

/// Samples older than the out-of-order window are dropped with a word on standard error,
/// and `--out-of-order-window` widens it so that older data can be backfilled.
#[test]
fn ingest_backfills_with_a_wider_out_of_order_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let newest = dir.path().join("newest.prom");
    std::fs::write(&newest, "up 1 36000000\n").expect("write");
    ok(&["ts", "ingest", path(&db), path(&newest)]);
    let old = dir.path().join("old.prom");
    let text: String = (0..9)
        .map(|h| format!("up 0 {}\n", h * 3_600_000))
        .collect();
    std::fs::write(&old, text).expect("write");
    let dropped = hrafn(&["ts", "ingest", path(&db), path(&old)]);
    assert!(dropped.status.success(), "{dropped:?}");
    assert!(
        stdout(&dropped).starts_with("samples read 9, appended 0, out of order 0, too old 9,"),
        "{dropped:?}"
    );
    assert!(
        stderr(&dropped).contains("--out-of-order-window"),
        "{dropped:?}"
    );
    let summary = ok(&[
        "ts",
        "ingest",
        path(&db),
        path(&old),
        "--out-of-order-window",
        "1d",
    ]);
    assert!(
        summary.starts_with("samples read 9, appended 0, out of order 9, too old 0,"),
        "{summary}"
    );
    let all = ok(&[
        "ts",
        "query",
        path(&db),
        "up",
        "--start",
        "0",
        "--end",
        "36000000",
    ]);
    assert_eq!(all.lines().count(), 10, "{all}");
}
