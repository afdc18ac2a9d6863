//! `hrafn graph`: the graph store of `hrafn-graph` in an environment: bulk-load CSV, count
//! and check, read nodes and edges, list neighbours, walk breadth-first, find shortest
//! paths, and find nodes by label and property.
//!
//! `load` opens the environment for writing (made if missing). The other commands, `stat`
//! and its graph check included, open it read-only on one snapshot, so they work while
//! another process writes, and refuse a directory without a graph rather than make one.

use crate::{Failure, fail, require_dir};
use clap::{Subcommand, ValueEnum};
use hrafn::{Environment, Options};
use hrafn_graph::load::EXTERNAL_ID_PROPERTY;
use hrafn_graph::{
    Direction, Edge, Error as GraphError, Graph, GraphRead, LoadProgress, Node, Properties,
    Traversal, Value,
};
use std::cell::Cell;
use std::fmt::Display;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub(crate) enum GraphCommand {
    /// Loads nodes, then edges, from CSV files into the graph in DIR (made if missing),
    /// adding to what is there, and prints what was stored.
    ///
    /// The node file's header is `id,label,<property>...`: `id` is the file's own name
    /// for the node, kept as the text property `_id` and used by the edge file, whose
    /// header is `src,dst,type,<property>...`. A property cell is read as an integer, a
    /// float, `true`/`false`, or else text; an empty cell sets nothing. Nodes and edges
    /// get ids of the graph's own (`find --property _id` finds a file id's node).
    Load {
        dir: PathBuf,
        /// The node file.
        #[arg(long, value_name = "FILE")]
        nodes: PathBuf,
        /// The edge file.
        #[arg(long, value_name = "FILE")]
        edges: PathBuf,
    },
    /// Prints the node and edge counts, then runs the graph check (the engine's pages, then
    /// adjacency against the edge records, no dangling edge); exits 1 listing the problems
    /// when it finds any.
    Stat { dir: PathBuf },
    /// Prints node ID as one JSON object: {"id", "label", "properties"}.
    Node { dir: PathBuf, id: u64 },
    /// Prints edge ID as one JSON object: {"id", "type", "source", "destination",
    /// "properties"}.
    Edge { dir: PathBuf, id: u64 },
    /// Prints the neighbours of node ID, one `node edge type` line each, ordered by type,
    /// then node, then edge (with `--direction both`: the outgoing ones first).
    #[command(alias = "neighbors")]
    Neighbours {
        dir: PathBuf,
        id: u64,
        #[arg(long, value_enum, default_value_t = Way::Out)]
        direction: Way,
        /// Only along edges of this type.
        #[arg(long = "type", value_name = "TYPE")]
        edge_type: Option<String>,
    },
    /// Walks breadth-first from node ID and prints each node reached, once, as `id depth`:
    /// level by level, each level in id order.
    Bfs {
        dir: PathBuf,
        id: u64,
        /// The deepest level visited (the start is level 0) [default: no limit].
        #[arg(long, value_name = "N")]
        depth: Option<u32>,
        #[arg(long, value_enum, default_value_t = Way::Out)]
        direction: Way,
        /// Only along edges of this type (repeat for several).
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
    },
    /// Prints a path with the fewest edges from node FROM to node TO, its node ids on one
    /// line; with `--weight`, a lightest path and then a `weight W` line. Exits 1 when there
    /// is none.
    Path {
        dir: PathBuf,
        from: u64,
        to: u64,
        /// Weigh each edge by this numeric property (an edge without it weighs 1; a
        /// negative weight counts as 0).
        #[arg(long, value_name = "PROPERTY")]
        weight: Option<String>,
        #[arg(long, value_enum, default_value_t = Way::Out)]
        direction: Way,
        /// Only along edges of this type (repeat for several).
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
    },
    /// Prints the ids of the nodes labelled `--label`, ascending; with `--property` and
    /// `--value`, only those whose property has that value (through the property index
    /// when there is one).
    Find {
        dir: PathBuf,
        #[arg(long)]
        label: String,
        #[arg(long, requires = "value")]
        property: Option<String>,
        /// Read as `load` reads a cell: an integer, a float, `true`/`false`, or else text
        /// (always text for `_id`, which `load` keeps as text).
        #[arg(long, requires = "property", allow_hyphen_values = true)]
        value: Option<String>,
    },
}

/// Which way edges are followed.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Way {
    /// From source to destination.
    Out,
    /// From destination to source.
    In,
    /// Both ways.
    Both,
}

impl From<Way> for Direction {
    fn from(w: Way) -> Direction {
        match w {
            Way::Out => Direction::Out,
            Way::In => Direction::In,
            Way::Both => Direction::Both,
        }
    }
}

pub(crate) fn run(command: GraphCommand, out: &mut impl Write) -> Result<(), Failure> {
    match command {
        GraphCommand::Load { dir, nodes, edges } => load(&dir, &nodes, &edges, out),
        GraphCommand::Stat { dir } => stat(&dir, out),
        GraphCommand::Node { dir, id } => query(&dir, out, |g, w| {
            let node = g.node(id).map_err(read_fail)?.ok_or_else(|| no_node(id))?;
            writeln!(w, "{}", node_json(&node))?;
            Ok(())
        }),
        GraphCommand::Edge { dir, id } => query(&dir, out, |g, w| {
            let edge = g
                .edge(id)
                .map_err(read_fail)?
                .ok_or_else(|| fail(1, format!("no edge {id}")))?;
            writeln!(w, "{}", edge_json(&edge))?;
            Ok(())
        }),
        GraphCommand::Neighbours {
            dir,
            id,
            direction,
            edge_type,
        } => query(&dir, out, |g, w| {
            require_node(g, id)?;
            let neighbours = g
                .neighbours(id, direction.into(), edge_type.as_deref())
                .map_err(read_fail)?;
            for n in neighbours {
                writeln!(w, "{} {} {}", n.node, n.edge, n.edge_type)?;
            }
            Ok(())
        }),
        GraphCommand::Bfs {
            dir,
            id,
            depth,
            direction,
            types,
        } => query(&dir, out, |g, w| {
            require_node(g, id)?;
            let reached = g
                .bfs(id, &traversal(direction, types, depth))
                .map_err(read_fail)?;
            for (node, depth) in reached {
                writeln!(w, "{node} {depth}")?;
            }
            Ok(())
        }),
        GraphCommand::Path {
            dir,
            from,
            to,
            weight,
            direction,
            types,
        } => query(&dir, out, |g, w| {
            require_node(g, from)?;
            require_node(g, to)?;
            let t = traversal(direction, types, None);
            let none = || fail(1, format!("no path from {from} to {to}"));
            match weight {
                None => {
                    let path = g
                        .shortest_path(from, to, &t)
                        .map_err(read_fail)?
                        .ok_or_else(none)?;
                    writeln!(w, "{}", ids_line(&path))?;
                }
                Some(property) => {
                    let (path, weight) = g
                        .shortest_path_weighted(from, to, &property, &t)
                        .map_err(read_fail)?
                        .ok_or_else(none)?;
                    writeln!(w, "{}", ids_line(&path))?;
                    writeln!(w, "weight {weight}")?;
                }
            }
            Ok(())
        }),
        GraphCommand::Find {
            dir,
            label,
            property,
            value,
        } => query(&dir, out, |g, w| {
            let ids = match (property, value) {
                (Some(property), Some(value)) => {
                    let value = if property == EXTERNAL_ID_PROPERTY {
                        Value::Text(value)
                    } else {
                        parse_value(&value)
                    };
                    g.find_nodes(&label, &property, &value)
                }
                _ => g.nodes_with_label(&label),
            }
            .map_err(read_fail)?;
            for id in ids {
                writeln!(w, "{id}")?;
            }
            Ok(())
        }),
    }
}

/// A graph error as a failure: `context` says what was being done.
fn graph_fail(e: GraphError, context: impl Display) -> Failure {
    let e = match e {
        // The engine's errors get the exit codes the other commands give them.
        GraphError::Engine(inner) => {
            let Failure { code, message } = Failure::from(inner);
            return fail(code, format!("{context}: {message}"));
        }
        e => e,
    };
    let code = match &e {
        GraphError::NoSuchNode(_)
        | GraphError::NoSuchEdge(_)
        | GraphError::Corrupt(_)
        | GraphError::NotAGraph => 1,
        GraphError::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe => 0,
        // Bad input (a CSV that does not parse, a name that cannot be stored) is not bad
        // usage: it exits as `load` does for a damaged dump.
        _ => 3,
    };
    fail(code, format!("{context}: {e}"))
}

fn read_fail(e: GraphError) -> Failure {
    graph_fail(e, "reading the graph")
}

fn no_node(id: u64) -> Failure {
    fail(1, format!("no node {id}"))
}

fn require_node(g: &GraphRead<'_>, id: u64) -> Result<(), Failure> {
    match g.node_location(id).map_err(read_fail)? {
        Some(_) => Ok(()),
        None => Err(no_node(id)),
    }
}

/// Opens the graph in `dir` (made if missing) for writing.
fn open_graph(dir: &Path, why: &str) -> Result<Graph, Failure> {
    Graph::open(dir, Options::default()).map_err(|e| match e {
        GraphError::Engine(hrafn::Error::Locked) => fail(
            3,
            format!(
                "{}: open for writing in another process; {why} needs it alone",
                dir.display()
            ),
        ),
        e => graph_fail(e, format_args!("opening {}", dir.display())),
    })
}

/// Opens the environment in `dir` read-only after making sure it holds a graph this build
/// reads: an empty directory or an environment of other trees is refused (exit 1) and left
/// as it is.
fn open_read_only(dir: &Path) -> Result<Environment, Failure> {
    require_dir(dir)?;
    let no_graph = || fail(1, format!("{}: no graph here", dir.display()));
    // Checked first so that an empty directory is not touched.
    if !dir.join(hrafn::DATA_FILE).is_file() {
        return Err(no_graph());
    }
    let env = Environment::open_read_only(dir, Options::default()).map_err(|e| {
        let Failure { code, message } = Failure::from(e);
        fail(code, format!("opening {}: {message}", dir.display()))
    })?;
    match hrafn_graph::check_layout(&env.begin_read()?) {
        Ok(()) => {}
        Err(GraphError::NotAGraph) => return Err(no_graph()),
        Err(GraphError::Corrupt(why)) => return Err(fail(1, format!("{}: {why}", dir.display()))),
        Err(e) => return Err(graph_fail(e, "reading the graph's layout")),
    }
    Ok(env)
}

/// Runs a reading command: `body` on one read-only snapshot of the graph in `dir`, writing
/// to a buffered `out` (the outputs can be large).
fn query(
    dir: &Path,
    out: &mut impl Write,
    body: impl FnOnce(&GraphRead<'_>, &mut BufWriter<&mut dyn Write>) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let env = open_read_only(dir)?;
    let rtx = env.begin_read()?;
    let graph = GraphRead::open_on(&rtx).map_err(read_fail)?;
    let out: &mut dyn Write = out;
    let mut w = BufWriter::with_capacity(1 << 16, out);
    body(&graph, &mut w)?;
    w.flush()?;
    Ok(())
}

fn traversal(direction: Way, types: Vec<String>, depth: Option<u32>) -> Traversal<'static> {
    Traversal {
        direction: direction.into(),
        edge_types: types,
        max_depth: depth,
        ..Traversal::default()
    }
}

fn ids_line(ids: &[u64]) -> String {
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

/// A value given on the command line, read as `load` reads a CSV cell: an integer, a
/// float, `true`/`false`, or else text.
fn parse_value(s: &str) -> Value {
    hrafn_graph::cell_value(s).unwrap_or_else(|| Value::Text(String::new()))
}

/// A property value as JSON: null, a boolean, a number or a string; bytes are
/// {"hex": "..."} and a float JSON has no number for is {"float": "NaN"} (or "+Inf",
/// "-Inf").
fn value_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::Float(f) if f.is_finite() => serde_json::Value::from(*f),
        Value::Float(f) => {
            let name = if f.is_nan() {
                "NaN"
            } else if *f > 0.0 {
                "+Inf"
            } else {
                "-Inf"
            };
            serde_json::json!({ "float": name })
        }
        Value::Text(s) => serde_json::Value::String(s.clone()),
        Value::Bytes(b) => serde_json::json!({ "hex": crate::hex(b) }),
    }
}

fn properties_json(p: &Properties) -> serde_json::Value {
    serde_json::Value::Object(
        p.iter()
            .map(|(name, v)| (name.clone(), value_json(v)))
            .collect(),
    )
}

fn json_text(s: &str) -> serde_json::Value {
    serde_json::Value::String(s.to_string())
}

/// `{"id":..,"label":..,"properties":{..}}`, in that order, properties by name.
fn node_json(n: &Node) -> String {
    format!(
        "{{\"id\":{},\"label\":{},\"properties\":{}}}",
        n.id,
        json_text(&n.label),
        properties_json(&n.properties)
    )
}

/// `{"id":..,"type":..,"source":..,"destination":..,"properties":{..}}`, in that order.
fn edge_json(e: &Edge) -> String {
    format!(
        "{{\"id\":{},\"type\":{},\"source\":{},\"destination\":{},\"properties\":{}}}",
        e.id,
        json_text(&e.edge_type),
        e.source,
        e.destination,
        properties_json(&e.properties)
    )
}

/// Notes when the loader first reads from it: the load has reached the edge file.
struct Watched<'a, R> {
    inner: R,
    begun: &'a Cell<bool>,
}

impl<R: Read> Read for Watched<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.begun.set(true);
        self.inner.read(buf)
    }
}

/// Opens an input file; its size when it is a regular file.
fn open_input(path: &Path) -> Result<(File, Option<u64>), Failure> {
    let shown = path.display();
    let f = File::open(path).map_err(|e| fail(3, format!("{shown}: {e}")))?;
    let meta = f.metadata().map_err(|e| fail(3, format!("{shown}: {e}")))?;
    if meta.is_dir() {
        return Err(fail(3, format!("{shown}: a directory, not a CSV file")));
    }
    Ok((f, meta.is_file().then_some(meta.len())))
}

fn counts(graph: &Graph) -> Result<(u64, u64), GraphError> {
    graph.read(|g| Ok((g.node_count(), g.edge_count())))
}

fn load(dir: &Path, nodes: &Path, edges: &Path, out: &mut impl Write) -> Result<(), Failure> {
    // Open the inputs first: a missing file should not leave a new empty graph behind.
    let (node_file, node_bytes) = open_input(nodes)?;
    let (edge_file, edge_bytes) = open_input(edges)?;
    let graph = open_graph(dir, "load")?;
    let before = counts(&graph).map_err(read_fail)?;
    let bar = crate::backup::progress_bar(
        "load [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}  {msg}",
    );
    match node_bytes.zip(edge_bytes) {
        Some((n, e)) => bar.set_length(n + e),
        None => {
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "load {spinner} {bytes} {bytes_per_sec}  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            if !bar.is_hidden() {
                // Keeps the spinner turning while the input stalls.
                bar.enable_steady_tick(Duration::from_millis(100));
            }
        }
    }
    bar.tick();
    let edges_begun = Cell::new(false);
    let edge_input = Watched {
        inner: edge_file,
        begun: &edges_begun,
    };
    let started = Instant::now();
    let loaded = graph.load_csv(node_file, edge_input, &mut |p: &LoadProgress| {
        bar.set_position(p.bytes_read);
        bar.set_message(format!("{} nodes, {} edges", p.nodes, p.edges));
    });
    let elapsed = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let report = match loaded {
        Ok(report) => report,
        Err(e) => {
            let file = if edges_begun.get() { edges } else { nodes };
            let Failure { code, message } =
                graph_fail(e, format_args!("loading {}", file.display()));
            // What the transactions before the failure stored stays.
            let kept = match counts(&graph) {
                Ok(after) if after == before => "; nothing was stored".to_string(),
                Ok((nodes_after, edges_after)) => format!(
                    "; stored before the failure: nodes {}, edges {}",
                    nodes_after - before.0,
                    edges_after - before.1
                ),
                Err(_) => String::new(),
            };
            return Err(fail(code, format!("{message}{kept}")));
        }
    };
    writeln!(
        out,
        "nodes {}, edges {}, elapsed {elapsed:.3} s, {:.0} edges/s",
        report.nodes,
        report.edges,
        report.edges as f64 / elapsed.max(1e-9)
    )?;
    Ok(())
}

fn stat(dir: &Path, out: &mut impl Write) -> Result<(), Failure> {
    // One read-only snapshot for the counts and the check: works beside a writer.
    let env = open_read_only(dir)?;
    let rtx = env.begin_read()?;
    {
        let g = GraphRead::open_on(&rtx).map_err(read_fail)?;
        writeln!(out, "nodes\t{}", g.node_count())?;
        writeln!(out, "edges\t{}", g.edge_count())?;
    }
    let bar = crate::backup::progress_bar("check {spinner} {elapsed}");
    if !bar.is_hidden() {
        bar.enable_steady_tick(Duration::from_millis(100));
    }
    let report = hrafn_graph::check::check(&rtx);
    bar.finish_and_clear();
    let report = report.map_err(|e| graph_fail(e, "checking the graph"))?;
    if report.is_ok() {
        writeln!(out, "check\tok")?;
        return Ok(());
    }
    let problems = match report.problems.len() {
        1 => "1 problem".to_string(),
        n => format!("{n} problems"),
    };
    writeln!(out, "check\t{problems}")?;
    let mut message = format!("the graph check found {problems}:");
    for p in &report.problems {
        message.push_str("\n  ");
        message.push_str(p);
    }
    Err(fail(1, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_map_to_json() {
        let p = Properties::from([
            ("a".to_string(), Value::Null),
            ("b".to_string(), Value::Bool(true)),
            ("c".to_string(), Value::Int(-3)),
            ("d".to_string(), Value::Float(2.0)),
            ("e".to_string(), Value::Float(f64::NAN)),
            ("f".to_string(), Value::Float(f64::NEG_INFINITY)),
            ("g".to_string(), Value::Text("x\"y".into())),
            ("h".to_string(), Value::Bytes(vec![0, 255])),
        ]);
        assert_eq!(
            properties_json(&p).to_string(),
            r#"{"a":null,"b":true,"c":-3,"d":2.0,"e":{"float":"NaN"},"f":{"float":"-Inf"},"g":"x\"y","h":{"hex":"00ff"}}"#
        );
    }

    #[test]
    fn values_parse_as_the_loader_reads_cells() {
        assert_eq!(parse_value("42"), Value::Int(42));
        assert_eq!(parse_value("-1"), Value::Int(-1));
        assert_eq!(parse_value("2.5"), Value::Float(2.5));
        assert_eq!(parse_value("true"), Value::Bool(true));
        assert_eq!(parse_value("false"), Value::Bool(false));
        assert_eq!(parse_value("Ada"), Value::Text("Ada".into()));
        // What the loader keeps as text, so does a query: words, leading zeros, signs.
        for text in [
            "Nan",
            "inf",
            "Infinity",
            "007",
            "+7",
            "12345678901234567890",
            "",
        ] {
            assert_eq!(parse_value(text), Value::Text(text.into()), "{text}");
        }
    }
}
