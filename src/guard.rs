//! The methods every guard shares, written once and documented once.

/// Implements the common guard API on a newtype around `Hold`.
macro_rules! guard_methods {
    ($guard:ident) => {
        impl $guard {
            /// The fencing token of this hold: strictly greater than every earlier exclusive
            /// grant's on this lock name (a shared hold reports the last exclusive grant's).
            /// Pass it to the resource you protect and have it refuse tokens lower than the
            /// highest it has seen: that stops a holder whose lease lapsed unnoticed.
            pub fn fencing_token(&self) -> u64 {
                self.hold.fencing_token()
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                self.hold.name()
            }

            /// The claim token the store knows this hold by (feature `testing`).
            #[cfg(feature = "testing")]
            pub fn token(&self) -> String {
                self.hold.token()
            }

            /// True while the lease can be trusted, answered from the local clock without a
            /// round trip: false once a renewal was refused, or once the lease may have
            /// lapsed (measured from the send of the last confirmed grant or renewal).
            pub fn is_held(&self) -> bool {
                self.hold.is_held()
            }

            /// The instant (local monotonic clock) until which the lease is trusted.
            pub fn valid_until(&self) -> tokio::time::Instant {
                self.hold.valid_until()
            }

            /// Resolves when the lease can no longer be trusted: a renewal was refused, or
            /// no renewal was confirmed before the lease ran out. Await it next to your work
            /// (`tokio::select!`) to stop when the lock is gone.
            ///
            /// # Cancel safety
            /// Cancel safe: dropping it changes nothing.
            pub async fn lost(&self) {
                self.hold.lost().await
            }

            /// Renews the lease to `lease` from now (and keeps that length for later automatic
            /// renewals). `Ok(false)`: the lease was already gone.
            ///
            /// # Cancel safety
            /// If cancelled, the renewal may or may not have happened (and may still happen):
            /// the guard then trusts the hold no longer than either outcome allows (the
            /// shorter of the old deadline and `lease` from the send), and later renewals
            /// keep that cap.
            pub async fn extend(&mut self, lease: std::time::Duration) -> $crate::Result<bool> {
                self.hold.extend(lease).await
            }

            /// Releases the lock. `Ok(true)` if this guard still held it; `Ok(false)` if it
            /// no longer did (the lease lapsed or was taken over); `Err` if Redis could not
            /// be asked (the lease then lapses on its own).
            ///
            /// # Cancel safety
            /// If cancelled after the request left, the release may or may not have happened;
            /// the lease then lapses on its own.
            pub async fn release(self) -> $crate::Result<bool> {
                self.hold.release().await
            }
        }

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($guard))
                    .field("name", &self.hold.name())
                    .field("fencing_token", &self.hold.fencing_token())
                    .field("is_held", &self.hold.is_held())
                    .finish()
            }
        }
    };
}

/// Implements the option builder methods shared by every handle.
macro_rules! handle_options {
    ($handle:ident) => {
        impl $handle {
            /// Lease of each hold (default 30 s; 10 ms to one year). With auto-renewal on, a
            /// live guard keeps renewing it; a crashed holder blocks others for at most this.
            pub fn lease(mut self, lease: std::time::Duration) -> Self {
                self.ctx.opts.lease = lease;
                self
            }

            /// Renew the lease in the background while the guard lives (default on).
            pub fn auto_renew(mut self, on: bool) -> Self {
                self.ctx.opts.auto_renew = on;
                self
            }

            /// How often the lease is renewed (default: a third of the lease; must be shorter
            /// than the lease).
            pub fn renew_every(mut self, every: std::time::Duration) -> Self {
                self.ctx.opts.renew_every = Some(every);
                self
            }

            /// Heartbeat window of a waiter (default: the lease, at most 5 s): a waiter that
            /// stops attempting for this long (its process died) is dropped from the queue, and
            /// a grant handed to it lapses. Waiters attempt at least every third of it. Keep it
            /// no longer than the lease, so a dead waiter blocks others no longer than a dead
            /// holder would.
            pub fn heartbeat(mut self, window: std::time::Duration) -> Self {
                self.ctx.opts.heartbeat = Some(window);
                self
            }

            /// The longest a waiter sleeps between attempts when no wake-up arrives (default
            /// 1 s). Wake-ups from Redis normally come first; this bounds the cost of a lost one.
            pub fn retry_interval(mut self, interval: std::time::Duration) -> Self {
                self.ctx.opts.retry_interval = interval;
                self
            }

            /// After each grant, wait (Redis `WAIT`) until `replicas` replicas acknowledged it,
            /// at most `timeout`; if fewer did, release it again and fail with
            /// [`Error::ReplicasNotReached`](crate::Error::ReplicasNotReached). Narrows the
            /// window in which a failover to a replica loses the grant; it costs a replication
            /// round trip per acquisition.
            pub fn wait_replicas(mut self, replicas: u32, timeout: std::time::Duration) -> Self {
                self.ctx.opts.wait_replicas = Some((replicas, timeout));
                self
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                self.ctx.keys.as_ref().map(|k| k.name()).unwrap_or("")
            }
        }
    };
}

pub(crate) use guard_methods;
pub(crate) use handle_options;
