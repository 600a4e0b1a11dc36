//! SASL on the Kafka listener: PLAIN (RFC 4616) against a file of users, as
//! Kafka's `PlainLoginModule` with its users in the JAAS configuration, and
//! SCRAM-SHA-256/512 (see [`crate::security::scram`]) against credentials kept in the
//! metastore, managed with AlterUserScramCredentials, and OAUTHBEARER (see
//! [`crate::security::oauthbearer`]) against a JSON Web Key Set. Send PLAIN over TLS:
//! it carries the password as it is.
//!
//! A connection authenticates before anything else, as Kafka's
//! `SaslServerAuthenticator` has it: ApiVersions, then SaslHandshake (v1)
//! naming the mechanism, then SaslAuthenticate rounds (one for PLAIN, two
//! for SCRAM). Any other request before that, a second handshake, or a
//! failed attempt closes the connection (a failed attempt first gets
//! `SASL_AUTHENTICATION_FAILED`). Until authenticated a client may send
//! frames of at most [`MAX_UNAUTHENTICATED_FRAME`] bytes (Kafka's
//! `sasl.server.max.receive.size`), within [`AUTHENTICATE_WITHIN`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use floe_metastore::Metastore;
use floe_metastore::scram::ScramMechanism;

use crate::security::scram::{ClientFirst, INVALID_CREDENTIALS, ServerFirst};

/// Largest frame an unauthenticated client may send (Kafka's default).
pub const MAX_UNAUTHENTICATED_FRAME: usize = 512 * 1024;

/// How long a client has from connecting to being authenticated.
pub const AUTHENTICATE_WITHIN: Duration = Duration::from_secs(30);

/// Memory for the frames of all connections not yet authenticated.
pub const UNAUTHENTICATED_BUDGET: usize = 32 * 1024 * 1024;

/// How long a connection that failed to authenticate waits before it is
/// closed (Kafka's `connection.failed.authentication.delay.ms`).
pub const FAILED_AUTHENTICATION_DELAY: Duration = Duration::from_millis(100);

pub const PLAIN: &str = "PLAIN";

/// The mechanisms a listener offers (Kafka's `sasl.enabled.mechanisms`).
pub struct Authenticator {
    plain: Option<Arc<PlainUsersFile>>,
    oauth: Option<Arc<crate::security::oauthbearer::Validator>>,
    scram: Vec<ScramMechanism>,
    /// Makes up the salt an unknown SCRAM user is answered with. Per agent
    /// process: stable across one agent's answers, not across agents.
    fake_salt_seed: Vec<u8>,
}

impl Authenticator {
    /// Keeps what it reads from files and endpoints current, on `tasks`:
    /// PLAIN users come and go, OAUTHBEARER keys rotate.
    pub fn spawn_watchers(&self, tasks: &crate::tasks::Tasks) {
        if let Some(users) = &self.plain {
            tasks.spawn(users.clone().watch());
        }
        if let Some(validator) = &self.oauth {
            tasks.spawn(validator.clone().watch());
        }
    }

    /// `mechanisms` by name; PLAIN needs `plain` users, OAUTHBEARER a
    /// token validator.
    pub fn new(
        mechanisms: &[String],
        plain: Option<Arc<PlainUsersFile>>,
        oauth: Option<Arc<crate::security::oauthbearer::Validator>>,
    ) -> anyhow::Result<Authenticator> {
        let mut scram = Vec::new();
        let mut offers_plain = false;
        let mut offers_oauth = false;
        for name in mechanisms {
            match (name.as_str(), ScramMechanism::from_name(name)) {
                (PLAIN, _) => offers_plain = true,
                (crate::security::oauthbearer::OAUTHBEARER, _) => offers_oauth = true,
                (_, Some(m)) => scram.push(m),
                _ => anyhow::bail!(
                    "SASL mechanism {name} is not served (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER are)"
                ),
            }
        }
        anyhow::ensure!(
            offers_plain == plain.is_some(),
            "SASL/PLAIN and a users file (sasl_plain_users) go together"
        );
        anyhow::ensure!(
            offers_oauth == oauth.is_some(),
            "SASL/OAUTHBEARER and a token validator (sasl_oauthbearer_jwks or sasl_oauthbearer_unsecured) go together"
        );
        Ok(Authenticator {
            plain,
            oauth,
            scram,
            fake_salt_seed: crate::security::scram::random_bytes(32),
        })
    }

    /// The mechanisms' names, as SaslHandshake lists them.
    pub fn mechanisms(&self) -> Vec<&'static str> {
        let plain = self.plain.as_ref().map(|_| PLAIN);
        let oauth = self
            .oauth
            .as_ref()
            .map(|_| crate::security::oauthbearer::OAUTHBEARER);
        plain
            .into_iter()
            .chain(self.scram.iter().map(|m| m.name()))
            .chain(oauth)
            .collect()
    }

    /// The exchange a handshake naming `mechanism` starts, if it is offered.
    pub fn start(&self, mechanism: &str) -> Option<Exchange> {
        if mechanism == PLAIN && self.plain.is_some() {
            return Some(Exchange::Plain);
        }
        if mechanism == crate::security::oauthbearer::OAUTHBEARER && self.oauth.is_some() {
            return Some(Exchange::OAuthBearer);
        }
        let m = ScramMechanism::from_name(mechanism).filter(|m| self.scram.contains(m))?;
        Some(Exchange::ScramFirst(m))
    }
}

/// Where a connection's authentication stands, between SaslAuthenticate rounds.
pub enum Exchange {
    Plain,
    /// Waiting for the client's first SCRAM message.
    ScramFirst(ScramMechanism),
    /// Waiting for the client's proof.
    ScramFinal(Box<ServerFirst>),
    /// Waiting for the client's token.
    OAuthBearer,
    /// Its token was refused (and told so): the client's next message
    /// ends the exchange, failed (RFC 7628).
    OAuthBearerRefused,
    /// Over (done or failed): nothing more is taken.
    Over,
}

/// What one SaslAuthenticate round gives.
pub enum Step {
    /// More to say: these bytes back, and the next round.
    Challenge(Vec<u8>),
    /// Authenticated: these bytes back (SCRAM's server signature, or none),
    /// and when its credential expires (an OAUTHBEARER token's `exp`, in ms
    /// since the epoch).
    Done(Principal, Vec<u8>, Option<i64>),
    /// Refused, with the message Kafka sends.
    Failed(&'static str),
    /// Not decided (the credentials could not be read): close unanswered.
    Unavailable,
}

impl Exchange {
    /// Takes the client's `bytes` of one SaslAuthenticate round; SCRAM asks
    /// the metastore for the user's credential.
    pub async fn step(
        &mut self,
        auth: &Authenticator,
        bytes: &Bytes,
        meta: &dyn Metastore,
        now_ms: i64,
    ) -> Step {
        match std::mem::replace(self, Exchange::Over) {
            Exchange::Plain => match auth
                .plain
                .as_ref()
                .and_then(|p| p.current().authenticate(bytes))
            {
                Some(principal) => Step::Done(principal, Vec::new(), None),
                None => Step::Failed("Authentication failed: Invalid username or password"),
            },
            Exchange::ScramFirst(m) => {
                let first = match ClientFirst::parse(bytes) {
                    Ok(first) => first,
                    Err(why) => {
                        tracing::debug!(why, "SCRAM client-first-message refused");
                        return Step::Failed(INVALID_CREDENTIALS);
                    }
                };
                let credential = match meta.scram_credential(&first.user, m).await {
                    Ok(credential) => credential,
                    Err(e) => {
                        // Not the client's fault: no answer, so it reconnects
                        // and tries again (SASL_AUTHENTICATION_FAILED is fatal
                        // to Java clients).
                        tracing::warn!(error = %e, "SCRAM credential lookup failed");
                        return Step::Unavailable;
                    }
                };
                let server = ServerFirst::new(m, first, credential, &auth.fake_salt_seed);
                let challenge = server.message().to_vec();
                *self = Exchange::ScramFinal(Box::new(server));
                Step::Challenge(challenge)
            }
            Exchange::ScramFinal(server) => {
                let user = server.user().to_string();
                match server.finish(bytes) {
                    Ok(signature) => Step::Done(Principal(user), signature, None),
                    Err(why) => {
                        tracing::debug!(why, "SCRAM proof refused");
                        Step::Failed(INVALID_CREDENTIALS)
                    }
                }
            }
            Exchange::OAuthBearer => {
                // A malformed message fails at once; a token that does not
                // validate gets RFC 7628's error challenge (as Kafka's
                // `OAuthBearerSaslServer`).
                let (Some((token, authzid)), Some(validator)) = (
                    crate::security::oauthbearer::Validator::token_of(bytes),
                    auth.oauth.as_ref(),
                ) else {
                    return Step::Failed(
                        "Authentication failed: invalid OAUTHBEARER client message",
                    );
                };
                match validator.validate(token, now_ms) {
                    // Kafka: an authorization id must be the token's principal.
                    Ok(t) if authzid.is_some_and(|id| id != t.principal) => Step::Failed(
                        "Authentication failed: the authorization id is not the token's principal",
                    ),
                    Ok(t) => Step::Done(Principal(t.principal), Vec::new(), Some(t.expires_at_ms)),
                    Err(why) => {
                        tracing::debug!(why, "OAUTHBEARER token refused");
                        *self = Exchange::OAuthBearerRefused;
                        Step::Challenge(crate::security::oauthbearer::INVALID_TOKEN.to_vec())
                    }
                }
            }
            Exchange::OAuthBearerRefused => Step::Failed("Authentication failed: invalid_token"),
            Exchange::Over => Step::Failed("Authentication failed: the exchange is over"),
        }
    }
}

/// Who a connection authenticated as (Kafka's `KafkaPrincipal`, `User:<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "User:{}", self.0)
    }
}

/// The users PLAIN checks passwords against.
pub struct PlainUsers {
    passwords: BTreeMap<String, String>,
}

/// The users file, read again when it changes (looked at every
/// [`crate::net::tls::RELOAD_EVERY`], as the TLS files): a user added or removed,
/// or a password changed, counts from the next authentication, without a
/// restart. A file that does not load keeps the users before it.
pub struct PlainUsersFile {
    path: std::path::PathBuf,
    /// The users, and a checksum of the file they came from.
    users: std::sync::RwLock<(Arc<PlainUsers>, Option<u32>)>,
}

impl PlainUsersFile {
    pub fn load(path: &Path) -> anyhow::Result<Arc<PlainUsersFile>> {
        let stamp = checksum(path);
        let users = PlainUsers::load(path)?;
        Ok(Arc::new(PlainUsersFile {
            path: path.to_path_buf(),
            users: std::sync::RwLock::new((Arc::new(users), stamp)),
        }))
    }

    pub fn current(&self) -> Arc<PlainUsers> {
        self.users
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// Reads the file again if it changed; whether the users were replaced.
    pub fn reload_if_changed(&self) -> bool {
        let stamp = checksum(&self.path);
        if stamp == self.users.read().unwrap_or_else(|p| p.into_inner()).1 {
            return false;
        }
        let loaded = PlainUsers::load(&self.path);
        let mut held = self.users.write().unwrap_or_else(|p| p.into_inner());
        held.1 = stamp;
        match loaded {
            Ok(users) => {
                held.0 = Arc::new(users);
                tracing::info!(users = %self.path.display(), "SASL/PLAIN users reloaded");
                true
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "the SASL/PLAIN users file changed but does not load; keeping the previous users");
                false
            }
        }
    }

    /// Reloads on change, for ever.
    pub async fn watch(self: Arc<Self>) {
        let mut tick = tokio::time::interval(crate::net::tls::RELOAD_EVERY);
        loop {
            tick.tick().await;
            let users = self.clone();
            let _ = tokio::task::spawn_blocking(move || users.reload_if_changed()).await;
        }
    }
}

/// What tells a file's versions apart (its bytes' CRC32C; `None` when it
/// cannot be read).
pub(crate) fn checksum(path: &Path) -> Option<u32> {
    std::fs::read(path).ok().map(|bytes| crc32c::crc32c(&bytes))
}

impl PlainUsers {
    /// Reads `user:password` lines (blank lines and `#` comments skipped).
    pub fn load(path: &Path) -> anyhow::Result<PlainUsers> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    fn parse(text: &str) -> anyhow::Result<PlainUsers> {
        let mut passwords = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            // Passwords are taken as written: spaces in them are theirs.
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let (user, password) = line
                .split_once(':')
                .filter(|(u, p)| !u.is_empty() && !p.is_empty())
                .with_context(|| format!("line {} is not user:password", n + 1))?;
            anyhow::ensure!(
                passwords
                    .insert(user.to_string(), password.to_string())
                    .is_none(),
                "user {user} is listed twice"
            );
        }
        anyhow::ensure!(!passwords.is_empty(), "no users");
        Ok(PlainUsers { passwords })
    }

    /// The principal a PLAIN response (`authzid NUL authcid NUL password`)
    /// authenticates, if its password is right. An authorization id other
    /// than the user itself is refused, as Kafka's PLAIN server does.
    pub fn authenticate(&self, response: &Bytes) -> Option<Principal> {
        let mut parts = response.split(|b| *b == 0);
        let (authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || (!authzid.is_empty() && authzid != user) {
            return None;
        }
        let user = std::str::from_utf8(user).ok()?;
        // An unknown user costs a comparison too, so timing tells nothing.
        let (expected, known) = match self.passwords.get(user) {
            Some(expected) => (expected.as_bytes(), true),
            None => (password, false),
        };
        let same: bool = subtle::ConstantTimeEq::ct_eq(expected, password).into();
        (same && known).then(|| Principal(user.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_responses_are_checked_as_kafka_checks_them() {
        let users = PlainUsers::parse("# users\nalice:wonder\n\nbob:builder\n").unwrap();
        let said = |s: &[u8]| users.authenticate(&Bytes::copy_from_slice(s));
        assert_eq!(said(b"\0alice\0wonder"), Some(Principal("alice".into())));
        assert_eq!(
            said(b"alice\0alice\0wonder"),
            Some(Principal("alice".into()))
        );
        assert_eq!(said(b"\0alice\0wonderland"), None);
        assert_eq!(said(b"\0alice\0"), None);
        assert_eq!(said(b"bob\0alice\0wonder"), None, "acting as another user");
        assert_eq!(said(b"\0carol\0wonder"), None);
        assert_eq!(said(b"\0alice\0wonder\0more"), None);
        assert_eq!(said(b"alice"), None);
        let spaced = PlainUsers::parse("carol: two words \r\n").unwrap();
        let carol = Bytes::from_static(b"\0carol\0 two words ");
        assert_eq!(spaced.authenticate(&carol), Some(Principal("carol".into())));
        assert!(PlainUsers::parse("alice\n").is_err());
        assert!(PlainUsers::parse("a:1\na:2\n").is_err());
        assert!(PlainUsers::parse("# none\n").is_err());
    }
}
