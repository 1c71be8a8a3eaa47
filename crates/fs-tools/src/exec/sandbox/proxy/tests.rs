//! The proxy's bounds, driven over its real Unix socket against a real TCP server.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use trellis_backend::sandbox::AllowedDomains;

use super::{MAX_HEADER_BYTES, Proxy, ProxyLimits};

/// A TCP server on 127.0.0.1 that echoes each connection until the client ends it.
async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

fn proxy(max_connections: usize) -> (tempfile::TempDir, Proxy) {
    let root = tempfile::tempdir().unwrap();
    let limits = ProxyLimits {
        max_connections,
        ..ProxyLimits::default()
    };
    let allowed = AllowedDomains::parse(["127.0.0.1"]).unwrap();
    let proxy = Proxy::start(root.path(), None, allowed, limits).unwrap();
    (root, proxy)
}

/// Send `head` on a new connection to the proxy; the first line of the answer, if one comes
/// within `wait`.
async fn ask(proxy: &Proxy, head: &[u8], wait: Duration) -> (UnixStream, Option<String>) {
    let mut s = UnixStream::connect(proxy.socket()).await.unwrap();
    s.write_all(head).await.unwrap();
    let line = read_line(&mut s, wait).await;
    (s, line)
}

async fn read_line(s: &mut UnixStream, wait: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !got.ends_with(b"\r\n") {
            if s.read(&mut byte).await.ok()? == 0 {
                return None;
            }
            got.push(byte[0]);
        }
        Some(())
    };
    tokio::time::timeout(wait, read).await.ok().flatten()?;
    Some(String::from_utf8_lossy(&got).trim_end().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_and_tunnels_are_bounded_and_a_slot_frees_when_one_ends() {
    let port = echo_server().await;
    let (_root, proxy) = proxy(2);
    let connect = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let long = Duration::from_secs(10);
    let (mut first, line) = ask(&proxy, connect.as_bytes(), long).await;
    assert_eq!(line.as_deref(), Some("HTTP/1.1 200 OK"));
    let (_second, line) = ask(&proxy, connect.as_bytes(), long).await;
    assert_eq!(line.as_deref(), Some("HTTP/1.1 200 OK"));
    // Two tunnels hold both slots: a third connection is not served…
    let (mut third, line) = ask(&proxy, connect.as_bytes(), Duration::from_millis(700)).await;
    assert_eq!(line, None);
    // …until one tunnel ends.
    first.shutdown().await.unwrap();
    drop(first);
    let line = read_line(&mut third, long).await;
    assert_eq!(line.as_deref(), Some("HTTP/1.1 200 OK"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_the_bound_is_not_buffered() {
    let (_root, proxy) = proxy(4);
    let mut head = b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Big: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', MAX_HEADER_BYTES * 2));
    let mut s = UnixStream::connect(proxy.socket()).await.unwrap();
    // The proxy stops reading (and answers 431) rather than buffering the whole head.
    let _ = s.write_all(&head).await;
    let line = read_line(&mut s, Duration::from_secs(10)).await;
    assert_eq!(
        line.as_deref(),
        Some("HTTP/1.1 431 Request Header Fields Too Large")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_proxy_ends_its_tunnels() {
    let port = echo_server().await;
    let (_root, proxy) = proxy(4);
    let connect = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
    let (mut tunnel, line) = ask(&proxy, connect.as_bytes(), Duration::from_secs(10)).await;
    assert_eq!(line.as_deref(), Some("HTTP/1.1 200 OK"));
    // The rest of the head, up to its empty line.
    while read_line(&mut tunnel, Duration::from_secs(5))
        .await
        .is_some_and(|l| !l.is_empty())
    {}
    tunnel.write_all(b"ping\r\n").await.unwrap();
    assert_eq!(
        read_line(&mut tunnel, Duration::from_secs(5)).await.as_deref(),
        Some("ping")
    );
    drop(proxy);
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), tunnel.read_to_end(&mut rest)).await;
    assert!(
        matches!(ended, Ok(Ok(_))),
        "the tunnel outlived its proxy: {ended:?}"
    );
}
