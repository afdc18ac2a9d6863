//! `hrafn dump` and `hrafn load`: a streaming, portable text form of a whole environment
//! (every kind of tree, nested trees, tables), documented in `docs/dump.md`.
//!
//! One item per line, fields separated by one space; names, keys, values and fields are
//! lowercase hex (`-` for empty), so any bytes survive any text channel:
//!
//! ```text
//! hrafn-dump 2
//! tree <name> btree            entries of a B+tree follow, until `end`
//! entry <key> <value>
//! nested <key> btree           a nested tree under <key> (btree, fixed <size>, multi)
//! ...                          its entries, then `end`
//! end
//! tree <name> fixed <size>     entries: `entry <decimal u64 key> <value>`
//! tree <name> multi            entries: `entry <key> <value>`, one line per value
//! table <name> <schema>        records: `record <field> <field> ...`, in primary-key order
//! end
//! done                         the last line: a dump without it was cut off
//! ```
//!
//! Indexes are not dumped: loading a table rebuilds its indexes, global ones included.
//! Both directions go through the engine's walk (`hrafn::walk`), which compaction uses too:
//! each line is one `Item`.

use crate::Failure;
use hrafn::btree::TreeKind;
use hrafn::table::Schema;
use hrafn::walk::{Item, Loader, RecordOrder, walk};
use hrafn::{Environment, Error};
use std::io::{BufRead, Read, Write};

/// The first line of a dump.
pub const DUMP_HEADER: &str = "hrafn-dump 2";
/// The first line of a dump of version 1, which has no closing line; still loaded.
const DUMP_HEADER_1: &str = "hrafn-dump 1";
/// The last line of a dump (version 2 on): a dump cut short lacks it.
const DUMP_DONE: &str = "done";
/// Bytes read for the first line at most: far more than any header.
const HEADER_BYTES_MAX: u64 = 64;

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str, line: usize) -> Result<Vec<u8>, Failure> {
    if s == "-" {
        return Ok(Vec::new());
    }
    crate::decode_hex(s)
        .ok_or_else(|| crate::fail(3, format!("dump line {line}: {s:?} is not hex")))
}

fn kind_words(kind: TreeKind) -> String {
    match kind {
        TreeKind::BTree => "btree".into(),
        TreeKind::Fixed { value_size } => format!("fixed {value_size}"),
        TreeKind::Multi => "multi".into(),
        TreeKind::Table => "table".into(),
    }
}

/// Writes the whole environment as a dump.
pub fn dump(env: &Environment, out: &mut impl Write) -> Result<(), Failure> {
    let rtx = env.begin_read()?;
    writeln!(out, "{DUMP_HEADER}")?;
    // Counted in top-level entries and records (what the trees' headers know without a
    // walk); entries of nested trees go by uncounted.
    let mut total = 0;
    for name in rtx.list_trees()? {
        total += rtx.tree_header(&name)?.entry_count;
    }
    let bar =
        crate::backup::progress_bar("dump [{bar:30}] {human_pos}/{human_len} entries ETA {eta}");
    bar.set_length(total);
    let mut depth = 0usize;
    // Primary-key order, so that the dump of a loaded dump is the same (ids are locations
    // and differ between databases).
    walk(
        &rtx,
        RecordOrder::PrimaryKey,
        |item| -> Result<(), Failure> {
            match item {
                Item::Tree { .. } | Item::Table { .. } => depth = 1,
                Item::Nested { .. } => {
                    bar.inc(u64::from(depth == 1));
                    depth += 1;
                }
                Item::End => depth = depth.saturating_sub(1),
                Item::Entry { .. } | Item::Fixed { .. } | Item::Record { .. } => {
                    bar.inc(u64::from(depth == 1));
                }
            }
            match item {
                Item::Tree { name, kind } => {
                    writeln!(out, "tree {} {}", hex(name.as_bytes()), kind_words(kind))?
                }
                Item::Nested { key, kind } => {
                    writeln!(out, "nested {} {}", hex(key), kind_words(kind))?
                }
                Item::Entry { key, value } => writeln!(out, "entry {} {}", hex(key), hex(value))?,
                Item::Fixed { key, value } => writeln!(out, "entry {key} {}", hex(value))?,
                Item::Table { name, schema } => writeln!(
                    out,
                    "table {} {}",
                    hex(name.as_bytes()),
                    hex(&schema.encode())
                )?,
                Item::Record { fields } => {
                    let fields: Vec<String> = fields.iter().map(|f| hex(f)).collect();
                    writeln!(out, "record {}", fields.join(" "))?
                }
                Item::End => writeln!(out, "end")?,
            }
            Ok(())
        },
    )?;
    writeln!(out, "{DUMP_DONE}")?;
    out.flush()?;
    bar.finish_and_clear();
    Ok(())
}

/// Reads a dump and writes its content into the environment `open` gives (trees that exist
/// are added to), in write transactions of bounded size. Returns the entries and records
/// loaded. `open` is called once the first line says the input is a dump, so a wrong
/// input leaves no new environment behind.
pub fn load(
    open: impl FnOnce() -> Result<Environment, Failure>,
    mut input: impl BufRead,
) -> Result<u64, Failure> {
    let read_failed = |line: usize, e: std::io::Error| {
        crate::fail(3, format!("reading the dump at line {line}: {e}"))
    };
    // The header is short: a file of no lines (a binary file, /dev/zero) is not read whole.
    let mut first = Vec::new();
    (&mut input)
        .take(HEADER_BYTES_MAX)
        .read_until(b'\n', &mut first)
        .map_err(|e| read_failed(1, e))?;
    let first = String::from_utf8_lossy(&first);
    let first = first.trim_end_matches('\n').trim_end_matches('\r');
    let closed = match first {
        DUMP_HEADER => true,
        DUMP_HEADER_1 => false,
        _ => {
            return Err(crate::fail(
                3,
                format!("not a dump: the first line is {first:?}"),
            ));
        }
    };
    let env = open()?;
    let mut loader = Loader::new(&env);
    let mut done = false;
    for (i, line) in input.lines().enumerate() {
        let line_number = i + 2;
        let line = line.map_err(|e| read_failed(line_number, e))?;
        if done {
            if line.is_empty() {
                continue;
            }
            return Err(crate::fail(
                3,
                format!("dump line {line_number}: {line:?} after the closing `{DUMP_DONE}`"),
            ));
        }
        let words: Vec<&str> = line.split(' ').collect();
        let bad = || crate::fail(3, format!("dump line {line_number}: cannot read {line:?}"));
        let pushed = match words.as_slice() {
            ["tree", name, kind @ ..] | ["nested", name, kind @ ..] => {
                let kind = match kind {
                    ["btree"] => TreeKind::BTree,
                    ["multi"] => TreeKind::Multi,
                    ["fixed", size] => TreeKind::Fixed {
                        value_size: size.parse().map_err(|_| bad())?,
                    },
                    _ => return Err(bad()),
                };
                let name = unhex(name, line_number)?;
                if words[0] == "tree" {
                    let name = String::from_utf8(name).map_err(|_| bad())?;
                    loader.push(Item::Tree { name: &name, kind })
                } else {
                    loader.push(Item::Nested { key: &name, kind })
                }
            }
            ["table", name, schema] => {
                let name = String::from_utf8(unhex(name, line_number)?).map_err(|_| bad())?;
                let schema = Schema::decode(&unhex(schema, line_number)?, 0)
                    .map_err(|e| at_line(line_number, e))?;
                loader.push(Item::Table {
                    name: &name,
                    schema: &schema,
                })
            }
            ["record", fields @ ..] => {
                let fields: Vec<Vec<u8>> = fields
                    .iter()
                    .map(|f| unhex(f, line_number))
                    .collect::<Result<_, _>>()?;
                let refs: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
                loader.push(Item::Record { fields: &refs })
            }
            ["entry", key, value] => {
                let value = unhex(value, line_number)?;
                if let Some(TreeKind::Fixed { .. }) = loader.current_kind() {
                    let key: u64 = key.parse().map_err(|_| bad())?;
                    loader.push(Item::Fixed { key, value: &value })
                } else {
                    let key = unhex(key, line_number)?;
                    loader.push(Item::Entry {
                        key: &key,
                        value: &value,
                    })
                }
            }
            ["end"] => loader.push(Item::End),
            [DUMP_DONE] if closed => {
                done = true;
                Ok(())
            }
            [""] => Ok(()),
            _ => return Err(bad()),
        };
        pushed.map_err(|e| at_line(line_number, e))?;
    }
    if loader.current_kind().is_some() {
        return Err(crate::fail(
            3,
            "the dump ends inside a tree (missing `end`)",
        ));
    }
    if closed && !done {
        // What came before is committed; the rest of the source is not here.
        return Err(crate::fail(
            3,
            format!("the dump ends without its closing `{DUMP_DONE}` line: it was cut off"),
        ));
    }
    let counts = loader.finish()?;
    Ok(counts.entries + counts.records)
}

/// An engine error met at a line of the dump (a change that is applied later, with others
/// in its batch, may fail at a later line than its own).
/// A load that fails at a line: exit code 3 whatever the error (`docs/dump.md`), since
/// the dump, not the environment, is at fault.
fn at_line(line_number: usize, e: Error) -> Failure {
    crate::fail(3, format!("dump line {line_number}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zero bytes without end, and no newline: what `/dev/zero` or a binary file gives.
    struct Zeros {
        served_bytes: usize,
    }

    impl Read for Zeros {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            assert!(self.served_bytes < 1 << 20, "read far past any header");
            buf.fill(0);
            self.served_bytes += buf.len();
            Ok(buf.len())
        }
    }

    #[test]
    fn input_without_lines_is_refused_after_its_first_bytes() {
        let input = std::io::BufReader::new(Zeros { served_bytes: 0 });
        let loaded = load(|| Err(crate::fail(3, "must not open")), input);
        let Err(failure) = loaded else {
            panic!("zeros loaded as a dump");
        };
        assert!(
            failure.message.contains("not a dump"),
            "{}",
            failure.message
        );
    }
}
