//! `hrafn ts`: the time-series store of `hrafn-timeseries` in an environment: ingest text,
//! query, export, list labels, compact chunks and drop old data.
//!
//! `ingest` opens the environment for writing (made if missing), as do the commands that
//! maintain the store (compaction, retention): no other process may have it open for
//! writing meanwhile. The reading commands open an existing store read-only, so they work
//! while another process writes, and refuse a directory without a store rather than make
//! one.

use crate::{Failure, fail, require_dir};
use clap::{Subcommand, ValueEnum};

use hrafn_timeseries::labels::{METRIC_NAME, valid_name, write_quoted};
use hrafn_timeseries::text::{self, ParsedSample};
use hrafn_timeseries::{
    Aggregation, AppendReport, Error as TsError, Labels, QuerySeries, RangeQuery, Sample, Store,
    StoreOptions,
};
use std::fmt::Display;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Subcommand)]
pub(crate) enum TsCommand {
    /// Reads samples from FILE (`-`: standard input) into the store in DIR (made if
    /// missing), in batches, and prints what the appends did.
    Ingest {
        dir: PathBuf,
        file: PathBuf,
        /// The input's format [default: `csv` for a `.csv` file, else `prom`].
        #[arg(long, value_enum)]
        format: Option<SampleFormat>,
        /// Samples per append (one transaction each).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        batch: u64,
        /// Timestamp of exposition lines that have none [default: now].
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        default_timestamp_ms: Option<i64>,
        /// How far behind its newest sample a series still takes samples (ms, or a
        /// duration such as 1h, 30d); older ones are counted as too old and dropped.
        /// Widen it to backfill, e.g. an export into a store with newer data [default: 1h].
        #[arg(
            long = "out-of-order-window",
            value_name = "DURATION",
            value_parser = parse_duration
        )]
        out_of_order_window_ms: Option<i64>,
    },
    /// Prints the series SELECTOR selects. Without `--step`: their samples in
    /// [START, END]; with it: their values (or rates, or aggregates) at each step.
    Query {
        dir: PathBuf,
        selector: String,
        /// First time (included).
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        start: i64,
        /// Last time (included).
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        end: i64,
        /// Distance between steps (ms, or a duration such as 15s, 1m).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        step: Option<i64>,
        /// Take each series' per-second rate over this window instead of its value.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "step")]
        rate: Option<i64>,
        /// Combine the series of each group at each step.
        #[arg(long, value_enum, requires = "step")]
        agg: Option<Agg>,
        /// Labels that form the groups of `--agg` (comma-separated; none: one group).
        #[arg(long, value_name = "LABELS", value_delimiter = ',', requires = "agg")]
        by: Vec<String>,
        #[arg(long, value_enum, default_value_t = QueryFormat::Text)]
        format: QueryFormat,
    },
    /// Writes the samples of the series SELECTOR selects to standard output in a format
    /// `ingest` reads back.
    Export {
        dir: PathBuf,
        selector: String,
        /// First time (included) [default: the earliest].
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        start: Option<i64>,
        /// Last time (included) [default: the latest].
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        end: Option<i64>,
        #[arg(long, value_enum, default_value_t = SampleFormat::Prom)]
        format: SampleFormat,
    },
    /// Lists the label names in use or, given NAME, the values that label takes.
    Labels { dir: PathBuf, name: Option<String> },
    /// Rewrites each series' sealed chunks into fewer, fuller ones and folds in its
    /// out-of-order samples; a series' leading full chunks stay as they are, so a run
    /// rewrites what came since the last. (The environment's file does not shrink:
    /// `hrafn compact` does that.)
    Compact { dir: PathBuf },
    /// Drops the data older than `--before`: whole chunks, and series left empty.
    Retain {
        dir: PathBuf,
        /// The cutoff: ms since the Unix epoch or a `now-` form such as now-30d; a time
        /// later than now is refused.
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        before: i64,
    },
}

/// Sample formats that round-trip through `ingest` and `export`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SampleFormat {
    /// The Prometheus text exposition format: `metric{label="value"} value timestamp_ms`.
    Prom,
    /// CSV with the header `series,timestamp_ms,value`.
    Csv,
}

/// How `query` prints.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum QueryFormat {
    /// Raw samples: exposition lines; steps: a series line, then `timestamp value` lines.
    Text,
    /// One JSON array of {"labels": {...}, "points": [[timestamp, value], ...]}.
    Json,
    /// CSV with the header `series,timestamp_ms,value`.
    Csv,
}

/// An aggregation across series.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Agg {
    Sum,
    Avg,
    Min,
    Max,
    Count,
}

impl From<Agg> for Aggregation {
    fn from(a: Agg) -> Aggregation {
        match a {
            Agg::Sum => Aggregation::Sum,
            Agg::Avg => Aggregation::Avg,
            Agg::Min => Aggregation::Min,
            Agg::Max => Aggregation::Max,
            Agg::Count => Aggregation::Count,
        }
    }
}

pub(crate) fn run(command: TsCommand, out: &mut impl Write) -> Result<(), Failure> {
    match command {
        TsCommand::Ingest {
            dir,
            file,
            format,
            batch,
            default_timestamp_ms,
            out_of_order_window_ms,
        } => {
            let default_ts = match default_timestamp_ms {
                Some(t) => t,
                None => now_ms().map_err(|e| fail(3, e))?,
            };
            let batch = usize::try_from(batch).unwrap_or(usize::MAX);
            let options = StoreOptions {
                out_of_order_window_ms: out_of_order_window_ms
                    .unwrap_or(StoreOptions::default().out_of_order_window_ms),
                ..StoreOptions::default()
            };
            ingest(&dir, &file, format, batch, default_ts, options, out)
        }
        TsCommand::Query {
            dir,
            selector,
            start,
            end,
            step,
            rate,
            agg,
            by,
            format,
        } => {
            check_range(start, end)?;
            let matchers = selector_matchers(&selector)?;
            let store = open_existing(&dir, false)?;
            let Some(step) = step else {
                return write_buffered(out, "querying", |w| {
                    write_raw(w, format, |each| {
                        store.select_each(&matchers, start, end, each)
                    })
                });
            };
            let mut query = RangeQuery::new(&selector, start, end, step)
                .map_err(|e| ts_fail(e, format_args!("selector {selector:?}")))?;
            if let Some(window) = rate {
                query = query.rate(window);
            }
            if let Some(agg) = agg {
                let by = by.iter().map(|s| s.trim()).collect::<Vec<_>>();
                if let Some(bad) = by.iter().find(|n| !valid_name(n)) {
                    return Err(fail(2, format!("--by: bad label name {bad:?}")));
                }
                query = query.aggregate(agg.into(), &by);
            }
            let result = store
                .query_range(&query)
                .map_err(|e| ts_fail(e, "querying"))?;
            write_buffered(out, "writing output", |w| write_steps(w, &result, format))
        }
        TsCommand::Export {
            dir,
            selector,
            start,
            end,
            format,
        } => {
            let (start, end) = (start.unwrap_or(i64::MIN), end.unwrap_or(i64::MAX));
            check_range(start, end)?;
            let matchers = selector_matchers(&selector)?;
            let store = open_existing(&dir, false)?;
            let format = match format {
                SampleFormat::Prom => QueryFormat::Text,
                SampleFormat::Csv => QueryFormat::Csv,
            };
            write_buffered(out, "exporting", |w| {
                write_raw(w, format, |each| {
                    store.select_each(&matchers, start, end, each)
                })
            })
            .map_err(crate::copy_cut_short("export"))
        }
        TsCommand::Labels { dir, name } => {
            let store = open_existing(&dir, false)?;
            let list = match &name {
                Some(name) => store.label_values(name),
                None => store.label_names(),
            }
            .map_err(|e| ts_fail(e, "reading the label index"))?;
            write_buffered(out, "writing output", |w| {
                for item in &list {
                    writeln!(w, "{item}")?;
                }
                Ok(())
            })
        }
        TsCommand::Compact { dir } => {
            let store = open_existing(&dir, true)?;
            let report = store.compact().map_err(|e| ts_fail(e, "compacting"))?;
            writeln!(out, "series rewritten\t{}", report.series_rewritten)?;
            writeln!(out, "chunks rewritten\t{}", report.chunks_before)?;
            writeln!(out, "chunks written\t{}", report.chunks_after)?;
            writeln!(
                out,
                "out-of-order samples folded\t{}",
                report.out_of_order_folded
            )?;
            Ok(())
        }
        TsCommand::Retain { dir, before } => {
            // A cutoff past now drops everything: most likely a mistake (microseconds for
            // milliseconds, `now+` for `now-`), and not one to find out after.
            let now = now_ms().map_err(|e| fail(3, e))?;
            if before > now {
                return Err(fail(
                    2,
                    format!(
                        "--before {before} is later than now ({now} ms since the Unix epoch): \
                         it would drop every sample; give a time up to now, in milliseconds"
                    ),
                ));
            }
            let store = open_existing(&dir, true)?;
            let report = store
                .drop_before(before)
                .map_err(|e| ts_fail(e, "dropping old data"))?;
            writeln!(out, "cutoff\t{before}")?;
            writeln!(out, "chunks dropped\t{}", report.chunks_dropped)?;
            writeln!(out, "open chunks emptied\t{}", report.open_chunks_emptied)?;
            writeln!(
                out,
                "out-of-order samples dropped\t{}",
                report.out_of_order_dropped
            )?;
            writeln!(out, "series deleted\t{}", report.series_deleted)?;
            Ok(())
        }
    }
}

/// A time-series error as a failure: `context` says what was being done.
fn ts_fail(e: TsError, context: impl Display) -> Failure {
    let e = match e {
        // The engine's errors get the exit codes the other commands give them.
        TsError::Engine(inner) => {
            let Failure { code, message } = Failure::from(inner);
            return fail(code, format!("{context}: {message}"));
        }
        e => e,
    };
    let code = match &e {
        TsError::Engine(_) => 3,
        TsError::Corrupt(_) | TsError::NotAStore => 1,
        TsError::Parse { .. } | TsError::InvalidQuery(_) | TsError::InvalidLabels(_) => 2,
        TsError::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe => 0,
        TsError::Io(_) => 3,
    };
    fail(code, format!("{context}: {e}"))
}

fn check_range(start: i64, end: i64) -> Result<(), Failure> {
    if end < start {
        return Err(fail(2, format!("--end {end} is before --start {start}")));
    }
    Ok(())
}

fn selector_matchers(selector: &str) -> Result<Vec<text::Matcher>, Failure> {
    text::parse_selector(selector).map_err(|e| fail(2, format!("selector {selector:?}: {e}")))
}

/// Opens the store in `dir` (made if missing).
fn open_store(dir: &Path, options: StoreOptions) -> Result<Store, Failure> {
    Store::open(dir, options).map_err(|e| match e {
        TsError::Engine(hrafn::Error::Locked) => fail(
            3,
            format!(
                "{}: open in another process; ingest, compact and retain need it alone",
                dir.display()
            ),
        ),
        e => ts_fail(e, format_args!("opening {}", dir.display())),
    })
}

/// Opens the store in `dir` for a command that reads or maintains it: a mistyped path or
/// another environment is refused rather than made into an empty store. Reading commands
/// open it read-only, so they work while another process writes.
fn open_existing(dir: &Path, writable: bool) -> Result<Store, Failure> {
    require_dir(dir)?;
    let no_store = || fail(1, format!("{}: no time-series store here", dir.display()));
    // Checked first so that an empty directory is left as it is.
    if !dir.join(hrafn::DATA_FILE).is_file() {
        return Err(no_store());
    }
    let read_only = Store::open_read_only(dir, StoreOptions::default()).map_err(|e| match e {
        TsError::NotAStore => no_store(),
        e => ts_fail(e, format_args!("opening {}", dir.display())),
    })?;
    if !writable {
        return Ok(read_only);
    }
    drop(read_only);
    open_store(dir, StoreOptions::default())
}

/// Runs `body` on a buffered `out` (the outputs can be large) and flushes it.
fn write_buffered(
    out: &mut impl Write,
    context: &str,
    body: impl FnOnce(&mut BufWriter<&mut dyn Write>) -> Result<(), TsError>,
) -> Result<(), Failure> {
    let out: &mut dyn Write = out;
    let mut w = BufWriter::with_capacity(1 << 16, out);
    body(&mut w).map_err(|e| ts_fail(e, context))?;
    w.flush()?;
    Ok(())
}

/// Samples as the store holds them: exposition text (round-trips through `ingest`), CSV
/// (likewise) or JSON. Series without samples in the range are left out. `select` hands
/// each series to the writer as it is read ([`Store::select_each`]), so an export of
/// everything holds one series at a time.
fn write_raw(
    w: &mut impl Write,
    format: QueryFormat,
    select: impl FnOnce(
        &mut dyn FnMut(Labels, Vec<Sample>) -> Result<(), TsError>,
    ) -> Result<(), TsError>,
) -> Result<(), TsError> {
    match format {
        QueryFormat::Text => {}
        QueryFormat::Csv => text::write_csv_header(w)?,
        QueryFormat::Json => write!(w, "[")?,
    }
    let mut first = true;
    select(&mut |labels, samples| {
        if samples.is_empty() {
            return Ok(());
        }
        match format {
            QueryFormat::Text => text::write_exposition(w, &labels, &samples)?,
            QueryFormat::Csv => text::write_csv(w, &labels, &samples)?,
            QueryFormat::Json => {
                if !first {
                    write!(w, ",")?;
                }
                let series = json_series(
                    labels.iter(),
                    samples.iter().map(|s| (s.timestamp_ms, s.value)),
                );
                write!(w, "{series}")?;
            }
        }
        first = false;
        Ok(())
    })?;
    if format == QueryFormat::Json {
        writeln!(w, "]")?;
    }
    Ok(())
}

/// The outputs of a range query: each series' labels, then its points.
fn write_steps(
    w: &mut impl Write,
    result: &[QuerySeries],
    format: QueryFormat,
) -> Result<(), TsError> {
    match format {
        QueryFormat::Text => {
            for s in result {
                writeln!(w, "{}", series_text(&s.labels))?;
                for &(t, v) in &s.points {
                    writeln!(w, "{t} {}", value_text(v))?;
                }
            }
        }
        QueryFormat::Csv => {
            text::write_csv_header(w)?;
            for s in result {
                let series = series_text(&s.labels).replace('"', "\"\"");
                for &(t, v) in &s.points {
                    writeln!(w, "\"{series}\",{t},{}", value_text(v))?;
                }
            }
        }
        QueryFormat::Json => {
            let all: Vec<serde_json::Value> = result
                .iter()
                .map(|s| {
                    json_series(
                        s.labels.iter().map(|(n, v)| (n.as_str(), v.as_str())),
                        s.points.iter().copied(),
                    )
                })
                .collect();
            writeln!(w, "{}", serde_json::Value::Array(all))?;
        }
    }
    Ok(())
}

/// {"labels": {...}, "points": [[t, v], ...]}. JSON has no NaN or infinities, so those
/// values are the strings "NaN", "+Inf" and "-Inf".
fn json_series<'a>(
    labels: impl Iterator<Item = (&'a str, &'a str)>,
    points: impl Iterator<Item = (i64, f64)>,
) -> serde_json::Value {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .map(|(n, v)| (n.to_string(), serde_json::Value::from(v)))
        .collect();
    let points: Vec<serde_json::Value> = points
        .map(|(t, v)| {
            let v = if v.is_finite() {
                serde_json::Value::from(v)
            } else {
                serde_json::Value::from(value_text(v))
            };
            serde_json::json!([t, v])
        })
        .collect();
    serde_json::json!({ "labels": labels, "points": points })
}

/// An output series' labels as the exposition format writes a series: `metric{a="x"}`,
/// or the brace form (`{a="x"}`, `{}`) for an aggregated group without a metric name.
fn series_text(labels: &[(String, String)]) -> String {
    let mut s = String::new();
    let name = labels
        .iter()
        .find(|(n, _)| n == METRIC_NAME)
        .map(|(_, v)| v.as_str());
    let rest: Vec<&(String, String)> = match name {
        Some(name) if valid_metric_name(name) => {
            s.push_str(name);
            labels.iter().filter(|(n, _)| n != METRIC_NAME).collect()
        }
        _ => labels.iter().collect(),
    };
    if rest.is_empty() && !s.is_empty() {
        return s;
    }
    s.push('{');
    for (i, (n, v)) in rest.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(n);
        s.push('=');
        // Writing into a String cannot fail.
        let _ = write_quoted(&mut s, v);
    }
    s.push('}');
    s
}

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// A value as the exposition format writes it (shortest text that reads back exactly).
fn value_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else if v == 0.0 || (1e-4..1e21).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// Appends parsed samples in batches and adds up what the appends did.
struct Ingest<'a> {
    store: &'a Store,
    batch: usize,
    pending: Vec<(Labels, Sample)>,
    totals: AppendReport,
    read: u64,
    bar: &'a indicatif::ProgressBar,
}

impl Ingest<'_> {
    fn push(&mut self, p: ParsedSample) -> Result<(), TsError> {
        self.pending.push((p.labels, p.sample));
        self.read += 1;
        if self.pending.len() >= self.batch {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TsError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.pending);
        let r = self.store.append_batch(rows)?;
        let t = &mut self.totals;
        t.appended += r.appended;
        t.out_of_order += r.out_of_order;
        t.too_old += r.too_old;
        t.unknown_series += r.unknown_series;
        t.series_created += r.series_created;
        t.chunks_sealed += r.chunks_sealed;
        self.bar.set_message(format!("{} samples", self.read));
        Ok(())
    }
}

fn ingest(
    dir: &Path,
    file: &Path,
    format: Option<SampleFormat>,
    batch: usize,
    default_ts: i64,
    options: StoreOptions,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let stdin = file == Path::new("-");
    let shown = if stdin {
        "standard input".to_string()
    } else {
        file.display().to_string()
    };
    let format = format.unwrap_or_else(|| {
        let csv = file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        if csv {
            SampleFormat::Csv
        } else {
            SampleFormat::Prom
        }
    });
    // Open the input first: a missing file should not leave a new empty store behind.
    let (reader, size): (Box<dyn Read>, Option<u64>) = if stdin {
        (Box::new(std::io::stdin()), None)
    } else {
        let f = std::fs::File::open(file).map_err(|e| fail(3, format!("{shown}: {e}")))?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(f), size)
    };
    let window_ms = options.out_of_order_window_ms;
    let store = open_store(dir, options)?;
    let bar = crate::backup::progress_bar(
        "ingest [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}  {msg}",
    );
    match size {
        Some(size) => bar.set_length(size),
        None => {
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "ingest {spinner} {bytes} {bytes_per_sec}  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            if !bar.is_hidden() {
                // Keeps the spinner turning while the input stalls.
                bar.enable_steady_tick(Duration::from_millis(100));
            }
        }
    }
    let input = BufReader::with_capacity(1 << 16, bar.wrap_read(reader));
    let started = Instant::now();
    let mut ingest = Ingest {
        store: &store,
        batch,
        pending: Vec::with_capacity(batch.min(1 << 20)),
        totals: AppendReport::default(),
        read: 0,
        bar: &bar,
    };
    let parsed = match format {
        SampleFormat::Prom => text::parse_exposition(input, default_ts, |p| ingest.push(p)),
        SampleFormat::Csv => text::parse_csv(input, |p| ingest.push(p)),
    }
    .and_then(|_| ingest.flush());
    bar.finish_and_clear();
    if let Err(e) = parsed {
        let stored = ingest.totals.appended + ingest.totals.out_of_order;
        let Failure { code, message } = ts_fail(e, format_args!("ingesting {shown}"));
        // Bad input is not bad usage: exit as `load` does for a damaged dump.
        let code = if code == 2 { 3 } else { code };
        let kept = match stored {
            0 => "nothing was stored".to_string(),
            n => format!("the {n} samples of earlier batches are stored"),
        };
        return Err(fail(code, format!("{message}; {kept}")));
    }
    let t = ingest.totals;
    let elapsed = started.elapsed().as_secs_f64();
    writeln!(
        out,
        "samples read {}, appended {}, out of order {}, too old {}, series created {}, \
         elapsed {elapsed:.3} s, {:.0} samples/s",
        ingest.read,
        t.appended,
        t.out_of_order,
        t.too_old,
        t.series_created,
        ingest.read as f64 / elapsed.max(1e-9)
    )?;
    if t.too_old > 0 {
        eprintln!(
            "hrafn: {} samples more than {window_ms} ms behind their series' newest were \
             dropped; --out-of-order-window widens that",
            t.too_old
        );
    }
    Ok(())
}

/// "now" once per run, so `--start now-1h --end now` is exactly an hour.
fn now_ms() -> Result<i64, String> {
    static NOW: OnceLock<Result<i64, String>> = OnceLock::new();
    NOW.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .ok_or_else(|| "the system clock is before 1970".to_string())
    })
    .clone()
}

/// A time: milliseconds since the Unix epoch, `now`, or `now-<duration>` / `now+<duration>`
/// (such as now-1h, now-15m, now-30s, now-30d).
fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let Some(rest) = s.strip_prefix("now") else {
        return Err(format!(
            "{s:?}: expected milliseconds since the Unix epoch, `now`, or `now-<duration>` \
             such as now-1h, now-15m, now-30s"
        ));
    };
    let now = now_ms()?;
    let shifted = if rest.is_empty() {
        Some(now)
    } else if let Some(d) = rest.strip_prefix('-') {
        now.checked_sub(parse_duration(d)?)
    } else if let Some(d) = rest.strip_prefix('+') {
        now.checked_add(parse_duration(d)?)
    } else {
        return Err(format!(
            "{s:?}: expected now, now-<duration> or now+<duration>"
        ));
    };
    shifted.ok_or_else(|| format!("{s:?}: out of range"))
}

/// A positive duration in ms: a bare number of milliseconds, or numbers with units
/// `ms`, `s`, `m`, `h`, `d`, `w` (such as 30s, 15m, 1h30m).
fn parse_duration(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let bad = |why: &str| format!("{s:?}: {why} (a duration is ms, or such as 30s, 15m, 1h30m)");
    if let Ok(ms) = s.parse::<i64>() {
        return if ms > 0 {
            Ok(ms)
        } else {
            Err(bad("not positive"))
        };
    }
    let mut total: i64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad("expected a number"));
        }
        let n: i64 = rest[..digits]
            .parse()
            .map_err(|_| bad("number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit_ms: i64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "" => return Err(bad("a number without a unit")),
            _ => return Err(bad("unknown unit")),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit_ms)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| bad("too long"))?;
    }
    if total <= 0 {
        return Err(bad("not positive"));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_times_parse() {
        assert_eq!(parse_duration("1500"), Ok(1500));
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("250ms"), Ok(250));
        for bad in ["", "0", "-5", "5x", "m", "1h 2m", "99999999999999999999w"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        let now = now_ms().expect("a clock after 1970");
        assert_eq!(parse_time("now"), Ok(now));
        assert_eq!(parse_time("now-1h"), Ok(now - 3_600_000));
        assert_eq!(parse_time("now+30s"), Ok(now + 30_000));
        assert_eq!(parse_time("-42"), Ok(-42));
        for bad in ["yesterday", "now*2", "now-", "2024-01-01T00:00:00Z"] {
            assert!(parse_time(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn output_series_are_named_as_the_exposition_format_names_them() {
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(series_text(&pairs(&[("__name__", "up")])), "up");
        assert_eq!(
            series_text(&pairs(&[("__name__", "up"), ("job", "a\"b")])),
            r#"up{job="a\"b"}"#
        );
        assert_eq!(series_text(&pairs(&[("job", "a")])), r#"{job="a"}"#);
        assert_eq!(series_text(&[]), "{}");
        assert_eq!(
            series_text(&pairs(&[("__name__", "a b")])),
            r#"{__name__="a b"}"#
        );
        assert_eq!(value_text(1e300), "1e300");
        assert_eq!(value_text(2.5), "2.5");
        assert_eq!(value_text(f64::NEG_INFINITY), "-Inf");
    }
}
