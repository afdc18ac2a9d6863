//! Edges prepared for storing before any transaction holds them: names checked,
//! properties encoded, and both directions' adjacency entries put in key order. A bulk
//! load prepares the next transaction's edges on its reading thread while the writer
//! stores the last, so the write transaction holds only the tree work.

use crate::error::Result;
use crate::value::{Properties, check_name, encode_or_empty};
use std::sync::Arc;

/// One edge of a batch: source, destination, index into the batch's types.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchEdge {
    pub source: u64,
    pub destination: u64,
    pub type_index: usize,
}

/// The distinct edge types a run of edges names, each with its index.
#[derive(Default)]
pub(crate) struct TypeNames {
    names: Vec<String>,
    indexes: rustc_hash::FxHashMap<String, usize>,
}

impl TypeNames {
    /// The index of `name`, given it on its first use.
    pub fn index_of(&mut self, name: &str) -> usize {
        if let Some(&i) = self.indexes.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        self.indexes.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }

    /// The names by index, leaving it empty.
    pub fn take(&mut self) -> Vec<String> {
        self.indexes.clear();
        std::mem::take(&mut self.names)
    }
}

/// Edges ready for [`crate::GraphWriter`] to store (see the module docs).
pub(crate) struct EdgeBatch {
    /// The edge types the edges name, checked.
    pub types: Arc<Vec<String>>,
    pub edges: Vec<BatchEdge>,
    /// Each edge's encoded properties; empty for none (stored as a count of zero).
    pub properties: Vec<Vec<u8>>,
    /// Indexes into `edges` in the order of their out-adjacency entries
    /// (`source | type`, then `destination | edge id`), and of their in-adjacency entries.
    pub out_order: Vec<usize>,
    pub in_order: Vec<usize>,
    /// Every node an edge touches, ascending, once.
    pub ends: Vec<u64>,
}

/// Each type's rank in byte order: adjacency keys compare by node, then the type's bytes,
/// so a batch sorts its entries by this rank.
pub(crate) fn type_ranks(types: &[String]) -> Vec<usize> {
    let mut by_bytes: Vec<usize> = (0..types.len()).collect();
    by_bytes.sort_by(|&a, &b| types[a].as_bytes().cmp(types[b].as_bytes()));
    let mut rank = vec![0usize; types.len()];
    for (r, &t) in by_bytes.iter().enumerate() {
        rank[t] = r;
    }
    rank
}

impl EdgeBatch {
    /// Prepares `edges` (`(edge, properties)`) naming `types`.
    ///
    /// Edge ids are given in the order of `edges` when the batch is stored, so the order of
    /// an edge's adjacency entries among those of the same key (by other node, then edge
    /// id) is the order of `(other node, index)`, known before the ids are.
    ///
    /// # Errors
    /// [`crate::Error::InvalidName`] for a bad type name; property encoding errors.
    ///
    /// # Panics
    /// If an edge's type index is outside `types` (a caller's bug).
    pub fn new<'p>(
        types: Arc<Vec<String>>,
        edges: impl IntoIterator<Item = (BatchEdge, &'p Properties)>,
    ) -> Result<EdgeBatch> {
        for name in types.iter() {
            check_name(name)?;
        }
        let edges = edges
            .into_iter()
            .map(|(edge, props)| encode_or_empty(props).map(|p| (edge, p)))
            .collect::<Result<Vec<_>>>()?;
        let rank = type_ranks(&types);
        Ok(EdgeBatch::ranked(types, &rank, edges))
    }

    /// [`EdgeBatch::new`] for edges whose properties are encoded already (an empty vector:
    /// none) and whose `types` were checked and ranked ([`type_ranks`]) once for many
    /// batches, as the bulk load's rounds are.
    pub(crate) fn ranked(
        types: Arc<Vec<String>>,
        rank: &[usize],
        edges: impl IntoIterator<Item = (BatchEdge, Vec<u8>)>,
    ) -> EdgeBatch {
        let (edges, properties): (Vec<BatchEdge>, Vec<Vec<u8>>) = edges.into_iter().unzip();
        let order = |outgoing: bool| -> Vec<usize> {
            let mut keyed: Vec<(u64, usize, u64, usize)> = edges
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let (node, other) = if outgoing {
                        (e.source, e.destination)
                    } else {
                        (e.destination, e.source)
                    };
                    (node, rank[e.type_index], other, i)
                })
                .collect();
            keyed.sort_unstable();
            keyed.into_iter().map(|k| k.3).collect()
        };
        let (out_order, in_order) = (order(true), order(false));
        let mut ends: Vec<u64> = edges
            .iter()
            .flat_map(|e| [e.source, e.destination])
            .collect();
        ends.sort_unstable();
        ends.dedup();
        EdgeBatch {
            types,
            edges,
            properties,
            out_order,
            in_order,
            ends,
        }
    }

    /// Prepares `(source, destination, type, properties)` edges, as
    /// [`crate::GraphWriter::add_edges`] takes them.
    ///
    /// # Errors
    /// As [`EdgeBatch::new`].
    pub fn of(edges: &[(u64, u64, &str, &Properties)]) -> Result<EdgeBatch> {
        let mut types = TypeNames::default();
        let typed: Vec<(BatchEdge, &Properties)> = edges
            .iter()
            .map(|&(source, destination, edge_type, props)| {
                let edge = BatchEdge {
                    source,
                    destination,
                    type_index: types.index_of(edge_type),
                };
                (edge, props)
            })
            .collect();
        EdgeBatch::new(Arc::new(types.take()), typed)
    }

    /// The edges' count.
    pub fn len(&self) -> usize {
        self.edges.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The orders are those of the adjacency keys and values the edges make, ids given
    /// in batch order.
    #[test]
    fn orders_follow_adjacency_keys_and_values() {
        let none = Properties::new();
        let edges = [
            (5, 1, "b", &none),
            (5, 1, "a", &none),
            (2, 9, "ab", &none),
            (5, 0, "b", &none),
            (5, 1, "b", &none),
        ];
        let batch = EdgeBatch::of(&edges).expect("valid");
        for (order, outgoing) in [(&batch.out_order, true), (&batch.in_order, false)] {
            let entries: Vec<(Vec<u8>, [u8; 16])> = order
                .iter()
                .map(|&i| {
                    let (s, d, t, _) = edges[i];
                    let (node, other) = if outgoing { (s, d) } else { (d, s) };
                    let key = crate::graph::adjacency_key(node, t);
                    (key, crate::graph::adjacency_value(other, 100 + i as u64))
                })
                .collect();
            let mut sorted = entries.clone();
            sorted.sort();
            assert_eq!(entries, sorted, "outgoing {outgoing}");
        }
        assert_eq!(batch.ends, vec![0, 1, 2, 5, 9]);
    }

    #[test]
    fn a_bad_type_name_is_refused() {
        let none = Properties::new();
        assert!(matches!(
            EdgeBatch::of(&[(1, 2, "", &none)]),
            Err(crate::Error::InvalidName(_))
        ));
    }
}
