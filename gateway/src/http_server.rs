//! The one way the gateway and the mock engine serve HTTP: axum on a listener of their own,
//! `TCP_NODELAY` on every accepted connection, stopped through a oneshot.

use std::net::SocketAddr;

use axum::Router;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server started by [`serve`].
pub struct Serving {
    /// The address bound (the port the OS chose, for `:0`).
    pub address: SocketAddr,
    /// Send (or drop) to stop taking connections.
    pub stop: oneshot::Sender<()>,
    /// The server's task.
    pub task: JoinHandle<()>,
}

/// Binds `bind` and serves `router` on the current runtime; `name` labels its errors in the log.
pub async fn serve(
    bind: SocketAddr,
    router: Router,
    name: &'static str,
) -> std::io::Result<Serving> {
    let listener = TcpListener::bind(bind).await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        // Small writes (an SSE chunk, a short answer) go out at once, not after Nagle's wait
        // for the client's delayed ACK (40 ms on Linux).
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            log::error!("{name}: {e}");
        }
    });
    Ok(Serving { address, stop, task })
}
