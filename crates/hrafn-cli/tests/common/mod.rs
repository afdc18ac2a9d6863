//! Running the `hrafn` binary in the CLI's tests.
#![allow(dead_code)] // each test file uses its own subset

use std::path::Path;
use std::process::{Command, Output};

/// Runs `hrafn` with `args`.
pub fn hrafn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hrafn"))
        .args(args)
        .output()
        .expect("run hrafn")
}

/// The standard output, which must be UTF-8.
pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 output")
}

/// The standard error.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A path as an argument.
pub fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs a command that must succeed and returns its standard output.
pub fn ok(args: &[&str]) -> String {
    let o = hrafn(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

/// The names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
