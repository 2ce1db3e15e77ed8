//! The files operators deploy with: every `deploy/config*.yaml` passes
//! `pin-proxy check`, `systemd/pin-proxy.service` passes `systemd-analyze
//! verify` and keeps its required directives, and `deploy/install.sh` parses
//! and stages a complete install into a temporary DESTDIR.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_pin-proxy");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/pin-proxy.service");
const INSTALL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/install.sh");
/// The binary path the shipped unit names.
const UNIT_BIN: &str = "/usr/local/bin/pin-proxy";
const REQUIRE_ENV: &str = "PIN_PROXY_REQUIRE_PEERS";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"))
}

/// `deploy/config*.yaml` and `deploy/*/config*.yaml`, sorted; at least
/// four, so a move cannot make the test pass by checking nothing.
fn deploy_configs() -> Vec<PathBuf> {
    let dir = Path::new(ROOT).join("deploy");
    let entries = |dir: &Path| -> Vec<PathBuf> {
        fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|entry| entry.expect("read deploy entry").path())
            .collect()
    };
    let top = entries(&dir);
    let nested = top.iter().filter(|p| p.is_dir()).flat_map(|d| entries(d));
    let mut files: Vec<PathBuf> = top
        .iter()
        .cloned()
        .chain(nested)
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            p.is_file() && name.starts_with("config") && name.ends_with(".yaml")
        })
        .collect();
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("electrum/config.yaml")),
        "deploy/electrum/config.yaml not found: {files:?}"
    );
    assert!(
        files.len() >= 4,
        "only {} deploy/config*.yaml: {files:?}",
        files.len()
    );
    files
}

#[test]
fn deploy_configs_pass_check() {
    for file in deploy_configs() {
        let out = run(Command::new(BIN)
            .arg("check")
            .arg("-c")
            .arg(&file)
            .env_remove("PIN_PROXY_CONFIG")
            .env_remove("RUST_LOG"));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}:\n{}",
            file.display(),
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("pool "),
            "{}: no pool in the summary",
            file.display()
        );
        // Where the unit's StateDirectory= (and the image's volume) is.
        assert!(
            text(&out.stdout).contains("state_file: /var/lib/pin-proxy/state.json"),
            "{}: no state_file in /var/lib/pin-proxy",
            file.display()
        );
    }
}

/// `KEY=value` lines of the unit, in order (a key may repeat).
fn unit_directives() -> Vec<(String, String)> {
    let unit = fs::read_to_string(UNIT).expect("read the unit");
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

#[test]
fn unit_keeps_required_directives() {
    let directives = unit_directives();
    let has = |key: &str, value: &str| directives.iter().any(|(k, v)| k == key && v == value);
    let required = [
        ("Type", "notify"),
        // The new process of a live upgrade names itself MAINPID=.
        ("NotifyAccess", "all"),
        (
            "ExecStart",
            "/usr/local/bin/pin-proxy run -c /etc/pin-proxy/config.yaml",
        ),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("WatchdogSec", "30s"),
        ("Restart", "on-failure"),
        // An invalid config (2) and a taken listen address (3) are not retried.
        ("RestartPreventExitStatus", "2 3"),
        ("LimitNOFILE", "1048576"),
        ("StandardOutput", "journal"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("CapabilityBoundingSet", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("SystemCallFilter", "@system-service"),
        ("SystemCallArchitectures", "native"),
        // state_file's directory: writable under ProtectSystem=strict.
        ("StateDirectory", "pin-proxy"),
        ("StateDirectoryMode", "0750"),
    ];
    for (key, value) in required {
        assert!(has(key, value), "the unit lacks {key}={value}");
    }
}

/// Writes the unit into `dir` with its binary path pointed at the built
/// binary: `verify` fails on an ExecStart whose binary does not exist.
fn unit_for_test(dir: &Path) -> PathBuf {
    assert!(
        !BIN.contains(char::is_whitespace),
        "binary path {BIN} has whitespace"
    );
    let unit = fs::read_to_string(UNIT).expect("read the unit");
    assert!(
        unit.contains(UNIT_BIN),
        "the unit no longer names {UNIT_BIN}"
    );
    let path = dir.join("pin-proxy.service");
    fs::write(&path, unit.replace(UNIT_BIN, BIN)).expect("write the test unit");
    path
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

#[test]
fn unit_passes_systemd_analyze_verify() {
    if !on_path("systemd-analyze") {
        assert!(
            std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
            "systemd-analyze is not on PATH and {REQUIRE_ENV}=1 (install the `systemd` package)"
        );
        eprintln!("notice: systemd-analyze not on PATH; skipping the unit verify test");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let unit = unit_for_test(dir.path());
    let out = run(Command::new("systemd-analyze").arg("verify").arg(&unit));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stdout}{stderr}"
    );
    // Unknown keys and bad values are only warnings (exit 0), printed as
    // `{path}:{line}: ...`; lines about other units on the host are not ours.
    let name = unit.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ours: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .filter(|l| l.contains(name))
        .collect();
    assert!(
        ours.is_empty(),
        "systemd-analyze verify warned:\n{}",
        ours.join("\n")
    );
}

#[test]
fn install_script_parses() {
    let out = run(Command::new("bash").arg("-n").arg(INSTALL));
    assert!(out.status.success(), "bash -n: {}", text(&out.stderr));
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn stage(destdir: &Path) -> Output {
    run(Command::new("bash")
        .arg(INSTALL)
        .args(["--bin", BIN, "--prefix", "/opt/pin-proxy", "--destdir"])
        .arg(destdir)
        .env_remove("DESTDIR")
        .env_remove("PIN_PROXY_CONFIG")
        .env_remove("RUST_LOG"))
}

/// With `--destdir` the script touches nothing outside it (no user, no
/// chown, no systemctl), so it runs here as any user.
#[test]
fn install_script_stages_into_destdir() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let out = stage(root);
    let log = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "install.sh failed:\n{log}");

    let bin = root.join("opt/pin-proxy/bin/pin-proxy");
    let unit = root.join("etc/systemd/system/pin-proxy.service");
    let conf = root.join("etc/pin-proxy/config.yaml");
    assert_eq!(mode(&bin), 0o755);
    assert_eq!(mode(&unit), 0o644);
    assert_eq!(mode(&conf), 0o640, "the config may hold probe_url secrets");
    assert_eq!(mode(&root.join("etc/pin-proxy")), 0o750);
    assert_eq!(
        mode(&root.join("var/lib/pin-proxy")),
        0o750,
        "state_file's directory"
    );
    assert_eq!(
        fs::read(&bin).expect("read staged binary"),
        fs::read(BIN).expect("read built binary")
    );
    let unit_text = fs::read_to_string(&unit).expect("read staged unit");
    assert!(
        unit_text
            .contains("ExecStart=/opt/pin-proxy/bin/pin-proxy run -c /etc/pin-proxy/config.yaml"),
        "ExecStart does not follow --prefix:\n{unit_text}"
    );
    assert!(!unit_text.contains(UNIT_BIN));
    let example = Path::new(ROOT).join("deploy/config.litecoin-p2p.yaml");
    assert_eq!(
        fs::read(&conf).expect("read staged config"),
        fs::read(&example).expect("read example config")
    );

    // Again, with an operator's edit: the config stays, nothing else changes.
    let edited = format!(
        "{}\n# edited by the operator\n",
        text(&fs::read(&conf).expect("read staged config"))
    );
    fs::write(&conf, &edited).expect("edit staged config");
    let out = stage(root);
    let log = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "second install.sh failed:\n{log}");
    assert_eq!(fs::read_to_string(&conf).expect("reread config"), edited);
    assert!(log.contains("kept existing"), "{log}");
    assert!(
        log.contains(&format!("unchanged: {}", bin.display())),
        "{log}"
    );
    assert!(
        log.contains(&format!("unchanged: {}", unit.display())),
        "{log}"
    );

    // A broken existing config stops the script before any enabling.
    fs::write(&conf, "pools: 3\n").expect("break staged config");
    let out = stage(root);
    assert!(!out.status.success(), "install.sh accepted a broken config");
}

/// A first install enables the service but leaves it stopped (the example
/// config names placeholder nodes) and says what to edit; once a config
/// exists, a later run starts it. `SYSTEMCTL` records the calls.
#[test]
fn first_install_enables_without_starting_then_a_rerun_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    let calls = dir.path().join("calls");
    let fake = dir.path().join("systemctl");
    fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\n[ \"$1\" = is-active ] && exit 3\nexit 0\n",
            calls.display()
        ),
    )
    .expect("write fake systemctl");
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).expect("chmod");
    let install = || {
        let out = run(Command::new("bash")
            .arg(INSTALL)
            .args(["--bin", BIN, "--destdir"])
            .arg(&root)
            .env("SYSTEMCTL", &fake)
            .env_remove("DESTDIR")
            .env_remove("PIN_PROXY_CONFIG")
            .env_remove("RUST_LOG"));
        let log = text(&out.stdout) + &text(&out.stderr);
        assert!(out.status.success(), "install.sh failed:\n{log}");
        let made = fs::read_to_string(&calls).unwrap_or_default();
        fs::remove_file(&calls).ok();
        (log, made)
    };
    let (log, made) = install();
    assert_eq!(made, "daemon-reload\nenable pin-proxy\n", "{log}");
    assert!(
        log.contains("enabled, not started") && log.contains("edit its pools"),
        "{log}"
    );
    let (log, made) = install();
    assert!(made.contains("enable --now pin-proxy"), "{made}\n{log}");
}

/// Re-running the installer over a running service with a new binary is a
/// live upgrade, not a restart: the running instance (a real one, on the
/// installed config's admin address) hands everything to a new process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_over_a_running_service_upgrades_live_instead_of_restarting() {
    let node = crate::support::nodes::Node::echo().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    let calls = dir.path().join("calls");
    let fake = dir.path().join("systemctl");
    // The service runs: is-active says so.
    fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$*\" >> {}\nexit 0\n", calls.display()),
    )
    .expect("write fake systemctl");
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).expect("chmod");
    // An admin address the CLI can find in the installed config.
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let yaml = format!(
        "admin: {{ listen: \"{admin}\" }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [\"{}\"]\n",
        node.addr
    );
    let initial = dir.path().join("initial.yaml");
    fs::write(&initial, &yaml).unwrap();
    // An older "build": the same binary with a byte more, so the rerun
    // sees the binary change.
    let older = dir.path().join("older");
    let mut bytes = fs::read(BIN).unwrap();
    bytes.push(0);
    fs::write(&older, bytes).unwrap();
    fs::set_permissions(&older, fs::Permissions::from_mode(0o755)).unwrap();
    let install = move |bin: &Path| {
        let out = run(Command::new("bash")
            .arg(INSTALL)
            .arg("--bin")
            .arg(bin)
            .arg("--config")
            .arg(&initial)
            .arg("--destdir")
            .arg(&root)
            .env("SYSTEMCTL", &fake)
            .env_remove("DESTDIR")
            .env_remove("PIN_PROXY_CONFIG")
            .env_remove("RUST_LOG"));
        let log = text(&out.stdout) + &text(&out.stderr);
        let made = fs::read_to_string(&calls).unwrap_or_default();
        fs::remove_file(&calls).ok();
        (out.status.success(), log, made)
    };
    let (ok, log, _) = install(&older);
    assert!(ok, "first install failed:\n{log}");

    let proxy = crate::support::proxy::Proxy::start(&yaml).await;
    let mut c = tokio::net::TcpStream::connect(proxy.addr("p"))
        .await
        .unwrap();
    let (ok, log, made) = tokio::task::spawn_blocking(move || install(Path::new(BIN)))
        .await
        .unwrap();
    assert!(ok, "rerun failed:\n{log}");
    assert!(log.contains("live upgrade"), "{log}");
    assert!(!made.contains("restart"), "no restart: {made}");
    let done = proxy
        .wait_event(
            |e| e["message"] == "upgraded",
            std::time::Duration::from_secs(30),
        )
        .await;
    assert_eq!(done["generation"], 1);
    assert_eq!(done["connections"], 1);
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    c.write_all(b"still here").await.unwrap();
    let mut got = [0u8; 10];
    c.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"still here");
}
