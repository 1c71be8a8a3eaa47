//! AWS credentials and SigV4 request signing, for Claude on Amazon Bedrock.
//!
//! Credentials are read as the S3 backend's object_store builder and the AWS SDKs read them,
//! first match wins:
//!
//! 1. `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, with `AWS_SESSION_TOKEN` for temporary
//!    credentials;
//! 2. the profile `AWS_PROFILE` (default `default`) in the shared credentials file
//!    (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`), then in the config file
//!    (`AWS_CONFIG_FILE`, else `~/.aws/config`, section `[profile NAME]` or `[default]`):
//!    `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`.
//!
//! The region is `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the profile's `region` in the
//! config file. Instance, container and SSO credentials are not read (see docs/providers.md).
//!
//! Signing uses the `aws-sigv4` crate (the AWS SDK's own signer): each request is signed over its
//! exact body at the [`Clock`]'s time, with `x-amz-date`, `authorization` and, for temporary
//! credentials, `x-amz-security-token`.

use std::fmt;
use std::path::PathBuf;

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use trellis_middleware::runtime::model::ModelError;

use super::ProviderError;
use super::clock::Clock;
use super::http::{ApiKey, Authorize};

/// An AWS access key, with its session token for temporary credentials. `Debug` shows the key id
/// only.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: ApiKey,
    /// `AWS_SESSION_TOKEN`, for temporary credentials.
    pub session_token: Option<ApiKey>,
}

impl AwsCredentials {
    /// Long-term or (with a session token) temporary credentials.
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<ApiKey>,
        session_token: Option<ApiKey>,
    ) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token,
        }
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("session_token", &self.session_token.is_some())
            .finish_non_exhaustive()
    }
}

/// The environment as the AWS readers see it: empty values count as unset.
pub(crate) struct AwsEnv<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> AwsEnv<'a> {
    pub(crate) fn new(env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self { env }
    }

    fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|v| !v.trim().is_empty())
    }

    fn profile(&self) -> String {
        self.var("AWS_PROFILE").unwrap_or_else(|| "default".to_owned())
    }

    /// `var`, else `~/.aws/<file>`.
    fn file(&self, var: &str, file: &str) -> Option<PathBuf> {
        self.var(var)
            .map(PathBuf::from)
            .or_else(|| Some(PathBuf::from(self.var("HOME")?).join(".aws").join(file)))
    }

    /// A key of the profile's section in the credentials file (`[NAME]`) or config file
    /// (`[profile NAME]`, or `[default]`).
    fn profile_value(&self, key: &str, files: &[Files]) -> Option<String> {
        let profile = self.profile();
        files.iter().find_map(|which| {
            let (path, section) = match which {
                Files::Credentials => (
                    self.file("AWS_SHARED_CREDENTIALS_FILE", "credentials")?,
                    profile.clone(),
                ),
                Files::Config => (
                    self.file("AWS_CONFIG_FILE", "config")?,
                    if profile == "default" {
                        profile.clone()
                    } else {
                        format!("profile {profile}")
                    },
                ),
            };
            let text = std::fs::read_to_string(path).ok()?;
            ini_value(&text, &section, key)
        })
    }

    /// The credentials (see the module docs); the error says what was looked at.
    pub(crate) fn credentials(&self, model: &str) -> Result<AwsCredentials, ProviderError> {
        if let (Some(id), Some(secret)) = (self.var("AWS_ACCESS_KEY_ID"), self.var("AWS_SECRET_ACCESS_KEY")) {
            return Ok(AwsCredentials::new(
                id,
                secret,
                self.var("AWS_SESSION_TOKEN").map(ApiKey::new),
            ));
        }
        let both = [Files::Credentials, Files::Config];
        if let (Some(id), Some(secret)) = (
            self.profile_value("aws_access_key_id", &both),
            self.profile_value("aws_secret_access_key", &both),
        ) {
            return Ok(AwsCredentials::new(
                id,
                secret,
                self.profile_value("aws_session_token", &both).map(ApiKey::new),
            ));
        }
        Err(ProviderError::MissingCredentials {
            provider: "Amazon Bedrock",
            model: model.to_owned(),
            looked_at: format!(
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set, and profile `{}` has no \
                 aws_access_key_id and aws_secret_access_key in ~/.aws/credentials or ~/.aws/config",
                self.profile()
            ),
        })
    }

    /// The region (see the module docs).
    pub(crate) fn region(&self) -> Option<String> {
        self.var("AWS_REGION")
            .or_else(|| self.var("AWS_DEFAULT_REGION"))
            .or_else(|| self.profile_value("region", &[Files::Config]))
    }

    /// An endpoint override: `AWS_ENDPOINT_URL_<SERVICE>`, else `AWS_ENDPOINT_URL` (the AWS SDKs'
    /// service-specific endpoint variables).
    pub(crate) fn endpoint(&self, service_var: &str) -> Option<String> {
        self.var(&format!("AWS_ENDPOINT_URL_{service_var}"))
            .or_else(|| self.var("AWS_ENDPOINT_URL"))
    }
}

#[derive(Debug, Clone, Copy)]
enum Files {
    Credentials,
    Config,
}

/// `key` in `[section]` of an INI text (`#` and `;` start comments; keys and sections are
/// compared exactly, as the AWS CLI does).
fn ini_value(text: &str, section: &str, key: &str) -> Option<String> {
    let mut current = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(name.trim().to_owned());
            continue;
        }
        if current.as_deref() != Some(section) {
            continue;
        }
        if let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            return Some(v.trim().to_owned()).filter(|v| !v.is_empty());
        }
    }
    None
}

/// Signs every request with SigV4 for one service and region.
#[derive(Debug)]
pub(crate) struct SigV4 {
    pub credentials: AwsCredentials,
    pub region: String,
    /// The signing name (`bedrock` for the Bedrock runtime).
    pub service: &'static str,
    pub clock: Clock,
}

#[async_trait::async_trait]
impl Authorize for SigV4 {
    async fn authorize(&self, url: &str, headers: &mut HeaderMap, body: &[u8]) -> Result<(), ModelError> {
        let failed = |what: &dyn fmt::Display| ModelError::Auth {
            message: format!("cannot sign the request with SigV4: {what}"),
            http: None,
        };
        let identity = aws_credential_types::Credentials::new(
            &self.credentials.access_key_id,
            self.credentials.secret_access_key.expose(),
            self.credentials
                .session_token
                .as_ref()
                .map(|t| t.expose().to_owned()),
            None,
            "trellis",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(self.service)
            .time(self.clock.now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| failed(&e))?
            .into();
        let signed: Vec<(&str, &str)> = headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect();
        let request = SignableRequest::new("POST", url, signed.into_iter(), SignableBody::Bytes(body))
            .map_err(|e| failed(&e))?;
        let (instructions, _) = sign(request, &params).map_err(|e| failed(&e))?.into_parts();
        let mut add = Vec::new();
        for (name, value) in instructions.headers() {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| failed(&e))?;
            let mut value = HeaderValue::from_str(value).map_err(|e| failed(&e))?;
            value.set_sensitive(name != "x-amz-date");
            add.push((name, value));
        }
        headers.extend(add);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_and_comments() {
        let text = "# comment\n[default]\naws_access_key_id = AKIA1\n\n[profile work]\nregion=eu-west-1\n; x\n[work]\naws_access_key_id=AKIA2\n";
        assert_eq!(
            ini_value(text, "default", "aws_access_key_id").as_deref(),
            Some("AKIA1")
        );
        assert_eq!(
            ini_value(text, "work", "aws_access_key_id").as_deref(),
            Some("AKIA2")
        );
        assert_eq!(
            ini_value(text, "profile work", "region").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(ini_value(text, "default", "region"), None);
    }

    #[test]
    fn credentials_debug_hides_the_secret() {
        let c = AwsCredentials::new("AKIDEXAMPLE", "very-secret", Some(ApiKey::new("tok-secret")));
        let shown = format!("{c:?}");
        assert!(
            shown.contains("AKIDEXAMPLE") && !shown.contains("secret"),
            "{shown}"
        );
    }
}
