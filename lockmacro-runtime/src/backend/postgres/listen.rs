//! Wake-ups: one `LISTEN` connection per backend, shared by all its waiters,
//! reconnecting when it drops. A release sends `NOTIFY lockmacro_release`
//! with the key (in `lockmacro_release()`, delivered when it commits).
//!
//! `LISTEN` succeeds through a pooler in transaction mode, which then hands
//! the server connection that listens to other clients: the listener hears
//! nothing, and the notifications reach whichever client that server
//! connection serves at the time, in the middle of its statements (sqlx
//! fails such a statement). So, unless [`listen_url`] names where to
//! listen, the listener first checks that its connection keeps a session
//! of its own (below, [`pooled`]), and once it listens it sends a
//! notification of its own through the statements' pool and waits for it.
//! When either fails it says so once in the logs and stays deaf, and
//! waiters wait by their retry strategy instead of for a wake-up that
//! cannot come.
//!
//! [`listen_url`]: super::PostgresConfig::listen_url

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgRow};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool, Row};
use tokio::sync::watch;

use super::sql::text;
use crate::backend::ReleaseListener;

/// The channel releases are announced on.
const CHANNEL: &str = "lockmacro_release";

/// The pause before connecting again after the listener's connection failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// What the listener can do for waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Connecting, or checking that what is sent is heard.
    Connecting,
    /// `LISTEN` is in place and heard its own notification: what is heard
    /// from then on reaches every key registered.
    Live,
    /// Its own notification never came: every listener is deaf.
    Deaf,
}

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
    /// Where the backend's statements go: the probe is sent the way
    /// releases are.
    statements: PgPool,
    /// How long the probe may take to be heard.
    probe_wait: Duration,
    /// Whether the listener's connection was named by `listen_url`, and so
    /// is taken to be a session of its own without a check.
    named: bool,
    /// Per key with listeners: bumped by each release of the key heard.
    keys: Mutex<HashMap<String, watch::Sender<u64>>>,
    state: watch::Sender<State>,
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
    /// A listener that connects through `pool` when first asked (`named`:
    /// a pool of `listen_url`), and checks that it hears what is sent
    /// through `statements`.
    pub(super) fn new(
        pool: PgPool,
        named: bool,
        statements: PgPool,
        connect_timeout: Duration,
    ) -> Self {
        Releases {
            inner: Arc::new(Inner {
                pool,
                statements,
                probe_wait: connect_timeout,
                named,
                keys: Mutex::default(),
                state: watch::channel(State::Connecting).0,
            }),
            task: Mutex::default(),
            connect_timeout,
        }
    }

    /// Hears every release of `key` from when this returns; deaf when the
    /// listener cannot connect within the connect timeout, or found that
    /// it hears nothing.
    pub(super) async fn listen(&self, key: &str) -> ReleaseListener {
        self.start();
        let mut state = self.inner.state.subscribe();
        let settled = state.wait_for(|state| *state != State::Connecting);
        let live = matches!(
            tokio::time::timeout(self.connect_timeout, settled).await,
            Ok(Ok(state)) if *state == State::Live
        );
        if !live {
            tracing::debug!(target: "lockmacro", key, "postgres: no listener; waiting by backoff");
            return ReleaseListener::deaf();
        }
        let mut keys = self.inner.keys();
        // The connection may have dropped since: the task clears the map
        // under this lock when it does.
        if *self.inner.state.borrow() != State::Live {
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
/// again at once, and listen anew) and connects again. Ends, deaf for
/// good, when what it listens on does not hear its own notification.
async fn listen_forever(inner: Arc<Inner>) {
    loop {
        match listen_once(&inner).await {
            Ok(Heard::Nothing(why)) => {
                tracing::warn!(
                    target: "lockmacro",
                    "postgres: {why} (a pooler in transaction mode between the backend and the \
                     server?): waiters are not woken by releases and wait by their retry \
                     strategy; set PostgresConfig::listen_url to the server itself"
                );
                inner.state.send_replace(State::Deaf);
                return;
            }
            Ok(Heard::Everything) => {}
            Err(err) => tracing::debug!(target: "lockmacro", %err, "postgres: listener lost"),
        }
        {
            let mut keys = inner.keys();
            inner.state.send_replace(State::Connecting);
            keys.clear();
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

/// How a listener's connection ended.
enum Heard {
    /// It heard until its connection closed.
    Everything,
    /// It cannot hear: why.
    Nothing(&'static str),
}

async fn listen_once(inner: &Inner) -> Result<Heard, sqlx::Error> {
    let mut listener = PgListener::connect_with(&inner.pool).await?;
    if !inner.named && pooled(inner, &mut listener).await? {
        return Ok(Heard::Nothing(
            "the connection for LISTEN does not keep a session of its own",
        ));
    }
    listener.listen(CHANNEL).await?;
    let probe = format!("lockmacro-probe:{}", uuid::Uuid::new_v4().simple());
    let notify = format!("SELECT pg_notify('{CHANNEL}', {})", text(&probe));
    sqlx::raw_sql(AssertSqlSafe(notify))
        .execute(&inner.statements)
        .await?;
    let heard = async {
        while let Some(notification) = listener.try_recv().await? {
            if notification.payload() == probe {
                return Ok(true);
            }
        }
        Ok::<_, sqlx::Error>(false)
    };
    match tokio::time::timeout(inner.probe_wait, heard).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => return Ok(Heard::Everything),
        Ok(Err(err)) => return Err(err),
        Err(_) => {
            // Wherever the `LISTEN` went, take it back if it can be.
            let _ = tokio::time::timeout(inner.probe_wait, listener.unlisten_all()).await;
            return Ok(Heard::Nothing(
                "a notification sent through the backend's connections was not heard on its \
                 LISTEN connection",
            ));
        }
    }
    inner.state.send_replace(State::Live);
    while let Some(notification) = listener.try_recv().await? {
        if let Some(sender) = inner.keys().get(notification.payload()) {
            sender.send_modify(|releases| *releases += 1);
        }
    }
    Ok(Heard::Everything)
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

/// Whether `listener`'s connection fails to keep a session of its own, as
/// through a pooler in transaction mode: twice, it sets a session setting
/// and notes its server process, then a second connection holds a
/// transaction open while the listener looks again. A pooler hands the
/// second connection the listener's server connection (which then shows
/// the setting), or the listener another one (without it); a session of
/// its own keeps both.
async fn pooled(inner: &Inner, listener: &mut PgListener) -> Result<bool, sqlx::Error> {
    let mut other = PgConnection::connect_with(&inner.pool.connect_options()).await?;
    let mut found = false;
    for _ in 0..2 {
        let mark = uuid::Uuid::new_v4().simple().to_string();
        let set = format!(
            "SELECT pg_backend_pid()::text, set_config('lockmacro.listener', {}, false)",
            text(&mark)
        );
        let look = "SELECT pg_backend_pid()::text, current_setting('lockmacro.listener', true)";
        let (pid, _) = pair(
            sqlx::raw_sql(AssertSqlSafe(set))
                .fetch_one(&mut *listener)
                .await?,
        );
        let mut held = other.begin().await?;
        let (held_pid, held_mark) = pair(sqlx::raw_sql(look).fetch_one(&mut *held).await?);
        let (again, again_mark) = pair(sqlx::raw_sql(look).fetch_one(&mut *listener).await?);
        held.rollback().await?;
        found |= held_pid == pid
            || held_mark.as_deref() == Some(mark.as_str())
            || again != pid
            || again_mark.as_deref() != Some(mark.as_str());
    }
    let _ = other.close().await;
    Ok(found)
}

/// The two text columns of `row`.
fn pair(row: PgRow) -> (Option<String>, Option<String>) {
    (row.try_get(0).ok().flatten(), row.try_get(1).ok().flatten())
}
