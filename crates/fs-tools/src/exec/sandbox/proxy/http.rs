//! The proxy's HTTP side (hyper): `CONNECT host:port` becomes a tunnel to the checked address, and
//! a plain `http://` request in absolute form is forwarded to it; everything else is answered with
//! a status and a message saying why (see [`Refusal`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::policy::{self, Refusal};
use super::{Context, MAX_HEADER_BYTES, Slot};

type Body = BoxBody<Bytes, hyper::Error>;

/// Answer one request of a command.
pub(super) async fn handle(
    req: Request<Incoming>,
    ctx: Arc<Context>,
    slot: Slot,
) -> Result<Response<Body>, Infallible> {
    let answer = if req.method() == Method::CONNECT {
        tunnel(req, &ctx, &slot).await
    } else {
        forward(req, &ctx).await
    };
    Ok(answer.unwrap_or_else(|refusal| {
        tracing::info!(refusal = ?refusal, "the sandbox's proxy refused a request");
        refused(&refusal, &ctx)
    }))
}

/// `CONNECT`: check, resolve and connect first, so that a refusal is the answer; then answer 200
/// and relay bytes both ways until either side closes or the command ends. The tunnel keeps the
/// connection's `slot`.
async fn tunnel(req: Request<Incoming>, ctx: &Arc<Context>, slot: &Slot) -> Result<Response<Body>, Refusal> {
    let authority = req
        .uri()
        .authority()
        .ok_or_else(|| Refusal::BadRequest("CONNECT needs host:port".into()))?;
    let port = authority
        .port_u16()
        .ok_or_else(|| Refusal::BadRequest("CONNECT needs host:port".into()))?;
    let mut upstream = connect(ctx, authority.host(), port).await?;
    let taken = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    let permit = match taken {
        Some(permit) => permit,
        None => ctx.slots.clone().try_acquire_owned().map_err(|_| Refusal::Busy)?,
    };
    let mut closed = ctx.closed.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let mut client = TokioIo::new(upgraded);
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
            _ = closed.changed() => {}
        }
    });
    Ok(Response::new(empty()))
}

/// A plain HTTP request in absolute form (`GET http://host/path`): check, resolve, connect, and
/// send it on in origin form without the hop-by-hop headers.
async fn forward(mut req: Request<Incoming>, ctx: &Arc<Context>) -> Result<Response<Body>, Refusal> {
    let uri = req.uri().clone();
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(Refusal::BadRequest(
                "https:// URLs go through CONNECT (set https_proxy, not only http_proxy)".into(),
            ));
        }
        _ => {
            return Err(Refusal::BadRequest(
                "this is a proxy: send a CONNECT or an absolute http:// URL".into(),
            ));
        }
    }
    let authority = uri
        .authority()
        .ok_or_else(|| Refusal::BadRequest("the URL has no host".into()))?;
    let port = authority.port_u16().unwrap_or(80);
    let stream = connect(ctx, authority.host(), port).await?;
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_HEADER_BYTES)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Refusal::Unreachable(format!("talking to {authority}: {e}")))?;
    let mut closed = ctx.closed.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = conn => {}
            _ = closed.changed() => {}
        }
    });
    let origin_form = uri.path_and_query().map_or("/", |p| p.as_str());
    *req.uri_mut() = origin_form
        .parse()
        .map_err(|_| Refusal::BadRequest("the URL's path is not valid".into()))?;
    strip_hop_by_hop(req.headers_mut());
    if !req.headers().contains_key(header::HOST)
        && let Ok(host) = authority.as_str().parse()
    {
        req.headers_mut().insert(header::HOST, host);
    }
    let response = sender
        .send_request(req)
        .await
        .map_err(|e| Refusal::Unreachable(format!("talking to {authority}: {e}")))?;
    Ok(response.map(|body| body.boxed()))
}

/// Connect to the first address of `host:port` that answers, among those the policy keeps.
async fn connect(ctx: &Context, host: &str, port: u16) -> Result<TcpStream, Refusal> {
    let addresses: Vec<SocketAddr> =
        policy::addresses(&ctx.allowed, host, port, ctx.limits.resolve_timeout).await?;
    let mut last = String::new();
    for address in addresses {
        match tokio::time::timeout(ctx.limits.connect_timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = format!("{address}: {e}"),
            Err(_) => last = format!("{address}: no answer within {:?}", ctx.limits.connect_timeout),
        }
    }
    Err(Refusal::Unreachable(format!(
        "cannot connect to {host}:{port} ({last})"
    )))
}

/// Headers that describe one hop, not the request (RFC 9110 §7.6.1), and the proxy's own.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        HeaderName::from_static("proxy-connection"),
        HeaderName::from_static("keep-alive"),
    ] {
        headers.remove(name);
    }
}

fn empty() -> Body {
    Full::new(Bytes::new()).map_err(|never| match never {}).boxed()
}

/// The answer to a refused request: its status and reason, the message as the body.
fn refused(refusal: &Refusal, ctx: &Context) -> Response<Body> {
    let message = refusal.message(&ctx.allowed);
    let mut response = Response::new(
        Full::new(Bytes::from(format!("{message}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::FORBIDDEN);
    response
        .extensions_mut()
        .insert(hyper::ext::ReasonPhrase::from_static(refusal.reason().as_bytes()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    response
}
