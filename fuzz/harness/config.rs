//! Fuzz harness: config parsing and validation (`Config::parse`).
//!
//! Any text must give a `Config` or a `ConfigError`, never a panic; a config
//! that parses must also survive `pin-proxy check`'s summary and warnings.

use std::hint::black_box;
use std::path::Path;

use pin_proxy::config::{Config, describe, warnings};

/// Parse `data` (lossily decoded, so mutations that break UTF-8 still reach
/// the YAML parser) as a config file.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Config::parse(&text, Path::new("fuzz.yaml")) {
        Ok(config) => {
            black_box(describe(&config));
            black_box(warnings(&config));
        }
        Err(err) => {
            black_box(err.to_string());
            black_box((err.yaml_path(), err.line_column()));
        }
    }
}
