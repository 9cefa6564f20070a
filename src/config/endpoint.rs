//! One `[etcd] endpoints` entry: scheme, host (an IP address or a host name) and
//! port (issue 12, "Host names").
//!
//! Owns: what an endpoint may look like, and an error that names what is wrong
//! with one that does not. Must never: resolve a name (this is pure: names are
//! resolved by `crate::resolve` in a child process, DESIGN §5), or accept
//! anything it would have to guess about (a path, a user, an unbracketed IPv6
//! address, a missing port).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest host name DNS carries (RFC 1035: 255 octets on the wire, 253 as text).
const MAX_NAME: usize = 253;
/// Longest label of a host name (RFC 1035).
const MAX_LABEL: usize = 63;

/// The host part of an endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// An IP literal: connected to as it is.
    Ip(IpAddr),
    /// A host name: resolved outside the loop (crate::resolve), and the name the
    /// TLS certificate is checked against.
    Name(String),
}

/// A parsed endpoint, e.g. `https://etcd1.example:2379` or `http://[::1]:2379`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub https: bool,
    pub host: Host,
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        match &self.host {
            Host::Ip(ip) => f.write_str(&url(self.https, *ip, self.port)),
            Host::Name(n) => write!(f, "{scheme}://{n}:{}", self.port),
        }
    }
}

/// `http(s)://IP:port`, with IPv6 addresses in brackets.
pub fn url(https: bool, ip: IpAddr, port: u16) -> String {
    let scheme = if https { "https" } else { "http" };
    match ip {
        IpAddr::V4(a) => format!("{scheme}://{a}:{port}"),
        IpAddr::V6(a) => format!("{scheme}://[{a}]:{port}"),
    }
}

impl Endpoint {
    /// Parse `http(s)://host:port[/]`, `host` an IPv4 address, a bracketed IPv6
    /// address or a host name. The error names what is wrong (the caller adds
    /// which entry it was).
    pub fn parse(u: &str) -> Result<Endpoint, String> {
        let (https, rest) = if let Some(r) = u.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = u.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!(
                "\"{u}\" must start with http:// or https://, e.g. http://etcd1.example:2379"
            ));
        };
        let hostport = rest.strip_suffix('/').unwrap_or(rest);
        if let Some(c) = hostport
            .chars()
            .find(|c| matches!(c, '/' | '?' | '#' | '@'))
        {
            return Err(format!(
                "\"{u}\": only scheme://host:port is allowed (found {c:?}: no path, query or user)"
            ));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let Some((addr, after)) = v6.split_once(']') else {
                return Err(format!("\"{u}\": an IPv6 address opened with [ has no ]"));
            };
            let ip: Ipv6Addr = addr
                .parse()
                .map_err(|_| format!("\"{u}\": [{addr}] is not an IPv6 address"))?;
            let port = after.strip_prefix(':').ok_or_else(|| {
                format!("\"{u}\": the port is missing (e.g. http://[{addr}]:2379)")
            })?;
            (Host::Ip(IpAddr::V6(ip)), port)
        } else {
            let Some((h, port)) = hostport.rsplit_once(':') else {
                return Err(format!(
                    "\"{u}\": the port is missing (e.g. http://{hostport}:2379)"
                ));
            };
            if h.contains(':') {
                return Err(format!(
                    "\"{u}\": an IPv6 address must be in brackets, e.g. http://[::1]:2379"
                ));
            }
            if h.is_empty() {
                return Err(format!("\"{u}\": the host name is empty"));
            }
            let host = match h.parse::<Ipv4Addr>() {
                Ok(ip) => Host::Ip(IpAddr::V4(ip)),
                Err(_) => Host::Name(check_name(h).map_err(|why| format!("\"{u}\": {why}"))?),
            };
            (host, port)
        };
        let port = parse_port(port).map_err(|why| format!("\"{u}\": {why}"))?;
        Ok(Endpoint { https, host, port })
    }

    /// The host name, if the host is not an IP literal.
    pub fn name(&self) -> Option<&str> {
        match &self.host {
            Host::Name(n) => Some(n),
            Host::Ip(_) => None,
        }
    }

    /// The URL to connect to with `ip` in place of the host.
    pub fn url_with(&self, ip: IpAddr) -> String {
        url(self.https, ip, self.port)
    }
}

fn parse_port(p: &str) -> Result<u16, String> {
    if p.is_empty() {
        return Err("the port is empty".into());
    }
    match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!("port \"{p}\" is not a number from 1 to 65535")),
    }
}

/// A host name as DNS and TLS accept it: labels of letters, digits, `-` (and `_`,
/// which SRV-style and some internal names carry), 1 to 63 characters, not
/// starting or ending with `-`; at most 253 characters in all.
pub(crate) fn check_name(h: &str) -> Result<String, String> {
    if h.len() > MAX_NAME {
        return Err(format!(
            "the host name is {} characters long (at most {MAX_NAME})",
            h.len()
        ));
    }
    for label in h.split('.') {
        if label.is_empty() {
            return Err(format!(
                "host name \"{h}\" has an empty label (a leading, trailing or double dot)"
            ));
        }
        if label.len() > MAX_LABEL {
            return Err(format!(
                "host name \"{h}\": label \"{label}\" is longer than {MAX_LABEL} characters"
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(format!(
                "host name \"{h}\" holds {c:?} (letters, digits, '-' and '.' only)"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!(
                "host name \"{h}\": label \"{label}\" starts or ends with '-'"
            ));
        }
    }
    // "10.0.0.300" is a typo of an address, not a name: a last label of digits
    // only is never a top-level domain.
    if h.rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!(
            "\"{h}\" is neither an IPv4 address nor a host name"
        ));
    }
    Ok(h.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(u: &str) -> String {
        match Endpoint::parse(u) {
            Err(e) => e,
            Ok(e) => panic!("{u} parsed as {e:?}"),
        }
    }

    #[test]
    fn names_ipv4_and_ipv6_literals_parse() {
        let e = Endpoint::parse("https://etcd1.example:2379").expect("name");
        assert!(e.https);
        assert_eq!(e.host, Host::Name("etcd1.example".into()));
        assert_eq!(e.port, 2379);
        assert_eq!(e.name(), Some("etcd1.example"));
        assert_eq!(e.to_string(), "https://etcd1.example:2379");
        assert_eq!(
            e.url_with("10.0.0.1".parse().expect("ip")),
            "https://10.0.0.1:2379"
        );
        assert_eq!(
            e.url_with("fd00::1".parse().expect("ip")),
            "https://[fd00::1]:2379"
        );

        let e = Endpoint::parse("http://[::1]:2379/").expect("v6");
        assert!(!e.https);
        assert_eq!(e.host, Host::Ip("::1".parse().expect("ip")));
        assert_eq!(e.name(), None);
        assert_eq!(e.to_string(), "http://[::1]:2379");

        let e = Endpoint::parse("http://127.0.0.1:2379").expect("v4");
        assert_eq!(e.host, Host::Ip("127.0.0.1".parse().expect("ip")));
        // A single-label name (as /etc/hosts often has) is a name.
        let e = Endpoint::parse("http://etcd:2379").expect("short");
        assert_eq!(e.name(), Some("etcd"));
    }

    #[test]
    fn bad_endpoints_say_what_is_wrong() {
        assert!(err("etcd1:2379").contains("must start with http:// or https://"));
        assert!(err("ftp://etcd1:2379").contains("must start with http://"));
        assert!(err("http://etcd1.example").contains("the port is missing"));
        assert!(err("http://etcd1.example:").contains("the port is empty"));
        assert!(err("http://etcd1.example:0").contains("port \"0\" is not a number"));
        assert!(err("http://etcd1.example:65536").contains("port \"65536\""));
        assert!(err("http://etcd1.example:+80").contains("port \"+80\""));
        assert!(err("http://etcd1.example:x1").contains("port \"x1\""));
        assert!(err("http://:2379").contains("the host name is empty"));
        assert!(err("http://").contains("the port is missing"));
        assert!(err("http://::1:2379").contains("must be in brackets"));
        assert!(err("http://[::1]").contains("the port is missing"));
        assert!(err("http://[::1:2379").contains("has no ]"));
        assert!(err("http://[fe80::zz]:2379").contains("[fe80::zz] is not an IPv6 address"));
        assert!(err("http://[10.0.0.1]:2379").contains("is not an IPv6 address"));
        assert!(err("http://etcd1..example:2379").contains("empty label"));
        assert!(err("http://etcd1.example.:2379").contains("empty label"));
        assert!(err("http://-etcd.example:2379").contains("starts or ends with '-'"));
        assert!(err("http://etcd 1:2379").contains("holds ' '"));
        assert!(err("http://10.0.0.300:2379").contains("neither an IPv4 address nor"));
        assert!(err("http://etcd1.example:2379/v3").contains("no path"));
        assert!(err("http://user@etcd1.example:2379").contains("no path, query or user"));
        let long = format!("http://{}.example:2379", "a".repeat(64));
        assert!(err(&long).contains("longer than 63"));
        let huge = format!("http://{}:2379", ["abcdefghi"; 30].join("."));
        assert!(err(&huge).contains("at most 253"));
        // The entry is quoted so the operator sees which one.
        assert!(err("http://etcd1.example:99999").starts_with("\"http://etcd1.example:99999\""));
    }
}
