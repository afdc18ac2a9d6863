//! Fuzz targets for Hrafn. The bodies live in `targets.rs` as plain functions so the stable
//! smoke test (`crates/hrafn/tests/fuzz_smoke.rs`) runs them too.

mod targets;

pub use targets::{
    Input, crash_outcomes, open_files, open_outcomes, ops_crash, page_decode, record_decode,
    recover_journal,
};
