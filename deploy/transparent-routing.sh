#!/bin/sh
# transparent-routing.sh: the policy routing that `source: client` needs on
# the pin-proxy host, so that a node's replies to client addresses are
# delivered to pin-proxy instead of being routed towards the real clients.
#
#   transparent-routing.sh add    --iif eth1 --sport 9333   # nodes on other hosts
#   transparent-routing.sh add    --same-host               # nodes on this host
#   transparent-routing.sh remove --iif eth1 --sport 9333   # same options as add
#   transparent-routing.sh show
#
# Run as root (ip rule/route need CAP_NET_ADMIN). `add` and `remove` are
# idempotent: running either twice changes nothing the second time. Nothing
# is persistent across a reboot: run `add` from a unit ordered before
# pin-proxy (or from your network configuration's post-up hook).
#
# WHY
# With `source: client` pin-proxy connects to a node FROM THE CLIENT'S
# ADDRESS (IP_TRANSPARENT / IPV6_TRANSPARENT, a port the kernel picks), so
# the node sees each real client. The node then answers to the client's
# address, which is not an address of this host: without help the kernel
# routes (or drops) those packets and the connection never completes. The
# cure, from the kernel's tproxy documentation, is a routing table whose only
# route says "everything is local":
#
#     ip route add local 0.0.0.0/0 dev lo table 100     (and ::/0 for IPv6)
#
# and an `ip rule` that sends the node's replies, and nothing else, to it.
# The kernel then hands each reply to the transparent socket it belongs to
# (found by addresses and ports, as for any TCP segment). Which rule selects
# "the node's replies" depends on where the node runs:
#
# NODES ON OTHER HOSTS (rule on the node-facing interface)
#     add --iif eth1 --sport 9333
#   adds `ip rule add pref 100 iif eth1 ipproto tcp sport 9333 lookup 100`.
#   1. The node's route back to the client addresses must go via this host,
#      or its replies never come here. Either make this host the node's
#      default gateway (then every other packet the node sends through this
#      host is swallowed by a rule without --sport, see 2), or, better, route
#      only the replies of the port pin-proxy connects to, on the NODE host:
#          ip rule add pref 100 from 10.0.0.5 ipproto tcp sport 9333 lookup 100
#          ip route add default via 10.0.0.1 dev eth0 table 100
#      (10.0.0.5 the node, 10.0.0.1 this host on their shared link; `ip -6`
#      alike). Peers that connect to that port directly, not through
#      pin-proxy, would have their replies sent here too and lost: give
#      pin-proxy a port of its own on the node (litecoind accepts several
#      -bind=addr:port) and use that port in both rules.
#   2. Use --sport (the node port(s) pin-proxy connects to, `9333` or
#      `9333-9335`). Without it the rule takes EVERY packet arriving on the
#      interface as local: anything the node sends through this host
#      (its own outbound P2P connections, DNS) is swallowed, and, on IPv4,
#      this host answers ARP for every address asked on that link (the
#      route lookup ARP makes for the asked address matches the rule and
#      says "local"), poisoning its neighbours' caches. With `ipproto tcp sport N` only the node's TCP
#      replies match (ARP lookups carry no port, so they never do).
#   3. Nothing else is needed here: no ip_forward (the replies are delivered
#      to this host, not forwarded) and strict rp_filter is fine (a reply's
#      source, the node, is reached through the interface it came in on).
#      Anti-spoofing between this host and the node must let client
#      addresses pass (uRPF on a router; in a cloud, the instance's
#      source/destination check, e.g. AWS SrcDestCheck, disabled here).
#
# NODES ON THIS HOST (rule on loopback sources)
#     add --same-host
#   adds `ip rule add pref 100 from 127.0.0.0/8 iif lo lookup 100` and
#   `ip -6 rule add pref 100 from ::1 iif lo lookup 100`.
#   Point pin-proxy at the node's LOOPBACK address (backend 127.0.0.1:9333 or
#   [::1]:9333; the node may listen on more, e.g. -bind=0.0.0.0:9333). The
#   node's replies are then locally generated packets from 127.0.0.1 to a
#   client address. A rule on `iif lo` alone would be wrong: for ip rule,
#   `iif lo` means "generated on this host", so it would turn every packet
#   this host sends into a local one and cut it off the network. Selecting
#   the loopback source is exact: a packet from 127.0.0.0/8 (or ::1) can
#   never leave the host anyway, so the rule changes nothing else, and the
#   node's replies to peers that reach it on its public address, from that
#   address, are routed as before. This is the setup Cloudflare's mmproxy and
#   go-mmproxy document for the same problem.
#   A node reached on a non-loopback address of this host would need
#   `iif lo ipproto tcp sport 9333` instead, which also captures the node's
#   replies to peers connecting to that port directly; prefer loopback.
#
# NOT USED HERE: the kernel's tproxy example marks packets with an nftables
# `socket transparent 1` (iptables `-m socket`) rule in prerouting and routes
# `fwmark 1` to table 100. That is as exact as it gets for packets arriving
# from other hosts, but needs netfilter rules as well as routing, and comes
# too late for a same-host node's replies (their route is chosen when they
# are sent, before any prerouting mark). The rules above need only iproute2
# (`ipproto`/`sport` selectors: Linux 4.17 and iproute2 4.17 or later).
#
# IPv4 and IPv6: both by default; -4 or -6 for one. pin-proxy connects a
# client of the other family than the node from its own address (event
# `source_fallback`), and probes always come from its own address; neither
# needs these rules.

set -eu

PROG=transparent-routing.sh
TABLE=100
PREF=100
IIFS=""
SAME_HOST=0
SPORT=""
FAMILIES="4 6"
DRY_RUN=0

usage() {
    cat <<'EOF'
Usage: transparent-routing.sh add|remove|show [options]

Policy routing for pin-proxy's `source: client`: a node's replies to client
addresses are delivered to pin-proxy (see the comment at the top of this
file for when to use which option).

Commands:
  add      add the rules and the `local` route (nothing if present)
  remove   remove the rules added with the same options; the route goes
           with the last rule that looks up the table
  show     print the rules and routes of the table

Options:
  --iif IFACE      nodes on other hosts: rule on the interface their replies
                   arrive on (repeatable; not `lo`, see --same-host)
  --same-host      nodes on this host, reached on 127.0.0.1 / ::1: rule on
                   locally generated packets from a loopback address
  --sport PORT     only TCP replies from the node port(s) pin-proxy connects
                   to: 9333 or 9333-9335 (recommended with --iif)
  --table N        routing table (default 100)
  --pref N         rule priority, 1-32765 (default 100)
  -4, -6           IPv4 only, IPv6 only (default both)
  -n, --dry-run    print the ip commands instead of running them
  -h, --help       this text
EOF
}

die() {
    printf '%s: %s\n' "$PROG" "$*" >&2
    exit 2
}

is_uint() {
    case $1 in
        '' | *[!0-9]*) return 1 ;;
        *) return 0 ;;
    esac
}

# Whether $1 is a whole number from $2 to $3.
in_range() {
    is_uint "$1" || return 1
    [ "${#1}" -le 10 ] || return 1
    [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]
}

check_port() {
    in_range "$1" 1 65535 || die "bad port in --sport: $1"
}

# ip, or its command line under --dry-run.
run() {
    if [ "$DRY_RUN" = 1 ]; then
        printf 'ip %s\n' "$*"
    else
        ip "$@"
    fi
}

# The selectors of every rule, one a line, for family $1.
selectors() {
    narrow=""
    if [ -n "$SPORT" ]; then
        narrow=" ipproto tcp sport $SPORT"
    fi
    for iif in $IIFS; do
        printf 'iif %s%s\n' "$iif" "$narrow"
    done
    if [ "$SAME_HOST" = 1 ]; then
        if [ "$1" = 4 ]; then
            printf 'from 127.0.0.0/8 iif lo%s\n' "$narrow"
        else
            printf 'from ::1/128 iif lo%s\n' "$narrow"
        fi
    fi
}

# Whether the rule `pref $PREF $2 lookup $TABLE` of family $1 exists.
# `ip rule show SELECTOR` also lists rules with more selectors than asked,
# so without --sport a port-narrowed rule is not taken for ours.
rule_present() {
    # shellcheck disable=SC2086 # $2 is a list of selector words
    found=$(ip -"$1" rule show pref "$PREF" $2 lookup "$TABLE" 2>/dev/null) || return 1
    if [ -z "$SPORT" ]; then
        found=$(printf '%s\n' "$found" | grep -v ' sport ' || true)
    fi
    [ -n "$found" ]
}

everything() {
    if [ "$1" = 4 ]; then echo 0.0.0.0/0; else echo ::/0; fi
}

# Whether table $TABLE of family $1 has its `local` route.
route_present() {
    [ -n "$(ip -"$1" route show table "$TABLE" exact "$(everything "$1")" type local 2>/dev/null)" ]
}

# Whether any rule of family $1 still looks up $TABLE.
table_used() {
    [ -n "$(ip -"$1" rule show lookup "$TABLE" 2>/dev/null)" ]
}

add() {
    fam=$1
    selectors "$fam" | while read -r sel; do
        if ! rule_present "$fam" "$sel"; then
            # shellcheck disable=SC2086 # $sel is a list of selector words
            run -"$fam" rule add pref "$PREF" $sel lookup "$TABLE"
        fi
    done
    if ! route_present "$fam"; then
        run -"$fam" route replace local "$(everything "$fam")" dev lo table "$TABLE"
    fi
}

# Whether a rule of family $1 at $PREF has the selectors $2 and a port too.
narrowed_present() {
    # shellcheck disable=SC2086 # $2 is a list of selector words
    ip -"$1" rule show pref "$PREF" $2 lookup "$TABLE" 2>/dev/null | grep -q ' sport '
}

remove() {
    fam=$1
    selectors "$fam" | while read -r sel; do
        # `ip rule del` treats a selector it is not given as "any": without
        # --sport it would take the port-narrowed rule instead.
        if [ -z "$SPORT" ] && rule_present "$fam" "$sel" && narrowed_present "$fam" "$sel"; then
            die "IPv$fam rules with and without --sport for \"$sel\" at pref $PREF: remove the one with --sport first"
        fi
        if rule_present "$fam" "$sel"; then
            # shellcheck disable=SC2086 # $sel is a list of selector words
            run -"$fam" rule del pref "$PREF" $sel lookup "$TABLE"
        fi
    done
    # Under --dry-run nothing was removed: the table still looks used.
    if route_present "$fam" && ! table_used "$fam"; then
        run -"$fam" route del local "$(everything "$fam")" dev lo table "$TABLE"
    fi
}

show() {
    fam=$1
    printf '# IPv%s rules looking up table %s\n' "$fam" "$TABLE"
    ip -"$fam" rule show lookup "$TABLE" 2>/dev/null || true
    printf '# IPv%s routes of table %s\n' "$fam" "$TABLE"
    ip -"$fam" route show table "$TABLE" 2>/dev/null || true
}

[ $# -gt 0 ] || {
    usage >&2
    exit 2
}
case $1 in
    -h | --help)
        usage
        exit 0
        ;;
    add | remove | show) COMMAND=$1 ;;
    *) die "unknown command: $1 (add, remove or show; --help)" ;;
esac
shift

while [ $# -gt 0 ]; do
    case $1 in
        --iif)
            [ $# -ge 2 ] || die "--iif needs an interface"
            case $2 in
                lo) die "--iif lo would make every packet this host sends local; use --same-host" ;;
                '' | *[!A-Za-z0-9_.:@-]*) die "bad interface name: $2" ;;
            esac
            IIFS="$IIFS $2"
            shift 2
            ;;
        --same-host)
            SAME_HOST=1
            shift
            ;;
        --sport)
            [ $# -ge 2 ] || die "--sport needs a port or a range"
            case $2 in
                *-*)
                    check_port "${2%-*}"
                    check_port "${2#*-}"
                    [ "${2%-*}" -le "${2#*-}" ] || die "empty port range: $2"
                    ;;
                *) check_port "$2" ;;
            esac
            SPORT=$2
            shift 2
            ;;
        --table)
            [ $# -ge 2 ] || die "--table needs a number"
            in_range "$2" 1 4294967295 || die "bad table: $2"
            case $2 in
                253 | 254 | 255) die "table $2 is the kernel's default, main or local table" ;;
            esac
            TABLE=$2
            shift 2
            ;;
        --pref)
            [ $# -ge 2 ] || die "--pref needs a number"
            in_range "$2" 1 32765 || die "bad pref (1-32765): $2"
            PREF=$2
            shift 2
            ;;
        -4) FAMILIES=4; shift ;;
        -6) FAMILIES=6; shift ;;
        -n | --dry-run)
            DRY_RUN=1
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *) die "unknown option: $1 (--help)" ;;
    esac
done

if [ "$COMMAND" != show ] && [ -z "$IIFS" ] && [ "$SAME_HOST" = 0 ]; then
    die "$COMMAND needs --iif IFACE or --same-host"
fi
command -v ip >/dev/null 2>&1 || die "ip (iproute2) not found"
for iif in $IIFS; do
    if ! ip link show dev "$iif" >/dev/null 2>&1; then
        printf '%s: warning: no interface %s (yet); the rule applies once it exists\n' \
            "$PROG" "$iif" >&2
    fi
done

for fam in $FAMILIES; do
    "$COMMAND" "$fam"
done
