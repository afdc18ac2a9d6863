//! Simulated disk: a deterministic, seeded [`Storage`] for crash, fault and corruption tests.
//!
//! # Model
//! Every file is an *inode* with two images:
//! - the **live image**, what reads and mappings see (the page cache), and
//! - the **durable image**, what survives a power loss (the platter),
//!
//! plus the ordered list of its **pending** changes: buffered writes and size changes made
//! since the last [`StorageFile::sync_data`]. Writes through a [`FileKind::JournalDurable`]
//! handle (`O_DIRECT|O_DSYNC`) reach the durable image when they return; writes through any
//! other handle only reach the live image and stay pending until `sync_data` of that file.
//!
//! The namespace (which name refers to which inode, which directories exist) is modelled the
//! same way: a live map, a durable map, and the ordered list of pending changes (creations,
//! renames, removals, directory creations). [`Storage::sync_dir`] of a directory copies the
//! live entries of that directory into the durable map, and only that directory's: stricter
//! than ext4, where any sync commits the whole metadata journal, so the engine must sync the
//! very directory it changed. Files are inodes, so a rename moves the same contents and an
//! unlinked file that is still open keeps working.
//!
//! # Power loss
//! [`SimStorage::crash_at`] freezes the disk when the operation counter reaches an index; that
//! operation and every later one fail with `io::Error::other("simulated power loss")`. The
//! operation in flight at that instant may or may not have taken effect: a write (buffered
//! or `JournalDurable`), an allocation or a namespace change in flight becomes one more
//! pending change; an in-flight sync does nothing. [`SimStorage::power_cut`] then builds the
//! disk a reboot would find: the durable images and namespace, plus each pending change
//! according to a [`Damage`] variant (dropped, kept, or, under [`Damage::Random`], torn at
//! 512-byte sector granularity). `power_cut(Damage::KeepAll)` is also what a process crash
//! (`kill -9`) without power loss leaves behind. Where threads race for the disk,
//! [`SimStorage::crash_at_watched_op`] cuts power at an operation of one named thread (the
//! flusher, say) instead, and [`SimStorage::crash_point`] tells which operation it was.
//!
//! # Faults
//! Operations are numbered from 0 in call order: every call of a [`Storage`] or
//! [`StorageFile`] method is one operation ([`Storage::note`] and [`Mapping::bytes`] are not).
//! [`SimStorage::fail_at`] makes one operation (or it and every later operation of the same
//! [`OpClass`]) fail with `EIO`, `ENOSPC` or `EINTR`; [`SimStorage::short_writes`] makes writes
//! move only a prefix. What a failed operation leaves behind is described on [`Fault`].
//!
//! # Determinism
//! Every random choice (short transfers, torn sectors, damage) comes from a small PRNG seeded
//! by the constructor's seed, so a workload that issues the same operations in the same order
//! replays exactly. A workload whose threads race for the disk issues operations in an
//! order the simulator does not control; run such parts single-threaded for exact replays.
//!
//! # Write-ahead checking
//! [`Storage::note`] checks the ordering rules as the engine runs: no data page of a
//! transaction is written before its journal record is durable, and no journal is retired
//! before a durable header covers it. Transaction id 0 stands for the empty initial state, so
//! `DataWrite { txn_id_max: 0 }` and retiring a journal whose last transaction is 0 are
//! always allowed. Broken rules are collected in [`SimStorage::violations`]. The checker's state describes the disk, so it survives a power
//! cut: after one, recovery should report [`StorageEvent::JournalDurable`] for the records it
//! found intact on disk before writing their pages (a record may have landed without the
//! crashed engine ever reporting it).
//!
//! # Mappings
//! The live image of every file is an anonymous in-memory file (`memfd`) of fixed size
//! ([`SimStorage::file_capacity_bytes`], 256 MiB by default; pages never written cost no
//! memory), written with `pwrite` and mapped with a shared read-only `mmap`, exactly like a
//! real file in [`super::FileStorage`]. So a [`Mapping`] sees later writes, stays valid after
//! the file grows, is renamed or removed, or the disk is power-cut, and is sound under the
//! same contract the engine keeps for real mappings: no range is read through a mapping
//! while a `write_at` to that range runs (the flusher writes only pages no live reader reads
//! from the data file), and a range written is read only after the reader learned of the
//! write through the engine's own synchronization.
//!
//! The test helpers ([`SimStorage::write_raw`], [`SimStorage::flip_bit`],
//! [`SimStorage::truncate_raw`]) write the live image too and must not run while mappings of
//! that file are being read.
#![allow(unsafe_code)] // memmap2::Mmap::map is unsafe; see the SAFETY note in `LiveFile::map`.

use super::{FileKind, Mapping, Storage, StorageEvent, StorageFile};
use parking_lot::Mutex;
use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Alignment required of `JournalDurable` offsets, lengths and buffers (`O_DIRECT`).
const DIRECT_ALIGN: u64 = 4096;
/// Granularity at which a power loss tears a write.
const SECTOR: u64 = 512;

/// Default [`SimStorage::file_capacity_bytes`]: 256 MiB.
pub const DEFAULT_FILE_CAPACITY: u64 = 256 << 20;

/// The message of the error every operation returns once power is lost.
pub const POWER_LOSS: &str = "simulated power loss";

/// What happens to each pending (not yet durable) change at a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Damage {
    /// No pending change survives: the disk holds exactly what was made durable.
    DropAll,
    /// Every pending change survives, in order (what a process crash leaves).
    KeepAll,
    /// Each pending write is independently kept, dropped or torn (a random subset of its
    /// 512-byte sectors lands); each pending size change and namespace change is
    /// independently kept or dropped (a rename atomically: old name or new name).
    Random,
}

/// An error [`SimStorage::fail_at`] injects.
///
/// What the failed operation leaves behind:
/// - `write_at` with `Eio`: on a `JournalDurable` handle a random subset of the range's
///   512-byte sectors lands on disk (a failed `O_DIRECT` write is undefined); on other
///   handles a random prefix (possibly empty) lands in the live image, pending.
///   With `Enospc` or `Eintr` nothing is written.
/// - `sync_data` / `sync_dir` with `Eio` or `Enospc`: each pending change of that file or
///   directory is randomly made durable or **lost for good** while the live image keeps
///   showing it (the "fsyncgate" behaviour of Linux: the failed pages are marked clean).
///   With `Eintr` nothing happens.
/// - every other operation: no effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// `EIO`: an I/O error.
    Eio,
    /// `ENOSPC`: no space left on the device.
    Enospc,
    /// `EINTR`: interrupted before anything was transferred. Never persistent: a persistent
    /// `EINTR` would make every retry loop spin forever, so `persistent` is ignored for it.
    Eintr,
}

impl Fault {
    fn errno(self) -> i32 {
        match self {
            Fault::Eio => libc::EIO,
            Fault::Enospc => libc::ENOSPC,
            Fault::Eintr => libc::EINTR,
        }
    }

    fn error(self) -> io::Error {
        io::Error::from_raw_os_error(self.errno())
    }
}

/// Classes of operations; a persistent fault fails every later operation of its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// `read_at`, `len`, `map`, `exists`, `list`.
    Read,
    /// `write_at`, `allocate`, `truncate`.
    Write,
    /// `sync_data`, `sync_dir`.
    Sync,
    /// `open`, `remove`, `rename`, `create_dir`, `lock`.
    Namespace,
}

/// A deterministic simulated disk implementing [`Storage`]; see the module documentation.
///
/// Cloning is cheap and every clone is a handle to the same disk, so a test keeps one clone
/// to inject faults and inspect the disk while the engine owns another.
#[derive(Clone)]
pub struct SimStorage {
    inner: Arc<Inner>,
}

struct Inner {
    seed: u64,
    capacity: u64,
    state: Mutex<State>,
}

impl fmt::Debug for SimStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.inner.state.lock();
        f.debug_struct("SimStorage")
            .field("seed", &self.inner.seed)
            .field("ops", &st.ops)
            .field("frozen", &st.frozen)
            .field("files", &st.live_ns.len())
            .finish_non_exhaustive()
    }
}

/// A small, self-contained PRNG (splitmix64): fast, good enough, and stable across versions.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n`; `n` must be positive.
    fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let wide = u128::from(self.next_u64()) * u128::from(n);
        u64::try_from(wide >> 64).expect("high half of a 128-bit product fits in 64 bits")
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        lo + self.below(hi - lo + 1)
    }

    fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}

/// The splitmix64 finalizer: a bijective scrambling of a 64-bit value.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    File(u64),
    Dir,
}

/// One pending namespace change: `name` now refers to `after` (or is gone).
#[derive(Debug, Clone)]
struct NsChange {
    name: String,
    after: Option<Entry>,
}

/// Namespace changes that survive or vanish together (a rename is two changes).
#[derive(Debug, Clone)]
struct NsGroup {
    changes: Vec<NsChange>,
}

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    Grow { len: u64 },
    Shrink { len: u64 },
}

struct Inode {
    live: LiveFile,
    live_len: u64,
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Debug, Clone, Copy)]
struct PlannedFault {
    at: u64,
    fault: Fault,
    persistent: bool,
}

#[derive(Debug, Clone, Default)]
struct Wal {
    /// Highest transaction whose journal record is durable (0: none yet).
    journal_durable: u64,
    /// Highest transaction a durable header declares synced (0: none yet).
    header_synced: u64,
    violations: Vec<String>,
}

struct State {
    rng: Rng,
    ops: u64,
    crash_at: Option<u64>,
    /// Whether power is lost; every operation fails.
    frozen: bool,
    /// The operation count when power was lost (what damage choices are seeded from, so
    /// calls a crashed engine keeps making do not change them).
    frozen_at: u64,
    faults: Vec<PlannedFault>,
    sticky: Vec<(OpClass, Fault)>,
    short_writes: bool,
    /// How long a write through a `JournalDurable` handle takes at least.
    journal_write_latency: std::time::Duration,
    short_reads: bool,
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    live_ns: BTreeMap<String, Entry>,
    durable_ns: BTreeMap<String, Entry>,
    ns_pending: Vec<NsGroup>,
    locked: bool,
    wal: Wal,
    trace: Option<Vec<String>>,
    /// The thread whose operations are numbered on their own, and how many it started.
    watched: Option<(String, u64)>,
    /// Power is lost during this operation of the watched thread.
    crash_at_watched: Option<u64>,
    /// The operation during which power was lost.
    crash_point: Option<CrashPoint>,
}

/// The operation during which [`SimStorage::crash_at`] or
/// [`SimStorage::crash_at_watched_op`] cut the power.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashPoint {
    /// Its index among all operations.
    pub op: u64,
    /// The name of the thread that started it, if that thread has one.
    pub thread: Option<String>,
    /// The method and its arguments, as [`SimStorage::trace`] shows them.
    pub what: String,
}

/// What the operation being started must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Go,
    /// Power is lost during this operation.
    Crash,
    Fail(Fault),
}

fn power_loss() -> io::Error {
    io::Error::other(POWER_LOSS)
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file"))
}

/// Checks a relative name: `/`-separated, no empty, `.` or `..` components.
fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty()
        || name
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad file name {name:?}"),
        ));
    }
    Ok(())
}

/// Like [`check_name`] but `""` (the environment directory) is allowed.
fn check_dir(dir: &str) -> io::Result<()> {
    if dir.is_empty() {
        Ok(())
    } else {
        check_name(dir)
    }
}

fn parent(name: &str) -> &str {
    name.rsplit_once('/').map_or("", |(p, _)| p)
}

fn leaf(name: &str) -> &str {
    name.rsplit_once('/').map_or(name, |(_, l)| l)
}

fn dir_exists(ns: &BTreeMap<String, Entry>, dir: &str) -> bool {
    dir.is_empty() || ns.get(dir) == Some(&Entry::Dir)
}

/// The pieces of `offset..offset + len` cut at absolute 512-byte sector boundaries.
fn sectors(offset: u64, len: u64) -> Vec<(u64, u64)> {
    let end = offset + len;
    let mut pieces = Vec::new();
    let mut at = offset;
    while at < end {
        let next = ((at / SECTOR + 1) * SECTOR).min(end);
        pieces.push((at, next));
        at = next;
    }
    pieces
}

fn to_usize(v: u64) -> usize {
    usize::try_from(v).expect("offsets are bounded by the file capacity, which fits in usize")
}

/// Copies `data` into `image` at `offset`, growing it with zeros as needed.
fn put(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = to_usize(offset);
    let end = start + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

impl Pending {
    /// Makes this change durable in full.
    fn apply(&self, image: &mut Vec<u8>) {
        match self {
            Pending::Write { offset, data } => put(image, *offset, data),
            Pending::Grow { len } => {
                let len = to_usize(*len);
                if image.len() < len {
                    image.resize(len, 0);
                }
            }
            Pending::Shrink { len } => image.truncate(to_usize(*len)),
        }
    }
}

/// The live image of one file: a `memfd` as large as the file capacity (sparse: pages never
/// written cost nothing). Only the first `Inode::live_len` bytes are part of the file; the
/// rest stays zero, so growing the file needs no writing.
struct LiveFile {
    file: Arc<File>,
}

impl LiveFile {
    fn new(capacity: u64) -> io::Result<LiveFile> {
        let fd = rustix::fs::memfd_create("hrafn-sim", rustix::fs::MemfdFlags::CLOEXEC)?;
        let file = File::from(fd);
        file.set_len(capacity)?;
        Ok(LiveFile {
            file: Arc::new(file),
        })
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(out, offset)
    }

    /// Zeroes `len` bytes at `offset`.
    fn zero(&self, offset: u64, len: u64) -> io::Result<()> {
        let zeros = vec![0u8; 1 << 16];
        let mut at = offset;
        while at < offset + len {
            let n = (offset + len - at).min(zeros.len() as u64);
            self.write(at, &zeros[..to_usize(n)])?;
            at += n;
        }
        Ok(())
    }

    /// Maps the first `len` bytes, which the caller checked are within the file size.
    fn map(&self, len: usize) -> io::Result<Arc<dyn Mapping>> {
        if len == 0 {
            return Ok(Arc::new(SimMapping::Empty));
        }
        // SAFETY: as for the real files in `file.rs`: the mapping is read-only and shared;
        // `len` is at most the memfd's size, which is fixed at the capacity when it is made
        // and never shrinks (`truncate_raw` only zeroes bytes), so no access can fault; the
        // memfd is private to this disk, so the only writers are `pwrite`s made by this
        // module, which change only ranges the engine does not read through a mapping at
        // that time (the mapping contract in the module documentation), and the test
        // helpers, documented as not to be used while a mapping of the file is read.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&*self.file)? };
        Ok(Arc::new(SimMapping::Mapped(map)))
    }
}

impl Inode {
    fn new(capacity: u64) -> io::Result<Inode> {
        Ok(Inode {
            live: LiveFile::new(capacity)?,
            live_len: 0,
            durable: Vec::new(),
            pending: Vec::new(),
        })
    }

    /// An inode whose live and durable images are both `image`.
    fn from_image(capacity: u64, image: Vec<u8>) -> io::Result<Inode> {
        const BLOCK: usize = 4096;
        let mut inode = Inode::new(capacity)?;
        // The memfd starts zeroed, so only runs of blocks holding data are written: files
        // are mostly preallocated zeros, and power cuts run thousands of times in tests.
        const ZEROS: [u8; BLOCK] = [0; BLOCK];
        let mut run: Option<usize> = None;
        for (i, block) in image.chunks(BLOCK).enumerate() {
            let zero = *block == ZEROS[..block.len()];
            match (run, zero) {
                (None, false) => run = Some(i),
                (Some(start), true) => {
                    inode
                        .live
                        .write((start * BLOCK) as u64, &image[start * BLOCK..i * BLOCK])?;
                    run = None;
                }
                _ => {}
            }
        }
        if let Some(start) = run {
            inode
                .live
                .write((start * BLOCK) as u64, &image[start * BLOCK..])?;
        }
        inode.live_len = image.len() as u64;
        inode.durable = image;
        Ok(inode)
    }

    /// Writes the live image and extends the live length to cover the write.
    fn write_live(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.live.write(offset, data)?;
        self.live_len = self.live_len.max(offset + data.len() as u64);
        Ok(())
    }

    /// Writes `data` at `offset` straight to the durable image (an `O_DIRECT|O_DSYNC`
    /// write). Before a direct write the kernel writes back and drops cached pages of the
    /// range, so older pending writes no longer decide what those bytes hold: their overlap
    /// with the range is cut out of the pending list.
    fn write_durable(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        let mut kept = Vec::with_capacity(self.pending.len());
        for p in self.pending.drain(..) {
            match p {
                Pending::Write { offset: o, data: d } => {
                    let e = o + d.len() as u64;
                    if e <= offset || o >= end {
                        kept.push(Pending::Write { offset: o, data: d });
                        continue;
                    }
                    if o < offset {
                        let n = to_usize(offset - o);
                        kept.push(Pending::Write {
                            offset: o,
                            data: d[..n].to_vec(),
                        });
                    }
                    if e > end {
                        let skip = to_usize(end - o);
                        kept.push(Pending::Write {
                            offset: end,
                            data: d[skip..].to_vec(),
                        });
                    }
                }
                size @ (Pending::Grow { .. } | Pending::Shrink { .. }) => kept.push(size),
            }
        }
        self.pending = kept;
        put(&mut self.durable, offset, data);
    }

    /// The image a reboot finds for this file.
    fn crash_image(&self, damage: Damage, rng: &mut Rng) -> Vec<u8> {
        let mut image = self.durable.clone();
        for p in &self.pending {
            match (damage, p) {
                (Damage::DropAll, _) => {}
                (Damage::KeepAll, p) => p.apply(&mut image),
                (Damage::Random, Pending::Grow { .. } | Pending::Shrink { .. }) => {
                    if rng.coin() {
                        p.apply(&mut image);
                    }
                }
                (Damage::Random, Pending::Write { offset, data }) => match rng.below(3) {
                    0 => {}
                    1 => p.apply(&mut image),
                    _ => {
                        for (s, e) in sectors(*offset, data.len() as u64) {
                            if rng.coin() {
                                let from = to_usize(s - offset);
                                let to = to_usize(e - offset);
                                put(&mut image, s, &data[from..to]);
                            }
                        }
                    }
                },
            }
        }
        image
    }
}

impl State {
    fn new(seed: u64) -> State {
        State {
            rng: Rng::new(mix(seed ^ 0x005E_ED0F_D15C)),
            ops: 0,
            crash_at: None,
            frozen: false,
            frozen_at: 0,
            faults: Vec::new(),
            sticky: Vec::new(),
            short_writes: false,
            journal_write_latency: std::time::Duration::ZERO,
            short_reads: false,
            inodes: BTreeMap::new(),
            next_inode: 1,
            live_ns: BTreeMap::new(),
            durable_ns: BTreeMap::new(),
            ns_pending: Vec::new(),
            locked: false,
            wal: Wal::default(),
            trace: None,
            watched: None,
            crash_at_watched: None,
            crash_point: None,
        }
    }

    /// Starts one operation: numbers it, records it, and decides whether it crashes or fails.
    fn begin(&mut self, class: OpClass, describe: impl FnOnce() -> String) -> io::Result<Gate> {
        let op = self.ops;
        self.ops += 1;
        let mut watched_op = None;
        if let Some((name, count)) = &mut self.watched
            && std::thread::current().name() == Some(name.as_str())
        {
            watched_op = Some(*count);
            *count += 1;
        }
        let crash = !self.frozen
            && (self.crash_at == Some(op)
                || watched_op.is_some() && watched_op == self.crash_at_watched);
        // Described only when needed: most operations are neither traced nor crashed.
        let what = (self.trace.is_some() || crash).then(describe);
        if let (Some(trace), Some(what)) = (&mut self.trace, &what) {
            trace.push(format!("{op}: {what}"));
        }
        if self.frozen {
            return Err(power_loss());
        }
        if crash {
            self.frozen = true;
            self.frozen_at = op;
            self.crash_point = Some(CrashPoint {
                op,
                thread: std::thread::current().name().map(str::to_owned),
                what: what.unwrap_or_default(),
            });
            return Ok(Gate::Crash);
        }
        let mut fault = None;
        for planned in &self.faults {
            if planned.at == op {
                fault = Some(planned.fault);
                if planned.persistent && planned.fault != Fault::Eintr {
                    self.sticky.push((class, planned.fault));
                }
            }
        }
        if fault.is_none() {
            fault = self
                .sticky
                .iter()
                .find(|(c, _)| *c == class)
                .map(|(_, f)| *f);
        }
        Ok(fault.map_or(Gate::Go, Gate::Fail))
    }

    fn inode(&mut self, id: u64) -> &mut Inode {
        self.inodes
            .get_mut(&id)
            .expect("inodes are never removed while the disk lives")
    }

    fn file_id(&self, name: &str) -> io::Result<u64> {
        match self.live_ns.get(name) {
            Some(Entry::File(id)) => Ok(*id),
            Some(Entry::Dir) => Err(errno(libc::EISDIR)),
            None => Err(not_found(name)),
        }
    }

    fn set_entry(&mut self, changes: Vec<NsChange>) {
        for c in &changes {
            match c.after {
                Some(e) => self.live_ns.insert(c.name.clone(), e),
                None => self.live_ns.remove(&c.name),
            };
        }
        self.ns_pending.push(NsGroup { changes });
    }

    fn create_file(&mut self, name: &str, capacity: u64) -> io::Result<u64> {
        if !dir_exists(&self.live_ns, parent(name)) {
            return Err(not_found(parent(name)));
        }
        let id = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(id, Inode::new(capacity)?);
        self.set_entry(vec![NsChange {
            name: name.to_owned(),
            after: Some(Entry::File(id)),
        }]);
        Ok(id)
    }

    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        let id = self.file_id(from)?;
        match self.live_ns.get(to) {
            Some(Entry::Dir) => return Err(errno(libc::EISDIR)),
            Some(Entry::File(_)) | None => {}
        }
        if !dir_exists(&self.live_ns, parent(to)) {
            return Err(not_found(parent(to)));
        }
        if from == to {
            return Ok(());
        }
        self.set_entry(vec![
            NsChange {
                name: from.to_owned(),
                after: None,
            },
            NsChange {
                name: to.to_owned(),
                after: Some(Entry::File(id)),
            },
        ]);
        Ok(())
    }

    fn remove(&mut self, name: &str) -> io::Result<()> {
        self.file_id(name)?;
        self.set_entry(vec![NsChange {
            name: name.to_owned(),
            after: None,
        }]);
        Ok(())
    }

    fn create_dir(&mut self, dir: &str) -> io::Result<()> {
        let mut at = 0;
        while at < dir.len() {
            let end = dir[at..].find('/').map_or(dir.len(), |i| at + i);
            let prefix = &dir[..end];
            match self.live_ns.get(prefix) {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => return Err(errno(libc::ENOTDIR)),
                None => self.set_entry(vec![NsChange {
                    name: prefix.to_owned(),
                    after: Some(Entry::Dir),
                }]),
            }
            at = end + 1;
        }
        Ok(())
    }

    /// `sync_dir`: the entries of `dir` become durable; with `lossy`, each one is randomly
    /// made durable or silently lost instead (a failed directory sync).
    fn sync_dir(&mut self, dir: &str, lossy: bool) {
        let mut names: Vec<String> = self
            .live_ns
            .keys()
            .chain(self.durable_ns.keys())
            .filter(|n| parent(n) == dir)
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            if lossy && self.rng.coin() {
                continue;
            }
            match self.live_ns.get(&name) {
                Some(e) => self.durable_ns.insert(name, *e),
                None => self.durable_ns.remove(&name),
            };
        }
        for group in &mut self.ns_pending {
            group.changes.retain(|c| parent(&c.name) != dir);
        }
        self.ns_pending.retain(|g| !g.changes.is_empty());
    }

    /// `sync_data` of inode `id`; with `lossy`, each pending change is randomly made durable
    /// or lost for good (a failed `fdatasync`).
    fn sync_data(&mut self, id: u64, lossy: bool) {
        let pending = std::mem::take(&mut self.inode(id).pending);
        for p in pending {
            if lossy && self.rng.coin() {
                continue;
            }
            p.apply(&mut self.inode(id).durable);
        }
    }

    fn check_wal(&mut self, event: StorageEvent, seed: u64) {
        if self.frozen {
            // Nothing the engine does after the power loss reaches the disk.
            return;
        }
        let op = self.ops;
        let wal = &mut self.wal;
        match event {
            StorageEvent::JournalDurable { txn_id } => {
                wal.journal_durable = wal.journal_durable.max(txn_id);
            }
            StorageEvent::DataWrite { txn_id_max } => {
                if txn_id_max > wal.journal_durable {
                    wal.violations.push(format!(
                        "seed {seed:#x}, before op {op}: data pages of txn {txn_id_max} written \
                         while the journal is durable only up to txn {}",
                        wal.journal_durable
                    ));
                }
            }
            StorageEvent::HeaderDurable { synced_txn_id } => {
                wal.header_synced = wal.header_synced.max(synced_txn_id);
            }
            StorageEvent::JournalRetire {
                journal_number,
                last_txn_id,
            } => {
                if last_txn_id > wal.header_synced {
                    wal.violations.push(format!(
                        "seed {seed:#x}, before op {op}: journal {journal_number} (up to txn \
                         {last_txn_id}) retired while a durable header covers only txn {}",
                        wal.header_synced
                    ));
                }
            }
        }
    }
}

impl SimStorage {
    /// An empty disk with the default file capacity ([`DEFAULT_FILE_CAPACITY`]).
    #[must_use]
    pub fn new(seed: u64) -> SimStorage {
        SimStorage::with_capacity(seed, DEFAULT_FILE_CAPACITY)
    }

    /// An empty disk where no file may grow beyond `file_capacity_bytes` (rounded up to
    /// 4 KiB): a write or allocation past it fails with `ENOSPC`.
    ///
    /// # Panics
    /// If `file_capacity_bytes` exceeds 2^46 (64 TiB), which no test needs.
    #[must_use]
    pub fn with_capacity(seed: u64, file_capacity_bytes: u64) -> SimStorage {
        assert!(
            file_capacity_bytes <= 1 << 46,
            "file capacity {file_capacity_bytes} is unreasonably large"
        );
        let capacity = file_capacity_bytes.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        SimStorage::from_state(seed, capacity, State::new(seed))
    }

    fn from_state(seed: u64, capacity: u64, state: State) -> SimStorage {
        SimStorage {
            inner: Arc::new(Inner {
                seed,
                capacity,
                state: Mutex::new(state),
            }),
        }
    }

    /// The seed this disk was built with; the same seed and workload replay exactly.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// The largest size any file may reach.
    #[must_use]
    pub fn file_capacity_bytes(&self) -> u64 {
        self.inner.capacity
    }

    /// How many operations have been started so far (the next operation's index).
    #[must_use]
    pub fn ops_count(&self) -> u64 {
        self.inner.state.lock().ops
    }

    /// Cuts power during operation `op_index`: it fails with a [`POWER_LOSS`] error, its
    /// effects become pending changes (or nothing, for a sync), and every later operation
    /// fails too. Follow with [`SimStorage::power_cut`] to get the disk after reboot.
    pub fn crash_at(&self, op_index: u64) {
        self.inner.state.lock().crash_at = Some(op_index);
    }

    /// Numbers the operations started by threads named `name` on their own as well, from 0
    /// at this call, so that a test can count them and cut the power during one of them
    /// however the other threads' operations interleave (see
    /// [`SimStorage::crash_at_watched_op`]).
    pub fn watch_thread(&self, name: &str) {
        self.inner.state.lock().watched = Some((name.to_owned(), 0));
    }

    /// How many operations threads named as in [`SimStorage::watch_thread`] have started.
    #[must_use]
    pub fn watched_ops_count(&self) -> u64 {
        self.inner.state.lock().watched.as_ref().map_or(0, |w| w.1)
    }

    /// Cuts power during the `nth` operation (from 0) started by the watched thread, as
    /// [`SimStorage::crash_at`] does at an index among all operations. Nothing happens
    /// unless [`SimStorage::watch_thread`] names a thread.
    pub fn crash_at_watched_op(&self, nth: u64) {
        self.inner.state.lock().crash_at_watched = Some(nth);
    }

    /// The operation during which a planned crash cut the power, if one did (not a
    /// [`SimStorage::power_cut`] of a running disk).
    #[must_use]
    pub fn crash_point(&self) -> Option<CrashPoint> {
        self.inner.state.lock().crash_point.clone()
    }

    /// Whether power has been lost (by [`SimStorage::crash_at`] or
    /// [`SimStorage::power_cut`]); every operation now fails.
    #[must_use]
    pub fn is_frozen(&self) -> bool {
        self.inner.state.lock().frozen
    }

    /// Makes operation `op_index` fail with `fault`; with `persistent`, every later
    /// operation of the same [`OpClass`] as that operation fails the same way (except
    /// [`Fault::Eintr`], which is always one-shot). See [`Fault`] for what is left behind.
    pub fn fail_at(&self, op_index: u64, fault: Fault, persistent: bool) {
        self.inner.state.lock().faults.push(PlannedFault {
            at: op_index,
            fault,
            persistent,
        });
    }

    /// Removes every planned and persistent fault (the failing device was replaced).
    pub fn clear_faults(&self) {
        let mut st = self.inner.state.lock();
        st.faults.clear();
        st.sticky.clear();
    }

    /// Makes every successful write through a [`FileKind::JournalDurable`] handle take at
    /// least `latency`, as a synchronous write to a real device does, so that threads
    /// committing concurrently queue up behind it (merged and pipelined commits). The time
    /// passes after the write has landed, without holding the disk, so it changes no
    /// outcome, only the interleaving.
    pub fn journal_write_latency(&self, latency: std::time::Duration) {
        self.inner.state.lock().journal_write_latency = latency;
    }

    /// When on, each write has an even chance of moving only a random prefix (at least one
    /// byte; a multiple of 4 KiB on `JournalDurable` handles) and returning its length.
    pub fn short_writes(&self, on: bool) {
        self.inner.state.lock().short_writes = on;
    }

    /// When on, each read has an even chance of returning only a random prefix (at least
    /// one byte; a multiple of 4 KiB on `JournalDurable` handles).
    pub fn short_reads(&self, on: bool) {
        self.inner.state.lock().short_reads = on;
    }

    /// When on, every operation is recorded (index, method, arguments) for
    /// [`SimStorage::trace`]; turning it off discards the record.
    pub fn record_trace(&self, on: bool) {
        let mut st = self.inner.state.lock();
        st.trace = if on { Some(Vec::new()) } else { None };
    }

    /// The operations recorded since [`SimStorage::record_trace`] was turned on.
    #[must_use]
    pub fn trace(&self) -> Vec<String> {
        self.inner.state.lock().trace.clone().unwrap_or_default()
    }

    /// Broken ordering rules seen by [`Storage::note`]; a correct engine leaves it empty.
    #[must_use]
    pub fn violations(&self) -> Vec<String> {
        self.inner.state.lock().wal.violations.clone()
    }

    /// Cuts power now (if [`SimStorage::crash_at`] has not already) and returns the disk a
    /// reboot would find, as a new, unfrozen, unlocked `SimStorage` with no faults, whose
    /// files are all durable and whose write-ahead checker carries over this disk's
    /// durable state (but not its violations). Each pending change survives according to
    /// `damage`; the choices, and the new disk's seed, are drawn from this disk's seed and
    /// the operation at which power was lost, so they replay exactly. Calling it again gives the same disk; use
    /// [`SimStorage::power_cut_salted`] for other random outcomes.
    ///
    /// This disk stays frozen: every later operation on it fails.
    #[must_use]
    pub fn power_cut(&self, damage: Damage) -> SimStorage {
        self.power_cut_salted(damage, 0)
    }

    /// [`SimStorage::power_cut`] with `salt` mixed into the random choices, to draw several
    /// [`Damage::Random`] outcomes from one crash state.
    #[must_use]
    pub fn power_cut_salted(&self, damage: Damage, salt: u64) -> SimStorage {
        let mut st = self.inner.state.lock();
        if !st.frozen {
            st.frozen = true;
            st.frozen_at = st.ops;
        }
        let seed = self.inner.seed;
        let at = st.frozen_at;
        let mut rng = Rng::new(mix(seed ^ mix(at ^ mix(salt ^ 0xC0FF_EE00))));

        let mut ns = st.durable_ns.clone();
        for group in &st.ns_pending {
            let keep = match damage {
                Damage::DropAll => false,
                Damage::KeepAll => true,
                Damage::Random => rng.coin(),
            };
            if keep {
                for c in &group.changes {
                    match c.after {
                        Some(e) => ns.insert(c.name.clone(), e),
                        None => ns.remove(&c.name),
                    };
                }
            }
        }
        // Parents sort before their children, so one pass drops every orphaned subtree.
        let mut survivors = BTreeMap::new();
        for (name, entry) in ns {
            if dir_exists(&survivors, parent(&name)) {
                survivors.insert(name, entry);
            }
        }

        let mut referenced: Vec<u64> = survivors
            .values()
            .filter_map(|e| match e {
                Entry::File(id) => Some(*id),
                Entry::Dir => None,
            })
            .collect();
        referenced.sort_unstable();
        referenced.dedup();
        let capacity = self.inner.capacity;
        let mut renumber = BTreeMap::new();
        let child_seed = mix(seed ^ mix(at ^ mix(salt ^ 0xB007)));
        let mut next = State::new(child_seed);
        next.wal = Wal {
            violations: Vec::new(),
            ..st.wal.clone()
        };
        for old in referenced {
            let image = st
                .inodes
                .get(&old)
                .expect("a named inode exists")
                .crash_image(damage, &mut rng);
            let new = next.next_inode;
            next.next_inode += 1;
            let inode = Inode::from_image(capacity, image)
                .expect("creating the memfd of a simulated file (out of file descriptors?)");
            next.inodes.insert(new, inode);
            renumber.insert(old, new);
        }
        for (name, entry) in survivors {
            let entry = match entry {
                Entry::File(old) => Entry::File(renumber[&old]),
                Entry::Dir => Entry::Dir,
            };
            next.live_ns.insert(name.clone(), entry);
            next.durable_ns.insert(name, entry);
        }
        SimStorage::from_state(child_seed, capacity, next)
    }

    fn with_file<R>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Inode) -> io::Result<R>,
    ) -> io::Result<R> {
        let mut st = self.inner.state.lock();
        let id = st.file_id(name)?;
        f(st.inode(id))
    }

    /// The live image of file `name` (what reads see now). Not an operation.
    ///
    /// # Errors
    /// `NotFound` if there is no such file.
    pub fn read_file(&self, name: &str) -> io::Result<Vec<u8>> {
        self.with_file(name, |inode| {
            let mut out = vec![0u8; to_usize(inode.live_len)];
            inode.live.read(0, &mut out)?;
            Ok(out)
        })
    }

    /// The names of all files (not directories) in the live namespace, sorted, as paths
    /// relative to the environment directory. Not an operation.
    #[must_use]
    pub fn file_names(&self) -> Vec<String> {
        let st = self.inner.state.lock();
        st.live_ns
            .iter()
            .filter(|(_, e)| matches!(e, Entry::File(_)))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Every file's live image by name (to compare a directory before and after an
    /// operation). Not an operation.
    #[must_use]
    pub fn files(&self) -> std::collections::BTreeMap<String, Vec<u8>> {
        self.file_names()
            .into_iter()
            .map(|name| {
                let bytes = self.read_file(&name).expect("a listed file exists");
                (name, bytes)
            })
            .collect()
    }

    /// Flips bit `bit_offset` (bit 0 is the low bit of byte 0) of file `name`, in the live
    /// and (where it is that long) the durable image. Not an operation; must not run while
    /// a mapping of the file is read.
    ///
    /// # Errors
    /// `NotFound` if there is no such file; `InvalidInput` past the end of the file.
    pub fn flip_bit(&self, name: &str, bit_offset: u64) -> io::Result<()> {
        self.with_file(name, |inode| {
            let byte = bit_offset / 8;
            if byte >= inode.live_len {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "bit offset past the end of the file",
                ));
            }
            let mask = 1u8 << (bit_offset % 8);
            let mut b = [0u8; 1];
            inode.live.read(byte, &mut b)?;
            b[0] ^= mask;
            inode.write_live(byte, &b)?;
            if let Some(d) = inode.durable.get_mut(to_usize(byte)) {
                *d ^= mask;
            }
            Ok(())
        })
    }

    /// Overwrites `bytes` at `offset` of file `name`, in both the live and the durable
    /// image (growing them as needed), bypassing every rule. Not an operation; must not run
    /// while a mapping of the file is read.
    ///
    /// # Errors
    /// `NotFound` if there is no such file; `ENOSPC` past the file capacity.
    pub fn write_raw(&self, name: &str, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let capacity = self.inner.capacity;
        self.with_file(name, |inode| {
            if offset
                .checked_add(bytes.len() as u64)
                .is_none_or(|end| end > capacity)
            {
                return Err(errno(libc::ENOSPC));
            }
            inode.write_live(offset, bytes)?;
            put(&mut inode.durable, offset, bytes);
            Ok(())
        })
    }

    /// Sets the size of file `name` in both the live and the durable image (cutting or
    /// zero-extending), bypassing every rule. Pending writes are left as they are, so use it
    /// on a disk without any, such as one returned by [`SimStorage::power_cut`]. Not an
    /// operation; must not run while a mapping of the file is read.
    ///
    /// # Errors
    /// `NotFound` if there is no such file; `ENOSPC` past the file capacity.
    pub fn truncate_raw(&self, name: &str, len: u64) -> io::Result<()> {
        let capacity = self.inner.capacity;
        self.with_file(name, |inode| {
            if len > capacity {
                return Err(errno(libc::ENOSPC));
            }
            if len < inode.live_len {
                // Keep the memfd zero past the live length.
                inode.live.zero(len, inode.live_len - len)?;
            }
            inode.live_len = len;
            inode.durable.resize(to_usize(len), 0);
            Ok(())
        })
    }
}

impl Storage for SimStorage {
    fn open(&self, name: &str, kind: FileKind, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let mut st = self.inner.state.lock();
        let gate = st.begin(OpClass::Namespace, || {
            format!("open {name:?} {kind:?} create={create}")
        })?;
        if let Gate::Fail(f) = gate {
            return Err(f.error());
        }
        let id = check_name(name).and_then(|()| match st.live_ns.get(name) {
            Some(Entry::File(id)) => Ok(*id),
            Some(Entry::Dir) => Err(errno(libc::EISDIR)),
            None if create => st.create_file(name, self.inner.capacity),
            None => Err(not_found(name)),
        });
        if gate == Gate::Crash {
            return Err(power_loss());
        }
        Ok(Arc::new(SimFile {
            storage: self.clone(),
            id: id?,
            kind,
            name: name.to_owned(),
        }))
    }

    fn exists(&self, name: &str) -> io::Result<bool> {
        let mut st = self.inner.state.lock();
        match st.begin(OpClass::Read, || format!("exists {name:?}"))? {
            Gate::Go => {}
            Gate::Crash => return Err(power_loss()),
            Gate::Fail(f) => return Err(f.error()),
        }
        check_dir(name)?;
        Ok(name.is_empty() || st.live_ns.contains_key(name))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut st = self.inner.state.lock();
        let gate = st.begin(OpClass::Namespace, || format!("remove {name:?}"))?;
        if let Gate::Fail(f) = gate {
            return Err(f.error());
        }
        let result = check_name(name).and_then(|()| st.remove(name));
        if gate == Gate::Crash {
            return Err(power_loss());
        }
        result
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut st = self.inner.state.lock();
        let gate = st.begin(OpClass::Namespace, || format!("rename {from:?} -> {to:?}"))?;
        if let Gate::Fail(f) = gate {
            return Err(f.error());
        }
        let result = check_name(from)
            .and_then(|()| check_name(to))
            .and_then(|()| st.rename(from, to));
        if gate == Gate::Crash {
            return Err(power_loss());
        }
        result
    }

    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let mut st = self.inner.state.lock();
        match st.begin(OpClass::Read, || format!("list {dir:?}"))? {
            Gate::Go => {}
            Gate::Crash => return Err(power_loss()),
            Gate::Fail(f) => return Err(f.error()),
        }
        check_dir(dir)?;
        match st.live_ns.get(dir) {
            _ if dir.is_empty() => {}
            Some(Entry::Dir) => {}
            Some(Entry::File(_)) => return Err(errno(libc::ENOTDIR)),
            None => return Err(not_found(dir)),
        }
        Ok(st
            .live_ns
            .keys()
            .filter(|n| parent(n) == dir)
            .map(|n| leaf(n).to_owned())
            .collect())
    }

    fn create_dir(&self, dir: &str) -> io::Result<()> {
        let mut st = self.inner.state.lock();
        let gate = st.begin(OpClass::Namespace, || format!("create_dir {dir:?}"))?;
        if let Gate::Fail(f) = gate {
            return Err(f.error());
        }
        let result = check_dir(dir).and_then(|()| st.create_dir(dir));
        if gate == Gate::Crash {
            return Err(power_loss());
        }
        result
    }

    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        let mut st = self.inner.state.lock();
        let gate = st.begin(OpClass::Sync, || format!("sync_dir {dir:?}"))?;
        if gate == Gate::Crash {
            return Err(power_loss());
        }
        check_dir(dir)?;
        if !dir_exists(&st.live_ns, dir) {
            return Err(not_found(dir));
        }
        match gate {
            Gate::Go => {
                st.sync_dir(dir, false);
                Ok(())
            }
            Gate::Fail(Fault::Eintr) => Err(Fault::Eintr.error()),
            Gate::Fail(f) => {
                st.sync_dir(dir, true);
                Err(f.error())
            }
            Gate::Crash => Err(power_loss()),
        }
    }

    fn process_readers(&self) -> io::Result<Option<Arc<dyn super::ProcessReaders>>> {
        Ok(None) // one process: its readers are counted in memory
    }

    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        let mut st = self.inner.state.lock();
        match st.begin(OpClass::Namespace, || "lock".to_owned())? {
            Gate::Go => {}
            Gate::Crash => return Err(power_loss()),
            Gate::Fail(f) => return Err(f.error()),
        }
        if st.locked {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the environment is locked",
            ));
        }
        st.locked = true;
        Ok(Box::new(SimLockGuard {
            inner: Arc::clone(&self.inner),
        }))
    }

    fn note(&self, event: StorageEvent) {
        self.inner.state.lock().check_wal(event, self.inner.seed);
    }
}

/// Holds the environment lock of a [`SimStorage`]; dropping it releases the lock.
struct SimLockGuard {
    inner: Arc<Inner>,
}

impl Drop for SimLockGuard {
    fn drop(&mut self) {
        self.inner.state.lock().locked = false;
    }
}

/// An open file of a [`SimStorage`].
struct SimFile {
    storage: SimStorage,
    id: u64,
    kind: FileKind,
    name: String,
}

impl SimFile {
    fn direct(&self) -> bool {
        self.kind == FileKind::JournalDurable
    }

    /// `O_DIRECT` alignment: offset, length and memory all 4 KiB aligned, else `EINVAL`.
    fn check_direct(&self, ptr: *const u8, len: usize, offset: u64) -> io::Result<()> {
        if self.direct()
            && (!offset.is_multiple_of(DIRECT_ALIGN)
                || !(len as u64).is_multiple_of(DIRECT_ALIGN)
                || !((ptr as usize) as u64).is_multiple_of(DIRECT_ALIGN))
        {
            return Err(errno(libc::EINVAL));
        }
        Ok(())
    }

    /// How many of `len` bytes a transfer moves, when short transfers are on.
    fn short_len(&self, rng: &mut Rng, len: usize) -> usize {
        let len = len as u64;
        let unit = if self.direct() { DIRECT_ALIGN } else { 1 };
        if len / unit < 2 || !rng.coin() {
            return to_usize(len);
        }
        to_usize(unit * rng.between(1, len / unit - 1))
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut st = self.storage.inner.state.lock();
        let name = &self.name;
        match st.begin(OpClass::Read, || {
            format!("read_at {name:?} off={offset} len={}", buf.len())
        })? {
            Gate::Go => {}
            Gate::Crash => return Err(power_loss()),
            Gate::Fail(f) => return Err(f.error()),
        }
        self.check_direct(buf.as_ptr(), buf.len(), offset)?;
        let live_len = st.inode(self.id).live_len;
        if offset >= live_len || buf.is_empty() {
            return Ok(0);
        }
        let mut n = to_usize((live_len - offset).min(buf.len() as u64));
        if st.short_reads {
            n = self.short_len(&mut st.rng, n);
        }
        st.inode(self.id).live.read(offset, &mut buf[..n])?;
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut st = self.storage.inner.state.lock();
        let name = &self.name;
        let gate = st.begin(OpClass::Write, || {
            format!("write_at {name:?} off={offset} len={}", buf.len())
        })?;
        let aligned = self.check_direct(buf.as_ptr(), buf.len(), offset);
        let fits = offset
            .checked_add(buf.len() as u64)
            .is_some_and(|end| end <= self.storage.inner.capacity);
        match gate {
            Gate::Crash => {
                // In flight: the whole write becomes pending, to be kept, dropped or torn.
                if aligned.is_ok() && fits && !buf.is_empty() {
                    let inode = st.inode(self.id);
                    inode.write_live(offset, buf)?;
                    inode.pending.push(Pending::Write {
                        offset,
                        data: buf.to_vec(),
                    });
                }
                return Err(power_loss());
            }
            Gate::Fail(f) => {
                aligned?;
                if f == Fault::Eio && fits {
                    if self.direct() {
                        // A failed O_DIRECT write is undefined: some sectors may have landed.
                        for (s, e) in sectors(offset, buf.len() as u64) {
                            if st.rng.coin() {
                                let part = &buf[to_usize(s - offset)..to_usize(e - offset)];
                                let inode = st.inode(self.id);
                                inode.write_live(s, part)?;
                                inode.write_durable(s, part);
                            }
                        }
                    } else {
                        let n = to_usize(st.rng.below(buf.len() as u64 + 1));
                        if n > 0 {
                            let inode = st.inode(self.id);
                            inode.write_live(offset, &buf[..n])?;
                            inode.pending.push(Pending::Write {
                                offset,
                                data: buf[..n].to_vec(),
                            });
                        }
                    }
                }
                return Err(f.error());
            }
            Gate::Go => {}
        }
        aligned?;
        if !fits {
            return Err(errno(libc::ENOSPC));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let n = if st.short_writes {
            self.short_len(&mut st.rng, buf.len())
        } else {
            buf.len()
        };
        let data = &buf[..n];
        let direct = self.direct();
        let inode = st.inode(self.id);
        inode.write_live(offset, data)?;
        if direct {
            inode.write_durable(offset, data);
        } else {
            inode.pending.push(Pending::Write {
                offset,
                data: data.to_vec(),
            });
        }
        let latency = st.journal_write_latency;
        drop(st);
        if direct && !latency.is_zero() {
            std::thread::sleep(latency);
        }
        Ok(n)
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.storage.inner.state.lock();
        let name = &self.name;
        match st.begin(OpClass::Sync, || format!("sync_data {name:?}"))? {
            Gate::Go => {
                st.sync_data(self.id, false);
                Ok(())
            }
            Gate::Crash => Err(power_loss()),
            Gate::Fail(Fault::Eintr) => Err(Fault::Eintr.error()),
            Gate::Fail(f) => {
                st.sync_data(self.id, true);
                Err(f.error())
            }
        }
    }

    fn len(&self) -> io::Result<u64> {
        let mut st = self.storage.inner.state.lock();
        let name = &self.name;
        match st.begin(OpClass::Read, || format!("len {name:?}"))? {
            Gate::Go => Ok(st.inode(self.id).live_len),
            Gate::Crash => Err(power_loss()),
            Gate::Fail(f) => Err(f.error()),
        }
    }

    fn allocate(&self, len_bytes: u64) -> io::Result<()> {
        let mut st = self.storage.inner.state.lock();
        let name = &self.name;
        let gate = st.begin(OpClass::Write, || {
            format!("allocate {name:?} len={len_bytes}")
        })?;
        if let Gate::Fail(f) = gate {
            return Err(f.error());
        }
        let inode = st.inode(self.id);
        if len_bytes > inode.live_len {
            if len_bytes > self.storage.inner.capacity {
                return Err(if gate == Gate::Crash {
                    power_loss()
                } else {
                    errno(libc::ENOSPC)
                });
            }
            // The memfd is zero past the live length, so growing needs no writing.
            inode.live_len = len_bytes;
            inode.pending.push(Pending::Grow { len: len_bytes });
        }
        if gate == Gate::Crash {
            return Err(power_loss());
        }
        Ok(())
    }

    fn truncate(&self, len_bytes: u64) -> io::Result<()> {
        let mut st = self.storage.inner.state.lock();
        let name = &self.name;
        let gate = st.begin(OpClass::Write, || {
            format!("truncate {name:?} len={len_bytes}")
        })?;
        if let Gate::Fail(f) = gate {
            return Err(f.error());
        }
        let inode = st.inode(self.id);
        if len_bytes < inode.live_len {
            // Keep the memfd zero past the live length (growing relies on it).
            inode.live.zero(len_bytes, inode.live_len - len_bytes)?;
            inode.live_len = len_bytes;
            inode.pending.push(Pending::Shrink { len: len_bytes });
        }
        if gate == Gate::Crash {
            return Err(power_loss());
        }
        Ok(())
    }

    fn map(&self, len_bytes: u64) -> io::Result<Arc<dyn Mapping>> {
        let mut st = self.storage.inner.state.lock();
        let name = &self.name;
        match st.begin(OpClass::Read, || format!("map {name:?} len={len_bytes}"))? {
            Gate::Go => {}
            Gate::Crash => return Err(power_loss()),
            Gate::Fail(f) => return Err(f.error()),
        }
        let inode = st.inode(self.id);
        if len_bytes > inode.live_len {
            // A real mapping past the end of the file faults (SIGBUS) when touched; refuse
            // it outright so the bug shows.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "mapping {len_bytes} bytes of {name:?}, which has {}",
                    inode.live_len
                ),
            ));
        }
        inode.live.map(to_usize(len_bytes))
    }
}

/// A read-only view of the first bytes of a live image.
enum SimMapping {
    /// Nothing mapped (`mmap` refuses a zero length).
    Empty,
    /// A shared read-only mapping of the live image's memfd.
    Mapped(memmap2::Mmap),
}

impl Mapping for SimMapping {
    fn bytes(&self) -> &[u8] {
        match self {
            SimMapping::Empty => &[],
            SimMapping::Mapped(map) => map,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{read_exact_at, write_all_at};

    /// A 4 KiB-aligned buffer of `blocks` 4 KiB blocks filled with `byte`.
    struct Aligned {
        raw: Vec<u8>,
        start: usize,
        len: usize,
    }

    impl Aligned {
        fn new(blocks: usize, byte: u8) -> Aligned {
            let len = blocks * 4096;
            let raw = vec![byte; len + 4096];
            let start = raw.as_ptr().align_offset(4096);
            Aligned { raw, start, len }
        }

        fn bytes(&self) -> &[u8] {
            &self.raw[self.start..self.start + self.len]
        }
    }

    fn open(s: &SimStorage, name: &str, kind: FileKind) -> Arc<dyn StorageFile> {
        s.open(name, kind, true).expect("open")
    }

    #[test]
    fn unsynced_writes_follow_the_damage_variant_synced_ones_always_survive() {
        let s = SimStorage::new(1);
        let f = open(&s, "data", FileKind::Data);
        s.sync_dir("").expect("sync dir");
        write_all_at(&*f, b"synced", 0).expect("write");
        f.sync_data().expect("sync");
        write_all_at(&*f, b"pending", 100).expect("write");
        assert_eq!(&s.read_file("data").expect("read")[100..107], b"pending");

        let dropped = s.power_cut(Damage::DropAll);
        assert_eq!(dropped.read_file("data").expect("read"), b"synced");

        let kept = s.power_cut(Damage::KeepAll);
        let image = kept.read_file("data").expect("read");
        assert_eq!(&image[..6], b"synced");
        assert_eq!(&image[100..107], b"pending");
        assert_eq!(image.len(), 107);

        for salt in 0..50 {
            let r = s.power_cut_salted(Damage::Random, salt);
            assert_eq!(&r.read_file("data").expect("read")[..6], b"synced");
        }
    }

    #[test]
    fn allocation_is_pending_until_sync() {
        let s = SimStorage::new(2);
        let f = open(&s, "data", FileKind::Data);
        s.sync_dir("").expect("sync dir");
        f.allocate(8192).expect("allocate");
        assert_eq!(f.len().expect("len"), 8192);
        assert_eq!(
            s.power_cut(Damage::DropAll)
                .read_file("data")
                .expect("r")
                .len(),
            0
        );
        assert_eq!(
            s.power_cut(Damage::KeepAll)
                .read_file("data")
                .expect("r")
                .len(),
            8192
        );

        let s = SimStorage::new(2);
        let f = open(&s, "data", FileKind::Data);
        s.sync_dir("").expect("sync dir");
        f.allocate(8192).expect("allocate");
        f.sync_data().expect("sync");
        assert_eq!(
            s.power_cut(Damage::DropAll)
                .read_file("data")
                .expect("r")
                .len(),
            8192
        );
    }

    #[test]
    fn journal_durable_writes_are_durable_on_return() {
        let s = SimStorage::new(3);
        let w = open(&s, "j", FileKind::JournalDurable);
        s.sync_dir("").expect("sync dir");
        w.allocate(3 * 4096).expect("allocate");
        w.sync_data().expect("sync");
        let block = Aligned::new(1, 0xAB);
        write_all_at(&*w, block.bytes(), 4096).expect("write");
        let after = s.power_cut(Damage::DropAll);
        let image = after.read_file("j").expect("read");
        assert_eq!(image.len(), 3 * 4096);
        assert!(image[4096..8192].iter().all(|&b| b == 0xAB));
        assert!(image[..4096].iter().all(|&b| b == 0));

        // Readable through a buffered handle of the same file.
        let r = after
            .open("j", FileKind::JournalBuffered, false)
            .expect("open");
        let mut back = [0u8; 3];
        read_exact_at(&*r, &mut back, 4097).expect("read");
        assert_eq!(back, [0xAB; 3]);
    }

    #[test]
    fn direct_write_supersedes_older_pending_write_of_the_same_range() {
        let s = SimStorage::new(4);
        let buffered = open(&s, "j", FileKind::JournalBuffered);
        s.sync_dir("").expect("sync dir");
        write_all_at(&*buffered, &[1u8; 8192], 0).expect("write");
        let direct = s.open("j", FileKind::JournalDurable, false).expect("open");
        let block = Aligned::new(1, 2);
        write_all_at(&*direct, block.bytes(), 0).expect("write");
        let image = s.power_cut(Damage::KeepAll).read_file("j").expect("read");
        assert!(image[..4096].iter().all(|&b| b == 2));
        assert!(image[4096..].iter().all(|&b| b == 1));
    }

    #[test]
    fn misaligned_journal_durable_io_is_einval() {
        let s = SimStorage::new(5);
        let f = open(&s, "j", FileKind::JournalDurable);
        f.allocate(16384).expect("allocate");
        let block = Aligned::new(2, 7);
        let einval = |r: io::Result<usize>| r.err().and_then(|e| e.raw_os_error());
        assert_eq!(einval(f.write_at(block.bytes(), 512)), Some(libc::EINVAL));
        assert_eq!(
            einval(f.write_at(&block.bytes()[..4000], 0)),
            Some(libc::EINVAL)
        );
        assert_eq!(
            einval(f.write_at(&block.raw[block.start + 1..][..4096], 0)),
            Some(libc::EINVAL)
        );
        let mut small = [0u8; 10];
        assert_eq!(einval(f.read_at(&mut small, 0)), Some(libc::EINVAL));
        assert_eq!(
            f.write_at(block.bytes(), 4096).expect("aligned write"),
            8192
        );
        // Other kinds take any alignment.
        let d = open(&s, "d", FileKind::Data);
        assert_eq!(d.write_at(b"abc", 3).expect("write"), 3);
    }

    #[test]
    fn torn_writes_land_a_strict_subset_of_sectors() {
        let payload = vec![0xEEu8; 8 * 512];
        let mut strict_subset = false;
        for salt in 0..64 {
            let s = SimStorage::new(6);
            let f = open(&s, "data", FileKind::Data);
            f.allocate(payload.len() as u64).expect("allocate");
            f.sync_data().expect("sync");
            s.sync_dir("").expect("sync dir");
            write_all_at(&*f, &payload, 0).expect("write");
            let image = s
                .power_cut_salted(Damage::Random, salt)
                .read_file("data")
                .expect("read");
            assert_eq!(image.len(), payload.len());
            let landed: Vec<bool> = image
                .chunks(512)
                .map(|sector| {
                    // Each sector lands whole or not at all.
                    assert!(sector.iter().all(|&b| b == sector[0]));
                    sector[0] == 0xEE
                })
                .collect();
            let n = landed.iter().filter(|&&l| l).count();
            strict_subset |= n > 0 && n < landed.len();
        }
        assert!(strict_subset, "no salt tore the write");
    }

    #[test]
    fn in_flight_journal_write_may_be_torn() {
        let mut outcomes = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let s = SimStorage::new(seed);
            let f = open(&s, "j", FileKind::JournalDurable);
            f.allocate(8192).expect("allocate");
            f.sync_data().expect("sync");
            s.sync_dir("").expect("sync dir");
            let at = s.ops_count();
            s.crash_at(at);
            let block = Aligned::new(2, 9);
            let err = f.write_at(block.bytes(), 0).expect_err("power loss");
            assert_eq!(err.to_string(), POWER_LOSS);
            assert!(s.is_frozen());
            assert_eq!(f.len().expect_err("frozen").to_string(), POWER_LOSS);
            assert_eq!(
                s.power_cut(Damage::DropAll).read_file("j").expect("r"),
                vec![0u8; 8192]
            );
            assert_eq!(
                s.power_cut(Damage::KeepAll).read_file("j").expect("r"),
                vec![9u8; 8192]
            );
            let image = s.power_cut(Damage::Random).read_file("j").expect("r");
            // Calls a crashed engine keeps making do not change the outcome.
            for _ in 0..3 {
                f.sync_data().expect_err("frozen");
            }
            assert_eq!(
                s.power_cut(Damage::Random).read_file("j").expect("r"),
                image
            );
            outcomes.insert(image.iter().filter(|&&b| b == 9).count() / 512);
        }
        assert!(outcomes.iter().any(|&n| n > 0 && n < 16), "{outcomes:?}");
    }

    #[test]
    fn crash_at_every_op_replays_deterministically() {
        fn workload(s: &SimStorage) -> io::Result<()> {
            s.create_dir("j")?;
            s.sync_dir("")?;
            let d = s.open("data", FileKind::Data, true)?;
            let j = s.open("j/1", FileKind::JournalDurable, true)?;
            s.sync_dir("j")?;
            j.allocate(16384)?;
            j.sync_data()?;
            let block = Aligned::new(2, 3);
            write_all_at(&*j, block.bytes(), 0)?;
            write_all_at(&*d, &[5u8; 3000], 700)?;
            d.sync_data()?;
            write_all_at(&*d, &[6u8; 2000], 100)?;
            s.rename("j/1", "j/2")?;
            s.sync_dir("j")
        }
        let clean = SimStorage::new(42);
        workload(&clean).expect("clean run");
        let n = clean.ops_count();
        assert!(n > 10);
        for i in 0..=n {
            for damage in [Damage::DropAll, Damage::KeepAll, Damage::Random] {
                let images = || {
                    let s = SimStorage::new(42);
                    s.crash_at(i);
                    let result = workload(&s);
                    assert_eq!(result.is_err(), i < n);
                    let after = s.power_cut(damage);
                    after
                        .file_names()
                        .into_iter()
                        .map(|name| {
                            let image = after.read_file(&name).expect("read");
                            (name, image)
                        })
                        .collect::<Vec<_>>()
                };
                assert_eq!(images(), images(), "crash at {i}, {damage:?}");
            }
        }
    }

    #[test]
    fn renames_without_sync_dir_can_be_lost() {
        let s = SimStorage::new(7);
        let f = open(&s, "tmp", FileKind::Header);
        write_all_at(&*f, b"header", 0).expect("write");
        f.sync_data().expect("sync");
        s.sync_dir("").expect("sync dir");
        s.rename("tmp", "final").expect("rename");
        assert_eq!(s.list("").expect("list"), vec!["final".to_owned()]);

        let dropped = s.power_cut(Damage::DropAll);
        assert_eq!(dropped.file_names(), vec!["tmp".to_owned()]);
        assert_eq!(dropped.read_file("tmp").expect("read"), b"header");
        let kept = s.power_cut(Damage::KeepAll);
        assert_eq!(kept.file_names(), vec!["final".to_owned()]);
        assert_eq!(kept.read_file("final").expect("read"), b"header");
        let mut seen = std::collections::BTreeSet::new();
        for salt in 0..32 {
            // Atomic: exactly one of the two names.
            seen.insert(s.power_cut_salted(Damage::Random, salt).file_names());
        }
        assert_eq!(seen.len(), 2, "{seen:?}");

        s.clear_faults();
        let s = SimStorage::new(7);
        let f = open(&s, "tmp", FileKind::Header);
        f.sync_data().expect("sync");
        s.sync_dir("").expect("sync dir");
        s.rename("tmp", "final").expect("rename");
        s.sync_dir("").expect("sync dir");
        assert_eq!(
            s.power_cut(Damage::DropAll).file_names(),
            vec!["final".to_owned()]
        );
    }

    #[test]
    fn directory_namespace() {
        /// Builds a tree; `syncs` lists the directories to sync afterwards, in order.
        fn tree(syncs: &[&str]) -> SimStorage {
            let s = SimStorage::new(8);
            s.create_dir("a/b").expect("mkdir");
            s.create_dir("a/b").expect("mkdir again");
            open(&s, "a/b/f", FileKind::Data);
            open(&s, "a/g", FileKind::Data);
            open(&s, "top", FileKind::Data);
            for dir in syncs {
                s.sync_dir(dir).expect("sync");
            }
            s
        }
        let names = |v: &[&str]| v.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();

        let s = tree(&[]);
        assert!(s.exists("").expect("exists"));
        assert!(s.exists("a/b/f").expect("exists"));
        assert!(!s.exists("a/c").expect("exists"));
        let kind = |r: io::Result<Arc<dyn StorageFile>>| r.err().map(|e| e.kind());
        assert_eq!(
            kind(s.open("nodir/x", FileKind::Data, true)),
            Some(io::ErrorKind::NotFound)
        );
        assert_eq!(
            kind(s.open("missing", FileKind::Data, false)),
            Some(io::ErrorKind::NotFound)
        );
        assert_eq!(
            kind(s.open("bad//name", FileKind::Data, true)),
            Some(io::ErrorKind::InvalidInput)
        );
        assert_eq!(s.list("a").expect("list"), names(&["b", "g"]));
        assert_eq!(s.list("").expect("list"), names(&["a", "top"]));
        assert!(s.list("zz").is_err());
        // Nothing synced: everything vanishes; everything survives a process crash.
        assert!(s.power_cut(Damage::DropAll).file_names().is_empty());
        assert_eq!(tree(&[]).power_cut(Damage::KeepAll).file_names().len(), 3);

        // Files synced in a directory whose own entry is not durable vanish with it.
        let s = tree(&["a/b", "a"]);
        assert!(s.power_cut(Damage::DropAll).file_names().is_empty());
        let s = tree(&["a/b", "a", ""]);
        assert_eq!(
            s.power_cut(Damage::DropAll).file_names(),
            names(&["a/b/f", "a/g", "top"])
        );
        // Syncing only the root keeps `a` but none of its entries.
        let after = tree(&[""]).power_cut(Damage::DropAll);
        assert_eq!(after.file_names(), names(&["top"]));
        assert!(after.list("a").expect("list").is_empty());

        // A removal without sync_dir can be undone by a power loss.
        let removed = |sync: bool| {
            let s = tree(&["a/b", "a", ""]).power_cut(Damage::DropAll);
            s.remove("top").expect("remove");
            assert!(!s.exists("top").expect("exists"));
            if sync {
                s.sync_dir("").expect("sync");
            }
            s
        };
        assert!(
            removed(false)
                .power_cut(Damage::DropAll)
                .exists("top")
                .expect("exists")
        );
        assert!(
            !removed(false)
                .power_cut(Damage::KeepAll)
                .exists("top")
                .expect("exists")
        );
        assert!(
            !removed(true)
                .power_cut(Damage::DropAll)
                .exists("top")
                .expect("exists")
        );
    }

    #[test]
    fn removed_file_keeps_working_while_open() {
        let s = SimStorage::new(9);
        let f = open(&s, "x", FileKind::Data);
        s.remove("x").expect("remove");
        write_all_at(&*f, b"still", 0).expect("write");
        let mut back = [0u8; 5];
        read_exact_at(&*f, &mut back, 0).expect("read");
        assert_eq!(&back, b"still");
        assert!(s.file_names().is_empty());
    }

    #[test]
    fn second_lock_would_block() {
        let s = SimStorage::new(10);
        let guard = s.lock().expect("lock");
        let err = s.lock().expect_err("second lock must fail");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(guard);
        let _again = s.lock().expect("lock after release");
        // The disk after a power cut is unlocked.
        let _fresh = s
            .power_cut(Damage::KeepAll)
            .lock()
            .expect("lock after reboot");
    }

    #[test]
    fn eio_once_and_persistent() {
        let s = SimStorage::new(11);
        let f = open(&s, "d", FileKind::Data); // op 0
        let next = s.ops_count();
        s.fail_at(next, Fault::Eio, false);
        let err = f.write_at(b"x", 0).expect_err("injected");
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        f.write_at(b"x", 0).expect("one-shot fault is gone");
        f.sync_data().expect("sync");

        let next = s.ops_count();
        s.fail_at(next, Fault::Eio, true);
        assert_eq!(
            f.sync_data().err().and_then(|e| e.raw_os_error()),
            Some(libc::EIO)
        );
        // Writes are another class and still work; every later sync fails.
        f.write_at(b"y", 0).expect("write");
        assert_eq!(
            f.sync_data().err().and_then(|e| e.raw_os_error()),
            Some(libc::EIO)
        );
        assert_eq!(
            s.sync_dir("").err().and_then(|e| e.raw_os_error()),
            Some(libc::EIO)
        );
        s.clear_faults();
        f.sync_data().expect("faults cleared");

        // ENOSPC and EINTR; EINTR is retried by write_all_at.
        let next = s.ops_count();
        s.fail_at(next, Fault::Enospc, false);
        assert_eq!(
            f.allocate(1 << 20).err().and_then(|e| e.raw_os_error()),
            Some(libc::ENOSPC)
        );
        let next = s.ops_count();
        s.fail_at(next, Fault::Eintr, true);
        write_all_at(&*f, b"after eintr", 0).expect("EINTR is retried");
        assert_eq!(&s.read_file("d").expect("read")[..11], b"after eintr");
    }

    #[test]
    fn failed_sync_can_lose_writes_for_good() {
        let mut lost = false;
        for seed in 0..32 {
            let s = SimStorage::new(seed);
            let f = open(&s, "d", FileKind::Data);
            s.sync_dir("").expect("sync dir");
            for i in 0..8u8 {
                write_all_at(&*f, &[i + 1], u64::from(i)).expect("write");
            }
            let next = s.ops_count();
            s.fail_at(next, Fault::Eio, false);
            f.sync_data().expect_err("injected");
            // The live image still shows every write.
            assert_eq!(
                s.read_file("d").expect("read"),
                vec![1, 2, 3, 4, 5, 6, 7, 8]
            );
            // A later successful sync cannot bring lost pages back.
            f.sync_data().expect("sync");
            let image = s.power_cut(Damage::DropAll).read_file("d").expect("read");
            lost |= image != [1, 2, 3, 4, 5, 6, 7, 8];
        }
        assert!(lost);
    }

    #[test]
    fn short_writes_and_reads_are_looped_over() {
        let s = SimStorage::new(12);
        s.short_writes(true);
        s.short_reads(true);
        let f = open(&s, "d", FileKind::Data);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut shorts = 0;
        for _ in 0..20 {
            let n = f.write_at(&data, 0).expect("write");
            assert!(n >= 1 && n <= data.len());
            shorts += usize::from(n < data.len());
        }
        assert!(shorts > 0, "no short write in 20 tries");
        write_all_at(&*f, &data, 0).expect("write all");
        let mut back = vec![0u8; data.len()];
        read_exact_at(&*f, &mut back, 0).expect("read all");
        assert_eq!(back, data);

        let j = open(&s, "j", FileKind::JournalDurable);
        let block = Aligned::new(8, 1);
        for _ in 0..20 {
            let n = j.write_at(block.bytes(), 0).expect("write");
            assert!(n > 0 && n.is_multiple_of(4096));
        }
        write_all_at(&*j, block.bytes(), 0).expect("write all");
    }

    #[test]
    fn capacity_is_enforced_with_enospc() {
        let s = SimStorage::with_capacity(13, 10_000);
        assert_eq!(s.file_capacity_bytes(), 12_288);
        let f = open(&s, "d", FileKind::Data);
        f.allocate(12_288).expect("allocate to capacity");
        let enospc = Some(libc::ENOSPC);
        assert_eq!(
            f.allocate(12_289).err().and_then(|e| e.raw_os_error()),
            enospc
        );
        assert_eq!(
            f.write_at(b"xy", 12_287)
                .err()
                .and_then(|e| e.raw_os_error()),
            enospc
        );
        f.write_at(b"x", 12_287).expect("last byte");
    }

    #[test]
    fn mapping_sees_later_writes_and_outlives_growth() {
        let s = SimStorage::new(14);
        let f = open(&s, "data", FileKind::Data);
        f.allocate(8192).expect("allocate");
        let map = f.map(8192).expect("map");
        assert_eq!(map.bytes().as_ptr() as usize % 4096, 0);
        write_all_at(&*f, b"hello", 100).expect("write");
        assert_eq!(&map.bytes()[100..105], b"hello");
        f.allocate(1 << 20).expect("grow");
        let bigger = f.map(1 << 20).expect("map");
        write_all_at(&*f, b"world", 9000).expect("write");
        assert_eq!(&bigger.bytes()[9000..9005], b"world");
        assert_eq!(&map.bytes()[100..105], b"hello");
        assert!(f.map((1 << 20) + 1).is_err(), "mapping past the end");
        // Mapped bytes can be the source of a write, to another file or elsewhere in this one.
        let other = open(&s, "other", FileKind::Data);
        write_all_at(&*other, &map.bytes()[100..105], 0).expect("write from mapping");
        write_all_at(&*f, &map.bytes()[100..105], 200).expect("write from own mapping");
        assert_eq!(s.read_file("other").expect("read"), b"hello");
        assert_eq!(&map.bytes()[200..205], b"hello");
        drop(other);
        drop(f);
        drop(s);
        assert_eq!(&bigger.bytes()[100..105], b"hello", "outlives the disk");
    }

    #[test]
    fn mapping_reads_race_only_with_writes_of_other_ranges() {
        let s = SimStorage::new(18);
        let f = open(&s, "data", FileKind::Data);
        f.allocate(8 * 4096).expect("allocate");
        write_all_at(&*f, &[1u8; 4096], 0).expect("write page 0");
        let map = f.map(8 * 4096).expect("map");
        let rounds = 200;
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let bytes = map.bytes();
                let mut sum = 0u64;
                for _ in 0..rounds {
                    sum += bytes[..4096].iter().map(|&b| u64::from(b)).sum::<u64>();
                }
                sum
            });
            for round in 0..rounds {
                for page in 1..8u64 {
                    let fill = u8::try_from(round % 200).expect("small") + 2;
                    write_all_at(&*f, &[fill; 4096], page * 4096).expect("write");
                }
            }
            assert_eq!(reader.join().expect("reader"), 4096 * rounds as u64);
        });
        // After the join (a synchronizing edge), a fresh slice sees the last writes.
        let last = u8::try_from((rounds - 1) % 200).expect("small") + 2;
        assert!(map.bytes()[4096..].iter().all(|&b| b == last));
    }

    #[test]
    fn wal_checker_flags_out_of_order_events() {
        let s = SimStorage::new(15);
        s.note(StorageEvent::DataWrite { txn_id_max: 0 });
        s.note(StorageEvent::JournalDurable { txn_id: 3 });
        s.note(StorageEvent::DataWrite { txn_id_max: 3 });
        s.note(StorageEvent::HeaderDurable { synced_txn_id: 3 });
        s.note(StorageEvent::JournalRetire {
            journal_number: 1,
            last_txn_id: 3,
        });
        assert!(s.violations().is_empty(), "{:?}", s.violations());

        s.note(StorageEvent::DataWrite { txn_id_max: 4 });
        assert_eq!(s.violations().len(), 1);
        s.note(StorageEvent::JournalDurable { txn_id: 5 });
        s.note(StorageEvent::JournalRetire {
            journal_number: 2,
            last_txn_id: 5,
        });
        let v = s.violations();
        assert_eq!(v.len(), 2);
        assert!(v[0].contains("txn 4"), "{v:?}");
        assert!(v[1].contains("journal 2"), "{v:?}");

        // The durable state carries over a power cut; the violations belong to the old run.
        let after = s.power_cut(Damage::DropAll);
        after.note(StorageEvent::DataWrite { txn_id_max: 5 });
        assert!(after.violations().is_empty());
    }

    #[test]
    fn same_seed_same_post_crash_images() {
        fn run(seed: u64) -> Vec<(String, Vec<u8>)> {
            let s = SimStorage::new(seed);
            s.short_writes(true);
            let f = s.open("d", FileKind::Data, true).expect("open");
            s.sync_dir("").expect("sync dir");
            for i in 0..40u64 {
                let data = vec![u8::try_from(i).expect("small"); 1500];
                write_all_at(&*f, &data, i * 700).expect("write");
                if i % 7 == 0 {
                    f.sync_data().expect("sync");
                }
            }
            s.create_dir("sub").expect("mkdir");
            s.open("sub/x", FileKind::Header, true).expect("open");
            let after = s.power_cut(Damage::Random);
            after
                .file_names()
                .into_iter()
                .map(|n| {
                    let image = after.read_file(&n).expect("read");
                    (n, image)
                })
                .collect()
        }
        assert_eq!(run(99), run(99));
        assert_ne!(run(99), run(100));
        assert_eq!(SimStorage::new(99).seed(), 99);
    }

    #[test]
    fn corruption_helpers_act_on_both_images() {
        let s = SimStorage::new(16);
        let f = open(&s, "d", FileKind::Data);
        s.sync_dir("").expect("sync dir");
        write_all_at(&*f, &[0u8; 16], 0).expect("write");
        f.sync_data().expect("sync");
        let ops = s.ops_count();
        s.flip_bit("d", 9).expect("flip");
        s.write_raw("d", 4, b"zz").expect("raw");
        s.truncate_raw("d", 8).expect("truncate");
        assert_eq!(s.ops_count(), ops, "helpers are not operations");
        let expected = [0, 2, 0, 0, b'z', b'z', 0, 0];
        assert_eq!(s.read_file("d").expect("read"), expected);
        assert_eq!(
            s.power_cut(Damage::DropAll).read_file("d").expect("read"),
            expected
        );
        assert_eq!(
            f.len().err().map(|e| e.to_string()),
            Some(POWER_LOSS.to_owned())
        );
        assert!(s.flip_bit("d", 64).is_err());
        assert!(s.read_file("nope").is_err());
    }

    #[test]
    fn trace_records_operations() {
        let s = SimStorage::new(17);
        s.record_trace(true);
        let f = open(&s, "d", FileKind::Data);
        f.sync_data().expect("sync");
        let t = s.trace();
        assert_eq!(t.len(), 2);
        assert!(t[0].starts_with("0: open \"d\""), "{t:?}");
        assert!(t[1].starts_with("1: sync_data"), "{t:?}");
    }

    #[test]
    fn journal_writes_take_their_latency() {
        let s = SimStorage::new(21);
        s.journal_write_latency(std::time::Duration::from_millis(20));
        let j = open(&s, "j", FileKind::JournalDurable);
        let block = Aligned::new(1, 7);
        let started = std::time::Instant::now();
        write_all_at(&*j, block.bytes(), 0).expect("durable write");
        assert!(started.elapsed() >= std::time::Duration::from_millis(20));
        assert_eq!(s.read_file("j").expect("read"), block.bytes());
    }

    #[test]
    fn crash_at_an_operation_of_a_watched_thread() {
        let s = SimStorage::new(19);
        let f = open(&s, "d", FileKind::Data);
        s.watch_thread("sim-worker");
        s.crash_at_watched_op(2);
        let worker = |s: SimStorage, f: Arc<dyn StorageFile>| {
            std::thread::Builder::new()
                .name("sim-worker".into())
                .spawn(move || {
                    for i in 0..3u64 {
                        f.write_at(b"w", i)?;
                    }
                    s.sync_dir("")
                })
                .expect("spawn")
                .join()
                .expect("join")
        };
        // Operations of other threads do not count.
        for _ in 0..5 {
            f.sync_data().expect("sync");
        }
        assert_eq!(s.watched_ops_count(), 0);
        let err = worker(s.clone(), Arc::clone(&f)).expect_err("crashed");
        assert_eq!(err.to_string(), POWER_LOSS);
        assert!(s.is_frozen());
        assert_eq!(s.watched_ops_count(), 3);
        let point = s.crash_point().expect("a crash point");
        assert_eq!(point.op, 8);
        assert_eq!(point.thread.as_deref(), Some("sim-worker"));
        assert!(point.what.starts_with("write_at \"d\" off=2"), "{point:?}");

        let unwatched = SimStorage::new(20);
        unwatched.crash_at_watched_op(0);
        let f = open(&unwatched, "d", FileKind::Data);
        worker(unwatched.clone(), f).expect("no thread is watched");
        assert!(!unwatched.is_frozen());
        assert_eq!(unwatched.crash_point(), None);
    }
}
