#!/usr/bin/env bash
# Build the Debian package of pin-proxy with cargo-deb.
#
# A plain `cargo deb` builds it too: what the binary prints for the package
# (man page, completions) and the unit with the packaged path are committed
# in deploy/deb/assets/ (deploy/deb/assets.sh writes them). This script
# checks first that they match the binary being packaged, and can package
# a binary built elsewhere. It ends with `cargo deb --no-build`:
# target/debian/pin-proxy_<version>_<arch>.deb.
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

"$repo/deploy/deb/assets.sh" --check "$bin" ||
    die "the package's assets do not match $bin: run deploy/deb/assets.sh and commit"

cargo deb --no-build "${deb_args[@]}"
