//! Bulk load from CSV through merged transactions.
//!
//! Nodes: a header `id,label,<property>...`, then one node per row; `id` is the file's own
//! name for the node (kept as the text property `_id`), used by the edge file. Edges: a
//! header `src,dst,type,<property>...`. A property cell is read as an integer, a float,
//! `true`/`false`, or else text; an empty cell sets nothing.

use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::value::{Properties, Value};
use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

/// Rows per transaction.
const ROWS_PER_TXN: usize = 20_000;

/// The property a loaded node keeps its file id in.
pub const EXTERNAL_ID_PROPERTY: &str = "_id";

/// Where a load is.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadProgress {
    /// Nodes stored so far.
    pub nodes: u64,
    /// Edges stored so far.
    pub edges: u64,
    /// Input bytes read so far (both files).
    pub bytes_read: u64,
}

/// What a load stored, and the map from the file's node ids to stable ids.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Nodes stored.
    pub nodes: u64,
    /// Edges stored.
    pub edges: u64,
    /// The stable id of each node id of the file.
    pub ids: HashMap<String, u64>,
}

fn cell_value(cell: &str) -> Option<Value> {
    if cell.is_empty() {
        return None;
    }
    // Rust's float parser also takes words ("NaN", "inf", "Infinity"): a float has digits.
    let numeric = cell.bytes().any(|b| b.is_ascii_digit());
    Some(if let Ok(i) = cell.parse::<i64>() {
        Value::Int(i)
    } else if let Some(f) = cell.parse::<f64>().ok().filter(|_| numeric) {
        Value::Float(f)
    } else if cell == "true" || cell == "false" {
        Value::Bool(cell == "true")
    } else {
        Value::Text(cell.to_string())
    })
}

fn parse_error(line: u64, message: impl Into<String>) -> Error {
    Error::Parse {
        line: line as usize,
        message: message.into(),
    }
}

fn csv_error(e: csv::Error) -> Error {
    let line = e.position().map_or(0, |p| p.line() as usize);
    match e.into_kind() {
        csv::ErrorKind::Io(io) => Error::Io(io),
        kind => Error::Parse {
            line,
            message: format!("{kind:?}"),
        },
    }
}

/// Counts the bytes a reader hands out.
struct Counted<R> {
    inner: R,
    bytes: Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// A CSV reader over `input` counting into `bytes`, and its header, which must start with
/// `expected` (else an error naming the `what` file).
fn open_csv<R: Read>(
    input: R,
    bytes: &Arc<std::sync::atomic::AtomicU64>,
    expected: &[&str],
    what: &str,
) -> Result<(csv::Reader<Counted<R>>, Vec<String>)> {
    let mut reader = csv::ReaderBuilder::new().from_reader(Counted {
        inner: input,
        bytes: Arc::clone(bytes),
    });
    let header: Vec<String> = reader
        .headers()
        .map_err(csv_error)?
        .iter()
        .map(str::to_string)
        .collect();
    if header.len() < expected.len() || header.iter().zip(expected).any(|(h, e)| h != e) {
        return Err(parse_error(
            1,
            format!(
                "the {what} file's header must start with {}",
                expected.join(",")
            ),
        ));
    }
    Ok((reader, header))
}

impl Graph {
    /// Loads nodes, then edges, from CSV (layouts above), in transactions of 20,000 rows
    /// submitted for merging. Calls `progress` after each transaction.
    ///
    /// # Errors
    /// [`Error::Parse`] with the line for a bad header, a short row, a node id given twice
    /// or an edge naming a node the node file does not have (what was stored before stays); engine errors.
    pub fn load_csv(
        &self,
        nodes: impl Read,
        edges: impl Read,
        progress: &mut dyn FnMut(&LoadProgress),
    ) -> Result<LoadReport> {
        let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut report = LoadReport::default();
        let mut at = LoadProgress::default();
        let (mut reader, header) = open_csv(nodes, &bytes, &["id", "label"], "node")?;
        let mut batch: Vec<(String, String, Properties)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let flush_nodes = |batch: &mut Vec<(String, String, Properties)>,
                           report: &mut LoadReport|
         -> Result<()> {
            if batch.is_empty() {
                return Ok(());
            }
            let rows = Arc::new(std::mem::take(batch));
            let shared = Arc::clone(&rows);
            let ids = self.submit(move |g| {
                shared
                    .iter()
                    .map(|(_, label, props)| g.add_node(label, props))
                    .collect::<Result<Vec<u64>>>()
            })?;
            for ((ext, _, _), id) in rows.iter().zip(ids) {
                report.ids.insert(ext.clone(), id);
            }
            report.nodes += rows.len() as u64;
            Ok(())
        };
        for record in reader.records() {
            let record = record.map_err(csv_error)?;
            let line = record.position().map_or(0, |p| p.line());
            if record.len() < 2 {
                return Err(parse_error(line, "a node row needs an id and a label"));
            }
            let mut props = Properties::new();
            props.insert(
                EXTERNAL_ID_PROPERTY.into(),
                Value::Text(record[0].to_string()),
            );
            for (name, cell) in header.iter().zip(record.iter()).skip(2) {
                if let Some(v) = cell_value(cell) {
                    props.insert(name.clone(), v);
                }
            }
            if !seen.insert(record[0].to_string()) {
                return Err(parse_error(
                    line,
                    format!("node {:?} given twice", &record[0]),
                ));
            }
            batch.push((record[0].to_string(), record[1].to_string(), props));
            if batch.len() == ROWS_PER_TXN {
                flush_nodes(&mut batch, &mut report)?;
                at.nodes = report.nodes;
                at.bytes_read = bytes.load(std::sync::atomic::Ordering::Relaxed);
                progress(&at);
            }
        }
        flush_nodes(&mut batch, &mut report)?;
        at.nodes = report.nodes;
        at.bytes_read = bytes.load(std::sync::atomic::Ordering::Relaxed);
        progress(&at);

        let (mut reader, header) = open_csv(edges, &bytes, &["src", "dst", "type"], "edge")?;
        let mut batch: Vec<(u64, u64, String, Properties)> = Vec::new();
        let flush_edges = |batch: &mut Vec<(u64, u64, String, Properties)>| -> Result<u64> {
            if batch.is_empty() {
                return Ok(0);
            }
            let rows = Arc::new(std::mem::take(batch));
            let shared = Arc::clone(&rows);
            self.submit(move |g| {
                let edges: Vec<(u64, u64, &str, &Properties)> = shared
                    .iter()
                    .map(|(s, d, t, p)| (*s, *d, t.as_str(), p))
                    .collect();
                g.add_edges(&edges).map(|_| ())
            })?;
            Ok(rows.len() as u64)
        };
        for record in reader.records() {
            let record = record.map_err(csv_error)?;
            let line = record.position().map_or(0, |p| p.line());
            if record.len() < 3 {
                return Err(parse_error(line, "an edge row needs src, dst and type"));
            }
            let end = |i: usize| {
                report.ids.get(&record[i]).copied().ok_or_else(|| {
                    parse_error(line, format!("no node {:?} in the node file", &record[i]))
                })
            };
            let (src, dst) = (end(0)?, end(1)?);
            let mut props = Properties::new();
            for (name, cell) in header.iter().zip(record.iter()).skip(3) {
                if let Some(v) = cell_value(cell) {
                    props.insert(name.clone(), v);
                }
            }
            batch.push((src, dst, record[2].to_string(), props));
            if batch.len() == ROWS_PER_TXN {
                report.edges += flush_edges(&mut batch)?;
                at.edges = report.edges;
                at.bytes_read = bytes.load(std::sync::atomic::Ordering::Relaxed);
                progress(&at);
            }
        }
        report.edges += flush_edges(&mut batch)?;
        at.edges = report.edges;
        at.bytes_read = bytes.load(std::sync::atomic::Ordering::Relaxed);
        progress(&at);
        Ok(report)
    }
}
