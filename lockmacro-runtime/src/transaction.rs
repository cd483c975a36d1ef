//! Transaction-scoped locks on PostgreSQL: `Locker::obtain_in` takes a key
//! inside the caller's transaction, and the lock ends with it.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Acquired, ReleaseListener, acquire_in};
use crate::error::{BackendError, BackendErrorKind};
use crate::lease::check_duration;
use crate::locker::check_key;
use crate::options::Fencing;
use crate::{LockError, Locker, ObtainOptions};

/// A key held by a PostgreSQL transaction, from [`Locker::obtain_in`].
///
/// The lock *is* the transaction's: it ends when the transaction commits or
/// rolls back, and at no other time. It has no `release`, and dropping this
/// value changes nothing; to give the key back early, end the transaction.
/// Writes made in the transaction commit together with the lock check, so
/// a holder that lost the lock (its transaction ended by the server after
/// the ttl) cannot commit them: there is no late write to fence off.
///
/// ```no_run
/// # async fn demo(locker: lockmacro_runtime::Locker, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lockmacro_runtime::ObtainOptions;
///
/// let mut tx = pool.begin().await?;
/// let lock = locker.obtain_in(&mut tx, "account:7", Duration::from_secs(10), ObtainOptions::new().fence()).await?;
/// sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 7").execute(&mut *tx).await?;
/// tx.commit().await?; // the write and the end of the lock, at once
/// assert!(lock.fence_token().is_some());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TransactionLock {
    key: String,
    fence: Option<u64>,
    ttl: Duration,
}

impl TransactionLock {
    /// The key, as the caller named it (without the locker's namespace).
    ///
    /// ```no_run
    /// # fn demo(lock: lockmacro_runtime::TransactionLock) {
    /// println!("holding {} until the transaction ends", lock.key());
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token, when one was asked for
    /// ([`ObtainOptions::fence`]): from the one sequence every key of the
    /// database shares, so it is above every token minted before it, for
    /// any key, leases and transactions alike.
    ///
    /// ```no_run
    /// # fn demo(lock: lockmacro_runtime::TransactionLock) {
    /// if let Some(token) = lock.fence_token() {
    ///     println!("token {token}");
    /// }
    /// # }
    /// ```
    pub fn fence_token(&self) -> Option<u64> {
        self.fence
    }

    /// The fencing token under its former name: now
    /// [`fence_token`](Self::fence_token), as on [`Lock`](crate::Lock).
    ///
    /// ```no_run
    /// # #![allow(deprecated)]
    /// # fn demo(lock: lockmacro_runtime::TransactionLock) {
    /// assert_eq!(lock.fence(), lock.fence_token());
    /// # }
    /// ```
    #[deprecated(note = "use fence_token()")]
    pub fn fence(&self) -> Option<u64> {
        self.fence_token()
    }

    /// The ttl it was taken with: the longest the transaction may sit idle,
    /// or run one statement, before the server ends it.
    ///
    /// ```no_run
    /// # fn demo(lock: lockmacro_runtime::TransactionLock) {
    /// println!("the transaction may idle for at most {:?}", lock.ttl());
    /// # }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

impl Locker {
    /// Takes `key` inside the transaction `tx`, for as long as `tx` lasts:
    /// a transaction-scoped lock (PostgreSQL only).
    ///
    /// The key is held against every other holder on the same database:
    /// leases of [`Locker::obtain`] on a PostgreSQL locker (with the same
    /// namespace) and other transactions. Writes made in `tx` commit or roll
    /// back together with the lock, which ends at that moment; a commit
    /// wakes the waiters at once, a rollback by their retry strategy. There
    /// is no way to release it before: see [`TransactionLock`].
    ///
    /// `ttl` bounds a stuck holder: from the lock on, the server ends the
    /// transaction's session when it sits idle for `ttl`, or when one
    /// statement runs longer (shorter timeouts of the session are kept).
    /// The transaction then rolls back and cannot commit; another may take
    /// the key. A transaction that keeps sending statements holds the key
    /// as long as it runs.
    ///
    /// `opts` may wait ([`ObtainOptions::retry`]) and ask for a fencing
    /// token ([`ObtainOptions::fence`], [`ObtainOptions::fence_key`]: either
    /// way, from the shared sequence). `fair`, permits, read-write shares,
    /// replicas, `max_hold`, `lock_delay` and metadata are refused: the lock has no row to
    /// keep them in and no watchdog. The transaction must be `READ
    /// COMMITTED` (PostgreSQL's default), so that it sees leases committed
    /// after it began; another isolation level is refused by the server.
    ///
    /// Fails with [`LockError::NotObtained`] when the key stays held, and
    /// with [`BackendErrorKind::Unsupported`] on a locker that is not on
    /// PostgreSQL. An error of the statement leaves `tx` aborted, as any
    /// failed statement does.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions, RetryStrategy};
    ///
    /// let locker = Locker::postgres_pool(pool.clone()).await?;
    /// let mut tx = pool.begin().await?;
    /// let wait = RetryStrategy::linear(Duration::from_millis(50)).deadline(Duration::from_secs(5));
    /// locker.obtain_in(&mut tx, "report:daily", Duration::from_secs(30), ObtainOptions::new().retry(wait)).await?;
    /// sqlx::query("INSERT INTO reports (day) VALUES (current_date)").execute(&mut *tx).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn obtain_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        key: &str,
        ttl: Duration,
        opts: ObtainOptions,
    ) -> Result<TransactionLock, LockError> {
        check_key(key)?;
        check_duration(key, "ttl", ttl)?;
        check_options(self, key, &opts)?;
        let wire_key = self.wire_key(key);
        self.backend()
            .check_keys(std::slice::from_ref(&wire_key), None)?;
        let span = tracing::debug_span!(target: "lockmacro", "obtain_in", key, ?ttl);
        async {
            let fenced = opts.fencing != Fencing::Off;
            let deadline = opts.retry.get_deadline().map(|wait| Instant::now() + wait);
            let mut listener: Option<ReleaseListener> = None;
            let mut attempts = 0;
            loop {
                attempts += 1;
                let remaining = match acquire_in(tx, &wire_key, ttl, fenced).await? {
                    Acquired::Obtained { fence } => {
                        return Ok(TransactionLock {
                            key: key.to_owned(),
                            fence,
                            ttl,
                        });
                    }
                    Acquired::Busy { remaining, .. } => remaining,
                };
                let not_obtained = || LockError::NotObtained {
                    key: key.to_owned(),
                    namespace: self.namespace().to_owned(),
                    remaining,
                    holder: None,
                };
                let Some(mut pause) = opts.retry.delay_after(attempts) else {
                    return Err(not_obtained());
                };
                let Some(listener) = &mut listener else {
                    // A commit before the listener was in place is seen by
                    // the attempt sent again at once, a later one by it.
                    listener = Some(self.backend().listen(&wire_key).await);
                    continue;
                };
                if let Some(remaining) = remaining {
                    pause = pause.min(remaining + Duration::from_millis(1));
                }
                if let Some(deadline) = deadline {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(not_obtained());
                    }
                    pause = pause.min(left);
                }
                listener.wait(pause).await;
            }
        }
        .instrument(span)
        .await
    }
}

/// Refuses a locker that is not on PostgreSQL, and what a transaction-scoped
/// lock cannot keep.
fn check_options(locker: &Locker, key: &str, opts: &ObtainOptions) -> Result<(), LockError> {
    let refused = if locker.backend().name() != "postgres" {
        Some(format!(
            "a transaction-scoped lock needs a locker on PostgreSQL, not on {}: obtain it with \
             `Locker::obtain`",
            locker.backend().name()
        ))
    } else {
        [
            (opts.fair, "`fair`"),
            (opts.share.is_some(), "permits and read-write shares"),
            (opts.replicas > 0, "`replicas`"),
            (opts.max_hold.is_some(), "`max_hold`"),
            (!opts.lock_delay.is_zero(), "`lock_delay`"),
            (!opts.metadata.is_empty(), "metadata"),
        ]
        .into_iter()
        .find(|(asked, _)| *asked)
        .map(|(_, option)| {
            format!(
                "{option} cannot be asked of a transaction-scoped lock: it lives in the \
                 transaction, with no row and no watchdog; obtain it without {option}, or use \
                 `Locker::obtain`"
            )
        })
    };
    match refused {
        None => Ok(()),
        Some(reason) => Err(BackendError::new(
            BackendErrorKind::Unsupported,
            format!("obtain `{key}` in a transaction"),
            reason,
        )
        .into()),
    }
}
