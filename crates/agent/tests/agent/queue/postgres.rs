//! The conformance suite on [`PostgresQueue`], each test in a database of its own on the cluster
//! `TRELLIS_DATABASE_URL` names (`cargo xtask test` starts one; without it the tests skip, and
//! fail under `TRELLIS_EMULATORS=required`). The database is dropped when the test ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use sqlx::Connection;
use trellis_agent::server::queue::{PostgresQueue, RunQueue};

/// Drops its database when the test is over (from a thread of its own: the test's runtime is
/// shutting down).
pub(crate) struct Database {
    admin_url: String,
    name: String,
}

impl Drop for Database {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut admin) = sqlx::PgConnection::connect(&url).await {
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut admin)
                    .await;
                }
            });
        })
        .join();
    }
}

/// A fresh database on the test cluster, and its URL.
pub(crate) async fn fresh_database(admin_url: &str) -> (Database, String) {
    let name = format!("trellis_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to TRELLIS_DATABASE_URL {admin_url}: {e}"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap();
    let (base, _) = admin_url
        .rsplit_once('/')
        .expect("a database URL ends with /DATABASE");
    let url = format!("{base}/{name}");
    (
        Database {
            admin_url: admin_url.to_owned(),
            name,
        },
        url,
    )
}

/// A fresh database on the cluster `TRELLIS_DATABASE_URL` names, and its URL; `None` (skip)
/// without it, a panic without it under `TRELLIS_EMULATORS=required`.
pub(crate) async fn test_database() -> Option<(Database, String)> {
    let admin = std::env::var("TRELLIS_DATABASE_URL")
        .ok()
        .filter(|v| !v.is_empty());
    let Some(admin) = admin else {
        if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") {
            panic!("TRELLIS_DATABASE_URL is not set but TRELLIS_EMULATORS=required");
        }
        eprintln!("skipped: set TRELLIS_DATABASE_URL or run `cargo xtask test`");
        return None;
    };
    Some(fresh_database(&admin).await)
}

async fn queue() -> Option<(Arc<dyn RunQueue>, Database)> {
    let (database, url) = test_database().await?;
    let queue = PostgresQueue::connect(&url, 8).await.unwrap();
    Some((Arc::new(queue), database))
}

super::conformance::suite!(queue);
super::limits::suite!(queue);
