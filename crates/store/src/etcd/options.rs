//! [`EtcdOptions`]: where the etcd cluster is, who the job is inside it, and how to prove it.

use std::path::PathBuf;
use std::time::Duration;

use phalanx_core::env::{
    PHALANX_ETCD_CACERT as CACERT, PHALANX_ETCD_CERT as CERT, PHALANX_ETCD_ENDPOINTS as ENDPOINTS,
    PHALANX_ETCD_KEY as KEY, PHALANX_ETCD_PASSWORD as PASSWORD, PHALANX_ETCD_PREFIX as PREFIX,
    PHALANX_ETCD_USER as USER,
};

use crate::{Error, Result};

/// How to reach a job's keys in an etcd cluster.
///
/// ```
/// use phalanx_store::EtcdOptions;
/// let o = EtcdOptions::new("10.0.0.1:2379, 10.0.0.2:2379", "job7").unwrap();
/// assert_eq!(o.endpoints, ["10.0.0.1:2379", "10.0.0.2:2379"]);
/// assert_eq!(o.prefix, "/phalanx/job7/");
/// assert!(EtcdOptions::new("", "job7").is_err());
/// assert!(EtcdOptions::new("h1:2379", "a/b").unwrap_err().to_string().contains("a/b"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// `host:port` of each member to try (`http://` or `https://` may lead).
    pub endpoints: Vec<String>,
    /// Every key of the job lives under it (`/phalanx/<job>/`).
    pub prefix: String,
    /// TLS: the authority's certificate (PEM); the endpoints are reached over `https`.
    pub cacert: Option<PathBuf>,
    /// TLS: this client's certificate and key (PEM), for members that ask for one.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// etcd's user and password.
    pub user: Option<(String, String)>,
    /// How long to keep trying to reach a member before giving up.
    pub connect_timeout: Duration,
}

impl EtcdOptions {
    /// Endpoints as `--rdzv-endpoint` spells them (comma-separated) and the job's id.
    pub fn new(endpoints: &str, job: &str) -> Result<EtcdOptions> {
        let endpoints: Vec<String> = endpoints
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect();
        if endpoints.is_empty() {
            return Err(invalid(
                "no etcd endpoint given (expected host:port[,host:port…])",
            ));
        }
        for e in &endpoints {
            let bare = e
                .strip_prefix("http://")
                .or_else(|| e.strip_prefix("https://"))
                .unwrap_or(e);
            let port_ok = bare
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
            if !port_ok {
                return Err(invalid(&format!(
                    "etcd endpoint {e:?} is not host:port (etcd's client port is usually 2379)"
                )));
            }
        }
        if job.is_empty()
            || !job
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(invalid(&format!(
                "job id {job:?} cannot name etcd keys: use letters, digits, '-', '_' and '.'"
            )));
        }
        Ok(EtcdOptions {
            endpoints,
            prefix: format!("/phalanx/{job}/"),
            cacert: None,
            identity: None,
            user: None,
            connect_timeout: phalanx_core::DEFAULT_TIMEOUT,
        })
    }

    /// The endpoints as one string, for messages.
    pub fn endpoints_text(&self) -> String {
        self.endpoints.join(",")
    }

    /// Whether the members are reached over TLS.
    pub fn tls(&self) -> bool {
        self.cacert.is_some()
            || self.identity.is_some()
            || self.endpoints.iter().any(|e| e.starts_with("https://"))
    }

    /// The variables that let a worker reach the same keys ([`EtcdOptions::from_env`]),
    /// `PHALANX_ETCD_*`.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        let mut vars = vec![
            (ENDPOINTS.name, self.endpoints_text()),
            (PREFIX.name, self.prefix.clone()),
        ];
        vars.extend(self.cacert.as_ref().map(|c| (CACERT.name, path(c))));
        if let Some((cert, key)) = &self.identity {
            vars.push((CERT.name, path(cert)));
            vars.push((KEY.name, path(key)));
        }
        if let Some((user, password)) = &self.user {
            vars.push((USER.name, user.clone()));
            vars.push((PASSWORD.name, password.clone()));
        }
        vars
    }

    /// The options a launcher handed down ([`EtcdOptions::to_env`]), or `None` when
    /// `PHALANX_ETCD_ENDPOINTS` is unset (the job's store is not etcd).
    pub fn from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<EtcdOptions>> {
        let Some(endpoints) = var(ENDPOINTS.name) else {
            return Ok(None);
        };
        let prefix = var(PREFIX.name).ok_or_else(|| {
            invalid(&format!(
                "{} is set but {} is not",
                ENDPOINTS.name, PREFIX.name
            ))
        })?;
        let mut o = EtcdOptions::new(&endpoints, "job")?;
        if !prefix.starts_with('/') || !prefix.ends_with('/') {
            return Err(invalid(&format!(
                "{}={prefix:?}: expected a prefix that starts and ends with '/'",
                PREFIX.name
            )));
        }
        o.prefix = prefix;
        o.cacert = var(CACERT.name).map(PathBuf::from);
        o.identity = match (var(CERT.name), var(KEY.name)) {
            (Some(c), Some(k)) => Some((c.into(), k.into())),
            (None, None) => None,
            _ => {
                return Err(invalid(&format!(
                    "{} and {} go together",
                    CERT.name, KEY.name
                )))
            }
        };
        o.user = match (var(USER.name), var(PASSWORD.name)) {
            (Some(u), Some(p)) => Some((u, p)),
            (None, None) => None,
            _ => {
                return Err(invalid(&format!(
                    "{} and {} go together",
                    USER.name, PASSWORD.name
                )))
            }
        };
        Ok(Some(o))
    }
}

fn invalid(reason: &str) -> Error {
    Error::Invalid {
        reason: reason.to_string(),
    }
}
