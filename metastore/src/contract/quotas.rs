//! Client quotas (Kafka's `client-quotas`, KIP-546): rates a user, a client
//! id, or a user's client id may use of each agent, set with
//! AlterClientQuotas and kept as dynamic config entities
//! ([`ConfigEntity::ClientQuota`](crate::ConfigEntity)). Agents keep a
//! copy and enforce them (`floe_agent::limits::quotas`).
//!
//! Kafka's keys for users and client ids, checked as its
//! `ClientQuotaControlManager` checks them, `controller_mutation_rate`
//! (KIP-599) among them. IP entities (`connection_creation_rate`) are
//! refused: floe does not enforce them, and a quota that is stored but not
//! enforced would mislead.

use serde::{Deserialize, Serialize};

/// Bytes per second a client may produce to one agent (Kafka's LONG).
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// Bytes per second a client may fetch from one agent (Kafka's LONG).
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// The share of one request-handling thread's time a client may take, in
/// percent (Kafka's DOUBLE): here, the time an agent spends running its
/// requests' handlers.
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// Partitions a client may create, add or delete per second on one agent
/// (Kafka's DOUBLE, KIP-599).
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
/// Every key floe enforces.
pub const KEYS: [&str; 4] = [
    PRODUCER_BYTE_RATE,
    CONSUMER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    CONTROLLER_MUTATION_RATE,
];

/// Whether a key is a whole number of bytes (Kafka's LONG quotas).
fn is_long(key: &str) -> bool {
    key == PRODUCER_BYTE_RATE || key == CONSUMER_BYTE_RATE
}

/// Quota entities at most, and the bytes of a name in one.
pub const MAX_QUOTA_ENTITIES: usize = 10_000;
pub const MAX_NAME_BYTES: usize = 1_024;

/// A name in a quota entity: given, or the default (Kafka's `<default>`,
/// a null name on the wire), which applies to every name without its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum QuotaName {
    Default,
    Named(String),
}

impl QuotaName {
    /// A name as the wire has it (`None`: the default).
    pub fn of(name: Option<&str>) -> QuotaName {
        match name {
            Some(n) => QuotaName::Named(n.to_string()),
            None => QuotaName::Default,
        }
    }

    pub fn as_wire(&self) -> Option<&str> {
        match self {
            QuotaName::Default => None,
            QuotaName::Named(n) => Some(n),
        }
    }
}

/// What a quota is set on: a user, a client id, or both (a user's client
/// id); each given or the default.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QuotaEntity {
    pub user: Option<QuotaName>,
    pub client_id: Option<QuotaName>,
}

impl QuotaEntity {
    /// Whether the entity names something, with names Kafka accepts.
    pub fn check(&self) -> Result<(), String> {
        if self.user.is_none() && self.client_id.is_none() {
            return Err("Invalid empty client quota entity".into());
        }
        for (kind, name) in [("user", &self.user), ("client-id", &self.client_id)] {
            match name {
                Some(QuotaName::Named(n)) if n.is_empty() => {
                    return Err(format!("Empty {kind} not supported"));
                }
                Some(QuotaName::Named(n)) if n.len() > MAX_NAME_BYTES => {
                    return Err(format!("a {kind} name is over {MAX_NAME_BYTES} bytes"));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Whether `key = value` is a quota Kafka would take (and floe enforces):
/// positive, and whole for the byte rates.
pub fn check(key: &str, value: &str) -> Result<(), String> {
    if !KEYS.contains(&key) {
        return Err(match key {
            "connection_creation_rate" => {
                format!("{key} is not enforced by floe, so it is not taken")
            }
            _ => format!("Invalid configuration key {key}"),
        });
    }
    let Ok(v) = value.trim().parse::<f64>() else {
        return Err(format!("Quota {key} must be a number"));
    };
    if v.is_nan() || v <= 0.0 || v.is_infinite() {
        return Err(format!("Quota {key} must be greater than 0"));
    }
    if is_long(key) && v.fract().abs() > 1e-6 {
        return Err(format!("{key} cannot be a fractional value."));
    }
    // Kafka takes any positive whole-ish value (1e-7 passes its 1e-6
    // tolerance, and throttles everything for ever); floe wants a byte.
    if is_long(key) && v < 1.0 {
        return Err(format!("Quota {key} must be at least 1"));
    }
    if is_long(key) && v > i64::MAX as f64 {
        return Err(format!("Proposed value for {key} is too large for a LONG."));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_checked_as_kafka_checks_them() {
        assert!(check(PRODUCER_BYTE_RATE, "1048576").is_ok());
        assert!(check(REQUEST_PERCENTAGE, "12.5").is_ok());
        assert!(check(CONTROLLER_MUTATION_RATE, "0.5").is_ok());
        for (key, bad) in [
            (PRODUCER_BYTE_RATE, "0"),
            (PRODUCER_BYTE_RATE, "-5"),
            (CONSUMER_BYTE_RATE, "10.5"),
            (CONSUMER_BYTE_RATE, "NaN"),
            (CONSUMER_BYTE_RATE, "inf"),
            (CONSUMER_BYTE_RATE, "0.0000001"),
            (REQUEST_PERCENTAGE, "x"),
            ("connection_creation_rate", "10"),
            (CONTROLLER_MUTATION_RATE, "0"),
            ("producer.byte.rate", "10"),
        ] {
            assert!(check(key, bad).is_err(), "{key}={bad}");
        }
        let named = |n: &str| Some(QuotaName::Named(n.into()));
        assert!(
            QuotaEntity {
                user: None,
                client_id: None
            }
            .check()
            .is_err()
        );
        assert!(
            QuotaEntity {
                user: named(""),
                client_id: None
            }
            .check()
            .is_err()
        );
        assert!(
            QuotaEntity {
                user: named("alice"),
                client_id: Some(QuotaName::Default)
            }
            .check()
            .is_ok()
        );
    }
}
