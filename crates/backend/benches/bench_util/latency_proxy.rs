//! A loopback latency proxy shared by benches (included with `#[path]` by `read_many` and by
//! `trellis-agent`'s `process` bench; not a bench target).
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

/// A loopback TCP proxy that holds every chunk the client sends for `delay` before passing it on:
/// each HTTP request pays one extra `delay` of latency.
pub async fn latency_proxy(upstream: String, delay: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = cr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        tokio::time::sleep(delay).await;
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                };
                let down = async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                };
                tokio::join!(up, down);
            });
        }
    });
    format!("http://{addr}")
}
