//! Wake-ups: a watch on the deletions of the key, of its queue's entries
//! and of its shares, stopped when the listener goes.

use etcd_client::{EventType, WatchFilterType, WatchOptions};
use tokio::sync::watch;

use super::EtcdBackend;
use super::wire::{queue_prefix, shares_prefix};
use crate::backend::ReleaseListener;

impl EtcdBackend {
    /// Watches `key`, its queue and its shares for deletions from now on: a
    /// release, a waiter ahead leaving, a share given back. Deaf when no
    /// member can be watched.
    pub(super) async fn watch_releases(&self, key: &str) -> ReleaseListener {
        let what = format!("listen on `{key}`");
        let options = || WatchOptions::new().with_filters([WatchFilterType::NoPut]);
        let watched = self
            .call(&what, |mut client| {
                let key = key.to_owned();
                async move {
                    let (mut watcher, mut stream) =
                        client.watch(key.as_str(), Some(options())).await?;
                    let mut early = 0;
                    for prefix in [queue_prefix(&key), shares_prefix(&key)] {
                        watcher.watch(prefix, Some(options().with_prefix())).await?;
                    }
                    // Deletions are heard from the moment each watch is
                    // created: wait for the other two's confirmations.
                    let mut created = 0;
                    while created < 2 {
                        let Some(response) = stream.message().await? else {
                            return Err(etcd_client::Error::WatchError("watch closed".into()));
                        };
                        if response.canceled() {
                            return Err(refusal(response.cancel_reason()));
                        }
                        early += response
                            .events()
                            .iter()
                            .filter(|e| e.event_type() == EventType::Delete)
                            .count();
                        created += usize::from(response.created());
                    }
                    Ok((watcher, stream, early))
                }
            })
            .await;
        let (watcher, mut stream, early) = match watched {
            Ok(watched) => watched,
            Err(err) => {
                tracing::debug!(target: "lockmacro", %err, "etcd: cannot watch; waiting by backoff");
                return ReleaseListener::deaf();
            }
        };
        let (sender, receiver) = watch::channel(0u64);
        if early > 0 {
            sender.send_modify(|n| *n += 1);
        }
        let task = tokio::spawn(async move {
            // Dropping the watcher ends the request stream: the server
            // cancels the watch.
            let _watcher = watcher;
            while let Ok(Some(response)) = stream.message().await {
                if response.canceled() {
                    break;
                }
                if response
                    .events()
                    .iter()
                    .any(|event| event.event_type() == EventType::Delete)
                {
                    sender.send_modify(|n| *n += 1);
                }
            }
            // `sender` drops here: the listener turns deaf, and its waiter
            // tries again at once.
        });
        ReleaseListener::new(receiver, AbortOnDrop(task))
    }
}

/// A watch the member cancelled as it was created, as the error a unary
/// call would have met: a user without read permission on the key, or a
/// token that expired (then authenticating again helps).
fn refusal(reason: &str) -> etcd_client::Error {
    let status = if reason.contains("permission denied") {
        tonic::Status::permission_denied(reason)
    } else if reason.contains("auth") {
        tonic::Status::unauthenticated(reason)
    } else {
        return etcd_client::Error::WatchError(format!("watch cancelled: {reason}"));
    };
    etcd_client::Error::GRpcStatus(status)
}

/// Stops a listener's watch task when the listener goes.
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
