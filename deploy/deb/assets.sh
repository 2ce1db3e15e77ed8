#!/usr/bin/env bash
# Write what the binary prints for the Debian package into deploy/deb/assets/,
# where [package.metadata.deb] in Cargo.toml takes them, so a plain
# `cargo deb` packages them: the man page (cargo-deb gzips it), the bash,
# zsh and fish completions, and the unit with the packaged binary's path
# (/usr/bin/pin-proxy). Run it after changing the command line or the unit,
# and commit the result; `cargo test` fails while they are out of date, and
# `--check` says which differ without writing.
#
# Usage: deploy/deb/assets.sh [--check] [BIN]
#   BIN      the binary to ask (default: target/release/pin-proxy, built if missing)
#   --check  compare instead of writing; exit 1 naming each file that differs
#   -h, --help   this text
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
assets=$repo/deploy/deb/assets
check=0
bin=""

die() {
    echo "deb assets: error: $*" >&2
    exit 1
}
usage() { sed -n '/^# Usage:/,/^# *-h, --help/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --check) check=1; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) bin=$1; shift ;;
    esac
done
if [ -z "$bin" ]; then
    bin=$repo/target/release/pin-proxy
    [ -x "$bin" ] || (cd "$repo" && cargo build --release --locked)
fi
[ -x "$bin" ] || die "not an executable: $bin"

fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
"$bin" man >"$fresh/pin-proxy.1"
"$bin" completions bash >"$fresh/pin-proxy.bash"
"$bin" completions zsh >"$fresh/_pin-proxy"
"$bin" completions fish >"$fresh/pin-proxy.fish"
sed 's#/usr/local/bin/pin-proxy#/usr/bin/pin-proxy#g' \
    "$repo/systemd/pin-proxy.service" >"$fresh/pin-proxy.service"
grep -q '^ExecStart=/usr/bin/pin-proxy ' "$fresh/pin-proxy.service" ||
    die "the unit's ExecStart does not name /usr/bin/pin-proxy"

if [ "$check" = 1 ]; then
    stale=0
    for f in "$fresh"/*; do
        name=$(basename "$f")
        if ! cmp -s "$f" "$assets/$name"; then
            echo "deb assets: deploy/deb/assets/$name is out of date (run deploy/deb/assets.sh)" >&2
            stale=1
        fi
    done
    exit "$stale"
fi
mkdir -p "$assets"
cp "$fresh"/* "$assets/"
echo "deb assets: wrote ${assets#"$repo"/}"
