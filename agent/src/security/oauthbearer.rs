//! SASL/OAUTHBEARER (RFC 7628, KIP-255/KIP-768): a client authenticates
//! with a JWT access token, as with Kafka's `OAuthBearerValidatorCallbackHandler`:
//!
//! - signed tokens are checked against a JSON Web Key Set (Kafka's
//!   `sasl.oauthbearer.jwks.endpoint.url`: an `https://` (or `http://`)
//!   endpoint, fetched at start, every `sasl_oauthbearer_jwks_refresh`
//!   (Kafka's one hour) and soon after a token names a key it does not
//!   hold (a rotation), or a file, read again within 10 s of a change;
//!   what does not load keeps the keys before it): the key named by
//!   the token's `kid` (or the set's only key), its algorithm (RSA, EC or
//!   EdDSA; never a shared-secret HMAC), `exp` (and `nbf`) within a clock
//!   skew of 30 s, and the issuer and audience when configured;
//! - unsecured tokens (`alg: none`, what librdkafka's and Java's test
//!   login modules make) only with `--sasl-oauthbearer-unsecured`, for
//!   tests: Kafka accepts them by default, floe only when asked.
//!
//! The principal is the token's `sub` claim (Kafka's
//! `sasl.oauthbearer.sub.claim.name`). A token's expiry bounds its session
//! (KIP-368): with re-authentication on, the session ends when the token
//! does, whichever comes first.

use std::path::Path;

use anyhow::Context;
use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

pub const OAUTHBEARER: &str = "OAUTHBEARER";

/// Kafka's `sasl.oauthbearer.clock.skew.seconds` default.
const CLOCK_SKEW_SECONDS: u64 = 30;
/// A token longer than this is refused unread (the frame holding it is
/// bounded anyway: `sasl::MAX_UNAUTHENTICATED_FRAME`).
const MAX_TOKEN_BYTES: usize = 64 << 10;

/// Kafka's answer to a token it refuses, sent as a challenge; the client
/// then sends `\x01` and gets SASL_AUTHENTICATION_FAILED.
pub const INVALID_TOKEN: &[u8] = br#"{"status":"invalid_token"}"#;

/// Where a key set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    File(std::path::PathBuf),
    /// An `https://` or `http://` endpoint.
    Url(String),
}

impl KeySource {
    /// `https://…` and `http://…` are endpoints; `file:…` and anything
    /// else a file, as Kafka's `sasl.oauthbearer.jwks.endpoint.url` takes them.
    pub fn parse(setting: &str) -> KeySource {
        let lower = setting.to_ascii_lowercase();
        if lower.starts_with("https://") || lower.starts_with("http://") {
            return KeySource::Url(setting.to_string());
        }
        let path = setting
            .strip_prefix("file://")
            .or_else(|| setting.strip_prefix("file:"));
        KeySource::File(path.unwrap_or(setting).into())
    }
}

/// Where tokens are checked against.
pub struct Validator {
    /// The key set's source, if any.
    jwks: Option<KeySource>,
    /// The keys as last loaded, and a checksum of what they came from.
    keys: std::sync::RwLock<(std::sync::Arc<Keys>, Option<u32>)>,
    unsecured: bool,
    issuer: Option<String>,
    audience: Vec<String>,
    /// An endpoint's refresh interval.
    refresh: std::time::Duration,
    /// Set when a token named a key the set does not hold: an endpoint is
    /// fetched again soon (at most every [`REFETCH_AFTER_UNKNOWN_KID`]).
    unknown_kid: std::sync::atomic::AtomicBool,
    /// An endpoint's client.
    client: Option<reqwest::Client>,
}

/// The least time between two fetches of an endpoint asked for by unknown
/// keys, so a client sending made-up kids cannot hammer the provider.
const REFETCH_AFTER_UNKNOWN_KID: std::time::Duration = std::time::Duration::from_secs(10);
/// An endpoint's answer must come within this, and hold at most this much.
const FETCH_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);
const MAX_JWKS_BYTES: usize = 1 << 20;

/// Each key of a set: its id, the algorithms it verifies, the key.
type Keys = Vec<(Option<String>, Vec<Algorithm>, DecodingKey)>;

/// How often the key set's file is looked at for changes (keys rotate: an
/// identity provider publishes a new key before it signs with it).
pub const RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The usable keys of a JWKS file, or why there are none.
fn load_keys(path: &Path) -> anyhow::Result<Keys> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse_keys(&text, &path.display().to_string())
}

/// The usable keys of a JWKS document read from `from`.
fn parse_keys(text: &[u8], from: &str) -> anyhow::Result<Keys> {
    let set: JwkSet = serde_json::from_slice(text)
        .with_context(|| format!("{from} is not a JSON Web Key Set"))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let mut algorithms = algorithms_of(&jwk.algorithm);
        // A key declared for one algorithm verifies only that one; a key
        // for encryption verifies nothing (Kafka's `use=sig` selection).
        if let Some(declared) = &jwk.common.key_algorithm {
            let declared = format!("{declared:?}");
            algorithms.retain(|a| format!("{a:?}") == declared);
        }
        if jwk.common.public_key_use == Some(jsonwebtoken::jwk::PublicKeyUse::Encryption) {
            algorithms.clear();
        }
        if algorithms.is_empty() {
            tracing::warn!(kid = ?jwk.common.key_id, "skipping a JWK floe does not verify with (HMAC, an unknown curve, an encryption key)");
            continue;
        }
        // One bad key does not take the others with it (a rotation
        // published beside it must still load).
        match DecodingKey::from_jwk(jwk) {
            Ok(key) => keys.push((jwk.common.key_id.clone(), algorithms, key)),
            Err(e) => {
                tracing::warn!(kid = ?jwk.common.key_id, error = %e, "skipping a JWK that does not load")
            }
        }
    }
    anyhow::ensure!(!keys.is_empty(), "{from} holds no usable key");
    Ok(keys)
}

/// `url` as logs show it: without credentials or a query.
fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_password(None);
            let _ = u.set_username("");
            u.set_query(None);
            u.to_string()
        }
        Err(_) => "(an endpoint)".into(),
    }
}

/// An endpoint's key set: one GET, bounded in time and size, no redirects.
async fn fetch_keys(client: &reqwest::Client, endpoint: &str) -> anyhow::Result<(Keys, u32)> {
    let url = &shown(endpoint);
    let mut response = client
        .get(endpoint)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("fetching {url}: {}", e.without_url()))?;
    anyhow::ensure!(
        response.status().is_success(),
        "{url} answered {}",
        response.status()
    );
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .with_context(|| format!("reading {url}"))?
    {
        anyhow::ensure!(
            body.len() + chunk.len() <= MAX_JWKS_BYTES,
            "{url} sent more than {MAX_JWKS_BYTES} bytes"
        );
        body.extend_from_slice(&chunk);
    }
    Ok((parse_keys(&body, url)?, crc32c::crc32c(&body)))
}

use crate::security::sasl::checksum;

/// A token that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated {
    pub principal: String,
    /// Its `exp`, in ms since the epoch.
    pub expires_at_ms: i64,
}

/// The algorithms a key may verify (never an HMAC: a public key is no
/// shared secret).
fn algorithms_of(params: &AlgorithmParameters) -> Vec<Algorithm> {
    match params {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => Vec::new(),
        },
        AlgorithmParameters::OctetKeyPair(_) => vec![Algorithm::EdDSA],
        // HMAC secrets, and kinds the library may add.
        _ => Vec::new(),
    }
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    exp: f64,
    #[serde(default)]
    nbf: Option<f64>,
}

impl Claims {
    /// `exp` and `nbf` against the agent's clock, with Kafka's skew.
    fn check_times(&self, now_ms: i64) -> Result<(), String> {
        let skew_ms = (CLOCK_SKEW_SECONDS * 1000) as f64;
        let now = now_ms as f64;
        if self.exp * 1000.0 + skew_ms <= now {
            return Err("the token expired".into());
        }
        if self.nbf.is_some_and(|nbf| nbf * 1000.0 - skew_ms > now) {
            return Err("the token is not valid yet".into());
        }
        Ok(())
    }
}

impl Validator {
    /// `jwks`: where the JSON Web Key Set is (a file is read now, an
    /// endpoint fetched by [`Validator::refresh`]); `unsecured`: take
    /// `alg: none`; `refresh`: how often an endpoint is fetched again.
    pub fn new(
        jwks: Option<KeySource>,
        unsecured: bool,
        issuer: Option<String>,
        audience: Vec<String>,
        refresh: std::time::Duration,
    ) -> anyhow::Result<Validator> {
        let (keys, stamp) = match &jwks {
            Some(KeySource::File(path)) => (load_keys(path)?, checksum(path)),
            _ => (Vec::new(), None),
        };
        anyhow::ensure!(
            jwks.is_some() || unsecured,
            "OAUTHBEARER needs a key set (sasl_oauthbearer_jwks) or unsecured tokens (sasl_oauthbearer_unsecured)"
        );
        let client = match &jwks {
            Some(KeySource::Url(url)) => {
                if url.to_ascii_lowercase().starts_with("http://") {
                    tracing::warn!(jwks = %shown(url), "the OAUTHBEARER key set comes over plain HTTP: whoever sits on the path can put in a key and sign any token");
                }
                Some(endpoint_client()?)
            }
            _ => None,
        };
        Ok(Validator {
            client,
            jwks,
            keys: std::sync::RwLock::new((std::sync::Arc::new(keys), stamp)),
            unsecured,
            issuer,
            audience,
            refresh,
            unknown_kid: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn keys(&self) -> std::sync::Arc<Keys> {
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// Takes `loaded` (from `source`, whose checksum is `stamp`): new keys
    /// replace the old, a failure keeps them (with a warning).
    fn take(&self, source: &str, stamp: Option<u32>, loaded: anyhow::Result<Keys>) -> bool {
        let mut held = self.keys.write().unwrap_or_else(|p| p.into_inner());
        held.1 = stamp;
        match loaded {
            Ok(keys) => {
                held.0 = std::sync::Arc::new(keys);
                tracing::info!(jwks = %source, "OAUTHBEARER key set loaded");
                true
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "the OAUTHBEARER key set does not load; keeping the previous keys");
                false
            }
        }
    }

    /// Loads a key set file again if it changed; whether the keys changed.
    pub fn reload_if_changed(&self) -> bool {
        let Some(KeySource::File(path)) = &self.jwks else {
            return false;
        };
        let stamp = checksum(path);
        if stamp == self.keys.read().unwrap_or_else(|p| p.into_inner()).1 {
            return false;
        }
        self.take(&path.display().to_string(), stamp, load_keys(path))
    }

    /// Whether the key set comes from an endpoint (fetched, not read).
    pub fn from_endpoint(&self) -> bool {
        matches!(self.jwks, Some(KeySource::Url(_)))
    }

    /// Fetches an endpoint's key set: whether it was fetched and loaded
    /// (changed or not).
    pub async fn refresh(&self) -> bool {
        let (Some(KeySource::Url(url)), Some(client)) = (&self.jwks, &self.client) else {
            return false;
        };
        match fetch_keys(client, url).await {
            Ok((keys, stamp)) => {
                if Some(stamp) != self.keys.read().unwrap_or_else(|p| p.into_inner()).1 {
                    self.take(&shown(url), Some(stamp), Ok(keys));
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "fetching the OAUTHBEARER key set failed; keeping the previous keys, trying again within 10 s");
                false
            }
        }
    }

    /// Keeps the key set current, for ever: a file looked at every
    /// [`RELOAD_EVERY`]; an endpoint fetched every `refresh`, and again
    /// soon after a token named a key it does not hold.
    pub async fn watch(self: std::sync::Arc<Self>) {
        match &self.jwks {
            Some(KeySource::File(_)) => {
                let mut tick = tokio::time::interval(RELOAD_EVERY);
                loop {
                    tick.tick().await;
                    // A small file read; off the async workers all the same.
                    let validator = self.clone();
                    let _ =
                        tokio::task::spawn_blocking(move || validator.reload_if_changed()).await;
                }
            }
            Some(KeySource::Url(_)) => {
                let mut last = tokio::time::Instant::now();
                // After a failed fetch (or none yet), again within 10 s.
                let mut failing = self.keys().is_empty();
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let asked = (failing
                        || self.unknown_kid.load(std::sync::atomic::Ordering::Relaxed))
                        && last.elapsed() >= REFETCH_AFTER_UNKNOWN_KID;
                    if asked || last.elapsed() >= self.refresh {
                        self.unknown_kid
                            .store(false, std::sync::atomic::Ordering::Relaxed);
                        last = tokio::time::Instant::now();
                        failing = !self.refresh().await;
                    }
                }
            }
            None => {}
        }
    }

    /// The token of a client's first message (RFC 7628: a GS2 header, then
    /// `auth=Bearer <token>` among \x01-separated pairs), and its authzid.
    pub fn token_of(message: &[u8]) -> Option<(&str, Option<&str>)> {
        let message = std::str::from_utf8(message).ok()?;
        let (gs2, pairs) = message.split_once('\x01')?;
        let authzid = match gs2 {
            "n,," => None,
            _ => Some(gs2.strip_prefix("n,a=")?.strip_suffix(',')?),
        };
        // The pairs end with an empty one (`\x01\x01`).
        let pairs = pairs.strip_suffix("\x01\x01")?;
        let auth = pairs
            .split('\x01')
            .find_map(|pair| pair.strip_prefix("auth="))?;
        // `Bearer`, any case, then one or more spaces (Kafka's pattern).
        let (scheme, token) = auth.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("Bearer") {
            return None;
        }
        let token = token.trim_start_matches(' ');
        (!token.is_empty()).then_some((token, authzid))
    }

    /// Checks a token, or says why not.
    pub fn validate(&self, token: &str, now_ms: i64) -> Result<Validated, String> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err("the token is too long".into());
        }
        let header = jsonwebtoken::decode_header(token);
        let claims: Claims = match header {
            Ok(header) => {
                let keys = self.keys();
                let key = match &header.kid {
                    Some(kid) => keys.iter().find(|(id, _, _)| id.as_deref() == Some(kid)),
                    None if keys.len() == 1 => keys.first(),
                    None => None,
                };
                let Some((_, algorithms, key)) = key else {
                    // Perhaps a rotated key: an endpoint is fetched again.
                    self.unknown_kid
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(format!("no key for the token's kid {:?}", header.kid));
                };
                if !algorithms.contains(&header.alg) {
                    return Err(format!("the key does not verify {:?}", header.alg));
                }
                // As Kafka's validator (jose4j): `exp`, `iat` and `sub`
                // required, and `iss` and `aud` when expected; a token with
                // an `aud` when none is expected is refused. Times are
                // checked below, on the agent's clock.
                let mut validation = Validation::new(header.alg);
                validation.validate_exp = false;
                validation.validate_nbf = false;
                let mut required = vec!["exp", "iat", "sub"];
                if let Some(issuer) = &self.issuer {
                    validation.set_issuer(&[issuer]);
                    required.push("iss");
                }
                if !self.audience.is_empty() {
                    validation.set_audience(&self.audience);
                    required.push("aud");
                }
                validation.set_required_spec_claims(&required);
                let claims = jsonwebtoken::decode::<Claims>(token, key, &validation)
                    .map_err(|e| format!("the token is not valid: {e}"))?
                    .claims;
                claims.check_times(now_ms)?;
                claims
            }
            // No algorithm the library knows: an unsecured token, if taken.
            Err(_) if self.unsecured => unsecured_claims(token, now_ms)?,
            Err(e) => return Err(format!("the token is not valid: {e}")),
        };
        if claims.sub.is_empty() {
            return Err("the token has no subject".into());
        }
        Ok(Validated {
            principal: claims.sub,
            expires_at_ms: (claims.exp * 1000.0) as i64,
        })
    }
}

/// The client key sets are fetched with: bounded in time, no redirects.
pub fn endpoint_client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(FETCH_WITHIN)
        .connect_timeout(FETCH_WITHIN)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("building the HTTP client for the key set endpoint")
}

/// The claims of an unsecured JWS (`alg: none`, no signature), checked as
/// Kafka's `OAuthBearerUnsecuredJws` checks them: a subject and an expiry
/// not past.
fn unsecured_claims(token: &str, now_ms: i64) -> Result<Claims, String> {
    let invalid = |why: &str| Err(format!("the unsecured token is not valid: {why}"));
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(""), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return invalid("not header.payload. with no signature");
    };
    let decode = |part: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part.trim_end_matches('='))
    };
    let Ok(header) = decode(header) else {
        return invalid("the header is not base64url");
    };
    #[derive(Deserialize)]
    struct Header {
        alg: String,
    }
    match serde_json::from_slice::<Header>(&header) {
        Ok(h) if h.alg == "none" => {}
        _ => return invalid("its alg is not none"),
    }
    let Ok(payload) = decode(payload) else {
        return invalid("the payload is not base64url");
    };
    let Ok(claims) = serde_json::from_slice::<Claims>(&payload) else {
        return invalid("no sub and exp claims");
    };
    claims.check_times(now_ms)?;
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

    #[test]
    fn key_sources_are_read_as_kafka_reads_them() {
        let url = |s: &str| KeySource::Url(s.into());
        let file = |s: &str| KeySource::File(s.into());
        assert_eq!(
            KeySource::parse("https://idp/jwks"),
            url("https://idp/jwks")
        );
        assert_eq!(KeySource::parse("HTTP://idp/jwks"), url("HTTP://idp/jwks"));
        assert_eq!(
            KeySource::parse("file:///etc/jwks.json"),
            file("/etc/jwks.json")
        );
        assert_eq!(
            KeySource::parse("file:/etc/jwks.json"),
            file("/etc/jwks.json")
        );
        assert_eq!(KeySource::parse("/etc/jwks.json"), file("/etc/jwks.json"));
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    fn unsecured(sub: &str, exp_s: i64) -> String {
        format!(
            "{}.{}.",
            b64(br#"{"alg":"none"}"#),
            b64(format!(r#"{{"sub":"{sub}","exp":{exp_s},"iat":0}}"#).as_bytes())
        )
    }

    #[test]
    fn the_token_is_read_from_the_client_message() {
        let message = b"n,,\x01auth=Bearer abc.def.\x01\x01";
        assert_eq!(Validator::token_of(message), Some(("abc.def.", None)));
        let with_authzid = b"n,a=alice,\x01host=x\x01auth=Bearer t\x01\x01";
        assert_eq!(
            Validator::token_of(with_authzid),
            Some(("t", Some("alice")))
        );
        assert_eq!(
            Validator::token_of(b"n,,\x01auth=bearer   t\x01\x01"),
            Some(("t", None))
        );
        for bad in [
            &b"auth=Bearer t"[..],
            b"n,,\x01auth=Basic t\x01\x01",
            b"p=x,,\x01auth=Bearer t\x01\x01",
            b"y,,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t",
            b"\xff",
        ] {
            assert_eq!(Validator::token_of(bad), None);
        }
    }

    #[test]
    fn unsecured_tokens_only_when_asked_and_not_expired() {
        let now_ms = 1_800_000_000_000;
        let token = unsecured("alice", now_ms / 1000 + 60);
        let taking = Validator::new(None, true, None, Vec::new(), HOUR).unwrap();
        assert_eq!(
            taking.validate(&token, now_ms),
            Ok(Validated {
                principal: "alice".into(),
                expires_at_ms: now_ms + 60_000
            })
        );
        assert!(
            taking
                .validate(&unsecured("alice", now_ms / 1000 - 60), now_ms)
                .is_err()
        );
        assert!(taking.validate("x.y.z", now_ms).is_err());
        // Without a key set or unsecured tokens: no validator at all.
        assert!(Validator::new(None, false, None, Vec::new(), HOUR).is_err());
    }

    /// A validator of the key set in the file `jwks`.
    fn file_validator(jwks: &std::path::Path) -> anyhow::Result<Validator> {
        Validator::new(
            Some(KeySource::File(jwks.to_path_buf())),
            false,
            None,
            Vec::new(),
            HOUR,
        )
    }

    /// A key set of one RSA key named `kid`.
    fn rsa_key_set(kid: &str) -> String {
        format!(
            r#"{{"keys":[{{"kty":"RSA","kid":"{kid}","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB"}}]}}"#
        )
    }

    /// A signed token is checked against the key set; an HMAC key in the
    /// set is never used (a public key is no secret).
    #[test]
    fn signed_tokens_need_a_key_of_the_set() {
        let dir = tempfile::tempdir().unwrap();
        let jwks = dir.path().join("jwks.json");
        std::fs::write(
            &jwks,
            r#"{"keys":[{"kty":"oct","kid":"h","k":"c2VjcmV0"}]}"#,
        )
        .unwrap();
        assert!(file_validator(&jwks).is_err(), "no usable key");
        // An HS256 token signed with that secret, offered to a validator
        // with an RSA key: refused.
        std::fs::write(&jwks, rsa_key_set("r")).unwrap();
        let v = file_validator(&jwks).unwrap();
        let hs256 = "eyJhbGciOiJIUzI1NiIsImtpZCI6InIifQ.eyJzdWIiOiJldmUiLCJleHAiOjk5OTk5OTk5OTl9.x";
        assert!(v.validate(hs256, 0).is_err());
        // Unsecured tokens are not taken unless asked.
        assert!(v.validate(&unsecured("eve", 9_999_999_999), 0).is_err());
    }

    /// A changed key set file is loaded again; one that does not load
    /// keeps the keys before it.
    #[test]
    fn the_key_set_reloads_on_change() {
        let dir = tempfile::tempdir().unwrap();
        let jwks = dir.path().join("jwks.json");
        std::fs::write(&jwks, rsa_key_set("old")).unwrap();
        let v = file_validator(&jwks).unwrap();
        let kid = |v: &Validator| v.keys()[0].0.clone();
        assert!(!v.reload_if_changed(), "unchanged");
        std::fs::write(&jwks, "not json").unwrap();
        assert!(!v.reload_if_changed());
        assert_eq!(kid(&v).as_deref(), Some("old"));
        std::fs::write(&jwks, rsa_key_set("new")).unwrap();
        assert!(v.reload_if_changed());
        assert_eq!(kid(&v).as_deref(), Some("new"));
    }
}
