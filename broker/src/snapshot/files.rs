//! The `PATH.loaded-MS` files that loads leave beside a snapshot path.

use std::io;
use std::path::{Path, PathBuf};

/// Where a loaded snapshot is moved: `PATH.loaded-<unix ms>`.
#[must_use]
pub fn loaded_path(path: &Path, wall_ms: u64) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".loaded-{wall_ms}"));
    path.with_file_name(name)
}

/// The `PATH.loaded-MS` files beside `path`, oldest first (by the MS in
/// their names). Names that do not end in a number are not theirs and are
/// left out.
///
/// # Errors
/// The directory's listing.
pub fn loaded_files(path: &Path) -> io::Result<Vec<PathBuf>> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut prefix = path.file_name().unwrap_or_default().to_os_string();
    prefix.push(".loaded-");
    let prefix = prefix.to_string_lossy().into_owned();
    let mut found: Vec<(u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(ms) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix.as_str()))
            .and_then(|ms| ms.parse::<u64>().ok())
        else {
            continue;
        };
        found.push((ms, path.with_file_name(name)));
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// Removes all but the newest `keep` `PATH.loaded-MS` files beside `path`,
/// and returns the ones removed.
///
/// # Errors
/// The first listing or removal that failed (what was removed before it
/// stays removed).
pub fn prune_loaded(path: &Path, keep: usize) -> io::Result<Vec<PathBuf>> {
    let files = loaded_files(path)?;
    let excess = files.len().saturating_sub(keep);
    let mut removed = Vec::with_capacity(excess);
    for old in files.into_iter().take(excess) {
        std::fs::remove_file(&old)?;
        removed.push(old);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "sluice-files-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn pruning_keeps_the_newest_loaded_files_and_nothing_else_is_touched() {
        let dir = scratch("prune");
        let path = dir.join("s.snapshot");
        for ms in [5_u64, 40, 300, 2_000, 10_000] {
            std::fs::write(loaded_path(&path, ms), b"x").unwrap();
        }
        // Not ours: another snapshot's, a name with no number, the lock.
        std::fs::write(dir.join("other.snapshot.loaded-1"), b"x").unwrap();
        std::fs::write(dir.join("s.snapshot.loaded-old"), b"x").unwrap();
        std::fs::write(dir.join("s.snapshot.lock"), b"x").unwrap();
        let removed = prune_loaded(&path, 3).unwrap();
        assert_eq!(removed, [loaded_path(&path, 5), loaded_path(&path, 40)]);
        assert_eq!(
            loaded_files(&path).unwrap(),
            [300, 2_000, 10_000].map(|ms| loaded_path(&path, ms))
        );
        for other in [
            "other.snapshot.loaded-1",
            "s.snapshot.loaded-old",
            "s.snapshot.lock",
        ] {
            assert!(dir.join(other).exists(), "{other} was removed");
        }
        assert!(prune_loaded(&path, 0).unwrap().len() == 3);
        assert!(loaded_files(&path).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
