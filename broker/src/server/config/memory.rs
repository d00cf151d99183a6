//! How much memory this process may use: the cgroup memory limit when there
//! is one, else physical memory. The default of `--memory-max` is half of it.
//!
//! Read from files only (no `unsafe`, no libc):
//! - cgroup v2: `memory.max` of this process's cgroup (from `/proc/self/cgroup`
//!   line `0::PATH`) and of each of its ancestors under `/sys/fs/cgroup`; the
//!   smallest one applies. `max` means no limit.
//! - cgroup v1: `memory.limit_in_bytes` the same way under
//!   `/sys/fs/cgroup/memory`. "No limit" is a huge number there
//!   (`9223372036854771712`), so values of 2^60 bytes or more are ignored.
//! - physical memory: `MemTotal` of `/proc/meminfo`.
//!
//! A cgroup limit above physical memory does not apply; a limit of 0 is
//! ignored. Where no file can be read (not Linux), nothing is detected and
//! the configuration falls back to a fixed default.
//!
//! The detection takes the file reader as a parameter so tests can lay out a
//! fake `/proc` and `/sys`.

use std::fmt;
use std::path::{Path, PathBuf};

/// Cgroup or physical memory limits at or above this many bytes are treated
/// as "no limit" (cgroup v1 reports `i64::MAX` rounded down to a page).
const ABSURD_BYTES: u64 = 1 << 60;

/// Where a detected memory limit came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemorySource {
    /// A cgroup v2 `memory.max` file.
    CgroupV2(PathBuf),
    /// A cgroup v1 `memory.limit_in_bytes` file.
    CgroupV1(PathBuf),
    /// `MemTotal` in `/proc/meminfo`.
    PhysicalMemory,
}

impl fmt::Display for MemorySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemorySource::CgroupV2(path) => write!(f, "cgroup v2 limit {}", path.display()),
            MemorySource::CgroupV1(path) => write!(f, "cgroup v1 limit {}", path.display()),
            MemorySource::PhysicalMemory => f.write_str("physical memory"),
        }
    }
}

/// The memory available to this process and where that figure came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryLimit {
    /// Bytes of memory available.
    pub bytes: u64,
    /// The file the figure was read from.
    pub source: MemorySource,
}

impl MemoryLimit {
    /// Detects the limit from the real `/proc` and `/sys/fs/cgroup`.
    pub fn detect() -> Option<MemoryLimit> {
        detect_with(&|path| std::fs::read_to_string(path).ok())
    }
}

/// Detects the limit through `read`, which returns a file's content or
/// `None` when it cannot be read.
pub(crate) fn detect_with(read: &dyn Fn(&Path) -> Option<String>) -> Option<MemoryLimit> {
    let physical = read(Path::new("/proc/meminfo"))
        .and_then(|text| parse_meminfo_total(&text))
        .map(|bytes| MemoryLimit {
            bytes,
            source: MemorySource::PhysicalMemory,
        });

    let own = read(Path::new("/proc/self/cgroup")).unwrap_or_default();
    let v2_path = cgroup_path(&own, |controllers, hierarchy| {
        hierarchy == "0" && controllers.is_empty()
    });
    let v1_path = cgroup_path(&own, |controllers, _| {
        controllers.split(',').any(|c| c == "memory")
    });

    let v2 = limit_along(read, Path::new("/sys/fs/cgroup"), v2_path, "memory.max").map(
        |(bytes, path)| MemoryLimit {
            bytes,
            source: MemorySource::CgroupV2(path),
        },
    );
    let v1 = limit_along(
        read,
        Path::new("/sys/fs/cgroup/memory"),
        v1_path,
        "memory.limit_in_bytes",
    )
    .map(|(bytes, path)| MemoryLimit {
        bytes,
        source: MemorySource::CgroupV1(path),
    });

    [v2, v1, physical]
        .into_iter()
        .flatten()
        .min_by_key(|limit| limit.bytes)
}

/// `MemTotal` in bytes from the text of `/proc/meminfo`.
fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    if words.next() != Some("kB") {
        return None;
    }
    kib.checked_mul(1024)
        .filter(|&bytes| bytes > 0 && bytes < ABSURD_BYTES)
}

/// A cgroup limit file's value: a number of bytes, or `None` for `max`, an
/// absurd value, zero or garbage.
fn parse_limit(text: &str) -> Option<u64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes > 0 && bytes < ABSURD_BYTES).then_some(bytes)
}

/// The cgroup path of the first `/proc/self/cgroup` line
/// (`hierarchy:controllers:path`) that `select` accepts.
fn cgroup_path(text: &str, select: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let hierarchy = fields.next()?;
        let controllers = fields.next()?;
        let path = fields.next()?;
        select(controllers, hierarchy).then(|| PathBuf::from(path))
    })
}

/// The smallest limit in `file` of the cgroup at `mount`/`relative` and each
/// of its ancestors up to `mount`, with the file it came from. Paths that
/// would leave `mount` are not followed.
fn limit_along(
    read: &dyn Fn(&Path) -> Option<String>,
    mount: &Path,
    relative: Option<PathBuf>,
    file: &str,
) -> Option<(u64, PathBuf)> {
    let mut dirs = vec![mount.to_path_buf()];
    if let Some(relative) = relative {
        let mut dir = mount.to_path_buf();
        for component in relative.components() {
            match component {
                std::path::Component::Normal(name) => {
                    dir.push(name);
                    dirs.push(dir.clone());
                }
                std::path::Component::RootDir | std::path::Component::CurDir => {}
                // `..` or a prefix: not a path the kernel writes; stop here.
                _ => break,
            }
        }
    }
    dirs.into_iter()
        .filter_map(|dir| {
            let path = dir.join(file);
            read(&path)
                .and_then(|text| parse_limit(&text))
                .map(|bytes| (bytes, path))
        })
        .min_by_key(|(bytes, _)| *bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const GIB: u64 = 1 << 30;

    fn fake(files: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> + use<> {
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(p, c)| (PathBuf::from(p), (*c).to_owned()))
            .collect();
        move |path| files.get(path).cloned()
    }

    const MEMINFO_16G: &str = "MemTotal:       16777216 kB\nMemFree:         1000 kB\n";

    #[test]
    fn physical_memory_alone() {
        let read = fake(&[("/proc/meminfo", MEMINFO_16G)]);
        assert_eq!(
            detect_with(&read),
            Some(MemoryLimit {
                bytes: 16 * GIB,
                source: MemorySource::PhysicalMemory
            })
        );
    }

    #[test]
    fn cgroup_v2_limit_of_own_cgroup_and_ancestors() {
        let read = fake(&[
            ("/proc/meminfo", MEMINFO_16G),
            ("/proc/self/cgroup", "0::/system.slice/sluice.service\n"),
            (
                "/sys/fs/cgroup/system.slice/sluice.service/memory.max",
                "max\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "4294967296\n"),
        ]);
        assert_eq!(
            detect_with(&read),
            Some(MemoryLimit {
                bytes: 4 * GIB,
                source: MemorySource::CgroupV2("/sys/fs/cgroup/system.slice/memory.max".into()),
            })
        );
    }

    #[test]
    fn cgroup_v2_at_the_root_of_a_container() {
        let read = fake(&[
            ("/proc/meminfo", MEMINFO_16G),
            ("/proc/self/cgroup", "0::/\n"),
            ("/sys/fs/cgroup/memory.max", "2147483648\n"),
        ]);
        assert_eq!(detect_with(&read).map(|l| l.bytes), Some(2 * GIB));
    }

    #[test]
    fn cgroup_v1_limit_and_its_no_limit_value() {
        let own = "4:memory:/process_api/abc\n0::/\n";
        let unlimited = fake(&[
            ("/proc/meminfo", MEMINFO_16G),
            ("/proc/self/cgroup", own),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ]);
        assert_eq!(
            detect_with(&unlimited).map(|l| l.source),
            Some(MemorySource::PhysicalMemory)
        );

        let limited = fake(&[
            ("/proc/meminfo", MEMINFO_16G),
            ("/proc/self/cgroup", "5:cpu,memory:/process_api/abc\n"),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes",
                "1073741824",
            ),
        ]);
        assert_eq!(
            detect_with(&limited),
            Some(MemoryLimit {
                bytes: GIB,
                source: MemorySource::CgroupV1(
                    "/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes".into()
                ),
            })
        );
    }

    #[test]
    fn a_cgroup_limit_above_physical_memory_does_not_apply() {
        let read = fake(&[
            ("/proc/meminfo", MEMINFO_16G),
            ("/proc/self/cgroup", "0::/\n"),
            ("/sys/fs/cgroup/memory.max", "68719476736\n"),
        ]);
        assert_eq!(
            detect_with(&read).map(|l| l.source),
            Some(MemorySource::PhysicalMemory)
        );
    }

    #[test]
    fn garbage_zero_and_escapes_are_ignored() {
        let read = fake(&[
            ("/proc/meminfo", "MemTotal: lots\n"),
            ("/proc/self/cgroup", "0::/../../etc\n"),
            ("/sys/fs/cgroup/memory.max", "0\n"),
            ("/etc/memory.max", "1024\n"),
        ]);
        assert_eq!(detect_with(&read), None);
        assert_eq!(detect_with(&fake(&[])), None);
        assert_eq!(parse_meminfo_total("MemTotal: 1024 MB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: 1024 kB\n"), Some(1 << 20));
        assert_eq!(parse_limit("-1"), None);
        assert_eq!(parse_limit("max"), None);
    }

    #[test]
    fn detects_something_on_linux() {
        if cfg!(target_os = "linux") {
            let limit = MemoryLimit::detect();
            assert!(limit.as_ref().is_some_and(|l| l.bytes > 0), "{limit:?}");
        }
    }
}
