//! Bulk load from CSV through merged transactions.
//!
//! Nodes: a header `id,label,<property>...`, then one node per row; `id` is the file's own
//! name for the node (kept as the text property `_id`), used by the edge file. Edges: a
//! header `src,dst,type,<property>...`. A property cell is read by [`cell_value`]: an
//! integer, a float, `true`/`false`, or else text; an empty cell sets nothing.
//!
//! Edges are stored in rounds of up to [`ROUND_EDGES`] rows, each round reordered for
//! locality before it is cut into transactions: a transaction of edges in file order
//! touches an adjacency leaf per edge in each direction (the ends are spread over the whole
//! graph), so its commit copies, diffs and journals thousands of pages for a few changed
//! entries in each. A round is cut into tiles, a range of sources by a range of
//! destinations (ranges cut where they hold equal numbers of the round's edges), and
//! stored tile by tile: a transaction then touches the out-adjacency leaves of one source
//! range and the in-adjacency leaves of one destination range. Every transaction still
//! holds whole edges (record and both directions), so a crash between two leaves no
//! dangling half.
//!
//! The reading thread parses, orders and prepares each transaction's edges
//! (`batch.rs`); two storing threads submit them in turn (`pipeline.rs`), so the single
//! writer always has the next transaction while the last one's journal write is in
//! flight.

use crate::batch::{BatchEdge, EdgeBatch, TypeNames, type_ranks};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::ids::IdMap;
use crate::pipeline::{Pipeline, Turn};
use crate::value::{Properties, Value, check_name, encode_or_empty};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

/// Node rows per transaction.
const ROWS_PER_TXN: usize = 20_000;

/// Edge rows per transaction. Larger than for nodes: with a round's edges cut into
/// tiles, the pages a load writes fall with the square root of round × transaction size
/// (module docs). On `hrafn-bench graph --csv-only` (1M nodes, 10M edges), 160,000 with
/// rounds of 10M changed 6.2 GB of pages where 80,000 with rounds of 2M changed 11.5 GB;
/// larger transactions change fewer still, but each holds more pages in memory.
pub const EDGE_ROWS_PER_TXN: usize = 160_000;

/// Edge rows buffered, reordered and stored as one round (see the module docs): a larger
/// round makes tiles narrower (pages touched per transaction fall with its square root)
/// at the cost of holding its rows in memory (about 50 bytes a row without properties).
pub const ROUND_EDGES: usize = 10_000_000;

/// Input bytes of edge rows that also end a round, for rows with many properties.
const ROUND_BYTES: u64 = 256 << 20;

/// An edge row read and resolved, waiting for its round to be stored.
struct PendingEdge {
    /// Its ends and the index of its type among the round's.
    edge: BatchEdge,
    /// Its properties, encoded (empty: none): a map per row would hold ten times the bytes
    /// of a round's input.
    props: Vec<u8>,
}

/// Edge rows read and not yet stored, with the distinct edge types they name.
#[derive(Default)]
struct Round {
    edges: Vec<PendingEdge>,
    types: TypeNames,
}

impl Round {
    fn push(&mut self, source: u64, destination: u64, edge_type: &str, props: Vec<u8>) {
        let edge = BatchEdge {
            source,
            destination,
            type_index: self.types.index_of(edge_type),
        };
        self.edges.push(PendingEdge { edge, props });
    }

    /// The round's edges and types, leaving it empty.
    fn take(&mut self) -> (Vec<PendingEdge>, Arc<Vec<String>>) {
        (std::mem::take(&mut self.edges), Arc::new(self.types.take()))
    }
}

/// Reorders `edges` tile by tile for transactions of `per_txn` edges (see the module
/// docs): about `(len / per_txn)^(1/2)` source ranges by as many destination ranges, each
/// range holding an equal share of the edges; in file order within a tile (each
/// transaction's edges are put in key order when it is prepared).
fn order_for_locality(edges: &mut [PendingEdge], per_txn: usize) {
    let ranges = ((edges.len() / per_txn.max(1)) as f64)
        .sqrt()
        .ceil()
        .max(1.0) as usize;
    if ranges == 1 {
        return;
    }
    // The first end of each range after the first, by edge count.
    let cuts = |end: fn(&PendingEdge) -> u64| -> Vec<u64> {
        let mut ends: Vec<u64> = edges.iter().map(end).collect();
        ends.sort_unstable();
        (1..ranges).map(|i| ends[i * ends.len() / ranges]).collect()
    };
    let (src_cuts, dst_cuts) = (cuts(|e| e.edge.source), cuts(|e| e.edge.destination));
    let range_of = |cuts: &[u64], end: u64| cuts.partition_point(|&c| c <= end) as u64;
    // Stable, so file order within a tile; in place, so a round is held once.
    edges.sort_by_cached_key(|e| {
        range_of(&src_cuts, e.edge.source) * ranges as u64 + range_of(&dst_cuts, e.edge.destination)
    });
}

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

/// The value a CSV cell stores (`None` for an empty cell, which sets nothing): an integer
/// when the cell is one exactly as `i64` prints it, a float when it has digits and a point
/// or an exponent and is finite, `true` or `false`, or else the text itself. So nothing is
/// changed on the way in: `007` and `+7` (codes, phone numbers) stay text, as does an
/// integer too large for `i64`, which a float would round, `NaN` or `inf`, and a number
/// too small for a normal `f64` (`1e-400` would read as zero).
pub fn cell_value(cell: &str) -> Option<Value> {
    if cell.is_empty() {
        return None;
    }
    let integer = cell.parse::<i64>().ok().filter(|i| i.to_string() == cell);
    let float_like = cell.bytes().any(|b| b.is_ascii_digit())
        && cell.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
        && !cell.starts_with('+');
    Some(if let Some(i) = integer {
        Value::Int(i)
    } else if let Some(f) = float_like
        .then(|| cell.parse::<f64>().ok())
        .flatten()
        .filter(|f| f.is_normal() || (*f == 0.0 && !mantissa_has_nonzero_digit(cell)))
    {
        Value::Float(f)
    } else if cell == "true" || cell == "false" {
        Value::Bool(cell == "true")
    } else {
        Value::Text(cell.to_string())
    })
}

/// Whether the digits before a number's exponent include one that is not zero.
fn mantissa_has_nonzero_digit(cell: &str) -> bool {
    cell.bytes()
        .take_while(|b| !matches!(b, b'e' | b'E'))
        .any(|b| matches!(b, b'1'..=b'9'))
}

fn parse_error(line: u64, message: impl Into<String>) -> Error {
    Error::Parse {
        line: line as usize,
        message: message.into(),
    }
}

/// The CSV reader's error in words, with its line.
fn csv_error(e: csv::Error) -> Error {
    let line = e.position().map_or(0, |p| p.line() as usize);
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("a row of {len} fields where the header has {expected_len}"),
        csv::ErrorKind::Utf8 { .. } => "not UTF-8".to_string(),
        _ => e.to_string(),
    };
    match e.into_kind() {
        csv::ErrorKind::Io(io) => Error::Io(io),
        _ => Error::Parse { line, message },
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
    // A second column of a name would silently replace the first one's values.
    let mut names = std::collections::HashSet::new();
    if let Some(twice) = header[expected.len()..]
        .iter()
        .find(|h| !h.is_empty() && !names.insert(h.as_str()))
    {
        return Err(parse_error(
            1,
            format!("the {what} file names column {twice:?} twice"),
        ));
    }
    Ok((reader, header))
}

/// The properties of a row's cells after the first `skip`, named by `header`; an empty
/// cell sets nothing.
///
/// # Errors
/// [`Error::Parse`] at `line` for a value under a column whose name cannot be a property
/// name (empty, too long, a NUL): found here, the row's line is still known.
fn row_properties(
    header: &[String],
    record: &csv::StringRecord,
    skip: usize,
    line: u64,
) -> Result<Properties> {
    let mut props = Properties::new();
    for (name, cell) in header.iter().zip(record.iter()).skip(skip) {
        if let Some(v) = cell_value(cell) {
            check_name(name)
                .map_err(|_| parse_error(line, format!("a value under column {name:?}")))?;
            props.insert(name.clone(), v);
        }
    }
    Ok(props)
}

/// A node row: its file id, label and properties.
type NodeRow = (String, String, Properties);

/// Sends `batch` (leaving it empty) to be stored in one transaction. The job gives back
/// the rows' file ids with their stable ids and drops the rest of the rows on its own
/// thread: the reading thread has enough to do.
fn send_nodes<'a>(
    graph: &'a Graph,
    batch: &mut Vec<NodeRow>,
    pipeline: &mut Pipeline<'a, '_, (Vec<String>, Vec<u64>)>,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let rows = Arc::new(std::mem::take(batch));
    pipeline.send(Box::new(move |turn: &Turn| {
        let shared = Arc::clone(&rows);
        let ids = turn.submit(graph, move |g| {
            let nodes: Vec<(&str, &Properties)> = shared
                .iter()
                .map(|(_, label, props)| (label.as_str(), props))
                .collect();
            g.add_nodes(&nodes)
        })?;
        // The transaction may still hold its copy of the rows for a moment.
        let file_ids = match Arc::try_unwrap(rows) {
            Ok(rows) => rows.into_iter().map(|(file_id, ..)| file_id).collect(),
            Err(rows) => rows.iter().map(|(file_id, ..)| file_id.clone()).collect(),
        };
        Ok((file_ids, ids))
    }))
}

/// Sends the edges of `round` (leaving it empty) to be stored, in transactions of
/// [`EDGE_ROWS_PER_TXN`] edges in locality order, each prepared here.
fn send_round<'a>(
    graph: &'a Graph,
    round: &mut Round,
    pipeline: &mut Pipeline<'a, '_, u64>,
) -> Result<()> {
    let (mut edges, types) = round.take();
    order_for_locality(&mut edges, EDGE_ROWS_PER_TXN);
    // Names were checked as rows were read; ranked once for all of the round's batches.
    let rank = type_ranks(&types);
    let mut rows = edges.into_iter().peekable();
    while rows.peek().is_some() {
        let txn = rows.by_ref().take(EDGE_ROWS_PER_TXN);
        let batch = Arc::new(EdgeBatch::ranked(
            Arc::clone(&types),
            &rank,
            txn.map(|e| (e.edge, e.props)),
        ));
        pipeline.send(Box::new(move |turn: &Turn| {
            let shared = Arc::clone(&batch);
            turn.submit(graph, move |g| g.add_edge_batch(&shared).map(|_| ()))?;
            Ok(batch.len() as u64)
        }))?;
    }
    Ok(())
}

impl Graph {
    /// Loads nodes, then edges, from CSV (layouts above), in transactions of 20,000 node
    /// rows or [`EDGE_ROWS_PER_TXN`] edge rows submitted for merging in file order, two at
    /// a time so that the writer always has the next one; edges in rounds of up to
    /// [`ROUND_EDGES`] rows, each stored in an order that keeps transactions local
    /// (module docs), so edge ids follow that order, not the file's. Calls `progress`
    /// after each transaction.
    ///
    /// # Errors
    /// [`Error::Parse`] with the line for a bad header (a property column named twice, or
    /// a node file's column named `_id`, included), a short row, a node id given twice,
    /// an edge naming a node the node file does not have, or a label, edge type or
    /// property column name that cannot be stored (empty, over 255 bytes, a NUL): what
    /// earlier transactions stored stays (the nodes, and the edges of earlier rounds),
    /// the rows of the round being read are not stored. Engine errors: the transactions
    /// before the failing one stay, and those already handed to the writer with them.
    pub fn load_csv(
        &self,
        nodes: impl Read,
        edges: impl Read,
        progress: &mut dyn FnMut(&LoadProgress),
    ) -> Result<LoadReport> {
        let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let read_bytes = || bytes.load(std::sync::atomic::Ordering::Relaxed);
        let mut report = LoadReport::default();
        let mut at = LoadProgress::default();

        let (mut reader, header) = open_csv(nodes, &bytes, &["id", "label"], "node")?;
        // A column of that name would replace the file id the load keeps there.
        if header[2..].iter().any(|h| h == EXTERNAL_ID_PROPERTY) {
            return Err(parse_error(
                1,
                format!("the node file's columns may not include {EXTERNAL_ID_PROPERTY}"),
            ));
        }
        // The edge rows' ends are resolved here, not in the caller's map (see `IdMap`). It
        // also finds a node id given twice: a row read takes its id (`IdMap::claim`) and
        // gets its stable id once stored.
        let ids = RefCell::new(IdMap::default());
        let mut node_stored = |(file_ids, stored): (Vec<String>, Vec<u64>)| -> Result<()> {
            report.nodes += file_ids.len() as u64;
            let mut ids = ids.borrow_mut();
            for (file_id, id) in file_ids.into_iter().zip(stored) {
                ids.insert(&file_id, id);
                report.ids.insert(file_id, id);
            }
            at.nodes = report.nodes;
            at.bytes_read = read_bytes();
            progress(&at);
            Ok(())
        };
        Pipeline::run(&mut node_stored, |pipeline| {
            let mut batch: Vec<NodeRow> = Vec::new();
            // One record read into again and again: `records()` allocates one per row.
            let mut record = csv::StringRecord::new();
            while reader.read_record(&mut record).map_err(csv_error)? {
                let line = record.position().map_or(0, |p| p.line());
                if record.len() < 2 {
                    return Err(parse_error(line, "a node row needs an id and a label"));
                }
                // Checked here, with the line known, not in the transaction.
                check_name(&record[1])
                    .map_err(|_| parse_error(line, format!("invalid label {:?}", &record[1])))?;
                let mut props = row_properties(&header, &record, 2, line)?;
                props.insert(
                    EXTERNAL_ID_PROPERTY.into(),
                    Value::Text(record[0].to_string()),
                );
                if !ids.borrow_mut().claim(&record[0]) {
                    return Err(parse_error(
                        line,
                        format!("node {:?} given twice", &record[0]),
                    ));
                }
                batch.push((record[0].to_string(), record[1].to_string(), props));
                if batch.len() == ROWS_PER_TXN {
                    send_nodes(self, &mut batch, pipeline)?;
                }
                pipeline.check()?;
            }
            send_nodes(self, &mut batch, pipeline)
        })?;
        // A node file without rows is told too.
        if report.nodes == 0 {
            at.bytes_read = read_bytes();
            progress(&at);
        }
        let ids = ids.into_inner();

        let (mut reader, header) = open_csv(edges, &bytes, &["src", "dst", "type"], "edge")?;
        let mut edges_stored = 0u64;
        let mut edge_stored = |count: u64| -> Result<()> {
            edges_stored += count;
            at.edges = edges_stored;
            at.bytes_read = read_bytes();
            progress(&at);
            Ok(())
        };
        Pipeline::run(&mut edge_stored, |pipeline| {
            let mut round = Round::default();
            // The counter already holds the node file's bytes: a round's bytes are counted
            // from here, or a large node file would end the first round after one row.
            let mut round_start_bytes = read_bytes();
            // One record read into again and again: `records()` allocates one per row.
            let mut record = csv::StringRecord::new();
            while reader.read_record(&mut record).map_err(csv_error)? {
                let line = record.position().map_or(0, |p| p.line());
                if record.len() < 3 {
                    return Err(parse_error(line, "an edge row needs src, dst and type"));
                }
                let end = |i: usize| {
                    ids.get(&record[i]).ok_or_else(|| {
                        parse_error(line, format!("no node {:?} in the node file", &record[i]))
                    })
                };
                let (src, dst) = (end(0)?, end(1)?);
                check_name(&record[2]).map_err(|_| {
                    parse_error(line, format!("invalid edge type {:?}", &record[2]))
                })?;
                let props = row_properties(&header, &record, 3, line)?;
                let props =
                    encode_or_empty(&props).map_err(|e| parse_error(line, e.to_string()))?;
                round.push(src, dst, &record[2], props);
                let read = read_bytes();
                if round.edges.len() == ROUND_EDGES || read - round_start_bytes >= ROUND_BYTES {
                    send_round(self, &mut round, pipeline)?;
                    round_start_bytes = read;
                }
                pipeline.check()?;
            }
            send_round(self, &mut round, pipeline)
        })?;
        report.edges = edges_stored;
        // The last call tells the whole load, also when no edge transaction made it.
        if report.edges == 0 || at.bytes_read != read_bytes() {
            at.bytes_read = read_bytes();
            progress(&at);
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn cells_keep_what_they_say() {
        assert_eq!(cell_value(""), None);
        assert_eq!(cell_value("42"), Some(Value::Int(42)));
        assert_eq!(
            cell_value("-9223372036854775808"),
            Some(Value::Int(i64::MIN))
        );
        assert_eq!(cell_value("2.5"), Some(Value::Float(2.5)));
        assert_eq!(cell_value("-1e3"), Some(Value::Float(-1000.0)));
        assert_eq!(cell_value("0.0"), Some(Value::Float(0.0)));
        assert_eq!(cell_value("0e-999"), Some(Value::Float(0.0)));
        assert_eq!(cell_value("2.5e-300"), Some(Value::Float(2.5e-300)));
        assert_eq!(cell_value("true"), Some(Value::Bool(true)));
        // A number would change them: leading zeros, a plus sign, -0, more digits than an
        // i64 holds, an exponent past f64; and words the float parser takes.
        for text in [
            "00123",
            "+7",
            "-0",
            "12345678901234567890",
            "1e400",
            "1e-400",
            "-2.5e-320",
            "NaN",
            "inf",
            "Infinity",
            "+1.5",
            "1.2.3",
            "True",
        ] {
            assert_eq!(cell_value(text), Some(Value::Text(text.into())), "{text}");
        }
    }

    fn edge(source: u64, destination: u64) -> PendingEdge {
        PendingEdge {
            edge: BatchEdge {
                source,
                destination,
                type_index: 0,
            },
            props: Vec::new(),
        }
    }

    /// Each transaction's slice of an ordered round covers about one source range and one
    /// destination range; in file order it covers all of them.
    #[test]
    fn a_round_is_ordered_into_local_transactions() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (n, per_txn, space) = (200_000usize, 2_000usize, 1_000_000u64);
        let edges: Vec<PendingEdge> = (0..n)
            .map(|_| edge(rng.gen_range(0..space), rng.gen_range(0..space)))
            .collect();
        let mut before: Vec<(u64, u64)> = edges
            .iter()
            .map(|e| (e.edge.source, e.edge.destination))
            .collect();
        let mut ordered = edges;
        order_for_locality(&mut ordered, per_txn);
        let mut after: Vec<(u64, u64)> = ordered
            .iter()
            .map(|e| (e.edge.source, e.edge.destination))
            .collect();
        // Tenths of the key space, about the ranges the order cuts (10 by 10 here).
        let tenths = |chunk: &[PendingEdge], end: fn(&PendingEdge) -> u64| {
            let mut t: Vec<u64> = chunk.iter().map(|e| end(e) * 10 / space).collect();
            t.sort_unstable();
            t.dedup();
            t.len()
        };
        let chunks: Vec<&[PendingEdge]> = ordered.chunks(per_txn).collect();
        let src_max = chunks.iter().map(|c| tenths(c, |e| e.edge.source)).max();
        let dst_mean = chunks
            .iter()
            .map(|c| tenths(c, |e| e.edge.destination))
            .sum::<usize>() as f64
            / chunks.len() as f64;
        assert!(
            src_max <= Some(3),
            "source tenths per transaction: {src_max:?}"
        );
        assert!(
            dst_mean <= 2.5,
            "destination tenths per transaction: {dst_mean}"
        );
        // The same edges, none lost or doubled.
        before.sort_unstable();
        after.sort_unstable();
        assert_eq!(before, after);
    }

    #[test]
    fn a_small_round_keeps_its_order() {
        let mut ordered: Vec<PendingEdge> = (0..100).rev().map(|i| edge(i, i)).collect();
        order_for_locality(&mut ordered, 1_000);
        assert!(ordered.iter().map(|e| e.edge.source).eq((0..100).rev()));
    }
}
