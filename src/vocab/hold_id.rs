//! [`HoldId`]: the name of one live hold, as text that crosses process boundaries.
//!
//! The text form is versioned and stable (see `docs/decisions/hold-ids.md`):
//! `rlh1:<kind>:<fence>:<token>:<name>`. The parser accepts exactly what `Display` writes.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::vocab::claim::{Claim, Preference, Request};
use crate::vocab::error::{Error, Result};

/// The version tag every hold id starts with.
const VERSION: &str = "rlh1";
/// How many characters of the token `Debug` shows (the id is a capability).
const SHOWN_TOKEN_CHARS: usize = 16;

/// The name of one live hold: lock name, kind of hold, claim token and fence. Hand it to
/// another process (a job payload, a file, an environment variable) and resume the hold
/// there, or release or extend it without a guard.
///
/// Get one from any guard with [`Guard::hold_id`](crate::Guard::hold_id) (the guard keeps
/// the hold) or [`Guard::detach`](crate::Guard::detach) (the guard gives it up without
/// releasing it). Its text form (`Display`, parsed back by `FromStr`) is versioned and
/// stable: `rlh1:<kind>:<fence>:<token>:<name>`. It names nothing of the process that made
/// it: the key prefix is the resuming client's.
///
/// The token in it is a capability: whoever has the id can extend, release or resume the
/// hold. Keep ids where you would keep a password; `Debug` shows only a prefix of the token.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use redis_locks::HoldId;
/// let client = redis_locks::LockClient::in_memory();
/// let guard = client.mutex("job-17").lock().await?;
/// let text = guard.detach().to_string(); // put it into the job's payload
/// let id: HoldId = text.parse()?;
/// assert_eq!(id.name(), "job-17");
/// let resumed = client.mutex("job-17").resume(&id).await?;
/// assert!(resumed.release().await?);
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HoldId {
    name: String,
    request: Request,
    token: String,
    fence: u64,
}

impl HoldId {
    pub(crate) fn new(name: &str, request: Request, token: String, fence: u64) -> Self {
        HoldId {
            name: name.to_owned(),
            request,
            token,
            fence,
        }
    }

    /// The lock's name.
    ///
    /// ```
    /// let id: redis_locks::HoldId = "rlh1:mutex:3:0123456789abcdef0123456789abcdef:jobs:17"
    ///     .parse()
    ///     .unwrap();
    /// assert_eq!(id.name(), "jobs:17");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of the grant the id was taken from.
    ///
    /// ```
    /// let id: redis_locks::HoldId = "rlh1:fair:42:0123456789abcdef0123456789abcdef:jobs"
    ///     .parse()
    ///     .unwrap();
    /// assert_eq!(id.fencing_token(), 42);
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// The kind of hold, as in the text form: `mutex`, `read-writer`, `read-reader`,
    /// `read-fair`, `write-writer`, `write-reader`, `write-fair`, `fair` or
    /// `sem-<permits>-<capacity>`.
    ///
    /// ```
    /// let id: redis_locks::HoldId = "rlh1:sem-2-5:0:0123456789abcdef0123456789abcdef:exports"
    ///     .parse()
    ///     .unwrap();
    /// assert_eq!(id.kind(), "sem-2-5");
    /// ```
    pub fn kind(&self) -> String {
        kind_text(self.request)
    }

    /// What the hold is, as the handles ask for it.
    pub(crate) fn request(&self) -> Request {
        self.request
    }

    /// The claim that names this hold on the server, asking for `lease` from now.
    pub(crate) fn claim(&self, lease: Duration, heartbeat: Duration) -> Claim {
        let mut claim = self.request.claim(lease, heartbeat);
        claim.token.clone_from(&self.token);
        claim
    }
}

fn preference_text(p: Preference) -> &'static str {
    match p {
        Preference::Writer => "writer",
        Preference::Reader => "reader",
        Preference::Fair => "fair",
    }
}

/// The `<kind>` field of the text form.
pub(crate) fn kind_text(request: Request) -> String {
    match request {
        Request::Mutex => "mutex".into(),
        Request::Read(p) => format!("read-{}", preference_text(p)),
        Request::Write(p) => format!("write-{}", preference_text(p)),
        Request::FairLock => "fair".into(),
        Request::Semaphore { permits, capacity } => format!("sem-{permits}-{capacity}"),
    }
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::MalformedHoldId {
        reason: reason.into(),
    }
}

/// A decimal number as `Display` writes it: digits only, no leading zero (but `0`). The
/// error does not repeat `text`.
fn number<T: FromStr>(text: &str, what: &str) -> Result<T> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    match text.parse() {
        Ok(n) if canonical => Ok(n),
        // The text is not repeated: a field that lost its `:` may carry the token.
        _ => Err(malformed(format!(
            "the {what} is not a decimal number without leading zeros (a field of {} \
             characters); pass the text a guard's hold_id() or detach() wrote",
            text.chars().count()
        ))),
    }
}

fn parse_preference(text: &str) -> Result<Preference> {
    match text {
        "writer" => Ok(Preference::Writer),
        "reader" => Ok(Preference::Reader),
        "fair" => Ok(Preference::Fair),
        _ => Err(malformed(
            "unknown RwLock preference: a read or write kind ends in -writer, -reader or -fair",
        )),
    }
}

/// What a malformed `<kind>` field is told (the field itself is not repeated: it may carry
/// the token).
const KINDS: &str = "unknown kind of hold: the kinds are mutex, read-<preference>, \
                     write-<preference>, fair and sem-<permits>-<capacity>";

fn parse_kind(text: &str) -> Result<Request> {
    if let Some(p) = text.strip_prefix("read-") {
        return Ok(Request::Read(parse_preference(p)?));
    }
    if let Some(p) = text.strip_prefix("write-") {
        return Ok(Request::Write(parse_preference(p)?));
    }
    if let Some(rest) = text.strip_prefix("sem-") {
        let (permits, capacity) = rest
            .split_once('-')
            .ok_or_else(|| malformed("a semaphore kind is sem-<permits>-<capacity>"))?;
        let permits: u32 = number(permits, "permit count")?;
        let capacity: u32 = number(capacity, "semaphore capacity")?;
        let max = crate::vocab::claim::MAX_PERMITS;
        if permits == 0 || capacity == 0 || permits > capacity || capacity > max {
            return Err(malformed(format!(
                "{permits} of {capacity} permits: a permit count is 1 to the capacity, at most {max}"
            )));
        }
        return Ok(Request::Semaphore { permits, capacity });
    }
    match text {
        "mutex" => Ok(Request::Mutex),
        "fair" => Ok(Request::FairLock),
        _ => Err(malformed(KINDS)),
    }
}

impl fmt::Display for HoldId {
    /// The stable text form, `rlh1:<kind>:<fence>:<token>:<name>` (with the whole token).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{VERSION}:{}:{}:{}:{}",
            kind_text(self.request),
            self.fence,
            self.token,
            self.name
        )
    }
}

/// Shows the token's first characters only: the id is a capability.
impl fmt::Debug for HoldId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self.token.chars().take(SHOWN_TOKEN_CHARS).collect();
        f.debug_struct("HoldId")
            .field("name", &self.name)
            .field("kind", &kind_text(self.request))
            .field("fence", &self.fence)
            .field("token", &format_args!("{shown}…"))
            .finish()
    }
}

impl FromStr for HoldId {
    type Err = Error;

    /// Parses the text form `Display` writes; anything else is
    /// [`Error::MalformedHoldId`](crate::Error::MalformedHoldId) (whose text never repeats
    /// the token).
    fn from_str(text: &str) -> Result<Self> {
        let mut fields = text.splitn(5, ':');
        let mut next = |what: &str| {
            fields.next().ok_or_else(|| {
                malformed(format!(
                    "the {what} is missing: a hold id reads rlh1:<kind>:<fence>:<token>:<name>"
                ))
            })
        };
        let version = next("version")?;
        if version != VERSION {
            return Err(malformed(
                "it does not start with `rlh1:` (a hold id of another version, or no hold id); \
                 pass the text a guard's hold_id() or detach() wrote",
            ));
        }
        let request = parse_kind(next("kind")?)?;
        let fence = number(next("fence")?, "fence")?;
        let token = next("token")?;
        crate::vocab::token::check(token).map_err(|_| {
            malformed("the token is not 1 to 64 characters of A-Z, a-z, 0-9, _ and -")
        })?;
        let name = next("lock name")?;
        crate::vocab::keys::LockKeys::new("rl", name)
            .map_err(|e| malformed(format!("the lock name is not valid: {e}")))?;
        Ok(HoldId::new(name, request, token.to_owned(), fence))
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for HoldId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for HoldId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef-host-1";

    #[test]
    fn every_kind_round_trips() {
        let kinds = [
            Request::Mutex,
            Request::Read(Preference::Writer),
            Request::Read(Preference::Reader),
            Request::Read(Preference::Fair),
            Request::Write(Preference::Writer),
            Request::Write(Preference::Reader),
            Request::Write(Preference::Fair),
            Request::FairLock,
            Request::Semaphore {
                permits: 3,
                capacity: 10,
            },
        ];
        for request in kinds {
            let id = HoldId::new("a:b c:{d}", request, TOKEN.into(), 17);
            let text = id.to_string();
            let back: HoldId = text.parse().expect(&text);
            assert_eq!(back, id, "{text}");
            assert_eq!(back.to_string(), text);
        }
    }

    #[test]
    fn malformed_ids_are_refused_without_echoing_the_token() {
        let bad = [
            "",
            "rlh1",
            "rlh2:mutex:1:abc:n",
            "rlh1:mutex:1:abc",
            "rlh1:mutex:01:abc:n",
            "rlh1:mutex:+1:abc:n",
            "rlh1:mutex:18446744073709551616:abc:n",
            "rlh1:mutex:1::n",
            "rlh1:mutex:1:a|b:n",
            "rlh1:mutex:1:abc:",
            "rlh1:mutex:1:abc:}n",
            "rlh1:lock:1:abc:n",
            "rlh1:read-any:1:abc:n",
            "rlh1:sem-0-3:1:abc:n",
            "rlh1:sem-4-3:1:abc:n",
            "rlh1:sem-3:1:abc:n",
            "rlh1:sem-1-99999999:1:abc:n",
            " rlh1:mutex:1:abc:n",
        ];
        for text in bad {
            let err = text.parse::<HoldId>().expect_err(text);
            assert!(
                matches!(err, Error::MalformedHoldId { .. }),
                "{text}: {err}"
            );
        }
        for secret in [
            "rlh1:mutex:1:s3cr3t_t0ken:",
            "rlh1:mutex:42s3cr3t_t0ken:jobs",
            "rlh1:mutexs3cr3t_t0ken:1:jobs",
            "rlh1:read-s3cr3t_t0ken:1:jobs",
        ] {
            let err = secret.parse::<HoldId>().unwrap_err();
            assert!(!err.to_string().contains("s3cr3t"), "{err}");
            assert!(!format!("{err:?}").contains("s3cr3t"), "{err:?}");
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_reads_the_text_form() {
        use serde::de::value::{Error as ValueError, StrDeserializer};
        use serde::Deserialize;
        let id = HoldId::new("jobs", Request::FairLock, TOKEN.into(), 9);
        let text = id.to_string();
        let back = HoldId::deserialize(StrDeserializer::<ValueError>::new(&text)).expect("id");
        assert_eq!(back, id);
        let bad = HoldId::deserialize(StrDeserializer::<ValueError>::new("rlh1:fair:9"));
        assert!(bad.unwrap_err().to_string().contains("malformed hold id"));
    }

    #[test]
    fn debug_shows_only_a_prefix_of_the_token() {
        let id = HoldId::new("n", Request::Mutex, TOKEN.into(), 1);
        let debug = format!("{id:?}");
        assert!(debug.contains(&TOKEN[..SHOWN_TOKEN_CHARS]), "{debug}");
        assert!(!debug.contains(&TOKEN[..SHOWN_TOKEN_CHARS + 1]), "{debug}");
    }
}
