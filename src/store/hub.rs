//! Wake-ups: one subscription per client, dispatched to local waiters.
//!
//! Every lock has one channel (`<prefix>:{<name>}:ch`, in the lock's hash slot). A release
//! publishes either `*` (everyone re-checks) or the space-separated tokens of the waiters it
//! concerns (a ticket queue names exactly the waiters it granted); an election's proclaim
//! publishes `^`, which wakes only its observers (every message wakes those). The hub keeps, per
//! channel, the local waiters and their tokens, subscribes when the first one arrives and
//! unsubscribes a while after the last one left (so a busy lock is not re-subscribed on every
//! hand-off).
//!
//! A notification is an optimisation, never needed for correctness: every wait also wakes at
//! the blocking lease's end and at its own interval. A lost connection wakes every waiter so
//! they re-check at once.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::wire::{HandOff, WakeUp};

/// The token an election's observer is registered with ([`WakeHub::register_observer`]): no
/// claim has it (tokens are never empty), and every message of the channel wakes it.
const OBSERVER: &str = "";

/// How long a channel stays subscribed after its last local waiter left.
const LINGER: Duration = Duration::from_secs(5);

/// The subscribe side of a connection (plain or sharded pub/sub). Calls for different
/// channels may run at once (one task per channel), so a slow or refused channel holds up no
/// other; the hub never runs two calls for one channel at once.
#[async_trait]
pub(crate) trait Subscriber: Send + Sync + 'static {
    async fn subscribe(&self, channel: &str) -> redis::RedisResult<()>;
    async fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()>;
}

/// Whether the server refused a command for a missing ACL right.
fn is_noperm(err: &redis::RedisError) -> bool {
    err.code() == Some("NOPERM")
}

/// A local waiter: its id, token, and what wakes it.
type Waiter = (u64, String, Arc<Wake>);

/// A waiter's wake-up: the notification, and the grant a release made it, if the message
/// said so (`token=fence@until`).
#[derive(Default)]
pub(crate) struct Wake {
    notify: Notify,
    granted: StdMutex<Option<HandOff>>,
}

#[derive(Default)]
struct ChannelEntry {
    waiters: Vec<Waiter>,
    subscribed: bool,
    idle_since: Option<Instant>,
    /// Registrations waiting for the subscription to be in place (or to have failed).
    pending: Vec<oneshot::Sender<()>>,
    /// A task is bringing the subscription in line (the channel's one owner of its
    /// (un)subscriptions); `again`: something changed since it looked.
    reconciling: bool,
    again: bool,
}

impl ChannelEntry {
    /// Releases the registrations waiting for the subscription.
    fn confirm_pending(&mut self) {
        for p in self.pending.drain(..) {
            let _ = p.send(());
        }
    }
}

/// Where a channel stands between its local waiters and its subscription, as
/// `WakeHub::reconcile` sees it; each state names the transition that leaves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The channel is no longer known: nothing to do.
    Gone,
    /// Local waiters, no subscription: subscribe, then release the waiters that wait for it
    /// (also when subscribing failed: they fall back to polling).
    Wanted,
    /// Local waiters and a subscription: release the waiters that wait for it.
    Subscribed,
    /// No local waiter, still subscribed, idle for less than [`LINGER`]: check again once
    /// `left` has passed (a busy lock is not re-subscribed on every hand-off).
    Lingering {
        /// Time until the linger is over.
        left: Duration,
    },
    /// No local waiter, subscribed, idle for [`LINGER`]: unsubscribe; whatever its outcome
    /// (a warning if the user lacks the right), the channel counts as unsubscribed.
    Idle,
    /// No local waiter, no subscription: forget the channel.
    Unused,
}

#[derive(Default)]
struct HubState {
    channels: HashMap<String, ChannelEntry>,
    next_id: u64,
    /// A missing (un)subscribe right was reported already (one warning per hub).
    warned_noperm: bool,
}

/// Where a test diverts the messages published into a hub (feature `testing`).
#[cfg(feature = "testing")]
pub(crate) type Tap = Box<dyn Fn(&str, &str) + Send + Sync>;

/// Delivers lock notifications to the waiters of this process.
pub struct WakeHub {
    state: StdMutex<HubState>,
    /// `None` for an in-process store: every channel counts as subscribed.
    sync: OnceLock<mpsc::UnboundedSender<String>>,
    remote: bool,
    /// Set by `testing::divert`: messages go there instead of to the waiters.
    #[cfg(feature = "testing")]
    tap: OnceLock<Tap>,
}

impl fmt::Debug for WakeHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let channels = self.lock_state().channels.len();
        f.debug_struct("WakeHub")
            .field("channels", &channels)
            .field("remote", &self.remote)
            .finish()
    }
}

impl WakeHub {
    /// A hub fed by the in-memory store itself.
    pub(crate) fn local() -> Arc<Self> {
        Arc::new(WakeHub {
            state: StdMutex::default(),
            sync: OnceLock::new(),
            remote: false,
            #[cfg(feature = "testing")]
            tap: OnceLock::new(),
        })
    }

    /// A hub fed by a Redis subscription; call [`WakeHub::start`] once the connection exists.
    pub(crate) fn remote() -> Arc<Self> {
        Arc::new(WakeHub {
            state: StdMutex::default(),
            sync: OnceLock::new(),
            remote: true,
            #[cfg(feature = "testing")]
            tap: OnceLock::new(),
        })
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, HubState> {
        // A panic while holding this lock cannot leave the map inconsistent (every update is a
        // single insert or remove), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the task that keeps the subscriptions in line with the local waiters: each
    /// channel that needs a change gets a task of its own, which owns that channel's
    /// (un)subscriptions until its state is settled.
    pub(crate) fn start(self: &Arc<Self>, conn: Box<dyn Subscriber>) {
        let conn: Arc<dyn Subscriber> = Arc::from(conn);
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        if self.sync.set(tx.clone()).is_err() {
            return;
        }
        let hub = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(channel) = rx.recv().await {
                let Some(hub) = hub.upgrade() else { break };
                if hub.take_reconcile(&channel) {
                    let (conn, tx) = (conn.clone(), tx.clone());
                    tokio::spawn(async move { hub.reconcile_owned(&channel, &*conn, &tx).await });
                }
            }
        });
    }

    /// Makes the caller the owner of `channel`'s reconciliation, unless a task owns it already
    /// (which is then told to look again).
    fn take_reconcile(&self, channel: &str) -> bool {
        let mut st = self.lock_state();
        let Some(e) = st.channels.get_mut(channel) else {
            return false;
        };
        if e.reconciling {
            e.again = true;
            false
        } else {
            e.reconciling = true;
            true
        }
    }

    /// Reconciles `channel` until nothing changed while it did, then gives up ownership.
    async fn reconcile_owned(
        &self,
        channel: &str,
        conn: &dyn Subscriber,
        tx: &mpsc::UnboundedSender<String>,
    ) {
        loop {
            self.reconcile(channel, conn, tx).await;
            let mut st = self.lock_state();
            match st.channels.get_mut(channel) {
                Some(e) if e.again => e.again = false,
                Some(e) => {
                    e.reconciling = false;
                    return;
                }
                None => return,
            }
        }
    }

    /// Warns once per hub that the Redis user lacks a pub/sub right.
    fn warn_noperm(&self, channel: &str, err: &redis::RedisError, what: &str) {
        let first = !std::mem::replace(&mut self.lock_state().warned_noperm, true);
        if first {
            tracing::warn!(
                channel,
                %err,
                "the Redis user may not {what}: add +subscribe +unsubscribe (+ssubscribe \
                 +sunsubscribe on Cluster) and &<prefix>:* to its ACL rule; meanwhile waiters \
                 poll and idle channels stay subscribed"
            );
        }
    }

    /// Where `channel` stands (see [`Phase`]), read under the state lock.
    fn phase(&self, channel: &str) -> Phase {
        let st = self.lock_state();
        let Some(e) = st.channels.get(channel) else {
            return Phase::Gone;
        };
        match (!e.waiters.is_empty(), e.subscribed) {
            (true, false) => Phase::Wanted,
            (true, true) => Phase::Subscribed,
            (false, true) => {
                let idle = e.idle_since.map(|t| t.elapsed()).unwrap_or(LINGER);
                if idle < LINGER {
                    Phase::Lingering {
                        left: LINGER - idle,
                    }
                } else {
                    Phase::Idle
                }
            }
            (false, false) => Phase::Unused,
        }
    }

    /// Applies `f` to the channel's entry, if it still exists.
    fn with_entry(&self, channel: &str, f: impl FnOnce(&mut ChannelEntry)) {
        if let Some(e) = self.lock_state().channels.get_mut(channel) {
            f(e);
        }
    }

    /// Brings `channel`'s subscription in line with its local waiters, one transition at a
    /// time (see [`Phase`] for the states and what leaves each):
    ///
    /// ```text
    /// Wanted --subscribed--> Subscribed --waiters released--> done
    ///   \--subscribe failed: waiters released (they poll)--> done
    /// Lingering --re-checked when LINGER is over--> done
    /// Idle --unsubscribed, refused (NOPERM: warned once) or failed--> Unused, or Wanted if
    ///   a waiter came meanwhile (a failed UNSUBSCRIBE may have been applied: subscribe anew)
    /// Unused --forgotten--> done
    /// ```
    async fn reconcile(
        &self,
        channel: &str,
        conn: &dyn Subscriber,
        tx: &mpsc::UnboundedSender<String>,
    ) {
        loop {
            match self.phase(channel) {
                Phase::Gone => return,
                Phase::Wanted => match conn.subscribe(channel).await {
                    Ok(()) => self.with_entry(channel, |e| {
                        e.subscribed = true;
                        e.confirm_pending();
                    }),
                    Err(err) => {
                        // Waiters fall back to their own interval; they asked once, that is enough.
                        if is_noperm(&err) {
                            self.warn_noperm(channel, &err, "SUBSCRIBE");
                        } else {
                            tracing::debug!(channel, %err, "subscribe failed; waiters will poll");
                        }
                        self.with_entry(channel, ChannelEntry::confirm_pending);
                        return;
                    }
                },
                Phase::Subscribed => {
                    self.with_entry(channel, ChannelEntry::confirm_pending);
                    return;
                }
                Phase::Lingering { left } => {
                    look_again(tx, channel, left);
                    return;
                }
                Phase::Idle => {
                    // Whatever the outcome, the channel counts as unsubscribed from now on: a
                    // failed UNSUBSCRIBE may still have been applied (its reply came too
                    // late), and the next waiter's SUBSCRIBE is harmless if it was not. A
                    // channel never stays marked subscribed on a server that dropped it.
                    match conn.unsubscribe(channel).await {
                        Ok(()) => {}
                        // The server keeps the subscription; its messages find no waiter.
                        Err(err) if is_noperm(&err) => {
                            self.warn_noperm(channel, &err, "UNSUBSCRIBE");
                        }
                        Err(err) => {
                            tracing::debug!(channel, %err, "unsubscribe failed; subscribing anew when needed");
                        }
                    }
                    self.with_entry(channel, |e| e.subscribed = false);
                }
                Phase::Unused => {
                    let mut st = self.lock_state();
                    if st
                        .channels
                        .get(channel)
                        .is_some_and(|e| e.waiters.is_empty() && !e.subscribed)
                    {
                        st.channels.remove(channel);
                    }
                    return;
                }
            }
        }
    }

    /// Registers a waiter for `token` on `channel`. The channel's subscription is asked for
    /// if it is not in place; [`Registration::subscribed`] waits for it.
    pub(crate) fn register(self: &Arc<Self>, channel: &str, token: &str) -> Registration {
        let notify = Arc::new(Wake::default());
        let (id, confirm) = {
            let mut st = self.lock_state();
            st.next_id += 1;
            let id = st.next_id;
            let entry = st.channels.entry(channel.to_owned()).or_default();
            entry.waiters.push((id, token.to_owned(), notify.clone()));
            entry.idle_since = None;
            if !self.remote {
                entry.subscribed = true;
            }
            let confirm = if entry.subscribed {
                None
            } else {
                let (tx, rx) = oneshot::channel();
                entry.pending.push(tx);
                Some(rx)
            };
            (id, confirm)
        };
        let confirm = match (confirm, self.sync.get()) {
            (Some(rx), Some(sync)) if sync.send(channel.to_owned()).is_ok() => Some(rx),
            _ => None,
        };
        Registration {
            hub: self.clone(),
            channel: channel.to_owned(),
            id,
            notify,
            confirm,
        }
    }

    /// Registers an election's observer on `channel`: every message of the channel wakes it.
    pub(crate) fn register_observer(self: &Arc<Self>, channel: &str) -> Registration {
        self.register(channel, OBSERVER)
    }

    /// Delivers one message (see [`WakeUp`]): `*` wakes every waiter of the channel,
    /// otherwise the waiters whose token is named, with their grant if it carries one.
    pub(crate) fn dispatch(&self, channel: &str, message: &str) {
        #[cfg(feature = "testing")]
        if let Some(tap) = self.tap.get() {
            tap(channel, message);
            return;
        }
        self.deliver(channel, message);
    }

    /// Diverts every later message to `tap` (feature `testing`); false if one was set already.
    #[cfg(feature = "testing")]
    pub(crate) fn divert(&self, tap: Tap) -> bool {
        self.tap.set(tap).is_ok()
    }

    /// [`WakeHub::dispatch`] without the test's tap.
    pub(crate) fn deliver(&self, channel: &str, message: &str) {
        let st = self.lock_state();
        let Some(entry) = st.channels.get(channel) else {
            return;
        };
        let wake_up = WakeUp::parse(message);
        for (_, token, w) in &entry.waiters {
            // Observers of an election re-read the leader after every message: a grant or a
            // release may have changed it as much as a proclaim.
            if token == OBSERVER {
                w.notify.notify_one();
                continue;
            }
            match &wake_up {
                WakeUp::All => w.notify.notify_one(),
                WakeUp::LeaderChanged => {}
                WakeUp::Named(named) => {
                    for named in named.iter().filter(|n| n.token == *token) {
                        if let Some(g) = named.grant {
                            *w.granted.lock().unwrap_or_else(|p| p.into_inner()) = Some(g);
                        }
                        w.notify.notify_one();
                    }
                }
            }
        }
    }

    /// Wakes every local waiter (after a reconnect, messages may have been missed).
    pub(crate) fn wake_all(&self) {
        let st = self.lock_state();
        for entry in st.channels.values() {
            for (_, _, w) in &entry.waiters {
                w.notify.notify_one();
            }
        }
    }

    /// Handles a RESP3 push from the connection.
    pub(crate) fn on_push(&self, push: redis::PushInfo) {
        use redis::PushKind;
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                if let [channel, message, ..] = push.data.as_slice()
                    && let (Some(c), Some(m)) = (as_text(channel), as_text(message))
                {
                    self.dispatch(&c, &m);
                }
            }
            PushKind::Disconnection => self.wake_all(),
            _ => {}
        }
    }

    fn leave(&self, channel: &str, id: u64) {
        let mut st = self.lock_state();
        let Some(entry) = st.channels.get_mut(channel) else {
            return;
        };
        entry.waiters.retain(|(i, _, _)| *i != id);
        if entry.waiters.is_empty() {
            entry.idle_since = Some(Instant::now());
            match self.sync.get() {
                Some(sync) => {
                    let _ = sync.send(channel.to_owned());
                }
                None if !self.remote => {
                    st.channels.remove(channel);
                }
                None => {}
            }
        }
    }

    /// Local waiters registered now (for tests and metrics).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn waiter_count(&self) -> usize {
        self.lock_state()
            .channels
            .values()
            .map(|e| e.waiters.len())
            .sum()
    }
}

/// Has `channel` looked at again after `after`.
fn look_again(tx: &mpsc::UnboundedSender<String>, channel: &str, after: Duration) {
    let (tx, channel) = (tx.clone(), channel.to_owned());
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let _ = tx.send(channel);
    });
}

fn as_text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// A waiter's place in the hub; leaves on drop.
pub(crate) struct Registration {
    hub: Arc<WakeHub>,
    channel: String,
    id: u64,
    notify: Arc<Wake>,
    /// Answered once the channel's subscription is in place, or has failed.
    confirm: Option<oneshot::Receiver<()>>,
}

impl Registration {
    /// Waits until the channel's subscription is in place (or has failed: the waiter then
    /// polls), but not past `until`: a stalled subscription never holds a waiter past its
    /// deadline, and the waiter goes on polling meanwhile.
    pub(crate) async fn subscribed(&mut self, until: Instant) {
        let Some(confirm) = self.confirm.take() else {
            return;
        };
        if crate::vocab::bugs::planted(crate::vocab::bugs::Bug::UnboundedSubscribe) {
            let _ = confirm.await;
            return;
        }
        let _ = tokio::time::timeout_at(until, confirm).await;
    }

    /// Resolves at the next notification for this waiter (one delivered since the last
    /// call counts: no wake-up is lost between an attempt and the wait).
    pub(crate) async fn notified(&self) {
        self.notify.notify.notified().await
    }

    /// The channel it waits on.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// The grant a release announced for this waiter since the last call.
    pub(crate) fn take_grant(&self) -> Option<HandOff> {
        self.notify
            .granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.hub.leave(&self.channel, self.id);
    }
}
