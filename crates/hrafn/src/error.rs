//! Error values. Every failure the engine can report is a variant here; nothing panics on
//! bad input or bad bytes from disk.

use std::io;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a corruption was found. Carried by [`Error::Corruption`] so a user (or the `check`
/// tool) can tell which file and which position hold the bad bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptionSite {
    /// A header file (`header.a` / `header.b`).
    Header { file: String },
    /// A page of the data file.
    Page { page_number: u64 },
    /// A journal record.
    Journal {
        journal_number: u64,
        offset_bytes: u64,
    },
    /// The environment as a whole (e.g. files missing or inconsistent).
    Environment,
}

impl std::fmt::Display for CorruptionSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorruptionSite::Header { file } => write!(f, "header file {file}"),
            CorruptionSite::Page { page_number } => write!(f, "page {page_number}"),
            CorruptionSite::Journal {
                journal_number,
                offset_bytes,
            } => {
                write!(f, "journal {journal_number} at byte {offset_bytes}")
            }
            CorruptionSite::Environment => write!(f, "environment"),
        }
    }
}

/// Errors returned by Hrafn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bytes on disk failed validation (checksum, structure, hash chain or ordering).
    #[error("corruption in {site}: {reason}")]
    Corruption {
        site: CorruptionSite,
        reason: String,
    },
    /// The disk is full (ENOSPC). Nothing acknowledged is lost; writes may resume once space
    /// is freed.
    #[error("no space left on device while {context}")]
    NoSpace { context: String },
    /// Any other I/O failure, with what the engine was doing.
    #[error("I/O error while {context}: {source}")]
    Io { context: String, source: io::Error },
    /// Another handle (in this or another process) has the environment open for writing;
    /// or, at a writable open that must replay the journal, a read-only process holds a
    /// snapshot older than the journal's end (replay would change pages under it); or a
    /// read-only process on a read-only mount holds it (such a reader keeps writers out,
    /// and is refused while one is in).
    #[error("environment is locked by another opener")]
    Locked,
    /// A key is longer than [`crate::limits::KEY_SIZE_MAX_BYTES`].
    #[error("key of {size_bytes} bytes exceeds the limit of {limit_bytes} bytes")]
    KeyTooLarge {
        size_bytes: usize,
        limit_bytes: usize,
    },
    /// A value is longer than [`crate::limits::VALUE_SIZE_MAX_BYTES`].
    #[error("value of {size_bytes} bytes exceeds the limit of {limit_bytes} bytes")]
    ValueTooLarge {
        size_bytes: usize,
        limit_bytes: usize,
    },
    /// The scratch area (page copies of recent transactions) is at its configured limit.
    /// It drains as the flusher writes pages to the data file and old readers end; the
    /// oldest reader's age (if any reader is open) says which reader holds it.
    #[error(
        "scratch is full: {used_bytes} of {limit_bytes} bytes in use{}",
        match oldest_reader_age_ms {
            Some(age) => format!("; the oldest read transaction has been open for {age} ms"),
            None => String::new(),
        }
    )]
    ScratchFull {
        used_bytes: u64,
        limit_bytes: u64,
        oldest_reader_age_ms: Option<u64>,
    },
    /// One write transaction changed more pages than the whole scratch limit holds: it can
    /// never commit, however long it waits. Split it, or raise
    /// [`crate::Options::scratch_limit_bytes`].
    #[error(
        "write transaction needs {size_bytes} bytes of scratch, more than the whole limit of {scratch_limit_bytes} bytes"
    )]
    TransactionTooLarge {
        size_bytes: u64,
        scratch_limit_bytes: u64,
    },
    /// A sync or journal write failed earlier, or the flusher thread panicked; the
    /// environment refuses writes until reopened.
    #[error("environment is poisoned by an earlier write failure: {cause}")]
    Poisoned { cause: String },
    /// The named tree does not exist.
    #[error("tree {name:?} does not exist")]
    TreeNotFound { name: String },
    /// Every slot of the reader table is taken.
    #[error("too many concurrent read transactions (limit {readers_max})")]
    ReadersFull { readers_max: usize },
    /// A configured or structural limit was exceeded.
    #[error("limit exceeded: {what}")]
    LimitExceeded { what: String },
    /// The environment was written by an incompatible format version.
    #[error("unsupported format version {found} (this build reads {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    /// An expectation of a merged write request did not hold: another commit changed the
    /// key since the request's snapshot. Only that request fails.
    #[error("conflict on key {key:?} of tree {tree:?}")]
    Conflict { tree: String, key: Vec<u8> },
    /// A merged write request panicked; its changes were discarded.
    #[error("write request panicked: {message}")]
    RequestPanicked { message: String },
    /// A merged write request waited longer than allowed for room in the queue.
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout { what: String, waited_ms: u64 },
    /// Invalid argument or option.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A tree was opened as another kind than it was made (a B+tree as a fixed-size tree,
    /// or a fixed-size tree with another value size).
    #[error("tree {name:?} is {found}, not {wanted}")]
    WrongTreeKind {
        name: String,
        found: String,
        wanted: String,
    },
    /// A write on an environment opened with [`crate::Environment::open_read_only`].
    #[error("the environment is open read-only")]
    ReadOnly,
    /// A table insert or update would give a unique index (the primary key, a fixed index)
    /// a second record under one key. Nothing was changed.
    #[error("table {table:?}: index {index:?} already holds key {key:?}")]
    DuplicateKey {
        table: String,
        index: String,
        key: Vec<u8>,
    },
    /// A table was opened with another schema than it was made with, and no migration was
    /// asked for.
    #[error("table {table:?} has another schema: {reason}")]
    SchemaMismatch { table: String, reason: String },
    /// An earlier operation of this write transaction failed after it had changed pages
    /// (a table operation, a migration, a nested tree's header update): the transaction
    /// holds a half-done change and can only be dropped.
    #[error("the write transaction cannot commit: an earlier operation failed half way ({cause})")]
    TransactionFailed { cause: String },
    /// Stored bytes did not decode as the type a typed handle expects (`hrafn::typed`), or a
    /// value did not encode.
    #[error("cannot decode {what}")]
    Decode { what: String },
    /// A backup (or a chain of them) that does not verify: unfinished, damaged, or not the
    /// continuation of the one before it (`hrafn::backup`).
    #[error("backup {path}: {reason}")]
    InvalidBackup { path: String, reason: String },
}

impl Error {
    /// Builds an I/O error with context, mapping ENOSPC to [`Error::NoSpace`].
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        if source.raw_os_error() == Some(libc::ENOSPC)
            || source.kind() == io::ErrorKind::StorageFull
        {
            Error::NoSpace {
                context: context.into(),
            }
        } else {
            Error::Io {
                context: context.into(),
                source,
            }
        }
    }

    /// Builds a corruption error.
    pub(crate) fn corruption(site: CorruptionSite, reason: impl Into<String>) -> Error {
        Error::Corruption {
            site,
            reason: reason.into(),
        }
    }

    /// A copy of this error for another waiter of the same merged transaction
    /// (`io::Error` is not `Clone`; its kind and message are kept).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corruption { site, reason } => Error::Corruption {
                site: site.clone(),
                reason: reason.clone(),
            },
            Error::NoSpace { context } => Error::NoSpace {
                context: context.clone(),
            },
            Error::Locked => Error::Locked,
            Error::ReadOnly => Error::ReadOnly,
            Error::WrongTreeKind {
                name,
                found,
                wanted,
            } => Error::WrongTreeKind {
                name: name.clone(),
                found: found.clone(),
                wanted: wanted.clone(),
            },
            Error::KeyTooLarge {
                size_bytes,
                limit_bytes,
            } => Error::KeyTooLarge {
                size_bytes: *size_bytes,
                limit_bytes: *limit_bytes,
            },
            Error::ValueTooLarge {
                size_bytes,
                limit_bytes,
            } => Error::ValueTooLarge {
                size_bytes: *size_bytes,
                limit_bytes: *limit_bytes,
            },
            Error::ScratchFull {
                used_bytes,
                limit_bytes,
                oldest_reader_age_ms,
            } => Error::ScratchFull {
                used_bytes: *used_bytes,
                limit_bytes: *limit_bytes,
                oldest_reader_age_ms: *oldest_reader_age_ms,
            },
            Error::TransactionTooLarge {
                size_bytes,
                scratch_limit_bytes,
            } => Error::TransactionTooLarge {
                size_bytes: *size_bytes,
                scratch_limit_bytes: *scratch_limit_bytes,
            },
            Error::Poisoned { cause } => Error::Poisoned {
                cause: cause.clone(),
            },
            Error::TreeNotFound { name } => Error::TreeNotFound { name: name.clone() },
            Error::ReadersFull { readers_max } => Error::ReadersFull {
                readers_max: *readers_max,
            },
            Error::LimitExceeded { what } => Error::LimitExceeded { what: what.clone() },
            Error::UnsupportedVersion { found, supported } => Error::UnsupportedVersion {
                found: *found,
                supported: *supported,
            },
            Error::Conflict { tree, key } => Error::Conflict {
                tree: tree.clone(),
                key: key.clone(),
            },
            Error::RequestPanicked { message } => Error::RequestPanicked {
                message: message.clone(),
            },
            Error::Timeout { what, waited_ms } => Error::Timeout {
                what: what.clone(),
                waited_ms: *waited_ms,
            },
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::DuplicateKey { table, index, key } => Error::DuplicateKey {
                table: table.clone(),
                index: index.clone(),
                key: key.clone(),
            },
            Error::SchemaMismatch { table, reason } => Error::SchemaMismatch {
                table: table.clone(),
                reason: reason.clone(),
            },
            Error::Decode { what } => Error::Decode { what: what.clone() },
            Error::TransactionFailed { cause } => Error::TransactionFailed {
                cause: cause.clone(),
            },
            Error::InvalidBackup { path, reason } => Error::InvalidBackup {
                path: path.clone(),
                reason: reason.clone(),
            },
        }
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}

/// The message a caught panic carries.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_maps_to_no_space() {
        let e = Error::io("writing", io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(e, Error::NoSpace { .. }), "{e}");
        let e = Error::io("writing", io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(e, Error::Io { .. }), "{e}");
    }
}
