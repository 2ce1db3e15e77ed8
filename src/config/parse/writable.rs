//! Files the proxy writes (`log.file`, `state_file`) should be creatable by
//! the user that runs `check` (the service user, as the README says to run
//! it): `run` refuses to start without its log (an error), and keeps no
//! state across restarts without its state file (a warning).

use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::error::{Invalid, invalid};
use crate::config::refuse_special_file;

/// The directory of `file` (the value of config key `key`, which holds
/// `what` files: "log", "state") exists and takes new files, or can be
/// created under its nearest existing ancestor. Probes by creating and
/// removing a uniquely named file there: permission bits alone do not tell
/// (root, read-only mounts, ACLs). Creates no directory.
pub(super) fn check(file: &Path, key: &str, what: &str) -> Result<(), Invalid> {
    if file.as_os_str().as_bytes().contains(&0) {
        return invalid(key, "the path holds a NUL byte");
    }
    if let Err(e) = refuse_special_file(file) {
        return invalid(key, format!("{}: {e}", file.display()));
    }
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut existing = dir;
    while !existing.exists() {
        match existing.parent() {
            Some(up) if !up.as_os_str().is_empty() => existing = up,
            _ => existing = Path::new("."),
        }
    }
    if !existing.is_dir() {
        return invalid(key, format!("{} is not a directory", existing.display()));
    }
    let probe = existing.join(format!(".pin-proxy-check-{}", std::process::id()));
    let made = OpenOptions::new().write(true).create_new(true).open(&probe);
    match made {
        Ok(_) => {
            // Best effort: a leftover empty probe file harms nothing.
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => {
            let why = if existing == dir {
                format!("cannot write {what} files in {}", dir.display())
            } else {
                format!(
                    "cannot create the {what} directory {} in {}",
                    dir.display(),
                    existing.display()
                )
            };
            invalid(key, format!("{why}: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_or_creatable_directories_pass_and_nothing_is_left_behind() {
        let tmp = tempfile::tempdir().unwrap();
        check(&tmp.path().join("p.log"), "log.file", "log").unwrap();
        let deep = tmp.path().join("a/b/p.log");
        check(&deep, "log.file", "log").unwrap();
        assert!(!tmp.path().join("a").exists(), "check creates nothing");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_device_a_socket_a_directory_or_a_nul_byte_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("socket");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for (path, says) in [
            (Path::new("/dev/null"), "a device"),
            (socket.as_path(), "a socket"),
            (tmp.path(), "a directory"),
        ] {
            let err = check(path, "state_file", "state").unwrap_err();
            assert!(err.message.contains(says), "{path:?}: {}", err.message);
        }
        let nul = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/a\0b"));
        let err = check(nul, "log.file", "log").unwrap_err();
        assert!(err.message.contains("NUL"), "{}", err.message);
    }

    #[test]
    fn unwritable_places_and_files_in_the_way_are_refused() {
        let err = check(Path::new("/proc/pin-proxy/p.log"), "log.file", "log").unwrap_err();
        assert_eq!(err.path, "log.file");
        assert!(
            err.message.contains("cannot create the log directory"),
            "{}",
            err.message
        );
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, "").unwrap();
        let err = check(&file.join("p.log"), "state_file", "state").unwrap_err();
        assert_eq!(err.path, "state_file");
        assert!(
            err.message.contains("is not a directory"),
            "{}",
            err.message
        );
    }
}
