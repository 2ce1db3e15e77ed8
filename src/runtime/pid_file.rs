//! The pid file (`pid_file:`): the pid of the process that serves, for
//! supervisors that follow a pid rather than a systemd unit. Written whole
//! (a new file renamed over the old, so a reader never sees half a pid)
//! by a cold start and again by the new process of each live upgrade;
//! removed at a clean shutdown when it still names this process.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

/// Write `pid` to `path`: into a new file beside it, with a name nobody
/// can guess and opened so that nothing planted there (a file, a symlink)
/// is followed or reused, then renamed over `path`.
///
/// # Errors
/// The directory is missing or not writable, or the write failed; `path`
/// is then unchanged.
pub fn write(path: &Path, pid: u32) -> io::Result<()> {
    let temp = temp_beside(path)?;
    let written = create_new(&temp).and_then(|mut file| {
        file.write_all(format!("{pid}\n").as_bytes())?;
        file.sync_all()
    });
    let renamed = written.and_then(|()| std::fs::rename(&temp, path));
    if renamed.is_err() {
        // Best effort: the temp file may not even exist.
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

/// `.NAME.<random>.tmp` in `path`'s directory.
fn temp_beside(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "names no file"))?;
    // Keyed from the OS's randomness for each process: unguessable.
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(nanos.as_nanos());
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(".{:016x}.tmp", hasher.finish()));
    Ok(path.with_file_name(temp))
}

/// A new file at `path`: fails if anything (a symlink too) is there.
fn create_new(path: &Path) -> io::Result<std::fs::File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::from_raw_mode(0o644))?;
    Ok(std::fs::File::from(fd))
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

    #[test]
    fn temp_names_differ_and_a_planted_one_is_not_opened() {
        let path = Path::new("/run/p.pid");
        let (a, b) = (temp_beside(path).unwrap(), temp_beside(path).unwrap());
        assert_ne!(a, b);
        assert!(a.to_string_lossy().starts_with("/run/.p.pid."), "{a:?}");
        let dir = tempfile::tempdir().unwrap();
        let planted = dir.path().join("planted");
        std::os::unix::fs::symlink(dir.path().join("target"), &planted).unwrap();
        assert!(create_new(&planted).is_err());
        assert!(!dir.path().join("target").exists());
    }
}
