//! The signal a service is stopped with, for its graceful shutdown.

use std::future::Future;

/// Completes when the process is asked to stop: on Unix at SIGTERM, which
/// container runtimes, systemd and Kubernetes send, or at SIGINT (Ctrl-C);
/// elsewhere at Ctrl-C.
///
/// Waiting on Ctrl-C alone is not enough in production: a deploy sends
/// SIGTERM, the process ends at once, and every lock it held stays held for
/// its whole ttl, keeping the next instance out. Give this to the server's
/// graceful shutdown, then call [`Locker::shutdown`](crate::Locker::shutdown).
///
/// The handlers are installed when this is called, within a Tokio runtime:
/// a signal that comes after the call is not missed, however late the
/// future is first polled. Once installed, the signals no longer end the
/// process by themselves. If a handler cannot be installed, a warning is
/// logged and the other signal is still waited for.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use lockmacro_runtime::{Locker, shutdown_signal};
///
/// let locker = Locker::connect("redis://127.0.0.1/").await?;
/// let stop = shutdown_signal();
/// // axum::serve(listener, router).with_graceful_shutdown(stop).await?;
/// stop.await;
/// let report = locker.shutdown().await;
/// println!("{} given back, {} left to expire", report.given_back, report.left_to_expire);
/// # Ok(()) }
/// ```
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let installed = |kind: SignalKind, name: &'static str| match signal(kind) {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!(target: "lockmacro", signal = name, %error, "cannot wait for the signal");
                None
            }
        };
        let mut terminate = installed(SignalKind::terminate(), "SIGTERM");
        let mut interrupt = installed(SignalKind::interrupt(), "SIGINT");
        async move {
            let terminated = async {
                match &mut terminate {
                    Some(stream) => stream.recv().await,
                    None => std::future::pending().await,
                }
            };
            let interrupted = async {
                match &mut interrupt {
                    Some(stream) => stream.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = terminated => tracing::info!(target: "lockmacro", "SIGTERM: shutting down"),
                _ = interrupted => tracing::info!(target: "lockmacro", "SIGINT: shutting down"),
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            if let Err(error) = tokio::signal::ctrl_c().await {
                tracing::warn!(target: "lockmacro", %error, "cannot wait for Ctrl-C");
                std::future::pending::<()>().await;
            }
        }
    }
}
