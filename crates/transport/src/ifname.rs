//! Interface selection: the interface variable that decided (`PHALANX_SOCKET_IFNAME`, else
//! `GLOO_SOCKET_IFNAME`, else `NCCL_SOCKET_IFNAME`: [`phalanx_core::env::socket_ifname`]), or
//! the route to the master. The filter reads NCCL's syntax; Gloo's exact names reach it as
//! `=name,…` ([`SocketIfname::nccl_spec`]).
//!
//! | spec | meaning |
//! |---|---|
//! | `eth0` | interfaces whose name starts with `eth0` |
//! | `eth,ib` | names starting with `eth` or `ib` |
//! | `^docker0,lo` | any interface except those starting with `docker0` or `lo` |
//! | `=eth0` | exactly `eth0` (`^=` excludes exact names) |

use std::net::{IpAddr, UdpSocket};

use phalanx_core::env::SocketIfname;

use crate::{Error, Result};

/// A parsed interface spec in NCCL's syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfFilter {
    exclude: bool,
    exact: bool,
    names: Vec<String>,
}

impl IfFilter {
    /// Parses NCCL's syntax.
    pub fn parse(spec: &str) -> IfFilter {
        let mut s = spec.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let names = s
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        IfFilter {
            exclude,
            exact,
            names,
        }
    }

    /// Whether interface `name` is selected.
    pub fn matches(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|n| {
            if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            }
        });
        hit != self.exclude
    }
}

/// The interface and address this rank listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// Interface name (`lo`, `eth0`, …).
    pub ifname: String,
    /// Its address.
    pub ip: IpAddr,
}

/// [`select_from`] for a spec in NCCL's syntax given as `PHALANX_SOCKET_IFNAME` (errors name
/// that variable).
pub fn select(spec: Option<&str>, master_addr: &str) -> Result<Selected> {
    select_from(spec.map(SocketIfname::phalanx).as_ref(), master_addr)
}

/// Chooses the address to listen on: the first interface `setting` selects (IPv4 first), or,
/// without a setting, the interface whose address routes to `master_addr` (no packet is sent:
/// connecting a UDP socket only consults the routing table).
///
/// # Errors
///
/// [`Error::NoInterface`] when the setting selects no interface with an address; it names the
/// variable that held the setting, its value and the interfaces present.
pub fn select_from(setting: Option<&SocketIfname>, master_addr: &str) -> Result<Selected> {
    let ifaces = if_addrs::get_if_addrs().unwrap_or_default();
    let name_of = |ip: IpAddr| {
        ifaces
            .iter()
            .find(|i| i.ip() == ip)
            .map_or_else(|| "?".to_string(), |i| i.name.clone())
    };
    if let Some(setting) = setting {
        let filter = IfFilter::parse(&setting.nccl_spec());
        let mut candidates: Vec<_> = ifaces.iter().filter(|i| filter.matches(&i.name)).collect();
        candidates.sort_by_key(|i| (!i.ip().is_ipv4(), i.is_loopback()));
        return match candidates.first() {
            Some(i) => Ok(Selected {
                ifname: i.name.clone(),
                ip: i.ip(),
            }),
            None => {
                let mut names: Vec<String> = Vec::new();
                for i in &ifaces {
                    if !names.contains(&i.name) {
                        names.push(i.name.clone());
                    }
                }
                Err(Error::NoInterface {
                    var: setting.origin.var,
                    spec: setting.origin.value.clone(),
                    available: names.join(", "),
                })
            }
        };
    }
    let ip = route_to(master_addr).unwrap_or(IpAddr::from([127, 0, 0, 1]));
    Ok(Selected {
        ifname: name_of(ip),
        ip,
    })
}

fn route_to(master_addr: &str) -> Option<IpAddr> {
    let target = (master_addr, 9).to_socket_addrs_first()?;
    let sock = UdpSocket::bind(if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .ok()?;
    sock.connect(target).ok()?;
    Some(sock.local_addr().ok()?.ip())
}

trait FirstAddr {
    fn to_socket_addrs_first(self) -> Option<std::net::SocketAddr>;
}

impl FirstAddr for (&str, u16) {
    fn to_socket_addrs_first(self) -> Option<std::net::SocketAddr> {
        use std::net::ToSocketAddrs;
        self.to_socket_addrs().ok()?.next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_syntax() {
        let f = IfFilter::parse("eth,ib");
        assert!(f.matches("eth0") && f.matches("ib1") && !f.matches("lo"));
        let f = IfFilter::parse("^docker0,lo");
        assert!(f.matches("eth0") && !f.matches("lo") && !f.matches("docker0"));
        let f = IfFilter::parse("=eth0");
        assert!(f.matches("eth0") && !f.matches("eth01"));
        let f = IfFilter::parse("^=lo");
        assert!(f.matches("lo0") && !f.matches("lo"));
    }

    #[test]
    fn loopback_selection() {
        let s = select(Some("lo"), "127.0.0.1").unwrap();
        assert_eq!(s.ifname, "lo");
        assert!(s.ip.is_loopback());
        let s = select(None, "127.0.0.1").unwrap();
        assert!(s.ip.is_loopback());
        match select(Some("=nonexistent0"), "127.0.0.1") {
            Err(Error::NoInterface { available, .. }) => assert!(available.contains("lo")),
            other => panic!("{other:?}"),
        }
    }

    fn from(var: &'static str, value: &str) -> SocketIfname {
        SocketIfname {
            origin: phalanx_core::env::Origin {
                var,
                value: value.into(),
            },
        }
    }

    #[test]
    fn gloo_names_are_exact_nccl_names_are_prefixes() {
        // "l" is a prefix of "lo": NCCL's syntax selects lo, Gloo's exact names do not.
        let s = select_from(Some(&from("NCCL_SOCKET_IFNAME", "l")), "127.0.0.1").unwrap();
        assert_eq!(s.ifname, "lo");
        let s = select_from(
            Some(&from("GLOO_SOCKET_IFNAME", "nonexistent0,lo")),
            "127.0.0.1",
        );
        assert_eq!(s.unwrap().ifname, "lo");
        match select_from(Some(&from("GLOO_SOCKET_IFNAME", "l")), "127.0.0.1") {
            Err(e @ Error::NoInterface { .. }) => {
                let text = e.to_string();
                assert!(
                    text.starts_with("GLOO_SOCKET_IFNAME=\"l\" matches no interface"),
                    "{text}"
                );
                assert!(
                    text.contains("exact names") && text.contains("lo"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_spec_matching_nothing_names_the_variable_that_held_it() {
        let e = select_from(Some(&from("NCCL_SOCKET_IFNAME", "bogus0")), "127.0.0.1").unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("NCCL_SOCKET_IFNAME=\"bogus0\" matches no interface"),
            "{text}"
        );
        assert!(!text.contains("PHALANX_SOCKET_IFNAME"), "{text}");
        let e = select(Some("bogus0"), "127.0.0.1").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("PHALANX_SOCKET_IFNAME=\"bogus0\""),
            "{e}"
        );
    }
}
