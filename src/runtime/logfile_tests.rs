//! Unit tests of the daily log file: the path itself, rotation by day, a
//! file moved away, two writers on one path.

use super::*;

/// 2026-12-02T10:00:00Z.
const NOW: u64 = 1_796_205_600;
const NEXT_DAY: u64 = NOW + DAY_SECS;

/// A fresh directory and the log file `pin-proxy.log` in it, opened at `NOW`.
fn fresh() -> (tempfile::TempDir, PathBuf, DailyFile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pin-proxy.log");
    let log = DailyFile::open_at(&path, NOW).unwrap();
    (dir, path, log)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn lines_go_to_the_configured_path() {
    let (dir, path, mut log) = fresh();
    log.write_at(b"one\n", NOW).unwrap();
    log.write_at(b"two\n", NOW + 5).unwrap();
    assert_eq!(read(&path), "one\ntwo\n");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_new_day_renames_the_file_to_its_date_and_starts_another() {
    let (dir, path, mut log) = fresh();
    log.write_at(b"tuesday\n", NOW).unwrap();
    log.write_at(b"wednesday\n", NEXT_DAY).unwrap();
    assert_eq!(
        read(&dir.path().join("pin-proxy.log.2026-12-02")),
        "tuesday\n"
    );
    assert_eq!(read(&path), "wednesday\n");
}

#[test]
fn a_file_from_an_earlier_day_is_rotated_at_the_first_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pin-proxy.log");
    std::fs::write(&path, "before the restart\n").unwrap();
    let yesterday = UNIX_EPOCH + Duration::from_secs(NOW - DAY_SECS);
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(yesterday)
        .unwrap();
    let mut log = DailyFile::open_at(&path, NOW).unwrap();
    log.write_at(b"after\n", NOW).unwrap();
    assert_eq!(
        read(&dir.path().join("pin-proxy.log.2026-12-01")),
        "before the restart\n"
    );
    assert_eq!(read(&path), "after\n");
}

#[test]
fn a_file_moved_away_is_noticed_within_a_second() {
    let (dir, path, mut log) = fresh();
    log.write_at(b"one\n", NOW).unwrap();
    let moved = dir.path().join("moved.log");
    std::fs::rename(&path, &moved).unwrap();
    log.write_at(b"same second\n", NOW).unwrap();
    log.write_at(b"next second\n", NOW + 1).unwrap();
    assert_eq!(read(&moved), "one\nsame second\n");
    assert_eq!(read(&path), "next second\n");
}

#[test]
fn two_writers_of_one_path_rotate_it_once() {
    // The old and the new process of a live upgrade, across midnight.
    let (dir, path, mut old) = fresh();
    let mut new = DailyFile::open_at(&path, NOW).unwrap();
    old.write_at(b"old 1\n", NOW).unwrap();
    new.write_at(b"new 1\n", NOW).unwrap();
    new.write_at(b"new 2\n", NEXT_DAY).unwrap();
    old.write_at(b"old 2\n", NEXT_DAY).unwrap();
    assert_eq!(
        read(&dir.path().join("pin-proxy.log.2026-12-02")),
        "old 1\nnew 1\n"
    );
    assert_eq!(read(&path), "new 2\nold 2\n");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn a_rotation_never_overwrites_a_dated_file() {
    let (dir, path, mut log) = fresh();
    let dated = dir.path().join("pin-proxy.log.2026-12-02");
    std::fs::write(&dated, "kept\n").unwrap();
    log.write_at(b"tuesday\n", NOW).unwrap();
    log.write_at(b"wednesday\n", NEXT_DAY).unwrap();
    assert_eq!(read(&dated), "kept\n");
    assert_eq!(
        read(&dir.path().join("pin-proxy.log.2026-12-02.1")),
        "tuesday\n"
    );
    assert_eq!(read(&path), "wednesday\n");
}

/// A directory with `victim` (holding "precious") and a link at `name`
/// in it pointing to the victim.
fn with_link(dir: &Path, name: &str) -> PathBuf {
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
    victim
}

#[test]
fn a_link_at_the_path_is_refused_not_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let victim = with_link(dir.path(), "pin-proxy.log");
    let path = dir.path().join("pin-proxy.log");
    assert!(DailyFile::open_at(&path, NOW).is_err());
    assert_eq!(read(&victim), "precious\n");

    // Planted after a rotation moved the file away: the new day's lines
    // stay in the old file instead.
    std::fs::remove_file(&path).unwrap();
    let mut log = DailyFile::open_at(&path, NOW).unwrap();
    log.write_at(b"tuesday\n", NOW).unwrap();
    std::fs::rename(&path, dir.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    log.write_at(b"still here\n", NOW + 1).unwrap();
    assert_eq!(read(&victim), "precious\n");
    assert_eq!(read(&dir.path().join("moved")), "tuesday\nstill here\n");
}

#[test]
fn a_rotation_never_replaces_a_link_at_the_dated_name() {
    let (dir, path, mut log) = fresh();
    // Dangling: a look before the rename sees nothing there.
    let link = dir.path().join("pin-proxy.log.2026-12-02");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
    log.write_at(b"tuesday\n", NOW).unwrap();
    log.write_at(b"wednesday\n", NEXT_DAY).unwrap();
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(
        read(&dir.path().join("pin-proxy.log.2026-12-02.1")),
        "tuesday\n"
    );
    assert_eq!(read(&path), "wednesday\n");
}
