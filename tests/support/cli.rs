//! One-shot commands of the real binary (`pin-proxy status`, `reload`,
//! ...): their exit code and output.

use std::path::Path;
use std::time::Duration;

use super::proxy::binary;
use super::within;

/// Bound on one command.
const T: Duration = Duration::from_secs(10);

/// Run `pin-proxy args...`; (exit code, stdout, stderr).
pub async fn cli(args: &[&str]) -> (Option<i32>, String, String) {
    cli_in(Path::new("."), args).await
}

/// As [`cli`], in the working directory `dir` (whose `config.yaml` is
/// the one read when no `-c` is given).
pub async fn cli_in(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(binary())
        .args(args)
        .current_dir(dir)
        .env_remove("PIN_PROXY_CONFIG")
        .env_remove("RUST_LOG")
        .output();
    let out = within("pin-proxy command", T, out).await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}
