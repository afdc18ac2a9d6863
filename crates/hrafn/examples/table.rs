//! Tables: records of byte fields with a primary key and a secondary index kept in step.
//! Shows insert, get by id (one page lookup: the id is the record's location), get by
//! primary key, lookups and range scans on the index, update and delete.
//!
//! Run it with:
//!
//! ```sh
//! cargo run --release -p hrafn --example table
//! ```

use hrafn::table::{Schema, index_key};
use hrafn::{Environment, Error, Options};

/// Fields of a person, in order.
const EMAIL: usize = 0;
const NAME: usize = 1;
const CITY: usize = 2;

fn text(bytes: Option<&[u8]>) -> String {
    String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let env = Environment::open(dir.path(), Options::default())?;

    // (email, name, city): the email is the primary key (unique), the city is indexed.
    // A table is always opened with the schema it was made with.
    let schema = Schema::new(3)
        .primary_key(EMAIL as u16)
        .index("by-city", &[CITY as u16]);

    let mut wtx = env.begin_write()?;
    let ada_id;
    {
        let mut people = wtx.open_table("people", &schema)?;
        ada_id = people.insert(&[b"ada@example.com", b"Ada", b"London"])?;
        people.insert(&[b"alan@example.com", b"Alan", b"London"])?;
        people.insert(&[b"grace@example.com", b"Grace", b"Arlington"])?;
        people.insert(&[b"edsger@example.com", b"Edsger", b"Austin"])?;

        // A unique key already taken is refused, and nothing changes.
        match people.insert(&[b"ada@example.com", b"Another Ada", b"Paris"]) {
            Err(Error::DuplicateKey { index, .. }) => println!("refused: {index} already holds it"),
            other => panic!("expected a duplicate key, got {other:?}"),
        }
        assert_eq!(people.len(), 4);
    }
    wtx.commit()?;

    let rtx = env.begin_read()?;
    let people = rtx.open_table("people", &schema)?;

    // By id: one page lookup.
    let ada = people.get(ada_id)?.expect("ada is a record");
    println!(
        "id {ada_id}: {} lives in {}",
        text(ada.field(NAME)),
        text(ada.field(CITY))
    );

    // By primary key: the id comes back with the record.
    let (grace_id, grace) = people
        .get_by_key(b"grace@example.com")?
        .expect("grace is a record");
    println!(
        "grace@example.com has id {grace_id}: {}",
        text(grace.field(NAME))
    );

    // One index key: the ids of every record holding it.
    let londoners = people.index_ids("by-city", &index_key(&[b"London"]))?;
    println!("{} people live in London", londoners.len());
    for id in &londoners {
        let person = people.get(*id)?.expect("an index names live records");
        println!("  {}", text(person.field(NAME)));
    }

    // A range of index keys, in key order: every city starting with "A".
    for (city, id) in people.index_range("by-city", &b"A"[..]..&b"B"[..])? {
        let person = people.get(id)?.expect("an index names live records");
        println!(
            "{}: {}",
            String::from_utf8_lossy(&city),
            text(person.field(NAME))
        );
    }

    // Records in primary-key order.
    let emails: Vec<String> = people
        .scan_by_key::<&[u8], _>(..)?
        .iter()
        .map(|(_, record)| text(record.field(EMAIL)))
        .collect();
    println!("by email: {emails:?}");
    drop(rtx);

    // Update and delete. An id is a location: an update returns the record's id
    // afterwards, which changes when the record has to move, and moving records can
    // empty a sparse page, which moves its other records too. Keep keys, not ids, across
    // changes, and find records again by key.
    let mut wtx = env.begin_write()?;
    {
        let mut people = wtx.open_table("people", &schema)?;
        let (alan_id, _) = people
            .get_by_key(b"alan@example.com")?
            .expect("alan is a record");
        let moved = people
            .update(
                alan_id,
                &[b"alan@example.com", b"Alan", b"Wilmslow, Cheshire, England"],
            )?
            .expect("alan is a record");
        println!("alan's id: {alan_id} before the update, {moved} after");

        let (ada_now, _) = people
            .get_by_key(b"ada@example.com")?
            .expect("ada is a record");
        if ada_now != ada_id {
            println!("ada's id moved too: {ada_id} -> {ada_now}");
        }
        assert!(people.delete(ada_now)?);
    }
    wtx.commit()?;

    let rtx = env.begin_read()?;
    let people = rtx.open_table("people", &schema)?;
    assert_eq!(people.len(), 3);
    assert!(people.index_ids("by-city", b"London")?.is_empty());
    println!("after the changes: {} people", people.len());
    drop(rtx);
    env.close()?;
    Ok(())
}
