//! `hrafn-bench graph`: the graph store (`hrafn-graph`) on a power-law graph, beside two
//! plain layouts of the same out-adjacency: one Hrafn B+tree, and LMDB.
//!
//! # The graph
//!
//! A Chung–Lu style generator with a fixed seed: every node has an out-weight and an
//! in-weight following the same power law, `w(r) ∝ r^(-1/(γ-1))` for the node of rank `r`
//! (1-based), with degree exponent `γ` = [`EXPONENT`]; the ranks are given to the nodes by
//! two independent random permutations, so a node with many outgoing edges is not also the
//! one with many incoming edges, and node ids say nothing about degrees. Each edge draws
//! its source by out-weight and its destination by in-weight (inverse transform sampling
//! of the continuous power law, redrawn on a self-loop; parallel edges stay, as edges of
//! their own) and one of three types, 60 / 30 / 10 percent. Degrees then follow a power
//! law with that exponent, the expected largest about `edges / Σw` (tens of thousands at
//! the default size).
//!
//! # What is measured
//!
//! - Bulk load, durable (the stores' default options): nodes, then edges, in batches
//!   ([`NODE_BATCH`], [`EDGE_BATCH`]) from [`THREADS`] threads, each batch one transaction
//!   (the graph store and the B+tree through merged `submit` requests; LMDB, one write
//!   transaction per batch, which its writer lock serializes). The graph store writes each
//!   edge to its edge table and both adjacency trees; the baselines store the
//!   out-adjacency only, as keys `src u64 BE | type u8 | dst u64 BE | edge u64 BE` with
//!   empty values.
//! - Bulk load from CSV, after the three columns: the same graph written as the loader's
//!   files and loaded into an empty graph store by `Graph::load_csv` (durable, default
//!   options), which reads the edge rows in rounds and stores each round in an order that
//!   keeps its transactions local (see `hrafn_graph::load`). The target's rate is this
//!   one: edges over the time from the first edge row read to the last stored, parsing
//!   included.
//! - Queries on a warm cache (every node's out-adjacency read once first), each engine in
//!   one snapshot: 1-hop (the out-neighbours of a node, all types, as a list), 2-hop (the
//!   distinct nodes within 2 out-steps), BFS to depth 3 (level by level, each level in id
//!   order, as the store walks), and the fewest-edges path between random pairs (a
//!   breadth-first search from the first node until the level that reaches the second).
//!   The graph store answers through its own API (`neighbours`, `k_hop`, `bfs`,
//!   `shortest_path`); the baselines through the same algorithms written here on prefix
//!   scans. The answers are checked to agree across the three.
//!
//! # Larger than memory: `--memory-limit-mib N`
//!
//! After the table, BFS walks run again on the graph store with the graph read from disk:
//! to depth 3 from random starts, then over the whole graph. The variants: the store's
//! `bfs` (each level's frontier in id order, so the adjacency tree is read front to back)
//! with the kernel's read-ahead on (the default) and off (`Options::read_ahead(false)`),
//! the same split across threads (`Traversal::threads`), and a walk written here on
//! `for_each_neighbour` with each level in id order and in a random order (read-ahead off).
//! What "from disk" means depends on the machine:
//!
//! - Where this process may make a memory control group (cgroup v2 with the memory
//!   controller, or v1's memory hierarchy, as root in most containers), or else where
//!   `systemd-run --user --scope` works, the walks run in a child process (the hidden
//!   `graph-cold` subcommand) limited to N MiB. The kernel charges the page cache a
//!   process faults in to its control group, so at most about N MiB of the graph stays
//!   resident and the rest is read again as the walks go. The child drops the data file's
//!   cached pages before each variant, so that each starts cold and what the parent cached
//!   (charged to the parent's group) does not count. Under systemd the child reads its
//!   group's `memory.max` first: where the memory controller is not delegated to the
//!   user's manager, `MemoryMax` is accepted and does nothing, so the child says so and
//!   walks as below instead.
//! - Elsewhere there is no limit to enforce: instead, before each walk the environment is
//!   closed and the data file's cached pages dropped with
//!   `posix_fadvise(POSIX_FADV_DONTNEED)` (through `rustix`, no unsafe code), so every
//!   walk starts with none of the graph in memory. The kernel keeps pages a mapping still
//!   holds, hence the close: the engine maps its data file.
//!
//! Each variant reports its mean time per walk and the bytes read from the disk
//! (`read_bytes` of `/proc/self/io`, which counts read-ahead too).

use crate::engines::{self, Reader};
use anyhow::{Context, Result, anyhow, ensure};
use hrafn::{Environment, Options};
use hrafn_graph::{Direction, Graph, GraphRead, Properties, Traversal};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Seeds the generator; the query starts use seeds derived from it.
const SEED: u64 = 20_251_125;
/// The degree exponent γ of the generated graph.
const EXPONENT: f64 = 2.5;
/// The edge types and how many edges in ten have each.
const EDGE_TYPES: [&str; 3] = ["follows", "likes", "mentions"];
const TYPE_TENTHS: [u32; 3] = [6, 3, 1];
/// Every node's label.
const LABEL: &str = "user";
/// Load threads.
const THREADS: usize = 2;
/// Nodes per load transaction.
const NODE_BATCH: usize = 20_000;
/// Edges per load transaction.
const EDGE_BATCH: usize = 10_000;
/// Random start nodes of the 1-hop and 2-hop queries.
const HOP_STARTS: usize = 10_000;
/// Random starts of the BFS walks, and their depth.
const BFS_STARTS: usize = 100;
const BFS_DEPTH: u32 = 3;
/// Random (from, to) pairs of the shortest-path queries.
const PATH_PAIRS: usize = 100;
/// Walks of each variant in the larger-than-memory mode: to [`BFS_DEPTH`], and over the
/// whole graph.
const COLD_WALKS: usize = 20;
const COLD_WHOLE_WALKS: usize = 2;
/// The baseline tree's name in the Hrafn environment.
const ADJ_TREE: &str = "adj";
/// A baseline key: `src u64 BE | type u8 | dst u64 BE | edge u64 BE`.
const KEY_LEN: usize = 25;
/// Entries of LMDB's first scan of a node's adjacency (doubled while the node lasts).
const LMDB_FIRST_SCAN: usize = 16;

/// One generated edge: source and destination node numbers (0-based) and the type.
#[derive(Clone, Copy)]
struct GenEdge {
    src: u32,
    dst: u32,
    edge_type: u8,
}

/// The generator described in the module docs.
fn generate(nodes: usize, edges: usize) -> Vec<GenEdge> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut by_out_rank: Vec<u32> = (0..nodes as u32).collect();
    by_out_rank.shuffle(&mut rng);
    let mut by_in_rank: Vec<u32> = (0..nodes as u32).collect();
    by_in_rank.shuffle(&mut rng);
    // Density ∝ x^(-alpha) on [1, nodes + 1): x = (1 + u((n+1)^beta - 1))^(1/beta).
    let beta = 1.0 - 1.0 / (EXPONENT - 1.0);
    let span = ((nodes + 1) as f64).powf(beta) - 1.0;
    let rank = |rng: &mut StdRng| {
        let u: f64 = rng.gen_range(0.0..1.0);
        let x = (1.0 + u * span).powf(1.0 / beta);
        (x as usize).saturating_sub(1).min(nodes - 1)
    };
    let mut out = Vec::with_capacity(edges);
    while out.len() < edges {
        let src = by_out_rank[rank(&mut rng)];
        let dst = by_in_rank[rank(&mut rng)];
        if src == dst {
            continue;
        }
        let tenth = rng.gen_range(0..10);
        let edge_type = if tenth < TYPE_TENTHS[0] {
            0
        } else if tenth < TYPE_TENTHS[0] + TYPE_TENTHS[1] {
            1
        } else {
            2
        };
        out.push(GenEdge {
            src,
            dst,
            edge_type,
        });
    }
    out
}

/// "max M, mean A, p99 P" of a degree sequence.
fn degree_summary(mut degrees: Vec<u32>) -> String {
    degrees.sort_unstable();
    let n = degrees.len();
    let mean = degrees.iter().map(|&d| f64::from(d)).sum::<f64>() / n as f64;
    let pct = |p| crate::result::percentile_sorted(&degrees, p).unwrap_or(0);
    let zero = degrees.iter().take_while(|&&d| d == 0).count();
    format!(
        "max {}, mean {mean:.2}, p50 {}, p99 {}, {:.1}% of nodes with none",
        degrees[n - 1],
        pct(50.0),
        pct(99.0),
        zero as f64 * 100.0 / n as f64
    )
}

/// The baselines' key of one edge.
fn adjacency_key(e: &GenEdge, edge: u64) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    k[..8].copy_from_slice(&u64::from(e.src).to_be_bytes());
    k[8] = e.edge_type;
    k[9..17].copy_from_slice(&u64::from(e.dst).to_be_bytes());
    k[17..].copy_from_slice(&edge.to_be_bytes());
    k
}

/// The destination in a baseline key (whose length the caller checked).
fn key_destination(k: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&k[9..17]);
    u64::from_be_bytes(b)
}

/// Edge batch `b` (the last may be short).
fn batch(gen_edges: &[GenEdge], b: usize) -> &[GenEdge] {
    &gen_edges[b * EDGE_BATCH..((b + 1) * EDGE_BATCH).min(gen_edges.len())]
}

/// Runs `f(batch)` for batches `0..batches` on [`THREADS`] threads (thread `t` takes
/// batches `t`, `t + THREADS`, ... in turn); the results in batch order.
fn in_batches<T: Send>(batches: usize, f: &(dyn Fn(usize) -> Result<T> + Sync)) -> Result<Vec<T>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                scope.spawn(move || {
                    (t..batches)
                        .step_by(THREADS)
                        .map(|b| f(b).map(|v| (b, v)))
                        .collect::<Result<Vec<_>>>()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(batches);
        for h in handles {
            all.extend(h.join().map_err(|_| anyhow!("a load thread panicked"))??);
        }
        all.sort_by_key(|&(b, _)| b);
        Ok(all.into_iter().map(|(_, v)| v).collect())
    })
}

/// The queries, each engine's way. Nodes are the generator's numbers.
trait Queries {
    /// The out-neighbours of `node` (all types) as a list; returns how many.
    fn one_hop(&self, node: u64) -> Result<usize>;
    /// The distinct nodes within 2 out-steps of `node`, itself excluded.
    fn two_hop(&self, node: u64) -> Result<usize>;
    /// BFS to [`BFS_DEPTH`]; returns the nodes reached, the start excluded.
    fn bfs(&self, node: u64) -> Result<usize>;
    /// The edges on a fewest-edges path, if there is one.
    fn path(&self, from: u64, to: u64) -> Result<Option<usize>>;
}

/// The graph store, through its own API; `ids` maps the generator's numbers to its ids.
struct StoreQueries<'a> {
    g: &'a GraphRead<'a>,
    ids: &'a [u64],
}

impl Queries for StoreQueries<'_> {
    fn one_hop(&self, node: u64) -> Result<usize> {
        let id = self.ids[node as usize];
        Ok(self.g.neighbours(id, Direction::Out, None)?.len())
    }

    fn two_hop(&self, node: u64) -> Result<usize> {
        let id = self.ids[node as usize];
        Ok(self.g.k_hop(id, 2, &Traversal::default())?.len())
    }

    fn bfs(&self, node: u64) -> Result<usize> {
        let id = self.ids[node as usize];
        let t = Traversal::default()
            .direction(Direction::Out)
            .max_depth(BFS_DEPTH);
        Ok(self.g.bfs(id, &t)?.len() - 1)
    }

    fn path(&self, from: u64, to: u64) -> Result<Option<usize>> {
        let (from, to) = (self.ids[from as usize], self.ids[to as usize]);
        let path = self.g.shortest_path(from, to, &Traversal::default())?;
        Ok(path.map(|p| p.len() - 1))
    }
}

/// Appends the out-neighbours of a node to the vector.
type Adjacency<'a> = &'a dyn Fn(u64, &mut Vec<u64>) -> Result<()>;

/// A baseline: the algorithms on a plain adjacency lookup.
struct PlainQueries<'a> {
    adj: Adjacency<'a>,
}

impl Queries for PlainQueries<'_> {
    fn one_hop(&self, node: u64) -> Result<usize> {
        let mut out = Vec::new();
        (self.adj)(node, &mut out)?;
        Ok(out.len())
    }

    fn two_hop(&self, node: u64) -> Result<usize> {
        walk(self.adj, node, 2, None)
    }

    fn bfs(&self, node: u64) -> Result<usize> {
        walk(self.adj, node, BFS_DEPTH, None)
    }

    fn path(&self, from: u64, to: u64) -> Result<Option<usize>> {
        fewest_edges(self.adj, from, to)
    }
}

/// Breadth-first to `depth`, level by level, each level's frontier in id order (or
/// shuffled with `shuffle`); returns the nodes reached, the start excluded.
fn walk(
    adj: Adjacency<'_>,
    start: u64,
    depth: u32,
    mut shuffle: Option<&mut StdRng>,
) -> Result<usize> {
    let mut seen = HashSet::from([start]);
    let mut frontier = vec![start];
    let mut buf = Vec::new();
    for _ in 0..depth {
        if frontier.is_empty() {
            break;
        }
        match shuffle.as_deref_mut() {
            None => frontier.sort_unstable(),
            Some(rng) => frontier.shuffle(rng),
        }
        let mut next = Vec::new();
        for &id in &frontier {
            buf.clear();
            adj(id, &mut buf)?;
            next.extend(buf.iter().copied().filter(|&n| seen.insert(n)));
        }
        frontier = next;
    }
    Ok(seen.len() - 1)
}

/// The edges on a fewest-edges path from `from` to `to`, found as the store finds it:
/// breadth-first, whole levels in id order, until a level reaches `to`.
fn fewest_edges(adj: Adjacency<'_>, from: u64, to: u64) -> Result<Option<usize>> {
    let mut parent: HashMap<u64, u64> = HashMap::new();
    let mut seen = HashSet::from([from]);
    let mut frontier = vec![from];
    let mut buf = Vec::new();
    while !frontier.is_empty() && !seen.contains(&to) {
        frontier.sort_unstable();
        let mut next = Vec::new();
        for &id in &frontier {
            buf.clear();
            adj(id, &mut buf)?;
            for &n in &buf {
                if seen.insert(n) {
                    parent.insert(n, id);
                    next.push(n);
                }
            }
        }
        frontier = next;
    }
    if !seen.contains(&to) {
        return Ok(None);
    }
    let (mut at, mut edges) = (to, 0);
    while let Some(&p) = parent.get(&at) {
        at = p;
        edges += 1;
    }
    Ok(Some(edges))
}

/// The out-neighbours of `node` in LMDB, through the bench's engine interface: a scan of
/// [`LMDB_FIRST_SCAN`] entries from the node's prefix, continued (twice as long each time)
/// while every entry was the node's.
fn lmdb_neighbours(r: &dyn Reader, node: u64, out: &mut Vec<u64>) -> Result<()> {
    let prefix = node.to_be_bytes();
    let mut start = [0u8; KEY_LEN + 1];
    start[..8].copy_from_slice(&prefix);
    let mut start_len = 8;
    let mut limit = LMDB_FIRST_SCAN;
    loop {
        let mut last = [0u8; KEY_LEN];
        let mut mine = 0;
        r.scan(&start[..start_len], Some(limit), &mut |k, _| {
            if k.len() == KEY_LEN && k[..8] == prefix {
                out.push(key_destination(k));
                last.copy_from_slice(k);
                mine += 1;
            }
        })?;
        if mine < limit {
            return Ok(());
        }
        // The smallest key after the last one seen.
        start[..KEY_LEN].copy_from_slice(&last);
        start[KEY_LEN] = 0;
        start_len = KEY_LEN + 1;
        limit *= 2;
    }
}

/// The random starts, the same for every engine (generator numbers).
struct Workload {
    hops: Vec<u64>,
    bfs: Vec<u64>,
    pairs: Vec<(u64, u64)>,
}

impl Workload {
    fn new(nodes: usize) -> Workload {
        let mut rng = StdRng::seed_from_u64(SEED + 1);
        let n = nodes as u64;
        let hops = (0..HOP_STARTS).map(|_| rng.gen_range(0..n)).collect();
        let bfs = (0..BFS_STARTS).map(|_| rng.gen_range(0..n)).collect();
        let pairs = (0..PATH_PAIRS)
            .map(|_| {
                let from = rng.gen_range(0..n);
                let to = (from + rng.gen_range(1..n)) % n;
                (from, to)
            })
            .collect();
        Workload { hops, bfs, pairs }
    }
}

/// One engine's query times (sorted) and what the queries found.
struct Measured {
    one_hop: Vec<Duration>,
    two_hop: Vec<Duration>,
    bfs: Vec<Duration>,
    paths: Vec<Duration>,
    /// Neighbours listed, nodes within 2 steps, nodes reached by BFS, paths found, and
    /// edges on those paths: the same for every engine.
    found: [u64; 5],
}

fn timed<T>(times: &mut Vec<Duration>, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let v = f()?;
    times.push(t.elapsed());
    Ok(v)
}

/// Warms the cache (every node's out-adjacency read once, checked against the edge
/// count), then times the queries.
fn measure(q: &dyn Queries, w: &Workload, nodes: usize, edges: usize) -> Result<Measured> {
    let mut listed = 0;
    for n in 0..nodes as u64 {
        listed += q.one_hop(n)?;
    }
    ensure!(
        listed == edges,
        "{listed} adjacency entries for {edges} edges"
    );
    let mut m = Measured {
        one_hop: Vec::new(),
        two_hop: Vec::new(),
        bfs: Vec::new(),
        paths: Vec::new(),
        found: [0; 5],
    };
    for &s in &w.hops {
        m.found[0] += timed(&mut m.one_hop, || q.one_hop(s))? as u64;
    }
    for &s in &w.hops {
        m.found[1] += timed(&mut m.two_hop, || q.two_hop(s))? as u64;
    }
    for &s in &w.bfs {
        m.found[2] += timed(&mut m.bfs, || q.bfs(s))? as u64;
    }
    for &(from, to) in &w.pairs {
        if let Some(e) = timed(&mut m.paths, || q.path(from, to))? {
            m.found[3] += 1;
            m.found[4] += e as u64;
        }
    }
    for v in [&mut m.one_hop, &mut m.two_hop, &mut m.bfs, &mut m.paths] {
        v.sort();
    }
    Ok(m)
}

/// The `p`th percentile (0..=100) of `times` by the crate's nearest-rank method (the
/// lists here are never empty: their lengths are constants).
fn percentile(times: &[Duration], p: f64) -> Duration {
    crate::result::percentile_sorted(times, p).unwrap_or_default()
}

fn mean(times: &[Duration]) -> Duration {
    times.iter().sum::<Duration>() / times.len().max(1) as u32
}

/// One engine's results.
struct Column {
    load_s: f64,
    nodes_load_s: Option<f64>,
    /// `None` for LMDB, which syncs inside its commits: nothing is left to flush.
    flush_s: Option<f64>,
    disk_bytes: u64,
    m: Measured,
}

/// Loads the graph store and measures it; also returns its 1-hop p50 when each query
/// opens its own snapshot, and when nothing is collected.
/// The graph store's figures beyond the table's common rows.
struct StoreExtras {
    /// 1-hop p50 opening a snapshot per query.
    own_snapshot_p50: Duration,
    /// 1-hop p50 through `for_each_neighbour`, nothing collected.
    bare_p50: Duration,
    /// Mean shortest path with each level split across [`THREADS`] threads.
    paths_threaded_mean: Duration,
}

fn run_store(
    dir: &Path,
    nodes: usize,
    gen_edges: &[GenEdge],
    w: &Workload,
) -> Result<(Column, StoreExtras)> {
    let graph = Graph::open(dir, Options::default()).context("opening the graph")?;
    let t = Instant::now();
    let batches = in_batches(nodes.div_ceil(NODE_BATCH), &|b| {
        let count = NODE_BATCH.min(nodes - b * NODE_BATCH);
        Ok(graph.submit(move |g| {
            let props = Properties::new();
            (0..count)
                .map(|_| g.add_node(LABEL, &props))
                .collect::<hrafn_graph::Result<Vec<u64>>>()
        })?)
    })?;
    let nodes_load_s = t.elapsed().as_secs_f64();
    let ids: Vec<u64> = batches.into_iter().flatten().collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    ensure!(
        sorted.iter().zip(1..).all(|(&id, want)| id == want) && sorted.len() == nodes,
        "node ids are not 1..={nodes}"
    );
    let t = Instant::now();
    let ids_ref = &ids;
    in_batches(gen_edges.len().div_ceil(EDGE_BATCH), &|b| {
        let rows: Arc<Vec<(u64, u64, u8)>> = Arc::new(
            batch(gen_edges, b)
                .iter()
                .map(|e| {
                    (
                        ids_ref[e.src as usize],
                        ids_ref[e.dst as usize],
                        e.edge_type,
                    )
                })
                .collect(),
        );
        graph.submit(move |g| {
            let props = Properties::new();
            let edges: Vec<(u64, u64, &str, &Properties)> = rows
                .iter()
                .map(|&(src, dst, ty)| (src, dst, EDGE_TYPES[usize::from(ty)], &props))
                .collect();
            g.add_edges(&edges)?;
            Ok(())
        })?;
        Ok(())
    })?;
    let load_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    graph.environment().flush_and_sync()?;
    let flush_s = t.elapsed().as_secs_f64();

    let rtx = graph.environment().begin_read()?;
    let view = GraphRead::open_on(&rtx)?;
    ensure!(view.node_count() == nodes as u64 && view.edge_count() == gen_edges.len() as u64);
    let m = measure(
        &StoreQueries {
            g: &view,
            ids: &ids,
        },
        w,
        nodes,
        gen_edges.len(),
    )?;
    // 1-hop without collecting, and with a snapshot of its own per query.
    let mut bare = Vec::new();
    for &s in &w.hops {
        let mut n = 0u64;
        timed(&mut bare, || {
            Ok(
                view.for_each_neighbour(ids[s as usize], Direction::Out, None, &mut |_| {
                    n += 1;
                    Ok(())
                })?,
            )
        })?;
    }
    // Shortest paths again, each large level split across threads.
    let threaded = Traversal::default().threads(THREADS);
    let mut paths_threaded = Vec::new();
    let (mut joined, mut path_edges) = (0, 0);
    for &(from, to) in &w.pairs {
        let (from, to) = (ids[from as usize], ids[to as usize]);
        if let Some(p) = timed(&mut paths_threaded, || {
            Ok(view.shortest_path(from, to, &threaded)?)
        })? {
            joined += 1;
            path_edges += p.len() as u64 - 1;
        }
    }
    ensure!(
        [joined, path_edges] == [m.found[3], m.found[4]],
        "on {THREADS} threads: {joined} paths of {path_edges} edges, on one {:?}",
        &m.found[3..]
    );
    drop(view);
    drop(rtx);
    let mut own_snapshot = Vec::new();
    for &s in &w.hops {
        timed(&mut own_snapshot, || {
            Ok(graph.read(|g| g.neighbours(ids[s as usize], Direction::Out, None))?)
        })?;
    }
    bare.sort();
    own_snapshot.sort();
    drop(graph);
    let column = Column {
        load_s,
        nodes_load_s: Some(nodes_load_s),
        flush_s: Some(flush_s),
        disk_bytes: crate::sys::dir_bytes(dir)?,
        m,
    };
    let extras = StoreExtras {
        own_snapshot_p50: percentile(&own_snapshot, 50.0),
        bare_p50: percentile(&bare, 50.0),
        paths_threaded_mean: mean(&paths_threaded),
    };
    Ok((column, extras))
}

/// Loads the adjacency into one Hrafn B+tree and measures it.
fn run_btree(dir: &Path, nodes: usize, gen_edges: &[GenEdge], w: &Workload) -> Result<Column> {
    let env = Environment::open(dir, Options::default())?;
    let t = Instant::now();
    in_batches(gen_edges.len().div_ceil(EDGE_BATCH), &|b| {
        let keys: Arc<Vec<[u8; KEY_LEN]>> = Arc::new(
            batch(gen_edges, b)
                .iter()
                .enumerate()
                .map(|(i, e)| adjacency_key(e, (b * EDGE_BATCH + i) as u64))
                .collect(),
        );
        env.submit(move |wtx| {
            let mut tree = wtx.open_tree(ADJ_TREE)?;
            for k in keys.iter() {
                tree.insert(k, [])?;
            }
            Ok(())
        })?;
        Ok(())
    })?;
    let load_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    env.flush_and_sync()?;
    let flush_s = t.elapsed().as_secs_f64();
    let rtx = env.begin_read()?;
    let tree = rtx.open_tree(ADJ_TREE)?;
    let adj = |node: u64, out: &mut Vec<u64>| -> Result<()> {
        for item in tree.prefix(node.to_be_bytes())? {
            let (k, _) = item?;
            ensure!(k.len() == KEY_LEN, "a key of {} bytes", k.len());
            out.push(key_destination(k));
        }
        Ok(())
    };
    let m = measure(&PlainQueries { adj: &adj }, w, nodes, gen_edges.len())?;
    drop(rtx);
    drop(env);
    Ok(Column {
        load_s,
        nodes_load_s: None,
        flush_s: Some(flush_s),
        disk_bytes: crate::sys::dir_bytes(dir)?,
        m,
    })
}

/// Loads the adjacency into LMDB and measures it.
fn run_lmdb(dir: &Path, nodes: usize, gen_edges: &[GenEdge], w: &Workload) -> Result<Column> {
    let engine = engines::open("lmdb", dir, true)?;
    let t = Instant::now();
    in_batches(gen_edges.len().div_ceil(EDGE_BATCH), &|b| {
        let batch = batch(gen_edges, b);
        engine.write(&mut |wr| {
            for (i, e) in batch.iter().enumerate() {
                wr.put(&adjacency_key(e, (b * EDGE_BATCH + i) as u64), &[])?;
            }
            Ok(())
        })
    })?;
    let load_s = t.elapsed().as_secs_f64();
    let mut measured = None;
    engine.read(&mut |r| {
        let adj = |node: u64, out: &mut Vec<u64>| lmdb_neighbours(r, node, out);
        measured = Some(measure(
            &PlainQueries { adj: &adj },
            w,
            nodes,
            gen_edges.len(),
        )?);
        Ok(())
    })?;
    drop(engine);
    Ok(Column {
        load_s,
        nodes_load_s: None,
        flush_s: None,
        disk_bytes: crate::sys::dir_bytes(dir)?,
        m: measured.context("LMDB measured nothing")?,
    })
}

/// Node numbers are `u32` and a path query needs two nodes.
fn check_nodes(nodes: usize) -> Result<()> {
    ensure!(
        nodes >= 2 && nodes <= u32::MAX as usize,
        "--nodes must be 2 to 2^32 - 1"
    );
    Ok(())
}

/// What `graph` runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Only {
    /// The comparison, then the bulk load from CSV.
    All,
    /// The bulk load from CSV alone.
    CsvLoad,
}

/// Runs the comparison and prints the table, then the bulk load from CSV (its files
/// kept with `keep`); then, with `memory_limit_mib`, the larger-than-memory walks.
pub fn run(
    nodes: usize,
    edges: usize,
    memory_limit_mib: Option<u64>,
    only: Only,
    keep: bool,
    dir: &Path,
) -> Result<()> {
    check_nodes(nodes)?;
    // Without edges the B+tree baseline has no tree to read and no per-edge figure exists.
    ensure!(edges >= 1, "--edges must be at least 1");
    let started = Instant::now();
    let t = Instant::now();
    let gen_edges = generate(nodes, edges);
    println!(
        "graph: {nodes} nodes, {edges} edges of {} types ({}); Chung–Lu power law, exponent {EXPONENT}, seed {SEED}; generated in {:.1} s",
        EDGE_TYPES.len(),
        EDGE_TYPES
            .iter()
            .zip(TYPE_TENTHS)
            .map(|(t, n)| format!("{t} {}%", n * 10))
            .collect::<Vec<_>>()
            .join(", "),
        t.elapsed().as_secs_f64()
    );
    let (mut out_degree, mut in_degree) = (vec![0u32; nodes], vec![0u32; nodes]);
    for e in &gen_edges {
        out_degree[e.src as usize] += 1;
        in_degree[e.dst as usize] += 1;
    }
    println!("out-degree: {}", degree_summary(out_degree));
    println!("in-degree:  {}", degree_summary(in_degree));
    if only == Only::CsvLoad {
        let rate = report_csv_load(&dir.join("csv"), nodes, &gen_edges, keep)?;
        println!(
            "target: bulk load (from CSV) >= 1M edges/s: {}",
            verdict(rate)
        );
        println!("\ntotal wall time {:.1} s", started.elapsed().as_secs_f64());
        return Ok(());
    }
    let w = Workload::new(nodes);

    let (store, extras) = run_store(&dir.join("graph"), nodes, &gen_edges, &w)?;
    println!(
        "graph store loaded and measured ({:.1} s so far)",
        started.elapsed().as_secs_f64()
    );
    let btree = run_btree(&dir.join("btree"), nodes, &gen_edges, &w)?;
    println!(
        "B+tree adjacency loaded and measured ({:.1} s so far)",
        started.elapsed().as_secs_f64()
    );
    let lmdb = run_lmdb(&dir.join("lmdb"), nodes, &gen_edges, &w)?;
    println!(
        "LMDB loaded and measured ({:.1} s so far)",
        started.elapsed().as_secs_f64()
    );
    for (name, c) in [("B+tree adjacency", &btree), ("LMDB", &lmdb)] {
        ensure!(
            c.m.found == store.m.found,
            "{name} found {:?}, the graph store {:?}",
            c.m.found,
            store.m.found
        );
    }
    let cols = [&store, &btree, &lmdb];
    let us = |d: Duration| format!("{:.1} us", d.as_secs_f64() * 1e6);
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let row = |name: &str, cell: &dyn Fn(&Column) -> String| {
        println!(
            "{name:<28} {:>14} {:>18} {:>14}",
            cell(cols[0]),
            cell(cols[1]),
            cell(cols[2])
        );
    };
    println!();
    println!(
        "{:<28} {:>14} {:>18} {:>14}",
        "", "graph store", "B+tree adjacency", "LMDB"
    );
    let edges_per_s = |c: &Column| edges as f64 / c.load_s;
    row("load edges/s", &|c| format!("{:.0}", edges_per_s(c)));
    row("1-hop p50", &|c| us(percentile(&c.m.one_hop, 50.0)));
    row("1-hop p99", &|c| us(percentile(&c.m.one_hop, 99.0)));
    row("2-hop p50", &|c| us(percentile(&c.m.two_hop, 50.0)));
    row("BFS depth 3 mean", &|c| ms(mean(&c.m.bfs)));
    row("shortest path mean", &|c| ms(mean(&c.m.paths)));
    println!();
    row("  2-hop p99", &|c| us(percentile(&c.m.two_hop, 99.0)));
    row("  load nodes/s", &|c| {
        c.nodes_load_s
            .map_or("-".into(), |s| format!("{:.0}", nodes as f64 / s))
    });
    row("  flush and sync after load", &|c| seconds(c.flush_s));
    row("  disk bytes per edge", &|c| {
        format!("{:.1}", c.disk_bytes as f64 / edges as f64)
    });
    let found = store.m.found;
    println!(
        "found (the same in every column): {:.1} out-neighbours per 1-hop start, {:.1} distinct nodes within 2 steps, {:.1} nodes reached per BFS (start excluded), {} of {PATH_PAIRS} pairs joined by a path (mean {:.2} edges)",
        found[0] as f64 / w.hops.len() as f64,
        found[1] as f64 / w.hops.len() as f64,
        found[2] as f64 / w.bfs.len() as f64,
        found[3],
        found[4] as f64 / found[3].max(1) as f64
    );
    println!(
        "graph store 1-hop p50: {} without collecting (for_each_neighbour), {} opening a snapshot per query (Graph::read); shortest path mean {} with levels split across {THREADS} threads (Traversal::threads)",
        us(extras.bare_p50),
        us(extras.own_snapshot_p50),
        ms(extras.paths_threaded_mean)
    );
    println!(
        "notes: {THREADS} load threads, {EDGE_BATCH} edges per transaction, durable default options; the graph store writes an edge record and both adjacency directions, the baselines the out-adjacency only; LMDB is read through this bench's engine interface (scans of {LMDB_FIRST_SCAN} entries, continued while the node lasts)"
    );
    let rate = report_csv_load(&dir.join("csv"), nodes, &gen_edges, keep)?;
    let p50 = percentile(&store.m.one_hop, 50.0);
    println!(
        "targets: 1-hop p50 <= 5 us: {} ({}); bulk load (from CSV) >= 1M edges/s: {}",
        met(p50 <= Duration::from_micros(5)),
        us(p50),
        verdict(rate)
    );
    if let Some(limit) = memory_limit_mib {
        println!();
        larger_than_memory(&dir.join("graph"), nodes, limit)?;
    }
    println!("\ntotal wall time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

/// The bulk-load target's verdict on `rate` edges/s; a rate not measured is no verdict.
fn verdict(rate: Option<f64>) -> String {
    match rate {
        Some(rate) => format!("{} ({rate:.0} edges/s)", met(rate >= 1e6)),
        None => "not measured".to_string(),
    }
}

/// Seconds, or "-" for a figure not measured.
fn seconds(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{s:.2} s"))
}

/// Runs [`run_csv_load`] and prints its line; returns the edges' rate, if measured.
fn report_csv_load(
    dir: &Path,
    nodes: usize,
    gen_edges: &[GenEdge],
    keep: bool,
) -> Result<Option<f64>> {
    let csv = run_csv_load(dir, nodes, gen_edges, keep)?;
    let head = "bulk load from CSV (graph store, Graph::load_csv, durable, into an empty graph)";
    let files_mb = csv.file_bytes as f64 / 1e6;
    let (Some(nodes_s), Some(e)) = (csv.nodes_s, &csv.edges) else {
        println!(
            "{head}: not measured (the load never reported all {nodes} nodes stored, so its node and edge parts cannot be told apart); files {files_mb:.0} MB"
        );
        return Ok(None);
    };
    let rate = e.rate(gen_edges.len());
    println!(
        "{head}: {} edges/s ({:.1} s for the edge file, the first edges stored after {}; rows read and stored in rounds of {} in locality order, transactions of {}; {:.1} GB of pages changed and {:.1} GB journaled for the edges), {:.0} nodes/s; files {files_mb:.0} MB",
        rate.map_or("-".into(), |r| format!("{r:.0}")),
        e.edges_s,
        e.first_edges_s.map_or("-".into(), |s| format!("{s:.1} s")),
        hrafn_graph::load::ROUND_EDGES,
        hrafn_graph::load::EDGE_ROWS_PER_TXN,
        e.pages_bytes as f64 / 1e9,
        e.journal_bytes as f64 / 1e9,
        nodes as f64 / nodes_s,
    );
    Ok(rate)
}

/// What the CSV bulk load took.
struct CsvLoad {
    /// The node file; `None` (and no `edges` either) where the load never reported all
    /// nodes stored, the moment the two parts are told apart at.
    nodes_s: Option<f64>,
    edges: Option<EdgeFigures>,
    /// Both files' sizes.
    file_bytes: u64,
}

/// The edge file's part of a CSV load.
struct EdgeFigures {
    /// From the first edge row read to the last edge stored.
    edges_s: f64,
    /// From the first edge row read to the first edge transaction stored: the first
    /// round's reading, ordering and first transaction, while no edge is stored yet
    /// (`None` if no edge transaction was reported).
    first_edges_s: Option<f64>,
    /// Bytes of the pages the edge file's transactions changed (each page counted once
    /// per transaction), and the bytes of their journal records.
    pages_bytes: u64,
    journal_bytes: u64,
}

impl EdgeFigures {
    /// `edges` over the edge part's time; `None` with no edges or no time to divide by.
    fn rate(&self, edges: usize) -> Option<f64> {
        (edges > 0 && self.edges_s > 0.0).then(|| edges as f64 / self.edges_s)
    }
}

/// Splits a load from `started` to `end` at `nodes_done`, when all nodes were reported
/// stored (with the stats then; `after` are those at the end). Without that moment
/// neither part has a figure: taking the end for it made the edges' time 0 and their rate
/// infinite.
fn split_load(
    started: Instant,
    nodes_done: Option<(Instant, hrafn::Stats)>,
    first_edges: Option<Instant>,
    end: Instant,
    after: &hrafn::Stats,
) -> (Option<f64>, Option<EdgeFigures>) {
    let Some((done, before)) = nodes_done else {
        return (None, None);
    };
    let edges = EdgeFigures {
        edges_s: end.saturating_duration_since(done).as_secs_f64(),
        first_edges_s: first_edges.map(|t| t.saturating_duration_since(done).as_secs_f64()),
        pages_bytes: after.dirty_page_bytes - before.dirty_page_bytes,
        journal_bytes: after.journal_bytes_written - before.journal_bytes_written,
    };
    (
        Some(done.saturating_duration_since(started).as_secs_f64()),
        Some(edges),
    )
}

/// Writes the generated graph as the loader's two CSV files (`id,label` and
/// `src,dst,type`, nodes named by their generator numbers) and loads them into an empty
/// graph store with [`Graph::load_csv`]; removes the graph afterwards, and the files too
/// unless `keep_files`.
fn run_csv_load(
    dir: &Path,
    nodes: usize,
    gen_edges: &[GenEdge],
    keep_files: bool,
) -> Result<CsvLoad> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let (node_path, edge_path) = (dir.join("nodes.csv"), dir.join("edges.csv"));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&node_path)?);
    writeln!(out, "id,label")?;
    for n in 0..nodes {
        writeln!(out, "{n},{LABEL}")?;
    }
    out.flush()?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(&edge_path)?);
    writeln!(out, "src,dst,type")?;
    for e in gen_edges {
        writeln!(
            out,
            "{},{},{}",
            e.src,
            e.dst,
            EDGE_TYPES[usize::from(e.edge_type)]
        )?;
    }
    out.flush()?;
    drop(out);
    let file_bytes = std::fs::metadata(&node_path)?.len() + std::fs::metadata(&edge_path)?.len();
    let graph = Graph::open(dir.join("graph"), Options::default()).context("opening the graph")?;
    let open = |p: &Path| -> Result<std::io::BufReader<std::fs::File>> {
        Ok(std::io::BufReader::with_capacity(
            1 << 20,
            std::fs::File::open(p)?,
        ))
    };
    let started = Instant::now();
    let mut nodes_done: Option<(Instant, hrafn::Stats)> = None;
    let mut first_edges: Option<Instant> = None;
    let env = graph.environment();
    let report = graph.load_csv(open(&node_path)?, open(&edge_path)?, &mut |p| {
        if p.nodes == nodes as u64 && nodes_done.is_none() {
            nodes_done = Some((Instant::now(), env.stats()));
        }
        if p.edges > 0 && first_edges.is_none() {
            first_edges = Some(Instant::now());
        }
    })?;
    let end = Instant::now();
    let after = env.stats();
    ensure!(
        report.nodes == nodes as u64 && report.edges == gen_edges.len() as u64,
        "loaded {} nodes and {} edges",
        report.nodes,
        report.edges
    );
    let counts = graph.read(|g| Ok((g.node_count(), g.edge_count())))?;
    ensure!(
        counts == (nodes as u64, gen_edges.len() as u64),
        "counts {counts:?}"
    );
    drop(graph);
    std::fs::remove_dir_all(if keep_files {
        dir.join("graph")
    } else {
        dir.to_path_buf()
    })?;
    let (nodes_s, edges) = split_load(started, nodes_done, first_edges, end, &after);
    Ok(CsvLoad {
        nodes_s,
        edges,
        file_bytes,
    })
}

/// How the larger-than-memory walks keep the graph on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cold {
    /// The data file's cached pages are dropped before each walk.
    EachWalk,
    /// In a memory-limited group: the pages are dropped before each variant only.
    UnderLimit(u64),
}

/// Whether `systemd-run --user --scope` can start a process here.
fn systemd_scope_works() -> bool {
    std::process::Command::new("systemd-run")
        .args(["--user", "--scope", "--quiet", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn larger_than_memory(dir: &Path, nodes: usize, limit_mib: u64) -> Result<()> {
    let exe = std::env::current_exe().context("locating this binary")?;
    // Made here, removed (when dropped) after the child exits.
    let group = crate::sys::MemoryGroup::create(limit_mib << 20);
    let mut child = if let Some(group) = &group {
        let mut c = std::process::Command::new(&exe);
        c.arg("graph-cold").arg("--cgroup").arg(group.dir());
        c
    } else if systemd_scope_works() {
        let mut c = std::process::Command::new("systemd-run");
        c.args(["--user", "--scope", "--quiet", "-p"])
            .arg(format!("MemoryMax={limit_mib}M"))
            .arg("--")
            .arg(&exe)
            .arg("graph-cold");
        c
    } else {
        println!(
            "(no memory control group can be made here, so no limit of {limit_mib} MiB is enforced: the data file's pages are dropped from the page cache before each walk instead)"
        );
        return cold(dir, nodes, Cold::EachWalk);
    };
    let status = child
        .arg("--dir")
        .arg(dir)
        .args(["--nodes", &nodes.to_string()])
        .args(["--memory-limit-mib", &limit_mib.to_string()])
        .status()
        .context("starting the memory-limited walks")?;
    ensure!(
        status.success(),
        "the memory-limited walks failed: {status} (killed: the walks' own memory, about 100 bytes per node for a whole-graph walk, counts against the limit too)"
    );
    Ok(())
}

/// The `graph-cold` child: joins `group` (made by the parent, which set its limit) if
/// given, else (started by `systemd-run --scope`) checks that its own group is limited.
pub fn cold_child(dir: &Path, nodes: usize, limit_mib: u64, group: Option<&Path>) -> Result<()> {
    check_nodes(nodes)?;
    let how = match group {
        Some(group) => {
            crate::sys::MemoryGroup::join(group)?;
            Cold::UnderLimit(limit_mib)
        }
        None => {
            let max = crate::sys::own_memory_max();
            let how = cold_mode(limit_mib, max);
            if how == Cold::EachWalk {
                println!(
                    "WARNING: no memory limit of {limit_mib} MiB is in force: this process's control group has {} (where the memory controller is not delegated, systemd accepts MemoryMax and applies nothing); the data file's pages are dropped from the page cache before each walk instead",
                    max.map_or("no memory.max".into(), |b| format!("memory.max {b}"))
                );
            }
            how
        }
    };
    cold(dir, nodes, how)
}

/// Where systemd was asked for a limit: walk under it if this process's group has it
/// (`memory_max`), else with the pages dropped before each walk.
fn cold_mode(limit_mib: u64, memory_max: Option<u64>) -> Cold {
    if memory_max == Some(limit_mib << 20) {
        Cold::UnderLimit(limit_mib)
    } else {
        Cold::EachWalk
    }
}

/// Drops the data file's pages from the page cache (the environment must be closed: the
/// kernel keeps pages a mapping holds).
fn drop_page_cache(dir: &Path) -> Result<()> {
    let file = std::fs::File::open(dir.join(hrafn::DATA_FILE))?;
    file.sync_data()?;
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)?;
    Ok(())
}

/// Bytes this process has had read from storage (`/proc/self/io`).
fn read_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let line = io.lines().find(|l| l.starts_with("read_bytes:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// How a larger-than-memory walk visits a level.
#[derive(Clone, Copy)]
enum ColdWalk {
    /// The store's `bfs`, each level in id order, split across this many threads.
    Store(usize),
    /// [`walk`] on `for_each_neighbour`, each level in id order.
    IdOrder,
    /// [`walk`] on `for_each_neighbour`, each level shuffled.
    RandomOrder,
}

/// The larger-than-memory walks of the graph in `dir` (nodes `1..=nodes`), in the variants
/// of the module docs, to depth [`BFS_DEPTH`] and then over the whole graph; prints one
/// line per variant.
pub fn cold(dir: &Path, nodes: usize, how: Cold) -> Result<()> {
    // The starts are drawn from 1..=nodes.
    check_nodes(nodes)?;
    let mut rng = StdRng::seed_from_u64(SEED + 2);
    let starts: Vec<u64> = (0..COLD_WALKS)
        .map(|_| rng.gen_range(1..=nodes as u64))
        .collect();
    let how_text = match how {
        Cold::EachWalk => "page cache dropped before each walk".to_string(),
        Cold::UnderLimit(mib) => {
            format!("memory limited to {mib} MiB, page cache dropped before each variant")
        }
    };
    let threaded = format!("store bfs, levels on {THREADS} threads");
    // All but the first with the kernel's read-ahead off (`Options::read_ahead`).
    let variants = [
        ("store bfs, kernel read-ahead on", ColdWalk::Store(1), true),
        (
            "store bfs (frontier in id order)",
            ColdWalk::Store(1),
            false,
        ),
        (threaded.as_str(), ColdWalk::Store(THREADS), false),
        ("for_each_neighbour, id order", ColdWalk::IdOrder, false),
        (
            "for_each_neighbour, random order",
            ColdWalk::RandomOrder,
            false,
        ),
    ];
    println!(
        "larger than memory, graph store ({how_text}): BFS to depth {BFS_DEPTH} from {COLD_WALKS} random starts"
    );
    cold_walks(dir, how, &starts, Some(BFS_DEPTH), &variants)?;
    println!(
        "  then BFS over the whole graph (no depth limit) from {COLD_WHOLE_WALKS} random starts, read-ahead off"
    );
    cold_walks(dir, how, &starts[..COLD_WHOLE_WALKS], None, &variants[1..])
}

fn cold_walks(
    dir: &Path,
    how: Cold,
    starts: &[u64],
    depth: Option<u32>,
    variants: &[(&str, ColdWalk, bool)],
) -> Result<()> {
    let mut reached_first = None;
    for &(name, kind, read_ahead) in variants {
        let mut shuffle_rng = StdRng::seed_from_u64(SEED + 3);
        let options = Options::default().read_ahead(read_ahead);
        let mut graph = None;
        if let Cold::UnderLimit(_) = how {
            drop_page_cache(dir)?;
            graph = Some(Graph::open(dir, options.clone())?);
        }
        let (mut times, mut bytes, mut reached) = (Vec::new(), 0u64, 0u64);
        let mut bytes_known = true;
        for &s in starts {
            if let Cold::EachWalk = how {
                // Close first: the kernel keeps the pages a mapping holds.
                drop(graph.take());
                drop_page_cache(dir)?;
                graph = Some(Graph::open(dir, options.clone())?);
            }
            let g = graph.as_ref().context("the graph is open")?;
            let rtx = g.environment().begin_read()?;
            let view = GraphRead::open_on(&rtx)?;
            let adj = |id: u64, out: &mut Vec<u64>| -> Result<()> {
                Ok(view.for_each_neighbour(id, Direction::Out, None, &mut |n| {
                    out.push(n.node);
                    Ok(())
                })?)
            };
            let levels = depth.unwrap_or(u32::MAX);
            let before = read_bytes();
            let n = timed(&mut times, || match kind {
                ColdWalk::Store(threads) => {
                    let mut t = Traversal::default()
                        .direction(Direction::Out)
                        .threads(threads);
                    t.max_depth = depth;
                    Ok(view.bfs(s, &t)?.len() - 1)
                }
                ColdWalk::IdOrder => walk(&adj, s, levels, None),
                ColdWalk::RandomOrder => walk(&adj, s, levels, Some(&mut shuffle_rng)),
            })?;
            match (before, read_bytes()) {
                (Some(a), Some(b)) => bytes += b.saturating_sub(a),
                _ => bytes_known = false,
            }
            reached += n as u64;
        }
        drop(graph);
        let first = *reached_first.get_or_insert(reached);
        ensure!(
            reached == first,
            "{name} reached {reached} nodes, not {first}"
        );
        let walks = starts.len() as f64;
        println!(
            "  {name:<34} mean {:>9.2} ms per walk, {} read from disk per walk, {:.0} nodes reached per walk",
            mean(&times).as_secs_f64() * 1e3,
            if bytes_known {
                format!("{:.2} MiB", bytes as f64 / walks / (1u64 << 20) as f64)
            } else {
                "(unknown)".to_string()
            },
            reached as f64 / walks
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_is_seeded_and_skewed() {
        let (nodes, edges) = (1_000, 10_000);
        let a = generate(nodes, edges);
        let b = generate(nodes, edges);
        assert_eq!(a.len(), edges);
        assert!(
            a.iter()
                .zip(&b)
                .all(|(x, y)| { (x.src, x.dst, x.edge_type) == (y.src, y.dst, y.edge_type) })
        );
        assert!(a.iter().all(|e| e.src != e.dst && (e.src as usize) < nodes));
        assert!(
            a.iter()
                .all(|e| (e.dst as usize) < nodes && e.edge_type < 3)
        );
        let mut out_degree = vec![0u32; nodes];
        for e in &a {
            out_degree[e.src as usize] += 1;
        }
        // Mean 10; the heaviest node expects about 370 (edges / Σw).
        let max = out_degree.iter().copied().max().unwrap_or(0);
        assert!(max > 150, "max out-degree {max}");
        let summary = degree_summary(out_degree);
        assert!(summary.contains("mean 10.00"), "{summary}");
    }

    #[test]
    fn lmdb_scans_continue_past_the_first_chunk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = engines::open("lmdb", dir.path(), false).expect("open");
        // Node 5 has 40 out-edges (more than two first scans), nodes 4 and 6 one each.
        let mut edges = vec![(4, 1), (6, 2)];
        edges.extend((0..40).map(|i| (5, 100 + i)));
        engine
            .write(&mut |w| {
                for (i, &(src, dst)) in edges.iter().enumerate() {
                    let e = GenEdge {
                        src,
                        dst,
                        edge_type: (i % 3) as u8,
                    };
                    w.put(&adjacency_key(&e, i as u64), &[])?;
                }
                Ok(())
            })
            .expect("write");
        engine
            .read(&mut |r| {
                let mut out = Vec::new();
                lmdb_neighbours(r, 5, &mut out)?;
                out.sort_unstable();
                assert_eq!(out, (100..140).collect::<Vec<u64>>());
                for (node, want) in [(4, vec![1]), (6, vec![2]), (7, vec![])] {
                    out.clear();
                    lmdb_neighbours(r, node, &mut out)?;
                    assert_eq!(out, want, "node {node}");
                }
                Ok(())
            })
            .expect("read");
    }

    #[test]
    fn engines_agree_and_cold_walks_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        // `run` checks that the three engines found the same.
        run(500, 5_000, None, Only::All, false, dir.path()).expect("run");
        let graph = dir.path().join("graph");
        cold(&graph, 500, Cold::EachWalk).expect("cold, each walk");
        cold(&graph, 500, Cold::UnderLimit(64)).expect("cold, under a limit");
        assert!(!dir.path().join("csv").exists(), "the CSV load cleans up");
    }

    /// Nearest rank, as the rest of the crate: p50 of 1..=10 is 5 (rounding the index
    /// gave 6).
    #[test]
    fn percentiles_are_nearest_rank() {
        let ms: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        assert_eq!(percentile(&ms, 50.0), Duration::from_millis(5));
        assert_eq!(percentile(&ms, 99.0), Duration::from_millis(10));
        let degrees = degree_summary((1..=10).collect());
        assert!(degrees.contains("p50 5, p99 10"), "{degrees}");
    }

    /// LMDB syncs inside its commits: its flush cell is "-", not a measured 0.00 s.
    #[test]
    fn lmdb_has_no_flush_figure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (nodes, edges) = (100, 500);
        let column = run_lmdb(
            dir.path(),
            nodes,
            &generate(nodes, edges),
            &Workload::new(nodes),
        )
        .expect("lmdb");
        assert_eq!(column.flush_s, None);
        assert_eq!(seconds(column.flush_s), "-");
        assert_eq!(seconds(Some(1.234)), "1.23 s");
    }

    /// Without the moment all nodes were stored, the edge rate is not measured (it was
    /// taken as the end: an edge time of 0, an infinite rate and "met").
    #[test]
    fn a_load_without_its_split_has_no_rate() {
        let t = Instant::now();
        let s = |secs| t + Duration::from_secs(secs);
        let stats = hrafn::Stats::default();
        let (nodes_s, edges) = split_load(t, None, Some(s(1)), s(2), &stats);
        assert!(nodes_s.is_none() && edges.is_none());
        assert_eq!(verdict(edges.and_then(|e| e.rate(1_000))), "not measured");
        let (nodes_s, edges) = split_load(t, Some((s(1), stats.clone())), None, s(3), &stats);
        let edges = edges.expect("split");
        assert_eq!(
            (nodes_s, edges.edges_s, edges.first_edges_s),
            (Some(1.0), 2.0, None)
        );
        assert_eq!(edges.rate(4_000_000), Some(2e6));
        assert_eq!(verdict(edges.rate(4_000_000)), "met (2000000 edges/s)");
        // No edges, or no time: no rate either.
        assert_eq!(edges.rate(0), None);
        let (_, edges) = split_load(t, Some((s(1), stats.clone())), None, s(1), &stats);
        assert_eq!(edges.expect("split").rate(10), None);
    }

    /// `graph-cold --nodes 0` panicked drawing its starts; `graph --edges 0` failed deep
    /// in the B+tree baseline.
    #[test]
    fn too_few_nodes_or_edges_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        for nodes in [0, 1] {
            let err = cold(dir.path(), nodes, Cold::EachWalk).expect_err("refused");
            assert!(err.to_string().contains("--nodes"), "{err}");
        }
        let err = run(10, 0, None, Only::All, false, dir.path()).expect_err("refused");
        assert!(err.to_string().contains("--edges"), "{err}");
    }

    /// `MemoryMax` without the memory controller is accepted and does nothing: only the
    /// limit asked for, in the child's own group, counts as limited.
    #[test]
    fn an_unenforced_limit_drops_the_cache_each_walk() {
        assert_eq!(cold_mode(64, Some(64 << 20)), Cold::UnderLimit(64));
        assert_eq!(cold_mode(64, None), Cold::EachWalk);
        assert_eq!(cold_mode(64, Some(128 << 20)), Cold::EachWalk);
    }

    /// `--csv-only` runs the load alone; with `--keep` its files stay, its graph does not.
    #[test]
    fn csv_only_keeps_its_files_when_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        run(500, 5_000, None, Only::CsvLoad, true, dir.path()).expect("run");
        assert!(!dir.path().join("graph").exists(), "no comparison ran");
        let csv = dir.path().join("csv");
        let edges = std::fs::read_to_string(csv.join("edges.csv")).expect("edges kept");
        assert_eq!(edges.lines().count(), 5_001, "a header and every edge");
        assert!(csv.join("nodes.csv").exists());
        assert!(!csv.join("graph").exists(), "the loaded graph is removed");
    }
}
