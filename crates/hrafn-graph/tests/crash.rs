//! Power loss on the engine's simulated disk during a graph workload (node and edge adds,
//! a node with its edges in one transaction, cascading node deletes, with a property index
//! kept up) with immediate durability: for crash points spread over the whole workload and
//! every kind of damage to what was not yet durable, the graph reopens, its integrity check
//! passes (no dangling edge, adjacency exactly the edge records), every acknowledged write is
//! there, the write in flight is there whole or not at all, and ids handed out before the
//! crash are not handed out again.

use hrafn::storage::Storage;
use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::{Durability, Environment, Options};
use hrafn_graph::{DeleteMode, Direction, Graph, Properties, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const LABELS: [&str; 3] = ["Person", "City", "Thing"];
const TYPES: [&str; 3] = ["KNOWS", "LIVES_IN", "OWNS"];
const STEPS: usize = 260;

/// Replays exactly: the flusher never wakes on its own (the workload flushes and syncs at
/// chosen steps), no spare journals are made in the background, and small journal files
/// make records rotate through several.
fn options() -> Options {
    Options::default()
        .durability(Durability::Immediate)
        .journal_file_size_bytes(64 * 1024)
        .journal_spare_files(0)
        .flush_interval_ms(3_600_000)
        .flush_threshold_bytes(1 << 40)
        .sync_interval_ms(0)
}

fn open(sim: &SimStorage) -> hrafn_graph::Result<Graph> {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    Graph::with_environment(Environment::open_with_storage(storage, options())?)
}

#[derive(Clone, Debug, Default, PartialEq)]
struct State {
    nodes: BTreeMap<u64, (String, Properties)>,
    edges: BTreeMap<u64, (String, u64, u64, Properties)>,
}

impl State {
    fn delete(&mut self, id: u64) {
        self.nodes.remove(&id);
        self.edges.retain(|_, (_, s, d, _)| *s != id && *d != id);
    }
}

#[derive(Clone, Debug)]
enum Op {
    AddNode(String, Properties),
    AddEdge(u64, u64, String, Properties),
    /// A node and edges from it to these nodes, in one transaction.
    AddStar(String, Properties, Vec<(u64, String)>),
    DeleteNode(u64),
    FlushAndSync,
}

fn props(rng: &mut StdRng) -> Properties {
    let mut p = Properties::new();
    p.insert(
        "name".into(),
        Value::Text(format!("n{}", rng.gen_range(0..20))),
    );
    if rng.gen_bool(0.5) {
        p.insert("age".into(), Value::Int(rng.gen_range(0..100)));
    }
    if rng.gen_bool(0.1) {
        // Large enough to take a page of its own now and then.
        let len = rng.gen_range(500..6_000);
        p.insert("bio".into(), Value::Bytes(vec![rng.r#gen(); len]));
    }
    p
}

fn random_op(rng: &mut StdRng, acked: &State, step: usize) -> Op {
    let ids: Vec<u64> = acked.nodes.keys().copied().collect();
    let pick = |rng: &mut StdRng| ids[rng.gen_range(0..ids.len())];
    let label = |rng: &mut StdRng| LABELS[rng.gen_range(0..LABELS.len())].to_string();
    let ty = |rng: &mut StdRng| TYPES[rng.gen_range(0..TYPES.len())].to_string();
    if step % 64 == 63 {
        return Op::FlushAndSync;
    }
    match rng.gen_range(0..100) {
        _ if ids.len() < 3 => Op::AddNode(label(rng), props(rng)),
        0..=29 => Op::AddNode(label(rng), props(rng)),
        30..=69 => {
            let s = pick(rng);
            let d = if rng.gen_bool(0.1) { s } else { pick(rng) };
            let p = if rng.gen_bool(0.3) {
                props(rng)
            } else {
                Properties::new()
            };
            Op::AddEdge(s, d, ty(rng), p)
        }
        70..=84 => {
            let spokes = (0..rng.gen_range(1..6))
                .map(|_| (pick(rng), ty(rng)))
                .collect();
            Op::AddStar(label(rng), props(rng), spokes)
        }
        _ => Op::DeleteNode(pick(rng)),
    }
}

fn name(op: &Op) -> &'static str {
    match op {
        Op::AddNode(..) => "add node",
        Op::AddEdge(..) => "add edge",
        Op::AddStar(..) => "add star",
        Op::DeleteNode(_) => "delete node",
        Op::FlushAndSync => "flush and sync",
    }
}

/// Runs `op`; on success returns the ids it created (a node, then edges in order).
fn execute(g: &Graph, op: &Op) -> hrafn_graph::Result<(Option<u64>, Vec<u64>)> {
    match op {
        Op::AddNode(l, p) => g.write(|w| Ok((Some(w.add_node(l, p)?), Vec::new()))),
        Op::AddEdge(s, d, t, p) => g.write(|w| Ok((None, vec![w.add_edge(*s, *d, t, p)?]))),
        Op::AddStar(l, p, spokes) => g.write(|w| {
            let n = w.add_node(l, p)?;
            let mut edges = Vec::new();
            for (d, t) in spokes {
                edges.push(w.add_edge(n, *d, t, &Properties::new())?);
            }
            Ok((Some(n), edges))
        }),
        Op::DeleteNode(id) => g.write(|w| {
            assert!(
                w.delete_node(*id, DeleteMode::Cascade)?,
                "node {id} is there"
            );
            Ok((None, Vec::new()))
        }),
        Op::FlushAndSync => {
            g.environment().flush_and_sync()?;
            Ok((None, Vec::new()))
        }
    }
}

/// `state` after `op`, its new node and edges given these ids.
fn apply(state: &mut State, op: &Op, node: Option<u64>, edges: &[u64]) {
    match op {
        Op::AddNode(l, p) => {
            state
                .nodes
                .insert(node.expect("a node id"), (l.clone(), p.clone()));
        }
        Op::AddEdge(s, d, t, p) => {
            state.edges.insert(edges[0], (t.clone(), *s, *d, p.clone()));
        }
        Op::AddStar(l, p, spokes) => {
            let n = node.expect("a node id");
            state.nodes.insert(n, (l.clone(), p.clone()));
            for (e, (d, t)) in edges.iter().zip(spokes) {
                state
                    .edges
                    .insert(*e, (t.clone(), n, *d, Properties::new()));
            }
        }
        Op::DeleteNode(id) => state.delete(*id),
        Op::FlushAndSync => {}
    }
}

/// What a run acknowledged, and what was in flight when the power went.
#[derive(Default)]
struct Run {
    acked: State,
    in_flight: Option<Op>,
    nodes_ever: BTreeSet<u64>,
    edges_ever: BTreeSet<u64>,
    ops: usize,
}

fn run(seed: u64, sim: &SimStorage) -> Run {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut r = Run::default();
    let Ok(g) = open(sim) else {
        return r;
    };
    if g.write(|w| w.create_property_index("Person", "name"))
        .is_err()
    {
        return r;
    }
    for step in 0..STEPS {
        let op = random_op(&mut rng, &r.acked, step);
        match execute(&g, &op) {
            Ok((node, edges)) => {
                r.nodes_ever.extend(node);
                r.edges_ever.extend(edges.iter().copied());
                apply(&mut r.acked, &op, node, &edges);
                r.ops += 1;
            }
            Err(_) => {
                r.in_flight = Some(op);
                return r;
            }
        }
    }
    r
}

/// The whole graph as stored: nodes by scan, edges through adjacency (the check makes sure
/// adjacency and the edge records agree).
fn stored(g: &Graph) -> State {
    g.read(|r| {
        let mut s = State::default();
        for id in r.all_node_ids()? {
            let n = r.node(id)?.expect("a listed node");
            s.nodes.insert(id, (n.label, n.properties));
        }
        for &id in s.nodes.keys() {
            for n in r.neighbours(id, Direction::Out, None)? {
                let e = r.edge(n.edge)?.expect("an adjacent edge");
                assert_eq!((e.source, e.destination), (id, n.node));
                s.edges
                    .insert(e.id, (e.edge_type, e.source, e.destination, e.properties));
            }
        }
        assert_eq!(r.node_count(), s.nodes.len() as u64);
        assert_eq!(r.edge_count(), s.edges.len() as u64);
        // The property index agrees with the nodes.
        for i in 0..20 {
            let name = Value::Text(format!("n{i}"));
            let want: Vec<u64> = s
                .nodes
                .iter()
                .filter(|(_, (l, p))| l == "Person" && p.get("name") == Some(&name))
                .map(|(&id, _)| id)
                .collect();
            assert!(r.has_property_index("Person", "name")? || s.nodes.is_empty());
            assert_eq!(
                r.find_nodes("Person", "name", &name)?,
                want,
                "index of {name:?}"
            );
        }
        Ok(s)
    })
    .expect("read")
}

/// Whether `got` is `acked` after `op`: the ids of the new node and edges are those `got`
/// has and `acked` has not.
fn is_acked_plus(acked: &State, op: &Op, got: &State) -> bool {
    let new_nodes: Vec<u64> = got
        .nodes
        .keys()
        .filter(|id| !acked.nodes.contains_key(id))
        .copied()
        .collect();
    let new_edges: Vec<u64> = got
        .edges
        .keys()
        .filter(|id| !acked.edges.contains_key(id))
        .copied()
        .collect();
    if new_nodes.len() > 1 {
        return false;
    }
    let mut want = acked.clone();
    match op {
        // The star's spokes go to distinct-or-not nodes: match the new edges to the spokes
        // in every order the ids could have been given (few: at most 5 spokes).
        Op::AddStar(_, _, spokes) if new_edges.len() == spokes.len() => {
            let node = new_nodes.first().copied();
            let mut order = new_edges.clone();
            permutations(&mut order, 0, &mut |edges| {
                let mut w = acked.clone();
                apply(&mut w, op, node, edges);
                w == *got
            })
        }
        Op::AddStar(..) => false,
        Op::AddNode(..) if new_nodes.len() == 1 && new_edges.is_empty() => {
            apply(&mut want, op, new_nodes.first().copied(), &[]);
            want == *got
        }
        Op::AddEdge(..) if new_nodes.is_empty() && new_edges.len() == 1 => {
            apply(&mut want, op, None, &new_edges);
            want == *got
        }
        Op::DeleteNode(_) | Op::FlushAndSync => {
            apply(&mut want, op, None, &[]);
            want == *got
        }
        _ => false,
    }
}

fn permutations(v: &mut Vec<u64>, k: usize, f: &mut dyn FnMut(&[u64]) -> bool) -> bool {
    if k == v.len() {
        return f(v);
    }
    for i in k..v.len() {
        v.swap(k, i);
        if permutations(v, k + 1, f) {
            return true;
        }
        v.swap(k, i);
    }
    false
}

/// Reopens the disk `disk` and checks it against the run. Returns whether the write in
/// flight landed.
fn verify(disk: &SimStorage, r: &Run, what: &str) -> bool {
    let g = open(disk).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let report = g.check().expect("check");
    assert!(report.is_ok(), "{what}: {:?}", report.problems);
    let got = stored(&g);
    let landed = got != r.acked;
    let whole = !landed
        || r.in_flight
            .as_ref()
            .is_some_and(|op| is_acked_plus(&r.acked, op, &got));
    assert!(
        whole,
        "{what}: the graph holds neither the acknowledged writes nor those and {:?}\n\
         acked: {} nodes {} edges, stored: {} nodes {} edges",
        r.in_flight,
        r.acked.nodes.len(),
        r.acked.edges.len(),
        got.nodes.len(),
        got.edges.len()
    );
    // Writing goes on: ids handed out before the crash are not handed out again.
    let (n, e) = g
        .write(|w| {
            let n = w.add_node("Thing", &Properties::new())?;
            let target = got.nodes.keys().next().copied().unwrap_or(n);
            Ok((n, w.add_edge(n, target, "KNOWS", &Properties::new())?))
        })
        .unwrap_or_else(|e| panic!("{what}: write after reopen: {e}"));
    assert!(
        !r.nodes_ever.contains(&n) && !got.nodes.contains_key(&n),
        "{what}: node id {n} handed out again"
    );
    assert!(
        !r.edges_ever.contains(&e) && !got.edges.contains_key(&e),
        "{what}: edge id {e} handed out again"
    );
    assert!(
        g.write(|w| w.delete_node(n, DeleteMode::Cascade))
            .expect("delete")
    );
    let report = g.check().expect("check");
    assert!(
        report.is_ok(),
        "{what}: after writing on: {:?}",
        report.problems
    );
    assert_eq!(stored(&g), got, "{what}: after writing on");
    landed
}

fn crash_points(seed: u64, points: u64) -> usize {
    // A dry run tells how many disk operations the workload takes.
    let dry = SimStorage::new(seed);
    let full = run(seed, &dry);
    let ops = dry.ops_count();
    assert_eq!(full.ops, STEPS, "the dry run completes");
    assert!(full.in_flight.is_none());
    assert!(
        ops > 300 && full.acked.edges.len() > 50,
        "{ops} operations, {} edges",
        full.acked.edges.len()
    );
    // The undamaged end state is exactly the model.
    verify(
        &dry.power_cut(Damage::KeepAll),
        &full,
        &format!("seed {seed}: no crash"),
    );
    let mut states = 0;
    let (mut landed, mut lost) = (0, 0);
    for i in 0..points {
        let crash_op = 1 + i * ops / points + (seed * 7 + i) % 5;
        let sim = SimStorage::new(seed);
        sim.crash_at(crash_op);
        let r = run(seed, &sim);
        assert!(
            sim.is_frozen(),
            "op {crash_op}: the run stopped before the crash"
        );
        let mut disks = vec![
            (Damage::DropAll, sim.power_cut(Damage::DropAll)),
            (Damage::KeepAll, sim.power_cut(Damage::KeepAll)),
        ];
        for salt in 0..3 {
            disks.push((Damage::Random, sim.power_cut_salted(Damage::Random, salt)));
        }
        for (damage, disk) in disks {
            let what = format!(
                "seed {seed} op {crash_op} {damage:?} after {} writes, in flight {:?}",
                r.ops,
                r.in_flight.as_ref().map(name)
            );
            if verify(&disk, &r, &what) {
                landed += 1;
            } else if r.in_flight.is_some() {
                lost += 1;
            }
            assert!(
                disk.violations().is_empty(),
                "{what}: {:?}",
                disk.violations()
            );
            states += 1;
        }
        assert!(
            sim.violations().is_empty(),
            "op {crash_op}: {:?}",
            sim.violations()
        );
    }
    // Both outcomes of a write in flight come up.
    assert!(
        landed > 5 && lost > 5,
        "in flight: {landed} landed, {lost} lost"
    );
    states
}

#[test]
fn acknowledged_graph_writes_survive_power_loss_seed_1() {
    assert_eq!(crash_points(1, 60), 300);
}

#[test]
fn acknowledged_graph_writes_survive_power_loss_seed_2() {
    assert_eq!(crash_points(2, 60), 300);
}

#[test]
fn acknowledged_graph_writes_survive_power_loss_seed_3() {
    assert_eq!(crash_points(3, 60), 300);
}

/// The check notices adjacency no edge record gives, and an edge whose node is gone
/// (both written behind the graph's back): the checks above can fail.
#[test]
fn the_check_catches_a_dangling_edge_and_stray_adjacency() {
    let sim = SimStorage::new(3);
    let g = open(&sim).expect("open");
    let (a, b) = g
        .write(|w| {
            let a = w.add_node("Person", &Properties::new())?;
            let b = w.add_node("Person", &Properties::new())?;
            w.add_edge(a, b, "KNOWS", &Properties::new())?;
            Ok((a, b))
        })
        .expect("write");
    assert!(g.check().expect("check").is_ok());
    g.write(|w| {
        // An adjacency entry no edge record gives.
        let mut key = a.to_be_bytes().to_vec();
        key.extend_from_slice(b"KNOWS");
        let mut value = b.to_be_bytes().to_vec();
        value.extend_from_slice(&99u64.to_be_bytes());
        w.txn().open_multi_tree("g.out")?.add(key, value)?;
        Ok(())
    })
    .expect("write");
    let report = g.check().expect("check");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains("g.out"),
        "{:?}",
        report.problems
    );
    g.write(|w| {
        // Node b's record goes, its edge stays.
        let schema = hrafn::table::Schema::new(3)
            .fixed_index("by-id", 0)
            .index("by-label", &[1]);
        let mut nodes = w.txn().open_table("g.nodes", &schema)?;
        let record = nodes.index_ids("by-id", &b.to_be_bytes())?[0];
        nodes.delete(record)?;
        Ok(())
    })
    .expect("write");
    let report = g.check().expect("check");
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(
        report.problems.iter().any(|p| p.contains("dangles")),
        "{:?}",
        report.problems
    );
}

#[test]
fn the_in_flight_write_is_matched_whole_or_not_at_all() {
    // The matcher itself: a star half there is neither state.
    let mut acked = State::default();
    acked.nodes.insert(1, ("Thing".into(), Properties::new()));
    acked.nodes.insert(2, ("Thing".into(), Properties::new()));
    let op = Op::AddStar(
        "City".into(),
        Properties::new(),
        vec![(1, "KNOWS".into()), (2, "OWNS".into())],
    );
    let mut whole = acked.clone();
    apply(&mut whole, &op, Some(3), &[10, 11]);
    assert!(is_acked_plus(&acked, &op, &whole));
    let mut swapped = acked.clone();
    apply(&mut swapped, &op, Some(3), &[11, 10]);
    assert!(is_acked_plus(&acked, &op, &swapped));
    let mut half = whole.clone();
    half.edges.remove(&11);
    assert!(!is_acked_plus(&acked, &op, &half));
    let mut wrong = whole.clone();
    wrong
        .edges
        .insert(11, ("KNOWS".into(), 3, 2, Properties::new()));
    assert!(!is_acked_plus(&acked, &op, &wrong));
    let delete = Op::DeleteNode(1);
    let mut dangling = acked.clone();
    dangling.nodes.remove(&1);
    dangling
        .edges
        .insert(5, ("KNOWS".into(), 2, 1, Properties::new()));
    assert!(!is_acked_plus(&acked, &delete, &dangling));
}

/// Power loss during a CSV bulk load large enough to be stored in locality order over
/// several transactions: after any crash the graph checks clean (no edge without both of
/// its adjacency entries), holds all of the nodes or none of a node transaction, and holds
/// the edges of the acknowledged transactions, plus at most the one in flight, whole.
#[test]
fn a_bulk_load_survives_power_loss_transaction_by_transaction() {
    use hrafn_graph::load::EDGE_ROWS_PER_TXN;
    let nodes_count = 2_000;
    let mut nodes = String::from("id,label\n");
    for i in 0..nodes_count {
        nodes.push_str(&format!("n{i},L\n"));
    }
    let mut rng = StdRng::seed_from_u64(5);
    let edge_count = 2 * EDGE_ROWS_PER_TXN + 7_000;
    let mut edges = String::from("src,dst,type\n");
    for _ in 0..edge_count {
        let (s, d) = (rng.gen_range(0..nodes_count), rng.gen_range(0..nodes_count));
        edges.push_str(&format!("n{s},n{d},{}\n", TYPES[rng.gen_range(0..3)]));
    }
    // The (nodes, edges) counts acknowledged by the progress calls, in order, and the
    // storage operations done by then.
    let load = |sim: &SimStorage| -> (Vec<(u64, u64)>, Vec<u64>) {
        let (mut acked, mut ops) = (vec![(0, 0)], vec![0]);
        if let Ok(g) = open(sim) {
            let _ = g.load_csv(nodes.as_bytes(), edges.as_bytes(), &mut |p| {
                acked.push((p.nodes, p.edges));
                ops.push(sim.ops_count());
            });
        }
        (acked, ops)
    };
    let dry = SimStorage::new(9);
    let (full, acked_at_op) = load(&dry);
    assert_eq!(
        full.last(),
        Some(&(nodes_count as u64, edge_count as u64)),
        "the dry run completes"
    );
    // Evenly over the whole run (the flusher's writes after the last commit are most of
    // it), and halfway between each two acknowledgements of the dry run, so crashes land
    // between transactions however the threads' operations interleave.
    let ops = dry.ops_count();
    let points = 12;
    let mut crash_ops: Vec<u64> = (0..points).map(|i| 1 + i * ops / points + i % 3).collect();
    crash_ops.extend(acked_at_op.windows(2).map(|w| (w[0] + w[1]).div_ceil(2)));
    crash_ops.sort_unstable();
    crash_ops.dedup();
    let mut edges_seen = BTreeSet::new();
    for crash_op in crash_ops {
        let sim = SimStorage::new(9);
        sim.crash_at(crash_op);
        let (acked, _) = load(&sim);
        let &(acked_nodes, acked_edges) = acked.last().expect("one entry at least");
        for damage in [Damage::DropAll, Damage::KeepAll, Damage::Random] {
            let what = format!(
                "op {crash_op} {damage:?}, acknowledged {acked_nodes} nodes {acked_edges} edges"
            );
            let disk = sim.power_cut(damage);
            let g = open(&disk).unwrap_or_else(|e| panic!("{what}: open: {e}"));
            let report = g.check().expect("check");
            assert!(report.is_ok(), "{what}: {:?}", report.problems);
            let (n, e) = g
                .read(|r| Ok((r.node_count(), r.edge_count())))
                .expect("counts");
            // Acknowledged, or the next transaction whole (a node batch or an edge batch).
            let next = full
                .iter()
                .copied()
                .find(|&c| c.0 > acked_nodes || c.1 > acked_edges);
            assert!(
                (n, e) == (acked_nodes, acked_edges) || Some((n, e)) == next,
                "{what}: stored {n} nodes {e} edges, next transaction {next:?}"
            );
            let out: u64 = g
                .read(|r| {
                    let mut out = 0;
                    for id in r.nodes_with_label("L")? {
                        out += r.degree(id, Direction::Out, None)?;
                    }
                    Ok(out)
                })
                .expect("degrees");
            assert_eq!(out, e, "{what}: out-adjacency entries");
            edges_seen.insert(e);
            assert!(
                disk.violations().is_empty(),
                "{what}: {:?}",
                disk.violations()
            );
        }
    }
    // Crashes landed before, between and after edge transactions.
    assert!(
        edges_seen.len() >= 3,
        "edge counts after crashes: {edges_seen:?}"
    );
}
