//! Google OAuth access tokens, for Claude on Vertex AI.
//!
//! Credentials are found as the GCS backend's object_store builder and Google's client libraries
//! find them, first match wins:
//!
//! 1. a key file: `GOOGLE_SERVICE_ACCOUNT_KEY` (the JSON itself), else the file named by
//!    `GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_SERVICE_ACCOUNT_PATH` or `GOOGLE_APPLICATION_CREDENTIALS`;
//! 2. the application-default credentials `gcloud auth application-default login` writes
//!    (`~/.config/gcloud/application_default_credentials.json`);
//! 3. the metadata server of the machine (`GCE_METADATA_HOST`, else `169.254.169.254`).
//!
//! A key file is a `service_account` key (an RS256 JWT signed with its private key through
//! `ring`, exchanged at its `token_uri` with the `jwt-bearer` grant, RFC 7523) or
//! `authorized_user` credentials (a refresh-token grant at their `token_uri`). The token is kept
//! and reused until a minute before it expires; concurrent calls wait for one refresh. A token
//! endpoint that refuses (4xx) is [`ModelError::Auth`]; one that fails (5xx, no answer) is
//! [`ModelError::Transport`], retried like any call.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use trellis_middleware::runtime::model::ModelError;

use super::ProviderError;
use super::clock::Clock;
use super::http::{ApiKey, Authorize, install_crypto_provider, read_capped};

/// Largest token answer read (Google's are about 1-2 KiB): the token and metadata endpoints are
/// remote input, and a body past this is an error instead of memory.
const MAX_TOKEN_ANSWER_BYTES: usize = 64 * 1024;
/// Longest lifetime a token answer's `expires_in` is taken for (Google issues one hour).
const MAX_TOKEN_LIFETIME_SECS: u64 = 24 * 3600;

/// The OAuth scope requested: Vertex AI accepts `cloud-platform`.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Google's token endpoint, when a key file names none.
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// A token is refreshed this long before it expires.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(60);

/// Where Google access tokens come from.
#[derive(Clone)]
pub enum GoogleCredentials {
    /// A service-account key: tokens from a signed JWT.
    ServiceAccount {
        /// `client_email`.
        client_email: String,
        /// `private_key_id` (the JWT's `kid`).
        private_key_id: Option<String>,
        /// The key that signs the JWT.
        key: Arc<RsaKeyPair>,
        /// `token_uri`.
        token_uri: String,
        /// `project_id`, the default project.
        project_id: Option<String>,
    },
    /// `authorized_user` credentials (gcloud's application default): tokens from a refresh token.
    AuthorizedUser {
        /// `client_id`.
        client_id: String,
        /// `client_secret`.
        client_secret: ApiKey,
        /// `refresh_token`.
        refresh_token: ApiKey,
        /// `token_uri` (default [`DEFAULT_TOKEN_URI`]).
        token_uri: String,
        /// `quota_project_id`, the default project.
        project_id: Option<String>,
    },
    /// The metadata server at this base URL (`http://169.254.169.254`).
    MetadataServer {
        /// Base URL without `/computeMetadata/...`.
        base_url: String,
    },
}

impl fmt::Debug for GoogleCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ServiceAccount {
                client_email,
                token_uri,
                ..
            } => f
                .debug_struct("ServiceAccount")
                .field("client_email", client_email)
                .field("token_uri", token_uri)
                .finish_non_exhaustive(),
            Self::AuthorizedUser {
                client_id, token_uri, ..
            } => f
                .debug_struct("AuthorizedUser")
                .field("client_id", client_id)
                .field("token_uri", token_uri)
                .finish_non_exhaustive(),
            Self::MetadataServer { base_url } => f
                .debug_struct("MetadataServer")
                .field("base_url", base_url)
                .finish(),
        }
    }
}

#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: String,
    client_email: Option<String>,
    private_key_id: Option<String>,
    private_key: Option<String>,
    token_uri: Option<String>,
    project_id: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    refresh_token: Option<String>,
    quota_project_id: Option<String>,
}

impl GoogleCredentials {
    /// Read a key file's JSON (`service_account` or `authorized_user`). A key that does not parse
    /// is [`ProviderError::InvalidConfig`] naming `source`, never echoing the key.
    pub fn from_json(json: &str, source: &str) -> Result<Self, ProviderError> {
        let invalid = |why: String| ProviderError::InvalidConfig {
            message: format!("the Google credentials in {source} are unusable: {why}"),
        };
        let file: KeyFile =
            serde_json::from_str(json).map_err(|e| invalid(format!("not a key file ({e})")))?;
        let need = |field: Option<String>, name: &str| {
            field
                .filter(|v| !v.is_empty())
                .ok_or_else(|| invalid(format!("`{name}` is missing")))
        };
        let token_uri = file
            .token_uri
            .clone()
            .unwrap_or_else(|| DEFAULT_TOKEN_URI.to_owned());
        match file.kind.as_str() {
            "service_account" => {
                let pem = need(file.private_key, "private_key")?;
                let der = pem_body(&pem).ok_or_else(|| invalid("`private_key` is not a PEM key".into()))?;
                let key = RsaKeyPair::from_pkcs8(&der)
                    .map_err(|e| invalid(format!("`private_key` is not a PKCS #8 RSA key ({e})")))?;
                Ok(Self::ServiceAccount {
                    client_email: need(file.client_email, "client_email")?,
                    private_key_id: file.private_key_id,
                    key: Arc::new(key),
                    token_uri,
                    project_id: file.project_id,
                })
            }
            "authorized_user" => Ok(Self::AuthorizedUser {
                client_id: need(file.client_id, "client_id")?,
                client_secret: need(file.client_secret, "client_secret")?.into(),
                refresh_token: need(file.refresh_token, "refresh_token")?.into(),
                token_uri,
                project_id: file.quota_project_id,
            }),
            other => Err(invalid(format!(
                "type `{other}` is not supported (service_account or authorized_user)"
            ))),
        }
    }

    /// The credentials the environment names (see the module docs), read through `env`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if let Some(json) = var("GOOGLE_SERVICE_ACCOUNT_KEY") {
            return Self::from_json(&json, "GOOGLE_SERVICE_ACCOUNT_KEY");
        }
        for name in [
            "GOOGLE_SERVICE_ACCOUNT",
            "GOOGLE_SERVICE_ACCOUNT_PATH",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            if let Some(path) = var(name) {
                let json = std::fs::read_to_string(&path).map_err(|e| ProviderError::InvalidConfig {
                    message: format!("cannot read the Google credentials file {path} ({name}): {e}"),
                })?;
                return Self::from_json(&json, &path);
            }
        }
        if let Some(home) = var("HOME") {
            let path =
                std::path::Path::new(&home).join(".config/gcloud/application_default_credentials.json");
            if let Ok(json) = std::fs::read_to_string(&path) {
                return Self::from_json(&json, &path.display().to_string());
            }
        }
        let host = var("GCE_METADATA_HOST").unwrap_or_else(|| "169.254.169.254".to_owned());
        Ok(Self::MetadataServer {
            base_url: format!("http://{host}"),
        })
    }

    /// The project the credentials belong to, when they say.
    pub fn project_id(&self) -> Option<&str> {
        match self {
            Self::ServiceAccount { project_id, .. } | Self::AuthorizedUser { project_id, .. } => {
                project_id.as_deref()
            }
            Self::MetadataServer { .. } => None,
        }
    }
}

/// The DER bytes of a PEM block.
fn pem_body(pem: &str) -> Option<Vec<u8>> {
    let body: String = pem
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----") && !l.is_empty())
        .collect();
    STANDARD.decode(body).ok()
}

/// A token and when it expires.
#[derive(Debug, Clone)]
struct Token {
    value: ApiKey,
    expires: SystemTime,
}

/// Adds `authorization: Bearer <token>` to each request, refreshing the token when needed.
#[derive(Debug)]
pub(crate) struct GoogleAuth {
    credentials: GoogleCredentials,
    client: reqwest::Client,
    clock: Clock,
    token: Mutex<Option<Token>>,
}

impl GoogleAuth {
    pub(crate) fn new(credentials: GoogleCredentials, clock: Clock) -> Result<Self, ProviderError> {
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| ProviderError::Client {
                message: e.to_string(),
            })?;
        Ok(Self {
            credentials,
            client,
            clock,
            token: Mutex::new(None),
        })
    }

    /// A token valid for at least [`EXPIRY_MARGIN`], fetched only when the kept one is not.
    async fn token(&self) -> Result<ApiKey, ModelError> {
        let mut kept = self.token.lock().await;
        let now = self.clock.now();
        if let Some(token) = kept.as_ref()
            && token.expires > now + EXPIRY_MARGIN
        {
            return Ok(token.value.clone());
        }
        let token = self.fetch(now).await?;
        let value = token.value.clone();
        *kept = Some(token);
        Ok(value)
    }

    async fn fetch(&self, now: SystemTime) -> Result<Token, ModelError> {
        let request = match &self.credentials {
            GoogleCredentials::ServiceAccount {
                client_email,
                private_key_id,
                key,
                token_uri,
                ..
            } => {
                let jwt = sign_jwt(key, client_email, private_key_id.as_deref(), token_uri, now)?;
                let form = url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer")
                    .append_pair("assertion", &jwt)
                    .finish();
                self.form(token_uri, form)
            }
            GoogleCredentials::AuthorizedUser {
                client_id,
                client_secret,
                refresh_token,
                token_uri,
                ..
            } => {
                let form = url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("grant_type", "refresh_token")
                    .append_pair("client_id", client_id)
                    .append_pair("client_secret", client_secret.expose())
                    .append_pair("refresh_token", refresh_token.expose())
                    .finish();
                self.form(token_uri, form)
            }
            GoogleCredentials::MetadataServer { base_url } => self
                .client
                .get(format!(
                    "{base_url}/computeMetadata/v1/instance/service-accounts/default/token"
                ))
                .header("metadata-flavor", "Google"),
        };
        let response = request.send().await.map_err(|e| ModelError::Transport {
            message: format!("cannot get a Google access token: {e}"),
            http: None,
        })?;
        let mut response = response;
        let status = response.status().as_u16();
        let body = read_capped(&mut response, MAX_TOKEN_ANSWER_BYTES)
            .await
            .map_err(|e| match e {
                ModelError::Other { message, http } => ModelError::Other {
                    message: format!("the Google token answer: {message}"),
                    http,
                },
                other => other,
            })?;
        if !(200..300).contains(&status) {
            let message = format!(
                "the Google token endpoint answered HTTP {status}: {}",
                super::snippet(&body)
            );
            return Err(if status >= 500 || status == 429 {
                ModelError::Transport { message, http: None }
            } else {
                ModelError::Auth { message, http: None }
            });
        }
        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let Some(token) = value.get("access_token").and_then(Value::as_str) else {
            return Err(ModelError::Auth {
                message: "the Google token answer holds no access_token".to_owned(),
                http: None,
            });
        };
        // Clamped: `now + u64::MAX seconds` overflows `SystemTime` and panics (security review F15).
        let lifetime = value
            .get("expires_in")
            .and_then(Value::as_u64)
            .unwrap_or(3600)
            .min(MAX_TOKEN_LIFETIME_SECS);
        Ok(Token {
            value: ApiKey::new(token),
            expires: now + Duration::from_secs(lifetime),
        })
    }

    fn form(&self, url: &str, form: String) -> reqwest::RequestBuilder {
        self.client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
    }
}

/// The RS256 JWT a service account exchanges for a token (Google's "Using OAuth 2.0 for Server
/// to Server Applications"): `iss` the account, `scope`, `aud` the token URI, one hour.
fn sign_jwt(
    key: &RsaKeyPair,
    client_email: &str,
    key_id: Option<&str>,
    token_uri: &str,
    now: SystemTime,
) -> Result<String, ModelError> {
    let iat = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut header = json!({"alg": "RS256", "typ": "JWT"});
    if let Some(kid) = key_id {
        header["kid"] = json!(kid);
    }
    let claims = json!({"iss": client_email, "scope": SCOPE, "aud": token_uri,
                        "iat": iat, "exp": iat + 3600});
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        signing_input.as_bytes(),
        &mut signature,
    )
    .map_err(|_| ModelError::Auth {
        message: "cannot sign the service-account JWT".to_owned(),
        http: None,
    })?;
    Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature)))
}

#[async_trait::async_trait]
impl Authorize for GoogleAuth {
    async fn authorize(&self, _url: &str, headers: &mut HeaderMap, _body: &[u8]) -> Result<(), ModelError> {
        let token = self.token().await?;
        let mut value =
            HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| ModelError::Auth {
                message: "the Google access token cannot be sent in a header".to_owned(),
                http: None,
            })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bad_key_files_are_named_without_echoing_the_key() {
        for (json, needle) in [
            ("nope", "not a key file"),
            (r#"{"type":"external_account"}"#, "not supported"),
            (
                r#"{"type":"service_account","client_email":"a@b"}"#,
                "`private_key` is missing",
            ),
            (
                r#"{"type":"service_account","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----"}"#,
                "not a PKCS #8 RSA key",
            ),
        ] {
            let err = GoogleCredentials::from_json(json, "key.json")
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle) && err.contains("key.json"), "{err}");
            assert!(!err.contains("c2VjcmV0"), "{err}");
        }
    }

    #[test]
    fn without_a_key_the_metadata_server_is_asked() {
        let env = |name: &str| (name == "GCE_METADATA_HOST").then(|| "127.0.0.1:9".to_owned());
        let creds = GoogleCredentials::from_env(&env).unwrap();
        assert!(
            matches!(&creds, GoogleCredentials::MetadataServer { base_url } if base_url == "http://127.0.0.1:9"),
            "{creds:?}"
        );
    }
}
