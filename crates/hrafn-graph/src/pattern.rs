//! Chain patterns: `(a:Person)-[:KNOWS]->(b)-[:WORKS_AT]->(c:Company {name: $x})`.
//!
//! A match starts from the most selective node of the chain (one found through a property
//! index, else one with a property and a label, else one with a label, else every node) and
//! grows both ways along the edges, checking each node's label and properties as it goes.

use crate::error::Result;
use crate::graph::{Direction, GraphRead};
use crate::value::Value;

/// One node of a pattern: an optional label and property values it must have.
#[derive(Clone, Debug, Default)]
pub struct NodePattern {
    /// The label it must have.
    pub label: Option<String>,
    /// Properties it must have, with these values.
    pub properties: Vec<(String, Value)>,
}

/// One edge of a pattern: an optional type and the way it points.
#[derive(Clone, Debug)]
pub struct EdgePattern {
    /// The type it must have.
    pub edge_type: Option<String>,
    /// `Out`: from the node before it to the node after it; `In`: the other way; `Both`:
    /// either.
    pub direction: Direction,
}

/// A chain of nodes joined by edges.
#[derive(Clone, Debug, Default)]
pub struct Pattern {
    nodes: Vec<NodePattern>,
    edges: Vec<EdgePattern>,
}

impl Pattern {
    /// A pattern starting with a node of `label` (any when `None`) and `properties`.
    pub fn start(label: Option<&str>, properties: &[(&str, Value)]) -> Pattern {
        Pattern {
            nodes: vec![node_pattern(label, properties)],
            edges: Vec::new(),
        }
    }

    /// Extends the chain by an edge and the node it reaches.
    pub fn then(
        mut self,
        edge_type: Option<&str>,
        direction: Direction,
        label: Option<&str>,
        properties: &[(&str, Value)],
    ) -> Pattern {
        self.edges.push(EdgePattern {
            edge_type: edge_type.map(str::to_string),
            direction,
        });
        self.nodes.push(node_pattern(label, properties));
        self
    }

    /// The number of nodes in the chain.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True only for [`Pattern::default`], which has no node and matches nothing.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

fn node_pattern(label: Option<&str>, properties: &[(&str, Value)]) -> NodePattern {
    NodePattern {
        label: label.map(str::to_string),
        properties: properties
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect(),
    }
}

fn reverse(d: Direction) -> Direction {
    match d {
        Direction::Out => Direction::In,
        Direction::In => Direction::Out,
        Direction::Both => Direction::Both,
    }
}

impl GraphRead<'_> {
    fn node_matches(&self, id: u64, p: &NodePattern) -> Result<bool> {
        if p.label.is_none() && p.properties.is_empty() {
            return Ok(true);
        }
        let Some(node) = self.node(id)? else {
            return Ok(false);
        };
        Ok(p.label.as_ref().is_none_or(|l| *l == node.label)
            && p.properties
                .iter()
                .all(|(n, v)| node.properties.get(n).is_some_and(|have| have.same_as(v))))
    }

    /// Candidates for pattern node `p`, and how selective they are (lower is better).
    fn anchor_candidates(&self, p: &NodePattern) -> Result<(u8, Option<Vec<u64>>)> {
        if let Some(label) = &p.label {
            for (prop, value) in &p.properties {
                if self.has_property_index(label, prop)? {
                    return Ok((0, Some(self.find_nodes(label, prop, value)?)));
                }
            }
            let rank = if p.properties.is_empty() { 2 } else { 1 };
            return Ok((rank, None));
        }
        Ok((3, None))
    }

    /// Every match of `pattern`: the node ids bound to its nodes, in chain order (at most
    /// `limit` matches when given). Node ids may repeat within a match (a cycle).
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn match_pattern(&self, pattern: &Pattern, limit: Option<usize>) -> Result<Vec<Vec<u64>>> {
        // `Pattern::default()` has no node to anchor on.
        if pattern.nodes.is_empty() {
            return Ok(Vec::new());
        }
        let mut best = (u8::MAX, 0usize, None);
        for (i, p) in pattern.nodes.iter().enumerate() {
            let (rank, ids) = self.anchor_candidates(p)?;
            if rank < best.0 {
                best = (rank, i, ids);
            }
        }
        let (_, anchor, found) = best;
        let candidates = match found {
            Some(ids) => ids,
            None => match &pattern.nodes.get(anchor).and_then(|p| p.label.clone()) {
                Some(label) => self.nodes_with_label(label)?,
                None => self.all_node_ids()?,
            },
        };
        // Distinct matches only (parallel edges give the same chain twice).
        let mut out = std::collections::BTreeSet::new();
        for id in candidates {
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
            if !self.node_matches(id, &pattern.nodes[anchor])? {
                continue;
            }
            // Grow to the right of the anchor, then each partial match to the left.
            let mut rights = vec![vec![id]];
            for i in anchor..pattern.edges.len() {
                let mut grown = Vec::new();
                for partial in rights {
                    let last = *partial.last().unwrap_or(&id);
                    let e = &pattern.edges[i];
                    for n in self.neighbours(last, e.direction, e.edge_type.as_deref())? {
                        if self.node_matches(n.node, &pattern.nodes[i + 1])? {
                            let mut p = partial.clone();
                            p.push(n.node);
                            grown.push(p);
                        }
                    }
                }
                rights = grown;
            }
            let mut matches = rights;
            for i in (0..anchor).rev() {
                let mut grown = Vec::new();
                for partial in matches {
                    let first = partial[0];
                    let e = &pattern.edges[i];
                    for n in self.neighbours(first, reverse(e.direction), e.edge_type.as_deref())? {
                        if self.node_matches(n.node, &pattern.nodes[i])? {
                            let mut p = Vec::with_capacity(partial.len() + 1);
                            p.push(n.node);
                            p.extend_from_slice(&partial);
                            grown.push(p);
                        }
                    }
                }
                matches = grown;
            }
            for m in matches {
                if limit.is_some_and(|l| out.len() >= l) {
                    break;
                }
                out.insert(m);
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Every node id, ascending.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn all_node_ids(&self) -> Result<Vec<u64>> {
        let mut ids = Vec::with_capacity(self.node_count() as usize);
        for item in self.nodes.scan()? {
            let (_, r) = item?;
            ids.push(crate::graph::u64_field(r.field(0))?);
        }
        ids.sort_unstable();
        Ok(ids)
    }
}
