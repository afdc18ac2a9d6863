//! Full-length positioned I/O on top of [`StorageFile`]: loops over short transfers and
//! `EINTR`, so callers never see a partial write as success.

use super::StorageFile;
use std::io;

/// Writes all of `buf` at `offset`, retrying short writes and `EINTR`.
///
/// # Errors
/// The first error other than `EINTR`; a write of zero bytes is `WriteZero`. On error an
/// unknown prefix of the range may have been written.
pub fn write_all_at(file: &dyn StorageFile, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.write_at(buf, offset) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes at `offset`, retrying short reads and `EINTR`.
///
/// # Errors
/// `UnexpectedEof` if the file ends first, or the first other error.
pub fn read_exact_at(
    file: &dyn StorageFile,
    mut buf: &mut [u8],
    mut offset: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        match file.read_at(buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file too short",
                ));
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
