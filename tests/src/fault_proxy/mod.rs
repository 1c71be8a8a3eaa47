//! [`FaultProxy`]: a loopback HTTP/1.1 proxy that sits in front of a real server (an object-store
//! emulator, a mock model provider) and injects faults by rule: error replies, latency, dropped or
//! reset connections before or after the request reached the server, truncated uploads, replies cut
//! off or stalled mid-body, and stalls.
//!
//! Each client connection carries exactly one request: the proxy answers with `Connection: close`
//! and closes, so a client's connection pool never reuses a connection the proxy dropped, and the
//! request log counts exactly what the client sent (every retry is a new request). Upstream, every
//! request also gets its own connection, with `Connection: close`, and the reply is read to its end.
//!
//! Rules are checked in the order they were added; the first that matches a request and still has
//! a budget ([`Rule::times`]) applies to it. Requests that match no rule pass through unchanged.
//! The proxy checks no signatures and rewrites no `Host` header: use it in front of servers that
//! accept any credentials (moto, the GCS shim) or whose signatures do not cover the host (Azurite's
//! shared key signs the account and path, not the `Host` header).

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use wire::{Request, RequestHead, find_head_end, read_request, with_connection_close};

mod wire;

/// What the proxy does to a matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and body; the request never reaches the server.
    Respond {
        /// HTTP status.
        status: u16,
        /// Body (sent as `application/json` when it starts with `{`, else as `application/xml`).
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
    /// Send the server the request head and only this many body bytes, then reset the server
    /// connection and close the client's.
    TruncateBody(usize),
    /// Send the server the request head and only this many body bytes, then close (FIN) the
    /// server connection, as the kernel does for a client process that dies mid-upload; the
    /// server's answer is logged ([`Seen::upstream_status`]) and the client's connection closed.
    AbandonUpload(usize),
    /// Read the request and never answer (until the proxy is dropped).
    Stall,
    /// Forward the request (it is applied), send the client the reply's head and only this many
    /// bytes of its body, then close (FIN): a reply cut short of its announced length.
    CutReply(usize),
    /// Like [`Fault::CutReply`], but reset (RST) the client's connection mid-body.
    ResetMidReply(usize),
    /// Forward the request, send the reply's head and this many body bytes, then send nothing more
    /// (until the proxy is dropped): a server that stalls mid-body.
    StallMidReply(usize),
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
            Fault::AbandonUpload(_) => "abandon-upload",
            Fault::Stall => "stall",
            Fault::CutReply(_) => "cut-reply",
            Fault::ResetMidReply(_) => "reset-mid-reply",
            Fault::StallMidReply(_) => "stall-mid-reply",
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
    /// The status the server answered, when the request was forwarded and answered (the client
    /// may not have seen it: see the fault).
    pub upstream_status: Option<u16>,
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.target)?;
        if let Some(status) = self.upstream_status {
            write!(f, " -> {status}")?;
        }
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
    /// The fault for `request` (consuming one use of its rule), and the index of its log entry.
    fn decide(&self, request: &RequestHead) -> (Option<Fault>, usize) {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let fault = rules.iter_mut().find(|r| r.matches(request)).map(|rule| {
            if let Some(n) = rule.times.as_mut() {
                *n -= 1;
            }
            rule.fault.clone()
        });
        drop(rules);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.push(Seen {
            method: request.method.clone(),
            target: request.target.clone(),
            fault: fault.as_ref().map(Fault::name),
            upstream_status: None,
        });
        (fault, seen.len() - 1)
    }

    /// Forward `request` (log entry `entry`) and note the server's status in the log.
    async fn forward(&self, entry: usize, request: &Request) -> std::io::Result<Vec<u8>> {
        self.forward_cut(entry, request, None).await
    }

    /// [`Self::forward`], with the body cut short when `cut` says so.
    async fn forward_cut(
        &self,
        entry: usize,
        request: &Request,
        cut: Option<Cut>,
    ) -> std::io::Result<Vec<u8>> {
        let reply = forward(self.upstream, request, cut).await?;
        let status = std::str::from_utf8(&reply[..reply.len().min(16)])
            .ok()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok());
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        // `reset_log` may have emptied the log meanwhile.
        if let Some(seen) = seen.get_mut(entry) {
            seen.upstream_status = status;
        }
        Ok(reply)
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

async fn serve(
    mut client: TcpStream,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let Some(request) = read_request(&mut client).await? else {
        return Ok(());
    };
    let (fault, entry) = shared.decide(&request.head);
    match fault {
        None => {
            let reply = shared.forward(entry, &request).await?;
            client.write_all(&reply).await?;
        }
        Some(Fault::Delay(delay)) => {
            tokio::time::sleep(delay).await;
            let reply = shared.forward(entry, &request).await?;
            client.write_all(&reply).await?;
        }
        Some(Fault::Respond { status, body }) => client.write_all(&reply(status, &body)).await?,
        Some(Fault::DropBeforeForward) => {}
        Some(Fault::ResetBeforeForward) => client.set_zero_linger()?,
        Some(Fault::DropAfterForward) => {
            shared.forward(entry, &request).await?;
        }
        Some(Fault::ResetAfterForward) => {
            shared.forward(entry, &request).await?;
            client.set_zero_linger()?;
        }
        Some(Fault::RespondAfterForward { status, body }) => {
            shared.forward(entry, &request).await?;
            client.write_all(&reply(status, &body)).await?;
        }
        Some(Fault::TruncateBody(keep)) => {
            // The server sees a body shorter than announced; what it does with it is the test.
            let _ = forward(shared.upstream, &request, Some(Cut::Reset(keep))).await;
        }
        Some(Fault::AbandonUpload(keep)) => {
            let _ = shared.forward_cut(entry, &request, Some(Cut::Close(keep))).await;
        }
        Some(Fault::Stall) => stall(&mut stop).await,
        Some(Fault::CutReply(keep)) => {
            let reply = shared.forward(entry, &request).await?;
            client.write_all(partial_reply(&reply, keep)).await?;
        }
        Some(Fault::ResetMidReply(keep)) => {
            let reply = shared.forward(entry, &request).await?;
            client.write_all(partial_reply(&reply, keep)).await?;
            client.flush().await?;
            client.set_zero_linger()?;
            return Ok(());
        }
        Some(Fault::StallMidReply(keep)) => {
            let reply = shared.forward(entry, &request).await?;
            client.write_all(partial_reply(&reply, keep)).await?;
            client.flush().await?;
            stall(&mut stop).await;
        }
    }
    client.flush().await?;
    Ok(())
}

/// Hold a connection open until the proxy stops; the client must time out.
async fn stall(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            break;
        }
    }
}

/// The reply's head and the first `keep` bytes of its body.
fn partial_reply(reply: &[u8], keep: usize) -> &[u8] {
    let head = find_head_end(reply).unwrap_or(reply.len());
    &reply[..(head + keep).min(reply.len())]
}

fn reply(status: u16, body: &str) -> Vec<u8> {
    let kind = if body.starts_with('{') { "json" } else { "xml" };
    format!(
        "HTTP/1.1 {status} Fault\r\nContent-Type: application/{kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// How [`forward`] cuts a request body short.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// Send this many body bytes, then reset the connection (no reply is read).
    Reset(usize),
    /// Send this many body bytes, then close the sending half and read the reply.
    Close(usize),
}

/// Send `request` upstream on a new connection (cut short when `cut` says so) and return the whole
/// reply with its `Connection` header replaced by `Connection: close`.
async fn forward(upstream: SocketAddr, request: &Request, cut: Option<Cut>) -> std::io::Result<Vec<u8>> {
    let mut server = TcpStream::connect(upstream).await?;
    server
        .write_all(&with_connection_close(&request.raw_head))
        .await?;
    let part = |keep: usize| &request.body[..keep.min(request.body.len())];
    match cut {
        Some(Cut::Reset(keep)) => {
            server.write_all(part(keep)).await?;
            server.flush().await?;
            server.set_zero_linger()?;
            return Ok(Vec::new());
        }
        Some(Cut::Close(keep)) => {
            server.write_all(part(keep)).await?;
            server.shutdown().await?;
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
