//! Traversals on generated graphs (uniformly random, and power-law by preferential
//! attachment; several edge types, self-loops, parallel edges, weights of every kind) against
//! `petgraph`: breadth-first depths, k-hop sets, depth-first reach and order, shortest paths
//! by hops and by weight, under every direction, edge-type filters, depth limits, node and
//! edge filters. Chain patterns against a brute-force enumeration on small graphs, with and
//! without property indexes.

use hrafn::{Durability, Options};
use hrafn_graph::{
    Direction, Graph, GraphRead, Neighbour, Node, Pattern, Properties, Traversal, Value,
};
use petgraph::algo::dijkstra;
use petgraph::graph::{DiGraph, NodeIndex};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeSet, HashMap, HashSet};

const TYPES: [&str; 3] = ["road", "rail", "air"];
const DIRECTIONS: [Direction; 3] = [Direction::Out, Direction::In, Direction::Both];

struct GenEdge {
    id: u64,
    s: usize,
    d: usize,
    ty: &'static str,
    weight: Option<Value>,
}

/// A stored graph and what was stored, by node index.
struct TestGraph {
    g: Graph,
    _dir: tempfile::TempDir,
    ids: Vec<u64>,
    index: HashMap<u64, usize>,
    group: Vec<i64>,
    edges: Vec<GenEdge>,
}

fn random_weight(rng: &mut StdRng) -> Option<Value> {
    match rng.gen_range(0..20) {
        0 => None,                                         // weighs 1
        1 => Some(Value::from("heavy")),                   // not a number: weighs 1
        2 => Some(Value::Float(-rng.gen_range(0.0..3.0))), // taken as 0
        3 | 4 => Some(Value::Int(rng.gen_range(0..6))),
        _ => Some(Value::Float(rng.gen_range(0.0..10.0))),
    }
}

fn weight_of(w: &Option<Value>) -> f64 {
    w.as_ref().and_then(Value::as_f64).unwrap_or(1.0).max(0.0)
}

/// Stores `n` nodes and the edges `(s, d)` given by index.
fn store(rng: &mut StdRng, n: usize, pairs: &[(usize, usize)]) -> TestGraph {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = Graph::open(dir.path(), Options::default().durability(Durability::None)).expect("open");
    let group: Vec<i64> = (0..n).map(|_| rng.gen_range(0..4)).collect();
    let labels: Vec<&str> = (0..n)
        .map(|_| if rng.gen_bool(0.5) { "A" } else { "B" })
        .collect();
    let specs: Vec<(usize, usize, &'static str, Option<Value>)> = pairs
        .iter()
        .map(|&(s, d)| {
            // Skewed: "road" is common, "air" rare.
            let ty = match rng.gen_range(0..10) {
                0..=5 => TYPES[0],
                6..=8 => TYPES[1],
                _ => TYPES[2],
            };
            (s, d, ty, random_weight(rng))
        })
        .collect();
    let (ids, edges) = g
        .write(|w| {
            let mut ids = Vec::with_capacity(n);
            for i in 0..n {
                let p = Properties::from([("group".to_string(), Value::Int(group[i]))]);
                ids.push(w.add_node(labels[i], &p)?);
            }
            let mut edges = Vec::with_capacity(specs.len());
            for (s, d, ty, weight) in &specs {
                let mut p = Properties::new();
                if let Some(v) = weight {
                    p.insert("w".to_string(), v.clone());
                }
                let id = w.add_edge(ids[*s], ids[*d], ty, &p)?;
                edges.push(GenEdge {
                    id,
                    s: *s,
                    d: *d,
                    ty,
                    weight: weight.clone(),
                });
            }
            Ok((ids, edges))
        })
        .expect("write");
    let index = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    TestGraph {
        g,
        _dir: dir,
        ids,
        index,
        group,
        edges,
    }
}

/// `m` edges between uniformly random nodes (self-loops and parallel edges among them).
fn random_graph(seed: u64, n: usize, m: usize) -> (TestGraph, StdRng) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pairs: Vec<(usize, usize)> = (0..m)
        .map(|_| (rng.gen_range(0..n), rng.gen_range(0..n)))
        .collect();
    for i in 0..m / 50 {
        pairs.push(pairs[i * 7 % pairs.len()]); // parallel
        let v = rng.gen_range(0..n);
        pairs.push((v, v)); // self-loop
    }
    let tg = store(&mut rng, n, &pairs);
    (tg, rng)
}

/// Preferential attachment: each new node joins `k` nodes picked in proportion to their
/// degree, the edge pointing either way: a few hubs, many leaves.
fn power_law_graph(seed: u64, n: usize, k: usize) -> (TestGraph, StdRng) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ends: Vec<usize> = vec![0, 1, 1, 2, 2, 0];
    let mut pairs = vec![(0, 1), (1, 2), (2, 0)];
    for v in 3..n {
        for _ in 0..k {
            let u = *ends.choose(&mut rng).expect("ends");
            pairs.push(if rng.gen_bool(0.5) { (v, u) } else { (u, v) });
            ends.extend([u, v]);
        }
    }
    let tg = store(&mut rng, n, &pairs);
    (tg, rng)
}

/// A way of walking, as the reference sees it.
#[derive(Clone, Debug)]
struct Config {
    dir: Direction,
    types: Vec<&'static str>,
    max: Option<u32>,
    node_filter: bool,
    edge_filter: bool,
}

fn admitted(n: &Node) -> bool {
    n.properties.get("group") != Some(&Value::Int(0))
}

fn edge_ok(n: &Neighbour) -> bool {
    n.edge % 4 != 1
}

fn traversal(c: &Config) -> Traversal<'static> {
    let mut t = Traversal::default().direction(c.dir).edge_types(&c.types);
    if let Some(m) = c.max {
        t = t.max_depth(m);
    }
    if c.node_filter {
        t = t.node_filter(&admitted);
    }
    if c.edge_filter {
        t = t.edge_filter(&edge_ok);
    }
    t
}

/// The steps a walk under `c` may take, by node index, as a petgraph digraph weighted as
/// the traversal weighs edges; and the lightest step between each ordered pair.
struct Reference {
    pg: DiGraph<(), f64>,
    lightest: HashMap<(usize, usize), f64>,
    succ: Vec<Vec<usize>>,
}

fn reference(tg: &TestGraph, c: &Config) -> Reference {
    let n = tg.ids.len();
    let mut pg = DiGraph::<(), f64>::with_capacity(n, tg.edges.len() * 2);
    for _ in 0..n {
        pg.add_node(());
    }
    let mut lightest: HashMap<(usize, usize), f64> = HashMap::new();
    let mut succ = vec![Vec::new(); n];
    for e in &tg.edges {
        if !c.types.is_empty() && !c.types.contains(&e.ty) {
            continue;
        }
        let ways: &[(usize, usize)] = match c.dir {
            Direction::Out => &[(e.s, e.d)],
            Direction::In => &[(e.d, e.s)],
            Direction::Both => &[(e.s, e.d), (e.d, e.s)],
        };
        for &(a, b) in ways {
            let step = Neighbour {
                node: tg.ids[b],
                edge: e.id,
                edge_type: e.ty.to_string(),
            };
            if c.edge_filter && !edge_ok(&step) {
                continue;
            }
            if c.node_filter && tg.group[b] == 0 {
                continue;
            }
            let w = weight_of(&e.weight);
            pg.add_edge(NodeIndex::new(a), NodeIndex::new(b), w);
            let l = lightest.entry((a, b)).or_insert(w);
            *l = l.min(w);
            succ[a].push(b);
        }
    }
    Reference { pg, lightest, succ }
}

impl Reference {
    /// Hop distances from `start` (petgraph's Dijkstra with unit costs).
    fn hops(&self, start: usize) -> HashMap<usize, u32> {
        dijkstra(&self.pg, NodeIndex::new(start), None, |_| 1u32)
            .into_iter()
            .map(|(k, v)| (k.index(), v))
            .collect()
    }

    fn weighted(&self, start: usize) -> HashMap<usize, f64> {
        dijkstra(&self.pg, NodeIndex::new(start), None, |e| *e.weight())
            .into_iter()
            .map(|(k, v)| (k.index(), v))
            .collect()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[derive(Default, Debug)]
struct Counts {
    bfs: usize,
    dfs: usize,
    k_hop: usize,
    paths: usize,
    unreachable: usize,
    weighted: usize,
}

/// Checks every traversal from `start` under `c` against the reference.
fn check_from(
    r: &GraphRead<'_>,
    tg: &TestGraph,
    c: &Config,
    reference: &Reference,
    start: usize,
    rng: &mut StdRng,
    counts: &mut Counts,
) -> hrafn_graph::Result<()> {
    let t = traversal(c);
    let what = format!("{c:?} from node {}", tg.ids[start]);
    let hops = reference.hops(start);
    let within = |d: u32| c.max.is_none_or(|m| d <= m);
    let want: HashMap<u64, u32> = hops
        .iter()
        .filter(|&(_, &d)| within(d))
        .map(|(&i, &d)| (tg.ids[i], d))
        .collect();

    // BFS: every node within reach once, at its distance, level by level, each level in
    // id order.
    let bfs = r.bfs(tg.ids[start], &t)?;
    assert_eq!(bfs.first(), Some(&(tg.ids[start], 0)), "{what}");
    for w in bfs.windows(2) {
        assert!(
            w[0].1 < w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0),
            "{what}: bfs order {w:?}"
        );
    }
    let got: HashMap<u64, u32> = bfs.iter().copied().collect();
    assert_eq!(got.len(), bfs.len(), "{what}: a node twice");
    assert_eq!(got, want, "{what}: bfs depths");
    counts.bfs += 1;

    // k-hop: the nodes within k steps, the start excluded.
    for k in [1, 2, 4] {
        let want_k: Vec<u64> = {
            let mut v: Vec<u64> = want
                .iter()
                .filter(|&(&id, &d)| d > 0 && d <= k && id != tg.ids[start])
                .map(|(&id, _)| id)
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(r.k_hop(tg.ids[start], k, &t)?, want_k, "{what}: {k}-hop");
        counts.k_hop += 1;
    }

    // DFS: a real depth-first order (each node reached from the one on top of the path,
    // a node left only once all its steps are visited), within the depth limit, over the
    // reachable nodes; without a limit, exactly them.
    let dfs = r.dfs(tg.ids[start], &t)?;
    let mut visited: HashSet<usize> = HashSet::new();
    let mut path: Vec<usize> = Vec::new();
    let leave = |u: usize, depth: usize, visited: &HashSet<usize>| {
        if c.max.is_none_or(|m| (depth as u32) < m) {
            for s in &reference.succ[u] {
                assert!(
                    visited.contains(s),
                    "{what}: dfs left {} before visiting {}",
                    tg.ids[u],
                    tg.ids[*s]
                );
            }
        }
    };
    for (k, &(id, d)) in dfs.iter().enumerate() {
        let v = tg.index[&id];
        assert!(visited.insert(v), "{what}: dfs visits {id} twice");
        assert!(within(d), "{what}: dfs depth {d} over the limit");
        if k == 0 {
            assert_eq!((v, d), (start, 0), "{what}: dfs starts at the start");
            path.push(v);
            continue;
        }
        let d = d as usize;
        assert!(
            d >= 1 && d <= path.len(),
            "{what}: dfs depth {d} after {path:?}"
        );
        while path.len() > d {
            let u = path.pop().expect("path");
            leave(u, path.len(), &visited);
        }
        let parent = path[d - 1];
        assert!(
            reference.lightest.contains_key(&(parent, v)),
            "{what}: dfs steps {} -> {id}, which is no edge",
            tg.ids[parent]
        );
        path.push(v);
    }
    while let Some(u) = path.pop() {
        leave(u, path.len(), &visited);
    }
    let reach: HashSet<usize> = hops.keys().copied().collect();
    assert!(visited.is_subset(&reach), "{what}: dfs beyond reach");
    if c.max.is_none() {
        assert_eq!(visited, reach, "{what}: dfs reach");
    }
    counts.dfs += 1;

    // Shortest paths by hops: to random nodes (often unreachable) and reachable ones.
    let reachable: Vec<usize> = hops.keys().copied().collect();
    let mut targets: Vec<usize> = (0..3).map(|_| rng.gen_range(0..tg.ids.len())).collect();
    targets.extend((0..3).map(|_| *reachable.choose(rng).expect("the start")));
    targets.push(start);
    for to in targets {
        let got = r.shortest_path(tg.ids[start], tg.ids[to], &t)?;
        match (hops.get(&to).filter(|&&d| within(d)), got) {
            (None, None) => counts.unreachable += 1,
            (Some(&d), Some(p)) => {
                assert_eq!(
                    p.len() as u32,
                    d + 1,
                    "{what}: path to {}: {p:?}",
                    tg.ids[to]
                );
                assert_eq!(p.first(), Some(&tg.ids[start]));
                assert_eq!(p.last(), Some(&tg.ids[to]));
                for w in p.windows(2) {
                    let step = (tg.index[&w[0]], tg.index[&w[1]]);
                    assert!(
                        reference.lightest.contains_key(&step),
                        "{what}: path step {w:?} is no edge"
                    );
                }
                counts.paths += 1;
            }
            (want, got) => panic!("{what}: path to {}: want {want:?}, got {got:?}", tg.ids[to]),
        }
    }

    // Lightest paths (no depth limit: Dijkstra ignores it), against petgraph's Dijkstra;
    // the path's own weights add up to the distance.
    if c.max.is_none() {
        let dist = reference.weighted(start);
        let mut targets: Vec<usize> = (0..2).map(|_| rng.gen_range(0..tg.ids.len())).collect();
        targets.extend((0..3).map(|_| *reachable.choose(rng).expect("the start")));
        for to in targets {
            let got = r.shortest_path_weighted(tg.ids[start], tg.ids[to], "w", &t)?;
            match (dist.get(&to), got) {
                (None, None) => {}
                (Some(&d), Some((p, w))) => {
                    assert!(close(w, d), "{what}: weight to {}: {w} vs {d}", tg.ids[to]);
                    assert_eq!(p.first(), Some(&tg.ids[start]));
                    assert_eq!(p.last(), Some(&tg.ids[to]));
                    let mut sum = 0.0;
                    for s in p.windows(2) {
                        let step = (tg.index[&s[0]], tg.index[&s[1]]);
                        sum += reference
                            .lightest
                            .get(&step)
                            .unwrap_or_else(|| panic!("{what}: step {s:?} is no edge"));
                    }
                    assert!(close(sum, w), "{what}: the path weighs {sum}, not {w}");
                    counts.weighted += 1;
                }
                (want, got) => panic!("{what}: weighted to {}: {want:?} vs {got:?}", tg.ids[to]),
            }
        }
    }
    Ok(())
}

fn configs() -> Vec<Config> {
    let mut out = Vec::new();
    for dir in DIRECTIONS {
        for types in [vec![], vec!["road"], vec!["rail", "air"]] {
            for max in [None, Some(2)] {
                for (node_filter, edge_filter) in [(false, false), (true, false), (false, true)] {
                    out.push(Config {
                        dir,
                        types: types.clone(),
                        max,
                        node_filter,
                        edge_filter,
                    });
                }
            }
        }
    }
    out
}

/// Every configuration from a few starts: random nodes, and the busiest node.
fn check_graph(tg: &TestGraph, rng: &mut StdRng, starts_per_config: usize) -> Counts {
    let mut counts = Counts::default();
    let mut degree = vec![0usize; tg.ids.len()];
    for e in &tg.edges {
        degree[e.s] += 1;
        degree[e.d] += 1;
    }
    let hub = (0..tg.ids.len()).max_by_key(|&i| degree[i]).expect("nodes");
    tg.g.read(|r| {
        for c in configs() {
            let reference = reference(tg, &c);
            let mut starts = vec![hub];
            starts.extend((1..starts_per_config).map(|_| rng.gen_range(0..tg.ids.len())));
            for start in starts {
                check_from(r, tg, &c, &reference, start, rng, &mut counts)?;
            }
        }
        Ok(())
    })
    .expect("read");
    counts
}

#[test]
fn traversals_agree_with_petgraph_on_random_graphs() {
    let mut total = Counts::default();
    for (seed, n, m) in [(1, 1_200, 3_600), (2, 300, 1_500)] {
        let (tg, mut rng) = random_graph(seed, n, m);
        let c = check_graph(&tg, &mut rng, 3);
        assert!(
            c.unreachable > 10 && c.paths > 100 && c.weighted > 50,
            "{c:?}"
        );
        total.bfs += c.bfs;
        total.paths += c.paths;
    }
    assert!(total.bfs >= 200 && total.paths > 500, "{total:?}");
}

#[test]
fn traversals_agree_with_petgraph_on_power_law_graphs() {
    for (seed, n, k) in [(3, 2_000, 2), (4, 500, 1)] {
        let (tg, mut rng) = power_law_graph(seed, n, k);
        let c = check_graph(&tg, &mut rng, 3);
        assert!(
            c.unreachable > 10 && c.paths > 100 && c.weighted > 50,
            "{c:?}"
        );
    }
}

/// A tiny graph, walked by hand: the documented outputs, exactly.
#[test]
fn traversals_on_a_small_graph_give_the_documented_answers() {
    let mut rng = StdRng::seed_from_u64(9);
    // 0 -> 1 -> 2 -> 3, 0 -> 2 (a short cut), 4 alone, 3 -> 3.
    let tg = store(&mut rng, 5, &[(0, 1), (1, 2), (2, 3), (0, 2), (3, 3)]);
    let id = |i: usize| tg.ids[i];
    tg.g.read(|r| {
        let out = Traversal::default();
        assert_eq!(
            r.bfs(id(0), &out)?,
            vec![(id(0), 0), (id(1), 1), (id(2), 1), (id(3), 2)]
        );
        assert_eq!(
            r.bfs(id(0), &Traversal::default().max_depth(0))?,
            vec![(id(0), 0)]
        );
        assert_eq!(r.k_hop(id(0), 1, &out)?, vec![id(1), id(2)]);
        assert_eq!(r.k_hop(id(0), 0, &out)?, Vec::<u64>::new());
        assert_eq!(r.k_hop(id(3), 3, &out)?, Vec::<u64>::new()); // only itself
        assert_eq!(
            r.shortest_path(id(0), id(3), &out)?,
            Some(vec![id(0), id(2), id(3)])
        );
        assert_eq!(r.shortest_path(id(0), id(0), &out)?, Some(vec![id(0)]));
        assert_eq!(r.shortest_path(id(3), id(0), &out)?, None);
        assert_eq!(r.shortest_path(id(0), id(4), &out)?, None);
        assert_eq!(
            r.shortest_path(id(0), id(3), &Traversal::default().max_depth(1))?,
            None
        );
        let back = Traversal::default().direction(Direction::In);
        assert_eq!(
            r.shortest_path(id(3), id(0), &back)?,
            Some(vec![id(3), id(2), id(0)])
        );
        assert_eq!(
            r.shortest_path_weighted(id(4), id(4), "w", &out)?,
            Some((vec![id(4)], 0.0))
        );
        assert_eq!(r.shortest_path_weighted(id(3), id(0), "w", &out)?, None);
        // DFS follows the first neighbour first: 0 -> 1 -> 2 -> 3.
        assert_eq!(
            r.dfs(id(0), &out)?,
            vec![(id(0), 0), (id(1), 1), (id(2), 2), (id(3), 3)]
        );
        Ok(())
    })
    .expect("read");
}

/// `Traversal::max_depth` is "the deepest level visited" and `k_hop`/`bfs` reach every
/// node within it; a depth-limited `dfs` visits each node once, where it first reaches
/// it, so a node first reached at the limit through a long branch is not expanded from
/// its shallower occurrence (documented). Here 0 -> 1 -> 2 and 0 -> 2 -> 3 with the limit
/// 2: the walk visits 2 at depth 2 (through 1), and never 3, which bfs reaches.
#[test]
fn depth_limited_dfs_visits_each_node_once_where_it_first_reaches_it() {
    let mut rng = StdRng::seed_from_u64(10);
    let tg = store(&mut rng, 4, &[(0, 1), (1, 2), (0, 2), (2, 3)]);
    let id = |i: usize| tg.ids[i];
    tg.g.read(|r| {
        let t = Traversal::default().max_depth(2);
        assert_eq!(r.dfs(id(0), &t)?, vec![(id(0), 0), (id(1), 1), (id(2), 2)]);
        let mut bfs: Vec<u64> = r.bfs(id(0), &t)?.into_iter().map(|(n, _)| n).collect();
        bfs.sort_unstable();
        assert_eq!(bfs, tg.ids, "bfs within 2");
        Ok(())
    })
    .expect("read");
}

/// On generated graphs: a depth-limited DFS visits a subset of the nodes within the
/// limit, and without a limit exactly the reachable set.
#[test]
fn depth_limited_dfs_stays_within_the_bfs_set_on_random_graphs() {
    let (tg, mut rng) = random_graph(5, 400, 1_200);
    tg.g.read(|r| {
        for dir in DIRECTIONS {
            for max in 1..4 {
                let t = Traversal::default().direction(dir).max_depth(max);
                for _ in 0..20 {
                    let start = tg.ids[rng.gen_range(0..tg.ids.len())];
                    let dfs: BTreeSet<u64> =
                        r.dfs(start, &t)?.into_iter().map(|(n, _)| n).collect();
                    let bfs: BTreeSet<u64> =
                        r.bfs(start, &t)?.into_iter().map(|(n, _)| n).collect();
                    assert!(dfs.is_subset(&bfs), "{dir:?} within {max} from {start}");
                    let all = Traversal::default().direction(dir);
                    let dfs_all: BTreeSet<u64> =
                        r.dfs(start, &all)?.into_iter().map(|(n, _)| n).collect();
                    let bfs_all: BTreeSet<u64> =
                        r.bfs(start, &all)?.into_iter().map(|(n, _)| n).collect();
                    assert_eq!(dfs_all, bfs_all, "{dir:?} from {start}");
                }
            }
        }
        Ok(())
    })
    .expect("read");
}

/// `shortest_path` and `shortest_path_weighted` both honour `max_depth`.
#[test]
fn weighted_shortest_path_honours_the_depth_limit() {
    let mut rng = StdRng::seed_from_u64(11);
    let tg = store(&mut rng, 3, &[(0, 1), (1, 2)]);
    tg.g.read(|r| {
        let t = Traversal::default().max_depth(1);
        assert_eq!(r.shortest_path(tg.ids[0], tg.ids[2], &t)?, None);
        let weighted = r.shortest_path_weighted(tg.ids[0], tg.ids[2], "w", &t)?;
        assert!(
            weighted.as_ref().is_none_or(|(p, _)| p.len() <= 2),
            "{weighted:?}"
        );
        Ok(())
    })
    .expect("read");
}

// ---- patterns ----

const PATTERN_TYPES: [&str; 2] = ["X", "Y"];

struct Small {
    tg: TestGraph,
    label: Vec<&'static str>,
    k: Vec<Option<i64>>,
}

/// A small graph for patterns: labels P/C, an optional property `k` in 0..3, edge types
/// X/Y, self-loops and parallel edges.
fn small_graph(seed: u64) -> Small {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = rng.gen_range(5..25);
    let m = rng.gen_range(n..3 * n);
    let dir = tempfile::tempdir().expect("tempdir");
    let g = Graph::open(dir.path(), Options::default().durability(Durability::None)).expect("open");
    let label: Vec<&'static str> = (0..n)
        .map(|_| if rng.gen_bool(0.6) { "P" } else { "C" })
        .collect();
    let k: Vec<Option<i64>> = (0..n)
        .map(|_| rng.gen_bool(0.8).then(|| rng.gen_range(0..3)))
        .collect();
    let specs: Vec<(usize, usize, &'static str)> = (0..m)
        .map(|_| {
            let s = rng.gen_range(0..n);
            let d = if rng.gen_bool(0.1) {
                s
            } else {
                rng.gen_range(0..n)
            };
            (s, d, *PATTERN_TYPES.choose(&mut rng).expect("types"))
        })
        .chain([(0, 1, "X"), (0, 1, "X")]) // parallel
        .collect();
    let (ids, edges) = g
        .write(|w| {
            let mut ids = Vec::new();
            for i in 0..n {
                let mut p = Properties::new();
                if let Some(v) = k[i] {
                    p.insert("k".into(), Value::Int(v));
                }
                ids.push(w.add_node(label[i], &p)?);
            }
            let mut edges = Vec::new();
            for &(s, d, ty) in &specs {
                let id = w.add_edge(ids[s], ids[d], ty, &Properties::new())?;
                edges.push(GenEdge {
                    id,
                    s,
                    d,
                    ty,
                    weight: None,
                });
            }
            Ok((ids, edges))
        })
        .expect("write");
    let index = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    Small {
        tg: TestGraph {
            g,
            _dir: dir,
            ids,
            index,
            group: vec![1; n],
            edges,
        },
        label,
        k,
    }
}

/// A pattern as data, for the brute force and for `Pattern`.
#[derive(Clone, Debug)]
struct PNode {
    label: Option<&'static str>,
    k: Option<Value>,
}

#[derive(Clone, Debug)]
struct PEdge {
    ty: Option<&'static str>,
    dir: Direction,
}

fn random_pnode(rng: &mut StdRng) -> PNode {
    PNode {
        label: match rng.gen_range(0..3) {
            0 => None,
            1 => Some("P"),
            _ => Some("C"),
        },
        k: match rng.gen_range(0..6) {
            0..=2 => None,
            3 => Some(Value::Float(1.0)), // the wrong type: matches nothing
            _ => Some(Value::Int(rng.gen_range(0..3))),
        },
    }
}

fn build(nodes: &[PNode], edges: &[PEdge]) -> Pattern {
    let props = |p: &PNode| -> Vec<(&'static str, Value)> {
        p.k.iter().map(|v| ("k", v.clone())).collect()
    };
    let mut pattern = Pattern::start(nodes[0].label, &props(&nodes[0]));
    for (e, n) in edges.iter().zip(&nodes[1..]) {
        pattern = pattern.then(e.ty, e.dir, n.label, &props(n));
    }
    pattern
}

/// Every chain matching the pattern, by walking the edge list (no adjacency, no index).
fn brute_force(s: &Small, nodes: &[PNode], edges: &[PEdge]) -> BTreeSet<Vec<u64>> {
    let fits = |i: usize, p: &PNode| {
        p.label.is_none_or(|l| l == s.label[i])
            && p.k
                .as_ref()
                .is_none_or(|v| s.k[i].map(Value::Int).as_ref() == Some(v))
    };
    let mut partial: Vec<Vec<usize>> = (0..s.label.len())
        .filter(|&i| fits(i, &nodes[0]))
        .map(|i| vec![i])
        .collect();
    for (pe, pn) in edges.iter().zip(&nodes[1..]) {
        let mut next = Vec::new();
        for chain in &partial {
            let at = *chain.last().expect("chain");
            for e in &s.tg.edges {
                if pe.ty.is_some_and(|t| t != e.ty) {
                    continue;
                }
                let mut ends = Vec::new();
                if pe.dir != Direction::In && e.s == at {
                    ends.push(e.d);
                }
                if pe.dir != Direction::Out && e.d == at {
                    ends.push(e.s);
                }
                for to in ends {
                    if fits(to, pn) {
                        let mut c = chain.clone();
                        c.push(to);
                        next.push(c);
                    }
                }
            }
        }
        partial = next;
    }
    partial
        .into_iter()
        .map(|c| c.into_iter().map(|i| s.tg.ids[i]).collect())
        .collect()
}

#[test]
fn patterns_match_a_brute_force_enumeration() {
    let mut rng = StdRng::seed_from_u64(77);
    let (mut cases, mut nonempty) = (0, 0);
    for seed in 0..24 {
        let s = small_graph(seed);
        let patterns: Vec<(Vec<PNode>, Vec<PEdge>)> = (0..30)
            .map(|_| {
                let len = rng.gen_range(1..=4);
                let nodes: Vec<PNode> = (0..len).map(|_| random_pnode(&mut rng)).collect();
                let edges: Vec<PEdge> = (1..len)
                    .map(|_| PEdge {
                        ty: match rng.gen_range(0..3) {
                            0 => None,
                            i => Some(PATTERN_TYPES[i - 1]),
                        },
                        dir: *DIRECTIONS.choose(&mut rng).expect("directions"),
                    })
                    .collect();
                (nodes, edges)
            })
            .collect();
        for indexed in [false, true] {
            if indexed {
                s.tg.g
                    .write(|w| {
                        w.create_property_index("P", "k")?;
                        w.create_property_index("C", "k")
                    })
                    .expect("index");
            }
            s.tg.g
                .read(|r| {
                    for (nodes, edges) in &patterns {
                        let want = brute_force(&s, nodes, edges);
                        let got = r.match_pattern(&build(nodes, edges), None)?;
                        let got_set: BTreeSet<Vec<u64>> = got.iter().cloned().collect();
                        assert_eq!(got_set.len(), got.len(), "a match twice: {got:?}");
                        assert_eq!(
                            got_set, want,
                            "graph {seed}, indexed {indexed}: {nodes:?} {edges:?}"
                        );
                        for m in &got {
                            assert_eq!(m.len(), nodes.len());
                        }
                        cases += 1;
                        nonempty += usize::from(!want.is_empty());
                    }
                    Ok(())
                })
                .expect("read");
        }
    }
    assert!(
        cases >= 1_000 && nonempty > 300,
        "{cases} cases, {nonempty} non-empty"
    );
}

/// `limit` caps the matches at `limit`; with fewer than `limit` the result holds them all.
#[test]
fn pattern_limits_cut_the_matches() {
    let s = small_graph(3);
    s.tg.g
        .read(|r| {
            let pattern = Pattern::start(Some("P"), &[]).then(None, Direction::Out, None, &[]);
            let all = r.match_pattern(&pattern, None)?;
            assert!(all.len() > 3, "{all:?}");
            for limit in [0, 1, 2, all.len(), all.len() + 5] {
                let got = r.match_pattern(&pattern, Some(limit))?;
                assert!(
                    got.iter().all(|m| all.contains(m)),
                    "limit {limit}: {got:?}"
                );
                assert!(got.len() <= limit, "limit {limit}: {got:?}");
            }
            assert_eq!(r.match_pattern(&pattern, Some(all.len() + 5))?, all);
            Ok(())
        })
        .expect("read");
}

/// Matches are distinct node chains, so parallel edges give one match; a limit should still
/// return `limit` matches when there are that many. The duplicates (one per parallel edge)
/// are counted against the limit before they are removed, so fewer come back.
#[test]
fn pattern_limit_counts_distinct_matches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = Graph::open(dir.path(), Options::default().durability(Durability::None)).expect("open");
    g.write(|w| {
        let a = w.add_node("P", &Properties::new())?;
        let b = w.add_node("C", &Properties::new())?;
        let c = w.add_node("C", &Properties::new())?;
        w.add_edge(a, b, "X", &Properties::new())?;
        w.add_edge(a, b, "X", &Properties::new())?;
        w.add_edge(a, c, "X", &Properties::new())?;
        Ok(())
    })
    .expect("write");
    g.read(|r| {
        let pattern =
            Pattern::start(Some("P"), &[]).then(Some("X"), Direction::Out, Some("C"), &[]);
        assert_eq!(r.match_pattern(&pattern, None)?.len(), 2);
        let two = r.match_pattern(&pattern, Some(2))?;
        assert_eq!(two.len(), 2, "{two:?}");
        Ok(())
    })
    .expect("read");
}

/// Levels split across threads give exactly what one thread gives (the same nodes, depths
/// and paths: each node's parent is the smallest-id node that reaches it), under every
/// configuration, on a graph whose levels are large enough to be split.
#[test]
fn walks_split_across_threads_match_one_thread() {
    let (tg, mut rng) = power_law_graph(11, 6_000, 3);
    let split = hrafn_graph::PARALLEL_LEVEL_MIN_NODES;
    tg.g.read(|r| {
        let mut split_levels = 0;
        for c in configs() {
            let one = traversal(&c);
            for _ in 0..4 {
                let n = tg.ids.len();
                let (s, to) = (tg.ids[rng.gen_range(0..n)], tg.ids[rng.gen_range(0..n)]);
                let bfs = r.bfs(s, &one)?;
                let mut level_sizes = HashMap::new();
                for &(_, d) in &bfs {
                    *level_sizes.entry(d).or_insert(0usize) += 1;
                }
                // A level is split when the one before it (its frontier) is large.
                split_levels += level_sizes
                    .iter()
                    .filter(|&(&d, &n)| n >= split && level_sizes.contains_key(&(d + 1)))
                    .count();
                for threads in [2, 3] {
                    let many = traversal(&c).threads(threads);
                    let what = format!("{c:?} from {s} on {threads} threads");
                    assert_eq!(r.bfs(s, &many)?, bfs, "{what}: bfs");
                    assert_eq!(r.k_hop(s, 3, &many)?, r.k_hop(s, 3, &one)?, "{what}: k-hop");
                    assert_eq!(
                        r.shortest_path(s, to, &many)?,
                        r.shortest_path(s, to, &one)?,
                        "{what}: path to {to}"
                    );
                }
            }
        }
        assert!(split_levels > 50, "only {split_levels} levels were split");
        Ok(())
    })
    .expect("read");
}
