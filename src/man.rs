//! `pin-proxy man`: the man page. clap_mangen renders what the command
//! line declares (synopsis, options, every command); the sections it
//! cannot know are written here with its `roff` builder: CONFIGURATION
//! (every key, from the parser's own list), SIGNALS, EXIT STATUS,
//! ENVIRONMENT and FILES.

use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, roman};
use pin_proxy::config;

use super::EXIT_BIND;

/// The page, in roff. One page for every command: each command's
/// synopsis, description and options are a subsection of COMMANDS, where
/// `Man::render` would point to `pin-proxy-<command>(1)` pages that are
/// not shipped.
pub fn page(cli: clap::Command) -> std::io::Result<Vec<u8>> {
    let mut cli = cli.disable_help_subcommand(true);
    cli.build();
    let man = Man::new(cli.clone());
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    page.extend_from_slice(b".SH COMMANDS\n");
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_bin_name().unwrap_or_else(|| sub.get_name());
        page.extend_from_slice(format!(".SS \"{name}\"\n").as_bytes());
        let sub = Man::new(sub.clone());
        let mut section = Vec::new();
        sub.render_synopsis_section(&mut section)?;
        section.extend_from_slice(b".PP\n");
        sub.render_description_section(&mut section)?;
        sub.render_options_section(&mut section)?;
        // Their own `.SH` headings would end COMMANDS.
        nest(&mut page, &section, &[b".SH "]);
    }
    let mut own = Roff::new();
    configuration(&mut own);
    signals(&mut own);
    exit_status(&mut own);
    environment(&mut own);
    files(&mut own);
    let mut section = Vec::new();
    own.to_writer(&mut section)?;
    nest(&mut page, &section, &[]);
    man.render_version_section(&mut page)?;
    Ok(page)
}

/// Append `section`'s lines to `page`, but those starting with one of
/// `drop` and the string definitions each rendering starts with, which are
/// in the page already.
fn nest(page: &mut Vec<u8>, section: &[u8], drop: &[&[u8]]) {
    let kept = section.split_inclusive(|b| *b == b'\n').filter(|line| {
        ![&b".ie "[..], b".el "]
            .iter()
            .chain(drop)
            .any(|p| line.starts_with(p))
    });
    page.extend(kept.flatten());
}

/// A tagged paragraph: `tag` on its own line, `text` indented below.
fn item(roff: &mut Roff, tag: impl Into<Vec<Inline>>, text: &str) {
    roff.control("TP", []).text(tag).text([roman(text)]);
}

fn paragraph(roff: &mut Roff, text: &str) {
    roff.control("PP", []).text([roman(text)]);
}

fn configuration(roff: &mut Roff) {
    roff.control("SH", ["CONFIGURATION"]);
    paragraph(
        roff,
        "The config file is YAML (see FILES). Durations are humantime strings \
         (500ms, 10s, 5m). Unknown keys are errors. A backend is host:port or a \
         mapping; its name defaults to its addr. pin-proxy check prints every \
         pool's effective settings, defaults applied.",
    );
    for group in config::keys() {
        roff.control("SS", [capitalized(group.place).as_str()]);
        for (key, about) in &group.keys {
            item(roff, [bold(*key)], about);
        }
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

fn signals(roff: &mut Roff) {
    roff.control("SH", ["SIGNALS"]);
    item(
        roff,
        [bold("SIGHUP")],
        "Re-read the config file and apply it, as pin-proxy reload does: pools and \
         backends are added and removed, connections to backends that remain are \
         left alone, quarantines and strikes are kept. An invalid file is refused \
         (event reload_failed) and the old config keeps running. admin, log, \
         state_file and pid_file apply at the next start only. systemctl reload runs \
         pin-proxy check, then sends SIGHUP.",
    );
    item(
        roff,
        [bold("SIGTERM"), roman(", "), bold("SIGINT")],
        "Stop: stop accepting, close every connection (closed reason shutdown), \
         wait at most 2 s for them, exit 0. One that comes while a live upgrade runs \
         is passed on to the new process once it serves (event stop_passed_on), so \
         the service stops.",
    );
    item(
        roff,
        [bold("SIGUSR2")],
        "Live upgrade, as pin-proxy upgrade does: start the binary at the path this \
         process was started from, with the same arguments, and hand it every \
         listener and connection; this process exits 0 once the new one serves \
         (event upgraded). If the upgrade fails (event upgrade_failed), this process \
         serves on unchanged. Another one while an upgrade runs is refused and \
         logged.",
    );
}

fn exit_status(roff: &mut Roff) {
    roff.control("SH", ["EXIT STATUS"]);
    let codes = [
        (
            0,
            "Success: run stopped cleanly (SIGTERM, SIGINT), check found the config \
             valid, a command sent to a running instance was done; also --help and \
             --version.",
        ),
        (
            1,
            "A failure: status, quarantine, release, connections, close, shed, reload \
             or upgrade could not reach the instance, or it refused or failed the \
             command (close: any connection unknown; a usage error of these commands \
             exits 1 too); run stopped on an error not listed \
             below, such as a listen address that is not on the host yet (systemd \
             retries it).",
        ),
        (
            2,
            "run or check: the config is invalid, or run cannot open log.file. Any \
             other command: a usage error.",
        ),
        (
            EXIT_BIND,
            "run: a listen address is in use, or its port needs a privilege the \
             process lacks, or a pool's source: client needs CAP_NET_ADMIN or \
             CAP_NET_RAW, which the process lacks. The unit does not restart on 2 \
             or 3 (RestartPreventExitStatus=2 3).",
        ),
    ];
    for (code, text) in codes {
        item(roff, [bold(code.to_string())], text);
    }
}

fn environment(roff: &mut Roff) {
    roff.control("SH", ["ENVIRONMENT"]);
    item(
        roff,
        [bold("PIN_PROXY_CONFIG")],
        "The config file, when -c does not name one.",
    );
    item(
        roff,
        [bold("RUST_LOG")],
        "Overrides log.level (tracing EnvFilter syntax).",
    );
}

fn files(roff: &mut Roff) {
    roff.control("SH", ["FILES"]);
    let files = [
        (
            "./config.yaml",
            "The config file when neither -c nor PIN_PROXY_CONFIG names one.",
        ),
        (
            "/etc/pin-proxy/config.yaml",
            "The config of the installed service (the unit runs pin-proxy run -c \
             with it); a conffile of the Debian package, mode 0640 root:pin-proxy.",
        ),
        (
            "/var/lib/pin-proxy/state.json",
            "state_file in the shipped configs (the unit's StateDirectory): \
             quarantine windows and strikes, rewritten whole at most once a second \
             after a change and read at start-up.",
        ),
        (
            "/var/log/pin-proxy/pin-proxy.log",
            "log.file, where the shipped configs suggest it (the unit's \
             LogsDirectory); without log.file, lines go to stdout (the journal). At \
             the first line of a new day (UTC) it is renamed \
             pin-proxy.log.YYYY-MM-DD and a new one is started.",
        ),
        (
            "/run/pin-proxy/pin-proxy.pid",
            "pid_file as the README suggests it for supervisors other than systemd \
             (none by default): the pid of the serving process, rewritten by the new \
             process of a live upgrade, removed on a clean stop.",
        ),
        (
            "/usr/lib/systemd/system/pin-proxy.service",
            "The unit of the Debian package (deploy/install.sh installs it as \
             /etc/systemd/system/pin-proxy.service).",
        ),
    ];
    for (path, text) in files {
        item(roff, [bold(path)], text);
    }
}
