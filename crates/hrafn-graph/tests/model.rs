//! Random writes against an in-memory reference graph: node and edge adds, updates and
//! deletes (both delete modes, self-loops, parallel edges, ids that do not exist), property
//! indexes created midway, multi-write transactions that commit or roll back, and reopens.
//! After every step the touched nodes are compared with the model, and every few steps the
//! whole graph: contents, adjacency in every direction with and without a type, degrees,
//! labels, property lookups, counts and the integrity check.

use hrafn::{Durability, Options};
use hrafn_graph::{
    DeleteMode, Direction, Edge, Error, Graph, GraphRead, GraphWriter, Neighbour, Node, Properties,
    Value,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// "Person" and "Person2", "K" and "KNOWS", "name" and "name2": names that are prefixes of
/// others, so a key layout that mixes them up shows.
const LABELS: [&str; 4] = ["Person", "Person2", "City", "Thing"];
const TYPES: [&str; 3] = ["KNOWS", "K", "LIKES"];
const PROPS: [&str; 8] = ["name", "name2", "age", "score", "flag", "raw", "none", "v"];
const DIRECTIONS: [Direction; 3] = [Direction::Out, Direction::In, Direction::Both];

/// The values a property may take (small domains, so lookups find something).
fn domain(prop: &str) -> Vec<Value> {
    match prop {
        "name" | "name2" => ["ann", "bob", "", "a,b"].map(Value::from).to_vec(),
        "age" => [-1, 0, 1, i64::MAX].map(Value::Int).to_vec(),
        "score" => [0.5, 1.5, -2.0, 1e300].map(Value::Float).to_vec(),
        "flag" => vec![Value::Bool(false), Value::Bool(true)],
        "raw" => vec![
            Value::Bytes(vec![]),
            Value::Bytes(vec![0]),
            Value::Bytes(vec![0, 255]),
        ],
        "none" => vec![Value::Null],
        // One value under four types: none equals another.
        _ => vec![
            Value::Int(1),
            Value::Float(1.0),
            Value::from("1"),
            Value::Bool(true),
        ],
    }
}

fn random_props(rng: &mut StdRng) -> Properties {
    let mut p = Properties::new();
    for prop in PROPS {
        if rng.gen_bool(0.4) {
            let values = domain(prop);
            p.insert(
                prop.to_string(),
                values[rng.gen_range(0..values.len())].clone(),
            );
        }
    }
    p
}

#[derive(Clone, Default)]
struct Model {
    nodes: BTreeMap<u64, (String, Properties)>,
    edges: BTreeMap<u64, (String, u64, u64, Properties)>,
    indexes: BTreeSet<(String, String)>,
    nodes_ever: BTreeSet<u64>,
    edges_ever: BTreeSet<u64>,
}

/// The documented order of adjacency: by type, then neighbour, then edge.
fn order_key(n: &Neighbour) -> (String, u64, u64) {
    (n.edge_type.clone(), n.node, n.edge)
}

fn sorted(mut v: Vec<Neighbour>) -> Vec<Neighbour> {
    v.sort_by_key(order_key);
    v
}

impl Model {
    fn node(&self, id: u64) -> Option<Node> {
        self.nodes.get(&id).map(|(label, properties)| Node {
            id,
            label: label.clone(),
            properties: properties.clone(),
        })
    }

    fn edge(&self, id: u64) -> Option<Edge> {
        self.edges
            .get(&id)
            .map(|(edge_type, source, destination, properties)| Edge {
                id,
                edge_type: edge_type.clone(),
                source: *source,
                destination: *destination,
                properties: properties.clone(),
            })
    }

    /// Adjacency entries, sorted by type, neighbour, edge (a self-loop twice for `Both`).
    fn neighbours(&self, id: u64, dir: Direction, ty: Option<&str>) -> Vec<Neighbour> {
        let mut out = Vec::new();
        for (&edge, (t, s, d, _)) in &self.edges {
            if ty.is_some_and(|ty| ty != t) {
                continue;
            }
            let entry = |node: u64| Neighbour {
                node,
                edge,
                edge_type: t.clone(),
            };
            if *s == id && dir != Direction::In {
                out.push(entry(*d));
            }
            if *d == id && dir != Direction::Out {
                out.push(entry(*s));
            }
        }
        sorted(out)
    }

    /// The distinct edges touching `id`.
    fn incident(&self, id: u64) -> Vec<u64> {
        self.edges
            .iter()
            .filter(|(_, (_, s, d, _))| *s == id || *d == id)
            .map(|(&e, _)| e)
            .collect()
    }

    fn with_label(&self, label: &str) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, (l, _))| l == label)
            .map(|(&id, _)| id)
            .collect()
    }

    fn find(&self, label: &str, prop: &str, value: &Value) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, (l, p))| l == label && p.get(prop) == Some(value))
            .map(|(&id, _)| id)
            .collect()
    }

    /// An id no node has now: one deleted earlier, or one never handed out.
    fn missing_node(&self, rng: &mut StdRng) -> u64 {
        let gone: Vec<u64> = self
            .nodes_ever
            .iter()
            .copied()
            .filter(|id| !self.nodes.contains_key(id))
            .collect();
        if !gone.is_empty() && rng.gen_bool(0.5) {
            return *gone.choose(rng).expect("not empty");
        }
        [0, u64::MAX, 1 << 40, rng.gen_range(1_000_000..2_000_000)]
            .choose(rng)
            .copied()
            .expect("not empty")
    }

    fn missing_edge(&self, rng: &mut StdRng) -> u64 {
        let gone: Vec<u64> = self
            .edges_ever
            .iter()
            .copied()
            .filter(|id| !self.edges.contains_key(id))
            .collect();
        if !gone.is_empty() && rng.gen_bool(0.5) {
            return *gone.choose(rng).expect("not empty");
        }
        [0, u64::MAX, rng.gen_range(1_000_000..2_000_000)]
            .choose(rng)
            .copied()
            .expect("not empty")
    }

    fn some_node(&self, rng: &mut StdRng) -> Option<u64> {
        if self.nodes.is_empty() {
            return None;
        }
        self.nodes
            .keys()
            .nth(rng.gen_range(0..self.nodes.len()))
            .copied()
    }

    fn some_edge(&self, rng: &mut StdRng) -> Option<u64> {
        if self.edges.is_empty() {
            return None;
        }
        self.edges
            .keys()
            .nth(rng.gen_range(0..self.edges.len()))
            .copied()
    }
}

#[derive(Clone, Debug)]
enum Op {
    AddNode(String, Properties),
    /// A node or edge with a name that cannot be stored: refused, nothing changes.
    AddInvalid(u8),
    UpdateNode(u64, String, Properties),
    DeleteNode(u64, DeleteMode),
    AddEdge(u64, u64, String, Properties),
    DeleteEdge(u64),
    UpdateEdge(u64, Properties),
    CreateIndex(String, String),
}

fn random_op(rng: &mut StdRng, m: &Model) -> Op {
    let label = |rng: &mut StdRng| LABELS.choose(rng).expect("labels").to_string();
    let node_or_missing = |rng: &mut StdRng| match m.some_node(rng) {
        Some(id) if rng.gen_bool(0.9) => id,
        _ => m.missing_node(rng),
    };
    let edge_or_missing = |rng: &mut StdRng| match m.some_edge(rng) {
        Some(id) if rng.gen_bool(0.9) => id,
        _ => m.missing_edge(rng),
    };
    // Keep the graph around a hundred nodes: grow while small, shrink while large.
    let add_weight = if m.nodes.len() < 60 { 30 } else { 12 };
    let delete_weight = if m.nodes.len() > 120 { 20 } else { 8 };
    let weights = [add_weight, 1, 10, delete_weight, 40, 10, 8, 1];
    let total: u32 = weights.iter().sum();
    let mut pick = rng.gen_range(0..total);
    let mut which = 0;
    while pick >= weights[which] {
        pick -= weights[which];
        which += 1;
    }
    match which {
        0 => Op::AddNode(label(rng), random_props(rng)),
        1 => Op::AddInvalid(rng.gen_range(0..5)),
        2 => Op::UpdateNode(node_or_missing(rng), label(rng), random_props(rng)),
        3 => {
            let mode = if rng.gen_bool(0.5) {
                DeleteMode::Cascade
            } else {
                DeleteMode::Refuse
            };
            Op::DeleteNode(node_or_missing(rng), mode)
        }
        4 => {
            let src = node_or_missing(rng);
            let dst = match rng.gen_range(0..10) {
                // Self-loops.
                0 => src,
                // Parallel edges: the other end of an edge `src` already has.
                1 | 2 => m
                    .edges
                    .values()
                    .find(|(_, s, _, _)| *s == src)
                    .map_or_else(|| node_or_missing(rng), |(_, _, d, _)| *d),
                _ => node_or_missing(rng),
            };
            let ty = TYPES.choose(rng).expect("types").to_string();
            let props = if rng.gen_bool(0.5) {
                random_props(rng)
            } else {
                Properties::new()
            };
            Op::AddEdge(src, dst, ty, props)
        }
        5 => Op::DeleteEdge(edge_or_missing(rng)),
        6 => Op::UpdateEdge(edge_or_missing(rng), random_props(rng)),
        _ => Op::CreateIndex(label(rng), PROPS.choose(rng).expect("props").to_string()),
    }
}

/// Runs `op` in `w`, checking its result against the model, which it updates on success.
/// An error the model expects is returned (the caller's transaction then rolls back), after
/// `expected_failure` is set; any other error fails the test.
fn run_op(
    w: &mut GraphWriter<'_, '_>,
    m: &mut Model,
    op: &Op,
    expected_failure: &mut bool,
) -> hrafn_graph::Result<()> {
    let mut fail = |e: Error| {
        *expected_failure = true;
        Err(e)
    };
    match op {
        Op::AddNode(label, props) => {
            let id = w.add_node(label, props).expect("add_node");
            assert!(m.nodes_ever.insert(id), "node id {id} handed out twice");
            m.nodes.insert(id, (label.clone(), props.clone()));
            assert_eq!(w.node(id).expect("node"), m.node(id), "read own write");
        }
        Op::AddInvalid(kind) => {
            let long = "x".repeat(256);
            let bad_props = Properties::from([(String::new(), Value::Int(1))]);
            let some = m.nodes.keys().next().copied();
            let r = match (kind, some) {
                (0, _) => w.add_node("", &Properties::new()),
                (1, _) => w.add_node("a\0b", &Properties::new()),
                (2, _) => w.add_node(&long, &Properties::new()),
                (3, _) => w.add_node("Person", &bad_props),
                (_, Some(id)) => w.add_edge(id, id, "", &Properties::new()),
                (_, None) => w.add_node("", &Properties::new()),
            };
            match r {
                Err(e @ Error::InvalidName(_)) => return fail(e),
                other => panic!("invalid name {kind}: {other:?}"),
            }
        }
        Op::UpdateNode(id, label, props) => {
            let r = w.update_node(*id, label, props);
            if m.nodes.contains_key(id) {
                r.expect("update_node");
                m.nodes.insert(*id, (label.clone(), props.clone()));
                assert_eq!(w.node(*id).expect("node"), m.node(*id), "read own write");
            } else {
                match r {
                    Err(Error::NoSuchNode(n)) if n == *id => return fail(Error::NoSuchNode(n)),
                    other => panic!("update of missing node {id}: {other:?}"),
                }
            }
        }
        Op::DeleteNode(id, mode) => {
            let r = w.delete_node(*id, *mode);
            let incident = m.incident(*id);
            if !m.nodes.contains_key(id) {
                assert!(matches!(r, Ok(false)), "delete of missing node {id}: {r:?}");
            } else if *mode == DeleteMode::Refuse && !incident.is_empty() {
                match r {
                    Err(Error::NodeHasEdges { node, edges })
                        if node == *id && edges == incident.len() as u64 =>
                    {
                        // Refused: the node and its edges are still there.
                        assert_eq!(w.node(*id).expect("node"), m.node(*id));
                        for e in &incident {
                            assert_eq!(w.edge(*e).expect("edge"), m.edge(*e));
                        }
                        return fail(Error::NodeHasEdges { node, edges });
                    }
                    other => panic!(
                        "refused delete of node {id} with {} edges: {other:?}",
                        incident.len()
                    ),
                }
            } else {
                assert!(matches!(r, Ok(true)), "delete of node {id}: {r:?}");
                m.nodes.remove(id);
                for e in &incident {
                    m.edges.remove(e);
                    assert_eq!(w.edge(*e).expect("edge"), None, "edge {e} of node {id}");
                }
                assert_eq!(w.node(*id).expect("node"), None);
            }
        }
        Op::AddEdge(src, dst, ty, props) => {
            let r = w.add_edge(*src, *dst, ty, props);
            let missing: Vec<u64> = [*src, *dst]
                .into_iter()
                .filter(|n| !m.nodes.contains_key(n))
                .collect();
            if missing.is_empty() {
                let id = r.expect("add_edge");
                assert!(m.edges_ever.insert(id), "edge id {id} handed out twice");
                m.edges.insert(id, (ty.clone(), *src, *dst, props.clone()));
                assert_eq!(w.edge(id).expect("edge"), m.edge(id), "read own write");
            } else {
                match r {
                    Err(Error::NoSuchNode(n)) if missing.contains(&n) => {
                        return fail(Error::NoSuchNode(n));
                    }
                    other => panic!("edge {src} -> {dst} with {missing:?} missing: {other:?}"),
                }
            }
        }
        Op::DeleteEdge(id) => {
            let r = w.delete_edge(*id).expect("delete_edge");
            assert_eq!(r, m.edges.remove(id).is_some(), "delete_edge {id}");
            assert_eq!(w.edge(*id).expect("edge"), None);
        }
        Op::UpdateEdge(id, props) => {
            let r = w.update_edge(*id, props);
            match m.edges.get_mut(id) {
                Some(e) => {
                    r.expect("update_edge");
                    e.3 = props.clone();
                    assert_eq!(w.edge(*id).expect("edge"), m.edge(*id), "read own write");
                }
                None => match r {
                    Err(Error::NoSuchEdge(n)) if n == *id => return fail(Error::NoSuchEdge(n)),
                    other => panic!("update of missing edge {id}: {other:?}"),
                },
            }
        }
        Op::CreateIndex(label, prop) => {
            w.create_property_index(label, prop)
                .expect("create_property_index");
            m.indexes.insert((label.clone(), prop.clone()));
        }
    }
    Ok(())
}

/// The nodes whose adjacency, content or lookups `op` may have changed.
fn touched(m: &Model, op: &Op) -> Vec<u64> {
    match op {
        Op::AddNode(..) | Op::AddInvalid(_) | Op::CreateIndex(..) => Vec::new(),
        Op::UpdateNode(id, ..) => vec![*id],
        Op::DeleteNode(id, _) => {
            let mut v = vec![*id];
            for e in m.incident(*id) {
                let (_, s, d, _) = &m.edges[&e];
                v.extend([*s, *d]);
            }
            v
        }
        Op::AddEdge(s, d, ..) => vec![*s, *d],
        Op::DeleteEdge(id) | Op::UpdateEdge(id, _) => m
            .edges
            .get(id)
            .map_or_else(Vec::new, |(_, s, d, _)| vec![*s, *d]),
    }
}

/// One node as the graph shows it against the model: content, adjacency (every direction,
/// every type, no type, a type no edge has), degrees.
fn compare_node(r: &GraphRead<'_>, m: &Model, id: u64) -> hrafn_graph::Result<()> {
    assert_eq!(r.node(id)?, m.node(id), "node {id}");
    assert_eq!(
        r.node_location(id)?.is_some(),
        m.nodes.contains_key(&id),
        "location of node {id}"
    );
    for dir in DIRECTIONS {
        for ty in [None, Some("nothing")]
            .into_iter()
            .chain(TYPES.iter().map(|t| Some(*t)))
        {
            let want = m.neighbours(id, dir, ty);
            let got = r.neighbours(id, dir, ty)?;
            assert_eq!(
                r.degree(id, dir, ty)?,
                want.len() as u64,
                "degree of {id} {dir:?} {ty:?}"
            );
            if dir == Direction::Both {
                assert_eq!(sorted(got), want, "neighbours of {id} {dir:?} {ty:?}");
            } else {
                // One tree: exactly the documented order.
                assert_eq!(got, want, "neighbours of {id} {dir:?} {ty:?}");
            }
        }
    }
    Ok(())
}

fn compare_all(g: &Graph, m: &Model, what: &str) {
    g.read(|r| {
        assert_eq!(r.node_count(), m.nodes.len() as u64, "{what}: node_count");
        assert_eq!(r.edge_count(), m.edges.len() as u64, "{what}: edge_count");
        let ids: Vec<u64> = m.nodes.keys().copied().collect();
        assert_eq!(r.all_node_ids()?, ids, "{what}: all_node_ids");
        for &id in &m.nodes_ever {
            compare_node(r, m, id)?;
        }
        for &id in &m.edges_ever {
            assert_eq!(r.edge(id)?, m.edge(id), "{what}: edge {id}");
        }
        for id in [0, u64::MAX] {
            assert_eq!(r.node(id)?, None);
            assert_eq!(r.edge(id)?, None);
            assert!(r.neighbours(id, Direction::Both, None)?.is_empty());
        }
        for label in LABELS.iter().chain(&["Nobody", "Perso"]) {
            assert_eq!(
                r.nodes_with_label(label)?,
                m.with_label(label),
                "{what}: nodes_with_label({label})"
            );
            for prop in PROPS {
                let indexed = m.indexes.contains(&(label.to_string(), prop.to_string()));
                assert_eq!(
                    r.has_property_index(label, prop)?,
                    indexed,
                    "{what}: has_property_index({label}, {prop})"
                );
                for value in domain(prop) {
                    assert_eq!(
                        r.find_nodes(label, prop, &value)?,
                        m.find(label, prop, &value),
                        "{what}: find_nodes({label}, {prop}, {value:?}), indexed: {indexed}"
                    );
                }
            }
        }
        Ok(())
    })
    .expect("read");
    let report = g.check().expect("check");
    assert!(report.is_ok(), "{what}: {:?}", report.problems);
    assert_eq!(report.nodes, m.nodes.len() as u64, "{what}: checked nodes");
    assert_eq!(report.edges, m.edges.len() as u64, "{what}: checked edges");
}

fn open(path: &Path) -> Graph {
    Graph::open(path, Options::default().durability(Durability::None)).expect("open")
}

/// Runs `ops` random steps from `seed`; returns how many single writes were refused as
/// the model expected (so a run that never exercises a refusal shows).
fn run(seed: u64, ops: usize) -> (usize, usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut g = open(dir.path());
    let mut m = Model::default();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut refused, mut batches) = (0, 0);
    let mut step = 0;
    while step < ops {
        let what = format!("seed {seed} step {step}");
        // Indexes on a fixed schedule too, so every run has some midway.
        if step == ops / 3 || step == 2 * ops / 3 {
            let (label, prop) = (LABELS[step % 4], PROPS[step % 7]);
            g.write(|w| w.create_property_index(label, prop))
                .expect("index");
            m.indexes.insert((label.to_string(), prop.to_string()));
            compare_all(&g, &m, &format!("{what}: after index ({label}, {prop})"));
        }
        match rng.gen_range(0..100) {
            // Reopen: everything committed is there.
            0 => {
                drop(g);
                g = open(dir.path());
                compare_all(&g, &m, &format!("{what}: reopened"));
                step += 1;
            }
            // Several writes in one transaction, committed, or rolled back by an error
            // (one of the model's, or the caller's own).
            1..=4 => {
                let n = rng.gen_range(2..6);
                let batch: Vec<Op> = {
                    let mut scratch = m.clone();
                    let mut v = Vec::new();
                    for _ in 0..n {
                        v.push(random_op(&mut rng, &scratch));
                        // Grow the scratch model so later ops can name new nodes.
                        if let Some(Op::AddNode(l, p)) = v.last() {
                            let id = scratch.nodes_ever.last().copied().unwrap_or(0) + 1;
                            scratch.nodes_ever.insert(id);
                            scratch.nodes.insert(id, (l.clone(), p.clone()));
                        }
                    }
                    v
                };
                let abort = rng.gen_bool(0.3);
                let mut next = m.clone();
                let mut expected_failure = false;
                let r = g.write(|w| {
                    for op in &batch {
                        run_op(w, &mut next, op, &mut expected_failure)?;
                    }
                    if abort {
                        expected_failure = true;
                        return Err(Error::Corrupt("the caller gives up".into()));
                    }
                    Ok(())
                });
                match r {
                    Ok(()) => m = next,
                    Err(e) => assert!(expected_failure, "{what}: batch {batch:?}: {e}"),
                }
                // Committed or not, the graph agrees with the model.
                compare_all(&g, &m, &format!("{what}: batch (abort {abort})"));
                batches += 1;
                step += batch.len();
            }
            _ => {
                let op = random_op(&mut rng, &m);
                let mut touch = touched(&m, &op);
                let mut next = m.clone();
                let mut expected_failure = false;
                let r = g.write(|w| run_op(w, &mut next, &op, &mut expected_failure));
                match r {
                    Ok(()) => m = next,
                    Err(e) => {
                        assert!(expected_failure, "{what}: {op:?}: {e}");
                        refused += 1;
                    }
                }
                touch.extend(touched(&m, &op));
                g.read(|r| {
                    for id in touch {
                        compare_node(r, &m, id)?;
                    }
                    Ok(())
                })
                .expect("read");
                if step % 50 == 49 {
                    compare_all(&g, &m, &what);
                }
                step += 1;
            }
        }
    }
    compare_all(&g, &m, &format!("seed {seed}: end"));
    drop(g);
    let g = open(dir.path());
    compare_all(&g, &m, &format!("seed {seed}: end, reopened"));
    assert!(!m.edges.is_empty() && !m.nodes.is_empty());
    (refused, batches)
}

#[test]
fn random_writes_agree_with_the_model_seeds_1_to_3() {
    for seed in 1..=3 {
        let (refused, batches) = run(seed, 2_000);
        assert!(
            refused > 50 && batches > 20,
            "seed {seed}: {refused} {batches}"
        );
    }
}

#[test]
fn random_writes_agree_with_the_model_seeds_4_to_6() {
    for seed in 4..=6 {
        let (refused, batches) = run(seed, 2_000);
        assert!(
            refused > 50 && batches > 20,
            "seed {seed}: {refused} {batches}"
        );
    }
}

fn props(pairs: &[(&str, Value)]) -> Properties {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[test]
fn refused_delete_changes_nothing_and_cascade_takes_every_edge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = open(dir.path());
    let (a, b, c) = g
        .write(|w| {
            let a = w.add_node("Person", &props(&[("name", Value::from("a"))]))?;
            let b = w.add_node("Person", &Properties::new())?;
            let c = w.add_node("City", &Properties::new())?;
            w.add_edge(a, b, "KNOWS", &Properties::new())?;
            w.add_edge(a, b, "KNOWS", &Properties::new())?; // parallel
            w.add_edge(b, a, "LIKES", &Properties::new())?;
            w.add_edge(a, a, "K", &Properties::new())?; // self-loop
            w.add_edge(b, c, "KNOWS", &Properties::new())?;
            Ok((a, b, c))
        })
        .expect("write");
    let before = g
        .read(|r| r.neighbours(a, Direction::Both, None))
        .expect("read");
    assert_eq!(before.len(), 5, "{before:?}"); // the self-loop both ways
    assert_eq!(
        g.read(|r| r.degree(a, Direction::Both, Some("K")))
            .expect("degree"),
        2
    );
    match g.write(|w| w.delete_node(a, DeleteMode::Refuse)) {
        // Four distinct edges: the self-loop counts once.
        Err(Error::NodeHasEdges { node, edges }) => assert_eq!((node, edges), (a, 4)),
        other => panic!("refused delete: {other:?}"),
    }
    g.read(|r| {
        assert!(r.node(a)?.is_some());
        assert_eq!(r.neighbours(a, Direction::Both, None)?, before);
        assert_eq!(r.edge_count(), 5);
        Ok(())
    })
    .expect("read");
    assert_eq!(
        g.write(|w| w.delete_node(c, DeleteMode::Refuse))
            .map_err(|e| e.to_string()),
        Err(format!("node {c} still has 1 edges"))
    );
    assert!(
        g.write(|w| w.delete_node(a, DeleteMode::Cascade))
            .expect("cascade")
    );
    g.read(|r| {
        assert_eq!(r.node(a)?, None);
        assert_eq!(r.edge_count(), 1);
        assert!(r.neighbours(a, Direction::Both, None)?.is_empty());
        let left = r.neighbours(b, Direction::Both, None)?;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].node, c);
        assert_eq!(
            r.find_nodes("Person", "name", &Value::from("a"))?,
            Vec::<u64>::new()
        );
        Ok(())
    })
    .expect("read");
    assert!(g.check().expect("check").is_ok());
    // A node without edges goes under Refuse; a second delete finds nothing.
    assert!(
        g.write(|w| w.delete_node(b, DeleteMode::Cascade))
            .expect("delete b")
    );
    assert!(
        g.write(|w| w.delete_node(c, DeleteMode::Refuse))
            .expect("delete c")
    );
    for mode in [DeleteMode::Refuse, DeleteMode::Cascade] {
        assert!(!g.write(|w| w.delete_node(c, mode)).expect("delete again"));
    }
    assert_eq!(g.read(|r| Ok(r.node_count())).expect("read"), 0);
}

#[test]
fn missing_ids_give_the_documented_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = open(dir.path());
    let a = g
        .write(|w| w.add_node("Thing", &Properties::new()))
        .expect("add");
    let none = Properties::new();
    assert!(matches!(
        g.write(|w| w.update_node(a + 1, "Thing", &none)),
        Err(Error::NoSuchNode(n)) if n == a + 1
    ));
    assert!(matches!(
        g.write(|w| w.add_edge(a, a + 7, "R", &none)),
        Err(Error::NoSuchNode(n)) if n == a + 7
    ));
    assert!(matches!(
        g.write(|w| w.add_edge(a + 9, a, "R", &none)),
        Err(Error::NoSuchNode(n)) if n == a + 9
    ));
    assert!(matches!(
        g.write(|w| w.update_edge(3, &none)),
        Err(Error::NoSuchEdge(3))
    ));
    assert!(!g.write(|w| w.delete_edge(3)).expect("delete_edge"));
    assert!(
        !g.write(|w| w.delete_node(a + 1, DeleteMode::Refuse))
            .expect("delete_node")
    );
    g.write(|w| {
        assert_eq!(w.node(a + 1)?, None);
        assert_eq!(w.edge(1)?, None);
        Ok(())
    })
    .expect("write");
    g.read(|r| {
        assert_eq!(r.node(a + 1)?, None);
        assert_eq!(r.node_location(a + 1)?, None);
        assert_eq!(r.edge(1)?, None);
        assert_eq!(r.degree(a + 1, Direction::Both, None)?, 0);
        assert_eq!(r.degree(a + 1, Direction::Out, Some("R"))?, 0);
        assert!(r.neighbours(a + 1, Direction::In, None)?.is_empty());
        assert_eq!(r.edge_count(), 0);
        assert_eq!(r.node_count(), 1);
        Ok(())
    })
    .expect("read");
    assert!(g.check().expect("check").is_ok());
}

#[test]
fn for_each_neighbour_stops_at_the_callbacks_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = open(dir.path());
    let hub = g
        .write(|w| {
            let hub = w.add_node("Thing", &Properties::new())?;
            for _ in 0..10 {
                let n = w.add_node("Thing", &Properties::new())?;
                w.add_edge(hub, n, "R", &Properties::new())?;
            }
            Ok(hub)
        })
        .expect("write");
    let mut seen = 0;
    let r = g.read(|r| {
        r.for_each_neighbour(hub, Direction::Out, None, &mut |_| {
            seen += 1;
            if seen == 3 {
                return Err(Error::Corrupt("enough".into()));
            }
            Ok(())
        })
    });
    assert!(matches!(r, Err(Error::Corrupt(m)) if m == "enough"));
    assert_eq!(seen, 3);
}

#[test]
fn submitted_writes_from_several_threads_all_land() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = std::sync::Arc::new(open(dir.path()));
    let hub = g
        .submit(|w| w.add_node("City", &Properties::new()))
        .expect("hub");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let g = std::sync::Arc::clone(&g);
            std::thread::spawn(move || {
                for i in 0..50i64 {
                    g.submit(move |w| {
                        let n =
                            w.add_node("Person", &props(&[("age", Value::Int(t * 100 + i))]))?;
                        w.add_edge(n, hub, "LIVES_IN", &Properties::new())
                    })
                    .expect("submit");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    // A refused submit changes nothing.
    assert!(matches!(
        g.submit(move |w| w.delete_node(hub, DeleteMode::Refuse)),
        Err(Error::NodeHasEdges { edges: 200, .. })
    ));
    g.read(|r| {
        assert_eq!(r.node_count(), 201);
        assert_eq!(r.degree(hub, Direction::In, Some("LIVES_IN"))?, 200);
        let mut ages = Vec::new();
        for n in r.neighbours(hub, Direction::In, None)? {
            let node = r.node(n.node)?.expect("node");
            ages.push(node.properties["age"].clone());
        }
        ages.sort_by_key(|v| v.as_f64().map(|f| f as i64));
        let want: Vec<Value> = (0..4)
            .flat_map(|t| (0..50).map(move |i| Value::Int(t * 100 + i)))
            .collect();
        assert_eq!(ages, want);
        Ok(())
    })
    .expect("read");
    assert!(g.check().expect("check").is_ok());
}

/// `GraphRead::neighbours` documents its result as sorted by type, then neighbour, then
/// edge; for `Direction::Both` it gives the outgoing entries (sorted) followed by the
/// incoming ones (sorted), so an incoming "A" edge comes after an outgoing "B" edge.
#[test]
fn neighbours_in_both_directions_come_in_the_documented_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = open(dir.path());
    let x = g
        .write(|w| {
            let x = w.add_node("Thing", &Properties::new())?;
            let y = w.add_node("Thing", &Properties::new())?;
            let z = w.add_node("Thing", &Properties::new())?;
            w.add_edge(x, z, "B", &Properties::new())?;
            w.add_edge(y, x, "A", &Properties::new())?;
            Ok(x)
        })
        .expect("write");
    let got = g
        .read(|r| r.neighbours(x, Direction::Both, None))
        .expect("read");
    assert_eq!(got, sorted(got.clone()), "{got:?}");
}

/// `find_nodes` answers through the property index when there is one, else by comparing
/// values: the two should find the same nodes. The index compares floats by their bits
/// (`-0.0` is not `0.0`, `NaN` is `NaN`), the scan by `==` (`-0.0 == 0.0`, `NaN != NaN`),
/// so creating an index changes the answer.
#[test]
fn find_nodes_is_the_same_with_and_without_an_index_for_signed_zero_and_nan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = open(dir.path());
    g.write(|w| {
        for f in [0.0, -0.0, f64::NAN, 1.0] {
            w.add_node("Thing", &props(&[("w", Value::Float(f))]))?;
        }
        Ok(())
    })
    .expect("write");
    let lookups = [0.0, -0.0, f64::NAN].map(Value::Float);
    let find_all = || {
        g.read(|r| {
            lookups
                .iter()
                .map(|v| r.find_nodes("Thing", "w", v))
                .collect::<hrafn_graph::Result<Vec<_>>>()
        })
        .expect("read")
    };
    let scanned = find_all();
    g.write(|w| w.create_property_index("Thing", "w"))
        .expect("index");
    let indexed = find_all();
    assert_eq!(indexed, scanned);
}

/// A property index key holds the whole value (`label 0 property 0 | len | value bytes |
/// id`), and the engine's keys are at most 2,000 bytes: with an index on (label, property),
/// a node whose value is longer cannot be added or updated, and an index cannot be created
/// while such a node exists, though the same node is stored fine without the index.
#[test]
fn long_values_of_an_indexed_property_are_stored_and_found() {
    let long = Value::Text("x".repeat(5_000));
    // The index first, then nodes.
    let dir = tempfile::tempdir().expect("tempdir");
    let g = open(dir.path());
    g.write(|w| w.create_property_index("Person", "bio"))
        .expect("index");
    let added = g.write(|w| w.add_node("Person", &props(&[("bio", long.clone())])));
    let short = g
        .write(|w| w.add_node("Person", &props(&[("bio", Value::from("short"))])))
        .expect("a short value");
    let updated = g.write(|w| w.update_node(short, "Person", &props(&[("bio", long.clone())])));
    // Nodes first, then the index.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let g2 = open(dir2.path());
    let before = g2
        .write(|w| w.add_node("Person", &props(&[("bio", long.clone())])))
        .expect("a long value without an index");
    let created = g2.write(|w| w.create_property_index("Person", "bio"));
    assert!(
        added.is_ok() && updated.is_ok() && created.is_ok(),
        "add_node: {added:?}, update_node: {updated:?}, create_property_index: {created:?}"
    );
    let found = g
        .read(|r| r.find_nodes("Person", "bio", &long))
        .expect("find");
    let mut want = vec![added.expect("added"), short];
    want.sort_unstable();
    assert_eq!(found, want);
    let found = g2
        .read(|r| r.find_nodes("Person", "bio", &long))
        .expect("find");
    assert_eq!(found, vec![before]);
}

/// The check finds id counters that would hand out a stored id again.
#[test]
fn the_check_catches_an_id_counter_behind_the_stored_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = hrafn_graph::Graph::open(dir.path(), hrafn::Options::default()).expect("open");
    graph
        .write(|g| {
            let a = g.add_node("P", &hrafn_graph::Properties::new())?;
            let b = g.add_node("P", &hrafn_graph::Properties::new())?;
            g.add_edge(a, b, "T", &hrafn_graph::Properties::new())?;
            Ok(())
        })
        .expect("write");
    assert!(graph.check().expect("check").is_ok());
    for counter in ["next_node_id", "next_edge_id"] {
        let mut wtx = graph.environment().begin_write().expect("write");
        wtx.open_tree("g.meta")
            .expect("tree")
            .insert(counter.as_bytes(), 1u64.to_be_bytes())
            .expect("set back");
        wtx.commit().expect("commit");
    }
    let report = graph.check().expect("check");
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(
        report.problems[0].contains("node id counter stands at 1"),
        "{:?}",
        report.problems
    );
    assert!(
        report.problems[1].contains("edge id counter stands at 1"),
        "{:?}",
        report.problems
    );
}

/// An adjacency entry that does not decode is listed with the rest, not the end of the check.
#[test]
fn the_check_lists_an_unreadable_adjacency_key_and_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = hrafn_graph::Graph::open(dir.path(), hrafn::Options::default()).expect("open");
    graph
        .write(|g| {
            let a = g.add_node("P", &hrafn_graph::Properties::new())?;
            g.add_edge(a, a, "T", &hrafn_graph::Properties::new())?;
            Ok(())
        })
        .expect("write");
    let mut wtx = graph.environment().begin_write().expect("write");
    wtx.open_multi_tree("g.out")
        .expect("tree")
        .add([1u8, 2, 3], [0u8; 16])
        .expect("add");
    wtx.open_multi_tree("g.in")
        .expect("tree")
        .add(9u64.to_be_bytes(), [7u8; 3])
        .expect("add");
    wtx.commit().expect("commit");
    let report = graph.check().expect("the check ends with a report");
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(
        report.problems[0].contains("g.out holds an unreadable key"),
        "{:?}",
        report.problems
    );
    assert!(
        report.problems[1].contains("g.in, node 9"),
        "{:?}",
        report.problems
    );
    assert_eq!((report.nodes, report.edges), (1, 1));
}

/// The check compares each property index with the nodes of its label.
#[test]
fn the_check_catches_a_property_index_that_disagrees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = hrafn_graph::Graph::open(dir.path(), hrafn::Options::default()).expect("open");
    graph
        .write(|g| {
            g.create_property_index("Person", "name")?;
            for name in ["Ada", "Bob"] {
                let props = hrafn_graph::Properties::from([(
                    "name".into(),
                    hrafn_graph::Value::from(name),
                )]);
                g.add_node("Person", &props)?;
            }
            Ok(())
        })
        .expect("write");
    assert!(graph.check().expect("check").is_ok());
    let mut wtx = graph.environment().begin_write().expect("write");
    {
        let mut props = wtx.open_tree("g.props").expect("tree");
        let first = props
            .iter()
            .expect("iter")
            .next()
            .expect("an entry")
            .expect("read")
            .0
            .to_vec();
        assert!(props.remove(first).expect("remove"));
    }
    wtx.commit().expect("commit");
    let report = graph.check().expect("check");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains("1 entries missing"),
        "{:?}",
        report.problems
    );
}

/// The check names each adjacency entry that disagrees with the edge records (missing,
/// naming no record, or naming a record of other ends), in order, and counts the property
/// index's missing and extra entries.
#[test]
fn the_check_names_each_disagreeing_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = Graph::open(dir.path(), Options::default()).expect("open");
    let (a, b, c, e1, e2, e3) = graph
        .write(|g| {
            g.create_property_index("P", "name")?;
            let named = |n: &str| Properties::from([("name".into(), Value::from(n))]);
            let a = g.add_node("P", &named("a"))?;
            let b = g.add_node("P", &named("b"))?;
            let c = g.add_node("P", &named("c"))?;
            let e1 = g.add_edge(a, b, "T", &Properties::new())?;
            let e2 = g.add_edge(b, c, "T", &Properties::new())?;
            let e3 = g.add_edge(a, c, "U", &Properties::new())?;
            Ok((a, b, c, e1, e2, e3))
        })
        .expect("write");
    assert!(graph.check().expect("check").is_ok());
    let entry = |node: u64, edge_type: &str, other: u64, edge: u64| {
        let mut key = node.to_be_bytes().to_vec();
        key.extend_from_slice(edge_type.as_bytes());
        let mut value = other.to_be_bytes().to_vec();
        value.extend_from_slice(&edge.to_be_bytes());
        (key, value)
    };
    let mut wtx = graph.environment().begin_write().expect("write");
    {
        let mut out = wtx.open_multi_tree("g.out").expect("tree");
        let (k, v) = entry(b, "T", c, e2);
        assert!(out.remove(k, v).expect("remove"));
        let (k, v) = entry(a, "T", c, e1);
        out.add(k, v).expect("add");
    }
    {
        let mut inn = wtx.open_multi_tree("g.in").expect("tree");
        let (k, v) = entry(c, "U", b, e3);
        inn.add(k, v).expect("add");
        let (k, v) = entry(c, "T", a, 77);
        inn.add(k, v).expect("add");
    }
    {
        let mut props = wtx.open_tree("g.props").expect("tree");
        let first = props
            .iter()
            .expect("iter")
            .next()
            .expect("an entry")
            .expect("read")
            .0
            .to_vec();
        assert!(props.remove(first).expect("remove"));
        props.insert(b"P\0name\0stray", []).expect("insert");
    }
    wtx.commit().expect("commit");
    let report = graph.check().expect("check");
    assert_eq!(
        report.problems,
        [
            "property indexes: 1 entries missing, 1 entries no node gives".to_string(),
            format!("g.out lacks ({b}, \"T\", {c}, {e2}) (node, type, other, edge)"),
            format!("g.out holds ({a}, \"T\", {c}, {e1}), which no edge record gives"),
            format!("g.in holds ({c}, \"T\", {a}, 77), which no edge record gives"),
            format!("g.in holds ({c}, \"U\", {b}, {e3}), which no edge record gives"),
        ]
    );
    assert_eq!((report.nodes, report.edges), (3, 3));
}

/// `add_edges` stores what `add_edge` one by one would, and refuses a missing end.
#[test]
fn add_edges_matches_add_edge() {
    use hrafn_graph::{Direction, Properties, Value};
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = hrafn_graph::Graph::open(dir.path(), hrafn::Options::default()).expect("open");
    let heavy = Properties::from([("w".into(), Value::Float(2.5))]);
    let none = Properties::new();
    let (a, b, c, ids) = graph
        .write(|g| {
            let (a, b, c) = (
                g.add_node("N", &none)?,
                g.add_node("N", &none)?,
                g.add_node("N", &none)?,
            );
            let ids = g.add_edges(&[
                (a, b, "X", &heavy),
                (a, c, "Y", &none),
                (b, b, "X", &none),
                (a, b, "X", &none),
            ])?;
            Ok((a, b, c, ids))
        })
        .expect("write");
    assert_eq!(ids.len(), 4);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    graph
        .read(|r| {
            assert_eq!(
                r.edge(ids[0])?
                    .map(|e| (e.source, e.destination, e.edge_type, e.properties)),
                Some((a, b, "X".to_string(), heavy.clone()))
            );
            assert_eq!(r.degree(a, Direction::Out, None)?, 3);
            assert_eq!(r.degree(b, Direction::In, Some("X"))?, 3);
            assert_eq!(r.degree(c, Direction::In, None)?, 1);
            Ok(())
        })
        .expect("read");
    let missing = graph.write(|g| g.add_edges(&[(a, 9_999, "X", &none)]));
    assert!(
        matches!(missing, Err(hrafn_graph::Error::NoSuchNode(9_999))),
        "{missing:?}"
    );
    assert!(graph.check().expect("check").is_ok());
}

/// `add_nodes` stores and indexes what `add_node` one by one would, and refuses a bad
/// label before storing anything.
#[test]
fn add_nodes_matches_add_node() {
    use hrafn_graph::{Properties, Value};
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = hrafn_graph::Graph::open(dir.path(), hrafn::Options::default()).expect("open");
    let named = |name: &str| Properties::from([("name".into(), Value::from(name))]);
    let (ada, bob, acme, none) = (named("Ada"), named("Bob"), named("Acme"), Properties::new());
    let ids = graph
        .write(|g| {
            g.create_property_index("Person", "name")?;
            let first = g.add_node("Person", &ada)?;
            let ids = g.add_nodes(&[
                ("Person", &bob),
                ("Company", &acme),
                ("Person", &none),
                ("Person", &ada),
            ])?;
            Ok([vec![first], ids].concat())
        })
        .expect("write");
    assert_eq!(ids.len(), 5);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    graph
        .read(|r| {
            let node = r.node(ids[2])?.expect("stored");
            assert_eq!((node.label.as_str(), &node.properties), ("Company", &acme));
            assert_eq!(
                r.find_nodes("Person", "name", &Value::from("Ada"))?,
                vec![ids[0], ids[4]]
            );
            assert_eq!(
                r.find_nodes("Person", "name", &Value::from("Bob"))?,
                vec![ids[1]]
            );
            assert_eq!(r.nodes_with_label("Person")?.len(), 4);
            Ok(())
        })
        .expect("read");
    // Refused whole, inside a transaction that goes on: nothing stored, no id taken.
    let next = graph
        .write(|g| {
            let refused = g.add_nodes(&[("Person", &bob), ("", &none)]);
            assert!(
                matches!(refused, Err(hrafn_graph::Error::InvalidName(_))),
                "{refused:?}"
            );
            g.add_node("Person", &none)
        })
        .expect("write");
    assert_eq!(next, ids[4] + 1);
    assert_eq!(graph.read(|r| Ok(r.node_count())).expect("count"), 6);
    assert!(graph.check().expect("check").is_ok());
}

/// Rewrites the only record of table `table` (schema `schema`) with field `field` set to
/// bytes that do not decode as properties.
fn damage_properties(
    graph: &hrafn_graph::Graph,
    table: &str,
    schema: &hrafn::table::Schema,
    field: usize,
) {
    let mut wtx = graph.environment().begin_write().expect("write");
    {
        let mut t = wtx.open_table(table, schema).expect("table");
        let (id, fields) = {
            let (id, rec) = t
                .scan()
                .expect("scan")
                .next()
                .expect("a record")
                .expect("read");
            (
                id,
                rec.fields().iter().map(|f| f.to_vec()).collect::<Vec<_>>(),
            )
        };
        let mut fields = fields;
        fields[field] = b"\xff".to_vec();
        let refs: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
        t.update(id, &refs).expect("update");
    }
    wtx.commit().expect("commit");
}

/// The check reads every record whole: an edge whose properties do not decode is a
/// problem (every read of it fails), and a node whose properties do not decode still
/// exists, so its edges are not reported as dangling.
#[test]
fn the_check_reads_properties_and_keeps_damaged_nodes() {
    use hrafn::table::Schema;
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = hrafn_graph::Graph::open(dir.path(), hrafn::Options::default()).expect("open");
    let weight = hrafn_graph::Properties::from([("w".into(), hrafn_graph::Value::from(2.5))]);
    graph
        .write(|g| {
            let a = g.add_node("A", &hrafn_graph::Properties::new())?;
            g.add_edge(a, a, "SELF", &weight)?;
            Ok(())
        })
        .expect("write");
    assert!(graph.check().expect("check").is_ok());
    damage_properties(
        &graph,
        "g.edges",
        &Schema::new(5).fixed_index("by-id", 0),
        4,
    );
    let report = graph.check().expect("check");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains("properties"),
        "{:?}",
        report.problems
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let graph = hrafn_graph::Graph::open(dir.path(), hrafn::Options::default()).expect("open");
    graph
        .write(|g| {
            let a = g.add_node("A", &hrafn_graph::Properties::new())?;
            g.add_edge(a, a, "SELF", &hrafn_graph::Properties::new())?;
            Ok(())
        })
        .expect("write");
    damage_properties(
        &graph,
        "g.nodes",
        &Schema::new(3)
            .fixed_index("by-id", 0)
            .index("by-label", &[1]),
        2,
    );
    let report = graph.check().expect("check");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].starts_with("node 1 "),
        "{:?}",
        report.problems
    );
    assert!(!report.problems.iter().any(|p| p.contains("dangles")));
}
