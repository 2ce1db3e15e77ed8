//! Backends from DNS, through the real binary and a real dnsmasq
//! (`support::dnsmasq`): members follow the answers and leave only after
//! `hold`, a DNS outage or a failed answer changes nothing, SRV priorities
//! make backups, static and discovered backends share a pool, reload and
//! live upgrade keep discovered members, and `check` refuses bad discover
//! values; `compose` checks the compose example. `dnsmasq` checks the test
//! server itself.
//!
//! Every test returns early (after a notice) when dnsmasq is not
//! installed. Waits are on the proxy's events, on `/status`, or on
//! dnsmasq's count of the proxy's lookups, each bounded by
//! `support::discovery::T`. Their harness is `support::discovery`.

mod check;
mod compose;
mod dnsmasq;
mod flap;
mod members;
mod mixed;
mod outage;
mod probes;
mod reload;
mod srv;
mod truncated;
mod upgrade;
