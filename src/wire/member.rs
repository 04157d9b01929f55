//! Ticket-queue members: `token`, or `token#weight` for more than one permit.

use super::*;

/// A member of the ticket queue's sorted sets (holders, queue, heartbeats): the token alone
/// for one permit, `token#weight` for more (`member_of` in `queue_common.lua`). Tokens never
/// contain `#` (see `Claim::check`), so the last `#` separates the weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Member<'a> {
    /// The claim's token.
    pub token: &'a str,
    /// Permits held or wanted.
    pub weight: u32,
}

impl<'a> Member<'a> {
    /// Reads a member the way `weight_of` and `token_of` in `queue_common.lua` do: a trailing
    /// `#<digits>` is the weight, anything else is a one-permit token. `None` for a weight
    /// beyond `u32` (no script writes one).
    pub fn parse(member: &'a str) -> Option<Member<'a>> {
        match member.rsplit_once('#') {
            Some((token, digits))
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Some(Member {
                    token,
                    weight: digits.parse().ok()?,
                })
            }
            _ => Some(Member {
                token: member,
                weight: 1,
            }),
        }
    }
}

impl fmt::Display for Member<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.weight == 1 {
            f.write_str(self.token)
        } else {
            write!(f, "{}#{}", self.token, self.weight)
        }
    }
}
