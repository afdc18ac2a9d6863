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
            // Depth first, so that a limit stops the walk rather than trimming every
            // partial match built beforehand.
            let mut found = |m: Vec<u64>| {
                out.insert(m);
                limit.is_none_or(|l| out.len() < l)
            };
            if !self.grow(pattern, anchor, &mut vec![id], &mut Vec::new(), &mut found)? {
                break;
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Grows a match of `pattern` from its anchor node: `right` holds the nodes bound from
    /// the anchor on, `left` those bound before it, nearest first. To the right edge by
    /// edge, then to the left; each whole match goes to `found`, in the order of neighbours
    /// taken at each step. Returns false as soon as `found` does (no more wanted).
    fn grow(
        &self,
        pattern: &Pattern,
        anchor: usize,
        right: &mut Vec<u64>,
        left: &mut Vec<u64>,
        found: &mut dyn FnMut(Vec<u64>) -> bool,
    ) -> Result<bool> {
        let (from, edge, next, direction) = if anchor + right.len() <= pattern.edges.len() {
            let i = anchor + right.len() - 1;
            let e = &pattern.edges[i];
            (
                *right.last().expect("holds the anchor"),
                e,
                i + 1,
                e.direction,
            )
        } else if left.len() < anchor {
            let i = anchor - 1 - left.len();
            let e = &pattern.edges[i];
            let from = *left.last().unwrap_or(&right[0]);
            (from, e, i, reverse(e.direction))
        } else {
            let m = left.iter().rev().chain(right.iter()).copied().collect();
            return Ok(found(m));
        };
        let growing_right = next > anchor;
        for n in self.neighbours(from, direction, edge.edge_type.as_deref())? {
            if !self.node_matches(n.node, &pattern.nodes[next])? {
                continue;
            }
            let side = if growing_right {
                &mut *right
            } else {
                &mut *left
            };
            side.push(n.node);
            let more = self.grow(pattern, anchor, right, left, found)?;
            let side = if growing_right {
                &mut *right
            } else {
                &mut *left
            };
            side.pop();
            if !more {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Every node id, ascending.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn all_node_ids(&self) -> Result<Vec<u64>> {
        // The count comes from a table header: a damaged one must not size an allocation.
        let mut ids = Vec::with_capacity(self.node_count().min(1 << 20) as usize);
        for item in self.nodes.scan()? {
            let (_, r) = item?;
            ids.push(crate::graph::u64_field(r.field(0))?);
        }
        ids.sort_unstable();
        Ok(ids)
    }
}
