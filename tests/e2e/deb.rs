//! The Debian package. `deploy/deb/build.sh` (cargo-deb) builds it once per
//! test run, from the debug binary (`--bin`, `--fast`), into
//! `CARGO_TARGET_TMPDIR/deb`; an "older version" is the same package
//! repacked as 0.0.1-1. `dpkg-deb` reads its files, modes, owners, control
//! fields and maintainer scripts. `dpkg --root` with
//! `--force-script-chrootless` installs it into a staging root: the
//! maintainer scripts run on this host with `DPKG_ROOT` set, where no
//! systemd manages that root, through a fresh install, an upgrade, remove and
//! purge. With `PIN_PROXY_SYSTEMCTL` standing in for systemctl, an upgrade of
//! a running service is a live upgrade of a real instance, never a restart.
//!
//! Skipped with a notice when cargo-deb, dpkg-deb or dpkg is missing (a
//! failure under `PIN_PROXY_REQUIRE_PEERS=1`); the installs need root.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::litecoind::{find_program, peers_available};
use crate::support::nodes::{Node, refused_addr};
use crate::support::proxy::{Proxy, binary};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SCRIPTS: [&str; 3] = ["postinst", "prerm", "postrm"];
const CONF: &str = "etc/pin-proxy/config.yaml";
const UNIT: &str = "usr/lib/systemd/system/pin-proxy.service";
const WANTS: &str = "etc/systemd/system/multi-user.target.wants/pin-proxy.service";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"))
}

/// Runs `cmd` and returns its stdout; panics with both streams if it fails.
fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The built package and its repacked older version.
struct Packages {
    new: PathBuf,
    old: PathBuf,
}

/// Builds the packages on first use; `None` (after a notice) when the tools
/// are missing.
fn packages() -> Option<&'static Packages> {
    static BUILT: OnceLock<Option<Packages>> = OnceLock::new();
    BUILT
        .get_or_init(|| peers_available(&["cargo-deb", "dpkg-deb", "dpkg"]).then(build))
        .as_ref()
}

fn build() -> Packages {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deb");
    if dir.exists() {
        fs::remove_dir_all(&dir).expect("clear the package directory");
    }
    fs::create_dir_all(&dir).expect("package directory");
    ok(Command::new("bash")
        .arg(Path::new(ROOT).join("deploy/deb/build.sh"))
        .args(["--bin", binary(), "--fast", "--output"])
        .arg(&dir)
        .env_remove("CARGO_TARGET_DIR"));
    let new = fs::read_dir(&dir)
        .expect("read the package directory")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("build.sh made a .deb");

    let tree = dir.join("old");
    ok(Command::new("dpkg-deb").arg("-R").arg(&new).arg(&tree));
    let control = tree.join("DEBIAN/control");
    let fields = fs::read_to_string(&control).expect("read control");
    let older: String = fields
        .lines()
        .map(|l| {
            if l.starts_with("Version:") {
                "Version: 0.0.1-1\n".to_owned()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    fs::write(&control, older).expect("write control");
    let old = dir.join("pin-proxy_0.0.1-1.deb");
    ok(Command::new("dpkg-deb")
        .args(["-Znone", "--build"])
        .arg(&tree)
        .arg(&old));
    Packages { new, old }
}

/// `path` in the package, as `dpkg-deb -c` lists it: (mode, owner/group).
fn listed<'a>(listing: &'a str, path: &str) -> Option<(&'a str, &'a str)> {
    listing.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.len() >= 6 && cols[5] == path).then(|| (cols[0], cols[1]))
    })
}

#[test]
fn package_holds_every_file_with_its_mode_and_owner() {
    let Some(pkgs) = packages() else { return };
    let listing = ok(Command::new("dpkg-deb").arg("-c").arg(&pkgs.new));
    for (path, mode) in [
        ("./usr/bin/pin-proxy", "-rwxr-xr-x"),
        ("./usr/lib/systemd/system/pin-proxy.service", "-rw-r--r--"),
        ("./etc/pin-proxy/config.yaml", "-rw-r-----"),
        ("./usr/lib/sysusers.d/pin-proxy.conf", "-rw-r--r--"),
        ("./usr/share/pin-proxy/transparent-routing.sh", "-rwxr-xr-x"),
        ("./usr/share/man/man1/pin-proxy.1.gz", "-rw-r--r--"),
        (
            "./usr/share/bash-completion/completions/pin-proxy",
            "-rw-r--r--",
        ),
        (
            "./usr/share/zsh/vendor-completions/_pin-proxy",
            "-rw-r--r--",
        ),
        (
            "./usr/share/fish/vendor_completions.d/pin-proxy.fish",
            "-rw-r--r--",
        ),
        (
            "./usr/share/doc/pin-proxy/examples/config.litecoin-p2p.yaml",
            "-rw-r--r--",
        ),
        (
            "./usr/share/doc/pin-proxy/examples/config.blockbook.yaml",
            "-rw-r--r--",
        ),
        (
            "./usr/share/doc/pin-proxy/examples/config.electrum.yaml",
            "-rw-r--r--",
        ),
    ] {
        let found = listed(&listing, path);
        assert_eq!(found, Some((mode, "0/0")), "{path} in:\n{listing}");
    }

    let conffiles = ok(Command::new("dpkg-deb")
        .arg("-I")
        .arg(&pkgs.new)
        .arg("conffiles"));
    assert_eq!(conffiles, "/etc/pin-proxy/config.yaml\n");
    let depends = ok(Command::new("dpkg-deb")
        .arg("-f")
        .arg(&pkgs.new)
        .arg("Depends"));
    assert!(depends.contains("libc6"), "{depends}");
    assert!(depends.contains("systemd-sysusers | adduser"), "{depends}");
    assert!(!depends.contains("ssl"), "TLS is rustls: {depends}");
    let version = ok(Command::new("dpkg-deb")
        .arg("-f")
        .arg(&pkgs.new)
        .arg("Version"));
    assert_eq!(version.trim(), format!("{}-1", env!("CARGO_PKG_VERSION")));

    let dir = tempfile::tempdir().expect("temp dir");
    let files = dir.path();
    ok(Command::new("dpkg-deb").arg("-x").arg(&pkgs.new).arg(files));
    let unit = fs::read_to_string(files.join(UNIT)).expect("read the unit");
    assert!(
        unit.contains("\nExecStart=/usr/bin/pin-proxy run -c /etc/pin-proxy/config.yaml\n"),
        "{unit}"
    );
    assert!(!unit.contains("/usr/local/bin"), "{unit}");
    let example = fs::read(Path::new(ROOT).join("deploy/config.litecoin-p2p.yaml"))
        .expect("read the example config");
    let conf = fs::read(files.join(CONF)).expect("read the packaged config");
    assert_eq!(conf, example);
    let conf = text(&conf);
    assert!(conf.contains("\nstate_file: /var/lib/pin-proxy/state.json\n"));
    assert!(conf.contains("\nlog:\n") && conf.contains("# file: /var/log/pin-proxy/"));
    let sysusers = fs::read_to_string(files.join("usr/lib/sysusers.d/pin-proxy.conf"))
        .expect("read sysusers.d");
    assert!(
        sysusers
            .lines()
            .any(|l| l.starts_with("u ") && l.contains(" pin-proxy ")),
        "{sysusers}"
    );
    let man = ok(Command::new("gzip")
        .arg("-dc")
        .arg(files.join("usr/share/man/man1/pin-proxy.1.gz")));
    assert!(man.contains(".TH pin-proxy 1") && man.contains(".SH COMMANDS"));
    let bash = fs::read_to_string(files.join("usr/share/bash-completion/completions/pin-proxy"))
        .expect("read the bash completion");
    assert!(bash.contains("complete -F") && bash.contains("upgrade"));

    // The maintainer scripts are ours, byte for byte: cargo-deb added no
    // snippet (none of them could restart the service).
    let control = files.join("control");
    ok(Command::new("dpkg-deb")
        .arg("-e")
        .arg(&pkgs.new)
        .arg(&control));
    for script in SCRIPTS {
        let shipped = control.join(script);
        assert_eq!(
            fs::read(&shipped).expect("read the shipped script"),
            fs::read(Path::new(ROOT).join("deploy/deb").join(script)).expect("read the script"),
            "{script}"
        );
        assert_eq!(fs::metadata(&shipped).expect("stat").mode() & 0o777, 0o755);
    }
}

#[test]
fn maintainer_scripts_pass_sh_n_and_shellcheck() {
    let dir = Path::new(ROOT).join("deploy/deb");
    for script in SCRIPTS {
        let path = dir.join(script);
        ok(Command::new("sh").arg("-n").arg(&path));
        assert!(
            fs::read_to_string(&path)
                .expect("read script")
                .starts_with("#!/bin/sh\n"),
            "{script} must run under any /bin/sh"
        );
    }
    for tool in ["build.sh", "assets.sh"] {
        ok(Command::new("bash").arg("-n").arg(dir.join(tool)));
    }
    if !peers_available(&["shellcheck"]) {
        return;
    }
    for script in SCRIPTS {
        ok(Command::new("shellcheck")
            .args(["--shell=sh", "--severity=style"])
            .arg(dir.join(script)));
    }
    for tool in ["build.sh", "assets.sh"] {
        ok(Command::new("shellcheck").arg(dir.join(tool)));
    }
    // Packaged too, and run as root on operators' hosts.
    ok(Command::new("shellcheck")
        .args(["--severity=style"])
        .arg(Path::new(ROOT).join("deploy/transparent-routing.sh")));
}

/// Whether this runs as root, which the installs need (CI does); a notice
/// when not.
fn as_root() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("notice: not root; skipping the package install tests");
    }
    root
}

/// An empty staging root with a dpkg database.
fn staging_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp dir");
    for dir in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        fs::create_dir_all(root.path().join(dir)).expect("dpkg database dirs");
    }
    fs::write(root.path().join("var/lib/dpkg/status"), "").expect("dpkg status");
    root
}

/// `dpkg ARGS` on the staging root; the maintainer scripts run on this
/// host with `DPKG_ROOT` set. `--force-depends`: the root's database knows
/// no libc6. `systemctl` stands in for systemctl if given.
fn dpkg(root: &Path, systemctl: Option<&Path>, args: &[&Path]) -> (String, String) {
    let mut cmd = Command::new("dpkg");
    cmd.arg(format!("--root={}", root.display()))
        .args([
            "--force-script-chrootless",
            "--force-not-root",
            "--force-bad-path",
            "--force-depends",
            "--log=/dev/null",
        ])
        .args(args)
        .env_remove("PIN_PROXY_SYSTEMCTL")
        .env_remove("DPKG_ROOT");
    if let Some(fake) = systemctl {
        cmd.env("PIN_PROXY_SYSTEMCTL", fake);
    }
    let out = run(&mut cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "dpkg {args:?} failed:\n{stdout}{stderr}"
    );
    (stdout, stderr)
}

/// The package's status and version in the staging root's database, or
/// empty when dpkg does not know it.
fn installed(root: &Path) -> String {
    let out = run(Command::new("dpkg-query")
        .arg(format!(
            "--admindir={}",
            root.join("var/lib/dpkg").display()
        ))
        .args(["-W", "-f=${Status} ${Version}", "pin-proxy"]));
    text(&out.stdout)
}

/// (mode, uid, gid) of `rel` under `root`.
fn stat(root: &Path, rel: &str) -> (u32, u32, u32) {
    let m = fs::metadata(root.join(rel)).unwrap_or_else(|e| panic!("stat {rel}: {e}"));
    (m.permissions().mode() & 0o7777, m.uid(), m.gid())
}

/// The uid and gid of `pin-proxy` in the root's own files.
fn ids(root: &Path) -> (u32, u32) {
    let find = |file: &str| -> Vec<String> {
        let db = fs::read_to_string(root.join("etc").join(file)).expect("read user database");
        db.lines()
            .find(|l| l.starts_with("pin-proxy:"))
            .unwrap_or_else(|| panic!("no pin-proxy in /etc/{file}:\n{db}"))
            .split(':')
            .map(str::to_owned)
            .collect()
    };
    let user = find("passwd");
    assert_eq!(
        &user[5..],
        ["/nonexistent", "/usr/sbin/nologin"],
        "{user:?}"
    );
    let uid: u32 = user[2].parse().expect("uid");
    assert!(uid > 0 && uid < 1000, "a system uid: {uid}");
    (uid, find("group")[2].parse().expect("gid"))
}

/// What a configured package leaves, whatever came before.
fn assert_configured(root: &Path) {
    let (uid, gid) = ids(root);
    assert_eq!(stat(root, "usr/bin/pin-proxy"), (0o755, 0, 0));
    assert_eq!(
        stat(root, CONF),
        (0o640, 0, gid),
        "read by the service's group"
    );
    assert_eq!(stat(root, "etc/pin-proxy"), (0o750, 0, gid));
    for dir in ["var/lib/pin-proxy", "var/log/pin-proxy"] {
        assert_eq!(stat(root, dir), (0o750, uid, gid), "{dir}");
    }
    if find_program("deb-systemd-helper").is_some() {
        let link = fs::read_link(root.join(WANTS)).expect("the unit is enabled");
        assert_eq!(link, Path::new("/").join(UNIT));
    }
}

#[test]
fn install_upgrade_remove_and_purge_in_a_staging_root_without_systemd() {
    let Some(pkgs) = packages() else { return };
    if !as_root() {
        return;
    }
    let dir = staging_root();
    let root = dir.path();

    // A first install: the user, its directories, the unit enabled, nothing
    // started (the config names placeholder nodes).
    let (out, _) = dpkg(root, None, &[Path::new("-i"), &pkgs.old]);
    assert!(out.contains("created the system user pin-proxy"), "{out}");
    assert!(out.contains("is the example config"), "{out}");
    assert!(out.contains("systemd is not running here"), "{out}");
    assert!(out.contains("not started"), "{out}");
    assert_eq!(installed(root), "install ok installed 0.0.1-1");
    assert_configured(root);
    let summary = ok(Command::new(root.join("usr/bin/pin-proxy"))
        .arg("check")
        .arg("-c")
        .arg(root.join(CONF)));
    assert!(
        summary.contains("state_file: /var/lib/pin-proxy/state.json"),
        "{summary}"
    );

    // The operator edits the config; the service wrote its state.
    let edited = format!(
        "{}# edited by the operator\n",
        fs::read_to_string(root.join(CONF)).expect("read config")
    );
    fs::write(root.join(CONF), &edited).expect("edit config");
    let state = root.join("var/lib/pin-proxy/state.json");
    fs::write(&state, "{}").expect("write state");

    // An upgrade with no service running: files replaced, config and state
    // kept, nothing to upgrade live.
    let (out, _) = dpkg(root, None, &[Path::new("-i"), &pkgs.new]);
    assert!(out.contains("no running service to upgrade"), "{out}");
    assert!(!out.contains("created the system user"), "{out}");
    assert_eq!(
        installed(root),
        format!("install ok installed {}-1", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(fs::read_to_string(root.join(CONF)).expect("reread"), edited);
    assert!(state.exists());
    assert_configured(root);

    // Remove: the program and unit go, the config, state and user stay.
    dpkg(root, None, &[Path::new("-r"), Path::new("pin-proxy")]);
    assert!(installed(root).starts_with("deinstall ok config-files"));
    assert!(!root.join("usr/bin/pin-proxy").exists());
    assert!(!root.join(UNIT).exists());
    assert_eq!(fs::read_to_string(root.join(CONF)).expect("kept"), edited);
    assert!(state.exists());

    // Purge: config, state and logs go, and the unit's enablement; the
    // user stays (files elsewhere may be its).
    dpkg(root, None, &[Path::new("-P"), Path::new("pin-proxy")]);
    assert_eq!(installed(root), "");
    for gone in [
        "etc/pin-proxy",
        "var/lib/pin-proxy",
        "var/log/pin-proxy",
        WANTS,
    ] {
        assert!(
            fs::symlink_metadata(root.join(gone)).is_err(),
            "{gone} left after purge"
        );
    }
    ids(root);
}

/// A stand-in for systemctl that records its calls and says the service is
/// active while the file `active` beside it exists.
fn fake_systemctl(dir: &Path) -> (PathBuf, PathBuf) {
    let calls = dir.join("calls");
    let fake = dir.join("systemctl");
    let active = dir.join("active");
    fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\n\
             if [ \"$1\" = is-active ]; then [ -e '{}' ] || exit 3; fi\nexit 0\n",
            calls.display(),
            active.display()
        ),
    )
    .expect("write fake systemctl");
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).expect("chmod");
    (fake, calls)
}

/// A package upgrade while the service runs hands every connection to the
/// new process (`pin-proxy upgrade` on the installed config's admin
/// address), and never stops, starts or restarts the unit. A live upgrade
/// that fails leaves the old process serving and the package configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_upgrade_of_a_running_service_is_a_live_upgrade() {
    let Some(pkgs) = packages() else { return };
    if !as_root() {
        return;
    }
    let dir = staging_root();
    let root = dir.path().to_owned();
    let tools = tempfile::tempdir().expect("temp dir");
    let (fake, calls) = fake_systemctl(tools.path());
    let install = |deb: &Path| {
        let (root, fake, deb) = (root.clone(), fake.clone(), deb.to_owned());
        tokio::task::spawn_blocking(move || dpkg(&root, Some(&fake), &[Path::new("-i"), &deb]))
    };
    let (out, _) = install(&pkgs.old).await.expect("dpkg task");
    assert!(out.contains("enabled, not started"), "{out}");

    // The service runs, on the installed config (its admin address).
    let node = Node::echo().await;
    let admin = refused_addr();
    let yaml = format!(
        "admin: {{ listen: \"{admin}\" }}\npools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
         backends: [\"{}\"]\n",
        node.addr
    );
    fs::write(root.join(CONF), &yaml).expect("install the config");
    let proxy = Proxy::start(&yaml).await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr("p"))
        .await
        .expect("connect a client");
    fs::write(tools.path().join("active"), "").expect("mark active");
    fs::remove_file(&calls).ok();

    let (out, err) = install(&pkgs.new).await.expect("dpkg task");
    assert!(out.contains("live upgrade done"), "{out}{err}");
    let done = proxy
        .wait_event(|e| e["message"] == "upgraded", Duration::from_secs(30))
        .await;
    assert_eq!(done["generation"], 1);
    assert_eq!(done["connections"], 1);
    let made = fs::read_to_string(&calls).unwrap_or_default();
    for call in made.lines() {
        assert!(
            [
                "daemon-reload",
                "is-active --quiet pin-proxy.service",
                "enable pin-proxy.service"
            ]
            .contains(&call),
            "unexpected systemctl call {call:?} in:\n{made}"
        );
    }
    client.write_all(b"still here").await.expect("write");
    let mut got = [0u8; 10];
    client.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"still here");

    // The admin endpoint cannot be reached: the upgrade fails, says so, and
    // the package is configured all the same.
    let unreachable = yaml.replace(&admin.to_string(), &refused_addr().to_string());
    fs::write(root.join(CONF), unreachable).expect("rewrite the config");
    let (out, err) = install(&pkgs.new).await.expect("dpkg task");
    assert!(err.contains("the live upgrade failed"), "{out}{err}");
    assert!(err.contains("the old process still serves"), "{err}");
    assert!(installed(&root).starts_with("install ok installed"));
    client.write_all(b"and still").await.expect("write");
    let mut got = [0u8; 9];
    client.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"and still");
}
