//! The test harness for one integration test: `mod support;` includes this file, which
//! re-exports the harness crate (`tests/support/lib.rs`, compiled once for all test
//! binaries) and holds what must be compiled in each test binary: the feature check and
//! the `both_backends!` macro.

#![allow(dead_code)]

// The harness crate turns on `testing` (the store, the explicit clock, the fault hooks);
// the tests also exercise every optional feature, and without one they must fail to build
// with the command to use, never skip.
#[cfg(not(all(
    feature = "testing",
    feature = "cluster",
    feature = "sentinel",
    feature = "tls",
    feature = "metrics",
    feature = "serde"
)))]
compile_error!(
    "the integration tests need every feature: run `cargo nextest run --all-targets \
     --all-features` (or `cargo test --all-features`)"
);

#[allow(unused_imports)]
pub use redis_locks_test_support::*;

/// Generates `mod <name> { redis(), memory() }` tests calling `<name>(Backend)`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn redis() {
                    super::$name($crate::support::backend::Backend::redis()).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn memory() {
                    super::$name($crate::support::backend::Backend::memory()).await
                }
            }
        )+
    };
}
