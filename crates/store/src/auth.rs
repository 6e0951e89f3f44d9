//! The job's credentials: a job id and a secret token, proven by HMAC in every handshake.

use std::fmt;

use phalanx_core::env;

/// Job id used when `PHALANX_JOB_ID` is unset.
pub const DEFAULT_JOB_ID: &str = "default";

/// A job id and its secret token. The token never appears in `Debug` output or logs.
///
/// ```
/// use phalanx_store::Auth;
/// let auth = Auth::random("job-7");
/// assert_eq!(auth.token.len(), 32);
/// assert_eq!(auth.token_hex().len(), 64);
/// assert!(!format!("{auth:?}").contains(&auth.token_hex()));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Auth {
    /// Identifier of the job, sent in clear in every handshake (two jobs sharing a port never mix).
    pub job_id: String,
    /// Secret shared by every process of the job; may be empty (the challenge still runs).
    pub token: Vec<u8>,
}

impl Auth {
    /// Credentials from explicit parts.
    pub fn new(job_id: impl Into<String>, token: impl Into<Vec<u8>>) -> Self {
        Auth {
            job_id: job_id.into(),
            token: token.into(),
        }
    }

    /// Reads `PHALANX_JOB_ID` (default `"default"`) and `PHALANX_TOKEN` (missing = empty token).
    ///
    /// A token written as hex (even length, hex digits only, as [`Auth::token_hex`] and
    /// `phalanx launch` write it) is decoded to its bytes; any other text is used as-is. The
    /// mapping is deterministic, so every host that sees the same variable gets the same token.
    pub fn from_env() -> Self {
        let job_id = env::get(env::PHALANX_JOB_ID).unwrap_or_else(|| DEFAULT_JOB_ID.to_string());
        let token = env::get(env::PHALANX_TOKEN)
            .map(|t| phalanx_core::hex::decode(&t).unwrap_or_else(|| t.into_bytes()))
            .unwrap_or_default();
        Auth { job_id, token }
    }

    /// A fresh 32-byte random token from the operating system's generator.
    pub fn random(job_id: impl Into<String>) -> Self {
        let mut token = vec![0u8; 32];
        // The OS generator failing is an invariant violation on every platform we support.
        getrandom::fill(&mut token).expect("operating system random generator failed");
        Auth {
            job_id: job_id.into(),
            token,
        }
    }

    /// The token as lowercase hex, the form to put in `PHALANX_TOKEN`.
    pub fn token_hex(&self) -> String {
        phalanx_core::hex::encode(&self.token)
    }

    /// The variables a child process needs to present these credentials
    /// (`PHALANX_JOB_ID`, `PHALANX_TOKEN`), for launchers.
    pub fn env_vars(&self) -> [(&'static str, String); 2] {
        [
            (env::PHALANX_JOB_ID.name, self.job_id.clone()),
            (env::PHALANX_TOKEN.name, self.token_hex()),
        ]
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("job_id", &self.job_id)
            .field(
                "token",
                &format_args!("<{} bytes, hidden>", self.token.len()),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let a = Auth::random("j");
        assert_eq!(phalanx_core::hex::decode(&a.token_hex()).unwrap(), a.token);
        assert_eq!(phalanx_core::hex::decode("0aFf").unwrap(), vec![0x0a, 0xff]);
        assert_eq!(phalanx_core::hex::decode("abc"), None);
        assert_eq!(phalanx_core::hex::decode("zz"), None);
        assert_eq!(phalanx_core::hex::decode(""), None);
    }

    #[test]
    fn random_tokens_differ() {
        assert_ne!(Auth::random("j").token, Auth::random("j").token);
    }

    #[test]
    fn debug_hides_token() {
        let a = Auth::new("job", b"super-secret".to_vec());
        let shown = format!("{a:?}");
        assert!(shown.contains("job"));
        assert!(!shown.contains("super-secret"));
        assert!(shown.contains("12 bytes"));
    }
}
