//! A time-series store on Hrafn.
#![warn(missing_docs)]

pub mod chunk;
pub mod error;
pub mod labels;
pub mod text;

pub use chunk::Sample;
pub use error::{Error, Result};
pub use labels::Labels;
