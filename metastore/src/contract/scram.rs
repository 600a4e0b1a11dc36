//! SCRAM credentials (RFC 5802), as Kafka's `ScramControlManager` keeps
//! them: per user and mechanism, the salt, the iteration count and the two
//! keys derived from the salted password. The password itself never reaches
//! the metastore: the admin client salts it, the agent derives the keys.
//!
//! Alterations follow Kafka's rules: each user at most once per request
//! (`DUPLICATE_RESOURCE`), a name, a known mechanism, 4096 to 16384
//! iterations (`UNACCEPTABLE_CREDENTIAL`), and a deletion of a credential
//! that exists (`RESOURCE_NOT_FOUND`). Valid alterations apply even when
//! others in the request are refused, as in Kafka.

use serde::{Deserialize, Serialize};

/// Kafka's SCRAM mechanisms, with their numbers on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The number Kafka's messages carry (`ScramMechanism.type()`).
    pub fn from_type(t: i8) -> Option<ScramMechanism> {
        match t {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    pub fn as_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Fewest iterations Kafka accepts for either mechanism.
pub const MIN_ITERATIONS: i32 = 4096;
/// Most iterations Kafka accepts (`ScramControlManager.MAX_ITERATIONS`).
pub const MAX_ITERATIONS: i32 = 16384;
/// Users with credentials at most: bounds the state a client can make grow.
pub const MAX_USERS: usize = 100_000;
/// Longest user name kept (Kafka has no limit; a bound is ours).
pub const MAX_USER_NAME: usize = 1024;
/// Longest salt or key kept (SHA-512's keys are 64 bytes).
pub const MAX_KEY_BYTES: usize = 256;

/// What a server keeps to check a SCRAM client (RFC 5802 section 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// One change asked of a user's credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScramAlteration {
    Upsert {
        user: String,
        /// The number on the wire (checked here, as Kafka's controller does).
        mechanism: i8,
        credential: ScramCredential,
    },
    Delete {
        user: String,
        mechanism: i8,
    },
}

impl ScramAlteration {
    pub fn user(&self) -> &str {
        match self {
            ScramAlteration::Upsert { user, .. } | ScramAlteration::Delete { user, .. } => user,
        }
    }
}

/// Why an alteration of a user's credentials was refused (each is one of
/// Kafka's error codes; see the agent's handler).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScramRefusal {
    /// The user appears twice in one request (`DUPLICATE_RESOURCE`).
    AlteredTwice,
    /// `UNACCEPTABLE_CREDENTIAL`, with Kafka's message.
    Unacceptable(String),
    /// `UNSUPPORTED_SASL_MECHANISM`.
    UnknownMechanism,
    /// Deleting what does not exist (`RESOURCE_NOT_FOUND`).
    NotFound,
    /// Past [`MAX_USERS`] (`UNACCEPTABLE_CREDENTIAL` too).
    TooManyUsers,
}

/// A user and its mechanisms with their iteration counts (`None`: a user
/// asked for that has no credentials).
pub type UserMechanisms = (String, Option<Vec<(ScramMechanism, i32)>>);

/// Kafka's checks of one alteration that need no state: a name of at most
/// [`MAX_USER_NAME`] bytes, a known mechanism, 4096 to 16384 iterations,
/// a salt and keys of 1 to [`MAX_KEY_BYTES`]. Agents run them before a
/// request reaches the log; the state machine runs them again.
pub fn check(alteration: &ScramAlteration) -> Result<(), ScramRefusal> {
    let (user, mechanism) = match alteration {
        ScramAlteration::Upsert {
            user, mechanism, ..
        }
        | ScramAlteration::Delete { user, mechanism } => (user, *mechanism),
    };
    if user.is_empty() {
        return Err(ScramRefusal::Unacceptable(
            "Username must not be empty".into(),
        ));
    }
    if user.len() > MAX_USER_NAME {
        return Err(ScramRefusal::Unacceptable(format!(
            "Username longer than {MAX_USER_NAME} bytes"
        )));
    }
    ScramMechanism::from_type(mechanism).ok_or(ScramRefusal::UnknownMechanism)?;
    if let ScramAlteration::Upsert { credential, .. } = alteration {
        if credential.iterations < MIN_ITERATIONS {
            return Err(ScramRefusal::Unacceptable("Too few iterations".into()));
        }
        if credential.iterations > MAX_ITERATIONS {
            return Err(ScramRefusal::Unacceptable("Too many iterations".into()));
        }
        let keys = [
            &credential.salt,
            &credential.stored_key,
            &credential.server_key,
        ];
        if keys.iter().any(|k| k.is_empty() || k.len() > MAX_KEY_BYTES) {
            return Err(ScramRefusal::Unacceptable(
                "Salt and keys must hold 1 to 256 bytes".into(),
            ));
        }
    }
    Ok(())
}

/// Users whose alteration a request may carry at most (a bound on one log
/// entry; Kafka has none).
pub const MAX_ALTERATIONS: usize = 1000;
