//! A TCP proxy that can drop every connection open through it at once ([`CutProxy::cut`]), as a
//! network failure would, and refuse new ones for a while ([`CutProxy::down`] /
//! [`CutProxy::up`]), while the server behind it goes on: for the page's rejoin after a cut
//! stream (`ui.rs`) and a worker's database connection cut and restored (`workers/outage.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The proxy; stops when dropped.
pub(crate) struct CutProxy {
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    /// `127.0.0.1:PORT`.
    pub(crate) addr: String,
    cuts: watch::Sender<u64>,
    down: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    /// A proxy to `target` (`HOST:PORT`, or `http://HOST:PORT`).
    pub(crate) async fn start(target: &str) -> Self {
        let target = target.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (cuts, watch) = watch::channel(0u64);
        let down = Arc::new(AtomicBool::new(false));
        let refusing = down.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if refusing.load(Ordering::SeqCst) {
                    // Down: the connection is closed as soon as it is made.
                    continue;
                }
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
        Self {
            url: format!("http://{addr}"),
            addr,
            cuts,
            down,
            task,
        }
    }

    /// Drop every connection open now (new ones go through).
    pub(crate) fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Drop every connection open now and refuse new ones until [`up`](Self::up).
    pub(crate) fn down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cut();
    }

    /// Let connections through again.
    pub(crate) fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
