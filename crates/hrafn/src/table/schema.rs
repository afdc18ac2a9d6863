//! A table's schema: how many fields a record has, which field is the primary key, and the
//! secondary indexes. Stored in the table, compared at every open.

use crate::error::{Error, Result};
use crate::page::{corrupt, get_u16};

/// How an index keys its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// One or more fields (composite), any bytes: a multi-value tree from the index key
    /// ([`super::index_key`] of the fields) to the ids of the records holding it.
    Variable,
    /// One 8-byte field read as a big-endian `u64`, unique: a fixed-size tree from that
    /// number to the record's id.
    Fixed,
}

/// One secondary index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    /// Unique within the table; for a global index, the name of its tree.
    pub name: String,
    pub kind: IndexKind,
    /// The fields it covers, in key order.
    pub fields: Vec<u16>,
    /// Kept in a named tree of the environment that several tables may share (record ids
    /// are physical locations, so they never collide across tables).
    pub global: bool,
}

/// A table's shape. Build one with [`Schema::new`] and the index methods.
///
/// ```
/// use hrafn::table::Schema;
/// // (name, email, age as u64 big-endian)
/// let people = Schema::new(3)
///     .primary_key(1)
///     .index("by-name", &[0])
///     .fixed_index("by-age", 2);
/// # let _ = people;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    pub(crate) field_count: u16,
    pub(crate) primary_key: Option<u16>,
    pub(crate) indexes: Vec<IndexDef>,
}

/// Longest index name.
pub const INDEX_NAME_MAX_BYTES: usize = 200;

const SCHEMA_VERSION: u8 = 1;
const NO_PRIMARY_KEY: u16 = u16::MAX;

impl Schema {
    /// Records of `field_count` fields, no primary key, no index.
    pub fn new(field_count: u16) -> Schema {
        Schema {
            field_count,
            primary_key: None,
            indexes: Vec::new(),
        }
    }

    /// Makes `field` the primary key: unique, and the order of [`crate::Table::scan_by_key`].
    pub fn primary_key(mut self, field: u16) -> Schema {
        self.primary_key = Some(field);
        self
    }

    fn with(mut self, name: &str, kind: IndexKind, fields: &[u16], global: bool) -> Schema {
        self.indexes.push(IndexDef {
            name: name.to_owned(),
            kind,
            fields: fields.to_vec(),
            global,
        });
        self
    }

    /// A variable index over `fields` (composite when more than one).
    pub fn index(self, name: &str, fields: &[u16]) -> Schema {
        self.with(name, IndexKind::Variable, fields, false)
    }

    /// A unique index over one 8-byte field, in numeric (big-endian) order.
    pub fn fixed_index(self, name: &str, field: u16) -> Schema {
        self.with(name, IndexKind::Fixed, &[field], false)
    }

    /// A variable index kept in the environment's multi-value tree `name`, which other
    /// tables may share.
    pub fn global_index(self, name: &str, fields: &[u16]) -> Schema {
        self.with(name, IndexKind::Variable, fields, true)
    }

    /// A unique fixed index kept in the environment's fixed-size tree `name` (8-byte
    /// values), which other tables may share.
    pub fn global_fixed_index(self, name: &str, field: u16) -> Schema {
        self.with(name, IndexKind::Fixed, &[field], true)
    }

    /// Number of fields of every record.
    pub fn field_count(&self) -> u16 {
        self.field_count
    }

    /// The primary key's field, if there is one.
    pub fn primary_key_field(&self) -> Option<u16> {
        self.primary_key
    }

    /// The indexes, in definition order.
    pub fn indexes(&self) -> &[IndexDef] {
        &self.indexes
    }

    /// Refuses a schema that cannot work.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument(what));
        if self.field_count == 0 || self.field_count == u16::MAX {
            return bad(format!("a table of {} fields", self.field_count));
        }
        if self.primary_key.is_some_and(|f| f >= self.field_count) {
            return bad("the primary key is not a field".into());
        }
        // Counts are stored in 16 bits (`docs/format.md`, "Tables").
        if self.indexes.len() > usize::from(u16::MAX) {
            return bad(format!("{} indexes", self.indexes.len()));
        }
        for (i, index) in self.indexes.iter().enumerate() {
            if index.name.is_empty() || index.name.len() > INDEX_NAME_MAX_BYTES {
                return bad(format!("index name {:?}", index.name));
            }
            if self.indexes[..i].iter().any(|o| o.name == index.name) {
                return bad(format!("two indexes named {:?}", index.name));
            }
            if index.fields.is_empty() || index.fields.iter().any(|&f| f >= self.field_count) {
                return bad(format!(
                    "index {:?} covers no or unknown fields",
                    index.name
                ));
            }
            if index.fields.len() > usize::from(u16::MAX) {
                return bad(format!(
                    "index {:?} covers {} fields",
                    index.name,
                    index.fields.len()
                ));
            }
            if index.kind == IndexKind::Fixed && index.fields.len() != 1 {
                return bad(format!("fixed index {:?} covers one field", index.name));
            }
        }
        Ok(())
    }

    /// Encodes the schema (see `docs/format.md`, "Tables").
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![SCHEMA_VERSION];
        out.extend_from_slice(&self.field_count.to_le_bytes());
        out.extend_from_slice(&self.primary_key.unwrap_or(NO_PRIMARY_KEY).to_le_bytes());
        out.extend_from_slice(&(self.indexes.len() as u16).to_le_bytes());
        for index in &self.indexes {
            out.push(match index.kind {
                IndexKind::Variable => 0,
                IndexKind::Fixed => 1,
            });
            out.push(u8::from(index.global));
            out.extend_from_slice(&(index.name.len() as u16).to_le_bytes());
            out.extend_from_slice(index.name.as_bytes());
            out.extend_from_slice(&(index.fields.len() as u16).to_le_bytes());
            for field in &index.fields {
                out.extend_from_slice(&field.to_le_bytes());
            }
        }
        out
    }

    /// Decodes a stored schema.
    ///
    /// # Errors
    /// [`Error::Corruption`] naming `page_number` for bytes that are not a valid schema.
    pub fn decode(bytes: &[u8], page_number: u64) -> Result<Schema> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let part = bytes
                .get(at..at + n)
                .ok_or_else(|| corrupt(page_number, "table schema cut short"))?;
            at += n;
            Ok(part)
        };
        if take(1)?[0] != SCHEMA_VERSION {
            return Err(corrupt(page_number, "table schema of an unknown version"));
        }
        let field_count = get_u16(take(2)?, 0);
        let primary_key = match get_u16(take(2)?, 0) {
            NO_PRIMARY_KEY => None,
            field => Some(field),
        };
        let index_count = usize::from(get_u16(take(2)?, 0));
        let mut indexes = Vec::new();
        for _ in 0..index_count {
            let head = take(4)?;
            let kind = match head[0] {
                0 => IndexKind::Variable,
                1 => IndexKind::Fixed,
                _ => return Err(corrupt(page_number, "table index of an unknown kind")),
            };
            let global = match head[1] {
                0 => false,
                1 => true,
                _ => return Err(corrupt(page_number, "table index flag out of range")),
            };
            let name_len = usize::from(get_u16(head, 2));
            let name = std::str::from_utf8(take(name_len)?)
                .map_err(|_| corrupt(page_number, "table index name is not UTF-8"))?
                .to_owned();
            let field_count = usize::from(get_u16(take(2)?, 0));
            let fields = take(field_count * 2)?
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            indexes.push(IndexDef {
                name,
                kind,
                fields,
                global,
            });
        }
        if at != bytes.len() {
            return Err(corrupt(page_number, "bytes after the table schema"));
        }
        let schema = Schema {
            field_count,
            primary_key,
            indexes,
        };
        schema
            .validate()
            .map_err(|e| corrupt(page_number, format!("stored table schema: {e}")))?;
        Ok(schema)
    }

    /// Why `self` (stored) differs from `wanted`, if it does.
    pub(crate) fn difference(&self, wanted: &Schema) -> Option<String> {
        if self.field_count != wanted.field_count {
            return Some(format!(
                "{} fields, not {}",
                self.field_count, wanted.field_count
            ));
        }
        if self.primary_key != wanted.primary_key {
            return Some(format!(
                "primary key {:?}, not {:?}",
                self.primary_key, wanted.primary_key
            ));
        }
        if self.indexes != wanted.indexes {
            let names = |s: &Schema| s.indexes.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
            return Some(format!(
                "indexes {:?} (or their fields), not {:?}",
                names(self),
                names(wanted)
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_round_trip_and_damage_never_panics() {
        let schema = Schema::new(4)
            .primary_key(0)
            .index("a", &[1, 2])
            .fixed_index("n", 3)
            .global_index("g", &[1]);
        schema.validate().expect("valid");
        let bytes = schema.encode();
        assert_eq!(Schema::decode(&bytes, 1).expect("decodes"), schema);
        for cut in 0..bytes.len() {
            assert!(Schema::decode(&bytes[..cut], 1).is_err());
        }
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x5A;
            let _ = Schema::decode(&damaged, 1);
        }
        assert!(Schema::new(2).primary_key(2).validate().is_err());
        assert!(Schema::new(2).index("x", &[]).validate().is_err());
        // Counts past 16 bits would be stored wrapped, and the table never open again.
        let wide = Schema::new(1).index("x", &vec![0u16; 65_536]);
        assert!(matches!(wide.validate(), Err(Error::InvalidArgument(_))));
        let widest = Schema::new(1).index("x", &vec![0u16; 65_535]);
        widest.validate().expect("valid");
        assert_eq!(
            Schema::decode(&widest.encode(), 1).expect("decodes"),
            widest
        );
        let many = (0..65_536).fold(Schema::new(1), |s, i| s.index(&format!("i{i}"), &[0]));
        assert!(matches!(many.validate(), Err(Error::InvalidArgument(_))));
        assert!(
            Schema::new(2)
                .index("x", &[0])
                .index("x", &[1])
                .validate()
                .is_err()
        );
        assert!(Schema::new(2).index("", &[0]).validate().is_err());
        assert!(Schema::new(0).validate().is_err());
        assert!(schema.difference(&Schema::new(4).primary_key(0)).is_some());
        assert!(schema.difference(&schema.clone()).is_none());
    }
}
