//! `hrafn`: inspect, check and read a Hrafn environment, also while another process has it
//! open for writing (every command but `load`, an in-place `compact`, the writing `ts`
//! commands and `graph load` opens read-only).
//!
//! Exit codes: 0 success; 1 the thing asked for is not there (a tree, a key) or the check
//! found damage; 2 bad usage; 3 any other error (unreadable directory, I/O).

mod backup;
mod compact;
mod dump;
mod graph;
mod report;
mod ts;

use clap::{Parser, Subcommand, ValueEnum};
use hrafn::btree::TreeKind;
use hrafn::{Environment, Error, Options};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "hrafn",
    version,
    about = "Inspect, check and read a Hrafn environment"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Facts about the environment: last commit, data file size, trees, entries, pages.
    Stat { dir: PathBuf },
    /// Verifies every page, tree and table and the free-space accounting.
    Check { dir: PathBuf },
    /// Lists the named trees with their kind and entry count.
    Trees { dir: PathBuf },
    /// Where the pages go: per tree and table its entries, depth, pages by kind, fill
    /// factor and overflow pages; free space by section; journals, scratch, what is not
    /// yet synced, the oldest reader. Reads every page in use (as `check` does).
    Report {
        dir: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Also draw the page map (each page colored by its owner) as SVG into FILE.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// Prints the value of one key of a B+tree (or of a fixed-size tree: a decimal key).
    Get {
        dir: PathBuf,
        tree: String,
        key: String,
        /// The key is hex, not text.
        #[arg(long)]
        hex_key: bool,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Prints the entries of a tree: all, a key range, or a prefix (B+trees and multi-value
    /// trees: text keys; fixed-size trees: decimal keys).
    Scan {
        dir: PathBuf,
        tree: String,
        /// First key (included).
        #[arg(long)]
        from: Option<String>,
        /// Last key (excluded).
        #[arg(long)]
        to: Option<String>,
        /// Only keys starting with this (B+trees and multi-value trees).
        #[arg(long, conflicts_with_all = ["from", "to"])]
        prefix: Option<String>,
        /// At most this many entries.
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Writes every tree, nested tree and table as portable text (`docs/dump.md`) to
    /// standard output.
    Dump { dir: PathBuf },
    /// Reads a dump from standard input into the environment (made if missing). An
    /// environment that already holds trees is refused unless `--merge` is given.
    Load {
        dir: PathBuf,
        /// Load into an environment that already holds trees: trees the dump names are
        /// added to and entries with equal keys replaced.
        #[arg(long)]
        merge: bool,
    },
    /// Backs the environment up into directory OUT (new or empty) while others use it. A
    /// full backup opens it read-only (it may be open in another process); with
    /// `--chain` or `--incremental` it opens it for writing (no other process may).
    Backup {
        dir: PathBuf,
        out: PathBuf,
        /// Copy only what was committed since the last backup (environments created with
        /// incremental backups enabled).
        #[arg(long)]
        incremental: bool,
        /// A full backup that starts a chain: later `--incremental` backups continue it.
        #[arg(long, conflicts_with = "incremental")]
        chain: bool,
        /// Copy only the live data (a logical copy, as `compact` makes): smaller after
        /// many deletions; it starts no chain.
        #[arg(long, conflicts_with_all = ["incremental", "chain"])]
        compact: bool,
    },
    /// Lays a full backup and the incrementals after it, in order, into directory INTO
    /// (new or empty), replays them and checks the result.
    Restore {
        /// The restored environment's directory.
        #[arg(long)]
        into: PathBuf,
        /// The full backup, then each incremental.
        #[arg(required = true)]
        backups: Vec<PathBuf>,
    },
    /// Checks backups without restoring them: manifests, every file's checksum, and that
    /// each continues the one before it. `--deep` also restores them into a temporary
    /// directory and runs the integrity check there.
    Verify {
        #[arg(required = true)]
        backups: Vec<PathBuf>,
        #[arg(long)]
        deep: bool,
    },
    /// Copies the live data into a fresh environment and swaps it in place of DIR, which
    /// no process may hold open for writing; prints the bytes on disk before and after.
    /// Table record ids change (they are locations).
    Compact {
        dir: PathBuf,
        /// Write the compacted copy into this directory (new or empty) instead, leaving
        /// DIR as it is (it may stay open for writing meanwhile).
        #[arg(long)]
        into: Option<PathBuf>,
    },
    /// A time-series store in DIR: ingest, query, export, labels, compact, retain
    ///
    /// Samples come and go as Prometheus exposition text (`metric{label="value"} value
    /// timestamp_ms`) or as CSV (`series,timestamp_ms,value`); `export` writes what
    /// `ingest` reads back. A SELECTOR is a PromQL vector selector such as
    /// `http_requests_total{job="api",code=~"5.."}`.
    ///
    /// A TIME is milliseconds since the Unix epoch, `now`, or `now-<duration>` (now-1h,
    /// now-15m, now-30s, now-30d); a DURATION is milliseconds or such as 30s, 15m, 1h30m.
    ///
    /// `query`, `export` and `labels` open DIR read-only (another process may be writing
    /// it); `ingest`, `compact` and `retain` open it for writing (no other process may).
    ///
    /// Examples:
    ///   hrafn ts ingest db metrics.prom
    ///   hrafn ts query db 'up{job="api"}' --start now-1h --end now
    ///   hrafn ts query db 'http_requests_total' --start now-1h --end now --step 1m \
    ///       --rate 5m --agg sum --by code
    ///   hrafn ts export db '{__name__=~".+"}' --format csv > all.csv
    ///   hrafn ts retain db --before now-30d
    #[command(verbatim_doc_comment)]
    Ts {
        #[command(subcommand)]
        command: ts::TsCommand,
    },
    /// A graph in DIR: load, stat, node, edge, neighbours, bfs, path, find
    ///
    /// `load` reads nodes and edges from CSV; the graph gives them ids of its own (1, 2,
    /// ...), which the other commands take and print, and a loaded node keeps its id of
    /// the CSV file as the text property `_id`.
    ///
    /// `node` and `edge` print one JSON object; a property's value is a JSON null,
    /// boolean, number or string, bytes are {"hex": "..."}, and a float JSON has no number
    /// for is {"float": "NaN"} (or "+Inf", "-Inf").
    ///
    /// `load` opens DIR for writing (no other process may). The other commands, `stat`
    /// and its check included, open it read-only (another process may be writing it), and
    /// refuse a directory without a graph (exit 1) rather than make one.
    ///
    /// Examples:
    ///   hrafn graph load db --nodes people.csv --edges knows.csv
    ///   hrafn graph find db --label Person --property _id --value alice
    ///   hrafn graph neighbours db 1 --direction both --type KNOWS
    ///   hrafn graph bfs db 1 --depth 2 --type KNOWS --type WORKS_AT
    ///   hrafn graph path db 1 7 --weight distance
    #[command(verbatim_doc_comment)]
    Graph {
        #[command(subcommand)]
        command: graph::GraphCommand,
    },
}

/// How keys and values are printed.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Printable bytes as they are, others as `\xNN`; key and value separated by a tab.
    Text,
    /// Lowercase hex; key and value separated by a tab.
    Hex,
    /// One JSON object per line: {"key": ..., "value": ...}, bytes as text if UTF-8, else
    /// as {"hex": ...}.
    Json,
}

/// A command's failure: what to say and the exit code.
pub(crate) struct Failure {
    code: u8,
    message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match e {
            Error::TreeNotFound { .. } => 1,
            Error::Corruption { .. } => 1,
            Error::InvalidBackup { .. } => 1,
            _ => 3,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        // A closed pipe (`hrafn scan ... | head`) ends the output; it is not an error.
        let code = if e.kind() == std::io::ErrorKind::BrokenPipe {
            0
        } else {
            3
        };
        Failure {
            code,
            message: format!("writing output: {e}"),
        }
    }
}

/// For commands whose output is a copy to load back (`dump`, `ts export`): a reader that
/// closed the pipe has an incomplete copy, a failure, unlike for the commands whose output
/// a reader may cut (`scan ... | head`), which exit 0.
pub(crate) fn copy_cut_short(what: &str) -> impl FnOnce(Failure) -> Failure + '_ {
    move |f| match f.code {
        0 => fail(
            3,
            format!("writing the {what}: its reader closed the pipe; the {what} is incomplete"),
        ),
        _ => f,
    }
}

pub(crate) fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    match run(cli.command, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) if f.code == 0 => ExitCode::SUCCESS,
        Err(f) => {
            let _ = out.flush();
            eprintln!("hrafn: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// Refuses a path that is not a directory, before anything tries to open it.
pub(crate) fn require_dir(dir: &Path) -> Result<(), Failure> {
    if !dir.is_dir() {
        return Err(fail(
            3,
            format!(
                "{}: not a directory (an environment is a directory)",
                dir.display()
            ),
        ));
    }
    Ok(())
}

fn open(dir: &Path) -> Result<Environment, Failure> {
    require_dir(dir)?;
    Environment::open_read_only(dir, Options::default()).map_err(|e| opening_failed(dir, e))
}

/// Refuses an environment that already holds trees: a load would add to them and replace
/// equal keys, and a load that failed half way could not simply be run again.
fn refuse_trees(dir: &Path, env: &Environment) -> Result<(), Failure> {
    let trees = env
        .begin_read()
        .and_then(|rtx| rtx.list_trees())
        .map_err(|e| opening_failed(dir, e))?;
    if trees.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = trees.iter().take(5).map(String::as_str).collect();
    let more = if trees.len() > shown.len() {
        ", …"
    } else {
        ""
    };
    Err(fail(
        2,
        format!(
            "{} already holds trees ({}{more}): loading would add to them and replace equal \
             keys; load into a new directory, or pass --merge",
            dir.display(),
            shown.join(", ")
        ),
    ))
}

/// An environment that could not be opened. Damage found while opening exits 1, as damage
/// `check` finds later does; a directory with no environment, or any other failure, 3.
pub(crate) fn opening_failed(dir: &Path, e: Error) -> Failure {
    let damaged = matches!(e, Error::Corruption { .. }) && dir.join(hrafn::DATA_FILE).exists();
    fail(
        if damaged { 1 } else { 3 },
        format!("opening {}: {e}", dir.display()),
    )
}

fn run(command: Command, out: &mut impl Write) -> Result<(), Failure> {
    match command {
        Command::Stat { dir } => stat(&open(&dir)?, out),
        Command::Check { dir } => {
            let env = open(&dir)?;
            let bar =
                backup::progress_bar("check [{bar:30}] {human_pos}/{human_len} pages ETA {eta}");
            let report = env.begin_read()?.check_with_progress(|checked, total| {
                bar.set_length(total);
                bar.set_position(checked);
            })?;
            bar.finish_and_clear();
            writeln!(
                out,
                "ok: {} trees ({} nested, {} embedded), {} entries, {} pages in use, {} free, \
                 high-water mark {}",
                report.tree_count,
                report.nested_tree_count,
                report.embedded_tree_count,
                report.entry_count,
                report.used_pages,
                report.free_pages,
                report.next_page_number
            )?;
            Ok(())
        }
        Command::Report { dir, json, svg } => {
            report::report(&open(&dir)?, json, svg.as_deref(), out)
        }
        Command::Trees { dir } => {
            let env = open(&dir)?;
            let rtx = env.begin_read()?;
            for name in rtx.list_trees()? {
                let header = rtx.tree_header(&name)?;
                writeln!(
                    out,
                    "{name}\t{}\t{}",
                    kind_name(header.kind),
                    header.entry_count
                )?;
            }
            Ok(())
        }
        Command::Get {
            dir,
            tree,
            key,
            hex_key,
            format,
        } => {
            let env = open(&dir)?;
            let rtx = env.begin_read()?;
            let key = if hex_key {
                from_hex(&key)?
            } else {
                key.into_bytes()
            };
            let value = match rtx.tree_header(&tree)?.kind {
                TreeKind::Fixed { .. } => {
                    let n = decimal(&key)?;
                    rtx.open_fixed_tree(&tree)?.get(n)?
                }
                _ => rtx.open_tree(&tree)?.get(&key)?,
            };
            match value {
                Some(v) => print_one(out, format, None, v),
                None => Err(fail(1, "no such key")),
            }
        }
        Command::Dump { dir } => dump::dump(&open(&dir)?, out).map_err(copy_cut_short("dump")),
        Command::Compact { dir, into } => compact::compact(&dir, into.as_deref(), out),
        Command::Load { dir, merge } => {
            let open = || {
                if !merge && dir.join(hrafn::DATA_FILE).exists() {
                    // Looked at read-only first, so a refused load changes no file (a
                    // writer's open may recover and rewrite headers).
                    let existing = Environment::open_read_only(&dir, Options::default())
                        .map_err(|e| opening_failed(&dir, e))?;
                    refuse_trees(&dir, &existing)?;
                }
                // Without a data file the open makes a new, empty environment.
                Environment::open(&dir, Options::default()).map_err(|e| opening_failed(&dir, e))
            };
            let stdin = std::io::stdin();
            // A bar by bytes when the dump comes from a file (its size is known).
            let size_bytes = stdin
                .as_fd()
                .try_clone_to_owned()
                .ok()
                .and_then(|fd| std::fs::File::from(fd).metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.len());
            let bar = backup::progress_bar(
                "load [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
            );
            match size_bytes {
                Some(size) => bar.set_length(size),
                None => bar.set_style(
                    indicatif::ProgressStyle::with_template("load {bytes} {bytes_per_sec}")
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
                ),
            }
            let loaded = dump::load(open, bar.wrap_read(stdin.lock()))?;
            bar.finish_and_clear();
            eprintln!("loaded {loaded} entries and records");
            Ok(())
        }
        Command::Backup {
            dir,
            out: target,
            incremental,
            chain,
            compact,
        } => backup::backup(&dir, &target, incremental, chain, compact, out),
        Command::Ts { command } => ts::run(command, out),
        Command::Graph { command } => graph::run(command, out),
        Command::Restore { into, backups } => backup::restore(&backups, &into, out),
        Command::Verify { backups, deep } => backup::verify(&backups, deep, out),
        Command::Scan {
            dir,
            tree,
            from,
            to,
            prefix,
            limit,
            format,
        } => {
            let env = open(&dir)?;
            scan(
                &env,
                &tree,
                from,
                to,
                prefix,
                limit.unwrap_or(usize::MAX),
                format,
                out,
            )
        }
    }
}

fn stat(env: &Environment, out: &mut impl Write) -> Result<(), Failure> {
    let stats = env.stats();
    let rtx = env.begin_read()?;
    let trees = rtx.list_trees()?;
    writeln!(out, "last commit\t{}", stats.txn_id)?;
    writeln!(out, "synced commit\t{}", stats.synced_txn_id)?;
    writeln!(out, "data file bytes\t{}", stats.data_file_size_bytes)?;
    writeln!(out, "trees\t{}", trees.len())?;
    let mut entries = 0;
    for name in &trees {
        entries += rtx.tree_header(name)?.entry_count;
    }
    writeln!(out, "entries\t{entries}")?;
    writeln!(
        out,
        "journal records replayed at open\t{}",
        stats.recovered_records
    )?;
    Ok(())
}

fn kind_name(kind: TreeKind) -> String {
    match kind {
        TreeKind::BTree => "btree".into(),
        TreeKind::Fixed { value_size } => format!("fixed({value_size})"),
        TreeKind::Multi => "multi".into(),
        TreeKind::Table => "table".into(),
    }
}

fn decimal(key: &[u8]) -> Result<u64, Failure> {
    std::str::from_utf8(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| fail(2, "a fixed-size tree's key is a decimal u64"))
}

fn from_hex(s: &str) -> Result<Vec<u8>, Failure> {
    if !s.len().is_multiple_of(2) {
        return Err(fail(2, "hex of odd length"));
    }
    decode_hex(s).ok_or_else(|| fail(2, "not hex"))
}

/// The bytes `s` spells as pairs of hex digits (either case); `None` for anything else,
/// a sign included (`from_str_radix` alone would read `+f` as `0f`).
pub(crate) fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes {
        if b.is_ascii_graphic() || b == b' ' {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

fn json_bytes(bytes: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => serde_json::Value::String(s.to_owned()),
        Err(_) => serde_json::json!({ "hex": hex(bytes) }),
    }
}

/// Prints one entry (or, without a key, one value).
fn print_one(
    out: &mut impl Write,
    format: Format,
    key: Option<&[u8]>,
    value: &[u8],
) -> Result<(), Failure> {
    match (format, key) {
        (Format::Text, Some(k)) => writeln!(out, "{}\t{}", text(k), text(value))?,
        (Format::Text, None) => writeln!(out, "{}", text(value))?,
        (Format::Hex, Some(k)) => writeln!(out, "{}\t{}", hex(k), hex(value))?,
        (Format::Hex, None) => writeln!(out, "{}", hex(value))?,
        (Format::Json, Some(k)) => writeln!(
            out,
            "{}",
            serde_json::json!({ "key": json_bytes(k), "value": json_bytes(value) })
        )?,
        (Format::Json, None) => {
            writeln!(out, "{}", serde_json::json!({ "value": json_bytes(value) }))?
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn scan(
    env: &Environment,
    tree: &str,
    from: Option<String>,
    to: Option<String>,
    prefix: Option<String>,
    limit: usize,
    format: Format,
    out: &mut impl Write,
) -> Result<(), Failure> {
    use std::ops::Bound;
    let rtx = env.begin_read()?;
    let kind = rtx.tree_header(tree)?.kind;
    if let TreeKind::Fixed { .. } = kind {
        if prefix.is_some() {
            return Err(fail(
                2,
                "a fixed-size tree has numeric keys: use --from and --to",
            ));
        }
        let start = from.map(|s| decimal(s.as_bytes())).transpose()?;
        let end = to.map(|s| decimal(s.as_bytes())).transpose()?;
        let range = (
            start.map_or(Bound::Unbounded, Bound::Included),
            end.map_or(Bound::Unbounded, Bound::Excluded),
        );
        for entry in rtx.open_fixed_tree(tree)?.range(range)?.take(limit) {
            let (k, v) = entry?;
            print_one(out, format, Some(k.to_string().as_bytes()), v)?;
        }
        return Ok(());
    }
    let (start, end) = match prefix {
        Some(p) => {
            let mut end = p.clone().into_bytes();
            // The smallest key above every key with the prefix.
            while end.last() == Some(&0xFF) {
                end.pop();
            }
            let end = match end.last_mut() {
                Some(last) => {
                    *last += 1;
                    Bound::Excluded(end)
                }
                None => Bound::Unbounded,
            };
            (Bound::Included(p.into_bytes()), end)
        }
        None => (
            from.map_or(Bound::Unbounded, |s| Bound::Included(s.into_bytes())),
            to.map_or(Bound::Unbounded, |s| Bound::Excluded(s.into_bytes())),
        ),
    };
    match kind {
        TreeKind::Multi => {
            let m = rtx.open_multi_tree(tree)?;
            let mut printed = 0;
            for key in m.keys((start, end))? {
                let key = key?;
                for value in m.values(key)? {
                    if printed == limit {
                        return Ok(());
                    }
                    print_one(out, format, Some(key), value?)?;
                    printed += 1;
                }
            }
            Ok(())
        }
        TreeKind::Table => Err(fail(2, "scanning tables is not supported yet; use `check`")),
        _ => {
            for entry in rtx.open_tree(tree)?.range((start, end))?.take(limit) {
                let (k, v) = entry?;
                print_one(out, format, Some(k), v)?;
            }
            Ok(())
        }
    }
}
