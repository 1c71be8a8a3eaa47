//! Where the emulators are, from the environment `cargo xtask test` sets.

use std::time::{SystemTime, UNIX_EPOCH};

use trellis_backend::{ObjectStoreBackend, StoreOptions};

/// The S3 emulator.
#[derive(Debug, Clone)]
pub struct S3Target {
    /// `http://127.0.0.1:4566` or the like (`TRELLIS_S3_ENDPOINT`).
    pub endpoint: String,
    /// The test bucket (`TRELLIS_TEST_BUCKET`).
    pub bucket: String,
}

/// The S3 emulator, or `None` after printing that `suite` was skipped. With
/// `TRELLIS_EMULATORS=required` (as `cargo xtask test` and CI set) a missing emulator is a failure.
pub fn s3_target(suite: &str) -> Option<S3Target> {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    match (var("TRELLIS_S3_ENDPOINT"), var("TRELLIS_TEST_BUCKET")) {
        (Some(endpoint), Some(bucket)) => Some(S3Target { endpoint, bucket }),
        _ if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") => {
            panic!(
                "{suite}: TRELLIS_S3_ENDPOINT and TRELLIS_TEST_BUCKET must be set when TRELLIS_EMULATORS=required"
            )
        }
        _ => {
            println!("skipped: {suite} (set TRELLIS_S3_ENDPOINT or run `cargo xtask test`)");
            None
        }
    }
}

/// An object-store emulator that `cargo xtask test` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    /// moto (`TRELLIS_S3_ENDPOINT`).
    S3,
    /// fake-gcs-server behind the XML shim (`TRELLIS_GCS_ENDPOINT`, `TRELLIS_GCS_SERVICE_ACCOUNT`).
    Gcs,
    /// Azurite (`TRELLIS_AZURE_ENDPOINT`).
    Azure,
}

/// Azurite's well-known development account (documented by Microsoft; not a secret).
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

impl Cloud {
    /// The variables that locate this emulator (the bucket aside).
    fn vars(self) -> &'static [&'static str] {
        match self {
            Cloud::S3 => &["TRELLIS_S3_ENDPOINT"],
            Cloud::Gcs => &["TRELLIS_GCS_ENDPOINT", "TRELLIS_GCS_SERVICE_ACCOUNT"],
            Cloud::Azure => &["TRELLIS_AZURE_ENDPOINT"],
        }
    }

    /// The header a version-checked write carries: `if-match` (S3, Azure) or
    /// `x-goog-if-generation-match` (GCS).
    pub fn update_header(self) -> &'static str {
        match self {
            Cloud::S3 | Cloud::Azure => "if-match",
            Cloud::Gcs => "x-goog-if-generation-match",
        }
    }

    /// The header a create-only write carries: `if-none-match: *` (S3, Azure) or
    /// `x-goog-if-generation-match: 0` (GCS).
    pub fn create_header(self) -> &'static str {
        match self {
            Cloud::S3 | Cloud::Azure => "if-none-match",
            Cloud::Gcs => "x-goog-if-generation-match",
        }
    }
}

/// One object-store emulator, located from the environment.
#[derive(Debug, Clone)]
pub struct CloudTarget {
    /// Which emulator.
    pub cloud: Cloud,
    /// Its endpoint, `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The test bucket, or container on Azure (`TRELLIS_TEST_BUCKET`).
    pub bucket: String,
    /// The GCS service-account file (`disable_oauth`: no token traffic).
    service_account: Option<String>,
}

/// The emulator for `cloud`, or `None` after printing that `suite` was skipped. With
/// `TRELLIS_EMULATORS=required` a missing emulator is a failure.
pub fn cloud_target(cloud: Cloud, suite: &str) -> Option<CloudTarget> {
    let var = |name: &str| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    let mut names = cloud.vars().to_vec();
    names.push("TRELLIS_TEST_BUCKET");
    let values: Vec<Option<String>> = names.iter().map(|n| var(n)).collect();
    if values.iter().any(Option::is_none) {
        if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") {
            panic!(
                "{suite}: {} must be set when TRELLIS_EMULATORS=required",
                names.join(", ")
            );
        }
        println!(
            "skipped: {suite} (set {} or run `cargo xtask test`)",
            names.join(", ")
        );
        return None;
    }
    let mut values = values.into_iter().flatten();
    let endpoint = values.next()?;
    let service_account = (cloud == Cloud::Gcs).then(|| values.next()).flatten();
    let bucket = values.next()?;
    Some(CloudTarget {
        cloud,
        endpoint,
        bucket,
        service_account,
    })
}

impl CloudTarget {
    /// A backend on `prefix` of the test bucket that sends every request to `endpoint`: the
    /// emulator's own ([`Self::endpoint`]) or a proxy in front of it. `options` supplies retries
    /// and timeouts; the store's own keys are added here.
    ///
    /// Azure is addressed as an account endpoint (`<endpoint>/devstoreaccount1`, shared key), not
    /// in object_store's emulator mode, which reads its address from a process-wide variable
    /// (`AZURITE_BLOB_STORAGE_URL`) and so cannot point one store at a proxy and another at Azurite.
    pub fn backend(
        &self,
        endpoint: &str,
        prefix: &str,
        options: StoreOptions,
    ) -> trellis_backend::Result<ObjectStoreBackend> {
        let (url, keys) = match self.cloud {
            Cloud::S3 => (
                format!("s3://{}/{prefix}", self.bucket),
                StoreOptions::s3_compatible(endpoint, "test", "test").options,
            ),
            Cloud::Gcs => (
                format!("gs://{}/{prefix}", self.bucket),
                StoreOptions::default()
                    .with(
                        "google_service_account",
                        self.service_account.clone().unwrap_or_default(),
                    )
                    .with("google_base_url", endpoint)
                    .options,
            ),
            Cloud::Azure => (
                format!("az://{}/{prefix}", self.bucket),
                StoreOptions::default()
                    .with("azure_storage_account_name", AZURITE_ACCOUNT)
                    .with("azure_storage_account_key", AZURITE_KEY)
                    .with(
                        "azure_storage_endpoint",
                        format!("{}/{AZURITE_ACCOUNT}", endpoint.trim_end_matches('/')),
                    )
                    .with("azure_allow_http", "true")
                    .options,
            ),
        };
        let options = StoreOptions {
            options: keys.into_iter().chain(options.options).collect(),
            ..options
        };
        ObjectStoreBackend::from_url(&url, &options)
    }
}

/// `tag` made unique to this process and moment, for key prefixes and thread ids.
pub fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{tag}-{}-{nanos}", std::process::id())
}
