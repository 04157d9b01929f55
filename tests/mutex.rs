//! Mutex behaviour, on a real redis-server and on the in-memory store.

mod support;

use std::time::Duration;

use support::backend::Backend;

async fn second_holder_is_refused(b: Backend) {
    let c = b.client().await;
    let m = c.mutex("second-holder");
    let g = m.lock().await.expect("lock");
    assert!(m.try_lock().await.expect("try").is_none());
    assert!(g.release().await.expect("release"));
    let g2 = m
        .lock_timeout(Duration::from_secs(5))
        .await
        .expect("relock");
    assert!(g2.fencing_token() > 1);
}

both_backends!(second_holder_is_refused);
