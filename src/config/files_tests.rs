//! Unit tests of the file opens: links planted at the paths are refused
//! and the files they point to stay as they were; FIFOs never block.

use std::io::Write;
use std::os::unix::fs::symlink;

use super::*;

/// A temporary directory with `victim` (holding "precious") and a link
/// `name` to it.
fn planted(name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = dir.path().join(name);
    symlink(&victim, &link).unwrap();
    (dir, victim, link)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn appending_never_goes_through_a_link() {
    let (_dir, victim, link) = planted("pin-proxy.log");
    let e = open_append(&link).unwrap_err();
    assert!(e.to_string().contains("a symbolic link"), "{e}");
    let e = open_existing_append(&link).unwrap_err();
    assert!(e.to_string().contains("a symbolic link"), "{e}");
    assert_eq!(read(&victim), "precious\n");
}

#[test]
fn appending_opens_or_creates_a_regular_file_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.log");
    assert!(open_existing_append(&path).unwrap().is_none());
    assert!(!path.exists(), "the existing-only open creates nothing");
    open_append(&path).unwrap().write_all(b"one\n").unwrap();
    let mut again = open_existing_append(&path).unwrap().unwrap();
    again.write_all(b"two\n").unwrap();
    assert_eq!(read(&path), "one\ntwo\n");

    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    // No reader: refused at once, not waited on (a blocked open is left
    // behind on its thread and fails the test).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(open_append(&fifo).is_err()));
    let refused = rx.recv_timeout(std::time::Duration::from_secs(5));
    assert_eq!(refused, Ok(true), "a FIFO");
    assert!(open_append(dir.path()).is_err(), "a directory");
}

#[test]
fn a_new_file_is_never_opened_through_a_planted_link() {
    let (dir, victim, link) = planted("state.json.tmp");
    let e = create_new(&link).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    // A dangling link: the create would make its target. Refused too.
    let dangling = dir.path().join("dangling");
    symlink(dir.path().join("made-by-the-link"), &dangling).unwrap();
    let e = create_new(&dangling).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    assert!(!dir.path().join("made-by-the-link").exists());
    assert_eq!(read(&victim), "precious\n");
}

#[test]
fn temporary_names_cannot_be_guessed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let (_, one) = create_beside(&path).unwrap();
    let (_, two) = create_beside(&path).unwrap();
    assert_ne!(one, two);
    for tmp in [&one, &two] {
        let name = tmp.file_name().unwrap().to_string_lossy().into_owned();
        let random = name
            .strip_prefix(".state.json.")
            .and_then(|r| r.strip_suffix(".tmp"))
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(random.len(), 16, "{name}");
        assert!(random.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
        assert!(!random.contains(&std::process::id().to_string()), "{name}");
        assert_eq!(tmp.parent(), Some(dir.path()));
    }
}

#[test]
fn a_rename_to_a_new_name_never_replaces_what_is_there() {
    let (dir, victim, link) = planted("p.log.2026-12-02");
    let from = dir.path().join("p.log");
    std::fs::write(&from, "lines\n").unwrap();
    let e = rename_new(&from, &link).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    let e = rename_new(&from, &victim).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    assert_eq!(read(&victim), "precious\n");
    let to = dir.path().join("p.log.2026-12-02.1");
    rename_new(&from, &to).unwrap();
    assert_eq!(read(&to), "lines\n");
    assert!(!from.exists());
}
