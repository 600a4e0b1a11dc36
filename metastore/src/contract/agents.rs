//! The agents that advertise themselves: who they are, where, in which zone,
//! and when they last said they were alive. Times are the metastore's (leader
//! stamps); readers are told each agent's age on that clock, so liveness is
//! never judged by comparing two machines' clocks.

use serde::{Deserialize, Serialize};

/// An agent as clients are told about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub zone: Option<String>,
    /// The metastore's time of its latest registration or heartbeat.
    pub last_seen_ms: i64,
    /// How long ago that was on the metastore's clock, as of the read that
    /// returned it (0 inside the state).
    pub age_ms: i64,
}

/// One of an agent's listeners as clients are told about it (Kafka's
/// `advertised.listeners` entry, with its security protocol as Kafka's
/// broker registration has it): a client that came in on the listener
/// `name` is only ever sent `host:port` addresses of that name and protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerEndpoint {
    pub name: String,
    pub host: String,
    pub port: i32,
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    pub protocol: String,
}

/// Kafka's security protocols, which are also the names of listeners
/// nobody named (an agent's one listener, before agents had several).
pub const SECURITY_PROTOCOLS: [&str; 4] = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// Most listeners one agent registers, and the longest name and host the
/// state keeps (a registration is a log entry: its size is bounded).
pub const MAX_LISTENERS: usize = 16;
pub const MAX_LISTENER_NAME_BYTES: usize = 64;
pub const MAX_HOST_BYTES: usize = 255;
pub const MAX_ZONE_BYTES: usize = 255;

/// Why a registration's listeners are refused, if they are.
pub fn check_listeners(listeners: &[ListenerEndpoint]) -> Result<(), String> {
    if listeners.is_empty() || listeners.len() > MAX_LISTENERS {
        return Err(format!("an agent has 1 to {MAX_LISTENERS} listeners"));
    }
    for (i, l) in listeners.iter().enumerate() {
        let name_chars = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
        if l.name.is_empty()
            || l.name.len() > MAX_LISTENER_NAME_BYTES
            || !l.name.chars().all(name_chars)
        {
            return Err(format!(
                "listener names are 1 to {MAX_LISTENER_NAME_BYTES} of A-Z, 0-9 and _"
            ));
        }
        if !SECURITY_PROTOCOLS.contains(&l.protocol.as_str()) {
            return Err(format!(
                "listener {}: no security protocol {:?}",
                l.name, l.protocol
            ));
        }
        if l.host.is_empty() || l.host.len() > MAX_HOST_BYTES {
            return Err(format!(
                "listener {}: hosts have 1 to {MAX_HOST_BYTES} bytes",
                l.name
            ));
        }
        if !(1..=65535).contains(&l.port) {
            return Err(format!(
                "listener {}: port {} is not a TCP port",
                l.name, l.port
            ));
        }
        if listeners[..i].iter().any(|other| other.name == l.name) {
            return Err(format!("listener {} is named twice", l.name));
        }
    }
    Ok(())
}
