//! A client built from the user's own `redis::Client`: its credentials and database are used
//! as they are, for every primitive, wake-ups included.

mod support;
use support::time::{ms, secs};

use redis_locks::LockClient;
use support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_from_a_redis_client_keeps_its_user_and_database() {
    let server = RedisServer::start();
    assert_eq!(
        server.cli(&[
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">app-secret",
            "~*",
            "&*",
            "+@all"
        ]),
        "OK"
    );
    let url = format!("redis://app:app-secret@127.0.0.1:{}/3", server.port());
    let mine = redis::Client::open(url).expect("the user's client");
    let c = LockClient::from_client(&mine).await.expect("connect");
    let other = LockClient::builder()
        .connect_client(&mine)
        .await
        .expect("connect");

    let m = c.mutex("own-mutex").lock().await.expect("mutex");
    m.release().await.expect("release");
    let rw = c.rwlock("own-rw");
    rw.read()
        .await
        .expect("read")
        .release()
        .await
        .expect("release");
    rw.write()
        .await
        .expect("write")
        .release()
        .await
        .expect("release");
    let f = c.fair_lock("own-fair").lock().await.expect("fair lock");
    // A waiter on the other client is woken by the release (pushes work on this connection).
    let waiting = other.fair_lock("own-fair").retry_interval(secs(60));
    let (granted, released) = tokio::join!(waiting.lock().timeout(secs(20)), async {
        tokio::time::sleep(ms(200)).await;
        f.release().await
    });
    assert!(released.expect("release"));
    granted
        .expect("woken by the release, long before its 60 s retry interval")
        .release()
        .await
        .expect("release");
    let p = c
        .semaphore("own-sem", 2)
        .acquire_many(2)
        .await
        .expect("permits");
    p.release().await.expect("release");

    // Everything went to database 3, as the user's client says, as user `app`.
    for name in ["own-mutex", "own-rw", "own-fair", "own-sem"] {
        let key = format!("rl:{{{name}}}:fence");
        assert_eq!(
            server.cli(&["-n", "3", "EXISTS", &key]),
            "1",
            "{key} in db 3"
        );
        assert_eq!(
            server.cli(&["-n", "0", "EXISTS", &key]),
            "0",
            "{key} not in db 0"
        );
    }
    let clients = server.cli(&["CLIENT", "LIST"]);
    assert!(
        clients
            .lines()
            .any(|l| l.contains("user=app") && l.contains("db=3")),
        "{clients}"
    );
}
