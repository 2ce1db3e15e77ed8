//! Files the proxy writes (`log.file`, `state_file`) should be creatable by
//! the user that runs `check` (the service user, as the README says to run
//! it): `run` refuses to start without its log (an error), and keeps no
//! state across restarts without its state file (a warning). A log file
//! that exists is opened as `run` opens it. A directory of theirs that
//! other users can write is pointed out.

use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::error::{Invalid, invalid};
use crate::config::Config;
use crate::config::files::{self, refuse_special_file};

/// The existing log file at `file` (`log.file`) opens as `run` will open
/// it (appending, never through a link), and its directory takes new
/// files ([`check`]). Opening an existing file creates nothing.
pub(super) fn check_log(file: &Path) -> Result<(), Invalid> {
    check(file, "log.file", "log")?;
    match files::open_existing_append(file) {
        Ok(_) => Ok(()),
        Err(e) => invalid(
            "log.file",
            format!("cannot open {} for writing: {e}", file.display()),
        ),
    }
}

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
    let dir = files::parent_dir(file);
    let existing = nearest_existing(dir);
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

/// `dir`, or the nearest of its ancestors that exists: where it would be
/// made.
fn nearest_existing(dir: &Path) -> &Path {
    let mut existing = dir;
    while !existing.exists() {
        match existing.parent() {
            Some(up) if !up.as_os_str().is_empty() => existing = up,
            _ => return Path::new("."),
        }
    }
    existing
}

/// A warning for each directory of `log.file` and `state_file` that users
/// other than the owner and group can write (for one not made yet: the
/// directory it would be made in). They could put a file of theirs at a
/// name the proxy then writes, or read and cut its log.
pub(in crate::config) fn open_to_others(config: &Config) -> Vec<String> {
    let files = [
        ("log.file", config.log.file.as_deref()),
        ("state_file", config.state_file.as_deref()),
    ];
    files
        .into_iter()
        .filter_map(|(key, file)| {
            let dir = nearest_existing(files::parent_dir(file?));
            let mode = std::fs::metadata(dir).ok()?.permissions().mode();
            (mode & 0o002 != 0).then(|| {
                format!(
                    "{key}: directory {} can be written by other users (mode {:o}); \
                     use one only the service user can write",
                    dir.display(),
                    mode & 0o7777
                )
            })
        })
        .collect()
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
    #[test]
    fn a_log_file_run_could_not_open_is_refused_and_nothing_is_made() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let link = tmp.path().join("p.log");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = check_log(&link).unwrap_err();
        assert_eq!(err.path, "log.file");
        assert!(err.message.contains("a symbolic link"), "{}", err.message);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        // An existing log file that opens, and one not made yet: passed,
        // and the check makes neither.
        check_log(&victim).unwrap();
        check_log(&tmp.path().join("later.log")).unwrap();
        assert!(!tmp.path().join("later.log").exists());
    }

    #[test]
    fn directories_others_can_write_are_pointed_out() {
        let tmp = tempfile::tempdir().unwrap();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let yaml = format!(
            "log: {{ file: {0}/p.log }}\nstate_file: {0}/lib/state.json\npools:\n  - name: p\n    \
             listen: 127.0.0.1:0\n    backends: [127.0.0.1:9]\n",
            open.display()
        );
        let config = Config::parse(&yaml, Path::new("inline.yaml")).unwrap();
        let warnings = open_to_others(&config);
        let want = format!(
            "directory {} can be written by other users (mode 1777)",
            open.display()
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("log.file: ") && warnings[0].contains(&want),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with("state_file: ") && warnings[1].contains(&want),
            "{warnings:?}"
        );
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(open_to_others(&config).is_empty());
    }
}
