//! `pin-proxy demo`: simulated P2P nodes, a pool and clients on loopback,
//! with a scripted failure, recovery and lag.

/// Run the demo to its end.
///
/// # Errors
/// When the demo cannot set itself up.
pub async fn run() -> anyhow::Result<()> {
    anyhow::bail!("demo: not available yet")
}
