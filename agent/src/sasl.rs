//! SASL on the Kafka listener: the PLAIN mechanism (RFC 4616) against a
//! file of users, as Kafka's `PlainLoginModule` with its users in the JAAS
//! configuration. Send it over TLS: PLAIN carries the password as it is.
//!
//! A connection authenticates before anything else, as Kafka's
//! `SaslServerAuthenticator` has it: ApiVersions, then SaslHandshake (v1)
//! naming the mechanism, then SaslAuthenticate with the credentials. Any
//! other request before that, a second handshake, or a failed attempt
//! closes the connection (a failed attempt first gets
//! `SASL_AUTHENTICATION_FAILED`). Until authenticated a client may send
//! frames of at most [`MAX_UNAUTHENTICATED_FRAME`] bytes (Kafka's
//! `sasl.server.max.receive.size`), within [`AUTHENTICATE_WITHIN`].

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;

/// Largest frame an unauthenticated client may send (Kafka's default).
pub const MAX_UNAUTHENTICATED_FRAME: usize = 512 * 1024;

/// How long a client has from connecting to being authenticated.
pub const AUTHENTICATE_WITHIN: Duration = Duration::from_secs(30);

/// Memory for the frames of all connections not yet authenticated.
pub const UNAUTHENTICATED_BUDGET: usize = 32 * 1024 * 1024;

/// How long a connection that failed to authenticate waits before it is
/// closed (Kafka's `connection.failed.authentication.delay.ms`).
pub const FAILED_AUTHENTICATION_DELAY: Duration = Duration::from_millis(100);

/// The one mechanism served.
pub const PLAIN: &str = "PLAIN";

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
