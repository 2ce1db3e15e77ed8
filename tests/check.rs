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
