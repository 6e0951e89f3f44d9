//! Connecting to the cluster: the client's options (TLS, a user and password, a leader asked
//! for), the members' URLs, and the first request that proves a member answers, retried until
//! the connect timeout; a refusal that retrying cannot mend (a wrong password or certificate)
//! is said at once, in words a user can act on.

use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use super::options::EtcdOptions;
use super::poll::PollClient;

/// The store's client and the client of its polls, connected to the members `o` names on
/// `runtime`; or why not, naming what to mend.
pub(super) fn connect(
    runtime: &tokio::runtime::Runtime,
    o: &EtcdOptions,
) -> Result<(Client, PollClient), String> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(o.connect_timeout.min(Duration::from_secs(5)))
        .with_require_leader(true)
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(5));
    if o.tls() {
        options = options.with_tls(tls(o)?);
    }
    if let Some((user, password)) = &o.user {
        options = options.with_user(user.clone(), password.clone());
    }
    let urls: Vec<String> = o
        .endpoints
        .iter()
        .map(|e| match (e.contains("://"), o.tls()) {
            (true, _) => e.clone(),
            (false, true) => format!("https://{e}"),
            (false, false) => format!("http://{e}"),
        })
        .collect();
    let deadline = Instant::now() + o.connect_timeout;
    loop {
        let attempt = runtime.block_on(async {
            let mut client = tokio::time::timeout(
                o.connect_timeout,
                Client::connect(&urls, Some(options.clone())),
            )
            .await
            .map_err(|_| "no answer".to_string())?
            .map_err(|e| e.to_string())?;
            // The channel connects lazily: a read proves a member (with a leader) answers.
            tokio::time::timeout(Duration::from_secs(5), client.get("/phalanx/", None))
                .await
                .map_err(|_| "no answer".to_string())?
                .map_err(|e| e.to_string())?;
            let poll = tokio::time::timeout(
                o.connect_timeout,
                PollClient::connect(&urls, options.clone()),
            )
            .await
            .map_err(|_| "no answer".to_string())?
            .map_err(|e| e.to_string())?;
            Ok::<_, String>((client, poll))
        });
        match attempt {
            Ok(connected) => return Ok(connected),
            // A wrong password or certificate will not get better by waiting.
            Err(e) if is_refusal(&e) => return Err(refusal_hint(e)),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!(
                    "no member answered within {:.0?}: {e}",
                    o.connect_timeout
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Errors that retrying cannot mend.
fn is_refusal(e: &str) -> bool {
    let e = e.to_ascii_lowercase();
    [
        "authentication failed",
        "invalid auth",
        "permission denied",
        "certificate",
        "tls",
        "user name",
    ]
    .iter()
    .any(|m| e.contains(m))
}

/// A refusal in words a user can act on, before the client's own (`e`).
fn refusal_hint(e: String) -> String {
    let l = e.to_ascii_lowercase();
    let hint = if l.contains("invalid peer certificate") {
        "the members' certificate is not signed by the CA this client trusts (--rdzv-conf \
         cacert=…, PHALANX_ETCD_CACERT), or does not name the address dialled"
    } else if ["badcertificate", "certificaterequired", "unknownca"]
        .iter()
        .any(|m| l.contains(m))
    {
        "the members refused this client's certificate: they want one signed by their CA \
         (--rdzv-conf cert=…,key=…, PHALANX_ETCD_CERT and PHALANX_ETCD_KEY)"
    } else {
        return e;
    };
    format!("{hint}; etcd's client said: {e}")
}

fn tls(o: &EtcdOptions) -> std::result::Result<TlsOptions, String> {
    let read = |p: &std::path::Path, what: &str| {
        std::fs::read(p).map_err(|e| format!("cannot read the {what} {}: {e}", p.display()))
    };
    let mut t = TlsOptions::new();
    if let Some(ca) = &o.cacert {
        let pem = read(ca, "CA certificate (cacert)")?;
        if !pem.starts_with(b"-----BEGIN") {
            return Err(format!(
                "{} (cacert) is not a PEM certificate",
                ca.display()
            ));
        }
        t = t.ca_certificate(Certificate::from_pem(pem));
    }
    if let Some((cert, key)) = &o.identity {
        let c = read(cert, "client certificate (cert)")?;
        let k = read(key, "client key (key)")?;
        t = t.identity(Identity::from_pem(c, k));
    }
    Ok(t)
}
