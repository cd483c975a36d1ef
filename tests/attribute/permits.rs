//! `permits = N`: at most N bodies at once per key; the others skip or
//! wait, and a waiter runs once a body ends. `mode = "read"` / `"write"`:
//! readers together, the writer alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, distributed_lock};
use tokio::sync::watch;

use lockmacro_testkit::Fixture;

struct Api {
    locker: Locker,
    inside: AtomicUsize,
    most: AtomicUsize,
    /// Holds every body until set.
    go: watch::Sender<bool>,
}

impl Api {
    #[distributed_lock(key = "api:{tenant}", ttl = "30s", permits = 2, locker = self.locker, on_busy = "skip")]
    async fn call(&self, tenant: &str) -> Option<usize> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let mut go = self.go.subscribe();
        go.wait_for(|go| *go)
            .await
            .expect("the sender lives in `self`");
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Some(now)
    }

    #[distributed_lock(key = "api:{tenant}", ttl = "30s", permits = 2, wait = "30s", locker = self.locker)]
    async fn call_waiting(&self, tenant: &str) -> Result<(), LockError> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

impl Api {
    #[distributed_lock(key = "catalog:{id}", ttl = "30s", mode = "read", locker = self.locker, on_busy = "skip")]
    async fn show(&self, id: u64) -> Option<usize> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let mut go = self.go.subscribe();
        go.wait_for(|go| *go)
            .await
            .expect("the sender lives in `self`");
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Some(now)
    }

    #[distributed_lock(key = "catalog:{id}", ttl = "30s", mode = "write", locker = self.locker, on_busy = "skip")]
    async fn rebuild(&self, id: u64) -> Option<()> {
        // A read of the same key inside the write re-enters.
        self.show_inside(id).await
    }

    #[distributed_lock(key = "catalog:{id}", ttl = "30s", mode = "read", locker = self.locker, on_busy = "skip")]
    async fn show_inside(&self, id: u64) -> Option<()> {
        Some(())
    }
}

async fn api(fx: &Fixture) -> Arc<Api> {
    Arc::new(Api {
        locker: fx.locker().await,
        inside: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        go: watch::Sender::new(false),
    })
}

pub async fn a_third_call_skips_while_two_permits_are_held(fx: &Fixture) {
    let api = api(fx).await;
    let running: Vec<_> = (0..2)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move { api.call("t1").await })
        })
        .collect();
    // Both bodies are inside, each holding a permit.
    while api.inside.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    assert_eq!(api.call("t1").await, None, "a third body ran beside two");
    api.go.send_replace(true);
    for call in running {
        assert!(
            call.await.expect("call").is_some(),
            "a permit holder was skipped"
        );
    }
    assert_eq!(api.most.load(Ordering::SeqCst), 2);
    // Another tenant's key has permits of its own.
    assert!(api.call("t2").await.is_some());
}

pub async fn waiting_calls_never_exceed_the_permits(fx: &Fixture) {
    let api = api(fx).await;
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move { api.call_waiting("t1").await })
        })
        .collect();
    for call in calls {
        call.await
            .expect("call")
            .expect("every call runs in its turn");
    }
    let most = api.most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} bodies at once for 2 permits");
}

pub async fn readers_run_together_and_the_writer_alone(fx: &Fixture) {
    let api = api(fx).await;
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move { api.show(7).await })
        })
        .collect();
    while api.inside.load(Ordering::SeqCst) < 3 {
        tokio::task::yield_now().await;
    }
    assert_eq!(api.rebuild(7).await, None, "the writer ran beside readers");
    api.go.send_replace(true);
    for reader in readers {
        assert!(
            reader.await.expect("reader").is_some(),
            "a reader was skipped"
        );
    }
    assert_eq!(
        api.most.load(Ordering::SeqCst),
        3,
        "the readers did not run together"
    );
    assert_eq!(
        api.rebuild(7).await,
        Some(()),
        "the writer, alone, with a read inside"
    );
}
