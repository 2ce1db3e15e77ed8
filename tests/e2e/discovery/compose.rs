//! `deploy/compose/`: the compose file parses, scales `litecoind` to three
//! replicas and mounts the config that discovers them by that service name,
//! on the port the nodes listen on; and the config passes `check`.

use std::path::Path;
use std::process::Command;

use serde_yaml::Value;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/compose");

fn load(file: &str) -> Value {
    let path = Path::new(DIR).join(file);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_sequence()
        .map(|s| s.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn the_compose_file_scales_the_nodes_the_config_discovers() {
    let compose = load("compose.yaml");
    let config = load("config.yaml");
    let nodes = &compose["services"]["litecoind"];
    assert_eq!(nodes["deploy"]["replicas"], 3, "{nodes:?}");
    let proxy = &compose["services"]["pin-proxy"];
    assert!(
        strings(&proxy["volumes"]).contains(&"./config.yaml:/etc/pin-proxy/config.yaml:ro"),
        "{proxy:?}"
    );

    let entry = &config["pools"][0]["backends"][0];
    let target = entry["discover"].as_str().expect("a discover entry");
    let (host, port) = target.split_once(':').expect("host:port");
    assert!(
        compose["services"][host].is_mapping(),
        "{host} is no compose service"
    );
    let args = strings(&nodes["command"]);
    assert!(args.contains(&format!("-port={port}").as_str()), "{args:?}");

    // The subnet the nodes whitelist and the config allows is the network's.
    let subnet = compose["networks"]["ltc"]["ipam"]["config"][0]["subnet"]
        .as_str()
        .expect("a pinned subnet");
    assert!(args.contains(&format!("-whitelist=noban@{subnet}").as_str()));
    assert!(strings(&config["pools"][0]["allow"]).contains(&subnet));
    assert!(strings(&config["admin"]["allow"]).contains(&subnet));
}

#[test]
fn the_compose_config_passes_check() {
    let out = Command::new(env!("CARGO_BIN_EXE_pin-proxy"))
        .arg("check")
        .arg("-c")
        .arg(Path::new(DIR).join("config.yaml"))
        .env_remove("PIN_PROXY_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run pin-proxy check");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("state_file: /var/lib/pin-proxy/state.json"),
        "{stdout}"
    );
}
