//! A SigV4 verifier written from AWS's "Create a signed AWS API request" (Signature Version 4,
//! docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html), independent of the
//! `aws-sigv4` crate the provider signs with: the Bedrock tests recompute the signature of what
//! the mock server received and compare.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use ring::{digest, hmac};

/// What a SigV4 `authorization` header says.
#[derive(Debug)]
pub struct Authorization {
    pub access_key_id: String,
    pub date: String,
    pub region: String,
    pub service: String,
    pub signed_headers: Vec<String>,
    pub signature: String,
}

/// Parse `AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request, SignedHeaders=a;b, Signature=hex`.
pub fn parse_authorization(header: &str) -> Authorization {
    let rest = header
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .expect("the SigV4 algorithm");
    let mut fields = std::collections::HashMap::new();
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=').expect("key=value");
        fields.insert(k.to_owned(), v.to_owned());
    }
    let scope: Vec<&str> = fields["Credential"].split('/').collect();
    assert_eq!(scope.len(), 5, "{header}");
    assert_eq!(scope[4], "aws4_request");
    Authorization {
        access_key_id: scope[0].to_owned(),
        date: scope[1].to_owned(),
        region: scope[2].to_owned(),
        service: scope[3].to_owned(),
        signed_headers: fields["SignedHeaders"].split(';').map(str::to_owned).collect(),
        signature: fields["Signature"].clone(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, bytes).as_ref())
}

fn hmac_sha256(key: &[u8], data: &str) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
        .as_ref()
        .to_vec()
}

/// A canonical URI: every path segment URI-encoded again (for services other than S3, the
/// already-encoded path is encoded a second time).
fn canonical_uri(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            segment
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The request a signature covers: `method`, the encoded `path` (no query), the signed headers
/// (lower-case names and their values) and the body.
#[derive(Debug)]
pub struct Signed<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// The signature of `request`, made with `secret` for `region` and `service` at `amz_date`
/// (`YYYYMMDDTHHMMSSZ`).
pub fn signature(secret: &str, region: &str, service: &str, amz_date: &str, request: &Signed<'_>) -> String {
    let Signed {
        method,
        path,
        headers,
        body,
    } = *request;
    let mut headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_ascii_lowercase(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let canonical_request = format!(
        "{method}\n{}\n\n{canonical_headers}\n{}\n{}",
        canonical_uri(path),
        signed.join(";"),
        sha256_hex(body)
    );
    let date = &amz_date[..8];
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    let k_date = hmac_sha256(format!("AWS4{secret}").as_bytes(), date);
    let k_region = hmac_sha256(&k_date, region);
    let k_service = hmac_sha256(&k_region, service);
    let k_signing = hmac_sha256(&k_service, "aws4_request");
    hex(&hmac_sha256(&k_signing, &string_to_sign))
}

#[test]
fn the_verifier_reproduces_awss_published_example() {
    // The `get-vanilla` case of AWS's SigV4 test suite (aws-sig-v4-test-suite): GET / on
    // example.amazonaws.com, service `service`, us-east-1, 2015-08-30T12:36:00Z.
    let headers = [
        ("host".to_owned(), "example.amazonaws.com".to_owned()),
        ("x-amz-date".to_owned(), "20150830T123600Z".to_owned()),
    ];
    assert_eq!(
        signature(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "us-east-1",
            "service",
            "20150830T123600Z",
            &Signed {
                method: "GET",
                path: "/",
                headers: &headers,
                body: b"",
            },
        ),
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
}
