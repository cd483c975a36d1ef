//! In a build without a feature, its constructors fail to compile with a
//! message that names the feature (`tests/missing_feature/*.stderr`); with
//! every feature, there is nothing to check, and nothing is built. (The
//! `cluster` and `sentinel` features turn on `redis`.)
//! `TRYBUILD=overwrite` rewrites the `.stderr` files: read each one before
//! committing it.

#[cfg(not(all(
    feature = "cluster",
    feature = "etcd",
    feature = "postgres",
    feature = "sentinel"
)))]
#[test]
fn constructors_of_a_missing_feature_name_it() {
    let cases = trybuild::TestCases::new();
    #[cfg(not(feature = "cluster"))]
    cases.compile_fail("tests/missing_feature/cluster.rs");
    #[cfg(not(feature = "etcd"))]
    cases.compile_fail("tests/missing_feature/etcd.rs");
    #[cfg(not(feature = "postgres"))]
    cases.compile_fail("tests/missing_feature/postgres.rs");
    #[cfg(not(feature = "redis"))]
    cases.compile_fail("tests/missing_feature/redis.rs");
    #[cfg(not(feature = "sentinel"))]
    cases.compile_fail("tests/missing_feature/sentinel.rs");
}
