//! Real files on a Linux file system.
//!
//! Journal files are opened with the raw `O_DIRECT|O_DSYNC` flags (some wrappers quietly map
//! DSYNC to SYNC); where the file system refuses `O_DIRECT` (tmpfs answers `EINVAL`) the file
//! falls back to `O_DSYNC` alone, which is still durable on return, only slower.
#![allow(unsafe_code)] // memmap2::Mmap::map is unsafe; see the SAFETY note in `map`.

use super::{FileKind, Mapping, Storage, StorageFile};
use std::any::Any;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The environment directory on a real file system.
#[derive(Debug, Clone)]
pub struct FileStorage {
    root: PathBuf,
    /// Files are opened for reading only, and none is created ([`FileStorage::read_only`]).
    read_only: bool,
}

impl FileStorage {
    /// Uses `root` as the environment directory, creating it (and missing ancestors) if
    /// needed, durably: each directory made is synced in its parent.
    ///
    /// # Errors
    /// If the directory cannot be created.
    pub fn new(root: impl AsRef<Path>) -> io::Result<FileStorage> {
        create_dirs_synced(root.as_ref())?;
        Ok(FileStorage {
            root: root.as_ref().to_path_buf(),
            read_only: false,
        })
    }

    /// Uses `root`, which must exist already (for read-only opens, which create nothing).
    ///
    /// # Errors
    /// `NotFound` if there is no such directory.
    pub fn existing(root: impl AsRef<Path>) -> io::Result<FileStorage> {
        if !fs::metadata(root.as_ref())?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            ));
        }
        Ok(FileStorage {
            root: root.as_ref().to_path_buf(),
            read_only: false,
        })
    }

    /// Uses `root`, which must exist already, for reading only: files are opened without
    /// write access, so a read-only open or a backup's verify works on read-only files and
    /// file systems. Where `LOCK` cannot be written (a read-only mount), a reader takes no
    /// slot but keeps writers out while it is open, and is refused while one is in.
    ///
    /// # Errors
    /// `NotFound` if there is no such directory.
    pub fn read_only(root: impl AsRef<Path>) -> io::Result<FileStorage> {
        Ok(FileStorage {
            read_only: true,
            ..FileStorage::existing(root)?
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        if name.is_empty() {
            self.root.clone()
        } else {
            self.root.join(name)
        }
    }
}

/// The directory holding `path` (`.` for a bare name).
pub(crate) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Creates `dir` and any missing ancestors, syncing the directory that holds each one it
/// creates: a new directory's entry is durable only once its parent is synced, and files
/// synced inside a directory whose entry is lost are lost with it.
///
/// # Errors
/// The first failure examining, creating or syncing a directory.
pub(crate) fn create_dirs_synced(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    loop {
        match fs::symlink_metadata(at) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(at),
            Err(e) => return Err(e),
        }
        match at.parent() {
            Some(up) if !up.as_os_str().is_empty() => at = up,
            _ => break,
        }
    }
    for created in missing.into_iter().rev() {
        match fs::create_dir(created) {
            Ok(()) => {}
            // Made meanwhile by someone else, who syncs it.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
        File::open(parent_of(created))?.sync_all()?;
    }
    Ok(())
}

impl Storage for FileStorage {
    fn open(&self, name: &str, kind: FileKind, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let path = self.path(name);
        if self.read_only {
            if create {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("{name}: this storage was opened read-only"),
                ));
            }
            return Ok(Arc::new(RealFile {
                file: File::open(&path)?,
            }));
        }
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(create);
        let file = match kind {
            FileKind::JournalDurable => {
                let direct = options
                    .clone()
                    .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
                    .open(&path);
                match direct {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        options.custom_flags(libc::O_DSYNC).open(&path)?
                    }
                    other => other?,
                }
            }
            FileKind::Data | FileKind::JournalBuffered | FileKind::Header => options.open(&path)?,
        };
        Ok(Arc::new(RealFile { file }))
    }

    fn exists(&self, name: &str) -> io::Result<bool> {
        self.path(name).try_exists()
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path(from), self.path(to))
    }

    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(self.path(dir))? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn create_dir(&self, dir: &str) -> io::Result<()> {
        fs::create_dir_all(self.path(dir))
    }

    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        File::open(self.path(dir))?.sync_all()
    }

    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        let file = super::lock_file::lock_writer(&self.path(super::lock_file::LOCK_FILE))?;
        Ok(Box::new(file))
    }

    fn process_readers(&self) -> io::Result<Option<Arc<dyn super::ProcessReaders>>> {
        match super::lock_file::LockFileReaders::open(&self.path(super::lock_file::LOCK_FILE)) {
            Ok(table) => Ok(Some(Arc::new(table))),
            // A read-only mount may show a directory another mount writes: the reader keeps
            // writers out instead of taking a slot.
            Err(e) if self.read_only && e.kind() == io::ErrorKind::ReadOnlyFilesystem => {
                let path = self.path(super::lock_file::LOCK_FILE);
                Ok(super::lock_file::WriterExcluded::hold(&path)?
                    .map(|hold| Arc::new(hold) as Arc<dyn super::ProcessReaders>))
            }
            Err(e) => Err(e),
        }
    }

    fn size_bytes(&self) -> io::Result<Option<u64>> {
        directory_bytes(&self.root).map(Some)
    }
}

/// The lengths of the files under `dir`, summed over its subdirectories (symbolic links
/// are not followed).
pub(crate) fn directory_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let metadata = entry.metadata()?;
        if metadata.is_dir() {
            total += directory_bytes(&entry.path())?;
        } else if metadata.is_file() {
            total += metadata.len();
        }
    }
    Ok(total)
}

struct RealFile {
    file: File,
}

impl StorageFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.file.write_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn truncate(&self, len_bytes: u64) -> io::Result<()> {
        if len_bytes < self.len()? {
            self.file.set_len(len_bytes)?;
        }
        Ok(())
    }

    fn allocate(&self, len_bytes: u64) -> io::Result<()> {
        let current = self.len()?;
        if len_bytes <= current {
            return Ok(());
        }
        // fallocate, never ftruncate: a sparse hole under a mapping turns ENOSPC into SIGBUS.
        // Retried when a signal interrupts it (tmpfs gives up on any pending signal).
        let allocated = loop {
            match rustix::fs::fallocate(
                &self.file,
                rustix::fs::FallocateFlags::empty(),
                current,
                len_bytes - current,
            ) {
                Err(e) if e == rustix::io::Errno::INTR => continue,
                other => break other,
            }
        };
        match allocated {
            Ok(()) => Ok(()),
            Err(e) if e == rustix::io::Errno::OPNOTSUPP => {
                // File systems without fallocate: write zeros so the blocks really exist.
                let zeros = vec![0u8; 1 << 20];
                let mut offset = current;
                while offset < len_bytes {
                    let n = usize::try_from((len_bytes - offset).min(zeros.len() as u64))
                        .expect("bounded by the 1 MiB buffer");
                    super::write_all_at(self, &zeros[..n], offset)?;
                    offset += n as u64;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn map(&self, len_bytes: u64) -> io::Result<Arc<dyn Mapping>> {
        let len = usize::try_from(len_bytes)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        if len == 0 {
            return Ok(Arc::new(EmptyMapping));
        }
        // SAFETY: the mapping is read-only and the engine never reads a byte beyond the
        // allocated length of the file (the caller passes at most `len()`, and the file never
        // shrinks while the environment is open). Other writers of the file would be a
        // contract violation; the writer's lock keeps other Hrafn writers out, and the reader
        // table (`lock_file.rs`) keeps a writer from writing pages a reader process reads.
        // Concurrent `pwrite`s by the flusher only touch pages no live reader reads from the
        // data file (the flush rule in `flush.rs`), so readers never observe a torn page.
        // Scratch files (`scratch/spill.rs`) are allocated whole before they are mapped,
        // never shrink, and each region is written once before any reader can refer to it.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&self.file)? };
        Ok(Arc::new(RealMapping { map }))
    }
}

struct RealMapping {
    map: memmap2::Mmap,
}

impl Mapping for RealMapping {
    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn advise_random(&self) -> io::Result<()> {
        self.map.advise(memmap2::Advice::Random)
    }
}

struct EmptyMapping;

impl Mapping for EmptyMapping {
    fn bytes(&self) -> &[u8] {
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_would_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FileStorage::new(dir.path()).expect("storage");
        let guard = storage.lock().expect("first lock");
        let err = storage.lock().expect_err("second lock must fail");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(guard);
        storage.lock().expect("lock after release");
    }

    /// Read-only storage opens files without write access (so read-only files and file
    /// systems serve a read-only open) and creates none.
    #[test]
    fn read_only_storage_reads_but_neither_writes_nor_creates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let writable = FileStorage::new(dir.path()).expect("storage");
        let f = writable.open("data", FileKind::Data, true).expect("open");
        super::super::write_all_at(&*f, b"hello", 0).expect("write");
        let storage = FileStorage::read_only(dir.path()).expect("storage");
        let f = storage.open("data", FileKind::Data, false).expect("open");
        let mut bytes = [0u8; 5];
        f.read_at(&mut bytes, 0).expect("read");
        assert_eq!(&bytes, b"hello");
        assert!(super::super::write_all_at(&*f, b"x", 0).is_err(), "written");
        let created = storage.open("new", FileKind::Data, true);
        assert_eq!(
            created.err().map(|e| e.kind()),
            Some(io::ErrorKind::PermissionDenied)
        );
        assert!(!dir.path().join("new").exists());
    }

    #[test]
    fn allocate_then_map_sees_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FileStorage::new(dir.path()).expect("storage");
        let f = storage.open("data", FileKind::Data, true).expect("open");
        f.allocate(8192).expect("allocate");
        assert_eq!(f.len().expect("len"), 8192);
        let map = f.map(8192).expect("map");
        super::super::write_all_at(&*f, b"hello", 100).expect("write");
        assert_eq!(&map.bytes()[100..105], b"hello");
    }

    #[test]
    fn journal_file_accepts_aligned_direct_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FileStorage::new(dir.path()).expect("storage");
        let f = storage
            .open("j", FileKind::JournalDurable, true)
            .expect("open");
        f.allocate(8192).expect("allocate");
        let mut raw = vec![0u8; 4096 * 2];
        let start = raw.as_ptr().align_offset(4096);
        let block = &mut raw[start..start + 4096];
        block[0] = 7;
        super::super::write_all_at(&*f, block, 4096).expect("direct write");
        // O_DIRECT reads need alignment too; recovery reads through a buffered handle.
        let reader = storage
            .open("j", FileKind::JournalBuffered, false)
            .expect("open");
        let mut back = [0u8; 1];
        super::super::read_exact_at(&*reader, &mut back, 4096).expect("read");
        assert_eq!(back[0], 7);
    }
}
