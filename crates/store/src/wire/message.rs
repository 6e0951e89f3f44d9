//! The messages of the store protocol: one [`Request`] per store operation, one [`Response`]
//! per outcome, and their one-byte codes on the wire.

/// One client request. Timeouts travel with the blocking requests so that the server, not the
/// client, does the waiting (on a condvar, without polling).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// `set(key, value)`.
    Set {
        /// Key.
        key: &'a str,
        /// New value.
        value: &'a [u8],
    },
    /// `get(key)`, waiting at most `timeout_ms`.
    Get {
        /// Key.
        key: &'a str,
        /// How long the server may wait for the key.
        timeout_ms: u64,
    },
    /// `add(key, delta)`.
    Add {
        /// Key.
        key: &'a str,
        /// Increment.
        delta: i64,
    },
    /// `compare_set(key, expected, desired)`.
    CompareSet {
        /// Key.
        key: &'a str,
        /// Value expected now (empty = "missing").
        expected: &'a [u8],
        /// Value to set.
        desired: &'a [u8],
    },
    /// `wait(keys)`, at most `timeout_ms`.
    Wait {
        /// Keys that must all exist.
        keys: Vec<&'a str>,
        /// How long the server may wait.
        timeout_ms: u64,
    },
    /// `check(keys)`.
    Check {
        /// Keys to test.
        keys: Vec<&'a str>,
    },
    /// `delete_key(key)`.
    Delete {
        /// Key.
        key: &'a str,
    },
    /// `num_keys()`.
    NumKeys,
    /// `append(key, value)`.
    Append {
        /// Key.
        key: &'a str,
        /// Bytes to append.
        value: &'a [u8],
    },
    /// `multi_get(keys)`, waiting at most `timeout_ms`.
    MultiGet {
        /// Keys to read.
        keys: Vec<&'a str>,
        /// How long the server may wait.
        timeout_ms: u64,
    },
    /// `multi_set(keys, values)`.
    MultiSet {
        /// Key/value pairs.
        pairs: Vec<(&'a str, &'a [u8])>,
    },
}

impl Request<'_> {
    /// The store operation's name, for errors and logs.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Set { .. } => "set",
            Request::Get { .. } => "get",
            Request::Add { .. } => "add",
            Request::CompareSet { .. } => "compare_set",
            Request::Wait { .. } => "wait",
            Request::Check { .. } => "check",
            Request::Delete { .. } => "delete_key",
            Request::NumKeys => "num_keys",
            Request::Append { .. } => "append",
            Request::MultiGet { .. } => "multi_get",
            Request::MultiSet { .. } => "multi_set",
        }
    }
}

/// One server reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    /// Done, nothing to return (`set`, `wait`, `append`, `multi_set`).
    Unit,
    /// A value (`get`, `compare_set`).
    Value(&'a [u8]),
    /// An integer (`add`, `num_keys`).
    Int(i64),
    /// A flag (`check`, `delete_key`).
    Bool(bool),
    /// Several values (`multi_get`).
    Values(Vec<&'a [u8]>),
    /// The wait ended with `key` still missing.
    Timeout {
        /// The first missing key.
        key: &'a str,
    },
    /// The operation was refused for `key` (e.g. `add` on a non-integer value).
    Error {
        /// The key involved (may be empty).
        key: &'a str,
        /// Why.
        message: &'a str,
    },
}

pub(in crate::wire) mod op {
    pub(in crate::wire) const SET: u8 = 1;
    pub(in crate::wire) const GET: u8 = 2;
    pub(in crate::wire) const ADD: u8 = 3;
    pub(in crate::wire) const COMPARE_SET: u8 = 4;
    pub(in crate::wire) const WAIT: u8 = 5;
    pub(in crate::wire) const CHECK: u8 = 6;
    pub(in crate::wire) const DELETE: u8 = 7;
    pub(in crate::wire) const NUM_KEYS: u8 = 8;
    pub(in crate::wire) const APPEND: u8 = 9;
    pub(in crate::wire) const MULTI_GET: u8 = 10;
    pub(in crate::wire) const MULTI_SET: u8 = 11;
}

pub(in crate::wire) mod tag {
    pub(in crate::wire) const UNIT: u8 = 0;
    pub(in crate::wire) const VALUE: u8 = 1;
    pub(in crate::wire) const INT: u8 = 2;
    pub(in crate::wire) const BOOL: u8 = 3;
    pub(in crate::wire) const VALUES: u8 = 4;
    pub(in crate::wire) const TIMEOUT: u8 = 5;
    pub(in crate::wire) const ERROR: u8 = 6;
}
