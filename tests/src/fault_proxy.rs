//! [`FaultProxy`]: a loopback HTTP/1.1 proxy that sits in front of a real server (an object-store
//! emulator) and injects faults by rule: error replies, latency, dropped or reset connections before
//! or after the request reached the server, truncated uploads, and stalls.
//!
//! Each client connection carries exactly one request: the proxy answers with `Connection: close`
//! and closes, so a client's connection pool never reuses a connection the proxy dropped, and the
//! request log counts exactly what the client sent (every retry is a new request). Upstream, every
//! request also gets its own connection, with `Connection: close`, and the reply is read to its end.
//!
//! Rules are checked in the order they were added; the first that matches a request and still has
//! a budget ([`Rule::times`]) applies to it. Requests that match no rule pass through unchanged.
//! The proxy checks no signatures and rewrites no `Host` header: use it in front of servers that
//! accept any credentials (moto does).

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Largest request or response head the proxy reads.
const MAX_HEAD: usize = 64 * 1024;

/// What the proxy does to a matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and body; the request never reaches the server.
    Respond {
        /// HTTP status.
        status: u16,
        /// Body (sent as `application/xml`).
        body: String,
    },
    /// Wait this long, then forward the request normally.
    Delay(Duration),
    /// Close the client's connection (FIN) without forwarding.
    DropBeforeForward,
    /// Reset the client's connection (RST) without forwarding.
    ResetBeforeForward,
    /// Forward the request and read the server's whole reply (the request is applied), then close
    /// the client's connection (FIN) without answering: "applied, but the reply was lost".
    DropAfterForward,
    /// Like [`Fault::DropAfterForward`], but reset (RST) the client's connection.
    ResetAfterForward,
    /// Forward the request (it is applied), then answer with this status instead of the server's.
    RespondAfterForward {
        /// HTTP status.
        status: u16,
        /// Body.
        body: String,
    },
    /// Send the server the request head and only this many body bytes, then close both connections.
    TruncateBody(usize),
    /// Read the request and never answer (until the proxy is dropped).
    Stall,
}

impl Fault {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Respond { .. } => "respond",
            Fault::Delay(_) => "delay",
            Fault::DropBeforeForward => "drop-before",
            Fault::ResetBeforeForward => "reset-before",
            Fault::DropAfterForward => "drop-after",
            Fault::ResetAfterForward => "reset-after",
            Fault::RespondAfterForward { .. } => "respond-after",
            Fault::TruncateBody(_) => "truncate",
            Fault::Stall => "stall",
        }
    }

    /// `503 Service Unavailable` with an S3-style `SlowDown` body.
    pub fn service_unavailable() -> Self {
        Fault::Respond {
            status: 503,
            body: s3_error("SlowDown", "Please reduce your request rate."),
        }
    }

    /// `500 Internal Server Error` with an S3-style `InternalError` body.
    pub fn internal_error() -> Self {
        Fault::Respond {
            status: 500,
            body: s3_error(
                "InternalError",
                "We encountered an internal error. Please try again.",
            ),
        }
    }
}

fn s3_error(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    )
}

/// When a [`Fault`] applies.
#[derive(Debug, Clone)]
pub struct Rule {
    fault: Fault,
    method: Option<String>,
    target_contains: Option<String>,
    header: Option<String>,
    times: Option<usize>,
}

impl Rule {
    /// `fault` for every request, until narrowed.
    pub fn new(fault: Fault) -> Self {
        Self {
            fault,
            method: None,
            target_contains: None,
            header: None,
            times: None,
        }
    }

    /// Only requests with this method (`GET`, `PUT`, `HEAD`, …).
    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Only requests whose target (path and query, percent-decoded) contains `text`. On S3 in
    /// path style, a key `p/skills/a` is `/bucket/p/skills/a` and a listing of it is
    /// `/bucket?list-type=2&prefix=p/skills/…`: `"/skills/"` matches both.
    pub fn target_contains(mut self, text: &str) -> Self {
        self.target_contains = Some(text.to_owned());
        self
    }

    /// Only requests that carry this header (any value), e.g. `if-match`.
    pub fn with_header(mut self, name: &str) -> Self {
        self.header = Some(name.to_ascii_lowercase());
        self
    }

    /// Only the first `n` matching requests; later ones pass through.
    pub fn times(mut self, n: usize) -> Self {
        self.times = Some(n);
        self
    }

    fn matches(&self, request: &RequestHead) -> bool {
        self.times != Some(0)
            && self.method.as_deref().is_none_or(|m| m == request.method)
            && self
                .target_contains
                .as_deref()
                .is_none_or(|t| request.target.contains(t))
            && self
                .header
                .as_deref()
                .is_none_or(|h| request.headers.iter().any(|(name, _)| name == h))
    }
}

/// One request the proxy saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Method.
    pub method: String,
    /// Path and query, percent-decoded.
    pub target: String,
    /// The fault applied ([`Fault::name`]), if any.
    pub fault: Option<&'static str>,
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.target)?;
        if let Some(fault) = self.fault {
            write!(f, " [{fault}]")?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<Vec<Seen>>,
}

impl Shared {
    /// The fault for `request` (consuming one use of its rule), and the log entry.
    fn decide(&self, request: &RequestHead) -> Option<Fault> {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let fault = rules.iter_mut().find(|r| r.matches(request)).map(|rule| {
            if let Some(n) = rule.times.as_mut() {
                *n -= 1;
            }
            rule.fault.clone()
        });
        drop(rules);
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).push(Seen {
            method: request.method.clone(),
            target: request.target.clone(),
            fault: fault.as_ref().map(Fault::name),
        });
        fault
    }
}

/// A running proxy; it stops (and every stalled connection closes) when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
}

impl FaultProxy {
    /// Start a proxy on a free loopback port in front of `upstream` (`http://host:port` or
    /// `host:port`). Call from inside a Tokio runtime; the proxy runs on it.
    pub async fn start(upstream: &str) -> std::io::Result<Self> {
        let host = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let upstream = tokio::net::lookup_host(&host)
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{host} does not resolve")))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            rules: Mutex::default(),
            seen: Mutex::default(),
        });
        let (shutdown, mut stop) = watch::channel(false);
        let accept_shared = shared.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.changed() => break,
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { break };
                        let (shared, stop) = (accept_shared.clone(), stop.clone());
                        tokio::spawn(async move {
                            // A client or server that goes away mid-request ends only its connection.
                            let _ = serve(client, &shared, stop).await;
                        });
                    }
                }
            }
        });
        Ok(Self {
            addr,
            shared,
            shutdown,
        })
    }

    /// The proxy's endpoint, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Add a rule (checked after the rules added before it).
    pub fn add(&self, rule: Rule) {
        self.lock_rules().push(rule);
    }

    /// Remove every rule: from now on requests pass through.
    pub fn clear_rules(&self) {
        self.lock_rules().clear();
    }

    /// Every request seen so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Forget the requests seen so far.
    pub fn reset_log(&self) {
        self.shared.seen.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Requests seen with `method` whose target contains `target_contains`.
    pub fn count(&self, method: &str, target_contains: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.method.eq_ignore_ascii_case(method) && s.target.contains(target_contains))
            .count()
    }

    fn lock_rules(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.shared.rules.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// A parsed request head.
#[derive(Debug)]
struct RequestHead {
    method: String,
    target: String,
    /// Lower-cased names, values as sent.
    headers: Vec<(String, String)>,
}

/// One request: its head (raw and parsed) and its raw body (chunked framing kept).
struct Request {
    head: RequestHead,
    raw_head: Vec<u8>,
    body: Vec<u8>,
}

async fn serve(
    mut client: TcpStream,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let Some(request) = read_request(&mut client).await? else {
        return Ok(());
    };
    let fault = shared.decide(&request.head);
    match fault {
        None => {
            let reply = forward(shared.upstream, &request, None).await?;
            client.write_all(&reply).await?;
        }
        Some(Fault::Delay(delay)) => {
            tokio::time::sleep(delay).await;
            let reply = forward(shared.upstream, &request, None).await?;
            client.write_all(&reply).await?;
        }
        Some(Fault::Respond { status, body }) => client.write_all(&reply(status, &body)).await?,
        Some(Fault::DropBeforeForward) => {}
        Some(Fault::ResetBeforeForward) => client.set_zero_linger()?,
        Some(Fault::DropAfterForward) => {
            forward(shared.upstream, &request, None).await?;
        }
        Some(Fault::ResetAfterForward) => {
            forward(shared.upstream, &request, None).await?;
            client.set_zero_linger()?;
        }
        Some(Fault::RespondAfterForward { status, body }) => {
            forward(shared.upstream, &request, None).await?;
            client.write_all(&reply(status, &body)).await?;
        }
        Some(Fault::TruncateBody(keep)) => {
            // The server sees a body shorter than announced; what it does with it is the test.
            let _ = forward(shared.upstream, &request, Some(keep)).await;
        }
        Some(Fault::Stall) => {
            // Hold the connection open until the proxy stops; the client must time out.
            while !*stop.borrow() {
                if stop.changed().await.is_err() {
                    break;
                }
            }
        }
    }
    client.flush().await?;
    Ok(())
}

fn reply(status: u16, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} Fault\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Send `request` upstream on a new connection (only `truncate` body bytes when given, then close)
/// and return the whole reply with its `Connection` header replaced by `Connection: close`.
async fn forward(
    upstream: SocketAddr,
    request: &Request,
    truncate: Option<usize>,
) -> std::io::Result<Vec<u8>> {
    let mut server = TcpStream::connect(upstream).await?;
    server
        .write_all(&with_connection_close(&request.raw_head))
        .await?;
    match truncate {
        Some(keep) => {
            server
                .write_all(&request.body[..keep.min(request.body.len())])
                .await?;
            server.flush().await?;
            server.set_zero_linger()?;
            return Ok(Vec::new());
        }
        None => server.write_all(&request.body).await?,
    }
    let mut reply = Vec::new();
    server.read_to_end(&mut reply).await?;
    let Some(end) = find_head_end(&reply) else {
        return Err(std::io::Error::other("upstream reply has no complete head"));
    };
    let mut out = with_connection_close(&reply[..end]);
    out.extend_from_slice(&reply[end..]);
    Ok(out)
}

/// A message head (ending in `\r\n\r\n`) with every `Connection` header replaced by one
/// `Connection: close`.
fn with_connection_close(head: &[u8]) -> Vec<u8> {
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

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Read one whole request (head and body), or `None` when the client closed first.
async fn read_request(client: &mut TcpStream) -> std::io::Result<Option<Request>> {
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
