//! The admin HTTP endpoint (`admin.listen`): status, metrics, maintenance.

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::IpNet;
use crate::control::Control;

/// Serve admin requests on `listener` until `token` is cancelled.
pub async fn serve(
    listener: TcpListener,
    allow: Vec<IpNet>,
    control: Control,
    token: CancellationToken,
) {
    let _ = (listener, allow, control);
    token.cancelled().await;
}
