//! The graph store's error type.

/// Everything that can go wrong in the graph store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The storage engine failed (I/O, corruption of its pages, a full scratch, ...).
    #[error(transparent)]
    Engine(#[from] hrafn::Error),
    /// No node has this id.
    #[error("no node {0}")]
    NoSuchNode(u64),
    /// No edge has this id.
    #[error("no edge {0}")]
    NoSuchEdge(u64),
    /// Deleting the node was refused: edges still touch it.
    #[error("node {node} still has {edges} edges")]
    NodeHasEdges {
        /// The node.
        node: u64,
        /// Its edges, both directions.
        edges: u64,
    },
    /// A label, edge type or property name that cannot be stored (empty, too long, a NUL).
    #[error("invalid name: {0}")]
    InvalidName(String),
    /// More properties on one node or edge than a record holds.
    #[error("{count} properties on one node or edge: at most {max}")]
    TooManyProperties {
        /// The properties given.
        count: usize,
        /// The most a node or edge holds.
        max: usize,
    },
    /// The environment holds no graph.
    #[error("no graph in this environment")]
    NotAGraph,
    /// Stored graph bytes that do not decode.
    #[error("corrupt graph data: {0}")]
    Corrupt(String),
    /// Input that does not parse (CSV).
    #[error("parse error at line {line}: {message}")]
    Parse {
        /// 1-based line of the input.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// Reading input failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The graph store's result type.
pub type Result<T> = std::result::Result<T, Error>;
