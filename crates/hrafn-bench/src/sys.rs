//! Facts about this process and its files.

use std::path::Path;

use anyhow::{Context, Result};

/// Sum of the lengths of all files under `dir` (recursively); 0 if it does not exist.
pub fn dir_bytes(dir: &Path) -> Result<u64> {
    if !dir.exists() {
        return Ok(0);
    }
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            total += dir_bytes(&entry.path())?;
        } else {
            total += meta.len();
        }
    }
    Ok(total)
}

/// Peak resident set size of this process (`VmHWM` in /proc/self/status), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A memory control group made for a child process (inside this process's own group),
/// removed when dropped.
pub struct MemoryGroup {
    dir: std::path::PathBuf,
}

impl MemoryGroup {
    /// Makes a group limited to `limit_bytes` where the control-group file system lets this
    /// process (cgroup v2 with the memory controller, or v1's memory hierarchy); `None`
    /// elsewhere.
    pub fn create(limit_bytes: u64) -> Option<MemoryGroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let name = format!("hrafn-bench-{}", std::process::id());
        for line in own.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let path = path.trim_start_matches('/');
            // v2: one unified hierarchy ("0::/path"); v1: one per controller.
            let (base, limit_file) = if controllers.is_empty() {
                ("/sys/fs/cgroup", "memory.max")
            } else if controllers.split(',').any(|c| c == "memory") {
                ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
            } else {
                continue;
            };
            let dir = Path::new(base).join(path).join(&name);
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            let group = MemoryGroup { dir };
            if std::fs::write(group.dir.join(limit_file), limit_bytes.to_string()).is_ok() {
                return Some(group);
            }
        }
        None
    }

    /// The group's directory, for [`MemoryGroup::join`] in the child.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Moves this process into the group at `dir`: memory it faults in from then on
    /// (the page cache included) is charged to that group.
    pub fn join(dir: &Path) -> Result<()> {
        std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string())
            .with_context(|| format!("joining the control group {}", dir.display()))
    }
}

impl Drop for MemoryGroup {
    fn drop(&mut self) {
        // Fails only while a process is still in it; the child has exited by then.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The memory limit of this process's own control group (`memory.max` of cgroup v2), in
/// bytes; `None` where it has none: no v2 group, no memory controller for it (no file),
/// or "max".
pub fn own_memory_max() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let file = Path::new("/sys/fs/cgroup")
        .join(v2_group(&own)?)
        .join("memory.max");
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// The group path of the v2 line ("0::/path") of `/proc/self/cgroup`, without its "/".
fn v2_group(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_hwm_parses() {
        let status = "Name:\tx\nVmPeak:\t  2000 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(1234 * 1024));
        assert_eq!(parse_vm_hwm("Name:\tx\n"), None);
        assert!(peak_rss_bytes().is_some_and(|b| b > 0));
    }

    #[test]
    fn the_v2_group_is_found() {
        let v1_and_v2 = "12:memory:/a\n1:name=systemd:/b\n0::/user.slice/run-r1.scope\n";
        assert_eq!(v2_group(v1_and_v2), Some("user.slice/run-r1.scope"));
        assert_eq!(v2_group("0::/\n"), Some(""));
        assert_eq!(v2_group("12:memory:/a\n"), None);
        // Whatever this machine has, reading it does not fail.
        let _ = own_memory_max();
    }

    #[test]
    fn dir_bytes_sums_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a"), [0u8; 100]).expect("write a");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/b"), [0u8; 23]).expect("write b");
        assert_eq!(dir_bytes(dir.path()).expect("dir_bytes"), 123);
        assert_eq!(dir_bytes(&dir.path().join("missing")).expect("missing"), 0);
    }

    /// Where a group can be made (root in a container), a child joining it is charged
    /// there and the group goes away when dropped; elsewhere `create` says so with `None`.
    #[test]
    fn memory_group_limits_a_child_and_is_removed() {
        let Some(group) = MemoryGroup::create(64 << 20) else {
            return;
        };
        let dir = group.dir().to_path_buf();
        let limit = ["memory.max", "memory.limit_in_bytes"]
            .iter()
            .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
            .expect("a limit file");
        assert_eq!(limit.trim().parse::<u64>().ok(), Some(64 << 20));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("child");
        std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).expect("move the child");
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).expect("procs");
        assert!(
            procs.lines().any(|l| l == child.id().to_string()),
            "{procs}"
        );
        child.kill().expect("kill");
        child.wait().expect("wait");
        // The kernel empties the group's process list once the child is reaped.
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(group);
        assert!(!dir.exists(), "the group was removed");
    }
}
