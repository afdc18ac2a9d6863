//! `docs/format.md` and the code agree on every offset.

use hrafn::{header, journal::record, meta, page};

/// Rows `| offset | size | const | ...` of the table under `heading`.
fn table(doc: &str, heading: &str) -> Vec<(usize, String)> {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("heading {heading} missing"));
    doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let offset = cells.get(1)?.parse().ok()?;
            let name = cells.get(3)?.trim_matches('`').to_owned();
            Some((offset, name))
        })
        .collect()
}

fn check(doc: &str, heading: &str, expected: &[(&str, usize)]) {
    let rows = table(doc, heading);
    for (name, offset) in expected {
        let row = rows
            .iter()
            .find(|(_, n)| n == name)
            .unwrap_or_else(|| panic!("{heading}: {name} not documented"));
        assert_eq!(
            row.0, *offset,
            "{heading}: {name} documented at {} but is at {offset}",
            row.0
        );
    }
}

#[test]
fn offsets_match_the_document() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/format.md"))
        .expect("docs/format.md");
    use header::offsets as h;
    check(
        &doc,
        "## Header file",
        &[
            ("MAGIC", h::MAGIC),
            ("VERSION", h::VERSION),
            ("PAGE_SIZE", h::PAGE_SIZE),
            ("REVISION", h::REVISION),
            ("ENV_ID", h::ENV_ID),
            ("SYNCED_TXN_ID", h::SYNCED_TXN_ID),
            ("JOURNAL_NUMBER", h::JOURNAL_NUMBER),
            ("JOURNAL_OFFSET", h::JOURNAL_OFFSET),
            ("CHAIN_CHECKSUM", h::CHAIN_CHECKSUM),
            ("NEXT_PAGE_NUMBER", h::NEXT_PAGE_NUMBER),
            ("RESERVED", h::RESERVED),
            ("CHECKSUM", h::CHECKSUM),
        ],
    );
    check(
        &doc,
        "## Page header",
        &[
            ("OFFSET_CHECKSUM", page::OFFSET_CHECKSUM),
            ("OFFSET_PAGE_NUMBER", page::OFFSET_PAGE_NUMBER),
            ("OFFSET_KIND", page::OFFSET_KIND),
            ("OFFSET_FLAGS", page::OFFSET_FLAGS),
            ("OFFSET_ENTRY_COUNT", page::OFFSET_ENTRY_COUNT),
            ("OFFSET_FREE_LOWER", page::OFFSET_FREE_LOWER),
            ("OFFSET_FREE_UPPER", page::OFFSET_FREE_UPPER),
            ("OFFSET_AUX", page::OFFSET_AUX),
        ],
    );
    use meta::offsets as m;
    check(
        &doc,
        "## Meta page",
        &[
            ("MAGIC", m::MAGIC),
            ("ROOT_PAGE", m::ROOT_PAGE),
            ("TREE_COUNT", m::TREE_COUNT),
            ("NEXT_PAGE_NUMBER", m::NEXT_PAGE_NUMBER),
            ("SECTION_COUNT", m::SECTION_COUNT),
            ("DIRECTORY_COUNT", m::DIRECTORY_COUNT),
            ("DIRECTORIES", m::DIRECTORIES),
        ],
    );
    use record::offsets as r;
    check(
        &doc,
        "## Journal record",
        &[
            ("MAGIC", r::MAGIC),
            ("VERSION", r::VERSION),
            ("FLAGS", r::FLAGS),
            ("TXN_ID", r::TXN_ID),
            ("JOURNAL_NUMBER", r::JOURNAL_NUMBER),
            ("PREV_CHECKSUM", r::PREV_CHECKSUM),
            ("PAYLOAD_SIZE", r::PAYLOAD_SIZE),
            ("UNCOMPRESSED_SIZE", r::UNCOMPRESSED_SIZE),
            ("RECORD_SIZE", r::RECORD_SIZE),
            ("PAGE_COUNT", r::PAGE_COUNT),
            ("NEXT_PAGE_NUMBER", r::NEXT_PAGE_NUMBER),
            ("ROOT_PAGE", r::ROOT_PAGE),
            ("TIMESTAMP_MS", r::TIMESTAMP_MS),
            ("PAYLOAD_CHECKSUM", r::PAYLOAD_CHECKSUM),
            ("RESERVED", r::RESERVED),
            ("HEADER_CHECKSUM", r::HEADER_CHECKSUM),
        ],
    );
    assert!(
        doc.contains(&format!("version {}", header::FORMAT_VERSION)),
        "document names the format version"
    );
}
