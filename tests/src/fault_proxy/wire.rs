//! The proxy's HTTP/1.1 wire handling: reading one request (head and body, chunked or not),
//! parsing its head, and rewriting `Connection` headers.

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

/// Largest request or response head the proxy reads.
const MAX_HEAD: usize = 64 * 1024;

/// A parsed request head.
#[derive(Debug)]
pub(super) struct RequestHead {
    pub(super) method: String,
    pub(super) target: String,
    /// Lower-cased names, values as sent.
    pub(super) headers: Vec<(String, String)>,
}

/// One request: its head (raw and parsed) and its raw body (chunked framing kept).
pub(super) struct Request {
    pub(super) head: RequestHead,
    pub(super) raw_head: Vec<u8>,
    pub(super) body: Vec<u8>,
}

/// A message head (ending in `\r\n\r\n`) with every `Connection` header replaced by one
/// `Connection: close`.
pub(super) fn with_connection_close(head: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut lines: Vec<&str> = text
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|line| {
            !line
                .split_once(':')
                .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("connection"))
        })
        .collect();
    lines.push("Connection: close");
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out
}

pub(super) fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Read one whole request (head and body), or `None` when the client closed first.
pub(super) async fn read_request(client: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::with_capacity(8192);
    let end = loop {
        if let Some(end) = find_head_end(&buf) {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too large"));
        }
        if !read_more(client, &mut buf).await? {
            return Ok(None);
        }
    };
    let raw_head = buf[..end].to_vec();
    let head = parse_head(&raw_head)?;
    let mut body = buf.split_off(end);
    let header = |name: &str| {
        head.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.trim().to_owned())
    };
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        while !chunked_complete(&body)? {
            if !read_more(client, &mut body).await? {
                return Err(std::io::Error::other("client closed inside a chunked body"));
            }
        }
    } else if let Some(length) = header("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| std::io::Error::other(format!("bad content-length {length:?}")))?;
        while body.len() < length {
            if !read_more(client, &mut body).await? {
                return Err(std::io::Error::other("client closed inside the body"));
            }
        }
    }
    Ok(Some(Request { head, raw_head, body }))
}

async fn read_more(stream: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 16 * 1024];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

/// True when `body` holds a complete chunked body (last chunk and trailer included).
fn chunked_complete(body: &[u8]) -> std::io::Result<bool> {
    let mut at = 0;
    loop {
        let Some(line_end) = body[at..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(false);
        };
        let line = String::from_utf8_lossy(&body[at..at + line_end]);
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| std::io::Error::other(format!("bad chunk size {size_text:?}")))?;
        at += line_end + 2;
        if size == 0 {
            // Trailer lines, then an empty line.
            return Ok(find_head_end(&body[at - 2..]).is_some());
        }
        if body.len() < at + size + 2 {
            return Ok(false);
        }
        at += size + 2;
    }
}

fn parse_head(raw: &[u8]) -> std::io::Result<RequestHead> {
    let text = String::from_utf8_lossy(raw);
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(std::io::Error::other(format!(
            "bad request line {request_line:?}"
        )));
    };
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Ok(RequestHead {
        method: method.to_ascii_uppercase(),
        target: percent_decode(target),
        headers,
    })
}

/// `%XX` escapes decoded (invalid ones kept as written); `+` is left alone.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn decodes_targets() {
        assert_eq!(
            percent_decode("/b?prefix=p%2Fskills%2F&x=%zz%4"),
            "/b?prefix=p/skills/&x=%zz%4"
        );
    }

    #[test]
    fn chunked_bodies_end_at_the_last_chunk() {
        assert!(!chunked_complete(b"5\r\nhello\r\n").unwrap());
        assert!(!chunked_complete(b"5\r\nhello\r\n0\r\n").unwrap());
        assert!(chunked_complete(b"5\r\nhello\r\n0\r\n\r\n").unwrap());
        assert!(chunked_complete(b"0\r\nx-trailer: 1\r\n\r\n").unwrap());
        assert!(chunked_complete(b"zz\r\n").is_err());
    }

    #[test]
    fn connection_header_is_replaced() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\nconnection: keep-alive\r\n\r\n";
        assert_eq!(
            String::from_utf8(with_connection_close(head)).unwrap(),
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        );
    }
}
