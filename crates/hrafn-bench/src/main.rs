//! hrafn-bench: runs the same workloads against Hrafn and its peers in one run.
//!
//! The parent process re-executes itself once per (workload, engine) pair with the hidden
//! `run-one` subcommand; each child works in a fresh temporary directory, prints one JSON
//! result line on stdout, and exits. The parent collects the lines and prints the tables.

mod engines;
#[cfg(feature = "hrafn")]
mod graph;
mod journal;
mod plot;
mod report;
mod result;
mod sys;
#[cfg(feature = "hrafn")]
mod timeseries;
mod verdict;
mod workloads;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use result::BenchResult;
use workloads::{Config, DISK, Spec};

/// The scale used when `--scale` is not given: 0.2 of the full counts.
const QUICK_SCALE: f64 = 0.2;

#[derive(Parser, Debug)]
#[command(
    name = "hrafn-bench",
    about = "Runs the same workloads against Hrafn, LMDB, redb (and RocksDB with the `rocksdb` \
             feature), each pair in a fresh directory and child process."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,

    /// Multiplies every count; 1 = the full figures. The default 0.2 is the quick run.
    #[arg(long, default_value_t = QUICK_SCALE)]
    scale: f64,

    /// Comma-separated workloads or groups (default: all). Groups: fill_seq, read_seq,
    /// read_parallel, fill_rnd_tx, bulk_seq_small, commit_latency, concurrent_writers,
    /// sustained, journal_bytes, range_scan, u64, table, journal_raw.
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,

    /// Comma-separated engines (default: all compiled in): hrafn, lmdb, redb, rocksdb.
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,

    /// Write the results as a JSON array to this file. Without --json and --plot, the
    /// results and charts go to a folder named by the UTC time under target/hrafn-bench/ in the
    /// workspace root.
    #[arg(long)]
    json: Option<PathBuf>,

    /// Write one SVG chart per workload into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,

    /// bulk_seq_small writes 100M entries (times --scale) instead of 20M.
    #[arg(long)]
    bulk_100m: bool,

    /// Do not add the journal_raw rows when durable workloads are selected without them.
    #[arg(long)]
    no_disk_limit: bool,

    /// Parent directory for the per-run temporary directories (default: the system's).
    #[arg(long)]
    tmpdir: Option<PathBuf>,

    /// Kill a child run that takes longer than this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_secs: u64,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Runs one (workload, engine) pair and prints one JSON line (used by the parent).
    #[command(hide = true)]
    RunOne {
        #[arg(long)]
        workload: String,
        #[arg(long)]
        engine: String,
        #[arg(long)]
        scale: f64,
        #[arg(long)]
        bulk_100m: bool,
        #[arg(long)]
        tmpdir: Option<PathBuf>,
    },
    /// The time-series store against a plain B+tree layout on a monitoring workload:
    /// durable ingest, bytes per sample, selective and broad query latency. The default
    /// is a simulated day of 10,000 series; `--series 2000 --scrapes 960` is a quick run.
    #[cfg(feature = "hrafn")]
    Timeseries {
        /// Series (24 per simulated node-exporter instance).
        #[arg(long, default_value_t = 10_000)]
        series: usize,
        /// Scrapes, one every 15 s of simulated time (5760 = one day).
        #[arg(long, default_value_t = 5_760)]
        scrapes: usize,
        /// Where to make the temporary directories (default: the system's).
        #[arg(long)]
        tmpdir: Option<PathBuf>,
    },
    /// The graph store against plain adjacency layouts (one Hrafn B+tree, LMDB) on a
    /// generated power-law graph: durable bulk load, 1-hop and 2-hop latency, BFS to depth
    /// 3, shortest paths. The default is 1M nodes and 10M edges; `--nodes 100000 --edges
    /// 1000000` is a quick run.
    #[cfg(feature = "hrafn")]
    Graph {
        /// Nodes.
        #[arg(long, default_value_t = 1_000_000)]
        nodes: usize,
        /// Edges.
        #[arg(long, default_value_t = 10_000_000)]
        edges: usize,
        /// Then walk the graph store from disk: in a child limited to this much memory
        /// where a memory control group can be made, else with the page cache dropped
        /// before each walk (see the module docs of `graph.rs`).
        #[arg(long)]
        memory_limit_mib: Option<u64>,
        /// Where to make the temporary directories (default: the system's).
        #[arg(long)]
        tmpdir: Option<PathBuf>,
        /// Keep the directories (and print where) for later `graph-cold` runs, and the
        /// CSV files of the bulk load.
        #[arg(long)]
        keep: bool,
        /// Only the bulk load from CSV, and its target (about half a minute at the
        /// default size, against about 11 minutes for the whole run).
        #[arg(long, conflicts_with = "memory_limit_mib")]
        csv_only: bool,
    },
    /// The memory-limited walks of `graph --memory-limit-mib` on an existing graph (run by
    /// `graph` inside the limited scope).
    #[cfg(feature = "hrafn")]
    #[command(hide = true)]
    GraphCold {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        nodes: usize,
        #[arg(long)]
        memory_limit_mib: u64,
        /// The memory control group to join first (made by the parent).
        #[arg(long)]
        cgroup: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match &cli.cmd {
        Some(Cmd::RunOne {
            workload,
            engine,
            scale,
            bulk_100m,
            tmpdir,
        }) => {
            let cfg = Config {
                scale: *scale,
                bulk_100m: *bulk_100m,
            };
            run_one(workload, engine, &cfg, tmpdir.as_deref())
        }
        #[cfg(feature = "hrafn")]
        Some(Cmd::Timeseries {
            series,
            scrapes,
            tmpdir,
        }) => {
            let dir = temp_dir_in(tmpdir.as_deref())?;
            timeseries::run(*series, *scrapes, dir.path())
        }
        #[cfg(feature = "hrafn")]
        Some(Cmd::Graph {
            nodes,
            edges,
            memory_limit_mib,
            tmpdir,
            keep,
            csv_only,
        }) => {
            let dir = temp_dir_in(tmpdir.as_deref())?;
            let only = if *csv_only {
                graph::Only::CsvLoad
            } else {
                graph::Only::All
            };
            graph::run(*nodes, *edges, *memory_limit_mib, only, *keep, dir.path())?;
            if *keep {
                println!("kept {}", dir.keep().display());
            }
            Ok(())
        }
        #[cfg(feature = "hrafn")]
        Some(Cmd::GraphCold {
            dir,
            nodes,
            memory_limit_mib,
            cgroup,
        }) => graph::cold_child(dir, *nodes, *memory_limit_mib, cgroup.as_deref()),
        None => run_all(&cli),
    }
}

fn temp_dir_in(parent: Option<&Path>) -> Result<tempfile::TempDir> {
    let mut b = tempfile::Builder::new();
    b.prefix("hrafn-bench-");
    Ok(match parent {
        Some(p) => b.tempdir_in(p)?,
        None => b.tempdir()?,
    })
}

/// The child side: run one row in a fresh temporary directory and print its JSON line.
fn run_one(workload: &str, engine: &str, cfg: &Config, tmpdir: Option<&Path>) -> Result<()> {
    let spec = workloads::spec(workload).with_context(|| format!("unknown workload {workload}"))?;
    let dir = temp_dir_in(tmpdir)?;
    let mut r = workloads::run(spec, engine, cfg, dir.path())
        .with_context(|| format!("{workload} on {engine}"))?;
    r.peak_rss_bytes = sys::peak_rss_bytes();
    drop(dir);
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

/// One child run: a row and the engine (or [`DISK`]) it runs against.
type Job = (&'static Spec, String);

/// What the parent runs: the selected rows, and each against every selected engine.
fn plan(cli: &Cli) -> Result<(Vec<&'static Spec>, Vec<Job>)> {
    if !(cli.scale > 0.0 && cli.scale.is_finite()) {
        bail!("--scale must be a positive number");
    }
    let names: Vec<String> = if cli.workloads.is_empty() {
        workloads::groups().into_iter().map(String::from).collect()
    } else {
        cli.workloads.clone()
    };
    let mut specs = workloads::select(&names)?;
    let durable_rows = specs.iter().any(|s| s.limit.is_some());
    if durable_rows && !cli.no_disk_limit && !specs.iter().any(|s| s.raw_disk) {
        // Durable figures are always shown next to the disk's own limit.
        specs.extend(workloads::select(&["journal_raw".to_string()])?);
    }
    let engines: Vec<String> = if cli.engines.is_empty() {
        engines::ALL_ENGINES
            .iter()
            .filter(|e| engines::compiled_in(e))
            .map(|e| e.to_string())
            .collect()
    } else {
        cli.engines.clone()
    };
    for e in &engines {
        if !engines::ALL_ENGINES.contains(&e.as_str()) {
            bail!(
                "unknown engine {e}; known: {}",
                engines::ALL_ENGINES.join(", ")
            );
        }
        if !engines::compiled_in(e) {
            bail!("engine {e} is not compiled in; build with `--features {e}`");
        }
    }
    // The raw-disk rows run before and after the engines (when there are engine rows); the
    // better pass is kept, so a burst of other I/O on the machine does not set the limit.
    let raw = specs.iter().filter(|s| s.raw_disk);
    let engine_rows = specs.iter().filter(|s| !s.raw_disk);
    let has_engine_rows = engine_rows.clone().next().is_some();
    let second_pass = raw.clone().filter(|_| has_engine_rows);
    let mut jobs = Vec::new();
    // Rows that ran in turns with the row they are paired with.
    let mut taken: Vec<&str> = Vec::new();
    for s in raw.chain(engine_rows).chain(second_pass) {
        if s.raw_disk {
            jobs.push((*s, DISK.to_string()));
            continue;
        }
        if taken.contains(&s.name) {
            continue;
        }
        let pair = s
            .paired_with
            .and_then(|name| specs.iter().find(|t| t.name == name));
        let turn: Vec<&'static Spec> = std::iter::once(*s).chain(pair.copied()).collect();
        taken.extend(turn.iter().map(|t| t.name));
        let rounds = turn.iter().map(|t| t.rounds).max().unwrap_or(1);
        for round in 0..rounds {
            for t in turn.iter().filter(|t| round < t.rounds) {
                let engines = engines.iter().filter(|e| {
                    (!t.hrafn_only || *e == "hrafn") && !(t.rocksdb_skipped && *e == "rocksdb")
                });
                jobs.extend(engines.map(|e| (*t, e.clone())));
            }
        }
    }
    Ok((specs, jobs))
}

fn run_all(cli: &Cli) -> Result<()> {
    let started = Instant::now();
    let (specs, jobs) = plan(cli)?;
    // /proc/self/exe stays this very binary even if a build replaces the file meanwhile.
    let proc_exe = Path::new("/proc/self/exe");
    let exe = if proc_exe.exists() {
        proc_exe.to_path_buf()
    } else {
        std::env::current_exe().context("locating this binary")?
    };
    let scale_note = if cli.scale == 1.0 {
        "full counts".to_string()
    } else if cli.scale == QUICK_SCALE {
        format!("quick default: {QUICK_SCALE} x the full counts; --scale 1 runs the full counts")
    } else {
        format!("{} x the full counts", cli.scale)
    };
    println!(
        "hrafn-bench: scale {} ({scale_note}); {} runs, each in a fresh directory and process",
        cli.scale,
        jobs.len()
    );
    println!(
        "machine: {} cores, kernel {}, load average {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
        load_average()
    );

    let pb = ProgressBar::new(jobs.len() as u64);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .context("progress bar template")?
            .progress_chars("=> "),
    );
    let mut results = Vec::new();
    let mut repeated = Vec::new();
    for (spec, engine) in &jobs {
        pb.set_message(format!("{} / {engine}", spec.name));
        let r = run_child(&exe, cli, spec.name, engine);
        if pb.is_hidden() {
            // No terminal for the bar: still show progress, one line per run.
            eprintln!("{}", summary_line(&r));
        } else {
            pb.println(summary_line(&r));
        }
        if spec.rounds > 1 {
            repeated.push(r);
        } else {
            keep_better(&mut results, r);
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    results.extend(medians(repeated));
    // Report in table order (the raw-disk rows ran first).
    let order = |r: &BenchResult| {
        let row = workloads::SPECS.iter().position(|s| s.name == r.workload);
        let col = engines::ALL_ENGINES.iter().position(|e| *e == r.engine);
        (row, col)
    };
    results.sort_by_key(order);

    println!();
    print!("{}", report::text(&results, &specs));

    // Without --json or --plot, both go to a fresh folder of their own.
    let default_dir = if cli.json.is_none() && cli.plot.is_none() {
        let dir = default_output_dir(std::time::SystemTime::now());
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Some(dir)
    } else {
        None
    };
    let json_path = cli
        .json
        .clone()
        .or_else(|| default_dir.as_ref().map(|d| d.join("results.json")));
    let plot_dir = cli.plot.clone().or_else(|| default_dir.clone());
    println!();
    if let Some(path) = &json_path {
        let json = serde_json::to_string_pretty(&results)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if let Some(dir) = &plot_dir {
        let res = report::Results { all: &results };
        let files = plot::write_all(dir, &res, &specs)?;
        println!("wrote {} charts to {}", files.len(), dir.display());
    }
    println!(
        "\ntotal wall time {:.1} s; load average at the end {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    if let Some(dir) = &default_dir {
        println!("results and charts in {}", dir.display());
    }
    println!();
    print!("{}", verdict::text(&verdict::judge_all(&results)));
    Ok(())
}

/// `target/hrafn-bench/<UTC time>/` under the workspace root: the nearest directory at or
/// above the current one whose `Cargo.toml` declares a `[workspace]`, else the workspace
/// this binary was built from, else the current directory.
fn default_output_dir(now: std::time::SystemTime) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let is_workspace = |d: &Path| {
        std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]"))
    };
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = cwd
        .ancestors()
        .find(|d| is_workspace(d))
        .map(Path::to_path_buf)
        .or_else(|| is_workspace(&built_from).then_some(built_from))
        .unwrap_or(cwd);
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    root.join("target")
        .join("hrafn-bench")
        .join(utc_stamp(secs))
}

/// Seconds since the Unix epoch as a UTC time for a folder name: `2025-03-01T14-05-09Z`.
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days to a civil date (Howard Hinnant's algorithm), from 1970-01-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// Adds `r`, or for a row that already has a result (the second journal_raw pass), keeps the
/// one with more operations per second and notes that it is the better of two passes.
fn keep_better(results: &mut Vec<BenchResult>, r: BenchResult) {
    match results
        .iter_mut()
        .find(|o| o.workload == r.workload && o.engine == r.engine)
    {
        None => results.push(r),
        Some(old) => {
            let (a, b) = (old.ops_per_sec, r.ops_per_sec);
            if r.ok() && (!old.ok() || b > a) {
                *old = r;
            }
            if old.ok() {
                let pass = format!(
                    "better of 2 passes: {} and {} {}/s",
                    fmt0(a),
                    fmt0(b),
                    old.unit
                );
                old.note = Some(match old.note.take() {
                    Some(n) => format!("{n}; {pass}"),
                    None => pass,
                });
            }
        }
    }
}

/// One result per (row, engine) of rows run several times: the run with the median
/// operations per second among those that succeeded (the lower middle one for an even
/// count), noting every run's figure; a failure if none succeeded.
fn medians(runs: Vec<BenchResult>) -> Vec<BenchResult> {
    let mut groups: Vec<Vec<BenchResult>> = Vec::new();
    for r in runs {
        match groups
            .iter_mut()
            .find(|g| g[0].workload == r.workload && g[0].engine == r.engine)
        {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
        .into_iter()
        .map(|group| {
            let count = group.len();
            let (mut ok, failed): (Vec<_>, Vec<_>) = group.into_iter().partition(|r| r.ok());
            if ok.is_empty() {
                return failed.into_iter().next().expect("a group is never empty");
            }
            ok.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
            let figures: Vec<String> = ok.iter().map(|r| fmt0(r.ops_per_sec)).collect();
            let all: Vec<f64> = ok.iter().map(|r| r.ops_per_sec).collect();
            let mut median = ok.swap_remove((ok.len() - 1) / 2);
            median.runs_ops_per_sec = all;
            // With a failed run the figure is the middle of those that succeeded (the lower
            // of two), and the note says so.
            let runs = if failed.is_empty() {
                format!(
                    "median of {count} runs: {} {}/s",
                    figures.join(", "),
                    median.unit
                )
            } else {
                format!(
                    "{} of the {} of {count} runs that succeeded ({} failed): {} {}/s",
                    if figures.len().is_multiple_of(2) {
                        "lower middle"
                    } else {
                        "median"
                    },
                    figures.len(),
                    failed.len(),
                    figures.join(", "),
                    median.unit
                )
            };
            median.note = Some(match median.note.take() {
                Some(n) => format!("{n}; {runs}"),
                None => runs,
            });
            median
        })
        .collect()
}

fn fmt0(v: f64) -> String {
    format!("{v:.0}")
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews the figures.
fn load_average() -> String {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn summary_line(r: &BenchResult) -> String {
    match &r.error {
        Some(e) => format!("{:<26} {:<8} ERR {}", r.workload, r.engine, first_line(e)),
        None => format!(
            "{:<26} {:<8} {:>9} {}/s  ({:.0} ms)",
            r.workload,
            r.engine,
            report::fmt_rate(r.ops_per_sec),
            r.unit,
            r.total_ms
        ),
    }
}

/// The useful part of a failed child's stderr: the error and its causes, or a panic message,
/// without any backtrace.
fn error_text(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .take_while(|l| !l.to_ascii_lowercase().starts_with("stack backtrace"))
        .filter(|l| !l.trim().is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .take(8)
        .collect();
    lines.join(" | ")
}

fn first_line(s: &str) -> &str {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// Runs one pair in a child process; any failure becomes a result with `error` set.
fn run_child(exe: &Path, cli: &Cli, workload: &str, engine: &str) -> BenchResult {
    match try_run_child(exe, cli, workload, engine) {
        Ok(r) => r,
        Err(e) => BenchResult::failed(workload, engine, cli.scale, format!("{e:#}")),
    }
}

fn try_run_child(exe: &Path, cli: &Cli, workload: &str, engine: &str) -> Result<BenchResult> {
    let mut cmd = Command::new(exe);
    cmd.args(["run-one", "--workload", workload, "--engine", engine])
        .args(["--scale", &cli.scale.to_string()]);
    if cli.bulk_100m {
        cmd.arg("--bulk-100m");
    }
    if let Some(t) = &cli.tmpdir {
        cmd.arg("--tmpdir").arg(t);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting child")?;
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut s);
            }
            s
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + Duration::from_secs(cli.timeout_secs);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() >= deadline {
            child.kill()?;
            child.wait()?;
            bail!("timed out after {} s", cli.timeout_secs);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if !status.success() {
        bail!("child exited with {status}: {}", error_text(&stderr));
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("child printed no result line")?;
    serde_json::from_str(line).context("parsing the child's result line")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_parses_lists_and_defaults() {
        let cli = Cli::try_parse_from([
            "hrafn-bench",
            "--workloads",
            "fill_seq,commit_latency",
            "--engines",
            "lmdb,redb",
        ])
        .expect("parse");
        assert_eq!(cli.scale, QUICK_SCALE);
        assert_eq!(cli.workloads, ["fill_seq", "commit_latency"]);
        let (specs, jobs) = plan(&cli).expect("plan");
        // The durable rows pull in the journal_raw rows: 2 rows x 2 engines, and 5 disk rows
        // run before and after them.
        assert_eq!(specs.len(), 7);
        assert_eq!(jobs.len(), 14);
        assert!(
            jobs[..5]
                .iter()
                .chain(&jobs[9..])
                .all(|(s, e)| s.raw_disk && e == DISK)
        );
        assert!(plan(&Cli::try_parse_from(["x", "--engines", "nope"]).expect("parse")).is_err());
        // concurrent_writers runs 3 rounds, taking turns across the engines.
        let cli = Cli::try_parse_from([
            "x",
            "--workloads",
            "concurrent_writers",
            "--engines",
            "lmdb,redb",
        ])
        .expect("parse");
        let (_, jobs) = plan(&cli).expect("plan");
        let engines: Vec<&str> = jobs
            .iter()
            .filter(|(s, _)| !s.raw_disk)
            .map(|(_, e)| e.as_str())
            .collect();
        assert_eq!(engines, ["lmdb", "redb", "lmdb", "redb", "lmdb", "redb"]);
    }

    #[test]
    fn hrafn_only_rows_and_cpu_rows_in_the_plan() {
        let cli = Cli::try_parse_from([
            "x",
            "--workloads",
            "journal_bytes,read_seq",
            "--engines",
            "hrafn,lmdb",
        ])
        .expect("parse");
        let (specs, jobs) = plan(&cli).expect("plan");
        // Not durable: no journal_raw rows added.
        assert_eq!(specs.len(), 3);
        let names: Vec<(&str, &str)> = jobs.iter().map(|(s, e)| (s.name, e.as_str())).collect();
        assert_eq!(
            names,
            [
                ("read_seq", "hrafn"),
                ("read_seq", "lmdb"),
                ("read_seq", "hrafn"),
                ("read_seq", "lmdb"),
                ("read_seq", "hrafn"),
                ("read_seq", "lmdb"),
                ("journal_bytes_insert", "hrafn"),
                ("journal_bytes_update", "hrafn"),
            ]
        );
        // Without hrafn, the Hrafn-only rows have no runs at all.
        let cli = Cli::try_parse_from(["x", "--workloads", "journal_bytes", "--engines", "lmdb"])
            .expect("parse");
        assert!(plan(&cli).expect("plan").1.is_empty());
    }

    #[test]
    fn paired_rows_take_turns() {
        let cli = Cli::try_parse_from([
            "x",
            "--workloads",
            "u64_insert_btree,u64_insert_fixed,u64_scan_fixed",
            "--engines",
            "hrafn,lmdb",
        ])
        .expect("parse");
        let (_, jobs) = plan(&cli).expect("plan");
        let names: Vec<(&str, &str)> = jobs.iter().map(|(s, e)| (s.name, e.as_str())).collect();
        let turn = [
            ("u64_insert_fixed", "hrafn"),
            ("u64_insert_fixed", "lmdb"),
            ("u64_insert_btree", "hrafn"),
            ("u64_insert_btree", "lmdb"),
        ];
        let scan = [("u64_scan_fixed", "hrafn"), ("u64_scan_fixed", "lmdb")];
        let expected: Vec<(&str, &str)> = [turn, turn, turn]
            .concat()
            .into_iter()
            .chain([scan, scan, scan].concat())
            .collect();
        assert_eq!(names, expected);
        // A row whose pair is not selected runs alone.
        let cli = Cli::try_parse_from(["x", "--workloads", "u64_get_fixed", "--engines", "hrafn"])
            .expect("parse");
        let (_, jobs) = plan(&cli).expect("plan");
        assert!(jobs.iter().all(|(s, _)| s.name == "u64_get_fixed"));
        assert_eq!(jobs.len(), 3);
    }

    #[test]
    fn utc_stamps_name_the_default_folder() {
        assert_eq!(utc_stamp(0), "1970-01-01T00-00-00Z");
        assert_eq!(utc_stamp(951_782_400), "2000-02-29T00-00-00Z");
        assert_eq!(utc_stamp(1_709_251_199), "2024-02-29T23-59-59Z");
        assert_eq!(utc_stamp(1_735_689_600 + 3_723), "2025-01-01T01-02-03Z");
        let dir = default_output_dir(std::time::UNIX_EPOCH);
        assert!(
            dir.ends_with("target/hrafn-bench/1970-01-01T00-00-00Z"),
            "{}",
            dir.display()
        );
        let root = dir.ancestors().nth(3).expect("root");
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("root manifest");
        assert!(manifest.contains("[workspace]"));
    }

    #[test]
    fn repeated_rows_report_the_median_run() {
        let run = |engine: &str, v: f64| {
            BenchResult::measured("concurrent_writers", engine, 1.0, 100, "commits", {
                Duration::from_secs_f64(100.0 / v)
            })
        };
        let runs = vec![
            run("hrafn", 300.0),
            run("lmdb", 10.0),
            run("hrafn", 100.0),
            run("hrafn", 200.0),
            BenchResult::failed("concurrent_writers", "lmdb", 1.0, "x".into()),
            BenchResult::failed("concurrent_writers", "redb", 1.0, "x".into()),
        ];
        let out = medians(runs);
        let get = |w: &str, e: &str| {
            out.iter()
                .find(|r| r.workload == w && r.engine == e)
                .expect("result")
        };
        let hrafn = get("concurrent_writers", "hrafn");
        assert!((hrafn.ops_per_sec - 200.0).abs() < 1e-6);
        let runs = &hrafn.runs_ops_per_sec;
        assert_eq!(runs.len(), 3);
        assert!(
            runs.windows(2).all(|w| w[0] <= w[1]),
            "lowest first: {runs:?}"
        );
        assert!((runs[0] - 100.0).abs() < 1e-3 && (runs[2] - 300.0).abs() < 1e-3);
        let note = hrafn.note.as_deref().unwrap_or("");
        assert!(
            note.contains("median of 3 runs: 100, 200, 300 commits/s"),
            "{note}"
        );
        let lmdb = get("concurrent_writers", "lmdb");
        assert!(lmdb.ok(), "a failed run does not hide the successful one");
        let note = lmdb.note.as_deref().unwrap_or("");
        assert!(
            note.contains("median of the 1 of 2 runs that succeeded (1 failed)"),
            "{note}"
        );
        assert!(!get("concurrent_writers", "redb").ok());
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn second_disk_pass_keeps_the_better_result() {
        let run = |v: f64| {
            BenchResult::measured("journal_raw_direct_4k", DISK, 1.0, 100, "writes", {
                Duration::from_secs_f64(100.0 / v)
            })
        };
        let mut results = vec![];
        keep_better(&mut results, run(500.0));
        keep_better(&mut results, run(2_000.0));
        assert_eq!(results.len(), 1);
        assert!((results[0].ops_per_sec - 2_000.0).abs() < 1e-6);
        let note = results[0].note.as_deref().unwrap_or("");
        assert!(note.contains("better of 2 passes: 500 and 2000"), "{note}");
        keep_better(
            &mut results,
            BenchResult::failed("journal_raw_direct_4k", DISK, 1.0, "x".into()),
        );
        assert!(results[0].ok());
    }
}
