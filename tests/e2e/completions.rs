//! `pin-proxy completions bash|zsh|fish` and `pin-proxy man`: each script
//! names every command the binary's `--help` lists, bash loads its script,
//! and the man page is roff with every command as a subsection, which `man`
//! renders when it is installed.

use std::process::{Command, Output};

use crate::support::litecoind::find_program;
use crate::support::proxy::binary;

fn run(args: &[&str]) -> Output {
    let out = Command::new(binary())
        .args(args)
        .env_remove("PIN_PROXY_CONFIG")
        .output()
        .unwrap_or_else(|e| panic!("run pin-proxy {args:?}: {e}"));
    assert!(
        out.status.success(),
        "pin-proxy {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(run(args).stdout).expect("UTF-8 output")
}

/// The commands `pin-proxy --help` lists, `help` aside; at least the ones
/// the contract names, so a change of the help layout cannot make the
/// checks below vacuous.
fn commands() -> Vec<String> {
    let help = stdout(&["--help"]);
    let list: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect();
    for expected in [
        "run",
        "check",
        "status",
        "quarantine",
        "release",
        "upgrade",
        "completions",
        "man",
    ] {
        assert!(
            list.iter().any(|c| c == expected),
            "{expected} missing from --help: {list:?}\n{help}"
        );
    }
    list
}

#[test]
fn completion_scripts_name_every_command() {
    let commands = commands();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef pin-proxy"),
        ("fish", "complete -c pin-proxy"),
    ] {
        let script = stdout(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for command in &commands {
            assert!(
                script.contains(command.as_str()),
                "the {shell} script does not mention {command}"
            );
        }
    }
    let refused = Command::new(binary())
        .args(["completions", "powershell"])
        .output()
        .expect("run pin-proxy");
    assert_eq!(
        refused.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// The bash completion script, written to a file of a directory that
/// lives as long as the first value; `None` (after a notice) without bash.
fn bash_script() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    if find_program("bash").is_none() {
        eprintln!("notice: bash not found; skipping the bash completion test");
        return None;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("pin-proxy.bash");
    std::fs::write(&script, run(&["completions", "bash"]).stdout).expect("write script");
    Some((dir, script))
}

/// The bash script parses and registers a completion for `pin-proxy`.
#[test]
fn bash_loads_its_completion_script() {
    let Some((_dir, script)) = bash_script() else {
        return;
    };
    let out = Command::new("bash")
        .arg("-c")
        .arg("source \"$1\" && complete -p pin-proxy")
        .arg("bash")
        .arg(&script)
        .output()
        .expect("run bash");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("pin-proxy"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What bash offers for `words` (the last one being completed) with the
/// script loaded.
fn bash_offers(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let line = format!(
        "source \"$1\"; COMP_WORDS=({}); COMP_CWORD={}; _pin__proxy pin-proxy \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        words.len() - 1
    );
    let out = Command::new("bash")
        .args(["-c", &line, "bash"])
        .arg(script)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Completion goes on after a subcommand: its flags, and `completions`'
/// shells (the generator's hyphenated-name bug is worked around).
#[test]
fn bash_completes_each_subcommands_flags() {
    let Some((_dir, script)) = bash_script() else {
        return;
    };
    assert!(bash_offers(&script, &["pin-proxy", "st"]).contains(&"status".to_owned()));
    let status = bash_offers(&script, &["pin-proxy", "status", "--"]);
    for flag in ["--json", "--watch", "--admin"] {
        assert!(
            status.contains(&flag.to_owned()),
            "{flag} not in {status:?}"
        );
    }
    let quarantine = bash_offers(&script, &["pin-proxy", "quarantine", "--f"]);
    assert_eq!(quarantine, ["--for"]);
    let shells = bash_offers(&script, &["pin-proxy", "completions", ""]);
    for shell in ["bash", "zsh", "fish"] {
        assert!(
            shells.contains(&shell.to_owned()),
            "{shell} not in {shells:?}"
        );
    }
}

#[test]
fn man_page_is_roff_with_every_command() {
    let page = stdout(&["man"]);
    for macro_line in [
        ".TH pin-proxy 1",
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH COMMANDS",
    ] {
        assert!(page.contains(macro_line), "no {macro_line:?} in:\n{page}");
    }
    for command in commands() {
        assert!(
            page.contains(&format!(".SS \"pin-proxy {command}\"")),
            "no subsection for {command}:\n{page}"
        );
    }
    // Every command is here: no pointer to a page that is not shipped.
    assert!(!page.contains("pin\\-proxy\\-run(1)"), "{page}");
}

/// `man -l` formats the page without a warning.
#[test]
fn man_renders_the_page() {
    if find_program("man").is_none() {
        eprintln!("notice: man not found; skipping the man page rendering test");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("pin-proxy.1");
    std::fs::write(&file, run(&["man"]).stdout).expect("write page");
    let out = Command::new("man")
        .arg("--warnings")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
        .expect("run man");
    let (text, warnings) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "man failed: {warnings}");
    assert!(warnings.trim().is_empty(), "man warned:\n{warnings}");
    for heading in ["NAME", "SYNOPSIS", "COMMANDS", "pin-proxy upgrade"] {
        assert!(text.contains(heading), "no {heading} in:\n{text}");
    }
}

/// What the Debian package ships from `deploy/deb/assets/` (so a plain
/// `cargo deb` builds it) is what this binary prints, and the unit is
/// systemd/'s with the packaged path: a changed command line or unit
/// without `deploy/deb/assets.sh` fails here.
#[test]
fn the_packaged_assets_are_what_the_binary_prints() {
    let assets = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/deb/assets");
    let read = |name: &str| {
        std::fs::read_to_string(assets.join(name))
            .unwrap_or_else(|e| panic!("read deploy/deb/assets/{name}: {e}"))
    };
    let printed = [
        (&["man"][..], "pin-proxy.1"),
        (&["completions", "bash"], "pin-proxy.bash"),
        (&["completions", "zsh"], "_pin-proxy"),
        (&["completions", "fish"], "pin-proxy.fish"),
    ];
    for (args, name) in printed {
        assert!(
            stdout(args) == read(name),
            "deploy/deb/assets/{name} is not what `pin-proxy {}` prints: run deploy/deb/assets.sh",
            args.join(" ")
        );
    }
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/pin-proxy.service"),
    )
    .expect("read the unit");
    let packaged = unit.replace("/usr/local/bin/pin-proxy", "/usr/bin/pin-proxy");
    assert!(packaged.contains("\nExecStart=/usr/bin/pin-proxy "));
    assert!(
        packaged == read("pin-proxy.service"),
        "deploy/deb/assets/pin-proxy.service is not systemd/'s unit: run deploy/deb/assets.sh"
    );
}
