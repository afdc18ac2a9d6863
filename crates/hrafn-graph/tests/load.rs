//! CSV bulk load: every kind of cell (quoted commas, quotes and line breaks, integers,
//! floats, booleans, text, empty cells), the graph it leaves (labels, the `_id` property,
//! properties, adjacency), the progress callback, and parse errors with their line numbers.

use hrafn::{Durability, Options};
use hrafn_graph::load::{EDGE_ROWS_PER_TXN, EXTERNAL_ID_PROPERTY};
use hrafn_graph::{Direction, Error, Graph, LoadProgress, LoadReport, Properties, Value};

fn open() -> (tempfile::TempDir, Graph) {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = Graph::open(dir.path(), Options::default().durability(Durability::None)).expect("open");
    (dir, g)
}

fn load(
    g: &Graph,
    nodes: &str,
    edges: &str,
) -> (hrafn_graph::Result<LoadReport>, Vec<LoadProgress>) {
    let mut calls = Vec::new();
    let r = g.load_csv(nodes.as_bytes(), edges.as_bytes(), &mut |p| calls.push(*p));
    (r, calls)
}

fn props(pairs: &[(&str, Value)]) -> Properties {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

const NODES: &str = "id,label,name,age,score,active,note
p1,Person,\"Smith, Ann\",36,1.5,true,
p2,Person,Bob,-4,2e3,false,\"says \"\"hi\"\"\"
c1,City,\"Oslo
Norway\",,,,x
007,Thing,,0,-0.25,TRUE,12abc
";

const EDGES: &str = "src,dst,type,since,weight,note
p1,p2,KNOWS,2010,0.5,
p2,p1,KNOWS,,,\"a, b\"
p1,c1,LIVES_IN,2001,,
p1,p1,SELF,,,
p1,p2,KNOWS,2011,,
007,c1,IN,,-1,\"\"
";

#[test]
fn loads_nodes_and_edges_with_every_kind_of_cell() {
    let (_dir, g) = open();
    let (r, calls) = load(&g, NODES, EDGES);
    let report = r.expect("load");
    assert_eq!((report.nodes, report.edges), (4, 6));
    assert_eq!(report.ids.len(), 4);
    let id = |ext: &str| report.ids[ext];
    let text = |s: &str| Value::Text(s.to_string());
    g.read(|r| {
        assert_eq!(r.node_count(), 4);
        assert_eq!(r.edge_count(), 6);
        let want = [
            (
                "p1",
                "Person",
                props(&[
                    ("name", text("Smith, Ann")),
                    ("age", Value::Int(36)),
                    ("score", Value::Float(1.5)),
                    ("active", Value::Bool(true)),
                ]),
            ),
            (
                "p2",
                "Person",
                props(&[
                    ("name", text("Bob")),
                    ("age", Value::Int(-4)),
                    ("score", Value::Float(2000.0)),
                    ("active", Value::Bool(false)),
                    ("note", text("says \"hi\"")),
                ]),
            ),
            (
                "c1",
                "City",
                props(&[("name", text("Oslo\nNorway")), ("note", text("x"))]),
            ),
            (
                "007",
                "Thing",
                props(&[
                    ("age", Value::Int(0)),
                    ("score", Value::Float(-0.25)),
                    // Only `true` and `false` are booleans.
                    ("active", text("TRUE")),
                    ("note", text("12abc")),
                ]),
            ),
        ];
        for (ext, label, mut p) in want {
            // The file's id is kept as text, even when it reads as a number.
            p.insert(EXTERNAL_ID_PROPERTY.to_string(), text(ext));
            let node = r.node(id(ext))?.expect("loaded node");
            assert_eq!(node.label, label, "{ext}");
            assert_eq!(node.properties, p, "{ext}");
            assert_eq!(
                r.find_nodes(label, EXTERNAL_ID_PROPERTY, &text(ext))?,
                vec![id(ext)]
            );
        }
        assert_eq!(r.nodes_with_label("Person")?, {
            let mut v = vec![id("p1"), id("p2")];
            v.sort_unstable();
            v
        });
        // Adjacency: parallel edges, a self-loop, types.
        let knows: Vec<u64> = r
            .neighbours(id("p1"), Direction::Out, Some("KNOWS"))?
            .iter()
            .map(|n| n.node)
            .collect();
        assert_eq!(knows, vec![id("p2"), id("p2")]);
        assert_eq!(r.degree(id("p1"), Direction::Out, None)?, 4);
        assert_eq!(r.degree(id("p1"), Direction::In, None)?, 2);
        assert_eq!(r.degree(id("p1"), Direction::Both, Some("SELF"))?, 2);
        assert_eq!(r.degree(id("c1"), Direction::In, None)?, 2);
        assert_eq!(r.degree(id("c1"), Direction::Out, None)?, 0);
        // Edge properties, empty cells setting nothing.
        let mut edge_props = Vec::new();
        for n in r.neighbours(id("p1"), Direction::Both, None)? {
            let e = r.edge(n.edge)?.expect("edge");
            edge_props.push((e.edge_type, e.source, e.destination, e.properties));
        }
        edge_props.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        edge_props.dedup();
        let mut want = vec![
            (
                "KNOWS".to_string(),
                id("p1"),
                id("p2"),
                props(&[("since", Value::Int(2010)), ("weight", Value::Float(0.5))]),
            ),
            (
                "KNOWS".to_string(),
                id("p2"),
                id("p1"),
                props(&[("note", text("a, b"))]),
            ),
            (
                "LIVES_IN".to_string(),
                id("p1"),
                id("c1"),
                props(&[("since", Value::Int(2001))]),
            ),
            ("SELF".to_string(), id("p1"), id("p1"), Properties::new()),
            (
                "KNOWS".to_string(),
                id("p1"),
                id("p2"),
                props(&[("since", Value::Int(2011))]),
            ),
        ];
        want.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        assert_eq!(edge_props, want);
        let thing = r.neighbours(id("007"), Direction::Out, None)?;
        assert_eq!(thing.len(), 1);
        let e = r.edge(thing[0].edge)?.expect("edge");
        assert_eq!((e.edge_type.as_str(), e.destination), ("IN", id("c1")));
        assert_eq!(e.properties, props(&[("weight", Value::Int(-1))]));
        Ok(())
    })
    .expect("read");
    assert!(g.check().expect("check").is_ok());
    // Progress: called, and the last call tells the whole load.
    let last = calls.last().expect("progress called");
    assert_eq!((last.nodes, last.edges), (4, 6));
    assert_eq!(last.bytes_read, (NODES.len() + EDGES.len()) as u64);
}

#[test]
fn progress_is_reported_after_each_transaction() {
    let (_dir, g) = open();
    let n = 45_000;
    let mut nodes = String::from("id,label,k\n");
    for i in 0..n {
        nodes.push_str(&format!("n{i},L,{}\n", i % 7));
    }
    let edge_count = 2 * EDGE_ROWS_PER_TXN + 5_000;
    let mut edges = String::from("src,dst,type\n");
    for j in 0..edge_count {
        let i = j % n;
        edges.push_str(&format!("n{i},n{},T{}\n", (i * 31 + 1) % n, j / n));
    }
    let (r, calls) = load(&g, &nodes, &edges);
    let report = r.expect("load");
    assert_eq!(report.nodes, n as u64);
    assert_eq!(report.edges, edge_count as u64);
    // 20,000 node rows a transaction, two full batches and the rest; edges likewise in
    // transactions of EDGE_ROWS_PER_TXN. Each call tells one more transaction, in the
    // order the storing threads hand them back (transactions merged into one come back
    // together, in either order).
    let steps = |count: fn(&LoadProgress) -> u64| -> Vec<u64> {
        let mut told: Vec<u64> = std::iter::once(0).chain(calls.iter().map(count)).collect();
        told.dedup();
        let mut steps: Vec<u64> = told.windows(2).map(|w| w[1] - w[0]).collect();
        steps.sort_unstable();
        steps
    };
    assert_eq!(steps(|c| c.nodes), vec![5_000, 20_000, 20_000], "{calls:?}");
    let per_txn = EDGE_ROWS_PER_TXN as u64;
    assert_eq!(
        steps(|c| c.edges),
        vec![5_000, per_txn, per_txn],
        "{calls:?}"
    );
    for w in calls.windows(2) {
        assert!(
            w[0].nodes <= w[1].nodes
                && w[0].edges <= w[1].edges
                && w[0].bytes_read <= w[1].bytes_read,
            "{calls:?}"
        );
    }
    let last = calls.last().expect("calls");
    assert_eq!((last.nodes, last.edges), (report.nodes, report.edges));
    // Transactions are stored in file order, two threads or not: so are the ids.
    let ids: Vec<u64> = (0..n).map(|i| report.ids[&format!("n{i}")]).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "node ids out of file order"
    );
    assert_eq!(last.bytes_read, (nodes.len() + edges.len()) as u64);
    g.read(|r| {
        assert_eq!(r.node_count(), n as u64);
        assert_eq!(r.edge_count(), edge_count as u64);
        let some = report.ids["n1234"];
        let out = r.neighbours(some, Direction::Out, Some("T0"))?;
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0].node,
            report.ids[&format!("n{}", (1234 * 31 + 1) % n)]
        );
        Ok(())
    })
    .expect("read");
}

fn parse_line(r: hrafn_graph::Result<LoadReport>) -> (usize, String) {
    match r {
        Err(Error::Parse { line, message }) => (line, message),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

fn counts(g: &Graph) -> (u64, u64) {
    g.read(|r| Ok((r.node_count(), r.edge_count())))
        .expect("read")
}

#[test]
fn a_bad_header_is_refused_at_line_1() {
    let edges = "src,dst,type\n";
    for header in ["ident,label\na,P\n", "id\na\n", "label,id\nP,a\n", ""] {
        let (_dir, g) = open();
        let (line, _) = parse_line(load(&g, header, edges).0);
        assert_eq!(line, 1, "{header:?}");
        assert_eq!(counts(&g), (0, 0));
    }
    for header in ["from,to,type\na,b,T\n", "src,dst\n", "src,type,dst\n"] {
        let (_dir, g) = open();
        let (line, message) = parse_line(load(&g, "id,label\na,P\nb,P\n", header).0);
        assert_eq!(line, 1, "{header:?}");
        assert!(message.contains("src,dst,type"), "{message}");
        // The nodes were stored before the edge file was read.
        assert_eq!(counts(&g), (2, 0));
    }
}

#[test]
fn a_short_row_is_refused_with_its_line() {
    // Line 5: a quoted line break makes the second row take two lines.
    let nodes = "id,label,name\na,P,x\nb,P,\"two\nlines\"\nc,P\nd,P,y\n";
    let (_dir, g) = open();
    let (line, _) = parse_line(load(&g, nodes, "src,dst,type\n").0);
    assert_eq!(line, 5);
    let (_dir, g) = open();
    let nodes = "id,label\na,P\nb,P\n";
    let edges = "src,dst,type\na,b,T\nb,a\n";
    let (line, message) = parse_line(load(&g, nodes, edges).0);
    assert_eq!(line, 3);
    assert_eq!(message, "a row of 2 fields where the header has 3");
    assert_eq!(counts(&g).0, 2);
    assert!(g.check().expect("check").is_ok());
    // The reader's other errors in words too.
    let (_dir, g) = open();
    let not_utf8: &[u8] = b"id,label\na,P\nb,\xff\n";
    let r = g.load_csv(not_utf8, &b"src,dst,type\n"[..], &mut |_| {});
    assert_eq!(parse_line(r), (3, "not UTF-8".to_string()));
}

/// A node id given twice is refused at its second row, before that row's transaction is
/// stored; the transactions before it stay.
#[test]
fn a_node_id_given_twice_is_refused_with_its_line() {
    let (_dir, g) = open();
    let nodes = "id,label\na,P\nb,P\na,Q\n";
    let (line, message) = parse_line(load(&g, nodes, "src,dst,type\n").0);
    assert_eq!(line, 4);
    assert!(message.contains("\"a\" given twice"), "{message}");
    assert_eq!(counts(&g), (0, 0));
    // The second use in a later transaction: the first transaction's rows stay.
    let (_dir, g) = open();
    let mut nodes = String::from("id,label\n");
    for i in 0..20_000 {
        nodes.push_str(&format!("n{i},P\n"));
    }
    nodes.push_str("x,P\nn7,P\n");
    let (line, _) = parse_line(load(&g, &nodes, "src,dst,type\n").0);
    assert_eq!(line, 20_003);
    assert_eq!(counts(&g), (20_000, 0));
}

#[test]
fn an_edge_to_an_unknown_node_is_refused_with_its_line() {
    let (_dir, g) = open();
    let nodes = "id,label\na,P\nb,P\n";
    let edges = "src,dst,type,w\na,b,T,1\nb,a,T,\"x,\ny\"\nb,zz,T,2\n";
    let (line, message) = parse_line(load(&g, nodes, edges).0);
    assert_eq!(line, 5);
    assert!(message.contains("zz"), "{message}");
    let (_dir, g) = open();
    let (line, message) = parse_line(load(&g, nodes, "src,dst,type\nnope,a,T\n").0);
    assert_eq!(line, 2);
    assert!(message.contains("nope"), "{message}");
    // The nodes stay; the graph is sound.
    assert_eq!(counts(&g).0, 2);
    assert!(g.check().expect("check").is_ok());
}

/// A cell that is not UTF-8 is refused with its line, whether an end, the type or a
/// property; no edge of the round is stored.
#[test]
fn an_edge_cell_that_is_not_utf8_is_refused_with_its_line() {
    let nodes = "id,label\na,P\nb,P\n";
    let rows: [&[u8]; 3] = [b"a,\xff,T,2", b"a,b,\xfe,2", b"a,b,T,\xc3"];
    for row in rows {
        let mut edges = b"src,dst,type,w\na,b,T,1\n".to_vec();
        edges.extend_from_slice(row);
        edges.push(b'\n');
        let (_dir, g) = open();
        let r = g.load_csv(nodes.as_bytes(), &edges[..], &mut |_| {});
        let (line, message) = parse_line(r);
        assert_eq!(line, 3, "{message}");
        assert!(message.to_lowercase().contains("utf"), "{message}");
        assert_eq!(counts(&g), (2, 0));
    }
}

/// "Calls `progress` after each transaction": a load of one node transaction and one edge
/// transaction is two transactions, but the call after the last node transaction is
/// missing (only full 20,000-row batches and the very end report).
#[test]
fn progress_is_called_after_every_transaction() {
    let (_dir, g) = open();
    let (r, calls) = load(&g, NODES, EDGES);
    r.expect("load");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!((calls[0].nodes, calls[0].edges), (4, 0), "{calls:?}");
}

/// A cell is "an integer, a float, `true`/`false`, or else text", but Rust's float parser
/// also takes `NaN`, `inf` and `infinity` in any case, so names such as "Nan" or "Inf"
/// load as floats (and `NaN` never equals itself, so `find_nodes` cannot find them).
#[test]
fn words_that_spell_float_specials_stay_text() {
    let (_dir, g) = open();
    let nodes = "id,label,name\na,P,Nan\nb,P,Infinity\nc,P,inf\n";
    let (r, _) = load(&g, nodes, "src,dst,type\n");
    let report = r.expect("load");
    g.read(|r| {
        for (ext, name) in [("a", "Nan"), ("b", "Infinity"), ("c", "inf")] {
            let node = r.node(report.ids[ext])?.expect("node");
            assert_eq!(
                node.properties.get("name"),
                Some(&Value::from(name)),
                "{ext}"
            );
        }
        Ok(())
    })
    .expect("read");
}

/// A load large enough to be reordered (several transactions a round): every row of the
/// edge file is an edge of the graph, in both directions, with its type and properties,
/// and the integrity check passes.
#[test]
fn a_reordered_load_stores_every_row() {
    use rand::{Rng, SeedableRng};
    let (_dir, g) = open();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let n = 3_000;
    let mut nodes = String::from("id,label\n");
    for i in 0..n {
        nodes.push_str(&format!("n{i},L\n"));
    }
    let types = ["A", "B", "C"];
    let mut edges = String::from("src,dst,type,w\n");
    let mut rows = Vec::new();
    for i in 0..90_000u64 {
        let (s, d) = (rng.gen_range(0..n), rng.gen_range(0..n));
        let t = types[rng.gen_range(0..3)];
        edges.push_str(&format!("n{s},n{d},{t},{i}\n"));
        rows.push((s, d, t, i));
    }
    let (r, _) = load(&g, &nodes, &edges);
    let report = r.expect("load");
    assert_eq!(report.edges, rows.len() as u64);
    let node = |i: u64| report.ids[&format!("n{i}")];
    let mut want: Vec<(u64, u64, String, i64)> = rows
        .iter()
        .map(|&(s, d, t, i)| (node(s), node(d), t.to_string(), i as i64))
        .collect();
    want.sort_unstable();
    let mut got = Vec::new();
    let mut incoming = 0;
    g.read(|r| {
        for i in 0..n {
            for nb in r.neighbours(node(i), Direction::Out, None)? {
                let e = r.edge(nb.edge)?.expect("edge");
                assert_eq!((e.source, e.destination), (node(i), nb.node));
                let Some(Value::Int(w)) = e.properties.get("w") else {
                    panic!("edge {} without its w", nb.edge);
                };
                got.push((e.source, e.destination, e.edge_type, *w));
            }
            incoming += r.degree(node(i), Direction::In, None)?;
        }
        Ok(())
    })
    .expect("read");
    got.sort_unstable();
    assert_eq!(got, want);
    assert_eq!(incoming, rows.len() as u64);
    assert!(g.check().expect("check").is_ok());
}

/// Transactions already handed to the storing threads when a bad row turns up are stored
/// before the error returns, and nothing after the bad row is: two full node transactions
/// (40,000 rows) stay, the 5,000 rows read after them do not.
#[test]
fn a_bad_row_after_full_transactions_keeps_exactly_those() {
    let (_dir, g) = open();
    let mut nodes = String::from("id,label\n");
    for i in 0..45_000 {
        nodes.push_str(&format!("n{i},L\n"));
    }
    nodes.push_str("n7,L\n"); // line 45,002: n7 again
    let (r, calls) = load(&g, &nodes, "src,dst,type\n");
    let (line, message) = parse_line(r);
    assert_eq!(line, 45_002);
    assert!(message.contains("n7"), "{message}");
    assert_eq!(counts(&g), (40_000, 0));
    assert_eq!(calls.last().map(|c| c.nodes), Some(40_000), "{calls:?}");
    assert!(g.check().expect("check").is_ok());
}
