//! `pin-proxy check`: every fixture in `tests/config/{valid,invalid}` and the
//! shipped `config.yaml` give the exit code and message the contract promises.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_pin-proxy");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/config");

fn check(config: &Path) -> Output {
    Command::new(BIN)
        .arg("check")
        .arg("-c")
        .arg(config)
        .env_remove("PIN_PROXY_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run pin-proxy check")
}

/// The `.yaml` files of a fixture directory, sorted; fails if there are none,
/// so a moved directory cannot make the tests pass by testing nothing.
fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(FIXTURES).join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("read fixture entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "only {} fixtures in {}",
        files.len(),
        dir.display()
    );
    files
}

/// Values of the `# {key}: value` lines in a fixture's leading comment block.
fn header(text: &str, key: &str) -> Vec<String> {
    let prefix = format!("# {key}: ");
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn valid_configs_pass() {
    let mut files = fixtures("valid");
    files.push(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config.yaml"
    )));
    for file in &files {
        let out = check(file);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{}:\n{stderr}", file.display());
        assert!(
            stdout.contains("pool "),
            "{}: no pool in summary:\n{stdout}",
            file.display()
        );
    }
}

#[test]
fn invalid_configs_fail_with_their_message() {
    let files = fixtures("invalid");
    for file in &files {
        let yaml = std::fs::read_to_string(file).expect("read fixture");
        assert!(
            yaml.starts_with("# expect: "),
            "{}: first line must be `# expect: ...`",
            file.display()
        );
        let out = check(file);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}:\n{stderr}", file.display());
        assert!(
            stderr.contains(&file.display().to_string()),
            "{}: file not named in:\n{stderr}",
            file.display()
        );
        for want in header(&yaml, "expect") {
            assert!(
                stderr.contains(&want),
                "{}: want `{want}` in:\n{stderr}",
                file.display()
            );
        }
        for secret in header(&yaml, "secret") {
            let all = format!("{}{stderr}", text(&out.stdout));
            assert!(
                !all.contains(&secret),
                "{}: secret `{secret}` printed:\n{all}",
                file.display()
            );
        }
    }
}

#[test]
fn secrets_are_never_printed_for_valid_configs() {
    let file = Path::new(FIXTURES).join("valid/backend-forms.yaml");
    let out = check(&file);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains("https://***@10.0.0.5:9131/api/?***"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("pass") && !stdout.contains("token=abc"),
        "{stdout}"
    );
}

#[test]
fn missing_file_exits_2_naming_it() {
    let out = check(Path::new("/nonexistent.yaml"));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent.yaml"), "{stderr}");
}

#[test]
fn a_log_file_that_run_could_not_write_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, log_file: &str| {
        let path = dir.path().join(name);
        let yaml = format!(
            "log: {{ file: \"{log_file}\" }}\npools:\n  - name: p\n    listen: 127.0.0.1:9333\n    \
             backends: [127.0.0.1:19335]\n"
        );
        std::fs::write(&path, yaml).expect("write config");
        path
    };
    let bad = write("bad.yaml", "/proc/pin-proxy/pin-proxy.log");
    let out = check(&bad);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("log.file: cannot create the log directory /proc/pin-proxy"),
        "{stderr}"
    );
    // A directory that does not exist yet but can be made is fine, and the
    // check leaves it unmade.
    let later = dir.path().join("logs/later");
    let good = write("good.yaml", &later.join("p.log").display().to_string());
    let out = check(&good);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!dir.path().join("logs").exists());
}

#[test]
fn an_oversized_file_is_refused_without_reading_it_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("huge.yaml");
    let file = std::fs::File::create(&path).expect("create");
    // Sparse: 64 MiB of zeros that take no disk.
    file.set_len(64 << 20).expect("set_len");
    let out = check(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("huge.yaml") && stderr.contains("larger than 4 MiB"),
        "{stderr}"
    );
    // Just under the cap is read and judged on its content.
    let path = dir.path().join("big.yaml");
    let mut yaml = String::from(
        "pools:\n  - name: p\n    listen: 127.0.0.1:9333\n    backends: [127.0.0.1:19335]\n",
    );
    let line = "# padding padding padding padding padding padding padding padding\n";
    while yaml.len() + line.len() <= 4 << 20 {
        yaml.push_str(line);
    }
    std::fs::write(&path, yaml).expect("write");
    let out = check(&path);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `state_file` is printed by `check`; one `run` could not write (a place
/// it cannot create, a directory) is warned about, not refused: a state
/// file never stops the start.
#[test]
fn a_state_file_is_printed_and_warned_about_where_it_could_not_be_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, state_file: Option<&str>| {
        let path = dir.path().join(name);
        let key = state_file.map_or_else(String::new, |f| format!("state_file: \"{f}\"\n"));
        let yaml = format!(
            "{key}pools:\n  - name: p\n    listen: 127.0.0.1:9333\n    backends: [127.0.0.1:19335]\n"
        );
        std::fs::write(&path, yaml).expect("write config");
        path
    };
    let later = dir.path().join("lib/pin-proxy/state.json");
    let out = check(&write("good.yaml", Some(&later.display().to_string())));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains(&format!("state_file: {}", later.display())),
        "{stdout}"
    );
    assert!(!stderr.contains("state_file"), "{stderr}");
    assert!(!dir.path().join("lib").exists(), "check creates nothing");

    let out = check(&write("bad.yaml", Some("/proc/pin-proxy/state.json")));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: state_file: cannot create the state directory /proc/pin-proxy"),
        "{stderr}"
    );
    let out = check(&write("dir.yaml", Some(&dir.path().display().to_string())));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("is a directory"), "{stderr}");

    let out = check(&write("none.yaml", None));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("state_file: none"), "{stdout}");
}

/// A `bitcoin-p2p` pool whose `stall_timeout` is under the nodes' own
/// 2-minute ping is warned about (its idle peers would make a quiet node
/// look stalled), whatever the rule; 5m, or another probe kind, is not.
/// The rule is shown with the timeout.
#[test]
fn a_stall_timeout_under_the_p2p_ping_is_warned_about() {
    let dir = tempfile::tempdir().expect("tempdir");
    let warning = "warning: pool p: health.stall_timeout 30s is under the 2-minute ping";
    for (i, (health, warned, shown)) in [
        (
            "probe: bitcoin-p2p, stall_timeout: 30s",
            true,
            "stall_timeout 30s (push)",
        ),
        (
            "probe: bitcoin-p2p, stall_timeout: 30s, stall_rule: request",
            true,
            "stall_timeout 30s (request)",
        ),
        (
            "probe: bitcoin-p2p, stall_timeout: 5m",
            false,
            "stall_timeout 5m (push)",
        ),
        (
            "probe: electrum, stall_timeout: 30s, stall_rule: request",
            false,
            "(request)",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.path().join(format!("{i}.yaml"));
        let yaml = format!(
            "pools:\n  - name: p\n    listen: 127.0.0.1:9333\n    health: {{ {health} }}\n    \
             backends: [127.0.0.1:19335]\n"
        );
        std::fs::write(&path, yaml).expect("write config");
        let out = check(&path);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{health}: {stderr}");
        assert_eq!(stderr.contains(warning), warned, "{health}: {stderr}");
        assert!(stdout.contains(shown), "{health}: {stdout}");
    }
}

/// A pool whose lag can never be judged (a custom `magic`, no `network`,
/// two backends) is warned about; the same pool with a network is not.
#[test]
fn a_pool_that_can_never_judge_lag_is_warned_about() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, health: &str| {
        let path = dir.path().join(name);
        let yaml = format!(
            "pools:\n  - name: p\n    listen: 127.0.0.1:9333\n    health: {health}\n    \
             backends: [127.0.0.1:19335, 127.0.0.1:19336]\n"
        );
        std::fs::write(&path, yaml).expect("write config");
        path
    };
    let out = check(&write(
        "custom.yaml",
        "{ probe: bitcoin-p2p, magic: 0a0b0c0d }",
    ));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: pool p: health.magic without health.network and 2 backend(s)"),
        "{stderr}"
    );
    let named = "{ probe: bitcoin-p2p, network: litecoin-regtest }";
    let out = check(&write("named.yaml", named));
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("lag is never judged"), "{stderr}");
}

/// `check` shows each pool's `proxy_protocol` and `source` after
/// `defaults` are merged in, key by key.
#[test]
fn client_identity_is_printed_per_pool() {
    let file = Path::new(FIXTURES).join("valid/client-identity.yaml");
    let out = check(&file);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let pool = |name: &str| {
        let start = stdout
            .find(&format!("pool {name}\n"))
            .unwrap_or_else(|| panic!("no pool {name} in:\n{stdout}"));
        let rest = &stdout[start..];
        rest[..rest[1..].find("\npool ").map_or(rest.len(), |end| end + 1)].to_owned()
    };
    let (ltc, bb) = (pool("ltc"), pool("bb"));
    for line in [
        "  proxy_protocol: from 10.0.0.0/8, fd00::/8 (header within 2s)",
        "  source: client (the client's own IP; needs CAP_NET_ADMIN or CAP_NET_RAW, see README \"Transparent source\")",
    ] {
        assert!(ltc.contains(&format!("{line}\n")), "{line}\n{ltc}");
    }
    for line in [
        "  proxy_protocol: from 192.168.0.10/32 (header within 5s)",
        "  source: 127.0.0.1 (backend connections are made from it)",
    ] {
        assert!(bb.contains(&format!("{line}\n")), "{line}\n{bb}");
    }
    let out = check(&Path::new(FIXTURES).join("valid/minimal.yaml"));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("  proxy_protocol: none (no PROXY header is read)\n")
            && stdout.contains("  source: proxy (the kernel chooses)\n"),
        "{stdout}"
    );
}
