//! A log folder (`--log-dir`): the checkpoint and the logs that follow it,
//! by generation.
//!
//! | file | what |
//! |---|---|
//! | `checkpoint-G.snapshot` | every queue and message before generation `G`'s logs (a snapshot file) |
//! | `registry-G.log` | the queue changes of generation `G` ([`super::registry`]) |
//! | `shard-N-G.log` | shard `N`'s records of generation `G` ([`super::file`]) |
//!
//! Generation 0 has no checkpoint: its logs start from nothing. A
//! checkpoint of generation `G + 1` is written (as a snapshot is: a
//! temporary file, renamed, the folder synced) once generation `G`'s logs
//! take nothing more, and only then are `G`'s files removed. So whatever
//! moment a crash comes, the newest checkpoint and its own generation's
//! logs hold everything: a start takes the highest generation that has a
//! checkpoint (0 when none has), removes the files of older generations,
//! and replays that generation's logs. No log of a newer generation than
//! the newest checkpoint is ever written.

use std::io;
use std::path::{Path, PathBuf};

/// A log folder, at the generation a start found.
#[derive(Debug)]
pub struct LogDir {
    path: PathBuf,
    generation: u64,
}

/// What a file name in a log folder says.
#[derive(Debug, PartialEq, Eq)]
enum Named {
    Checkpoint(u64),
    Registry(u64),
    Shard(u16, u64),
}

fn parse_name(name: &str) -> Option<Named> {
    let number = |s: &str| -> Option<u64> {
        // Digits only: no sign, no spaces.
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    if let Some(g) = name
        .strip_prefix("checkpoint-")
        .and_then(|s| s.strip_suffix(".snapshot"))
    {
        return number(g).map(Named::Checkpoint);
    }
    if let Some(g) = name
        .strip_prefix("registry-")
        .and_then(|s| s.strip_suffix(".log"))
    {
        return number(g).map(Named::Registry);
    }
    let rest = name.strip_prefix("shard-")?.strip_suffix(".log")?;
    let (n, g) = rest.split_once('-')?;
    let shard = u16::try_from(number(n)?).ok()?;
    Some(Named::Shard(shard, number(g)?))
}

impl LogDir {
    /// Opens the folder at `path` (made when missing): finds the newest
    /// checkpoint's generation and removes the files of older ones.
    ///
    /// # Errors
    /// The folder cannot be made or read, or an old file removed; a log
    /// newer than the newest checkpoint (not written by sluice).
    pub fn open(path: &Path) -> io::Result<LogDir> {
        std::fs::create_dir_all(path)?;
        let mut named = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if let Some(n) = entry.file_name().to_str().and_then(parse_name) {
                named.push((n, entry.path()));
            }
        }
        let generation = named
            .iter()
            .filter_map(|(n, _)| match n {
                Named::Checkpoint(g) => Some(*g),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let of = |n: &Named| match *n {
            Named::Checkpoint(g) | Named::Registry(g) | Named::Shard(_, g) => g,
        };
        if let Some((n, file)) = named.iter().find(|(n, _)| of(n) > generation) {
            return Err(io::Error::other(format!(
                "{} is of generation {}, newer than the newest checkpoint ({generation}): \
                 sluice never writes one; move it away if it belongs elsewhere",
                file.display(),
                of(n)
            )));
        }
        for (n, file) in &named {
            if of(n) < generation {
                std::fs::remove_file(file)?;
            }
        }
        Ok(LogDir {
            path: path.to_owned(),
            generation,
        })
    }

    /// The folder.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The generation the logs are of.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The checkpoint the logs follow: none at generation 0.
    #[must_use]
    pub fn checkpoint(&self) -> Option<PathBuf> {
        (self.generation > 0).then(|| self.checkpoint_of(self.generation))
    }

    /// The registry's log.
    #[must_use]
    pub fn registry_log(&self) -> PathBuf {
        self.path.join(format!("registry-{}.log", self.generation))
    }

    /// Shard `shard`'s log.
    #[must_use]
    pub fn shard_log(&self, shard: u16) -> PathBuf {
        self.path
            .join(format!("shard-{shard}-{}.log", self.generation))
    }

    /// The logs of shards `shards` and up: a start with fewer shards than
    /// wrote them cannot replay them.
    ///
    /// # Errors
    /// The folder cannot be read.
    pub fn shard_logs_from(&self, shards: u16) -> io::Result<Vec<PathBuf>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            let entry = entry?;
            if let Some(Named::Shard(n, g)) = entry.file_name().to_str().and_then(parse_name) {
                if g == self.generation && n >= shards {
                    found.push(entry.path());
                }
            }
        }
        found.sort();
        Ok(found)
    }

    /// Where the next checkpoint goes.
    #[must_use]
    pub fn next_checkpoint(&self) -> PathBuf {
        self.checkpoint_of(self.generation + 1)
    }

    /// The next checkpoint is written: this generation's files go, and
    /// the folder moves on to the next.
    ///
    /// # Errors
    /// A file that cannot be removed (the next start removes it).
    pub fn advance(&mut self) -> io::Result<()> {
        let old = self.generation;
        self.generation += 1;
        for entry in std::fs::read_dir(&self.path)? {
            let entry = entry?;
            let of_old = match entry.file_name().to_str().and_then(parse_name) {
                Some(Named::Checkpoint(g) | Named::Registry(g) | Named::Shard(_, g)) => g == old,
                None => false,
            };
            if of_old {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }

    fn checkpoint_of(&self, generation: u64) -> PathBuf {
        self.path.join(format!("checkpoint-{generation}.snapshot"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-logdir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn touch(d: &Path, name: &str) {
        std::fs::write(d.join(name), b"x").unwrap();
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn names_are_read_exactly() {
        assert_eq!(
            parse_name("checkpoint-3.snapshot"),
            Some(Named::Checkpoint(3))
        );
        assert_eq!(parse_name("registry-0.log"), Some(Named::Registry(0)));
        assert_eq!(parse_name("shard-12-7.log"), Some(Named::Shard(12, 7)));
        for other in [
            "checkpoint-.snapshot",
            "checkpoint-+3.snapshot",
            "checkpoint-3.snapshot.tmp",
            "shard-1.log",
            "shard-70000-1.log",
            "shard-1-2-3.log",
            "registry- 1.log",
            "log.lock",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_new_folder_is_generation_zero_without_a_checkpoint() {
        let d = dir("new");
        let l = LogDir::open(&d).unwrap();
        assert_eq!(l.generation(), 0);
        assert_eq!(l.checkpoint(), None);
        assert_eq!(l.shard_log(2), d.join("shard-2-0.log"));
        assert_eq!(l.registry_log(), d.join("registry-0.log"));
        assert_eq!(l.next_checkpoint(), d.join("checkpoint-1.snapshot"));
    }

    #[test]
    fn the_newest_checkpoint_wins_and_older_files_go() {
        let d = dir("newest");
        std::fs::create_dir_all(&d).unwrap();
        for n in [
            "registry-0.log",
            "shard-0-0.log",
            "checkpoint-1.snapshot",
            "shard-0-1.log",
            "shard-1-1.log",
            "checkpoint-2.snapshot",
            "shard-0-2.log",
            "shard-3-2.log",
            "log.lock",
        ] {
            touch(&d, n);
        }
        let mut l = LogDir::open(&d).unwrap();
        assert_eq!(l.generation(), 2);
        assert_eq!(l.checkpoint(), Some(d.join("checkpoint-2.snapshot")));
        assert_eq!(
            names(&d),
            [
                "checkpoint-2.snapshot",
                "log.lock",
                "shard-0-2.log",
                "shard-3-2.log"
            ]
        );
        assert_eq!(l.shard_logs_from(2).unwrap(), [d.join("shard-3-2.log")]);
        assert!(l.shard_logs_from(4).unwrap().is_empty());
        // A checkpoint of generation 3 written: generation 2 goes.
        touch(&d, "checkpoint-3.snapshot");
        l.advance().unwrap();
        assert_eq!(l.generation(), 3);
        assert_eq!(names(&d), ["checkpoint-3.snapshot", "log.lock"]);
    }

    #[test]
    fn a_log_newer_than_every_checkpoint_is_refused_and_nothing_removed() {
        let d = dir("newer");
        std::fs::create_dir_all(&d).unwrap();
        for n in ["shard-0-0.log", "checkpoint-1.snapshot", "shard-0-2.log"] {
            touch(&d, n);
        }
        let e = LogDir::open(&d).unwrap_err().to_string();
        assert!(
            e.contains("shard-0-2.log") && e.contains("generation 2"),
            "{e}"
        );
        assert_eq!(
            names(&d),
            ["checkpoint-1.snapshot", "shard-0-0.log", "shard-0-2.log"]
        );
    }
}
