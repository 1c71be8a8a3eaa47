//! A TCP proxy in front of a served `trellis serve` that can drop every connection open through
//! it at once ([`CutProxy::cut`]), as a network failure would, while the server goes on: for the
//! page's rejoin after a cut stream (`ui.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The proxy; stops when dropped.
pub(crate) struct CutProxy {
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    cuts: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    /// A proxy to `target` (`http://HOST:PORT`).
    pub(crate) async fn start(target: &str) -> Self {
        let target = target.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (cuts, watch) = watch::channel(0u64);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let target = target.clone();
                let mut cut = watch.clone();
                cut.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Self { url, cuts, task }
    }

    /// Drop every connection open now (new ones go through).
    pub(crate) fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
