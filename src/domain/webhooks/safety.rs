//! URL safety (contract section 15): a webhook never reaches a loopback, private,
//! link-local, multicast or unspecified address, unless
//! `ORBIT_WEBHOOK_ALLOW_PRIVATE` says so. Checked against the resolved addresses at
//! creation and again before every delivery ([`check`]), and once more by the
//! HTTP client's resolver ([`SafeResolver`]) for the connection it opens, so a
//! name that resolves elsewhere between the check and the connection (DNS
//! rebinding) is refused too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// Why an address is refused, or `None` when it is a public one.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            if v6.is_unspecified() {
                return Some("unspecified");
            }
            if v6.is_loopback() {
                return Some("loopback");
            }
            if let Some(v4) = embedded_v4(v6) {
                return forbidden_v4(v4);
            }
            let s = v6.segments();
            if s[..3] == [0x64, 0xff9b, 1] {
                // 64:ff9b:1::/48, NAT64 for local use (RFC 8215): some network's own.
                Some("private")
            } else if s[..2] == [0x2001, 0] {
                // 2001::/32, Teredo: tunnelled to an IPv4 client it hides.
                Some("Teredo")
            } else if s[0] & 0xff00 == 0xff00 {
                Some("multicast")
            } else if s[0] & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if s[0] & 0xfe00 == 0xfc00 || s[0] & 0xffc0 == 0xfec0 {
                Some("private")
            } else {
                None
            }
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if ip.is_unspecified() || o[0] == 0 {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() || (o[0] == 100 && o[1] & 0xc0 == 64) {
        // 100.64.0.0/10, shared address space (carrier NAT), is private too.
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast() {
        Some("broadcast")
    } else {
        None
    }
}

/// The IPv4 address an IPv6 address carries, and reaches through it: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::/48`, the
/// IPv4 address of its router).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match s[..6] {
        [0, 0, 0, 0, 0, 0xffff]
        | [0, 0, 0, 0, 0xffff, 0]
        | [0, 0, 0, 0, 0, 0]
        | [0x64, 0xff9b, 0, 0, 0, 0] => Some(v4(s[6], s[7])),
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        _ => None,
    }
}

/// Why a URL may not be delivered to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It is or resolves to a forbidden address.
    Forbidden(String),
    /// Its host does not resolve.
    Unresolved(String),
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Refusal::Forbidden(m) | Refusal::Unresolved(m) => m,
        }
    }
}

/// How long the host's lookup may take: a stalled resolver (glibc waits 5 s a server)
/// must leave the attempt inside its claim, which allows the send's own timeout and
/// 5 s more (`deliver`); a lookup that takes longer is refused like one that does not
/// resolve (its `getaddrinfo` keeps a blocking thread of the engine's runtime until
/// the resolver gives up).
pub const LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Resolves the URL's host and checks every address it names. With `allow_private`,
/// only that it resolves.
pub async fn check(url: &reqwest::Url, allow_private: bool) -> Result<(), Refusal> {
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<IpAddr> = match url.host() {
        Some(url::Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
        Some(url::Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
        Some(url::Host::Domain(name)) => {
            match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((name, port))).await
            {
                Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                Ok(Err(_)) => Vec::new(),
                Err(_) => {
                    return Err(Refusal::Unresolved(format!(
                        "the host {name} did not resolve within {} s",
                        LOOKUP_TIMEOUT.as_secs()
                    )))
                }
            }
        }
        None => Vec::new(),
    };
    if addrs.is_empty() {
        return Err(Refusal::Unresolved(format!(
            "the host {} does not resolve",
            url.host_str().unwrap_or("")
        )));
    }
    if allow_private {
        return Ok(());
    }
    for ip in addrs {
        if let Some(why) = forbidden(ip) {
            return Err(Refusal::Forbidden(format!(
                "the host {} is or resolves to {ip}, a {why} address",
                url.host_str().unwrap_or("")
            )));
        }
    }
    Ok(())
}

/// The delivery client's resolver: the system's, with every forbidden address
/// refused (unless private addresses are allowed).
pub struct SafeResolver {
    pub allow_private: bool,
}

impl reqwest::dns::Resolve for SafeResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !allow_private {
                if let Some(bad) = found.iter().find(|a| forbidden(a.ip()).is_some()) {
                    let why = forbidden(bad.ip()).unwrap_or("forbidden");
                    return Err(format!("{host} resolves to {}, a {why} address", bad.ip()).into());
                }
            }
            let addrs: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

impl SafeResolver {
    pub fn shared(allow_private: bool) -> Arc<SafeResolver> {
        Arc::new(SafeResolver { allow_private })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forbidden_ranges() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "224.0.0.1",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            // Found by a probe on 2026-12-07: other forms that carry an IPv4 address.
            "::ffff:0:a00:1",
            "::a00:1",
            "::127.0.0.1",
            "64:ff9b:1::a00:1",
            "64:ff9b:1:a00:1::",
            "2002:a00:1::",
            "2002:7f00:1::",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        ] {
            assert!(forbidden(ip.parse().unwrap()).is_some(), "{ip} allowed");
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "::ffff:0:808:808",
            "2002:808:808::1",
            "2001:db9::1",
        ] {
            assert!(forbidden(ip.parse().unwrap()).is_none(), "{ip} refused");
        }
    }
}
