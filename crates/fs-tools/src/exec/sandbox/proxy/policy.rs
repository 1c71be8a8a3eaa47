//! Which hosts and addresses the proxy lets a command reach: the request's host must be allowed by
//! name ([`AllowedDomains::admits_host`]), and every address the proxy connects to must be a
//! public one or listed. The proxy resolves names itself and connects to exactly the addresses it
//! checked, so a name cannot be made to point at a loopback or private address between the check
//! and the connection (DNS rebinding).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use trellis_backend::sandbox::AllowedDomains;

/// Why the proxy did not connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The host is neither an allowed domain nor a listed address.
    NotAllowed(String),
    /// The host is allowed, but it resolves only to loopback, private, link-local or other
    /// non-public addresses that are not listed.
    PrivateAddress { host: String, address: IpAddr },
    /// The request is not one a proxy serves (no host, a port missing, an `https://` URL sent
    /// without `CONNECT`).
    BadRequest(String),
    /// The name could not be resolved, or nothing answered at its addresses.
    Unreachable(String),
    /// The proxy holds as many connections as it may.
    Busy,
}

impl Refusal {
    /// The HTTP status the proxy answers with.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Self::NotAllowed(_) | Self::PrivateAddress { .. } => 403,
            Self::BadRequest(_) => 400,
            Self::Unreachable(_) => 502,
            Self::Busy => 503,
        }
    }

    /// The reason phrase of the status line (what `CONNECT` clients show).
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::NotAllowed(_) => "Domain not allowed by the Trellis sandbox",
            Self::PrivateAddress { .. } => "Address not allowed by the Trellis sandbox",
            Self::BadRequest(_) => "Bad proxy request",
            Self::Unreachable(_) => "Bad Gateway",
            Self::Busy => "Too many connections from the Trellis sandbox",
        }
    }

    /// The message, naming what was refused and how to allow it.
    pub(crate) fn message(&self, allowed: &AllowedDomains) -> String {
        let listed = if allowed.is_empty() {
            "none".to_owned()
        } else {
            allowed.to_string()
        };
        match self {
            Self::NotAllowed(host) => format!(
                "trellis sandbox: {host} is not an allowed domain (allowed: {listed}); the user can allow it with --allow-domain"
            ),
            Self::PrivateAddress { host, address } => format!(
                "trellis sandbox: {host} resolves to {address}, a loopback, private or link-local address, which commands may not reach unless the address itself is allowed"
            ),
            Self::BadRequest(why) => format!("trellis sandbox: {why}"),
            Self::Unreachable(why) => format!("trellis sandbox: {why}"),
            Self::Busy => "trellis sandbox: too many connections at once".to_owned(),
        }
    }
}

/// How many resolved addresses are tried, at most.
const MAX_ADDRESSES: usize = 8;

/// The addresses to connect to for `host:port`: refused unless `allowed` admits the host; an IP
/// literal is its own address; a name is resolved (within `timeout`) and only its public or listed
/// addresses are kept.
pub(crate) async fn addresses(
    allowed: &AllowedDomains,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, Refusal> {
    if !allowed.admits_host(host) {
        return Err(Refusal::NotAllowed(host.to_owned()));
    }
    let unbracketed = host
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = unbracketed.parse::<IpAddr>() {
        // Listed: `admits_host` checked it.
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let resolved = tokio::time::timeout(timeout, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| Refusal::Unreachable(format!("resolving {host} took longer than {timeout:?}")))?
        .map_err(|e| Refusal::Unreachable(format!("cannot resolve {host}: {e}")))?;
    let mut kept = Vec::new();
    let mut refused = None;
    for addr in resolved {
        if is_public(addr.ip()) || allowed.lists_address(addr.ip()) {
            if kept.len() < MAX_ADDRESSES {
                kept.push(addr);
            }
        } else {
            refused.get_or_insert(addr.ip());
        }
    }
    match (kept.is_empty(), refused) {
        (false, _) => Ok(kept),
        (true, Some(address)) => Err(Refusal::PrivateAddress {
            host: host.to_owned(),
            address,
        }),
        (true, None) => Err(Refusal::Unreachable(format!("{host} has no address"))),
    }
}

/// True for an address of the public internet: not unspecified, loopback, private (RFC 1918,
/// unique local), carrier-grade NAT, link-local (cloud metadata at 169.254.169.254 included),
/// multicast, broadcast, reserved or documentation ranges; an IPv4-mapped or NAT64 address is
/// judged by the IPv4 address inside.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240) // reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) carries an IPv4 address in its last 32 bits.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let [hi, lo] = [s[6], s[7]];
        let v4 = Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
        return is_public_v4(v4);
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard
        || s[0..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible and other ::/96
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "0.0.0.0",
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "192.0.0.8",
            "198.18.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "192.0.2.1",
            "::",
            "::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2001:db8::1",
            "::127.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "1.1.1.1",
            "93.184.215.14",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn names_and_literals_are_checked_before_any_lookup() {
        let allowed = AllowedDomains::parse(["localhost", "example.invalid"]).unwrap();
        let t = Duration::from_secs(5);
        assert_eq!(
            addresses(&allowed, "other.invalid", 80, t).await,
            Err(Refusal::NotAllowed("other.invalid".into()))
        );
        assert_eq!(
            addresses(&allowed, "169.254.169.254", 80, t).await,
            Err(Refusal::NotAllowed("169.254.169.254".into()))
        );
        // Allowed by name, but loopback and not listed: DNS cannot point an allowed name inward.
        assert!(matches!(
            addresses(&allowed, "localhost", 80, t).await,
            Err(Refusal::PrivateAddress { .. })
        ));
        let with_loopback = AllowedDomains::parse(["localhost", "127.0.0.1", "::1"]).unwrap();
        let found = addresses(&with_loopback, "localhost", 80, t).await.unwrap();
        assert!(found.iter().all(|a| a.ip().is_loopback()), "{found:?}");
    }
}
