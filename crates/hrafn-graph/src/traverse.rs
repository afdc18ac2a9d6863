//! Traversals on one snapshot: breadth- and depth-first walks with filters and depth
//! limits, k-hop neighbourhoods, and shortest paths (unweighted and weighted).
//!
//! Breadth-first walks go level by level, and each level's frontier is visited in the
//! order of its nodes' ids: adjacency is keyed by node id, so the walk reads the adjacency
//! trees front to back, in page order, instead of jumping (the posts' "locality"
//! ordering; it pays when the graph is larger than memory). With [`Traversal::threads`], a
//! large level is cut into contiguous id ranges, one per thread, all reading the same
//! snapshot (the posts' "parallel locality"): each thread still reads its part of the
//! adjacency front to back.

use crate::error::{Error, Result};
use crate::graph::{Direction, GraphRead, Neighbour, Node};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The smallest breadth-first level [`Traversal::threads`] splits: below it, starting
/// threads costs more than they save.
pub const PARALLEL_LEVEL_MIN_NODES: usize = 512;

/// The most threads a level is split across, whatever [`Traversal::threads`] asks: a
/// thread per node of a large level exhausts the process's threads or memory, and the
/// process aborts.
pub const LEVEL_THREADS_MAX: usize = 64;

/// How a traversal walks: which way, along which edge types, how deep, through which nodes.
pub struct Traversal<'f> {
    /// Which way edges are followed.
    pub direction: Direction,
    /// Edge types followed (all when empty).
    pub edge_types: Vec<String>,
    /// Deepest level visited (the start is level 0); unbounded when `None`.
    pub max_depth: Option<u32>,
    /// Nodes the walk may enter (the start is always visited).
    pub node_filter: Option<&'f (dyn Fn(&Node) -> bool + Sync)>,
    /// Edges the walk may follow.
    pub edge_filter: Option<&'f (dyn Fn(&Neighbour) -> bool + Sync)>,
    /// Threads a breadth-first level is split across (1: the calling thread only; at most
    /// [`LEVEL_THREADS_MAX`]).
    pub threads: usize,
}

impl Default for Traversal<'_> {
    fn default() -> Self {
        Traversal {
            direction: Direction::Out,
            edge_types: Vec::new(),
            max_depth: None,
            node_filter: None,
            edge_filter: None,
            threads: 1,
        }
    }
}

impl<'f> Traversal<'f> {
    /// Follows edges `direction`.
    pub fn direction(mut self, direction: Direction) -> Self {
        self.direction = direction;
        self
    }

    /// Follows only edges of these types.
    pub fn edge_types(mut self, types: &[&str]) -> Self {
        self.edge_types = types.iter().map(|t| t.to_string()).collect();
        self
    }

    /// Stops at this depth.
    pub fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = Some(depth);
        self
    }

    /// Enters only nodes `f` accepts.
    pub fn node_filter(mut self, f: &'f (dyn Fn(&Node) -> bool + Sync)) -> Self {
        self.node_filter = Some(f);
        self
    }

    /// Follows only edges `f` accepts.
    pub fn edge_filter(mut self, f: &'f (dyn Fn(&Neighbour) -> bool + Sync)) -> Self {
        self.edge_filter = Some(f);
        self
    }

    /// Splits each breadth-first level of at least [`PARALLEL_LEVEL_MIN_NODES`] nodes
    /// across `threads` threads, at most [`LEVEL_THREADS_MAX`] (breadth-first walks, k-hop
    /// neighbourhoods and unweighted shortest paths; results are the same as with one).
    /// Depth-first and weighted walks stay on one thread.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }
}

impl GraphRead<'_> {
    /// The steps a traversal may take from `id`, as (neighbour, edge). A `Neighbour` is
    /// built only for an edge filter to judge.
    fn steps(&self, id: u64, t: &Traversal<'_>) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let mut take = |node: u64, edge: u64, edge_type: &str| {
            let passes = t.edge_filter.is_none_or(|f| {
                f(&Neighbour {
                    node,
                    edge,
                    edge_type: edge_type.to_string(),
                })
            });
            if passes {
                out.push((node, edge));
            }
            Ok(())
        };
        if t.edge_types.is_empty() {
            self.visit_adjacency(id, t.direction, None, &mut take)?;
        } else {
            for ty in &t.edge_types {
                self.visit_adjacency(id, t.direction, Some(ty), &mut take)?;
            }
        }
        Ok(out)
    }

    /// Fails with [`Error::NoSuchNode`] unless node `id` exists.
    fn require(&self, id: u64) -> Result<()> {
        match self.node_location(id)? {
            Some(_) => Ok(()),
            None => Err(Error::NoSuchNode(id)),
        }
    }

    fn admits(&self, id: u64, t: &Traversal<'_>) -> Result<bool> {
        match t.node_filter {
            None => Ok(true),
            Some(f) => Ok(self.node(id)?.is_some_and(|n| f(&n))),
        }
    }

    /// Walks breadth-first from `start`, level by level, each level's frontier in id order
    /// (adjacency is keyed by node id, so a level reads it front to back), calling
    /// `reached(depth, via, node)` once per newly reached node, `via` the smallest-id node
    /// of the previous level with an edge to it; stops early when it returns true.
    fn levels(
        &self,
        start: u64,
        t: &Traversal<'_>,
        reached: &mut dyn FnMut(u32, u64, u64) -> bool,
    ) -> Result<()> {
        let mut seen = HashSet::from_iter([start]);
        let mut frontier = vec![start];
        let mut depth = 0;
        while !frontier.is_empty() && t.max_depth.is_none_or(|m| depth < m) {
            depth += 1;
            frontier.sort_unstable();
            let mut next = Vec::new();
            if t.threads > 1 && frontier.len() >= PARALLEL_LEVEL_MIN_NODES {
                // Parts gather candidates while `seen` is only read, then they are taken
                // in part order: what one thread would have taken, in the same order.
                let part = frontier.len().div_ceil(t.threads.min(LEVEL_THREADS_MAX));
                let shared = &seen;
                let parts = std::thread::scope(|scope| {
                    // A thread the system refuses is an error, not a panic; the scope
                    // joins those already started.
                    let handles = frontier
                        .chunks(part)
                        .map(|ids| {
                            std::thread::Builder::new()
                                .spawn_scoped(scope, move || self.candidates(ids, shared, t))
                        })
                        .collect::<std::io::Result<Vec<_>>>()?;
                    handles
                        .into_iter()
                        // A panic in a part is a bug: pass it on, as one thread would.
                        .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                        .collect::<Result<Vec<_>>>()
                })?;
                for (via, id) in parts.into_iter().flatten() {
                    if seen.insert(id) {
                        if reached(depth, via, id) {
                            return Ok(());
                        }
                        next.push(id);
                    }
                }
            } else {
                for id in frontier {
                    for (node, _) in self.steps(id, t)? {
                        if !seen.contains(&node) && self.admits(node, t)? {
                            seen.insert(node);
                            if reached(depth, id, node) {
                                return Ok(());
                            }
                            next.push(node);
                        }
                    }
                }
            }
            frontier = next;
        }
        Ok(())
    }

    /// The steps out of `ids` (sorted) to nodes not in `seen` that the traversal admits,
    /// as (from, to), each node once, from the first of `ids` with an edge to it.
    fn candidates(
        &self,
        ids: &[u64],
        seen: &HashSet<u64>,
        t: &Traversal<'_>,
    ) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let mut listed = HashSet::default();
        for &id in ids {
            for (node, _) in self.steps(id, t)? {
                if !seen.contains(&node) && listed.insert(node) && self.admits(node, t)? {
                    out.push((id, node));
                }
            }
        }
        Ok(out)
    }

    /// Breadth-first from `start`: each reached node with its depth, level by level (each
    /// level in id order). A node is reached once, at its smallest depth.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn bfs(&self, start: u64, t: &Traversal<'_>) -> Result<Vec<(u64, u32)>> {
        self.require(start)?;
        let mut out = vec![(start, 0)];
        self.levels(start, t, &mut |depth, _, id| {
            out.push((id, depth));
            false
        })?;
        // Each level in id order.
        out.sort_by_key(|&(id, depth)| (depth, id));
        Ok(out)
    }

    /// Depth-first from `start`, neighbours in the order [`GraphRead::for_each_neighbour`]
    /// gives (for [`Direction::Both`] the outgoing ones, then the incoming ones), type by
    /// type in the order the traversal's `edge_types` lists them when it lists any: each
    /// reached node with its depth in the walk, in visiting order. Each node is
    /// visited once, where the walk first reaches it, so with a depth limit a node first
    /// reached at the limit along a long branch is not expanded again from a shorter one:
    /// the walk may miss nodes within that distance of the start. For every node within a
    /// distance, use [`GraphRead::bfs`] or [`GraphRead::k_hop`].
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn dfs(&self, start: u64, t: &Traversal<'_>) -> Result<Vec<(u64, u32)>> {
        self.require(start)?;
        let mut seen = HashSet::default();
        let mut out = Vec::new();
        let mut stack = vec![(start, 0u32)];
        while let Some((id, depth)) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            out.push((id, depth));
            if t.max_depth.is_some_and(|m| depth >= m) {
                continue;
            }
            let steps = self.steps(id, t)?;
            for (node, _) in steps.into_iter().rev() {
                if !seen.contains(&node) && self.admits(node, t)? {
                    stack.push((node, depth + 1));
                }
            }
        }
        Ok(out)
    }

    /// The nodes within `k` steps of `start` (itself excluded), ascending.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn k_hop(&self, start: u64, k: u32, t: &Traversal<'_>) -> Result<Vec<u64>> {
        let limited = Traversal {
            direction: t.direction,
            edge_types: t.edge_types.clone(),
            max_depth: Some(t.max_depth.map_or(k, |m| m.min(k))),
            node_filter: t.node_filter,
            edge_filter: t.edge_filter,
            threads: t.threads,
        };
        let mut ids: Vec<u64> = self
            .bfs(start, &limited)?
            .into_iter()
            .filter(|&(id, d)| d > 0 && id != start)
            .map(|(id, _)| id)
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// A path with the fewest edges from `from` to `to` (both ends included), if any.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn shortest_path(&self, from: u64, to: u64, t: &Traversal<'_>) -> Result<Option<Vec<u64>>> {
        self.require(from)?;
        self.require(to)?;
        if from == to {
            return Ok(Some(vec![from]));
        }
        let mut parent: HashMap<u64, u64> = HashMap::default();
        self.levels(from, t, &mut |_, via, id| {
            parent.insert(id, via);
            id == to
        })?;
        if !parent.contains_key(&to) {
            return Ok(None);
        }
        let mut path = vec![to];
        while let Some(&p) = parent.get(path.last().unwrap_or(&from)) {
            path.push(p);
        }
        path.reverse();
        Ok(Some(path))
    }

    /// A lightest path from `from` to `to` and its weight, the weight of an edge being its
    /// numeric property `weight_property` ([`Value::Int`] or [`Value::Float`]). An edge
    /// without the property, or with one of another type (text, bytes, a boolean, null),
    /// weighs 1; a negative weight and NaN weigh 0; an infinite weight is kept (a path
    /// through it weighs infinity, and is still a path). Dijkstra's algorithm; with a
    /// depth limit, over (node, hops) states, so the path is the lightest among those
    /// within the limit. A limit of at least the number of nodes less one limits nothing
    /// (some lightest path repeats no node), and is run as no limit.
    ///
    /// [`Value::Int`]: crate::Value::Int
    /// [`Value::Float`]: crate::Value::Float
    ///
    /// # Errors
    /// Engine and corruption errors; [`Error::Corrupt`] for an adjacency entry whose edge
    /// has no record.
    pub fn shortest_path_weighted(
        &self,
        from: u64,
        to: u64,
        weight_property: &str,
        t: &Traversal<'_>,
    ) -> Result<Option<(Vec<u64>, f64)>> {
        #[derive(PartialEq)]
        struct Entry(f64, u64, u32);
        impl Eq for Entry {}
        impl PartialOrd for Entry {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for Entry {
            fn cmp(&self, other: &Self) -> Ordering {
                // Smallest distance first, then fewest hops: with a depth limit a state
                // reached around a zero-weight cycle ties with the one without it, and
                // must not come first (its path repeats a node). Then by id, for a
                // deterministic result.
                other
                    .0
                    .total_cmp(&self.0)
                    .then_with(|| other.2.cmp(&self.2))
                    .then_with(|| other.1.cmp(&self.1))
            }
        }
        self.require(from)?;
        self.require(to)?;
        // With a depth limit the state is (node, hops so far), so a lighter path with too
        // many hops does not hide a heavier one within the limit; without one, hops are
        // not tracked (always 0). Weights are not negative, so some lightest path repeats
        // no node and has fewer hops than there are nodes: a limit that large limits
        // nothing, and its states (a node per hop count) would cost up to nodes squared.
        let max_depth = t
            .max_depth
            .filter(|&m| u64::from(m) < self.node_count().saturating_sub(1));
        let limited = max_depth.is_some();
        let mut dist: HashMap<(u64, u32), f64> = HashMap::from_iter([((from, 0), 0.0)]);
        let mut parent: HashMap<(u64, u32), (u64, u32)> = HashMap::default();
        // Per node, the fewest hops among its states taken off the heap. States come off
        // lightest first, so a state with at least that many hops is no lighter and no
        // shorter than one already taken: nothing reached from it is new. Without this, a
        // zero-weight cycle would yield a state per hop up to the depth limit.
        let mut settled_hops: HashMap<u64, u32> = HashMap::default();
        let dominated = |settled: &HashMap<u64, u32>, node: u64, hops: u32| {
            settled.get(&node).is_some_and(|&fewest| fewest <= hops)
        };
        let mut heap = BinaryHeap::from([Entry(0.0, from, 0)]);
        while let Some(Entry(d, id, hops)) = heap.pop() {
            if dominated(&settled_hops, id, hops) {
                continue;
            }
            settled_hops.insert(id, hops);
            if id == to {
                let mut path = vec![to];
                let mut at = (id, hops);
                while let Some(&p) = parent.get(&at) {
                    path.push(p.0);
                    at = p;
                }
                path.reverse();
                return Ok(Some((path, d)));
            }
            if max_depth.is_some_and(|m| hops >= m) {
                continue;
            }
            let next_hops = if limited { hops + 1 } else { 0 };
            for (node, edge) in self.steps(id, t)? {
                if dominated(&settled_hops, node, next_hops) || !self.admits(node, t)? {
                    continue;
                }
                // An entry without its record is damage, not an edge of weight 1.
                let record = self.edge(edge)?.ok_or_else(|| {
                    Error::Corrupt(format!(
                        "node {id}: the adjacency names edge {edge}, which has no record"
                    ))
                })?;
                // NaN.max(0.0) is 0: NaN weighs 0, as documented above.
                let w = record
                    .properties
                    .get(weight_property)
                    .and_then(|v| v.as_f64())
                    .unwrap_or(1.0)
                    .max(0.0);
                let nd = d + w;
                let state = (node, next_hops);
                if dist.get(&state).is_none_or(|&old| nd < old) {
                    dist.insert(state, nd);
                    parent.insert(state, (id, hops));
                    heap.push(Entry(nd, node, next_hops));
                }
            }
        }
        Ok(None)
    }
}
