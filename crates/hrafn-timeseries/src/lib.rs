//! A time-series store on Hrafn.
#![warn(missing_docs)]

mod check;
pub mod chunk;
pub mod error;
mod keys;
pub mod labels;
mod maintenance;
pub mod query;
mod store;
pub mod text;

pub use check::TsCheckReport;
pub use chunk::Sample;
pub use error::{Error, Result};
pub use labels::Labels;
pub use maintenance::{COMPACTED_CHUNK_SAMPLES, CompactReport, RetentionReport};
pub use query::{Aggregation, QUERY_POINTS_MAX, QuerySeries, RangeQuery};
pub use store::{AppendReport, LABEL_PAIR_MAX_BYTES, SeriesId, Store, StoreOptions};
