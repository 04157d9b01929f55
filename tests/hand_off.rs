//! Hand-offs: a released lock handed to its head waiter, and the push that tells the waiter.
//! A hand-off's push may arrive late, after its claim window passed (the in-memory store's
//! wake-ups are diverted, feature `testing`, so a test decides when a push arrives).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

use redis_locks::testing::store::{MemoryStore, Store};
use redis_locks::{testing, LockClient};
use tokio::time::{sleep, timeout};

use support::faulty::{Faulty, Op, Rule};
use support::time::ms;

/// H holds a Mutex; W waits (announced, refusal deadline D1). W's next attempts are slowed
/// (800 ms on the way). H releases: the lock is handed to W until D1, but the push is held
/// back. D1 passes, X takes the free lock, W's slow attempt is refused (deadline D2). Only
/// now the stale push (D1) reaches W. W must not return a guard while X holds; once X
/// releases, W must get the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_hand_off_push_is_not_trusted() {
    let mem = Arc::new(MemoryStore::new());
    let outbox: Arc<StdMutex<Vec<(String, String)>>> = Arc::default();
    let hold_back = Arc::new(AtomicBool::new(false));
    {
        let (tap_box, hold, hub) = (outbox.clone(), hold_back.clone(), mem.hub().clone());
        assert!(testing::divert(mem.hub(), move |channel, message| {
            if hold.load(Ordering::SeqCst) {
                tap_box
                    .lock()
                    .unwrap()
                    .push((channel.to_owned(), message.to_owned()));
            } else {
                testing::deliver(&hub, channel, message);
            }
        }));
    }
    let opts = || {
        LockClient::builder()
            .lease(ms(2_000))
            .heartbeat(ms(300))
            .retry_interval(ms(100))
    };
    let h = opts().store(mem.clone()).expect("client");
    let x = opts().store(mem.clone()).expect("client");
    let slow = Arc::new(AtomicBool::new(false));
    let w_store = Faulty::new(mem.clone() as Arc<dyn Store>);
    {
        let slow = slow.clone();
        w_store.add(
            Rule::on(Op::Acquire)
                .when(move |_| slow.load(Ordering::SeqCst))
                .delay_request(ms(800)),
        );
    }
    let w = opts().store(w_store.clone()).expect("client");

    let hg = h.mutex("m").lock().await.unwrap();
    let w_task = tokio::spawn(async move { w.mutex("m").lock().await });
    sleep(ms(150)).await; // W refused and announced
    slow.store(true, Ordering::SeqCst);
    sleep(ms(120)).await; // W's next attempt is now on its slow way
    hold_back.store(true, Ordering::SeqCst);
    assert!(hg.release().await.unwrap());
    // The hand-off's claim window (W's heartbeat deadline) passes.
    sleep(ms(450)).await;
    let xg = timeout(ms(3_000), x.mutex("m").lock())
        .await
        .unwrap()
        .unwrap();
    assert!(xg.is_held());
    slow.store(false, Ordering::SeqCst);
    // Let W's slow attempt be refused, then deliver the stale push.
    sleep(ms(900)).await;
    hold_back.store(false, Ordering::SeqCst);
    let held: Vec<_> = outbox.lock().unwrap().drain(..).collect();
    assert!(!held.is_empty(), "no push was held back");
    eprintln!("held back: {held:?}");
    for (c, m) in &held {
        testing::deliver(mem.hub(), c, m);
    }
    sleep(ms(300)).await;
    assert!(
        !w_task.is_finished() || !xg.is_held(),
        "W returned a guard from a stale hand-off while X holds"
    );
    if w_task.is_finished() {
        let wg = w_task.await.unwrap().unwrap();
        assert!(!(wg.is_held() && xg.is_held()), "W and X both is_held()");
        return;
    }
    assert!(xg.release().await.unwrap());
    let wg = timeout(ms(5_000), w_task)
        .await
        .expect("W never got the free lock")
        .unwrap()
        .unwrap();
    assert!(wg.is_held());
}
