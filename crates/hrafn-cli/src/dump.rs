//! `hrafn dump` and `hrafn load`: a streaming, portable text form of a whole environment
//! (every kind of tree, nested trees, tables), documented in `docs/dump.md`.
//!
//! One item per line, fields separated by one space; names, keys, values and fields are
//! lowercase hex (`-` for empty), so any bytes survive any text channel:
//!
//! ```text
//! hrafn-dump 1
//! tree <name> btree            entries of a B+tree follow, until `end`
//! entry <key> <value>
//! nested <key> btree           a nested tree under <key> (btree, fixed <size>, multi)
//! ...                          its entries, then `end`
//! end
//! tree <name> fixed <size>     entries: `entry <decimal u64 key> <value>`
//! tree <name> multi            entries: `entry <key> <value>`, one line per value
//! table <name> <schema>        records: `record <field> <field> ...`, in primary-key order
//! end
//! ```
//!
//! Indexes are not dumped: loading a table rebuilds its indexes, global ones included.

use crate::Failure;
use hrafn::btree::TreeKind;
use hrafn::table::Schema;
use hrafn::{Environment, ReadTxn, Tree, TreeMut, WriteTxn};
use std::io::{BufRead, Write};

/// The first line of a dump.
pub const DUMP_HEADER: &str = "hrafn-dump 1";
/// Changes loaded per write transaction, so a large dump never outgrows scratch.
const LOAD_BATCH: usize = 10_000;

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str, line: usize) -> Result<Vec<u8>, Failure> {
    let bad = || crate::fail(3, format!("dump line {line}: {s:?} is not hex"));
    if s == "-" {
        return Ok(Vec::new());
    }
    if !s.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
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
    let names = rtx.list_trees()?;
    // Tables' global indexes are derived from the records: loading the tables rebuilds
    // them, so they are not dumped.
    let mut derived = std::collections::BTreeSet::new();
    for name in &names {
        if rtx.tree_header(name)?.kind == TreeKind::Table {
            for index in rtx
                .table_schema(name)?
                .indexes()
                .iter()
                .filter(|i| i.global)
            {
                derived.insert(index.name.clone());
            }
        }
    }
    for name in names.into_iter().filter(|n| !derived.contains(n)) {
        let kind = rtx.tree_header(&name)?.kind;
        if kind == TreeKind::Table {
            dump_table(&rtx, &name, out)?;
            continue;
        }
        writeln!(out, "tree {} {}", hex(name.as_bytes()), kind_words(kind))?;
        match kind {
            TreeKind::Fixed { .. } => {
                for entry in rtx.open_fixed_tree(&name)?.range(..)? {
                    let (k, v) = entry?;
                    writeln!(out, "entry {k} {}", hex(v))?;
                }
            }
            TreeKind::Multi => dump_multi(&rtx.open_multi_tree(&name)?, out)?,
            _ => dump_btree(&rtx.open_tree(&name)?, out)?,
        }
        writeln!(out, "end")?;
    }
    Ok(())
}

fn dump_multi(tree: &hrafn::MultiTree<'_>, out: &mut impl Write) -> Result<(), Failure> {
    for key in tree.keys::<&[u8], _>(..)? {
        let key = key?;
        for value in tree.values(key)? {
            writeln!(out, "entry {} {}", hex(key), hex(value?))?;
        }
    }
    Ok(())
}

fn dump_btree(tree: &Tree<'_>, out: &mut impl Write) -> Result<(), Failure> {
    for entry in tree.iter()? {
        let (k, v) = entry?;
        let Some(kind) = tree.nested_kind(k)? else {
            writeln!(out, "entry {} {}", hex(k), hex(v))?;
            continue;
        };
        writeln!(out, "nested {} {}", hex(k), kind_words(kind))?;
        match kind {
            TreeKind::Fixed { .. } => {
                for entry in tree.open_fixed_tree(k)?.range(..)? {
                    let (k, v) = entry?;
                    writeln!(out, "entry {k} {}", hex(v))?;
                }
            }
            TreeKind::Multi => dump_multi(&tree.open_multi_tree(k)?, out)?,
            _ => dump_btree(&tree.open_tree(k)?, out)?,
        }
        writeln!(out, "end")?;
    }
    Ok(())
}

fn dump_table(rtx: &ReadTxn<'_>, name: &str, out: &mut impl Write) -> Result<(), Failure> {
    let schema = rtx.table_schema(name)?;
    let table = rtx.open_table(name, &schema)?;
    writeln!(
        out,
        "table {} {}",
        hex(name.as_bytes()),
        hex(&schema.encode())
    )?;
    // Primary-key order when there is one, so that the dump of a loaded dump is the same
    // (ids are locations and differ between databases).
    let records: Box<dyn Iterator<Item = hrafn::Result<hrafn::table::Record<'_>>>> =
        match schema.primary_key_field() {
            Some(_) => Box::new(
                table
                    .scan_by_key::<&[u8], _>(..)?
                    .into_iter()
                    .map(|(_, r)| Ok(r)),
            ),
            None => Box::new(table.scan()?.map(|e| e.map(|(_, r)| r))),
        };
    for record in records {
        let fields: Vec<String> = record?.fields().iter().map(|f| hex(f)).collect();
        writeln!(out, "record {}", fields.join(" "))?;
    }
    writeln!(out, "end")?;
    Ok(())
}

/// Where loaded lines go: the named tree or table and the nested keys below it.
enum Frame {
    Tree { key: Vec<u8>, kind: TreeKind },
    Table { name: String, schema: Schema },
}

/// One change of a load.
enum Op<'a> {
    /// Make the innermost tree exist.
    Create,
    Entry(&'a [u8], &'a [u8]),
    Fixed(u64, &'a [u8]),
}

/// Reads a dump and writes its content into `env` (trees that exist are added to).
pub fn load(env: &Environment, input: impl BufRead) -> Result<u64, Failure> {
    let mut lines = input.lines();
    let first = lines.next().transpose()?.unwrap_or_default();
    if first != DUMP_HEADER {
        return Err(crate::fail(
            3,
            format!("not a dump: the first line is {first:?}"),
        ));
    }
    let mut path: Vec<Frame> = Vec::new();
    let mut wtx = env.begin_write()?;
    let (mut batched, mut total) = (0, 0u64);
    for (i, line) in lines.enumerate() {
        let line_number = i + 2;
        let line = line?;
        let words: Vec<&str> = line.split(' ').collect();
        let bad = || crate::fail(3, format!("dump line {line_number}: cannot read {line:?}"));
        match words.as_slice() {
            ["tree", name, kind @ ..] | ["nested", name, kind @ ..] => {
                let kind = match kind {
                    ["btree"] => TreeKind::BTree,
                    ["multi"] => TreeKind::Multi,
                    ["fixed", size] => TreeKind::Fixed {
                        value_size: size.parse().map_err(|_| bad())?,
                    },
                    _ => return Err(bad()),
                };
                if (words[0] == "tree") != path.is_empty() {
                    return Err(bad());
                }
                path.push(Frame::Tree {
                    key: unhex(name, line_number)?,
                    kind,
                });
                apply(&mut wtx, &path, Op::Create)?;
            }
            ["table", name, schema] if path.is_empty() => {
                let name = String::from_utf8(unhex(name, line_number)?).map_err(|_| bad())?;
                let schema = Schema::decode(&unhex(schema, line_number)?, 0)?;
                wtx.open_table(&name, &schema)?;
                path.push(Frame::Table { name, schema });
            }
            ["record", fields @ ..] => {
                let Some(Frame::Table { name, schema }) = path.last() else {
                    return Err(bad());
                };
                let fields: Vec<Vec<u8>> = fields
                    .iter()
                    .map(|f| unhex(f, line_number))
                    .collect::<Result<_, _>>()?;
                let refs: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
                wtx.open_table(name, schema)?.insert(&refs)?;
                batched += 1;
            }
            ["entry", key, value] => {
                let value = unhex(value, line_number)?;
                let fixed = matches!(
                    path.last(),
                    Some(Frame::Tree {
                        kind: TreeKind::Fixed { .. },
                        ..
                    })
                );
                if fixed {
                    let key: u64 = key.parse().map_err(|_| bad())?;
                    apply(&mut wtx, &path, Op::Fixed(key, &value))?;
                } else {
                    apply(
                        &mut wtx,
                        &path,
                        Op::Entry(&unhex(key, line_number)?, &value),
                    )?;
                }
                batched += 1;
            }
            ["end"] if !path.is_empty() => {
                path.pop();
            }
            [""] => {}
            _ => return Err(bad()),
        }
        if batched >= LOAD_BATCH {
            wtx.commit()?;
            wtx = env.begin_write()?;
            total += batched as u64;
            batched = 0;
        }
    }
    if !path.is_empty() {
        return Err(crate::fail(
            3,
            "the dump ends inside a tree (missing `end`)",
        ));
    }
    wtx.commit()?;
    Ok(total + batched as u64)
}

/// Applies `op` to the innermost tree of `path` (a named tree, then nested keys).
fn apply(wtx: &mut WriteTxn<'_>, path: &[Frame], op: Op<'_>) -> hrafn::Result<()> {
    let Some((Frame::Tree { key, kind }, rest)) = path.split_first() else {
        return Err(hrafn::Error::InvalidArgument(
            "entries outside a tree".into(),
        ));
    };
    let name = String::from_utf8_lossy(key);
    match *kind {
        TreeKind::BTree => apply_in(&mut wtx.open_tree(&name)?, rest, op),
        TreeKind::Fixed { value_size } if rest.is_empty() => {
            let mut tree = wtx.open_fixed_tree(&name, usize::from(value_size))?;
            leaf_op(op, |k, v| tree.insert(k, v).map(drop), |_, _| Ok(()))
        }
        TreeKind::Multi if rest.is_empty() => {
            let mut tree = wtx.open_multi_tree(&name)?;
            leaf_op(op, |_, _| Ok(()), |k, v| tree.add(k, v).map(drop))
        }
        _ => Err(hrafn::Error::InvalidArgument(
            "a tree nested in a non-B+tree".into(),
        )),
    }
}

fn apply_in(tree: &mut TreeMut<'_, '_>, rest: &[Frame], op: Op<'_>) -> hrafn::Result<()> {
    let Some((Frame::Tree { key, kind }, rest)) = rest.split_first() else {
        return leaf_op(op, |_, _| Ok(()), |k, v| tree.insert(k, v).map(drop));
    };
    match *kind {
        TreeKind::BTree => apply_in(&mut tree.open_tree(key)?, rest, op),
        TreeKind::Fixed { value_size } if rest.is_empty() => {
            let mut nested = tree.open_fixed_tree(key, usize::from(value_size))?;
            leaf_op(op, |k, v| nested.insert(k, v).map(drop), |_, _| Ok(()))
        }
        TreeKind::Multi if rest.is_empty() => {
            let mut nested = tree.open_multi_tree(key)?;
            leaf_op(op, |_, _| Ok(()), |k, v| nested.add(k, v).map(drop))
        }
        _ => Err(hrafn::Error::InvalidArgument(
            "a tree nested in a non-B+tree".into(),
        )),
    }
}

/// Runs an entry op with the innermost tree's insert (fixed-size or byte keys).
fn leaf_op(
    op: Op<'_>,
    mut fixed: impl FnMut(u64, &[u8]) -> hrafn::Result<()>,
    mut bytes: impl FnMut(&[u8], &[u8]) -> hrafn::Result<()>,
) -> hrafn::Result<()> {
    match op {
        Op::Create => Ok(()),
        Op::Fixed(k, v) => fixed(k, v),
        Op::Entry(k, v) => bytes(k, v),
    }
}
