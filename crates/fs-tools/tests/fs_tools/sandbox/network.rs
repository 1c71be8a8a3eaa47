//! Network by domain (security review F8): a request with [`Network::Domains`] gets no network but
//! a proxy Trellis runs outside the sandbox, which lets commands reach only the listed domains.
//! Each test runs real `curl` and Python inside bubblewrap against a real HTTP server on the
//! host's loopback, and checks what that server saw.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trellis_backend::sandbox::{
    AllowedDomains, ExecFiles, ExecOutput, ExecRequest, LimitKind, Network, Sandbox,
};
use trellis_fs_tools::sandbox::{BubblewrapConfig, BubblewrapSandbox};

use super::{bwrap, state};

/// An HTTP server on the host's `127.0.0.1` that answers every request with `hello <path>` and
/// remembers the request lines it got.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let log = log.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let line = head.lines().next().unwrap_or("").to_owned();
                    let path = line.split(' ').nth(1).unwrap_or("?").to_owned();
                    log.lock().unwrap().push(line);
                    let body = format!("hello {path}");
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Self { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn domains(entries: &[&str]) -> Network {
    Network::Domains(AllowedDomains::parse(entries).unwrap())
}

async fn run(sandbox: &dyn Sandbox, command: &str, network: Network) -> ExecOutput {
    sandbox
        .execute(
            &ExecFiles::new(state()),
            &ExecRequest::new(command)
                .network(network)
                .timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap()
}

/// The shared sandbox, checked to offer allowed domains here.
fn proxied(test: &str) -> Option<Arc<BubblewrapSandbox>> {
    let sandbox = bwrap(test)?;
    let report = sandbox.report();
    let network = report
        .limits
        .iter()
        .find(|l| l.kind == LimitKind::Network)
        .unwrap();
    assert!(
        network.detail.contains("through Trellis's proxy"),
        "allowed domains are unavailable: {}",
        network.detail
    );
    Some(sandbox)
}

/// Start a [`Server`], then run `command(port)` in the shared sandbox allowing `allowed`; `None`
/// when the test is skipped.
async fn against_server(
    test: &str,
    allowed: &[&str],
    command: impl FnOnce(u16) -> String,
) -> Option<(Server, ExecOutput)> {
    let sandbox = proxied(test)?;
    let server = Server::start().await;
    let out = run(sandbox.as_ref(), &command(server.port), domains(allowed)).await;
    Some((server, out))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_domain_is_reached_over_plain_http_and_connect() {
    let Some((server, out)) = against_server("an_allowed_domain_is_reached_over_plain_http_and_connect", &["localhost", "127.0.0.1", "::1"], |port| {
        format!(
            "curl -sS --max-time 20 http://localhost:{port}/plain; echo; \
             curl -sS --max-time 20 --proxytunnel http://localhost:{port}/tunnel; echo; \
             python3 -c \"import urllib.request; print(urllib.request.urlopen('http://localhost:{port}/python', timeout=20).read().decode())\""
        )
    })
    .await
    else {
        return;
    };
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    for path in ["/plain", "/tunnel", "/python"] {
        assert!(
            out.output.contains(&format!("hello {path}")),
            "{path}: {}",
            out.output
        );
    }
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    // The proxy sends requests on in origin form, never the absolute URL the client gave it.
    assert!(seen.iter().all(|l| l.starts_with("GET /")), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_domains_and_addresses_are_refused_with_the_reason() {
    let Some((server, out)) = against_server(
        "other_domains_and_addresses_are_refused_with_the_reason",
        &["localhost", "127.0.0.1"],
        |port| {
            format!(
                "curl -sS -w ' status=%{{http_code}}\\n' http://other.invalid/x; \
             curl -sS -w ' status=%{{http_code}}\\n' http://127.0.0.2:{port}/literal; \
             curl -sS -w ' status=%{{http_code}}\\n' http://localhost.evil.invalid:{port}/suffix; \
             curl -sS --proxytunnel https://other.invalid/ 2>&1; echo \" exit=$?\"; \
             python3 -c \"
import urllib.request, urllib.error
try:
    urllib.request.urlopen('http://169.254.169.254/latest/meta-data/', timeout=20)
except urllib.error.HTTPError as e:
    print('metadata', e.code, e.reason)
\""
            )
        },
    )
    .await
    else {
        return;
    };
    let o = &out.output;
    assert!(
        o.contains("other.invalid is not an allowed domain (allowed: localhost, 127.0.0.1)")
            && o.contains("status=403"),
        "{o}"
    );
    assert!(o.contains("127.0.0.2 is not an allowed domain"), "{o}");
    assert!(
        o.contains("localhost.evil.invalid is not an allowed domain"),
        "{o}"
    );
    assert!(o.contains("CONNECT tunnel failed, response 403"), "{o}");
    assert!(
        o.contains("metadata 403 Domain not allowed by the Trellis sandbox"),
        "{o}"
    );
    assert_eq!(server.seen(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_name_that_resolves_to_a_loopback_address_is_refused() {
    let Some((server, out)) = against_server(
        "an_allowed_name_that_resolves_to_a_loopback_address_is_refused",
        &["localhost"],
        |port| format!("curl -sS -w ' status=%{{http_code}}' http://localhost:{port}/rebound"),
    )
    .await
    else {
        return;
    };
    assert!(out.output.contains("status=403"), "{}", out.output);
    assert!(
        out.output.contains("localhost resolves to")
            && out.output.contains("loopback, private or link-local"),
        "{}",
        out.output
    );
    assert_eq!(server.seen(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn there_is_no_route_around_the_proxy() {
    let Some((server, out)) = against_server(
        "there_is_no_route_around_the_proxy",
        &["localhost", "127.0.0.1", "example.com"],
        |port| {
            format!(
                "curl -sS --max-time 10 --noproxy '*' http://127.0.0.1:{port}/direct; echo \" curl=$?\"; \
             python3 -c \"
import socket
for host in ['127.0.0.1', '1.1.1.1', '169.254.169.254']:
    try:
        socket.create_connection((host, {port} if host == '127.0.0.1' else 80), timeout=5).close()
        print(host, 'connected')
    except OSError as e:
        print(host, 'failed', e)
try:
    socket.getaddrinfo('example.com', 80)
    print('dns resolved')
except OSError as e:
    print('dns failed', e)
\""
            )
        },
    )
    .await
    else {
        return;
    };
    let o = &out.output;
    assert!(!o.contains("hello"), "{o}");
    assert!(!o.contains("curl=0"), "{o}");
    for host in ["127.0.0.1", "1.1.1.1", "169.254.169.254"] {
        assert!(o.contains(&format!("{host} failed")), "{host}: {o}");
    }
    assert!(o.contains("dns failed"), "{o}");
    assert_eq!(server.seen(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_bridge_a_request_for_domains_fails_and_runs_nothing() {
    if bwrap("without_a_bridge_a_request_for_domains_fails_and_runs_nothing").is_none() {
        return;
    }
    let sandbox =
        BubblewrapSandbox::new(BubblewrapConfig::default().network_bridge("/nonexistent/bridge")).unwrap();
    let network = sandbox.report();
    let network = network
        .limits
        .iter()
        .find(|l| l.kind == LimitKind::Network)
        .unwrap();
    assert!(
        network.detail.contains("allowed domains are unavailable"),
        "{}",
        network.detail
    );
    let backend = state();
    let err = sandbox
        .execute(
            &ExecFiles::new(backend.clone()),
            &ExecRequest::new("echo ran > /ran").network(domains(&["example.com"])),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/bridge"), "{err}");
    assert!(super::text(backend.as_ref(), "/ran").await.is_none());
}

/// A bridge program under a directory others cannot enter — a checkout under `/root`, mode 0700,
/// as CI's clean clone is — is still bound into the sandbox: bwrap sets up its mounts in a user
/// namespace that maps no other user, so it failed with "Can't find source path …: Permission
/// denied" before Trellis staged a copy others can reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_under_a_private_directory_still_carries_connections() {
    use std::os::unix::fs::PermissionsExt;
    let Some(shared) = proxied("a_bridge_under_a_private_directory_still_carries_connections") else {
        return;
    };
    drop(shared);
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let original = [
        dir.join("trellis-sandbox-bridge"),
        dir.join("../trellis-sandbox-bridge"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("cargo builds trellis-sandbox-bridge for the tests");
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let bridge = private.path().join("bridge");
    std::fs::copy(&original, &bridge).unwrap();
    let sandbox = BubblewrapSandbox::new(BubblewrapConfig::default().network_bridge(&bridge)).unwrap();
    let server = Server::start().await;
    let out = run(
        &sandbox,
        &format!("curl -sS --max-time 20 http://localhost:{}/private", server.port),
        domains(&["localhost", "127.0.0.1", "::1"]),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", out.output);
    assert!(out.output.contains("hello /private"), "{}", out.output);
}
