//! The integrity check: adjacency agrees with edge records, no edge dangles.

use crate::error::Result;
use crate::graph::{
    Graph, GraphRead, META_INDEX_PREFIX, META_NEXT_EDGE, META_NEXT_NODE, counter, node_from,
    prop_key_prefix, split_adjacency_value, text_field, u64_field,
};
use std::collections::{BTreeMap, BTreeSet};

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
/// # Errors
/// Engine errors reading the trees (a damaged page is a reported problem instead).
pub fn check(rtx: &hrafn::ReadTxn<'_>) -> Result<GraphCheckReport> {
    let mut r = GraphCheckReport::default();
    if let Err(e) = rtx.check() {
        r.problems.push(format!("engine check: {e}"));
        return Ok(r);
    }
    let view = GraphRead::open_on(rtx)?;
    let mut nodes = BTreeSet::new();
    // Every node, for the property indexes.
    let mut contents = Vec::new();
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
            Ok(node) => contents.push(node),
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
        }
    }
    r.nodes = nodes.len() as u64;
    // Property indexes: exactly one entry per indexed (label, property) a node has.
    let mut indexed = Vec::new();
    for item in view.meta.prefix(META_INDEX_PREFIX)? {
        let (k, _) = item?;
        let pair = std::str::from_utf8(&k[META_INDEX_PREFIX.len()..])
            .ok()
            .and_then(|p| p.split_once('\0'))
            .map(|(l, p)| (l.to_string(), p.to_string()));
        match pair {
            Some(pair) => indexed.push(pair),
            None => r
                .problems
                .push("a property index with an unreadable name".into()),
        }
    }
    let mut want = BTreeSet::new();
    for node in &contents {
        for (l, p) in &indexed {
            if *l == node.label
                && let Some(v) = node.properties.get(p)
            {
                let mut k = prop_key_prefix(l, p, v);
                k.extend_from_slice(&node.id.to_be_bytes());
                want.insert(k);
            }
        }
    }
    let mut have = BTreeSet::new();
    for item in view.props.iter()? {
        have.insert(item?.0.to_vec());
    }
    if want != have {
        r.problems.push(format!(
            "property indexes: {} entries missing, {} entries no node gives",
            want.difference(&have).count(),
            have.difference(&want).count()
        ));
    }
    // (node, type, other, edge) as the edge records say they should be.
    let mut want_out = BTreeSet::new();
    let mut want_in = BTreeSet::new();
    let mut edge_ids = BTreeMap::new();
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
        if edge_ids.insert(id, record).is_some() {
            r.problems
                .push(format!("edge id {id} carried by two records"));
        }
        if view.edge_location(id)? != Some(record) {
            r.problems.push(format!(
                "edge {id}: its id does not translate to record {record}"
            ));
        }
        want_out.insert((src, edge_type.clone(), dst, id));
        want_in.insert((dst, edge_type, src, id));
    }
    r.edges = edge_ids.len() as u64;
    // The counters hand out ids above every stored one, or the next add would reuse one.
    for (what, key, highest) in [
        ("node", META_NEXT_NODE, nodes.last().copied()),
        ("edge", META_NEXT_EDGE, edge_ids.keys().next_back().copied()),
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
    for (name, tree, want) in [
        ("g.out", &view.out, &want_out),
        ("g.in", &view.inn, &want_in),
    ] {
        let mut have = BTreeSet::new();
        for key in tree.keys::<&[u8], _>(..)? {
            let key = key?;
            let (Ok(node), Ok(edge_type)) = (u64_field(key.get(..8)), text_field(key.get(8..)))
            else {
                r.problems
                    .push(format!("{name} holds an unreadable key {key:02x?}"));
                continue;
            };
            for v in tree.values(key)? {
                match split_adjacency_value(v?) {
                    Ok((other, edge)) => {
                        have.insert((node, edge_type.clone(), other, edge));
                    }
                    Err(e) => r.problems.push(format!("{name}, node {node}: {e}")),
                }
            }
        }
        for missing in want.difference(&have) {
            r.problems.push(format!(
                "{name} lacks {missing:?} (node, type, other, edge)"
            ));
        }
        for extra in have.difference(want) {
            r.problems.push(format!(
                "{name} holds {extra:?}, which no edge record gives"
            ));
        }
    }
    Ok(r)
}
