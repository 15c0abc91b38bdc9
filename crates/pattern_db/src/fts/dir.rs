//! The directory an on-disk full-text index lives in: tantivy's memory-mapped directory, with
//! the file syncs of a commit done together, at once, just before the commit is published.
//!
//! tantivy syncs every file it writes when it finishes it (each segment has about eight, and
//! each new file rewrites `.managed.json`, synced too), one after another: a commit of a few
//! documents, the catch-up a search runs right after a write, spent most of its time in about
//! thirty syncs in a row. Here a finished file is only flushed to the kernel and remembered;
//! `sync_directory`, which tantivy calls right before it writes `meta.json` (the file that
//! publishes a commit), syncs every remembered file at once (on several threads, so the file
//! system commits them together) and then the directory. So every file a published `meta.json`
//! names is durable before `meta.json` is written, as before; only the order of the syncs
//! changed. `meta.json` itself is written as tantivy writes it (synced).
//!
//! A crash of the machine between two commits can leave `.managed.json` (tantivy's list of the
//! files it may delete) not yet synced: the index then fails to open and is recreated and
//! rebuilt (`fts::open_dir`), or lists too few files, so files of the unpublished commit stay
//! on disk unknown to tantivy's collection. A later writer that meets one of them under the
//! same name (the next writer counts from the same published operation stamp) replaces it
//! rather than failing every commit on it.
//! This module must never let `meta.json` be written before the files written before it are
//! synced.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    AntiCallToken, Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, TerminatingWrite,
    WatchCallback, WatchHandle, WritePtr,
};

/// The list tantivy rewrites for every new file; written without a sync, synced with the files.
const MANAGED: &str = ".managed.json";
/// Most threads one `sync_directory` syncs files on.
const SYNC_THREADS: usize = 8;

/// tantivy's [`MmapDirectory`] whose files are synced together when a commit is published.
#[derive(Clone, Debug)]
pub(super) struct SyncAtPublish {
    inner: MmapDirectory,
    root: PathBuf,
    /// Files finished (or rewritten) since the last `sync_directory`, not yet synced.
    unsynced: Arc<Mutex<Vec<PathBuf>>>,
}

impl SyncAtPublish {
    pub(super) fn open(root: &Path) -> tantivy::Result<Self> {
        Ok(Self {
            inner: MmapDirectory::open(root)?,
            root: root.to_path_buf(),
            unsynced: Arc::default(),
        })
    }

    fn unsynced(&self) -> io::Result<std::sync::MutexGuard<'_, Vec<PathBuf>>> {
        self.unsynced.lock().map_err(|_| {
            io::Error::other("the index directory's list of unsynced files is poisoned")
        })
    }

    fn remember(&self, path: &Path) -> io::Result<()> {
        self.unsynced()?.push(self.root.join(path));
        Ok(())
    }

    /// Syncs every remembered file; one that no longer exists (deleted since: a segment merged
    /// away) needs none. On an error the files stay remembered, so the next call tries again.
    fn sync_files(&self) -> io::Result<()> {
        let mut list = self.unsynced()?;
        list.sort();
        list.dedup();
        if list.is_empty() {
            return Ok(());
        }
        let per_thread = list.len().div_ceil(SYNC_THREADS);
        let failed = std::thread::scope(|s| {
            let running: Vec<_> = list
                .chunks(per_thread)
                .map(|chunk| s.spawn(move || chunk.iter().try_for_each(|path| sync_file(path))))
                .collect();
            running
                .into_iter()
                .map(|t| {
                    t.join()
                        .unwrap_or_else(|_| Err(io::Error::other("a file sync thread panicked")))
                })
                .find_map(Result::err)
        });
        match failed {
            Some(e) => Err(e),
            None => {
                list.clear();
                Ok(())
            }
        }
    }
}

fn sync_file(path: &Path) -> io::Result<()> {
    match File::open(path) {
        Ok(file) => file.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

impl Directory for SyncAtPublish {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        self.inner.get_file_handle(path)
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        let file = match self.inner.open_write(path) {
            Err(OpenWriteError::FileAlreadyExists(_)) => {
                // tantivy names every file it writes anew (a segment's id, an operation stamp
                // counted from the published `meta.json`), and one writer at a time writes: a
                // file already there is left from a commit a crash kept from being published,
                // which no reader can have open. Replaced, or every later commit would fail
                // on the same name.
                tracing::warn!(path = %path.display(), "replacing a full-text index file left by an unpublished commit");
                std::fs::remove_file(self.root.join(path))
                    .map_err(|e| OpenWriteError::wrap_io_error(e, path.to_path_buf()))?;
                self.inner.open_write(path)?
            }
            opened => opened?,
        };
        Ok(BufWriter::new(Box::new(Unsynced {
            file,
            path: path.to_path_buf(),
            dir: self.clone(),
        })))
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        if path != Path::new(MANAGED) {
            return self.inner.atomic_write(path, data);
        }
        // A whole new file renamed over the old one: a reader sees one or the other.
        let mut temp = tempfile::Builder::new().tempfile_in(&self.root)?;
        temp.write_all(data)?;
        temp.flush()?;
        temp.into_temp_path()
            .persist(self.root.join(path))
            .map_err(|e| e.error)?;
        self.remember(path)
    }

    fn sync_directory(&self) -> io::Result<()> {
        self.sync_files()?;
        self.inner.sync_directory()
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.inner.acquire_lock(lock)
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(watch_callback)
    }
}

/// A file being written: finished, it is flushed to the kernel and remembered for the next
/// `sync_directory` instead of synced on its own.
struct Unsynced {
    file: WritePtr,
    path: PathBuf,
    dir: SyncAtPublish,
}

impl io::Write for Unsynced {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl TerminatingWrite for Unsynced {
    fn terminate_ref(&mut self, _: AntiCallToken) -> io::Result<()> {
        self.file.flush()?;
        self.dir.remember(&self.path)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn write_file(dir: &SyncAtPublish, name: &str, bytes: &[u8]) {
        let mut w = dir.open_write(Path::new(name)).unwrap();
        w.write_all(bytes).unwrap();
        w.terminate().unwrap();
    }

    #[test]
    fn finished_files_wait_for_the_directory_sync_and_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SyncAtPublish::open(tmp.path()).unwrap();
        write_file(&dir, "a.idx", b"alpha");
        write_file(&dir, "b.idx", b"beta");
        dir.atomic_write(Path::new(MANAGED), b"[\"a.idx\"]")
            .unwrap();
        assert_eq!(dir.unsynced.lock().unwrap().len(), 3);
        assert_eq!(
            dir.get_file_handle(Path::new("a.idx"))
                .unwrap()
                .read_bytes(0..5)
                .unwrap()
                .as_slice(),
            b"alpha"
        );
        assert_eq!(dir.atomic_read(Path::new(MANAGED)).unwrap(), b"[\"a.idx\"]");
        // A file deleted before the sync (merged away) needs none.
        dir.delete(Path::new("b.idx")).unwrap();
        dir.sync_directory().unwrap();
        assert!(dir.unsynced.lock().unwrap().is_empty());
        // Other atomic writes (meta.json) are tantivy's own, synced at once.
        dir.atomic_write(Path::new("meta.json"), b"{}").unwrap();
        assert!(dir.unsynced.lock().unwrap().is_empty());
    }

    #[test]
    fn a_file_left_by_an_unpublished_commit_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a.0.del"), b"left by a crash").unwrap();
        let dir = SyncAtPublish::open(tmp.path()).unwrap();
        write_file(&dir, "a.0.del", b"new");
        assert_eq!(std::fs::read(tmp.path().join("a.0.del")).unwrap(), b"new");
    }

    #[test]
    fn a_file_that_cannot_be_synced_fails_the_publish_and_stays_listed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SyncAtPublish::open(tmp.path()).unwrap();
        write_file(&dir, "a.idx", b"alpha");
        // A path under a plain file cannot be opened (not a directory), unlike a missing one.
        std::fs::write(tmp.path().join("plain"), b"").unwrap();
        dir.remember(Path::new("plain/under-a-file")).unwrap();
        assert!(dir.sync_directory().is_err());
        assert_eq!(dir.unsynced.lock().unwrap().len(), 2);
    }
}
