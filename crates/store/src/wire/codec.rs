//! Little-endian writer and a bounds-checked reader over byte slices, and [`DecodeError`], what
//! the reader (and every decoder built on it) reports.

use super::limits::MAX_FRAME_LEN;

/// Why some bytes are not a valid message. Its text names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    reason: String,
}

impl DecodeError {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        DecodeError {
            reason: reason.into(),
        }
    }
    /// What was wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for DecodeError {}

/// Builds one frame: a 4-byte length placeholder, then the body.
pub(crate) struct FrameWriter {
    buf: Vec<u8>,
}

impl FrameWriter {
    pub(crate) fn new(capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(capacity + 4);
        buf.extend_from_slice(&[0; 4]);
        FrameWriter { buf }
    }
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Length-prefixed bytes. Callers have checked the length against the protocol limits.
    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
        self
    }
    /// Patches the length prefix; `None` when the body exceeds [`MAX_FRAME_LEN`].
    pub(crate) fn finish(mut self) -> Option<Vec<u8>> {
        let body = self.buf.len() - 4;
        if body > MAX_FRAME_LEN {
            return None;
        }
        self.buf[..4].copy_from_slice(&(body as u32).to_le_bytes());
        Some(self.buf)
    }
}

/// Reads fields from a frame body, refusing anything that runs past its end or a limit.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::new(format!(
                "truncated {what}: needs {n} bytes, {} left",
                self.buf.len()
            )));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    pub(crate) fn i64(&mut self, what: &str) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    /// Length-prefixed bytes of at most `max`.
    pub(crate) fn bytes(&mut self, max: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(DecodeError::new(format!(
                "{what} of {n} bytes exceeds the limit of {max}"
            )));
        }
        self.take(n, what)
    }
    /// Length-prefixed UTF-8 of at most `max` bytes.
    pub(crate) fn str(&mut self, max: usize, what: &str) -> Result<&'a str, DecodeError> {
        std::str::from_utf8(self.bytes(max, what)?)
            .map_err(|_| DecodeError::new(format!("{what} is not UTF-8")))
    }
    /// A count of items, each at least `min_item` bytes long: bounded by `max` and by the
    /// bytes left, so a lying count cannot make the caller reserve memory.
    pub(crate) fn count(
        &mut self,
        max: usize,
        min_item: usize,
        what: &str,
    ) -> Result<usize, DecodeError> {
        let n = self.u32(what)? as usize;
        if n > max || n.saturating_mul(min_item) > self.buf.len() {
            return Err(DecodeError::new(format!(
                "{what} of {n} exceeds the limit of {max} or the {} bytes left",
                self.buf.len()
            )));
        }
        Ok(n)
    }
    pub(crate) fn end(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::new(format!(
                "{} trailing bytes after the message",
                self.buf.len()
            )))
        }
    }
}
