//! The state file: its round trip, every way a file is refused, the atomic
//! save, and the writer's pace (under paused time: deterministic).

use std::os::unix::fs::FileTypeExt;
use std::time::UNIX_EPOCH;

use tokio::sync::mpsc;

use super::*;
use crate::config::Config;

const S: Duration = Duration::from_secs(1);

fn pool() -> Arc<Pool> {
    let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends:\n      \
                - { name: a, addr: \"127.0.0.1:9\" }\n      \
                - { name: b, addr: \"127.0.0.1:10\" }\n      \
                - { name: c, addr: \"127.0.0.1:11\" }\n";
    let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
    Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()))
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_saved_file_reads_back_with_windows_reasons_and_strikes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let pools = [pool()];
    pools[0].operator().quarantine("b", 600 * S).unwrap();
    let state = SavedState::of(&pools);
    let written_at = UNIX_EPOCH + 1_800_000_000 * S;
    save(&path, &state, written_at).unwrap();
    assert_eq!(names(dir.path()), ["state.json"], "no temporary file left");

    let text = fs::read_to_string(&path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["version"], 1);
    assert_eq!(json["written_at"], "2027-01-15T08:00:00.000Z");
    let b = &json["pools"][0]["backends"][1];
    assert_eq!(
        (&b["name"], &b["addr"]),
        (&"b".into(), &"127.0.0.1:10".into())
    );
    assert_eq!(b["quarantine"]["reason"], "manual");
    assert_eq!(b["strikes"], 0);
    assert!(json["pools"][0]["backends"][0]["quarantine"].is_null());

    let back = load(&path).unwrap();
    let (was, is) = (&state.pools[0].1[1], &back.pools[0].1[1]);
    assert_eq!(back.pools[0].0, "p");
    assert_eq!((&is.name, &is.addr, is.strikes), (&was.name, &was.addr, 0));
    let (w, i) = (was.quarantine.unwrap(), is.quarantine.unwrap());
    assert_eq!(w.reason, i.reason);
    let gap = w.until.duration_since(i.until).unwrap_or_default();
    assert!(
        gap < Duration::from_millis(1),
        "millisecond precision: {gap:?}"
    );

    // Saved again over it: replaced, still no temporary file.
    pools[0].operator().release("b").unwrap();
    save(&path, &SavedState::of(&pools), written_at).unwrap();
    assert_eq!(names(dir.path()), ["state.json"]);
    assert_eq!(load(&path).unwrap().pools[0].1[1].strikes, 0);
}

#[test]
fn every_bad_file_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let refused = |bytes: &[u8]| {
        fs::write(&path, bytes).unwrap();
        load(&path).unwrap_err()
    };
    assert!(matches!(load(&path), Err(LoadError::Missing)));
    assert_eq!(LoadError::Missing.as_str(), "missing");
    let e = refused(b"{\"version\":1,\"pools\":[");
    assert!(matches!(e, LoadError::Corrupt(_)), "{e}");
    assert_eq!(e.as_str(), "corrupt");
    assert!(matches!(refused(b"\x00\xffgarbage"), LoadError::Corrupt(_)));
    assert!(matches!(refused(b"[1,2]"), LoadError::Corrupt(_)));
    let e = refused(b"{\"version\":2,\"written_at\":\"x\",\"pools\":[]}");
    assert!(matches!(e, LoadError::Version(2)), "{e}");
    assert_eq!(
        e.to_string(),
        "version 2 is not the version this build reads (1)"
    );
    let bad_time = br#"{"version":1,"written_at":"x","pools":[{"name":"p","backends":[
        {"name":"a","addr":"h:1","strikes":1,"quarantine":{"until":"soon","reason":"manual"}}]}]}"#;
    let e = refused(bad_time);
    assert!(
        e.to_string().contains("pool p backend a: until `soon`"),
        "{e}"
    );
    let bad_reason = br#"{"version":1,"written_at":"x","pools":[{"name":"p","backends":[
        {"name":"a","addr":"h:1","strikes":1,"quarantine":{"until":"2030-01-01T00:00:00Z","reason":"bored"}}]}]}"#;
    assert!(matches!(refused(bad_reason), LoadError::Corrupt(_)));

    // One byte over the bound: refused without parsing.
    let mut big = b"{\"version\":1,\"written_at\":\"x\",\"pools\":[]}".to_vec();
    big.resize(usize::try_from(MAX_BYTES).unwrap() + 1, b' ');
    let e = refused(&big);
    assert!(matches!(e, LoadError::TooLarge), "{e}");
    assert_eq!(e.as_str(), "corrupt");
    big.truncate(usize::try_from(MAX_BYTES).unwrap());
    assert_eq!(load_ok(&path, &big), SavedState::default());

    // A directory where the file should be: unreadable.
    let e = load(dir.path()).unwrap_err();
    assert!(matches!(e, LoadError::Unreadable(_)), "{e}");
    assert_eq!(e.as_str(), "unreadable");
}

fn load_ok(path: &Path, bytes: &[u8]) -> SavedState {
    fs::write(path, bytes).unwrap();
    load(path).unwrap()
}

#[test]
fn a_failed_save_leaves_the_old_file_and_no_temporary_one() {
    let dir = tempfile::tempdir().unwrap();
    // A directory in the way: never replaced.
    let path = dir.path().join("state.json");
    fs::create_dir(&path).unwrap();
    let e = save(&path, &SavedState::default(), SystemTime::now()).unwrap_err();
    assert!(e.to_string().starts_with("replace"), "{e}");
    assert_eq!(names(dir.path()), ["state.json"]);
    // No directory at all.
    let path = dir.path().join("missing/state.json");
    let e = save(&path, &SavedState::default(), SystemTime::now()).unwrap_err();
    assert!(e.to_string().starts_with("create"), "{e}");
}

#[test]
fn records_go_back_to_the_pool_of_the_same_name_only() {
    let old = [pool()];
    old[0].operator().quarantine("a", 600 * S).unwrap();
    let mut state = SavedState::of(&old);
    state.pools.push(("other".into(), state.pools[0].1.clone()));
    let new = [pool()];
    assert_eq!(state.restore(&new, SystemTime::now()), 3);
    state.pools[0].0 = "renamed".into();
    state.pools.pop();
    let fresh = [pool()];
    assert_eq!(state.restore(&fresh, SystemTime::now()), 0);
}

/// Whether the file at `path` shows backend `name` quarantined.
fn shows_quarantined(path: &Path, name: &str) -> bool {
    load(path).is_ok_and(|s| {
        s.pools[0]
            .1
            .iter()
            .any(|b| b.name == name && b.quarantine.is_some())
    })
}

async fn until_shown(path: &Path, name: &str) {
    for _ in 0..10_000 {
        if shows_quarantined(path, name) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("{name} never written");
}

#[tokio::test(start_paused = true)]
async fn the_writer_saves_each_change_at_most_once_a_second_and_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let pool = pool();
    let control = Control::new(
        vec![pool.clone()],
        mpsc::channel(1).0,
        mpsc::channel(1).0,
        0,
    );
    let token = CancellationToken::new();
    let writer = write_on_change(path.clone(), control, pool.saved().changes(), token.clone());
    let task = tokio::spawn(writer);
    assert!(!path.exists(), "nothing changed, nothing written");

    pool.operator().quarantine("a", 600 * S).unwrap();
    until_shown(&path, "a").await;
    let first = Instant::now();
    pool.operator().quarantine("b", 600 * S).unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        !shows_quarantined(&path, "b"),
        "a second write within a second"
    );
    until_shown(&path, "b").await;
    assert!(first.elapsed() >= S, "{:?}", first.elapsed());

    // A change just before shutdown, inside the pace: the last write has it.
    pool.operator().quarantine("c", 600 * S).unwrap();
    token.cancel();
    task.await.unwrap();
    assert!(shows_quarantined(&path, "c"));
    assert_eq!(names(dir.path()), ["state.json"]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_is_retried_without_a_further_change() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("later");
    let path = sub.join("state.json");
    let pool = pool();
    let control = Control::new(
        vec![pool.clone()],
        mpsc::channel(1).0,
        mpsc::channel(1).0,
        0,
    );
    let token = CancellationToken::new();
    let task = tokio::spawn(write_on_change(
        path.clone(),
        control,
        pool.saved().changes(),
        token.clone(),
    ));
    pool.operator().quarantine("a", 600 * S).unwrap();
    // Let the first attempt fail, then make the directory.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!path.exists());
    fs::create_dir(&sub).unwrap();
    until_shown(&path, "a").await;
    token.cancel();
    task.await.unwrap();
}

#[test]
fn a_fifo_or_a_device_is_neither_opened_nor_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("state.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    // Opening a FIFO for reading would wait for a writer: refused first.
    let e = load(&fifo).unwrap_err();
    assert!(e.to_string().contains("not a regular file (a FIFO)"), "{e}");
    assert_eq!(e.as_str(), "unreadable");
    let e = save(&fifo, &SavedState::default(), SystemTime::now()).unwrap_err();
    assert!(e.to_string().contains("a FIFO"), "{e}");
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
    // `/dev/null` to turn it off: read as nothing useful, never replaced.
    let null = Path::new("/dev/null");
    assert!(matches!(load(null), Err(LoadError::Unreadable(_))));
    let e = save(null, &SavedState::default(), SystemTime::now()).unwrap_err();
    assert!(e.to_string().contains("a device"), "{e}");
    assert_eq!(names(dir.path()), ["state.fifo"], "no temporary file left");
}

#[test]
fn a_link_planted_at_a_temporary_name_is_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let victim = dir.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    // The name the temporary file had when it followed from the pid.
    let old_name = format!(".state.json.{}.tmp", std::process::id());
    std::os::unix::fs::symlink(&victim, dir.path().join(&old_name)).unwrap();
    let pools = [pool()];
    pools[0].operator().quarantine("a", 600 * S).unwrap();
    save(&path, &SavedState::of(&pools), SystemTime::now()).unwrap();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(shows_quarantined(&path, "a"));
    let kind = fs::symlink_metadata(&path).unwrap().file_type();
    assert!(kind.is_file(), "{kind:?}");
    let left = names(dir.path());
    assert_eq!(left, [old_name.as_str(), "state.json", "victim"]);
}

#[test]
fn a_missing_state_directory_is_made_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lib/pin-proxy/state.json");
    restore_at_start(&path, &[pool()]);
    let made = fs::metadata(dir.path().join("lib/pin-proxy")).unwrap();
    assert!(made.is_dir());
    let mode = made.permissions().mode();
    assert_eq!(mode & 0o7027, 0, "{mode:o}");
    let pools = [pool()];
    pools[0].operator().quarantine("a", 600 * S).unwrap();
    save(&path, &SavedState::of(&pools), SystemTime::now()).unwrap();
    assert!(shows_quarantined(&path, "a"));
}

#[test]
fn a_file_written_ahead_of_the_clock_counts_its_windows_from_now() {
    let now = UNIX_EPOCH + 1_800_000_000 * S;
    let century = 100 * 365 * 86_400 * S;
    let written_at = now + century;
    let pools = [pool()];
    pools[0].operator().quarantine("a", 600 * S).unwrap();
    let mut state = SavedState::of(&pools);
    // As a clock a century ahead wrote it: ten minutes left then.
    let window = state.pools[0].1[0].quarantine.as_mut().unwrap();
    window.until = written_at + 600 * S;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    save(&path, &state, written_at).unwrap();

    let mut back = load(&path).unwrap();
    assert_eq!(back.written_at, Some(written_at));
    assert_eq!(back.ahead_of(now), Some(century));
    assert_eq!(back.ahead_of(written_at + S), None);
    assert_eq!(back.rebase(now), 1);
    let until = back.pools[0].1[0].quarantine.unwrap().until;
    assert_eq!(until, now + 600 * S);
    assert_eq!(back.ahead_of(now), None);
}
