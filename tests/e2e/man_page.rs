//! The sections of `pin-proxy man` that clap cannot write: CONFIGURATION
//! names every config key (the list the parser's unit tests hold to its
//! serde shapes), SIGNALS every signal the code handles and the contract
//! names, EXIT STATUS every code of the contract's and README's command
//! tables, and ENVIRONMENT and FILES are there.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::proxy::binary;

fn page() -> String {
    let out = Command::new(binary())
        .arg("man")
        .env_remove("PIN_PROXY_CONFIG")
        .output()
        .expect("run pin-proxy man");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("UTF-8 page")
}

/// The roff of section `heading`, up to the next `.SH`.
fn section<'a>(page: &'a str, heading: &str) -> &'a str {
    let quoted = if heading.contains(' ') {
        format!(".SH \"{heading}\"\n")
    } else {
        format!(".SH {heading}\n")
    };
    let start = page
        .find(&quoted)
        .unwrap_or_else(|| panic!("no {quoted:?} in:\n{page}"));
    let body = &page[start + quoted.len()..];
    &body[..body.find("\n.SH ").map_or(body.len(), |end| end + 1)]
}

/// The tags of a section's tagged paragraphs (`.TP`, then the tag line),
/// bold words only: `SIGTERM, SIGINT` gives both.
fn tags(section: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = section.lines().collect();
    let mut found = BTreeSet::new();
    for pair in lines.windows(2).filter(|w| w[0] == ".TP") {
        for bold in pair[1].split("\\fB").skip(1) {
            let word = bold.split("\\fR").next().unwrap_or_default();
            found.insert(word.replace("\\-", "-"));
        }
    }
    found
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("read README.md")
}

/// Every exit code in the last column of README's table of commands.
fn readme_exit_codes() -> BTreeSet<String> {
    let text = readme();
    let table = text
        .split("\n### Commands\n")
        .nth(1)
        .expect("README has a Commands section");
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect();
    assert!(rows.len() >= 8, "the command table: {rows:?}");
    let mut codes = BTreeSet::new();
    for row in rows {
        let exit = row.trim_end_matches('|').rsplit('|').next().unwrap_or("");
        let words = exit.split(|c: char| !c.is_ascii_alphanumeric());
        codes.extend(
            words
                .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit()))
                .map(str::to_owned),
        );
    }
    codes
}

/// The signals the code listens for (`SignalKind::...` anywhere under src/).
fn handled_signals() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut found = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read source");
        for (at, _) in text.match_indices("SignalKind::") {
            let kind: String = text[at + "SignalKind::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let name = match kind.as_str() {
                "hangup" => "SIGHUP",
                "interrupt" => "SIGINT",
                "terminate" => "SIGTERM",
                "quit" => "SIGQUIT",
                "user_defined1" => "SIGUSR1",
                "user_defined2" => "SIGUSR2",
                "child" => "SIGCHLD",
                "pipe" => "SIGPIPE",
                "alarm" => "SIGALRM",
                "window_change" => "SIGWINCH",
                other => panic!("{}: SignalKind::{other} has no name here", file.display()),
            };
            found.insert(name.to_owned());
        }
    }
    found
}

#[test]
fn man_page_has_configuration_signals_exit_status_environment_and_files() {
    let page = page();
    for heading in [
        "CONFIGURATION",
        "SIGNALS",
        "EXIT STATUS",
        "ENVIRONMENT",
        "FILES",
    ] {
        section(&page, heading);
    }

    // Every key, in its group.
    let config = section(&page, "CONFIGURATION");
    let documented = tags(config);
    for group in pin_proxy::config::keys() {
        for (key, _) in &group.keys {
            assert!(documented.contains(*key), "{key} missing from:\n{config}");
        }
    }
    for key in [
        "admin.listen",
        "state_file",
        "health.max_lag_blocks",
        "probe_url",
    ] {
        assert!(documented.contains(key), "{key} missing from:\n{config}");
    }

    // The contract's signals (SIGHUP reload, SIGTERM/SIGINT stop, SIGUSR2
    // upgrade), every one README names and every one the code handles.
    let signals = tags(section(&page, "SIGNALS"));
    let contract = ["SIGHUP", "SIGTERM", "SIGINT", "SIGUSR2"].map(str::to_owned);
    let text = readme();
    let in_readme = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.starts_with("SIG") && w.len() > 3 && !w.starts_with("SIGNAL"))
        .map(str::to_owned);
    let handled = handled_signals();
    assert!(handled.contains("SIGUSR2"), "{handled:?}");
    for signal in contract.into_iter().chain(in_readme).chain(handled) {
        assert!(
            signals.contains(&signal),
            "{signal} not in SIGNALS: {signals:?}"
        );
    }

    // The contract's exit codes (0, 1, 2) and README's (3 too).
    let codes = tags(section(&page, "EXIT STATUS"));
    let readme_codes = readme_exit_codes();
    assert!(readme_codes.contains("3"), "{readme_codes:?}");
    for code in ["0", "1", "2"]
        .map(str::to_owned)
        .into_iter()
        .chain(readme_codes)
    {
        assert!(
            codes.contains(&code),
            "exit {code} not in EXIT STATUS: {codes:?}"
        );
    }

    let files = tags(section(&page, "FILES"));
    for file in [
        "/etc/pin-proxy/config.yaml",
        "/var/lib/pin-proxy/state.json",
        "/var/log/pin-proxy/pin-proxy.log",
        "/run/pin-proxy/pin-proxy.pid",
    ] {
        assert!(files.contains(file), "{file} not in FILES: {files:?}");
    }
    let environment = tags(section(&page, "ENVIRONMENT"));
    assert!(environment.contains("PIN_PROXY_CONFIG"), "{environment:?}");
}
