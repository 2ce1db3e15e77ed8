//! The pid file (`pid_file:`): the pid of the process that serves, for
//! supervisors that follow a pid rather than a systemd unit. Written whole
//! (a new file renamed over the old, so a reader never sees half a pid)
//! by a cold start and again by the new process of each live upgrade;
//! removed at a clean shutdown when it still names this process.

use std::io::{self, Write};
use std::path::Path;

use crate::config::files;

/// Write `pid` to `path`: into a new file beside it, with a name nobody
/// can guess and opened so that nothing planted there (a file, a symlink)
/// is followed or reused ([`files::create_beside`]), then renamed over
/// `path`.
///
/// # Errors
/// The directory is missing or not writable, or the write failed; `path`
/// is then unchanged.
pub fn write(path: &Path, pid: u32) -> io::Result<()> {
    let (mut file, temp) = files::create_beside(path)?;
    let written = file
        .write_all(format!("{pid}\n").as_bytes())
        .and_then(|()| file.sync_all());
    let renamed = written.and_then(|()| std::fs::rename(&temp, path));
    if renamed.is_err() {
        // Best effort: the write's error is the one to report.
        let _ = std::fs::remove_file(&temp);
    }
    renamed
}

/// Remove `path` when it names `pid`: after an upgrade it names the new
/// process, which this one must not take away.
///
/// # Errors
/// The file names `pid` but cannot be removed.
pub fn remove_if_ours(path: &Path, pid: u32) -> io::Result<()> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim() == pid.to_string() => std::fs::remove_file(path),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_whole_replacing_a_planted_symlink_and_removed_only_when_ours() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let path = dir.path().join("pin-proxy.pid");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write(&path, 4242).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "4242\n");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "no temp file left: {left:?}");

        remove_if_ours(&path, 1).unwrap();
        assert!(path.exists(), "another process's pid stays");
        remove_if_ours(&path, 4242).unwrap();
        assert!(!path.exists());

        let err = write(&dir.path().join("missing/pid"), 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
