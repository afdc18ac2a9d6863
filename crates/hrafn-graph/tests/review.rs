//! Edge cases of the graph store: ids after deletes and reopens, records that move,
//! self-loops and parallel edges, refused writes that must leave nothing behind, queries
//! with odd names, traversals at their corners, patterns and CSV input of unusual shapes.

use hrafn::{Durability, Options};
use hrafn_graph::pattern::Pattern;
use hrafn_graph::{DeleteMode, Direction, Error, Graph, Properties, Traversal, Value};

fn open_at(path: &std::path::Path) -> Graph {
    Graph::open(path, Options::default().durability(Durability::None)).expect("open")
}

fn open() -> (tempfile::TempDir, Graph) {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = open_at(dir.path());
    (dir, g)
}

fn props(pairs: &[(&str, Value)]) -> Properties {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn none() -> Properties {
    Properties::new()
}

fn assert_sound(g: &Graph) {
    let report = g.check().expect("check");
    assert!(report.is_ok(), "{:?}", report.problems);
}

#[test]
fn an_empty_pattern_matches_nothing_instead_of_panicking() {
    let (_dir, g) = open();
    g.write(|w| w.add_node("P", &none())).expect("write");
    let got = g.read(|r| r.match_pattern(&Pattern::default(), None));
    assert!(matches!(got.as_deref(), Ok([])), "{got:?}");
}

#[test]
fn a_refused_update_leaves_the_property_index_whole() {
    let (_dir, g) = open();
    let id = g
        .write(|w| {
            w.create_property_index("P", "name")?;
            w.add_node("P", &props(&[("name", Value::from("a"))]))
        })
        .expect("write");
    // The caller goes on after the refusal and commits.
    g.write(|w| {
        let bad = props(&[("name", Value::from("b")), ("", Value::Null)]);
        assert!(matches!(
            w.update_node(id, "P", &bad),
            Err(Error::InvalidName(_))
        ));
        Ok(())
    })
    .expect("write");
    let found = g
        .read(|r| r.find_nodes("P", "name", &Value::from("a")))
        .expect("find");
    assert_eq!(found, vec![id]);
    assert_sound(&g);
}

#[test]
fn odd_names_in_queries_are_answered_or_refused_without_panicking() {
    let (_dir, g) = open();
    let a = g
        .write(|w| {
            let a = w.add_node("P", &props(&[("k", Value::Int(1))]))?;
            w.add_edge(a, a, "T", &none())?;
            Ok(a)
        })
        .expect("write");
    let long = "x".repeat(5000);
    for name in ["", "\0", "é\u{1F980}", long.as_str()] {
        let r = g.read(|r| {
            let _ = r.nodes_with_label(name);
            let _ = r.find_nodes(name, name, &Value::from(name));
            let _ = r.has_property_index(name, name);
            let _ = r.neighbours(a, Direction::Both, Some(name));
            let _ = r.degree(a, Direction::Both, Some(name));
            let _ = r.bfs(a, &Traversal::default().edge_types(&[name]));
            let _ = r.match_pattern(
                &Pattern::start(Some(name), &[(name, Value::Null)]).then(
                    Some(name),
                    Direction::Both,
                    Some(name),
                    &[],
                ),
                None,
            );
            Ok(())
        });
        assert!(r.is_ok(), "{r:?}");
    }
}

#[test]
fn ids_are_not_reused_after_deletes_and_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, e) = {
        let g = open_at(dir.path());
        let ids = g
            .write(|w| {
                let a = w.add_node("P", &none())?;
                let b = w.add_node("P", &none())?;
                let e = w.add_edge(a, b, "T", &none())?;
                Ok((a, b, e))
            })
            .expect("write");
        // The newest of each goes, so a counter recomputed from what is left would
        // hand them out again.
        g.write(|w| w.delete_node(ids.1, DeleteMode::Cascade))
            .expect("delete");
        ids
    };
    let g = open_at(dir.path());
    let (c, e2) = g
        .write(|w| {
            let c = w.add_node("P", &none())?;
            let e2 = w.add_edge(a, c, "T", &none())?;
            Ok((c, e2))
        })
        .expect("write");
    assert!(c > b && e2 > e, "node {c} after {b}, edge {e2} after {e}");
    g.read(|r| {
        assert_eq!(r.node(b)?, None);
        assert_eq!(r.edge(e)?, None);
        assert_eq!(r.edge(e2)?.map(|x| x.destination), Some(c));
        Ok(())
    })
    .expect("read");
    // A rolled-back transaction gives its ids back: only committed ones count.
    let failed = g.write(|w| {
        w.add_node("P", &none())?;
        Err::<(), _>(Error::NoSuchNode(0))
    });
    assert!(failed.is_err());
    let d = g.write(|w| w.add_node("P", &none())).expect("write");
    assert_eq!(d, c + 1);
    assert_sound(&g);
}

/// Records grown past their slot move; their stable ids, edges and index entries follow.
#[test]
fn records_that_move_keep_their_ids_edges_and_index_entries() {
    let (_dir, g) = open();
    let ids: Vec<u64> = g
        .write(|w| {
            w.create_property_index("P", "k")?;
            let ids = (0..200)
                .map(|i| w.add_node("P", &props(&[("k", Value::Int(i))])))
                .collect::<hrafn_graph::Result<Vec<u64>>>()?;
            for pair in ids.windows(2) {
                w.add_edge(pair[0], pair[1], "NEXT", &props(&[("w", Value::Int(1))]))?;
            }
            Ok(ids)
        })
        .expect("write");
    let before: Vec<Option<u64>> = g
        .read(|r| ids.iter().map(|&id| r.node_location(id)).collect())
        .expect("read");
    let big = Value::Bytes(vec![7; 6000]);
    g.write(|w| {
        for (i, &id) in ids.iter().enumerate().step_by(2) {
            let p = props(&[("k", Value::Int(i as i64 + 1000)), ("pad", big.clone())]);
            w.update_node(id, "P", &p)?;
        }
        for e in 1..=ids.len() as u64 / 2 {
            w.update_edge(e, &props(&[("pad", big.clone())]))?;
        }
        Ok(())
    })
    .expect("update");
    g.read(|r| {
        let moved = ids
            .iter()
            .zip(&before)
            .filter(|&(&id, was)| r.node_location(id).ok().as_ref() != Some(was))
            .count();
        assert!(moved > 0, "no record moved: the test tests nothing");
        for (i, &id) in ids.iter().enumerate() {
            let node = r.node(id)?.expect("node");
            let k = if i % 2 == 0 {
                i as i64 + 1000
            } else {
                i as i64
            };
            assert_eq!(node.properties.get("k"), Some(&Value::Int(k)));
            assert_eq!(r.find_nodes("P", "k", &Value::Int(k))?, vec![id]);
            if i + 1 < ids.len() {
                let out = r.neighbours(id, Direction::Out, None)?;
                assert_eq!(out.len(), 1);
                assert_eq!(out[0].node, ids[i + 1]);
                let e = r.edge(out[0].edge)?.expect("edge");
                assert_eq!((e.source, e.destination), (id, ids[i + 1]));
            }
        }
        assert_eq!(r.find_nodes("P", "k", &Value::Int(0))?, Vec::<u64>::new());
        Ok(())
    })
    .expect("read");
    // Deleting moved nodes takes their edges, found through the moved edge records.
    g.write(|w| {
        for &id in ids.iter().step_by(4) {
            assert!(w.delete_node(id, DeleteMode::Cascade)?);
        }
        Ok(())
    })
    .expect("delete");
    assert_sound(&g);
}

#[test]
fn self_loops_parallel_edges_and_double_deletes() {
    let (_dir, g) = open();
    let (a, b, loop_edge, p1, p2) = g
        .write(|w| {
            let a = w.add_node("P", &none())?;
            let b = w.add_node("P", &none())?;
            let l = w.add_edge(a, a, "T", &none())?;
            let p1 = w.add_edge(a, b, "T", &none())?;
            let p2 = w.add_edge(a, b, "T", &none())?;
            Ok((a, b, l, p1, p2))
        })
        .expect("write");
    g.write(|w| {
        assert!(w.delete_edge(p1)?);
        // Twice in one transaction, and the parallel edge stays.
        assert!(!w.delete_edge(p1)?);
        Ok(())
    })
    .expect("write");
    assert!(!g.write(|w| w.delete_edge(p1)).expect("again"));
    g.read(|r| {
        let out = r.neighbours(a, Direction::Out, Some("T"))?;
        let edges: Vec<u64> = out.iter().map(|n| n.edge).collect();
        assert_eq!(edges, vec![loop_edge, p2]);
        assert_eq!(r.degree(b, Direction::In, Some("T"))?, 1);
        assert_eq!(r.k_hop(a, 3, &Traversal::default())?, vec![b]);
        assert_eq!(r.shortest_path(a, a, &Traversal::default())?, Some(vec![a]));
        Ok(())
    })
    .expect("read");
    assert!(g.write(|w| w.delete_edge(loop_edge)).expect("loop"));
    g.read(|r| {
        assert!(r.neighbours(a, Direction::In, None)?.is_empty());
        Ok(())
    })
    .expect("read");
    // Refused with the one edge left, then cascaded.
    match g.write(|w| w.delete_node(b, DeleteMode::Refuse)) {
        Err(Error::NodeHasEdges { node, edges }) => assert_eq!((node, edges), (b, 1)),
        other => panic!("{other:?}"),
    }
    assert!(
        g.write(|w| w.delete_node(b, DeleteMode::Cascade))
            .expect("cascade")
    );
    g.read(|r| {
        assert_eq!(r.edge(p2)?, None);
        assert!(r.neighbours(a, Direction::Both, None)?.is_empty());
        Ok(())
    })
    .expect("read");
    assert_sound(&g);
}

/// Zero-weight cycles tie with the direct path: the one returned has no repeated node.
#[test]
fn weighted_paths_through_zero_weight_cycles_repeat_no_node() {
    let (_dir, g) = open();
    let (a, b, t) = g
        .write(|w| {
            let a = w.add_node("P", &none())?;
            let b = w.add_node("P", &none())?;
            let t = w.add_node("P", &none())?;
            let zero = props(&[("w", Value::Float(0.0))]);
            w.add_edge(a, b, "T", &zero)?;
            w.add_edge(b, a, "T", &zero)?;
            w.add_edge(a, t, "T", &props(&[("w", Value::Int(1))]))?;
            Ok((a, b, t))
        })
        .expect("write");
    g.read(|r| {
        // The largest limit too: a state per hop around the cycle would never end.
        for depth in [None, Some(1), Some(3), Some(5), Some(8), Some(u32::MAX)] {
            let tr = Traversal {
                max_depth: depth,
                ..Traversal::default()
            };
            let got = r.shortest_path_weighted(a, t, "w", &tr)?;
            assert_eq!(got, Some((vec![a, t], 1.0)), "depth {depth:?}");
            assert_eq!(
                r.shortest_path_weighted(b, t, "w", &tr)?.map(|p| p.0),
                if depth == Some(1) {
                    None
                } else {
                    Some(vec![b, a, t])
                },
                "depth {depth:?}"
            );
            // Unreachable: the search ends once every node is taken, cycle or not.
            assert_eq!(r.shortest_path_weighted(t, a, "w", &tr)?, None);
        }
        Ok(())
    })
    .expect("read");
}

/// Weights that are not plain positive numbers: NaN, negative, infinite, text.
#[test]
fn weighted_paths_with_odd_weights() {
    let (_dir, g) = open();
    let n: Vec<u64> = g
        .write(|w| {
            let n = (0..5)
                .map(|_| w.add_node("P", &none()))
                .collect::<hrafn_graph::Result<Vec<u64>>>()?;
            let wt = |v: Value| props(&[("w", v)]);
            w.add_edge(n[0], n[1], "T", &wt(Value::Float(f64::NAN)))?;
            w.add_edge(n[1], n[2], "T", &wt(Value::Int(-5)))?;
            w.add_edge(n[0], n[2], "T", &wt(Value::Float(0.5)))?;
            w.add_edge(n[2], n[3], "T", &wt(Value::Float(f64::INFINITY)))?;
            w.add_edge(n[2], n[3], "T", &wt(Value::from("heavy")))?;
            Ok(n)
        })
        .expect("write");
    g.read(|r| {
        let t = Traversal::default();
        // NaN and negative weigh 0; text weighs 1, lighter than the infinite parallel edge.
        assert_eq!(
            r.shortest_path_weighted(n[0], n[3], "w", &t)?,
            Some((vec![n[0], n[1], n[2], n[3]], 1.0))
        );
        assert_eq!(
            r.shortest_path_weighted(n[0], n[0], "w", &t)?,
            Some((vec![n[0]], 0.0))
        );
        assert_eq!(r.shortest_path_weighted(n[0], n[4], "w", &t)?, None);
        assert_eq!(r.shortest_path(n[3], n[0], &t)?, None);
        assert!(matches!(
            r.shortest_path_weighted(n[0], 999, "w", &t),
            Err(Error::NoSuchNode(999))
        ));
        assert!(matches!(
            r.shortest_path(999, n[0], &t),
            Err(Error::NoSuchNode(999))
        ));
        assert!(matches!(r.bfs(999, &t), Err(Error::NoSuchNode(999))));
        assert!(matches!(r.dfs(999, &t), Err(Error::NoSuchNode(999))));
        assert!(matches!(r.k_hop(999, 1, &t), Err(Error::NoSuchNode(999))));
        // Depth 0 is the start alone; a filter rejecting the target finds no path.
        assert_eq!(
            r.bfs(n[0], &Traversal::default().max_depth(0))?,
            vec![(n[0], 0)]
        );
        assert_eq!(
            r.dfs(n[0], &Traversal::default().max_depth(0))?,
            vec![(n[0], 0)]
        );
        assert!(r.k_hop(n[0], 0, &t)?.is_empty());
        let not_3 = |node: &hrafn_graph::Node| node.id != n[3];
        let filtered = Traversal::default().node_filter(&not_3);
        assert_eq!(r.shortest_path(n[0], n[3], &filtered)?, None);
        assert_eq!(r.shortest_path_weighted(n[0], n[3], "w", &filtered)?, None);
        Ok(())
    })
    .expect("read");
}

fn load(g: &Graph, nodes: &[u8], edges: &[u8]) -> hrafn_graph::Result<hrafn_graph::LoadReport> {
    g.load_csv(nodes, edges, &mut |_| {})
}

fn parse_line(r: hrafn_graph::Result<hrafn_graph::LoadReport>) -> (usize, String) {
    match r {
        Err(Error::Parse { line, message }) => (line, message),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

/// A column named `_id` would replace the file id the load keeps there (as text, which
/// the edge rows and `find --property _id` rely on).
#[test]
fn a_node_file_column_named_like_the_file_id_property_is_refused() {
    let (_dir, g) = open();
    let r = load(
        &g,
        b"id,label,_id\na,P,zz\nb,P,1\n",
        b"src,dst,type\na,b,T\n",
    );
    let (line, message) = parse_line(r);
    assert_eq!(line, 1);
    assert!(message.contains("_id"), "{message}");
    assert_eq!(g.read(|r| Ok(r.node_count())).expect("read"), 0);
}

/// A column named twice would silently drop the first one's values.
#[test]
fn a_property_column_named_twice_is_refused() {
    let cases: [(&[u8], &[u8], u64); 2] = [
        (b"id,label,x,x\na,P,1,2\n", b"src,dst,type\n", 0),
        (b"id,label\na,P\n", b"src,dst,type,w,w\na,a,T,1,2\n", 1),
    ];
    for (nodes, edges, want_nodes) in cases {
        let (_dir, g) = open();
        let (line, message) = parse_line(load(&g, nodes, edges));
        assert_eq!(line, 1);
        assert!(message.contains("twice"), "{message}");
        assert_eq!(g.read(|r| Ok(r.node_count())).expect("read"), want_nodes);
    }
    // Unnamed trailing columns are not names given twice.
    let (_dir, g) = open();
    let report = load(&g, b"id,label,,\na,P,,\n", b"src,dst,type,,\na,a,T,,\n");
    assert_eq!(report.map(|r| (r.nodes, r.edges)).ok(), Some((1, 1)));
}

/// Names that cannot be stored are refused with the row's line, before its transaction.
#[test]
fn a_bad_label_type_or_column_name_is_refused_with_its_line() {
    let long = "L".repeat(256);
    let nodes_bad_label = format!("id,label\na,P\nb,{long}\n");
    let cases: [(&[u8], &[u8], usize, u64); 4] = [
        (b"id,label\na,P\nb,\n", b"src,dst,type\n", 3, 0),
        (nodes_bad_label.as_bytes(), b"src,dst,type\n", 3, 0),
        (
            b"id,label\na,P\nb,P\n",
            b"src,dst,type\na,b,T\nb,a,\n",
            3,
            2,
        ),
        // A trailing comma's unnamed column is fine while its cells are empty.
        (b"id,label,\na,P,\nb,P,1\n", b"src,dst,type\n", 3, 0),
    ];
    for (nodes, edges, want_line, want_nodes) in cases {
        let (_dir, g) = open();
        let (line, message) = parse_line(load(&g, nodes, edges));
        assert_eq!(line, want_line, "{message}");
        assert_eq!(g.read(|r| Ok(r.node_count())).expect("read"), want_nodes);
        assert_eq!(g.read(|r| Ok(r.edge_count())).expect("read"), 0);
        assert_sound(&g);
    }
    let (_dir, g) = open();
    let edges = b"src,dst,type,\r\na,b,T,\r\n";
    let report = load(&g, b"id,label,\r\na,P,\r\nb,P,\r\n", edges).expect("load");
    assert_eq!((report.nodes, report.edges), (2, 1));
}

/// A byte-order mark, CRLF line ends (also inside a quoted cell), header-only files,
/// quoted ids with commas and quotes, and rows longer than the header.
#[test]
fn csv_of_unusual_shapes() {
    let (_dir, g) = open();
    let nodes = b"\xef\xbb\xbfid,label,x\r\n\"a,1\",P,1\r\n\"b\"\"2\",P,\"q\r\nr\"\r\n";
    let edges = b"\xef\xbb\xbfsrc,dst,type,w\r\n\"a,1\",\"b\"\"2\",T,2.5\r\n";
    let report = load(&g, nodes, edges).expect("load");
    assert_eq!((report.nodes, report.edges), (2, 1));
    let (a, b) = (report.ids["a,1"], report.ids["b\"2"]);
    g.read(|r| {
        let nb = r.node(b)?.expect("b");
        assert_eq!(nb.properties.get("x"), Some(&Value::from("q\r\nr")));
        assert_eq!(nb.properties.get("_id"), Some(&Value::from("b\"2")));
        let out = r.neighbours(a, Direction::Out, Some("T"))?;
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].node, b);
        let e = r.edge(out[0].edge)?.expect("edge");
        assert_eq!(e.properties.get("w"), Some(&Value::Float(2.5)));
        Ok(())
    })
    .expect("read");

    let (_dir, g) = open();
    let report = load(&g, b"id,label\n", b"src,dst,type\n").expect("header only");
    assert_eq!((report.nodes, report.edges), (0, 0));

    let (_dir, g) = open();
    let (line, _) = parse_line(load(&g, b"id,label\na,P\nb,P,extra\n", b"src,dst,type\n"));
    assert_eq!(line, 3);
    let (_dir, g) = open();
    let (line, _) = parse_line(load(&g, b"", b"src,dst,type\n"));
    assert_eq!(line, 1);
}

/// A thread count far beyond the machine's, on a level of tens of thousands of nodes,
/// gives the one-thread answer instead of a thread per node (which aborts the process).
#[test]
fn a_huge_thread_count_on_a_wide_level_gives_the_one_thread_answer() {
    let (_dir, g) = open();
    let n = 60_000usize;
    let hub = g
        .write(|w| {
            let hub = w.add_node("P", &none())?;
            let p = none();
            let rows: Vec<(&str, &Properties)> = (0..n).map(|_| ("P", &p)).collect();
            let leaves = w.add_nodes(&rows)?;
            let edges: Vec<(u64, u64, &str, &Properties)> = leaves
                .iter()
                .flat_map(|&l| [(hub, l, "T", &p), (l, l + 1, "U", &p)])
                .filter(|e| e.1 <= n as u64 + 1)
                .collect();
            w.add_edges(&edges)?;
            Ok(hub)
        })
        .expect("write");
    g.read(|r| {
        let both = Traversal::default().direction(Direction::Both);
        let one = r.bfs(hub, &both)?;
        assert_eq!(one.len(), n + 1);
        let many = Traversal::default()
            .direction(Direction::Both)
            .threads(usize::MAX);
        assert_eq!(r.bfs(hub, &many)?, one);
        let raw = Traversal {
            threads: 1 << 20,
            ..Traversal::default()
        };
        assert_eq!(r.k_hop(hub, 2, &raw)?.len(), n);
        Ok(())
    })
    .expect("read");
}

/// The depth-first order is the documented one: outgoing before incoming for `Both`
/// (not the merged order of `neighbours`), and edge types in the order listed.
#[test]
fn depth_first_order_follows_the_documented_neighbour_order() {
    let (_dir, g) = open();
    let n: Vec<u64> = g
        .write(|w| {
            let n = (0..4)
                .map(|_| w.add_node("P", &none()))
                .collect::<hrafn_graph::Result<Vec<u64>>>()?;
            w.add_edge(n[0], n[3], "A", &none())?;
            w.add_edge(n[1], n[0], "A", &none())?;
            w.add_edge(n[0], n[2], "B", &none())?;
            Ok(n)
        })
        .expect("write");
    g.read(|r| {
        let both = Traversal::default().direction(Direction::Both);
        assert_eq!(
            r.dfs(n[0], &both)?,
            vec![(n[0], 0), (n[3], 1), (n[2], 1), (n[1], 1)]
        );
        let b_then_a = Traversal::default().edge_types(&["B", "A"]);
        assert_eq!(
            r.dfs(n[0], &b_then_a)?,
            vec![(n[0], 0), (n[2], 1), (n[3], 1)]
        );
        Ok(())
    })
    .expect("read");
}

/// A limit stops the matcher's walk: on a complete graph of 20 nodes a chain of six nodes
/// has 20 × 19^5 (about 50M) matches, which a matcher building every partial match before
/// applying the limit cannot finish; the first one comes at once.
#[test]
fn a_limit_stops_a_pattern_walk_on_a_dense_graph() {
    let (_dir, g) = open();
    let ids: Vec<u64> = g
        .write(|w| {
            let ids = (0..20)
                .map(|_| w.add_node("P", &none()))
                .collect::<Result<Vec<_>, _>>()?;
            for &a in &ids {
                for &b in &ids {
                    if a != b {
                        w.add_edge(a, b, "T", &none())?;
                    }
                }
            }
            Ok(ids)
        })
        .expect("write");
    let mut pattern = Pattern::start(Some("P"), &[]);
    for _ in 0..5 {
        pattern = pattern.then(Some("T"), Direction::Out, Some("P"), &[]);
    }
    let started = std::time::Instant::now();
    let got = g
        .read(|r| r.match_pattern(&pattern, Some(3)))
        .expect("match");
    assert_eq!(got.len(), 3, "{got:?}");
    for m in &got {
        assert_eq!(m.len(), 6);
        assert!(m.iter().all(|id| ids.contains(id)));
        assert!(m.windows(2).all(|w| w[0] != w[1]), "no self-loops: {m:?}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

/// A property index keys a long value by its first bytes and a hash, as long as a value
/// stored whole at the largest length: such a value that spells a long one's key is not
/// that value, and `find_nodes` confirms it against the node.
#[test]
fn a_value_spelling_a_long_values_key_does_not_find_it() {
    let (_dir, g) = open();
    let long = vec![7u8; 2000];
    // The long value's index bytes: its tag (5, bytes), then the bytes.
    let mut index_bytes = vec![5u8];
    index_bytes.extend_from_slice(&long);
    let hash = xxhash_rust::xxh3::xxh3_64(&index_bytes);
    let mut spelled = long[..1015].to_vec();
    spelled.extend_from_slice(&hash.to_be_bytes());
    let id = g
        .write(|w| {
            w.create_property_index("P", "blob")?;
            w.add_node("P", &props(&[("blob", Value::Bytes(long.clone()))]))
        })
        .expect("write");
    let found = |v: Vec<u8>| {
        g.read(|r| r.find_nodes("P", "blob", &Value::Bytes(v)))
            .expect("find")
    };
    assert_eq!(found(long.clone()), [id]);
    assert_eq!(found(spelled), Vec::<u64>::new());
    assert_sound(&g);
}

/// An adjacency key and value as the graph lays them out: `node | type` →
/// `other | edge`.
fn adjacency(node: u64, edge_type: &str, other: u64, edge: u64) -> (Vec<u8>, Vec<u8>) {
    let mut key = node.to_be_bytes().to_vec();
    key.extend_from_slice(edge_type.as_bytes());
    let mut value = other.to_be_bytes().to_vec();
    value.extend_from_slice(&edge.to_be_bytes());
    (key, value)
}

type Seen = (
    Vec<Option<hrafn_graph::Node>>,
    Vec<Option<hrafn_graph::Edge>>,
    Vec<Vec<hrafn_graph::Neighbour>>,
);

/// The nodes, edges and both-ways neighbours of `nodes` and `edges`, as read now.
fn seen(g: &Graph, nodes: &[u64], edges: &[u64]) -> Seen {
    g.read(|r| {
        Ok((
            nodes.iter().map(|&n| r.node(n)).collect::<Result<_, _>>()?,
            edges.iter().map(|&e| r.edge(e)).collect::<Result<_, _>>()?,
            nodes
                .iter()
                .map(|&n| r.neighbours(n, Direction::Both, None))
                .collect::<Result<_, _>>()?,
        ))
    })
    .expect("read")
}

/// A cascade meets an adjacency entry no edge record gives (no record at all, or one
/// whose ends are other nodes): deleting the node would leave that entry naming it. The
/// delete fails and deletes nothing, even for a caller that goes on and commits.
#[test]
fn a_cascade_over_adjacency_no_record_gives_fails_and_deletes_nothing() {
    let (_dir, g) = open();
    let (a, b, c, e1, e2) = g
        .write(|w| {
            let a = w.add_node("P", &none())?;
            let b = w.add_node("P", &none())?;
            let c = w.add_node("P", &none())?;
            let e1 = w.add_edge(a, b, "T", &none())?;
            let e2 = w.add_edge(c, a, "T", &none())?;
            Ok((a, b, c, e1, e2))
        })
        .expect("write");
    let (nodes, edges) = ([a, b, c], [e1, e2]);
    // Under a: an outgoing entry naming edge 99, which has no record.
    g.write(|w| {
        let (key, value) = adjacency(a, "T", b, 99);
        w.txn().open_multi_tree("g.out")?.add(key, value)?;
        Ok(())
    })
    .expect("damage");
    let before = seen(&g, &nodes, &edges);
    let r = g.write(|w| w.delete_node(a, DeleteMode::Cascade));
    assert!(matches!(r, Err(Error::Corrupt(_))), "{r:?}");
    assert_eq!(seen(&g, &nodes, &edges), before);
    g.write(|w| {
        let r = w.delete_node(a, DeleteMode::Cascade);
        assert!(matches!(r, Err(Error::Corrupt(_))), "{r:?}");
        Ok(())
    })
    .expect("commit after the error");
    assert_eq!(seen(&g, &nodes, &edges), before);

    // Under c: an incoming entry naming edge e1, whose record joins a and b.
    g.write(|w| {
        let (key, value) = adjacency(a, "T", b, 99);
        w.txn().open_multi_tree("g.out")?.remove(key, value)?;
        let (key, value) = adjacency(c, "T", b, e1);
        w.txn().open_multi_tree("g.in")?.add(key, value)?;
        Ok(())
    })
    .expect("damage");
    let before = seen(&g, &nodes, &edges);
    g.write(|w| {
        let r = w.delete_node(c, DeleteMode::Cascade);
        assert!(matches!(r, Err(Error::Corrupt(_))), "{r:?}");
        Ok(())
    })
    .expect("commit after the error");
    assert_eq!(seen(&g, &nodes, &edges), before);

    // Repaired, the cascade goes through.
    g.write(|w| {
        let (key, value) = adjacency(c, "T", b, e1);
        w.txn().open_multi_tree("g.in")?.remove(key, value)?;
        assert!(w.delete_node(c, DeleteMode::Cascade)?);
        Ok(())
    })
    .expect("write");
    assert_sound(&g);
}

/// Deleting an edge whose adjacency entry is missing fails, and the edge stays whole
/// (record and the entry that was there) for a caller that goes on and commits.
#[test]
fn deleting_an_edge_whose_adjacency_entry_is_missing_fails_and_keeps_it() {
    let (_dir, g) = open();
    let (a, b, e) = g
        .write(|w| {
            let a = w.add_node("P", &none())?;
            let b = w.add_node("P", &none())?;
            let e = w.add_edge(a, b, "T", &none())?;
            Ok((a, b, e))
        })
        .expect("write");
    for tree in ["g.in", "g.out"] {
        let (key, value) = if tree == "g.in" {
            adjacency(b, "T", a, e)
        } else {
            adjacency(a, "T", b, e)
        };
        g.write(|w| {
            assert!(w.txn().open_multi_tree(tree)?.remove(&key, &value)?);
            Ok(())
        })
        .expect("damage");
        let before = seen(&g, &[a, b], &[e]);
        g.write(|w| {
            let r = w.delete_edge(e);
            assert!(matches!(r, Err(Error::Corrupt(_))), "{tree}: {r:?}");
            Ok(())
        })
        .expect("commit after the error");
        assert_eq!(seen(&g, &[a, b], &[e]), before, "{tree}");
        g.write(|w| {
            w.txn().open_multi_tree(tree)?.add(&key, &value)?;
            Ok(())
        })
        .expect("repair");
    }
    assert!(g.write(|w| w.delete_edge(e)).expect("delete"));
    assert_sound(&g);
}

/// A weighted search meets an adjacency entry whose edge has no record: damage, not an
/// edge of weight 1. Values that are not numbers weigh 1.
#[test]
fn a_weighted_path_over_an_edge_without_a_record_fails() {
    let (_dir, g) = open();
    let n: Vec<u64> = g
        .write(|w| {
            let n = (0..3)
                .map(|_| w.add_node("P", &none()))
                .collect::<hrafn_graph::Result<Vec<u64>>>()?;
            let wt = |v: Value| props(&[("w", v)]);
            w.add_edge(n[0], n[1], "T", &wt(Value::Bool(true)))?;
            w.add_edge(n[1], n[2], "T", &wt(Value::Null))?;
            w.add_edge(n[0], n[2], "T", &wt(Value::Bytes(vec![9])))?;
            w.add_edge(n[0], n[2], "T", &wt(Value::Float(2.5)))?;
            Ok(n)
        })
        .expect("write");
    let t = Traversal::default();
    let got = g
        .read(|r| r.shortest_path_weighted(n[0], n[2], "w", &t))
        .expect("read");
    assert_eq!(got, Some((vec![n[0], n[2]], 1.0)));
    g.write(|w| {
        let mut key = n[0].to_be_bytes().to_vec();
        key.extend_from_slice(b"T");
        let mut value = n[1].to_be_bytes().to_vec();
        value.extend_from_slice(&99u64.to_be_bytes());
        w.txn().open_multi_tree("g.out")?.add(key, value)?;
        Ok(())
    })
    .expect("damage");
    for depth in [None, Some(1)] {
        let t = Traversal {
            max_depth: depth,
            ..Traversal::default()
        };
        let got = g.read(|r| r.shortest_path_weighted(n[0], n[2], "w", &t));
        assert!(matches!(got, Err(Error::Corrupt(_))), "{depth:?}: {got:?}");
    }
}

/// A depth limit of at least the number of nodes less one limits nothing, and answers
/// as no limit does (`u32::MAX` as "no limit" costs no state per node and hop count).
#[test]
fn a_depth_limit_as_large_as_the_graph_answers_as_no_limit() {
    // Two lightest paths to t, of 3 and 2 hops; no limit finds the first one.
    let (_dir, g) = open();
    let (a, b, c, d, t) = g
        .write(|w| {
            let n = (0..5)
                .map(|_| w.add_node("P", &none()))
                .collect::<hrafn_graph::Result<Vec<u64>>>()?;
            let wt = |v: i64| props(&[("w", Value::Int(v))]);
            w.add_edge(n[0], n[1], "T", &wt(0))?;
            w.add_edge(n[1], n[2], "T", &wt(0))?;
            w.add_edge(n[2], n[4], "T", &wt(2))?;
            w.add_edge(n[0], n[3], "T", &wt(1))?;
            w.add_edge(n[3], n[4], "T", &wt(1))?;
            Ok((n[0], n[1], n[2], n[3], n[4]))
        })
        .expect("write");
    let path = |depth: Option<u32>| {
        let tr = Traversal {
            max_depth: depth,
            ..Traversal::default()
        };
        g.read(|r| r.shortest_path_weighted(a, t, "w", &tr))
            .expect("read")
    };
    let unlimited = path(None);
    assert_eq!(unlimited, Some((vec![a, b, c, t], 2.0)));
    for depth in [4, 5, 1000, u32::MAX] {
        assert_eq!(path(Some(depth)), unlimited, "depth {depth}");
    }
    assert_eq!(path(Some(2)), Some((vec![a, d, t], 2.0)));

    // Every pair i < j joined with weight (j - i)²: the lightest path takes every node,
    // so a limit one below the nodes less one finds a heavier path.
    let (_dir, g) = open();
    let count = 100u32;
    let ids = g
        .write(|w| {
            let ids = (0..count)
                .map(|_| w.add_node("P", &none()))
                .collect::<hrafn_graph::Result<Vec<u64>>>()?;
            for (i, &from) in ids.iter().enumerate() {
                for (j, &to) in ids.iter().enumerate().skip(i + 1) {
                    let step = (j - i) as i64;
                    w.add_edge(from, to, "T", &props(&[("w", Value::Int(step * step))]))?;
                }
            }
            Ok(ids)
        })
        .expect("write");
    let (first, last) = (ids[0], ids[ids.len() - 1]);
    let weight = |depth: Option<u32>| {
        let tr = Traversal {
            max_depth: depth,
            ..Traversal::default()
        };
        g.read(|r| r.shortest_path_weighted(first, last, "w", &tr))
            .expect("read")
            .map(|(path, w)| (path.len(), w))
    };
    let hops = f64::from(count - 1);
    assert_eq!(weight(None), Some((ids.len(), hops)));
    for depth in [count - 1, count, u32::MAX] {
        assert_eq!(
            weight(Some(depth)),
            Some((ids.len(), hops)),
            "depth {depth}"
        );
    }
    // One step of two instead of two of one: a node fewer, 2 heavier.
    assert_eq!(weight(Some(count - 2)), Some((ids.len() - 1, hops + 2.0)));
}

/// A node whose own entries agree with the records, but one of whose edges lacks its entry
/// at the other end: the cascade fails before deleting any edge, also for a caller that
/// goes on and commits (an earlier edge is not deleted while a later one fails).
#[test]
fn a_cascade_over_an_edge_lacking_its_far_entry_deletes_nothing() {
    let (_dir, g) = open();
    let (a, b, c, e1, e2) = g
        .write(|w| {
            let a = w.add_node("P", &none())?;
            let b = w.add_node("P", &none())?;
            let c = w.add_node("P", &none())?;
            let e1 = w.add_edge(a, b, "T", &none())?;
            let e2 = w.add_edge(a, c, "T", &none())?;
            Ok((a, b, c, e1, e2))
        })
        .expect("write");
    let (nodes, edges) = ([a, b, c], [e1, e2]);
    // e2's entry under c, its far end, goes missing; e1 (the lower id) is whole.
    g.write(|w| {
        let (key, value) = adjacency(c, "T", a, e2);
        assert!(w.txn().open_multi_tree("g.in")?.remove(key, value)?);
        Ok(())
    })
    .expect("damage");
    let before = seen(&g, &nodes, &edges);
    g.write(|w| {
        let r = w.delete_node(a, DeleteMode::Cascade);
        assert!(matches!(r, Err(Error::Corrupt(_))), "{r:?}");
        Ok(())
    })
    .expect("commit after the error");
    assert_eq!(seen(&g, &nodes, &edges), before, "no edge was deleted");
}
