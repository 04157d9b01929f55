//! Feature `metrics`: acquisitions, holds, lost leases and queue positions are reported on
//! the `metrics` facade (checked with a recording recorder).
#![cfg(feature = "metrics")]

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use redis_locks::LockClient;

/// Every recorded value as "name{labels}".
#[derive(Clone, Default)]
struct Recording(Arc<StdMutex<Vec<String>>>);

struct Handle {
    key: String,
    log: Recording,
}

impl Handle {
    fn push(&self) {
        self.log.0.lock().expect("log").push(self.key.clone());
    }
}

impl CounterFn for Handle {
    fn increment(&self, _: u64) {
        self.push()
    }
    fn absolute(&self, _: u64) {
        self.push()
    }
}
impl GaugeFn for Handle {
    fn increment(&self, _: f64) {
        self.push()
    }
    fn decrement(&self, _: f64) {
        self.push()
    }
    fn set(&self, _: f64) {
        self.push()
    }
}
impl HistogramFn for Handle {
    fn record(&self, _: f64) {
        self.push()
    }
}

impl Recording {
    fn handle(&self, key: &Key) -> Arc<Handle> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        Arc::new(Handle {
            key: format!("{}{{{}}}", key.name(), labels.join(",")),
            log: self.clone(),
        })
    }
    fn has(&self, needle: &str) -> bool {
        self.0
            .lock()
            .expect("log")
            .iter()
            .any(|k| k.contains(needle))
    }
}

impl Recorder for Recording {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.handle(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_report_on_the_metrics_facade() {
    let rec = Recording::default();
    metrics::set_global_recorder(rec.clone()).expect("first recorder of this test binary");
    let c = LockClient::in_memory();

    // A grant, a refusal and a hold.
    let m = c.mutex("metered");
    let g = m.lock().await.expect("lock");
    assert!(m.try_lock().await.expect_err("try").is_would_block());
    g.release().await.expect("release");
    assert!(rec.has("redis_locks_acquire_seconds{kind=write,outcome=granted}"));
    assert!(rec.has("redis_locks_acquire_seconds{kind=write,outcome=refused}"));
    assert!(rec.has("redis_locks_hold_seconds{kind=write}"));

    // A queued waiter reports its position.
    let f = c.fair_lock("metered-queue");
    let holder = f.lock().await.expect("holder");
    let waiter = {
        let f = f.clone();
        tokio::spawn(async move { f.lock().await })
    };
    while !rec.has("redis_locks_queue_position{lock=metered-queue}") {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.release().await.expect("release");
    waiter
        .await
        .expect("task")
        .expect("granted")
        .release()
        .await
        .expect("release");

    // A lost lease is counted.
    let lost = c
        .mutex("metered-lost")
        .lease(Duration::from_millis(300))
        .renew_every(Duration::from_millis(50))
        .lock()
        .await
        .expect("lock");
    c.force_release("metered-lost").await.expect("force");
    tokio::time::timeout(Duration::from_secs(10), lost.lost())
        .await
        .expect("lost() fires");
    // lost() can resolve on the local deadline a moment before the renewal task records the
    // loss: wait for the count.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    while !rec.has("redis_locks_lost_leases_total{kind=write}") {
        assert!(
            tokio::time::Instant::now() < give_up,
            "lost lease not counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
