//! The server settings a lock deployment depends on, checked when a client connects: a server
//! that may evict lock keys under memory pressure (`maxmemory` with an evicting policy) is
//! warned about once, with the setting to change, or refused with `refuse_evicting_servers`.

mod support;
use support::quick::Quick;

use redis_locks::{Error, LockClient};

use support::warnings::Warnings;
use support::RedisServer;

/// A server with `maxmemory 10mb` and `policy`.
fn server_with(policy: &str) -> RedisServer {
    RedisServer::start_with(&["--maxmemory", "10mb", "--maxmemory-policy", policy])
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_that_may_evict_lock_keys_is_warned_about_or_refused() {
    for policy in ["allkeys-lru", "volatile-lru", "volatile-ttl"] {
        let server = server_with(policy);
        let warnings = Warnings::default();
        let _capture = tracing::subscriber::set_default(warnings.clone());
        let client = LockClient::connect(&server.url()).await.expect("connect");
        let seen = warnings.seen();
        let about_eviction: Vec<_> = seen.iter().filter(|w| w.contains(policy)).collect();
        assert_eq!(about_eviction.len(), 1, "{policy}: {seen:?}");
        assert!(
            about_eviction[0].contains("noeviction"),
            "says what to set: {about_eviction:?}"
        );
        // Locks still work after the warning.
        client.locked("m").await.release().await.expect("release");

        let refused = LockClient::builder()
            .refuse_evicting_servers(true)
            .connect(&server.url())
            .await
            .expect_err("refused");
        match &refused {
            Error::EvictingServer { address, detail } => {
                assert!(address.ends_with(&server.port().to_string()), "{refused}");
                assert!(detail.contains(policy), "{refused}");
            }
            other => panic!("{policy}: {other}"),
        }
        assert!(refused.to_string().contains("noeviction"), "{refused}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_that_never_evicts_is_accepted_silently() {
    for args in [
        &["--maxmemory", "10mb", "--maxmemory-policy", "noeviction"][..],
        &["--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"][..],
    ] {
        let server = RedisServer::start_with(args);
        let warnings = Warnings::default();
        let _capture = tracing::subscriber::set_default(warnings.clone());
        let client = LockClient::builder()
            .refuse_evicting_servers(true)
            .connect(&server.url())
            .await
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(
            warnings.seen().is_empty(),
            "{args:?}: {:?}",
            warnings.seen()
        );
        client.locked("m").await.release().await.expect("release");
    }
}
