//! The integrity check: adjacency agrees with edge records, no edge dangles.

use crate::error::Result;
use crate::graph::{
    Graph, GraphRead, META_INDEX_PREFIX, META_NEXT_EDGE, META_NEXT_NODE, Node, adjacency_key,
    adjacency_value, counter, node_from, prop_key_prefix, split_adjacency_value, text_field,
    u64_field,
};
use hrafn::MultiTree;
use std::collections::BTreeSet;

/// An adjacency entry: (node, edge type, other node, edge).
type Entry = (u64, String, u64, u64);

/// What [`Graph::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphCheckReport {
    /// Nodes checked.
    pub nodes: u64,
    /// Edges checked.
    pub edges: u64,
    /// Every disagreement, in words; empty when the graph is sound.
    pub problems: Vec<String>,
}

impl GraphCheckReport {
    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Graph {
    /// [`check`] on the latest snapshot.
    ///
    /// # Errors
    /// As [`check`].
    pub fn check(&self) -> Result<GraphCheckReport> {
        check(&self.environment().begin_read()?)
    }
}

/// Checks the engine's pages (as [`hrafn::ReadTxn::check`]), then that every edge
/// joins two existing nodes and appears exactly once in `g.out` (under its source) and
/// in `g.in` (under its destination), and that adjacency holds nothing else; that stable
/// ids translate to the records that carry them; that each property index holds exactly
/// the entries its label's nodes give. Works on any snapshot, read-only
/// environments included.
///
/// Memory grows with the number of nodes and edges by one id each, not by their
/// entries: each record's index and adjacency entries are looked up as it is read, and
/// the trees are only counted, then walked again to name their extra entries when the
/// counts disagree.
///
/// # Errors
/// Engine errors reading the trees (a damaged page is a reported problem instead).
pub fn check(rtx: &hrafn::ReadTxn<'_>) -> Result<GraphCheckReport> {
    let mut r = GraphCheckReport::default();
    if let Err(e) = rtx.check() {
        r.problems.push(format!("engine check: {e}"));
        return Ok(r);
    }
    let view = GraphRead::open_on(rtx)?;
    // The indexed (label, property) pairs come first, so that each node's index entries
    // are looked up as the node is read; their problems are listed after the nodes'.
    let mut indexed = Vec::new();
    let mut index_problems = Vec::new();
    for item in view.meta.prefix(META_INDEX_PREFIX)? {
        let (k, _) = item?;
        let pair = std::str::from_utf8(&k[META_INDEX_PREFIX.len()..])
            .ok()
            .and_then(|p| p.split_once('\0'))
            .map(|(l, p)| (l.to_string(), p.to_string()));
        match pair {
            Some(pair) => indexed.push(pair),
            None => index_problems.push("a property index with an unreadable name".into()),
        }
    }
    let mut nodes = BTreeSet::new();
    let mut repeated_nodes = BTreeSet::new();
    // The index entries the nodes give: how many are there, and which are missing.
    let mut index_found = 0u64;
    let mut index_missing = BTreeSet::new();
    for item in view.nodes.scan()? {
        let (record, rec) = item?;
        // A record that does not decode is a problem to list, not the end of the check.
        let id = match u64_field(rec.field(0)) {
            Ok(id) => id,
            Err(e) => {
                r.problems.push(format!("node record {record}: {e}"));
                continue;
            }
        };
        // The node exists once its id reads, whatever else is damaged: its edges do not
        // dangle, and the counter must stand above it.
        match node_from(id, &rec) {
            Ok(node) => {
                for key in index_keys(&node, &indexed) {
                    if view.props.get(&key)?.is_some() {
                        index_found += 1;
                    } else {
                        index_missing.insert(key);
                    }
                }
            }
            Err(e) => r.problems.push(format!("node {id} (record {record}): {e}")),
        }
        if view.node_location(id)? != Some(record) {
            r.problems.push(format!(
                "node {id}: its id does not translate to record {record}"
            ));
        }
        if !nodes.insert(id) {
            r.problems
                .push(format!("node id {id} carried by two records"));
            repeated_nodes.insert(id);
        }
    }
    r.nodes = nodes.len() as u64;
    r.problems.append(&mut index_problems);
    // Property indexes: exactly one entry per indexed (label, property) a node has.
    let mut index_entries = 0u64;
    for item in view.props.iter()? {
        item?;
        index_entries += 1;
    }
    if !repeated_nodes.is_empty() {
        // Records of one id give the same entries: those were counted once per record.
        index_found =
            index_found.saturating_sub(repeated_index_entries(&view, &indexed, &repeated_nodes)?);
    }
    let index_extra = index_entries.saturating_sub(index_found);
    if !index_missing.is_empty() || index_extra > 0 {
        r.problems.push(format!(
            "property indexes: {} entries missing, {} entries no node gives",
            index_missing.len(),
            index_extra
        ));
    }
    let mut edge_ids = BTreeSet::new();
    let mut repeated_edges = false;
    // Per adjacency tree (g.out, g.in): how many of the entries the edge records give are
    // there; the ones missing; and the ones of records their id does not lead to, which
    // the walk naming extra entries cannot reach through the id.
    let mut found = [0u64; 2];
    let mut lacking: [BTreeSet<Entry>; 2] = Default::default();
    let mut unindexed: [BTreeSet<Entry>; 2] = Default::default();
    for item in view.edges.scan()? {
        let (record, rec) = item?;
        let fields = (|| {
            Ok::<_, crate::Error>((
                u64_field(rec.field(0))?,
                text_field(rec.field(1))?,
                u64_field(rec.field(2))?,
                u64_field(rec.field(3))?,
            ))
        })();
        let (id, edge_type, src, dst) = match fields {
            Ok(fields) => fields,
            Err(e) => {
                r.problems.push(format!("edge record {record}: {e}"));
                continue;
            }
        };
        // Properties that do not decode would fail every read of the edge.
        if let Err(e) = crate::value::decode(rec.field(4).unwrap_or_default()) {
            r.problems
                .push(format!("edge {id} (record {record}): properties: {e}"));
        }
        for end in [src, dst] {
            if !nodes.contains(&end) {
                r.problems
                    .push(format!("edge {id} dangles: node {end} does not exist"));
            }
        }
        if !edge_ids.insert(id) {
            r.problems
                .push(format!("edge id {id} carried by two records"));
            repeated_edges = true;
        }
        let translates = view.edge_location(id)? == Some(record);
        if !translates {
            r.problems.push(format!(
                "edge {id}: its id does not translate to record {record}"
            ));
        }
        for (i, tree, node, other) in [(0, &view.out, src, dst), (1, &view.inn, dst, src)] {
            let there =
                tree.contains(adjacency_key(node, &edge_type), adjacency_value(other, id))?;
            if there {
                found[i] += 1;
            }
            if !there || !translates {
                let entry = (node, edge_type.clone(), other, id);
                if !translates {
                    unindexed[i].insert(entry.clone());
                }
                if !there {
                    lacking[i].insert(entry);
                }
            }
        }
    }
    r.edges = edge_ids.len() as u64;
    // The counters hand out ids above every stored one, or the next add would reuse one.
    for (what, key, highest) in [
        ("node", META_NEXT_NODE, nodes.last().copied()),
        ("edge", META_NEXT_EDGE, edge_ids.last().copied()),
    ] {
        match counter(&view.meta, key)? {
            None => r.problems.push(format!("no {what} id counter")),
            Some(next) if highest.is_some_and(|h| next <= h) => r.problems.push(format!(
                "the {what} id counter stands at {next}, not above stored {what} {}",
                highest.unwrap_or_default()
            )),
            Some(_) => {}
        }
    }
    for (i, (name, tree)) in [("g.out", &view.out), ("g.in", &view.inn)]
        .into_iter()
        .enumerate()
    {
        let mut entries = 0u64;
        each_entry(name, tree, Some(&mut r.problems), &mut |_, _, _, _| {
            entries += 1;
            Ok(())
        })?;
        for missing in &lacking[i] {
            r.problems.push(format!(
                "{name} lacks {missing:?} (node, type, other, edge)"
            ));
        }
        // Records of distinct ids give distinct entries, so with no id repeated, entries
        // beyond those found are ones no record gives: only then are they looked for.
        if entries != found[i] || repeated_edges {
            let outgoing = i == 0;
            each_entry(name, tree, None, &mut |node, edge_type, other, edge| {
                let entry = (node, edge_type.to_string(), other, edge);
                if !unindexed[i].contains(&entry) && !given(&view, outgoing, &entry)? {
                    r.problems.push(format!(
                        "{name} holds {entry:?}, which no edge record gives"
                    ));
                }
                Ok(())
            })?;
        }
    }
    Ok(r)
}

/// The property-index keys `node` gives, one per indexed property of its label it has.
fn index_keys<'a>(
    node: &'a Node,
    indexed: &'a [(String, String)],
) -> impl Iterator<Item = Vec<u8>> + 'a {
    indexed.iter().filter_map(|(l, p)| {
        let v = node.properties.get(p).filter(|_| *l == node.label)?;
        let mut k = prop_key_prefix(l, p, v);
        k.extend_from_slice(&node.id.to_be_bytes());
        Some(k)
    })
}

/// How many of the index entries the records of `repeated` ids give, found in the
/// index, repeat an entry another record of the same id gives.
fn repeated_index_entries(
    view: &GraphRead<'_>,
    indexed: &[(String, String)],
    repeated: &BTreeSet<u64>,
) -> Result<u64> {
    let (mut counted, mut distinct) = (0u64, BTreeSet::new());
    for item in view.nodes.scan()? {
        let (_, rec) = item?;
        let Ok(id) = u64_field(rec.field(0)) else {
            continue;
        };
        if !repeated.contains(&id) {
            continue;
        }
        let Ok(node) = node_from(id, &rec) else {
            continue;
        };
        for key in index_keys(&node, indexed) {
            if view.props.get(&key)?.is_some() {
                counted += 1;
                distinct.insert(key);
            }
        }
    }
    Ok(counted - distinct.len() as u64)
}

/// Calls `f(node, type, other, edge)` for each adjacency entry of `tree` that decodes, in
/// key then value order (the order of [`Entry`]); lists those that do not in `problems`,
/// when given.
fn each_entry(
    name: &str,
    tree: &MultiTree<'_>,
    mut problems: Option<&mut Vec<String>>,
    f: &mut dyn FnMut(u64, &str, u64, u64) -> Result<()>,
) -> Result<()> {
    for key in tree.keys::<&[u8], _>(..)? {
        let key = key?;
        let (Ok(node), Ok(edge_type)) = (u64_field(key.get(..8)), text_field(key.get(8..))) else {
            if let Some(problems) = problems.as_deref_mut() {
                problems.push(format!("{name} holds an unreadable key {key:02x?}"));
            }
            continue;
        };
        for v in tree.values(key)? {
            match split_adjacency_value(v?) {
                Ok((other, edge)) => f(node, &edge_type, other, edge)?,
                Err(e) => {
                    if let Some(problems) = problems.as_deref_mut() {
                        problems.push(format!("{name}, node {node}: {e}"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether the record edge id `entry.3` leads to gives `entry`, an entry of `g.out`
/// (`outgoing`) or `g.in`.
fn given(view: &GraphRead<'_>, outgoing: bool, entry: &Entry) -> Result<bool> {
    let (node, edge_type, other, edge) = entry;
    let Some(record) = view.edge_location(*edge)? else {
        return Ok(false);
    };
    let Some(rec) = view.edges.get(record)? else {
        return Ok(false);
    };
    let (Ok(id), Ok(t), Ok(src), Ok(dst)) = (
        u64_field(rec.field(0)),
        text_field(rec.field(1)),
        u64_field(rec.field(2)),
        u64_field(rec.field(3)),
    ) else {
        return Ok(false);
    };
    let (near, far) = if outgoing { (src, dst) } else { (dst, src) };
    Ok(id == *edge && t == *edge_type && near == *node && far == *other)
}
