//! Output files that appear whole or not at all: written to a temporary file beside the
//! target and renamed over it on [`AtomicFile::commit`]. A reader never sees half a file,
//! and a command that fails (or is killed) leaves the old file, or none, in place.
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file being written; dropped without [`AtomicFile::commit`], it leaves nothing.
pub struct AtomicFile {
    target: PathBuf,
    temp: PathBuf,
    out: Option<std::io::BufWriter<std::fs::File>>,
}

impl AtomicFile {
    /// Starts writing `target` (through `target.<pid>.tmp` in the same folder, so the
    /// rename stays on one file system).
    pub fn create(target: &Path) -> std::io::Result<AtomicFile> {
        let mut temp = target.as_os_str().to_owned();
        temp.push(format!(".{}.tmp", std::process::id()));
        let temp = PathBuf::from(temp);
        let file = std::fs::File::create(&temp)?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            temp,
            out: Some(std::io::BufWriter::new(file)),
        })
    }

    /// Flushes, syncs and renames the file into place.
    pub fn commit(mut self) -> std::io::Result<()> {
        let out = self.out.take().expect("committed once");
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&self.temp, &self.target)
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.as_mut().expect("not committed").write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.as_mut().expect("not committed").flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Writes `bytes` to `path` whole or not at all.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_appears_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.txt");
        std::fs::write(&p, "old").unwrap();
        {
            let mut f = AtomicFile::create(&p).unwrap();
            f.write_all(b"half").unwrap();
            // dropped without commit: the old content stays, no temporary is left
        }
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        write(&p, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
