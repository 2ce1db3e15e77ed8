//! Tests against real Litecoin peers (`litecoind`, and ElectrumX on top of
//! it; skipped when not installed unless `PIN_PROXY_REQUIRE_PEERS=1`) and
//! the lying-peer cases around them: `cargo test --test peers banned::`.

#[path = "../support/mod.rs"]
mod support;

mod banned;
mod connections;
mod connections_page;
mod electrum_liar;
mod electrumx;
mod facts;
mod liar;
mod litecoind_e2e;
mod litecoind_probe;
mod proxy_protocol;
mod refused;
mod stalled;
mod suitability;
mod transparent;
