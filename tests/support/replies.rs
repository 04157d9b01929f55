//! Comparing the replies of two stores (the model checks): what the contract specifies of an
//! error is its classification.

use redis_locks::{Error, Result};

/// An error reduced to what the contract specifies: its classification.
pub fn class(e: &Error) -> &'static str {
    if e.is_invalid_input() {
        "invalid input"
    } else if e.is_wrong_type() {
        "wrong type"
    } else if e.is_connection() {
        "connection"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_family_conflict() {
        "family conflict"
    } else if e.is_capacity_conflict() {
        "capacity conflict"
    } else {
        "other"
    }
}

/// Equal `Ok` values, or errors of the same classification.
pub fn equal<T: PartialEq>(a: &Result<T>, b: &Result<T>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => a == b,
        (Err(a), Err(b)) => class(a) == class(b),
        _ => false,
    }
}

/// Equal `Ok` values, or errors of the same classification and message (steps whose errors
/// the two stores word alike).
pub fn equal_with_message<T: PartialEq>(a: &Result<T>, b: &Result<T>) -> bool {
    match (a, b) {
        (Err(a), Err(b)) => class(a) == class(b) && a.to_string() == b.to_string(),
        _ => equal(a, b),
    }
}
