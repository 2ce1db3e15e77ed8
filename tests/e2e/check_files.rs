//! The files `run` writes, as `check` sees them: a `log.file` that `run`
//! could not open fails both (exit 2, which the unit does not restart),
//! and a log or state directory other users can write is warned about.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::proxy::binary;

/// The user `run` is started as here, as the unit's `User=`: `nobody` when
/// the tests run as root (root writes any file), else the test's own.
fn service_user() -> Option<(u32, u32)> {
    rustix::process::geteuid()
        .is_root()
        .then_some((65_534, 65_534))
}

fn pin_proxy(command: &str, config: &Path) -> Command {
    let mut cmd = Command::new(binary());
    cmd.arg(command)
        .arg("-c")
        .arg(config)
        .env_remove("PIN_PROXY_CONFIG")
        .env_remove("RUST_LOG");
    if let Some((uid, gid)) = service_user() {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// `pin-proxy run`, ended after 10 s if it is still running (a start that
/// got past the log file serves until stopped).
fn run(config: &Path) -> Output {
    let mut child = pin_proxy("run", config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pin-proxy run");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Still running: stop it; the exit status then shows the signal.
    let _ = child.kill();
    child.wait_with_output().expect("wait for pin-proxy run")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A config logging to `log` in `dir`, readable by the service user.
fn config(dir: &Path, name: &str, log: &Path) -> std::path::PathBuf {
    let path = dir.join(name);
    let yaml = format!(
        "log: {{ file: \"{}\" }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [127.0.0.1:9]\n",
        log.display()
    );
    std::fs::write(&path, yaml).expect("write config");
    mode(&path, 0o644);
    path
}

#[test]
fn a_log_file_run_cannot_open_fails_check_and_run_with_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    mode(dir.path(), 0o755);
    // The log directory belongs to the service user, as LogsDirectory=
    // makes it; the file in it, left by an earlier root run, does not.
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).expect("mkdir");
    if let Some((uid, gid)) = service_user() {
        std::os::unix::fs::chown(&logs, Some(uid), Some(gid)).expect("chown");
    }
    let log = logs.join("pin-proxy.log");
    std::fs::write(&log, "from an earlier run\n").expect("write log");
    mode(&log, 0o444);
    // A link at the path, to a file anyone may write: never followed.
    let open = logs.join("open.log");
    std::fs::write(&open, "").expect("write");
    mode(&open, 0o666);
    let link = logs.join("link.log");
    std::os::unix::fs::symlink(&open, &link).expect("symlink");

    for (name, file, says) in [
        ("unwritable.yaml", &log, "Permission denied"),
        ("link.yaml", &link, "a symbolic link"),
    ] {
        let config = config(dir.path(), name, file);
        let out = pin_proxy("check", &config).output().expect("check");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "check {name}: {stderr}");
        let want = format!("log.file: cannot open {} for writing", file.display());
        assert!(stderr.contains(&want) && stderr.contains(says), "{stderr}");

        let out = run(&config);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "run {name}: {stderr}");
        assert!(stderr.contains(&want), "{stderr}");
    }
    assert_eq!(
        std::fs::read_to_string(&log).expect("read log"),
        "from an earlier run\n"
    );
    assert_eq!(std::fs::read_to_string(&open).expect("read"), "");
}

#[test]
fn log_and_state_directories_others_can_write_are_warned_about() {
    let dir = tempfile::tempdir().expect("tempdir");
    mode(dir.path(), 0o755);
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    mode(&shared, 0o1777);
    let path = dir.path().join("shared.yaml");
    let yaml = format!(
        "log: {{ file: \"{0}/p.log\" }}\nstate_file: \"{0}/state/state.json\"\npools:\n  \
         - name: p\n    listen: 127.0.0.1:0\n    backends: [127.0.0.1:9]\n",
        shared.display()
    );
    std::fs::write(&path, yaml).expect("write config");
    mode(&path, 0o644);
    let out = pin_proxy("check", &path).output().expect("check");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for key in ["log.file", "state_file"] {
        let want = format!(
            "warning: {key}: directory {} can be written by other users (mode 1777)",
            shared.display()
        );
        assert!(stderr.contains(&want), "{want} not in:\n{stderr}");
    }
    assert_eq!(
        std::fs::read_dir(&shared).expect("ls").count(),
        0,
        "check made nothing"
    );

    mode(&shared, 0o755);
    if let Some((uid, gid)) = service_user() {
        std::os::unix::fs::chown(&shared, Some(uid), Some(gid)).expect("chown");
    }
    let out = pin_proxy("check", &path).output().expect("check");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("other users"), "{stderr}");
}
