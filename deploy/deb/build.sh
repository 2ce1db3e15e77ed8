#!/usr/bin/env bash
# Build the Debian package of pin-proxy with cargo-deb.
#
# cargo-deb packages files, so what the binary prints is generated first,
# into target/deb-assets/ ([package.metadata.deb] in Cargo.toml names them
# there): the man page (gzipped), the bash, zsh and fish completions, and
# the unit with the packaged binary's path (/usr/bin/pin-proxy). Then
# `cargo deb --no-build` makes target/debian/pin-proxy_<version>_<arch>.deb.
#
# Usage: deploy/deb/build.sh [--bin FILE] [CARGO_DEB_ARGS...]
#   --bin FILE   package FILE instead of building (cargo build --release --locked)
#   any other argument goes to cargo deb: --output DIR, --deb-version V, --fast, ...
#   -h, --help   this text
#
# Needs cargo-deb (cargo install cargo-deb --locked) and dpkg-dev
# (dpkg-shlibdeps, for the package's Depends).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
assets=$repo/target/deb-assets
bin=""
deb_args=()

say() { echo "deb: $*"; }
die() {
    echo "deb: error: $*" >&2
    exit 1
}
usage() { sed -n '/^# Usage:/,/^# *-h, --help/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=${2:?--bin needs a file}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) deb_args+=("$1"); shift ;;
    esac
done

command -v cargo-deb >/dev/null 2>&1 ||
    die "cargo-deb not found; install it with: cargo install cargo-deb --locked"
cd "$repo"

if [ -z "$bin" ]; then
    say "building: cargo build --release --locked"
    cargo build --release --locked
    target=$(cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    bin=$target/release/pin-proxy
else
    [ -x "$bin" ] || die "not an executable: $bin"
    # cargo-deb takes binaries from <target dir>/release/ only: hand it FILE
    # there, in a target dir of its own.
    staged=$repo/target/deb-bin
    mkdir -p "$staged/release"
    cp "$bin" "$staged/release/pin-proxy.tmp"
    mv -f "$staged/release/pin-proxy.tmp" "$staged/release/pin-proxy"
    bin=$staged/release/pin-proxy
    export CARGO_TARGET_DIR=$staged
fi
[ -x "$bin" ] || die "no binary at $bin"

mkdir -p "$assets"
"$bin" man | gzip -9n >"$assets/pin-proxy.1.gz"
"$bin" completions bash >"$assets/pin-proxy.bash"
"$bin" completions zsh >"$assets/_pin-proxy"
"$bin" completions fish >"$assets/pin-proxy.fish"
sed 's#/usr/local/bin/pin-proxy#/usr/bin/pin-proxy#g' \
    "$repo/systemd/pin-proxy.service" >"$assets/pin-proxy.service"
grep -q '^ExecStart=/usr/bin/pin-proxy ' "$assets/pin-proxy.service" ||
    die "the unit's ExecStart does not name /usr/bin/pin-proxy"
say "generated the man page, completions and unit in ${assets#"$repo"/}"

cargo deb --no-build "${deb_args[@]}"
