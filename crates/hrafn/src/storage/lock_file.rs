//! The `LOCK` file: the writer's lock, and the table of reader processes.
//!
//! One process may open an environment for writing; any number may open it read-only at
//! the same time (`Environment::open_read_only`). Each holds open file description (OFD)
//! byte-range locks, which the kernel drops when the process dies, so a crashed process
//! never leaves a lock or a reader behind:
//!
//! | bytes | content | lock |
//! |---|---|---|
//! | 0..8 | data-write generation (u64 LE): odd while the writer writes data pages, a header or retires journals | the writer's: exclusive on 0..64 |
//! | 64 + 16·i .. +8 | reader slot `i`: the transaction its snapshot reads, plus one (0 = free) | the reader's: exclusive on its 16 bytes |
//! | 72 + 16·i .. +8 | the reader's process id (for people, not for the protocol) | |
//!
//! The writer's flusher writes no page version newer than the oldest live slot, so a reader
//! process reading the data file under its snapshot never sees a page change. A reader
//! claims its slot before it reads anything, then waits for a data-write phase in progress
//! (which may not have seen the slot) to end; every later phase sees it.
//!
//! Where `LOCK` cannot be written (a read-only mount of a directory another mount may
//! write), a reader cannot take a slot; it takes a shared lock on the writer's bytes instead
//! ([`WriterExcluded`]), so no writer runs while it reads.
#![allow(unsafe_code)] // fcntl(2) byte-range locks take a pointer to a `struct flock`.

use super::ProcessReaders;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

/// File name inside the environment directory.
pub const LOCK_FILE: &str = "LOCK";
/// Reader processes that can hold a snapshot at once.
pub const PROCESS_READERS_MAX: usize = 64;
const WRITER_RANGE: (u64, u64) = (0, 64);
const SLOTS_OFFSET: u64 = 64;
const SLOT_SIZE_BYTES: u64 = 16;

fn slot_range(slot: usize) -> (u64, u64) {
    (
        SLOTS_OFFSET + slot as u64 * SLOT_SIZE_BYTES,
        SLOT_SIZE_BYTES,
    )
}

fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// `fcntl(F_OFD_SETLK / F_OFD_GETLK)` on `len` bytes from `start`. For `GETLK`, returns
/// the type of a conflicting lock (`F_UNLCK` when there is none).
fn ofd_lock(
    file: &File,
    command: i32,
    lock_type: i32,
    (start, len): (u64, u64),
) -> io::Result<i32> {
    // SAFETY: `flock` is a plain C struct for which all-zero bytes are a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = lock_type as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start as libc::off_t;
    lock.l_len = len as libc::off_t;
    lock.l_pid = 0; // required for OFD locks
    // SAFETY: the descriptor is open for the duration of the call (borrowed from `file`),
    // and `lock` is a valid, exclusively borrowed `struct flock` the kernel reads (SETLK)
    // or fills in (GETLK); it outlives the call.
    let result = unsafe { libc::fcntl(file.as_raw_fd(), command, &mut lock) };
    if result == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(i32::from(lock.l_type))
}

fn try_lock(file: &File, range: (u64, u64)) -> io::Result<bool> {
    match ofd_lock(file, libc::F_OFD_SETLK, libc::F_WRLCK, range) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

fn is_locked_by_another(file: &File, range: (u64, u64)) -> io::Result<bool> {
    Ok(ofd_lock(file, libc::F_OFD_GETLK, libc::F_WRLCK, range)? != libc::F_UNLCK)
}

fn read_u64(file: &File, offset: u64) -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    match file.read_exact_at(&mut bytes, offset) {
        Ok(()) => Ok(u64::from_le_bytes(bytes)),
        // Never written: a short file reads as zeros.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
        Err(e) => Err(e),
    }
}

/// Takes the writer's lock; `WouldBlock` when another writer holds it.
pub fn lock_writer(path: &Path) -> io::Result<File> {
    let file = open(path)?;
    if !try_lock(&file, WRITER_RANGE)? {
        return Err(locked_out());
    }
    // Earlier builds locked the whole file with flock(2), which never conflicts with a
    // byte-range lock: taking both keeps a writer of either kind out.
    flock_or(&file, libc::LOCK_EX)?;
    Ok(file)
}

/// What taking a lock answers while another process holds one that excludes it: a writer,
/// or (against a writer) a reader on a read-only mount ([`WriterExcluded`]).
fn locked_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        "another process has the environment open for writing, or open read-only where it \
         could not take a reader slot",
    )
}

/// `flock(operation | LOCK_NB)` on `file`; [`locked_out`] when another holds a lock that
/// conflicts.
fn flock_or(file: &File, operation: i32) -> io::Result<()> {
    // SAFETY: flock on a descriptor `file` keeps open through the call; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) } != 0 {
        let error = io::Error::last_os_error();
        return Err(if error.kind() == io::ErrorKind::WouldBlock {
            locked_out()
        } else {
            error
        });
    }
    Ok(())
}

/// A reader's hold on a `LOCK` file it cannot write: shared locks on the writer's bytes
/// (OFD) and on the whole file (`flock`, which earlier writers took), so that while it is
/// held no writer opens, and it is refused while one is open. It has no slots: no writer
/// can write data pages under it.
pub struct WriterExcluded {
    _file: File,
}

impl WriterExcluded {
    /// Takes the hold through `path` opened read-only. `Ok(None)` if there is no `LOCK`
    /// file: a writer makes one before anything else, so none has opened the environment,
    /// and none can be kept out (a writer on another mount that starts later is not);
    /// `WouldBlock` while a writer has the environment open.
    pub fn hold(path: &Path) -> io::Result<Option<WriterExcluded>> {
        let file = match OpenOptions::new().read(true).open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match ofd_lock(&file, libc::F_OFD_SETLK, libc::F_RDLCK, WRITER_RANGE) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                return Err(locked_out());
            }
            Err(e) => return Err(e),
        }
        flock_or(&file, libc::LOCK_SH)?;
        Ok(Some(WriterExcluded { _file: file }))
    }
}

impl ProcessReaders for WriterExcluded {
    fn claim(&self, _floor_txn_id: u64) -> io::Result<usize> {
        Ok(0)
    }
    fn raise(&self, _slot: usize, _floor_txn_id: u64) -> io::Result<()> {
        Ok(())
    }
    fn release(&self, _slot: usize) {}
    fn oldest(&self) -> io::Result<Option<u64>> {
        Ok(None)
    }
    fn begin_data_writes(&self) -> io::Result<()> {
        Ok(())
    }
    fn end_data_writes(&self) -> io::Result<()> {
        Ok(())
    }
    fn wait_for_data_writes(&self) -> io::Result<()> {
        Ok(())
    }
}

/// The reader-process table of one environment's `LOCK` file, through its own open file
/// description (its slot locks belong to it).
pub struct LockFileReaders {
    file: File,
    /// The process that opened the table. A child made by `fork` shares the open file
    /// description, and so its locks: were it to release a slot, it would release its
    /// parent's.
    owner_pid: u32,
}

impl LockFileReaders {
    /// Opens the table (creating the `LOCK` file if needed).
    pub fn open(path: &Path) -> io::Result<LockFileReaders> {
        Ok(LockFileReaders {
            file: open(path)?,
            owner_pid: std::process::id(),
        })
    }

    fn generation(&self) -> io::Result<u64> {
        read_u64(&self.file, 0)
    }

    fn set_generation(&self, generation: u64) -> io::Result<()> {
        self.file.write_all_at(&generation.to_le_bytes(), 0)
    }
}

impl ProcessReaders for LockFileReaders {
    fn claim(&self, floor_txn_id: u64) -> io::Result<usize> {
        for slot in 0..PROCESS_READERS_MAX {
            if try_lock(&self.file, slot_range(slot))? {
                let (offset, _) = slot_range(slot);
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&(floor_txn_id + 1).to_le_bytes());
                bytes[8..].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
                self.file.write_all_at(&bytes, offset)?;
                return Ok(slot);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "every reader-process slot is taken",
        ))
    }

    fn raise(&self, slot: usize, floor_txn_id: u64) -> io::Result<()> {
        let (offset, _) = slot_range(slot);
        self.file
            .write_all_at(&(floor_txn_id + 1).to_le_bytes(), offset)
    }

    fn release(&self, slot: usize) {
        if std::process::id() != self.owner_pid {
            return; // a forked child: the slot is its parent's
        }
        let (offset, _) = slot_range(slot);
        // Best effort: a slot whose lock is gone counts as free whatever it holds.
        let _ = self.file.write_all_at(&0u64.to_le_bytes(), offset);
        let _ = ofd_lock(
            &self.file,
            libc::F_OFD_SETLK,
            libc::F_UNLCK,
            slot_range(slot),
        );
    }

    fn oldest(&self) -> io::Result<Option<u64>> {
        let mut table = vec![0u8; PROCESS_READERS_MAX * SLOT_SIZE_BYTES as usize];
        // Up to the file's end: a short read (some network and FUSE file systems) must not
        // leave the later slots, and their readers, out.
        let mut n = 0;
        while n < table.len() {
            match self.file.read_at(&mut table[n..], SLOTS_OFFSET + n as u64) {
                Ok(0) => break,
                Ok(read) => n += read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let mut oldest: Option<u64> = None;
        for (slot, entry) in table[..n]
            .chunks_exact(SLOT_SIZE_BYTES as usize)
            .enumerate()
        {
            let stored = u64::from_le_bytes(entry[..8].try_into().expect("eight bytes"));
            // A slot with no live lock belongs to a process that has died.
            if stored != 0 && is_locked_by_another(&self.file, slot_range(slot))? {
                oldest = Some(oldest.map_or(stored - 1, |o| o.min(stored - 1)));
            }
        }
        Ok(oldest)
    }

    fn begin_data_writes(&self) -> io::Result<()> {
        let generation = self.generation()?;
        // Odd from now on; a crashed writer may have left it odd already. Wrapping: the
        // bytes are the file's, whatever they hold.
        self.set_generation(generation.wrapping_add(1 + generation % 2))
    }

    fn end_data_writes(&self) -> io::Result<()> {
        let generation = self.generation()?;
        debug_assert!(generation % 2 == 1, "ending a data-write phase that began");
        self.set_generation(generation.wrapping_add(1))
    }

    fn wait_for_data_writes(&self) -> io::Result<()> {
        let started = self.generation()?;
        if started % 2 == 0 {
            return Ok(());
        }
        // A phase that began before the slot was claimed; it ends soon, or its writer died.
        while self.generation()? == started && is_locked_by_another(&self.file, WRITER_RANGE)? {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader holding `LOCK` read-only keeps a writer out, and is refused while one is in.
    #[test]
    fn a_read_only_hold_and_a_writer_exclude_each_other() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOCK_FILE);
        assert!(WriterExcluded::hold(&path).expect("no file").is_none());
        let writer = lock_writer(&path).expect("writer");
        let refused = WriterExcluded::hold(&path).map(|h| h.is_some());
        assert!(
            matches!(&refused, Err(e) if e.kind() == io::ErrorKind::WouldBlock),
            "{refused:?}"
        );
        drop(writer);
        let hold = WriterExcluded::hold(&path)
            .expect("hold")
            .expect("a LOCK file");
        let second = WriterExcluded::hold(&path)
            .expect("holds share")
            .expect("a LOCK file");
        let blocked = lock_writer(&path);
        assert!(
            matches!(&blocked, Err(e) if e.kind() == io::ErrorKind::WouldBlock),
            "{blocked:?}"
        );
        drop((hold, second));
        lock_writer(&path).expect("the writer once the readers are gone");
    }

    #[test]
    fn slots_count_while_their_holder_lives() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOCK_FILE);
        let writer_view = LockFileReaders::open(&path).expect("open");
        assert_eq!(writer_view.oldest().expect("oldest"), None);
        let reader_a = LockFileReaders::open(&path).expect("open");
        let reader_b = LockFileReaders::open(&path).expect("open");
        let a = reader_a.claim(0).expect("claim");
        let b = reader_b.claim(9).expect("claim");
        assert_ne!(a, b);
        assert_eq!(writer_view.oldest().expect("oldest"), Some(0));
        reader_a.raise(a, 12).expect("raise");
        assert_eq!(writer_view.oldest().expect("oldest"), Some(9));
        // A holder that goes away without releasing (a crash) leaves a stale slot.
        drop(reader_b);
        assert_eq!(writer_view.oldest().expect("oldest"), Some(12));
        reader_a.release(a);
        assert_eq!(writer_view.oldest().expect("oldest"), None);
    }

    #[test]
    fn one_writer_at_a_time_and_a_dead_writer_does_not_block_readers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOCK_FILE);
        let writer = lock_writer(&path).expect("first writer");
        let err = lock_writer(&path).expect_err("second writer");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        let table = LockFileReaders::open(&path).expect("open");
        table.begin_data_writes().expect("begin");
        // The writer dies in the middle of a phase: a reader does not wait for it.
        drop(writer);
        table.wait_for_data_writes().expect("wait");
        lock_writer(&path).expect("writer after the first is gone");
    }

    /// An earlier build's writer held an exclusive flock on the whole file: a writer of
    /// this build is kept out by it too.
    #[test]
    fn a_writer_holding_the_earlier_flock_keeps_a_new_writer_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOCK_FILE);
        let earlier = open(&path).expect("open");
        // SAFETY: flock on a descriptor the test owns.
        let locked = unsafe { libc::flock(earlier.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(locked, 0);
        let err = lock_writer(&path).expect_err("a second writer");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(earlier);
        lock_writer(&path).expect("the writer once the flock is gone");
    }

    /// A child made by `fork` shares its parent's open file description and so its slot
    /// locks: its release (its copy of the environment dropped) leaves the slot held.
    #[test]
    fn a_release_from_another_process_leaves_the_slot_held() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOCK_FILE);
        let writer_view = LockFileReaders::open(&path).expect("open");
        let mut reader = LockFileReaders::open(&path).expect("open");
        let slot = reader.claim(7).expect("claim");
        reader.owner_pid = std::process::id().wrapping_add(1); // as seen from a child
        reader.release(slot);
        assert_eq!(writer_view.oldest().expect("oldest"), Some(7));
    }

    /// The generation's bytes are the file's: any value moves on without overflow.
    #[test]
    fn a_generation_at_its_largest_moves_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOCK_FILE);
        let table = LockFileReaders::open(&path).expect("open");
        for start in [u64::MAX, u64::MAX - 1] {
            table.set_generation(start).expect("set");
            table.begin_data_writes().expect("begin");
            assert_eq!(table.generation().expect("read") % 2, 1);
            table.end_data_writes().expect("end");
        }
    }
}
