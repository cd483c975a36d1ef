//! How long a cluster call follows a slot that has no master: for its budget
//! (the response timeout), then it fails with an error that says so.

use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, ClusterBackend, LockError, Locker, ObtainOptions, RedisConfig,
};

use lockmacro_testkit::cluster::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_without_any_master_fails_after_the_budget_with_a_clear_error() {
    let mut cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let budget = Duration::from_secs(1);
    let config = RedisConfig::default().response_timeout(budget);
    let locker = match ClusterBackend::connect_with(cluster.seeds(), config).await {
        Ok(backend) => Locker::new(backend),
        Err(err) => cluster.fail(format_args!("connect: {err}")),
    };
    let lock = locker
        .obtain("job", Duration::from_secs(30), ObtainOptions::new())
        .await
        .unwrap_or_else(|err| cluster.fail(format_args!("obtain: {err}")));
    if let Err(err) = lock.release().await {
        cluster.fail(format_args!("release: {err}"));
    }
    let slot = cluster.slot("job");
    // The master and its only replica: nobody can take the slot over.
    let master = cluster.master_for("job");
    let replica = cluster.replica_of(master);
    cluster.kill(replica);
    cluster.kill(master);

    let err = locker
        .obtain("job", Duration::from_secs(30), ObtainOptions::new())
        .await
        .expect_err("a slot without a master gave a lock");
    let LockError::Backend(backend) = &err else {
        cluster.fail(format_args!("not a backend error: {err:?}"));
    };
    let text = err.to_string();
    if backend.kind() != BackendErrorKind::Timeout
        || !text.contains(&format!(
            "no master of slot {slot} answered within the response timeout (1s)"
        ))
    {
        cluster.fail(format_args!("unclear error: {err:?}"));
    }
}
