//! The lock on a path a broker writes (`--snapshot PATH`).
//!
//! Two brokers on one `--snapshot PATH` (restarts that overlap on a shared
//! volume, two units pointed at one folder) would each write the file on
//! their way down, the second over the first, and the first one's messages
//! would be gone without a word. So a broker holds an exclusive `flock(2)`
//! on `PATH.lock` from before it reads the snapshot until after it wrote
//! it, and a second broker refuses to start, naming the process that holds
//! the lock (its pid is written into the file). The kernel drops the lock
//! when the process ends, however it ends: a kill -9 leaves no stale lock,
//! only the file, which the next start locks again.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

/// An exclusive lock on `PATH.lock`, held until dropped.
#[derive(Debug)]
pub struct PathLock {
    /// Held open: the lock lives as long as this descriptor.
    _file: File,
    path: PathBuf,
}

impl PathLock {
    /// The lock file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that the lock still guards the path: the file at `PATH.lock`
    /// is the one this lock holds. A folder removed and made again (or the
    /// lock file replaced) lets another broker lock a new file at the same
    /// path; this broker must then not write there.
    ///
    /// # Errors
    /// [`LockError::Lost`] when the path holds another file or none.
    pub fn check(&self) -> Result<(), LockError> {
        use std::os::unix::fs::MetadataExt;
        let lost = || LockError::Lost {
            lock: self.path.clone(),
        };
        let held = self._file.metadata().map_err(|_| lost())?;
        let there = std::fs::metadata(&self.path).map_err(|_| lost())?;
        if held.nlink() == 0 || held.dev() != there.dev() || held.ino() != there.ino() {
            return Err(lost());
        }
        Ok(())
    }
}

/// Why a path could not be locked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another process holds the lock.
    #[error(
        "{} is locked by another sluice-server ({}): two brokers on one snapshot path \
         would overwrite each other's messages; stop that one first, or give this one \
         another path",
        lock.display(),
        holder.map_or_else(|| "its pid is not known yet".to_owned(), |pid| format!("pid {pid}"))
    )]
    Held {
        /// The lock file.
        lock: PathBuf,
        /// The pid the holder wrote into it, when it had.
        holder: Option<u32>,
    },
    /// The lock file at the path is no longer the one this broker locked.
    #[error(
        "{} is no longer the file this broker locked (its folder was removed or the file \
         replaced): another broker may own the path now, so this one does not write there",
        lock.display()
    )]
    Lost {
        /// The lock file.
        lock: PathBuf,
    },
    /// The lock file could not be opened or locked.
    #[error("cannot lock {}: {source}", lock.display())]
    Io {
        /// The lock file.
        lock: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
}

/// `PATH.lock`, beside `path`.
#[must_use]
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    path.with_file_name(name)
}

/// Takes the exclusive lock on `path` (on its `PATH.lock`, created with
/// mode 0600 if missing) without waiting, and writes this process's pid
/// into it.
///
/// # Errors
/// [`LockError::Held`] when another open file holds the lock (another
/// process, or another server in this one); [`LockError::Io`] otherwise.
pub fn lock(path: &Path) -> Result<PathLock, LockError> {
    use std::os::unix::fs::OpenOptionsExt;
    let lock = lock_path(path);
    let io_error = |source| LockError::Io {
        lock: lock.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock)
        .map_err(io_error)?;
    if !crate::io::try_lock_exclusive(&file).map_err(io_error)? {
        let mut text = String::new();
        let holder = file
            .read_to_string(&mut text)
            .ok()
            .and_then(|_| text.trim().parse().ok());
        return Err(LockError::Held { lock, holder });
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .map_err(io_error)?;
    Ok(PathLock {
        _file: file,
        path: lock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_path_is_refused_with_the_holders_pid() {
        let dir = std::env::temp_dir().join(format!("sluice-path-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.snapshot");
        let first = lock(&path).unwrap();
        assert_eq!(first.path(), dir.join("s.snapshot.lock"));
        match lock(&path) {
            Err(LockError::Held { lock, holder }) => {
                assert_eq!(lock, dir.join("s.snapshot.lock"));
                assert_eq!(holder, Some(std::process::id()));
            }
            other => panic!("a second lock was not refused: {other:?}"),
        }
        drop(first);
        // Released with its descriptor: the next start takes it.
        let again = lock(&path).unwrap();
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_whose_folder_was_made_again_is_lost() {
        let dir = std::env::temp_dir().join(format!("sluice-path-lost-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.snapshot");
        let first = lock(&path).unwrap();
        first.check().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(first.check(), Err(LockError::Lost { .. })));
        std::fs::create_dir_all(&dir).unwrap();
        // A second broker locks the new file at the same path.
        let second = lock(&path).unwrap();
        second.check().unwrap();
        let e = first.check().unwrap_err();
        assert!(
            e.to_string()
                .contains("no longer the file this broker locked"),
            "{e}"
        );
        drop((first, second));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
