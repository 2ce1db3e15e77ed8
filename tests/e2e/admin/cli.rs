//! `pin-proxy status|quarantine|release` against a live instance.

use std::process::Stdio;
use std::time::{Duration, SystemTime};

use rustix::process::{Pid, Signal, kill_process};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::admin_http::{backend, request, status};
use crate::support::admin_pool::{T, two_echo};
use crate::support::cli::{cli, cli_in};
use crate::support::nodes::Node;
use crate::support::proxy::binary;
use crate::support::within;

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_command_prints_a_table_and_the_contract_json() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let answer = request(admin, "POST", "/pools/p/backends/b/quarantine?for=5m").await;
    assert_eq!(answer.status, 200);
    let addr = admin.to_string();
    let (code, out, err) = cli(&["status", "--admin", &addr]).await;
    assert_eq!(code, Some(0), "{err}");
    let row = |name: &str| -> Vec<String> {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name));
        let line = line.unwrap_or_else(|| panic!("no row for {name} in:\n{out}"));
        line.split_whitespace().map(str::to_owned).collect()
    };
    assert_eq!(row("a")[1], "healthy", "{out}");
    assert_eq!(row("b")[1], "quarantined", "{out}");
    assert!(row("b").join(" ").contains("manual until"), "{out}");
    assert!(out.contains("pool p"), "{out}");

    let (code, out, err) = cli(&["status", "--json", "--admin", &format!("http://{addr}")]).await;
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(
        keys(&v),
        ["generation", "pid", "pools", "uptime_s", "version"]
    );
    let pool = &v["pools"][0];
    assert_eq!(
        keys(pool),
        ["backends", "connections", "fall", "listen", "name", "rise"]
    );
    let b = backend(&v, "p", "b");
    assert_eq!(
        keys(b),
        [
            "addr",
            "backup",
            "bad_probes",
            "bytes_down",
            "bytes_up",
            "connections",
            "discovered_from",
            "good_probes",
            "height",
            "last_probe",
            "name",
            "node",
            "quarantine",
            "refused_by_node",
            "source_fallbacks",
            "state",
            "strikes"
        ]
    );
    assert_eq!(keys(&b["quarantine"]), ["reason", "until"]);
    assert_eq!(keys(&b["last_probe"]), ["at", "detail", "outcome"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_and_release_commands_change_the_state() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let addr = admin.to_string();
    let (code, out, err) = cli(&["quarantine", "p", "a", "--for", "1m", "--admin", &addr]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let a = backend(&status(admin).await, "p", "a").clone();
    assert_eq!(
        (a["state"].as_str(), a["quarantine"]["reason"].as_str()),
        (Some("quarantined"), Some("manual"))
    );

    let (code, out, err) = cli(&["release", "p", "a", "--admin", &addr]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let until = backend(&status(admin).await, "p", "a")["quarantine"]["until"].clone();
    let until = humantime::parse_rfc3339(until.as_str().unwrap_or("")).unwrap();
    assert!(
        until <= SystemTime::now() + Duration::from_secs(1),
        "window ended"
    );

    let (code, _, err) = cli(&["release", "p", "nope", "--admin", &addr]).await;
    assert_eq!(code, Some(1));
    assert_eq!(err.trim(), "error: pool p has no backend nope; it has a, b");
}

/// Quarantining the last usable backend: the command and the log say its
/// connections are kept (last leg) until another backend is usable; the
/// window is echoed as written (`100d`, not months).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantining_the_last_usable_backend_says_its_connections_are_kept() {
    let (proxy, admin, _nodes) = two_echo(false).await;
    let addr = admin.to_string();
    let _clients = [
        tokio::net::TcpStream::connect(proxy.addr("p"))
            .await
            .unwrap(),
        tokio::net::TcpStream::connect(proxy.addr("p"))
            .await
            .unwrap(),
    ];
    proxy
        .wait_count(|e| e["message"] == "connected", 2, T)
        .await;
    let (code, out, err) = cli(&["quarantine", "p", "a", "--for", "100d", "--admin", &addr]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("p/a quarantined for 100d until "), "{out}");
    assert!(!out.contains("last leg"), "b is usable, a drains:\n{out}");
    assert!(out.contains("\n1 connection will drain"), "{out}");
    assert!(!out.contains("replaced"), "{out}");

    let (code, out, err) = cli(&["quarantine", "p", "b", "--for", "10m", "--admin", &addr]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(
            "note: b is the last usable backend of p: its 1 connection is kept (last leg)"
        ),
        "{out}"
    );
    let event = proxy
        .wait_event(|e| e["message"] == "last_leg_kept", T)
        .await;
    assert_eq!(
        (&event["pool"], &event["backend"], &event["connections"]),
        (&"p".into(), &"b".into(), &1.into()),
        "{event}"
    );
    let kept = request(admin, "POST", "/pools/p/backends/b/quarantine?for=10m").await;
    let kept: Value = serde_json::from_str(&kept.body).unwrap();
    assert_eq!(kept["kept_connections"], 1, "{kept}");
    assert_eq!(kept["draining_connections"], 0, "{kept}");
    assert_eq!(kept["replaced"]["reason"], "manual", "{kept}");

    let (code, out, err) = cli(&["quarantine", "p", "a", "--for", "5m", "--admin", &addr]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("\nreplaced its window: manual until "),
        "{out}"
    );
    assert!(!out.contains("will drain"), "a has none left:\n{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_against_an_unreachable_instance_exit_1_with_one_line() {
    for args in [
        &["status", "--admin", "127.0.0.1:1"][..],
        &["status", "--json", "--admin", "http://127.0.0.1:1"],
        &[
            "quarantine",
            "p",
            "a",
            "--for",
            "1m",
            "--admin",
            "127.0.0.1:1",
        ],
        &["release", "p", "a", "--admin", "127.0.0.1:1"],
    ] {
        let (code, out, err) = cli(args).await;
        assert_eq!(code, Some(1), "{args:?}");
        assert_eq!(out, "", "{args:?}");
        assert_eq!(
            err, "error: cannot reach pin-proxy admin at 127.0.0.1:1: connection refused\n",
            "{args:?}"
        );
    }
}

/// The commands that talk to an instance exit 0 or 1, usage errors too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_of_the_instance_commands_exit_1() {
    for args in [
        &["quarantine", "p", "a", "--for", "soon"][..],
        &["quarantine", "p", "a"],
        &["release", "p"],
        &["status", "--bogus"],
        &["upgrade", "extra"],
    ] {
        let (code, out, err) = cli(args).await;
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert_eq!(out, "", "{args:?}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
    // Others keep clap's 2, and help is not an error.
    assert_eq!(cli(&["check", "--bogus"]).await.0, Some(2));
    assert_eq!(cli(&["quarantine", "--help"]).await.0, Some(0));
}

/// `pin-proxy status --watch args...` with its output piped: the lines it
/// printed until `until` held for them, then its exit code after a SIGINT.
async fn watch_until(
    args: &[&str],
    until: impl Fn(&[String]) -> bool,
) -> (Vec<String>, Option<i32>) {
    let mut child = tokio::process::Command::new(binary())
        .args(["status", "--watch"])
        .args(args)
        .env_remove("PIN_PROXY_CONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start pin-proxy status --watch");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    within("watch output", T, async {
        while !until(&seen) {
            let line = lines.next_line().await.unwrap();
            seen.push(line.unwrap_or_else(|| panic!("output ended: {seen:#?}")));
        }
    })
    .await;
    let pid = child.id().and_then(|id| Pid::from_raw(id as i32)).unwrap();
    kill_process(pid, Signal::INT).unwrap();
    let status = within("watch to end", T, child.wait()).await.unwrap();
    (seen, status.code())
}

fn count(lines: &[String], prefix: &str) -> usize {
    lines.iter().filter(|l| l.starts_with(prefix)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_prints_a_table_every_second_until_ctrl_c() {
    let (_proxy, admin, _nodes) = two_echo(false).await;
    let addr = admin.to_string();
    let (lines, code) = watch_until(&["--admin", &addr], |l| {
        count(l, "pool p ") == 3 && l.last().is_some_and(String::is_empty)
    })
    .await;
    assert_eq!(code, Some(0), "Ctrl-C ends it with 0");
    let text = lines.join("\n");
    assert!(
        !text.contains('\x1b'),
        "no screen clearing into a pipe: {text}"
    );
    assert_eq!(count(&lines, &format!("every 1s: {addr}")), 3, "{text}");
    // Each frame is the table, then a blank line before the next frame.
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("every 1s:") && i > 0 {
            assert_eq!(lines[i - 1], "", "{text}");
        }
    }
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().starts_with("a ") && l.contains("healthy")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_shows_a_failed_fetch_and_keeps_trying() {
    let (lines, code) = watch_until(&["--admin", "127.0.0.1:1"], |l| {
        count(l, "trying again every second") == 2
    })
    .await;
    assert_eq!(code, Some(0));
    let errors: Vec<&String> = lines.iter().filter(|l| l.starts_with("error: ")).collect();
    for e in errors {
        assert_eq!(
            e,
            "error: cannot reach pin-proxy admin at 127.0.0.1:1: connection refused"
        );
    }
    assert_eq!(count(&lines, "trying again every second"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_which_config_it_looked_for_before_the_default() {
    if std::net::TcpStream::connect(admin_cli_default()).is_ok() {
        eprintln!("skipping: something answers on {}", admin_cli_default());
        return;
    }
    // No -c: ./config.yaml, and the default address when it is missing
    // or unusable, saying why.
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = cli_in(dir.path(), &["status"]).await;
    assert_eq!(code, Some(1), "{err}");
    let mut lines = err.lines();
    assert_eq!(
        lines.next(),
        Some(
            "error: cannot reach pin-proxy admin at 127.0.0.1:9900 (the default): connection refused"
        )
    );
    let note = lines.next().unwrap_or_default();
    assert!(
        note.starts_with(
            "note: no --admin given and no config file at config.yaml, so 127.0.0.1:9900 was tried"
        ),
        "{err}"
    );
    assert!(note.contains("--admin ADDR"), "{err}");

    std::fs::write(dir.path().join("config.yaml"), "pools: [ { name: BAD } ]\n").unwrap();
    let (code, _, err) = cli_in(dir.path(), &["status"]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "note: no --admin given and the config could not be used (config.yaml: pools[0]"
        ),
        "{err}"
    );
}

/// The contract's "`--admin` defaults to the `admin.listen` of the config
/// if one is found, else `127.0.0.1:9900`", also for a config named with
/// `-c` or the environment: tried after a warning saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_named_with_c_that_gives_no_address_falls_back_to_the_default_with_a_warning() {
    if std::net::TcpStream::connect(admin_cli_default()).is_ok() {
        eprintln!("skipping: something answers on {}", admin_cli_default());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.yaml");
    let invalid = dir.path().join("bad.yaml");
    std::fs::write(&invalid, "pools: [ { name: BAD } ]\n").unwrap();
    let bare = dir.path().join("bare.yaml");
    std::fs::write(
        &bare,
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    backends: [\"127.0.0.1:9\"]\n",
    )
    .unwrap();
    let commands: [&[&str]; 5] = [
        &["status"],
        &["quarantine", "p", "a", "--for", "1m"],
        &["release", "p", "a"],
        &["reload"],
        &["upgrade"],
    ];
    let cases = [
        (
            &missing,
            format!(
                "warning: no --admin given and no config file at {}",
                missing.display()
            ),
        ),
        (
            &invalid,
            format!(
                "warning: no --admin given and the config could not be used ({}: pools[0]",
                invalid.display()
            ),
        ),
        (
            &bare,
            format!(
                "warning: no --admin given and {} has no admin.listen",
                bare.display()
            ),
        ),
    ];
    for (path, first) in &cases {
        let path = path.to_str().unwrap();
        for command in commands {
            // Before the command and after it: the same.
            for args in [
                [&["-c", path][..], command].concat(),
                [command, &["-c", path][..]].concat(),
            ] {
                let (code, out, err) = cli(&args).await;
                assert_eq!((code, out.as_str()), (Some(1), ""), "{args:?}: {err}");
                let mut lines = err.lines();
                let warning = lines.next().unwrap_or_default();
                assert!(warning.starts_with(first.as_str()), "{args:?}: {err}");
                assert!(
                    warning.ends_with("; trying 127.0.0.1:9900"),
                    "{args:?}: {err}"
                );
                assert!(
                    lines.next().unwrap_or_default().starts_with(
                        "error: cannot reach pin-proxy admin at 127.0.0.1:9900 (the default)"
                    ),
                    "{args:?}: {err}"
                );
                assert!(!err.contains("note:"), "said once, not twice: {err}");
            }
        }
    }
    // The environment names a config as -c does; set but empty, it names none.
    for (value, warned) in [(invalid.as_os_str(), true), ("".as_ref(), false)] {
        let out = tokio::process::Command::new(binary())
            .arg("status")
            .current_dir(dir.path())
            .env("PIN_PROXY_CONFIG", value)
            .output();
        let out = within("pin-proxy status", T, out).await.unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{value:?}: {err}");
        assert_eq!(err.starts_with("warning: "), warned, "{value:?}: {err}");
        assert!(
            err.contains("127.0.0.1:9900 (the default)"),
            "{value:?}: {err}"
        );
    }
}

/// `PIN_PROXY_CONFIG` set but empty (a blank `Environment=` line) is unset:
/// `./config.yaml` is read, not a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_config_variable_means_the_default_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        "pools:\n  - name: here\n    listen: 127.0.0.1:0\n    backends: [\"127.0.0.1:9\"]\n",
    )
    .unwrap();
    let out = tokio::process::Command::new(binary())
        .arg("check")
        .current_dir(dir.path())
        .env("PIN_PROXY_CONFIG", "")
        .output();
    let out = within("pin-proxy check", T, out).await.unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("here"), "{stdout}");
}

fn admin_cli_default() -> &'static str {
    "127.0.0.1:9900"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_pointed_at_something_else_says_it_is_not_the_admin_endpoint() {
    // A pool's listen port: the request goes through to an echo node,
    // which sends it back.
    let (proxy, _admin, _nodes) = two_echo(false).await;
    let pool = proxy.addr("p").to_string();
    let (code, out, err) = cli(&["status", "--admin", &pool]).await;
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: {pool} answered with something that is not HTTP"
        )),
        "{err}"
    );
    assert!(
        err.contains("that is not pin-proxy's admin endpoint (a pool's listen port?)"),
        "{err}"
    );

    // A node that closes the connection at once.
    let closer = Node::start(|s| async move { drop(s) }).await;
    let addr = closer.addr.to_string();
    let (code, _, err) = cli(&["release", "p", "a", "--admin", &addr]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("closed the connection without an answer"),
        "{err}"
    );
    assert!(err.contains("not pin-proxy's admin endpoint"), "{err}");
}
