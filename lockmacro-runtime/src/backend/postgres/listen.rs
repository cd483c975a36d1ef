//! Wake-ups: one `LISTEN` connection per backend, shared by all its waiters,
//! reconnecting when it drops. A release sends `NOTIFY lockmacro_release`
//! with the key (in `lockmacro_release()`, delivered when it commits).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;

use crate::backend::ReleaseListener;

/// The channel releases are announced on.
const CHANNEL: &str = "lockmacro_release";

/// The pause before connecting again after the listener's connection failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// The backend's listener for releases.
pub(super) struct Releases {
    inner: Arc<Inner>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// How long a waiter waits for the listener to connect before it waits
    /// deaf (by its retry strategy alone).
    connect_timeout: Duration,
}

struct Inner {
    pool: PgPool,
    /// Per key with listeners: bumped by each release of the key heard.
    keys: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// True while `LISTEN` is in place: what is heard from then on reaches
    /// every key registered.
    live: watch::Sender<bool>,
}

impl Inner {
    fn keys(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        // Every change is one map operation: a panic cannot leave it
        // half-written.
        self.keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Releases {
    /// A listener that connects through `pool` when first asked.
    pub(super) fn new(pool: PgPool, connect_timeout: Duration) -> Self {
        Releases {
            inner: Arc::new(Inner {
                pool,
                keys: Mutex::default(),
                live: watch::channel(false).0,
            }),
            task: Mutex::default(),
            connect_timeout,
        }
    }

    /// Hears every release of `key` from when this returns; deaf when the
    /// listener cannot connect within the connect timeout.
    pub(super) async fn listen(&self, key: &str) -> ReleaseListener {
        self.start();
        let mut live = self.inner.live.subscribe();
        let connected = tokio::time::timeout(self.connect_timeout, live.wait_for(|live| *live));
        if !matches!(connected.await, Ok(Ok(_))) {
            tracing::debug!(target: "lockmacro", key, "postgres: no listener; waiting by backoff");
            return ReleaseListener::deaf();
        }
        let mut keys = self.inner.keys();
        // The connection may have dropped since: the task clears the map
        // under this lock when it does.
        if !*self.inner.live.borrow() {
            return ReleaseListener::deaf();
        }
        let receiver = match keys.get(key) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, receiver) = watch::channel(0);
                keys.insert(key.to_owned(), sender);
                receiver
            }
        };
        let unsubscribe = Unsubscribe {
            inner: Arc::downgrade(&self.inner),
            key: key.to_owned(),
        };
        ReleaseListener::new(receiver, unsubscribe)
    }

    fn start(&self) {
        let mut task = self
            .task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if task
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            *task = Some(tokio::spawn(listen_forever(self.inner.clone())));
        }
    }
}

impl Drop for Releases {
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

/// Connects, listens, and passes every release heard to its key's
/// listeners; when the connection drops, turns them deaf (their waiters try
/// again at once, and listen anew) and connects again.
async fn listen_forever(inner: Arc<Inner>) {
    loop {
        match listen_once(&inner).await {
            Ok(()) => {}
            Err(err) => tracing::debug!(target: "lockmacro", %err, "postgres: listener lost"),
        }
        {
            let mut keys = inner.keys();
            inner.live.send_replace(false);
            keys.clear();
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

async fn listen_once(inner: &Inner) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(&inner.pool).await?;
    listener.listen(CHANNEL).await?;
    inner.live.send_replace(true);
    while let Some(notification) = listener.try_recv().await? {
        if let Some(sender) = inner.keys().get(notification.payload()) {
            sender.send_modify(|releases| *releases += 1);
        }
    }
    Ok(())
}

/// Forgets a key when its last listener goes.
struct Unsubscribe {
    inner: Weak<Inner>,
    key: String,
}

impl Drop for Unsubscribe {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            let mut keys = inner.keys();
            if keys
                .get(&self.key)
                .is_some_and(|sender| sender.receiver_count() == 0)
            {
                keys.remove(&self.key);
            }
        }
    }
}
