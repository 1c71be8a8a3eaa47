//! What network a command gets ([`Network`]) and, for the middle way, which domains it may reach
//! ([`AllowedDomains`]).

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// Whether, and how, a command may use the network.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// No network at all: a fresh network namespace with only its own loopback (the default).
    #[default]
    None,
    /// Still a network namespace of its own, whose only way out is an HTTP proxy the sandbox runs
    /// outside it (HTTP `CONNECT` and plain HTTP, announced in `http_proxy`/`https_proxy`), which
    /// admits only these domains and refuses every other name, every IP address not listed, and
    /// every name that resolves to a loopback, private or link-local address not listed.
    Domains(AllowedDomains),
    /// The host's network namespace, loopback services, cloud metadata endpoints and abstract
    /// Unix sockets included. Unsafe with untrusted commands.
    Host,
}

/// One entry of an [`AllowedDomains`] list.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DomainPattern {
    /// Exactly this name (lowercase, no trailing dot).
    Exact(String),
    /// Any name below this one, at any depth (`*.example.com`: `a.example.com`, `a.b.example.com`;
    /// not `example.com` itself).
    Below(String),
    /// This address, as an IP literal in a request or as what a listed name resolves to (the one
    /// way to let a command reach a loopback or private address).
    Address(IpAddr),
}

impl DomainPattern {
    /// Parse `text`: `example.com`, `*.example.com`, or an IP address (`127.0.0.1`, `::1`,
    /// `[::1]`). Names are matched case-insensitively; a trailing dot is dropped. Refused with the
    /// reason: an empty text, a wildcard anywhere but a leading `*.`, a wildcard over a top-level
    /// name alone (`*.com`), a port, a URL, labels that are not letters, digits and hyphens, or a
    /// name whose last label is all digits (it would be read as an address).
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        let unbracketed = trimmed
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(trimmed);
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            return Ok(Self::Address(ip));
        }
        let lower = trimmed.to_ascii_lowercase();
        let lower = lower.strip_suffix('.').unwrap_or(&lower);
        let (below, name) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, lower),
        };
        check_name(name).map_err(|why| format!("{text:?} is not a domain: {why}"))?;
        if below && !name.contains('.') {
            return Err(format!(
                "{text:?} would allow every name under a top-level domain; list the domains instead"
            ));
        }
        Ok(if below {
            Self::Below(name.to_owned())
        } else {
            Self::Exact(name.to_owned())
        })
    }

    /// True when the host name `host` (lowercase, no trailing dot) is this pattern's.
    fn matches_name(&self, host: &str) -> bool {
        match self {
            Self::Exact(name) => host == name,
            Self::Below(name) => host
                .strip_suffix(name.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            Self::Address(_) => false,
        }
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(name) => f.write_str(name),
            Self::Below(name) => write!(f, "*.{name}"),
            Self::Address(ip) => write!(f, "{ip}"),
        }
    }
}

/// Why a name is not a host name: at most 253 bytes of labels of 1 to 63 letters, digits and
/// hyphens (not at either end), the last not all digits.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name.len() > 253 {
        return Err("it is longer than 253 bytes");
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("a label is empty or longer than 63 bytes");
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err("only letters, digits, dots and inner hyphens (and a leading `*.`) may be used");
        }
    }
    if name
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("its last label is a number");
    }
    Ok(())
}

/// The domains a command may reach through the sandbox's proxy. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct AllowedDomains(Arc<[DomainPattern]>);

impl AllowedDomains {
    /// Parse every entry (see [`DomainPattern::parse`]); the first bad one is the error.
    pub fn parse<I, S>(entries: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut patterns = entries
            .into_iter()
            .map(|e| DomainPattern::parse(e.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        patterns.sort();
        patterns.dedup();
        Ok(Self(patterns.into()))
    }

    /// The entries, sorted.
    pub fn patterns(&self) -> &[DomainPattern] {
        &self.0
    }

    /// True when there is none (a proxy that refuses everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a request may name `host` (a domain name, or an IP literal, bracketed or not):
    /// a name when a name pattern matches it, an address when it is listed.
    pub fn admits_host(&self, host: &str) -> bool {
        let unbracketed = host
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            return self.lists_address(ip);
        }
        let lower = host.to_ascii_lowercase();
        let lower = lower.strip_suffix('.').unwrap_or(&lower);
        check_name(lower).is_ok() && self.0.iter().any(|p| p.matches_name(lower))
    }

    /// Whether `ip` is listed as an address (which also admits it as what a name resolves to).
    pub fn lists_address(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0
            .iter()
            .any(|p| matches!(p, DomainPattern::Address(a) if canonical(*a) == ip))
    }
}

/// `ip` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl fmt::Debug for AllowedDomains {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|p| p.to_string()))
            .finish()
    }
}

impl fmt::Display for AllowedDomains {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(|p| p.to_string()).collect();
        f.write_str(&names.join(", "))
    }
}

impl serde::Serialize for AllowedDomains {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|p| p.to_string()))
    }
}

impl<'de> serde::Deserialize<'de> for AllowedDomains {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = Vec::<String>::deserialize(deserializer)?;
        Self::parse(entries).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowedDomains {
        AllowedDomains::parse(entries).unwrap()
    }

    #[test]
    fn exact_names_match_themselves_only_case_and_trailing_dot_aside() {
        let allowed = list(&["Example.COM"]);
        assert!(allowed.admits_host("example.com"));
        assert!(allowed.admits_host("EXAMPLE.com."));
        assert!(!allowed.admits_host("a.example.com"));
        assert!(!allowed.admits_host("example.com.evil.net"));
        assert!(!allowed.admits_host("badexample.com"));
    }

    #[test]
    fn wildcards_match_names_below_only() {
        let allowed = list(&["*.example.com"]);
        assert!(allowed.admits_host("a.example.com"));
        assert!(allowed.admits_host("a.b.example.com"));
        assert!(!allowed.admits_host("example.com"));
        assert!(!allowed.admits_host("aexample.com"));
        assert!(!allowed.admits_host(".example.com"));
    }

    #[test]
    fn ip_literals_are_admitted_only_when_listed() {
        let allowed = list(&["example.com", "127.0.0.1", "[::1]"]);
        assert!(allowed.admits_host("127.0.0.1"));
        assert!(allowed.admits_host("[::1]"));
        assert!(allowed.admits_host("::ffff:127.0.0.1"));
        assert!(!allowed.admits_host("127.0.0.2"));
        assert!(!allowed.admits_host("169.254.169.254"));
        assert!(!list(&["example.com"]).admits_host("93.184.215.14"));
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for bad in [
            "",
            "*",
            "*.com",
            "a.*.com",
            "example.com:443",
            "http://example.com",
            "a_b.com",
            "-a.com",
            "1.2.3",
            "exa mple.com",
        ] {
            let err = DomainPattern::parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn hosts_that_are_no_names_never_match() {
        let allowed = list(&["*.example.com"]);
        assert!(!allowed.admits_host("a b.example.com"));
        assert!(!allowed.admits_host("a..example.com"));
        assert!(!allowed.admits_host(""));
    }

    #[test]
    fn serde_round_trips_and_refuses_bad_entries() {
        let allowed = list(&["b.com", "*.a.com", "10.0.0.1"]);
        let json = serde_json::to_string(&Network::Domains(allowed.clone())).unwrap();
        assert_eq!(json, r#"{"domains":["b.com","*.a.com","10.0.0.1"]}"#);
        let back: Network = serde_json::from_str(&json).unwrap();
        assert_eq!(back, Network::Domains(allowed));
        assert!(serde_json::from_str::<Network>(r#"{"domains":["*.com"]}"#).is_err());
        assert_eq!(serde_json::to_string(&Network::None).unwrap(), r#""none""#);
    }
}
