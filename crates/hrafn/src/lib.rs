//! Hrafn
pub mod error;
pub mod storage;
