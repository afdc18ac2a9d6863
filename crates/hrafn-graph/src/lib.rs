//! A graph store on Hrafn.
#![warn(missing_docs)]

mod batch;
pub mod check;
pub mod error;
mod graph;
mod ids;
pub mod load;
pub mod pattern;
mod pipeline;
pub mod traverse;
pub mod value;

pub use check::GraphCheckReport;
pub use error::{Error, Result};
pub use graph::{
    DeleteMode, Direction, Edge, Graph, GraphRead, GraphWriter, LAYOUT_VERSION, Neighbour, Node,
    check_layout,
};
pub use load::{LoadProgress, LoadReport, cell_value};
pub use pattern::Pattern;
pub use traverse::{LEVEL_THREADS_MAX, PARALLEL_LEVEL_MIN_NODES, Traversal};
pub use value::{Properties, Value};
