//! The graph: storage layout, writes, and the read view queries run on.
//!
//! - `g.nodes`: a table of `(stable id u64 BE, label, properties)`, with a unique fixed
//!   index on the stable id and an index on the label. A record's table id is its physical
//!   location (O(1) access); the fixed index is the stable → physical translation, kept by
//!   the table itself whenever a record moves, so it never goes stale.
//! - `g.edges`: a table of `(stable id, type, source id, destination id, properties)`, with
//!   a unique fixed index on the stable id.
//! - `g.out` / `g.in` (multi-value): `node id BE | type` → `other node id BE | edge id BE`,
//!   sorted, so the neighbours of a node by type are one key and all its neighbours one
//!   prefix; a degree is a count.
//! - `g.props`: `label 0x00 property 0x00 | value length u16 BE | value's index bytes | node
//!   id BE` → empty, for the (label, property) pairs an index was created for.
//! - `g.meta`: the next node and edge ids, the layout version, the indexed pairs.

use crate::batch::EdgeBatch;
use crate::error::{Error, Result};
use crate::value::{NO_PROPERTIES, Properties, Value, check_name, decode, encode};
use hrafn::table::Schema;
use hrafn::{Environment, MultiTree, Options, ReadTxn, Table, Tree, WriteTxn};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::Path;

pub(crate) const NODES: &str = "g.nodes";
pub(crate) const EDGES: &str = "g.edges";
pub(crate) const OUT: &str = "g.out";
pub(crate) const IN: &str = "g.in";
pub(crate) const PROPS: &str = "g.props";
pub(crate) const META: &str = "g.meta";
pub(crate) const META_NEXT_NODE: &[u8] = b"next_node_id";
pub(crate) const META_NEXT_EDGE: &[u8] = b"next_edge_id";
const META_LAYOUT: &[u8] = b"layout_version";
pub(crate) const META_INDEX_PREFIX: &[u8] = b"index\0";
/// The layout this code reads and writes.
pub const LAYOUT_VERSION: u32 = 1;
/// The fixed index that translates stable ids to table ids.
const BY_ID: &str = "by-id";
const BY_LABEL: &str = "by-label";

pub(crate) fn node_schema() -> Schema {
    Schema::new(3).fixed_index(BY_ID, 0).index(BY_LABEL, &[1])
}

pub(crate) fn edge_schema() -> Schema {
    Schema::new(5).fixed_index(BY_ID, 0)
}

/// Which way edges are followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From source to destination.
    Out,
    /// From destination to source.
    In,
    /// Both.
    Both,
}

/// What deleting a node does with its edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteMode {
    /// Deletes its edges too, in the same transaction.
    Cascade,
    /// Refuses ([`Error::NodeHasEdges`]) while edges touch it.
    Refuse,
}

/// One adjacency entry of a node, as a delete reads it.
struct Incident {
    /// The tree holding it.
    tree: &'static str,
    /// Whether it is in the outgoing tree (the node is the edge's source).
    outgoing: bool,
    edge_type: String,
    other: u64,
    edge: u64,
}

/// A node as read.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Its stable id.
    pub id: u64,
    /// Its label.
    pub label: String,
    /// Its properties.
    pub properties: Properties,
}

/// An edge as read.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    /// Its stable id.
    pub id: u64,
    /// Its type.
    pub edge_type: String,
    /// The node it leaves.
    pub source: u64,
    /// The node it enters.
    pub destination: u64,
    /// Its properties.
    pub properties: Properties,
}

/// One adjacency entry: the node at the other end, the edge, and the edge's type.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Neighbour {
    /// The node at the other end.
    pub node: u64,
    /// The edge.
    pub edge: u64,
    /// The edge's type.
    pub edge_type: String,
}

/// A graph in one Hrafn environment.
pub struct Graph {
    env: Environment,
}

impl Graph {
    /// Opens (creating if needed) a graph in directory `path`.
    ///
    /// # Errors
    /// As [`Environment::open`]; [`Error::Corrupt`] for a graph of another layout.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Graph> {
        Graph::with_environment(Environment::open(path, options)?)
    }

    /// Makes a graph of an open environment (its trees are named `g.*`).
    ///
    /// # Errors
    /// As [`Graph::open`].
    pub fn with_environment(env: Environment) -> Result<Graph> {
        let mut wtx = env.begin_write()?;
        {
            let mut meta = wtx.open_tree(META)?;
            match meta.get(META_LAYOUT)? {
                None => {
                    meta.insert(META_LAYOUT, LAYOUT_VERSION.to_be_bytes())?;
                    meta.insert(META_NEXT_NODE, 1u64.to_be_bytes())?;
                    meta.insert(META_NEXT_EDGE, 1u64.to_be_bytes())?;
                }
                Some(v) if v == LAYOUT_VERSION.to_be_bytes() => {}
                Some(v) => {
                    return Err(Error::Corrupt(format!(
                        "graph layout {v:?}, this build reads {LAYOUT_VERSION}"
                    )));
                }
            }
        }
        wtx.open_table(NODES, &node_schema())?;
        wtx.open_table(EDGES, &edge_schema())?;
        wtx.open_multi_tree(OUT)?;
        wtx.open_multi_tree(IN)?;
        wtx.open_tree(PROPS)?;
        wtx.commit()?;
        Ok(Graph { env })
    }

    /// The environment underneath.
    pub fn environment(&self) -> &Environment {
        &self.env
    }

    /// Runs `f` in one write transaction and commits it.
    ///
    /// # Errors
    /// The error `f` returned (nothing is committed), or the commit's.
    pub fn write<T>(&self, f: impl FnOnce(&mut GraphWriter<'_, '_>) -> Result<T>) -> Result<T> {
        let mut wtx = self.env.begin_write()?;
        let out = f(&mut GraphWriter { wtx: &mut wtx })?;
        wtx.commit()?;
        Ok(out)
    }

    /// Runs `f` in a merged write transaction (many threads' calls share transactions and
    /// journal writes). `f` may run more than once (see [`Environment::try_submit`]).
    ///
    /// # Errors
    /// As [`Graph::write`].
    pub fn submit<T: Send + 'static>(
        &self,
        f: impl Fn(&mut GraphWriter<'_, '_>) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        self.env.try_submit(move |wtx| f(&mut GraphWriter { wtx }))
    }

    /// Runs `f` on one snapshot: every read of one query sees the same graph.
    ///
    /// # Errors
    /// The error `f` returned; engine errors opening the snapshot.
    pub fn read<T>(&self, f: impl FnOnce(&GraphRead<'_>) -> Result<T>) -> Result<T> {
        let rtx = self.env.begin_read()?;
        let view = GraphRead::open_on(&rtx)?;
        f(&view)
    }
}

/// Checks that the snapshot holds a graph of the layout this build reads, without writing:
/// for opening an environment read-only (`GraphRead::open_on` then serves its queries).
///
/// # Errors
/// [`Error::NotAGraph`] when it holds none; [`Error::Corrupt`] for another layout version.
pub fn check_layout(rtx: &ReadTxn<'_>) -> Result<()> {
    let meta = match rtx.open_tree(META) {
        Ok(meta) => meta,
        Err(hrafn::Error::TreeNotFound { .. }) => return Err(Error::NotAGraph),
        Err(e) => return Err(e.into()),
    };
    match meta.get(META_LAYOUT)? {
        None => Err(Error::NotAGraph),
        Some(v) if v == LAYOUT_VERSION.to_be_bytes() => Ok(()),
        Some(v) => Err(Error::Corrupt(format!(
            "graph layout {v:?}, this build reads {LAYOUT_VERSION}"
        ))),
    }
}

/// Writes to the graph inside one transaction.
pub struct GraphWriter<'w, 'env> {
    wtx: &'w mut WriteTxn<'env>,
}

/// Takes `count` ids from the counter at `key`; returns the first.
fn next_ids(wtx: &mut WriteTxn<'_>, key: &[u8], count: usize) -> Result<u64> {
    let mut meta = wtx.open_tree(META)?;
    let next = meta
        .get(key)?
        .and_then(|v| v.try_into().ok().map(u64::from_be_bytes))
        .ok_or_else(|| Error::Corrupt("no next id".into()))?;
    let after = next
        .checked_add(count as u64)
        .ok_or_else(|| Error::Corrupt(format!("the id counter stands at {next}: no ids left")))?;
    meta.insert(key, after.to_be_bytes())?;
    Ok(next)
}

/// The next id the counter at `key` of a graph's meta tree gives (`None` if it has none).
pub(crate) fn counter(meta: &Tree<'_>, key: &[u8]) -> Result<Option<u64>> {
    Ok(meta
        .get(key)?
        .and_then(|v| v.try_into().ok().map(u64::from_be_bytes)))
}

/// An adjacency key: `node id BE | type`.
pub(crate) fn adjacency_key(node: u64, edge_type: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + edge_type.len());
    k.extend_from_slice(&node.to_be_bytes());
    k.extend_from_slice(edge_type.as_bytes());
    k
}

/// An adjacency value: `other node id BE | edge id BE`.
pub(crate) fn adjacency_value(other: u64, edge: u64) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&other.to_be_bytes());
    v[8..].copy_from_slice(&edge.to_be_bytes());
    v
}

pub(crate) fn split_adjacency_value(v: &[u8]) -> Result<(u64, u64)> {
    let bad = || Error::Corrupt(format!("adjacency value of {} bytes", v.len()));
    let other = v
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(bad)?;
    let edge = v
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(bad)?;
    if v.len() != 16 {
        return Err(bad());
    }
    Ok((other, edge))
}

pub(crate) fn u64_field(f: Option<&[u8]>) -> Result<u64> {
    f.and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| Error::Corrupt("an id field is not 8 bytes".into()))
}

pub(crate) fn text_field(f: Option<&[u8]>) -> Result<String> {
    f.and_then(|b| std::str::from_utf8(b).ok())
        .map(str::to_string)
        .ok_or_else(|| Error::Corrupt("a name field is not UTF-8".into()))
}

/// Longest value bytes a property-index key holds whole; a longer value is keyed by its
/// first bytes and a hash of all of them (engine keys are at most 2,000 bytes), and every
/// match is confirmed against the node.
pub(crate) const INDEXED_VALUE_MAX_BYTES: usize = 1024;

/// The bytes a property index keys `value` by (see [`INDEXED_VALUE_MAX_BYTES`]).
fn indexed_value_bytes(value: &Value) -> Vec<u8> {
    let mut bytes = value.index_bytes();
    if bytes.len() > INDEXED_VALUE_MAX_BYTES {
        let hash = xxhash_rust::xxh3::xxh3_64(&bytes);
        bytes.truncate(INDEXED_VALUE_MAX_BYTES - 8);
        bytes.extend_from_slice(&hash.to_be_bytes());
    }
    bytes
}

/// A property-index key prefix for one value: `label 0 property 0 | len u16 BE | bytes`.
pub(crate) fn prop_key_prefix(label: &str, property: &str, value: &Value) -> Vec<u8> {
    let bytes = indexed_value_bytes(value);
    let mut k = Vec::with_capacity(label.len() + property.len() + 4 + bytes.len());
    k.extend_from_slice(label.as_bytes());
    k.push(0);
    k.extend_from_slice(property.as_bytes());
    k.push(0);
    k.extend_from_slice(&(bytes.len().min(u16::MAX as usize) as u16).to_be_bytes());
    k.extend_from_slice(&bytes);
    k
}

fn index_meta_key(label: &str, property: &str) -> Vec<u8> {
    let mut k = META_INDEX_PREFIX.to_vec();
    k.extend_from_slice(label.as_bytes());
    k.push(0);
    k.extend_from_slice(property.as_bytes());
    k
}

impl<'env> GraphWriter<'_, 'env> {
    /// The transaction underneath (for writes of your own beside the graph's).
    pub fn txn(&mut self) -> &mut WriteTxn<'env> {
        self.wtx
    }

    /// Table `name` and the record id stable id `id` translates to in it, if any.
    fn find(
        &mut self,
        name: &str,
        schema: &Schema,
        id: u64,
    ) -> Result<Option<(hrafn::TableMut<'_, 'env>, u64)>> {
        let table = self.wtx.open_table(name, schema)?;
        let record = table.index_ids(BY_ID, &id.to_be_bytes())?.first().copied();
        Ok(record.map(|r| (table, r)))
    }

    /// As [`GraphWriter::find`], for an id known to exist.
    fn located(
        &mut self,
        name: &str,
        schema: &Schema,
        id: u64,
    ) -> Result<(hrafn::TableMut<'_, 'env>, u64)> {
        self.find(name, schema, id)?
            .ok_or_else(|| Error::Corrupt(format!("id {id} has no record in {name}")))
    }

    /// Adds a node. Returns its stable id.
    ///
    /// # Errors
    /// [`Error::InvalidName`]; engine errors.
    pub fn add_node(&mut self, label: &str, properties: &Properties) -> Result<u64> {
        let ids = self.add_nodes(&[(label, properties)])?;
        Ok(ids[0])
    }

    /// Adds many nodes `(label, properties)`. Returns their ids, in order. The same as
    /// [`GraphWriter::add_node`] for each, with the work shared: one id allocation, the
    /// table opened once, each label's indexed properties looked up once.
    ///
    /// # Errors
    /// As [`GraphWriter::add_node`]; on an error, none of the batch is kept only if the
    /// caller's transaction is dropped (as for any error inside a transaction).
    pub fn add_nodes(&mut self, nodes: &[(&str, &Properties)]) -> Result<Vec<u64>> {
        if nodes.is_empty() {
            return Ok(Vec::new());
        }
        // Everything that can be refused is checked before anything is written.
        let encoded = nodes
            .iter()
            .map(|&(label, props)| check_name(label).and_then(|()| encode(props)))
            .collect::<Result<Vec<Vec<u8>>>>()?;
        let first = next_ids(self.wtx, META_NEXT_NODE, nodes.len())?;
        let ids = first..first + nodes.len() as u64;
        {
            let mut table = self.wtx.open_table(NODES, &node_schema())?;
            for ((&(label, _), props), id) in nodes.iter().zip(&encoded).zip(ids.clone()) {
                table.insert(&[&id.to_be_bytes(), label.as_bytes(), props])?;
            }
        }
        let mut indexed: HashMap<&str, Vec<String>> = HashMap::new();
        for (&(label, props), id) in nodes.iter().zip(ids.clone()) {
            if props.is_empty() {
                continue;
            }
            let names = match indexed.entry(label) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(self.indexed_properties(label)?),
            };
            self.index_properties(id, label, names, props, true)?;
        }
        Ok(ids.collect())
    }

    /// Replaces a node's label and properties.
    ///
    /// # Errors
    /// [`Error::NoSuchNode`]; as [`GraphWriter::add_node`].
    pub fn update_node(&mut self, id: u64, label: &str, properties: &Properties) -> Result<()> {
        // Refused before anything is written: a caller going on after the error must
        // not commit the old index entries removed and the new ones missing.
        check_name(label)?;
        let props = encode(properties)?;
        let old = self.node(id)?.ok_or(Error::NoSuchNode(id))?;
        // The record first: the table refuses one too large before it changes anything,
        // and the index entries follow only a record that changed.
        {
            let (mut nodes, record) = self.located(NODES, &node_schema(), id)?;
            nodes.update(record, &[&id.to_be_bytes(), label.as_bytes(), &props])?;
        }
        self.index_node(id, &old.label, &old.properties, false)?;
        self.index_node(id, label, properties, true)
    }

    /// The node `id` as this transaction sees it.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn node(&mut self, id: u64) -> Result<Option<Node>> {
        let Some((nodes, record)) = self.find(NODES, &node_schema(), id)? else {
            return Ok(None);
        };
        let r = nodes
            .get(record)?
            .ok_or_else(|| Error::Corrupt(format!("node {id}: no record")))?;
        node_from(id, &r).map(Some)
    }

    /// Adds an edge of type `edge_type` from `source` to `destination`. Returns its id.
    ///
    /// # Errors
    /// [`Error::NoSuchNode`] for a missing end; [`Error::InvalidName`]; engine errors.
    pub fn add_edge(
        &mut self,
        source: u64,
        destination: u64,
        edge_type: &str,
        properties: &Properties,
    ) -> Result<u64> {
        self.add_edges(&[(source, destination, edge_type, properties)])?
            .pop()
            .ok_or_else(|| Error::Corrupt("an edge added without an id".into()))
    }

    /// Adds many edges `(source, destination, type, properties)`. Returns their ids, in
    /// order. The same as [`GraphWriter::add_edge`] for each, with the work shared: one
    /// id allocation, each table and tree opened once, adjacency added in key order.
    ///
    /// # Errors
    /// As [`GraphWriter::add_edge`]; on an error, none of the batch is kept only if the
    /// caller's transaction is dropped (as for any error inside a transaction).
    pub fn add_edges(&mut self, edges: &[(u64, u64, &str, &Properties)]) -> Result<Vec<u64>> {
        // Everything that can be refused is checked before anything is written.
        let batch = EdgeBatch::of(edges)?;
        Ok(self.add_edge_batch(&batch)?.collect())
    }

    /// Stores a prepared batch; returns its edges' ids, given in batch order.
    pub(crate) fn add_edge_batch(&mut self, batch: &EdgeBatch) -> Result<std::ops::Range<u64>> {
        if batch.len() == 0 {
            return Ok(0..0);
        }
        {
            let nodes = self.wtx.open_table(NODES, &node_schema())?;
            for &end in &batch.ends {
                if nodes.index_ids(BY_ID, &end.to_be_bytes())?.is_empty() {
                    return Err(Error::NoSuchNode(end));
                }
            }
        }
        let first = next_ids(self.wtx, META_NEXT_EDGE, batch.len())?;
        {
            let mut table = self.wtx.open_table(EDGES, &edge_schema())?;
            for ((i, e), props) in batch.edges.iter().enumerate().zip(&batch.properties) {
                table.insert(&[
                    &(first + i as u64).to_be_bytes(),
                    batch.types[e.type_index].as_bytes(),
                    &e.source.to_be_bytes(),
                    &e.destination.to_be_bytes(),
                    if props.is_empty() {
                        &NO_PROPERTIES
                    } else {
                        props
                    },
                ])?;
            }
        }
        for (name, order, outgoing) in [(OUT, &batch.out_order, true), (IN, &batch.in_order, false)]
        {
            // In key order: each leaf is found once, not once per entry.
            let entries = order.iter().map(|&i| {
                let e = batch.edges[i];
                let (node, other) = if outgoing {
                    (e.source, e.destination)
                } else {
                    (e.destination, e.source)
                };
                let key = adjacency_key(node, &batch.types[e.type_index]);
                (key, adjacency_value(other, first + i as u64))
            });
            self.wtx.open_multi_tree(name)?.add_each(entries)?;
        }
        Ok(first..first + batch.len() as u64)
    }

    /// The edge `id` as this transaction sees it.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn edge(&mut self, id: u64) -> Result<Option<Edge>> {
        let Some((edges, record)) = self.find(EDGES, &edge_schema(), id)? else {
            return Ok(None);
        };
        let r = edges
            .get(record)?
            .ok_or_else(|| Error::Corrupt(format!("edge {id}: no record")))?;
        edge_from(id, &r).map(Some)
    }

    /// Deletes edge `id`. Returns false if there is none.
    ///
    /// # Errors
    /// Engine errors; [`Error::Corrupt`] when the adjacency lacks the edge's entries (the
    /// edge is then left as it was).
    pub fn delete_edge(&mut self, id: u64) -> Result<bool> {
        let Some(edge) = self.edge(id)? else {
            return Ok(false);
        };
        self.remove_edge(&edge)?;
        Ok(true)
    }

    /// Deletes `edge`, read from its record in this transaction.
    fn remove_edge(&mut self, edge: &Edge) -> Result<()> {
        let id = edge.id;
        let lacks = |tree: &str, node: u64| {
            Error::Corrupt(format!(
                "edge {id} ({} {} -> {}): {tree} lacks its entry under node {node}",
                edge.edge_type, edge.source, edge.destination
            ))
        };
        // The adjacency entries go first, and the record only once both were there: a
        // missing entry means the adjacency disagrees with the record, and deleting the
        // record anyway would hide that.
        let out_key = adjacency_key(edge.source, &edge.edge_type);
        let out_value = adjacency_value(edge.destination, id);
        if !self.wtx.open_multi_tree(OUT)?.remove(&out_key, out_value)? {
            return Err(lacks(OUT, edge.source));
        }
        let in_key = adjacency_key(edge.destination, &edge.edge_type);
        if !self
            .wtx
            .open_multi_tree(IN)?
            .remove(in_key, adjacency_value(edge.source, id))?
        {
            // The outgoing entry goes back, so a caller going on after the error does
            // not commit half an edge.
            self.wtx.open_multi_tree(OUT)?.add(out_key, out_value)?;
            return Err(lacks(IN, edge.destination));
        }
        let (mut edges, record) = self.located(EDGES, &edge_schema(), id)?;
        edges.delete(record)?;
        Ok(())
    }

    /// Replaces an edge's properties.
    ///
    /// # Errors
    /// [`Error::NoSuchEdge`]; engine errors.
    pub fn update_edge(&mut self, id: u64, properties: &Properties) -> Result<()> {
        let edge = self.edge(id)?.ok_or(Error::NoSuchEdge(id))?;
        let props = encode(properties)?;
        let (mut edges, record) = self.located(EDGES, &edge_schema(), id)?;
        edges.update(
            record,
            &[
                &id.to_be_bytes(),
                edge.edge_type.as_bytes(),
                &edge.source.to_be_bytes(),
                &edge.destination.to_be_bytes(),
                &props,
            ],
        )?;
        Ok(())
    }

    /// The adjacency entries of `id`, both directions.
    fn incident_entries(&mut self, id: u64) -> Result<Vec<Incident>> {
        let mut entries = Vec::new();
        for (name, outgoing) in [(OUT, true), (IN, false)] {
            let tree = self.wtx.open_multi_tree(name)?;
            let prefix = id.to_be_bytes();
            let keys: Vec<Vec<u8>> = tree
                .keys::<&[u8], _>((
                    std::ops::Bound::Included(&prefix[..]),
                    std::ops::Bound::Unbounded,
                ))?
                .map(|k| k.map(<[u8]>::to_vec))
                .take_while(|k| k.as_ref().map_or(true, |k| k.starts_with(&prefix)))
                .collect::<hrafn::Result<_>>()?;
            for key in keys {
                let edge_type = text_field(key.get(8..))?;
                for v in tree.values(&key)? {
                    let (other, edge) = split_adjacency_value(v?)?;
                    entries.push(Incident {
                        tree: name,
                        outgoing,
                        edge_type: edge_type.clone(),
                        other,
                        edge,
                    });
                }
            }
        }
        Ok(entries)
    }

    /// Deletes node `id`: with [`DeleteMode::Cascade`] its edges go too; with
    /// [`DeleteMode::Refuse`] a node with edges stays and the call fails. Returns false if
    /// there is no such node.
    ///
    /// # Errors
    /// [`Error::NodeHasEdges`]; engine errors; [`Error::Corrupt`] when the adjacency
    /// disagrees with the edge records (nothing is deleted then).
    pub fn delete_node(&mut self, id: u64, mode: DeleteMode) -> Result<bool> {
        let Some(node) = self.node(id)? else {
            return Ok(false);
        };
        let entries = self.incident_entries(id)?;
        if !entries.is_empty() && mode == DeleteMode::Refuse {
            let mut edges: Vec<u64> = entries.iter().map(|e| e.edge).collect();
            // A self-loop is one edge, in both trees.
            edges.sort_unstable();
            edges.dedup();
            return Err(Error::NodeHasEdges {
                node: id,
                edges: edges.len() as u64,
            });
        }
        // Every entry is checked against its edge's record before anything is deleted:
        // deleting the entries the records name would leave one they do not name behind,
        // naming a node that is gone.
        let mut edges: Vec<Edge> = Vec::with_capacity(entries.len());
        for Incident {
            tree,
            outgoing,
            edge_type,
            other,
            edge,
        } in entries
        {
            let given = self.edge(edge)?.filter(|e| {
                let (near, far) = if outgoing {
                    (e.source, e.destination)
                } else {
                    (e.destination, e.source)
                };
                e.edge_type == edge_type && near == id && far == other
            });
            let Some(e) = given else {
                return Err(Error::Corrupt(format!(
                    "node {id}: {tree} holds ({edge_type}, node {other}, edge {edge}), \
                     which no edge record gives"
                )));
            };
            edges.push(e);
        }
        edges.sort_unstable_by_key(|e| e.id);
        edges.dedup_by_key(|e| e.id);
        // Both entries of every edge, so that no edge is deleted when a later one would
        // fail at its other end.
        for edge in &edges {
            for (tree, near, far) in [
                (OUT, edge.source, edge.destination),
                (IN, edge.destination, edge.source),
            ] {
                let key = adjacency_key(near, &edge.edge_type);
                if !self
                    .wtx
                    .open_multi_tree(tree)?
                    .contains(key, adjacency_value(far, edge.id))?
                {
                    return Err(Error::Corrupt(format!(
                        "node {id}: edge {} ({} {} -> {}): {tree} lacks its entry under node \
                         {near}",
                        edge.id, edge.edge_type, edge.source, edge.destination
                    )));
                }
            }
        }
        for edge in &edges {
            self.remove_edge(edge)?;
        }
        self.index_node(id, &node.label, &node.properties, false)?;
        let (mut nodes, record) = self.located(NODES, &node_schema(), id)?;
        nodes.delete(record)?;
        Ok(true)
    }

    /// Creates a property index on (label, property): nodes of that label are then found
    /// by that property's value without a scan. Indexes the nodes already there.
    ///
    /// # Errors
    /// [`Error::InvalidName`]; engine errors.
    pub fn create_property_index(&mut self, label: &str, property: &str) -> Result<()> {
        check_name(label)?;
        check_name(property)?;
        let key = index_meta_key(label, property);
        if self.wtx.open_tree(META)?.get(&key)?.is_some() {
            return Ok(());
        }
        self.wtx.open_tree(META)?.insert(&key, [])?;
        let ids: Vec<u64> = {
            let nodes = self.wtx.open_table(NODES, &node_schema())?;
            let records = nodes.index_ids(BY_LABEL, label.as_bytes())?;
            let mut ids = Vec::with_capacity(records.len());
            for r in records {
                let rec = nodes
                    .get(r)?
                    .ok_or_else(|| Error::Corrupt("label index names no record".into()))?;
                ids.push(u64_field(rec.field(0))?);
            }
            ids
        };
        for id in ids {
            let node = self.node(id)?.ok_or(Error::NoSuchNode(id))?;
            if let Some(v) = node.properties.get(property) {
                let mut k = prop_key_prefix(label, property, v);
                k.extend_from_slice(&id.to_be_bytes());
                self.wtx.open_tree(PROPS)?.insert(k, [])?;
            }
        }
        Ok(())
    }

    /// Adds (or removes) node `id`'s entries in every property index of its label.
    fn index_node(
        &mut self,
        id: u64,
        label: &str,
        properties: &Properties,
        add: bool,
    ) -> Result<()> {
        if properties.is_empty() {
            return Ok(());
        }
        let indexed = self.indexed_properties(label)?;
        self.index_properties(id, label, &indexed, properties, add)
    }

    /// The properties indexed for nodes labelled `label`.
    fn indexed_properties(&mut self, label: &str) -> Result<Vec<String>> {
        let meta = self.wtx.open_tree(META)?;
        let prefix = index_meta_key(label, "");
        meta.prefix(&prefix)?
            .map(|item| {
                item.map_err(Error::from).and_then(|(k, _)| {
                    std::str::from_utf8(&k[prefix.len()..])
                        .map(str::to_string)
                        .map_err(|_| Error::Corrupt("index name not UTF-8".into()))
                })
            })
            .collect()
    }

    /// Adds (or removes) node `id`'s entries in the `indexed` properties' indexes.
    fn index_properties(
        &mut self,
        id: u64,
        label: &str,
        indexed: &[String],
        properties: &Properties,
        add: bool,
    ) -> Result<()> {
        if indexed.is_empty() {
            return Ok(());
        }
        let mut props = self.wtx.open_tree(PROPS)?;
        for property in indexed {
            if let Some(v) = properties.get(property) {
                let mut k = prop_key_prefix(label, property, v);
                k.extend_from_slice(&id.to_be_bytes());
                if add {
                    props.insert(k, [])?;
                } else {
                    props.remove(k)?;
                }
            }
        }
        Ok(())
    }
}

/// A node from its record.
pub(crate) fn node_from(id: u64, r: &hrafn::table::Record<'_>) -> Result<Node> {
    record_is("node", id, r)?;
    Ok(Node {
        id,
        label: text_field(r.field(1))?,
        properties: decode(r.field(2).unwrap_or_default())?,
    })
}

/// Checks that the record the id index led to holds that id (its field 0): a damaged
/// index must not hand out another node's or edge's record under the id asked for.
fn record_is(what: &str, id: u64, r: &hrafn::table::Record<'_>) -> Result<()> {
    let held = u64_field(r.field(0))?;
    if held != id {
        return Err(Error::Corrupt(format!(
            "{what} {id}: its id index leads to the record of {what} {held}"
        )));
    }
    Ok(())
}

/// An edge from its record.
fn edge_from(id: u64, r: &hrafn::table::Record<'_>) -> Result<Edge> {
    record_is("edge", id, r)?;
    Ok(Edge {
        id,
        edge_type: text_field(r.field(1))?,
        source: u64_field(r.field(2))?,
        destination: u64_field(r.field(3))?,
        properties: decode(r.field(4).unwrap_or_default())?,
    })
}

/// The record id stable id `id` translates to in `table` (nodes or edges), if any.
fn located(table: &Table<'_>, id: u64) -> Result<Option<u64>> {
    Ok(table.index_ids(BY_ID, &id.to_be_bytes())?.first().copied())
}

/// One snapshot of the graph, its tables and trees open: what queries run on.
pub struct GraphRead<'t> {
    pub(crate) nodes: Table<'t>,
    pub(crate) edges: Table<'t>,
    pub(crate) out: MultiTree<'t>,
    pub(crate) inn: MultiTree<'t>,
    pub(crate) props: Tree<'t>,
    pub(crate) meta: Tree<'t>,
}

impl<'t> GraphRead<'t> {
    /// Opens the view on a read transaction of the graph's environment.
    ///
    /// # Errors
    /// Engine errors (the graph's trees missing: not a graph).
    pub fn open_on(rtx: &'t ReadTxn<'_>) -> Result<GraphRead<'t>> {
        Ok(GraphRead {
            nodes: rtx.open_table(NODES, &node_schema())?,
            edges: rtx.open_table(EDGES, &edge_schema())?,
            out: rtx.open_multi_tree(OUT)?,
            inn: rtx.open_multi_tree(IN)?,
            props: rtx.open_tree(PROPS)?,
            meta: rtx.open_tree(META)?,
        })
    }

    /// The table id (physical location) of node `id`.
    ///
    /// # Errors
    /// Engine errors.
    pub fn node_location(&self, id: u64) -> Result<Option<u64>> {
        located(&self.nodes, id)
    }

    /// Where edge `id`'s record is (its table record id), if the edge exists.
    pub(crate) fn edge_location(&self, id: u64) -> Result<Option<u64>> {
        located(&self.edges, id)
    }

    /// Node `id`.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn node(&self, id: u64) -> Result<Option<Node>> {
        let Some(record) = self.node_location(id)? else {
            return Ok(None);
        };
        let r = self
            .nodes
            .get(record)?
            .ok_or_else(|| Error::Corrupt(format!("node {id}: no record")))?;
        node_from(id, &r).map(Some)
    }

    /// Edge `id`.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn edge(&self, id: u64) -> Result<Option<Edge>> {
        let Some(record) = self.edge_location(id)? else {
            return Ok(None);
        };
        let r = self
            .edges
            .get(record)?
            .ok_or_else(|| Error::Corrupt(format!("edge {id}: no record")))?;
        edge_from(id, &r).map(Some)
    }

    /// Number of nodes.
    pub fn node_count(&self) -> u64 {
        self.nodes.len()
    }

    /// Number of edges.
    pub fn edge_count(&self) -> u64 {
        self.edges.len()
    }

    /// The neighbours of `id` along edges of `edge_type` (any type when `None`), following
    /// `direction`; sorted by type, then neighbour, then edge.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn neighbours(
        &self,
        id: u64,
        direction: Direction,
        edge_type: Option<&str>,
    ) -> Result<Vec<Neighbour>> {
        let mut out = Vec::new();
        self.for_each_neighbour(id, direction, edge_type, &mut |n| {
            out.push(n);
            Ok(())
        })?;
        if direction == Direction::Both {
            // Each direction comes sorted; together they are merged into one order.
            out.sort_by(|a, b| (&a.edge_type, a.node, a.edge).cmp(&(&b.edge_type, b.node, b.edge)));
        }
        Ok(out)
    }

    /// Calls `f` for each neighbour (see [`GraphRead::neighbours`]) without collecting: for
    /// [`Direction::Both`], the outgoing ones (in order), then the incoming ones.
    ///
    /// # Errors
    /// Engine and corruption errors, or `f`'s.
    pub fn for_each_neighbour(
        &self,
        id: u64,
        direction: Direction,
        edge_type: Option<&str>,
        f: &mut dyn FnMut(Neighbour) -> Result<()>,
    ) -> Result<()> {
        self.visit_adjacency(id, direction, edge_type, &mut |node, edge, t| {
            f(Neighbour {
                node,
                edge,
                edge_type: t.to_string(),
            })
        })
    }

    /// Calls `f(neighbour, edge, edge type)` for each neighbour, in the order of
    /// [`GraphRead::for_each_neighbour`], allocating nothing (traversals' inner loop).
    pub(crate) fn visit_adjacency(
        &self,
        id: u64,
        direction: Direction,
        edge_type: Option<&str>,
        f: &mut dyn FnMut(u64, u64, &str) -> Result<()>,
    ) -> Result<()> {
        let trees: &[&MultiTree<'t>] = match direction {
            Direction::Out => &[&self.out],
            Direction::In => &[&self.inn],
            Direction::Both => &[&self.out, &self.inn],
        };
        for tree in trees {
            match edge_type {
                Some(t) => {
                    for v in tree.values(adjacency_key(id, t))? {
                        let (node, edge) = split_adjacency_value(v?)?;
                        f(node, edge, t)?;
                    }
                }
                None => {
                    let prefix = id.to_be_bytes();
                    for key in tree.keys::<&[u8], _>((
                        std::ops::Bound::Included(&prefix[..]),
                        std::ops::Bound::Unbounded,
                    ))? {
                        let key = key?;
                        if !key.starts_with(&prefix) {
                            break;
                        }
                        let t = std::str::from_utf8(&key[8..])
                            .map_err(|_| Error::Corrupt("edge type not UTF-8".into()))?;
                        for v in tree.values(key)? {
                            let (node, edge) = split_adjacency_value(v?)?;
                            f(node, edge, t)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The number of edges of `edge_type` (any when `None`) at `id` in `direction`.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn degree(&self, id: u64, direction: Direction, edge_type: Option<&str>) -> Result<u64> {
        match edge_type {
            Some(t) => {
                let key = adjacency_key(id, t);
                Ok(match direction {
                    Direction::Out => self.out.count(&key)?,
                    Direction::In => self.inn.count(&key)?,
                    Direction::Both => self.out.count(&key)? + self.inn.count(&key)?,
                })
            }
            None => {
                let mut n = 0;
                self.for_each_neighbour(id, direction, None, &mut |_| {
                    n += 1;
                    Ok(())
                })?;
                Ok(n)
            }
        }
    }

    /// The ids of the nodes labelled `label`, ascending.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn nodes_with_label(&self, label: &str) -> Result<Vec<u64>> {
        let mut ids = Vec::new();
        for record in self.nodes.index_ids(BY_LABEL, label.as_bytes())? {
            let r = self
                .nodes
                .get(record)?
                .ok_or_else(|| Error::Corrupt("label index names no record".into()))?;
            ids.push(u64_field(r.field(0))?);
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Whether a property index exists on (label, property).
    ///
    /// # Errors
    /// Engine errors.
    pub fn has_property_index(&self, label: &str, property: &str) -> Result<bool> {
        Ok(self.meta.get(index_meta_key(label, property))?.is_some())
    }

    /// The nodes labelled `label` whose `property` equals `value`, ascending: through the
    /// property index when there is one, else by reading every node of the label.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn find_nodes(&self, label: &str, property: &str, value: &Value) -> Result<Vec<u64>> {
        if self.has_property_index(label, property)? {
            let prefix = prop_key_prefix(label, property, value);
            // A long value is keyed by a prefix and a hash: confirm against the node. A value
            // of exactly the key's length is confirmed too, since a long value's prefix and
            // hash can spell it.
            let confirm = value.index_bytes().len() >= INDEXED_VALUE_MAX_BYTES;
            let mut ids = Vec::new();
            for item in self.props.prefix(&prefix)? {
                let (k, _) = item?;
                if k.len() != prefix.len() + 8 {
                    continue;
                }
                let id = u64_field(Some(&k[prefix.len()..]))?;
                if confirm
                    && !self.node(id)?.is_some_and(|n| {
                        n.properties.get(property).is_some_and(|v| v.same_as(value))
                    })
                {
                    continue;
                }
                ids.push(id);
            }
            return Ok(ids);
        }
        let mut ids = Vec::new();
        for id in self.nodes_with_label(label)? {
            if let Some(node) = self.node(id)?
                && node
                    .properties
                    .get(property)
                    .is_some_and(|v| v.same_as(value))
            {
                ids.push(id);
            }
        }
        Ok(ids)
    }
}
