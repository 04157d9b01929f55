//! Layer 0, the vocabulary: the error type, lock names and keys, tokens, options and their
//! limits, and the planted-bug switches of the simulations. Imports nothing else of the crate.

pub(crate) mod bugs;
pub(crate) mod capability;
pub(crate) mod claim;
pub(crate) mod deployment;
pub(crate) mod error;
pub(crate) mod hold_id;
pub(crate) mod keys;
pub(crate) mod options;
pub(crate) mod rate;
pub(crate) mod token;
pub(crate) mod url;
