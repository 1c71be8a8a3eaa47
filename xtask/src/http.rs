//! A deliberately tiny HTTP/1.1 client for loopback readiness checks and
//! bucket creation (one request per connection, `Connection: close`).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// All emulators listen here and nowhere else.
pub const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from((LOOPBACK, port))
}

/// True if something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(&addr(port), Duration::from_millis(300)).is_ok()
}

/// True if an HTTP server on 127.0.0.1:`port` answers `GET path` with any status.
pub fn answers(port: u16, path: &str) -> bool {
    request(port, "GET", path, &[], b"", Duration::from_secs(2)).is_ok()
}

/// Sends one request to 127.0.0.1:`port` and reads the whole response.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> Result<Response> {
    let mut stream = TcpStream::connect_timeout(&addr(port), timeout)
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;

    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;

    let raw = read_response(&mut stream, method == "HEAD")?;
    parse(&raw).with_context(|| format!("{method} http://127.0.0.1:{port}{path}"))
}

/// Reads until EOF, or until a response with a Content-Length is complete
/// (a HEAD response is complete after its header block). A timeout after the
/// header block has arrived returns what was read.
fn read_response(stream: &mut TcpStream, head_only: bool) -> Result<Vec<u8>> {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(raw),
            Ok(n) => {
                raw.extend_from_slice(&chunk[..n]);
                if (head_only && header_end(&raw).is_some()) || complete(&raw) {
                    return Ok(raw);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e)
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
                    && header_end(&raw).is_some() =>
            {
                return Ok(raw);
            }
            Err(e) => return Err(e).context("reading HTTP response"),
        }
    }
}

fn header_end(raw: &[u8]) -> Option<usize> {
    raw.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

fn complete(raw: &[u8]) -> bool {
    let Some(end) = header_end(raw) else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    content_length(&head).is_some_and(|len| raw.len() >= end + len)
}

fn parse(raw: &[u8]) -> Result<Response> {
    let Some(end) = header_end(raw) else {
        bail!("incomplete HTTP response ({} bytes)", raw.len());
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    let status_line = head.lines().next().unwrap_or_default();
    let mut parts = status_line.split_whitespace();
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        bail!("malformed status line {status_line:?}");
    };
    if !version.starts_with("HTTP/") {
        bail!("not an HTTP response: {status_line:?}");
    }
    let status = code
        .parse()
        .with_context(|| format!("bad status code in {status_line:?}"))?;
    Ok(Response {
        status,
        body: raw[end..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_and_body() -> Result<()> {
        let r = parse(b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\nhi")?;
        assert_eq!(r.status, 409);
        assert_eq!(r.body, b"hi");
        assert!(complete(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
        assert!(!complete(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"));
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        Ok(())
    }
}
