//! Asking the agent that owns a block for it, over its admin HTTP port.
//!
//! A peer that is down or slow must never hold a fetch up for long: each
//! request has a deadline, and tells the owner a shorter one for its own
//! load (an owner that cannot load in time answers 503 at once, and the
//! asker reads the object store itself); the body is bounded by the block's
//! known length; a peer that does not answer at all, or cuts blocks another
//! way, is skipped (its blocks read from the object store) for [`DOWN_FOR`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use crate::key::BlockKey;

/// How long a peer that failed is not asked again.
pub const DOWN_FOR: Duration = Duration::from_secs(5);

/// How long an owner works on a block when the asker does not say.
const DEFAULT_WITHIN: Duration = Duration::from_millis(750);

/// The path blocks are served on, under an agent's admin address.
pub const BLOCK_PATH: &str = "/cache/v1/block";

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("peer {0} was failing; not asked")]
    Down(String),
    #[error("object key {0:?} is not asked of peers")]
    Unsendable(String),
    #[error("peer {address}: {reason}")]
    Failed { address: String, reason: String },
}

/// Whether agents may ask each other for blocks of `object`: objects that
/// hold record batches, named in characters a query carries as they are.
pub fn sendable(object: &str) -> bool {
    object.len() <= crate::key::MAX_OBJECT_KEY_BYTES
        && floe_storage::keys::holds_records(object)
        && object
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.'))
}

/// Whether `address` is a `host:port` (or `[v6]:port`) and nothing else, so
/// that a URL made from it names that host and port only.
pub fn valid_address(address: &str) -> bool {
    let Some((host, port)) = address.rsplit_once(':') else {
        return false;
    };
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
        }
    };
    host_ok && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// The query naming a block, as [`BLOCK_PATH`] takes it; `within` is how
/// long the owner may take.
pub fn block_query(key: &BlockKey, catch_up: bool, within: Duration) -> String {
    format!(
        "object={}&size={}&block={}&block_bytes={}&catch_up={}&within_ms={}",
        key.object,
        key.object_size,
        key.block,
        key.block_bytes,
        u8::from(catch_up),
        within.as_millis()
    )
}

/// What [`block_query`] wrote, if `query` is one: the block, whether it is
/// a catch-up read, and the owner's deadline. Anything else (a missing or
/// repeated field, a key peers may not ask for) is `None`.
pub fn parse_block_query(query: &str) -> Option<(BlockKey, bool, Duration)> {
    let (mut object, mut numbers) = (None, [None; 5]);
    const NAMES: [&str; 5] = ["size", "block", "block_bytes", "catch_up", "within_ms"];
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=')?;
        if name == "object" {
            if object.replace(value).is_some() {
                return None;
            }
            continue;
        }
        let slot = &mut numbers[NAMES.iter().position(|n| *n == name)?];
        if slot.replace(value.parse::<u64>().ok()?).is_some() {
            return None;
        }
    }
    let object = object.filter(|o| sendable(o))?;
    let [
        Some(size),
        Some(block),
        Some(block_bytes),
        Some(catch_up),
        within_ms,
    ] = numbers
    else {
        return None;
    };
    // Agents of an older build do not say how long they wait.
    let within_ms = within_ms.unwrap_or(DEFAULT_WITHIN.as_millis() as u64);
    let key = BlockKey {
        object: std::sync::Arc::from(object),
        object_size: size,
        block_bytes,
        block,
    };
    Some((key, catch_up != 0, Duration::from_millis(within_ms)))
}

/// Signs and checks block requests between the agents of a cluster (an HMAC
/// under the cluster's secret), so an owner serves only its peers.
pub trait PeerAuth: Send + Sync + 'static {
    fn sign(&self, message: &[u8]) -> Vec<u8>;
    fn verify(&self, message: &[u8], tag: &[u8]) -> bool;
}

/// The header carrying a request's signature (hex) over its query.
pub const AUTH_HEADER: &str = "x-floe-peer-auth";

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || text.len() > 256 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

pub struct PeerClient {
    http: reqwest::Client,
    /// Signs each request, when the cluster has a secret.
    auth: Option<std::sync::Arc<dyn PeerAuth>>,
    timeout: Duration,
    /// Peers that failed lately, until when they are skipped. Bounded: only
    /// members of the ring are asked, and [`PeerClient::forget_others`]
    /// drops the rest when the ring changes.
    down: Mutex<HashMap<String, Instant>>,
}

impl PeerClient {
    pub fn new(timeout: Duration, auth: Option<std::sync::Arc<dyn PeerAuth>>) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            // Peers are named by the metastore: never sent elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_max_idle_per_host(8)
            .build()
            .expect("an HTTP client with no TLS always builds");
        PeerClient {
            http,
            auth,
            timeout,
            down: Mutex::new(HashMap::new()),
        }
    }

    pub fn is_down(&self, address: &str) -> bool {
        let mut down = self.down.lock().expect("peer list poisoned");
        match down.get(address) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                down.remove(address);
                false
            }
            None => false,
        }
    }

    /// Keeps failure marks only for `addresses` (the ring's members now).
    pub fn forget_others(&self, addresses: &[&str]) {
        self.down
            .lock()
            .expect("peer list poisoned")
            .retain(|a, _| addresses.contains(&a.as_str()));
    }

    fn mark_down(&self, address: &str) {
        self.down
            .lock()
            .expect("peer list poisoned")
            .insert(address.to_string(), Instant::now() + DOWN_FOR);
    }

    /// Block `key` from the peer at `address`: exactly its bytes, or an error.
    pub async fn get_block(
        &self,
        address: &str,
        key: &BlockKey,
        catch_up: bool,
    ) -> Result<Bytes, PeerError> {
        if !sendable(&key.object) {
            return Err(PeerError::Unsendable(key.object.to_string()));
        }
        if self.is_down(address) {
            return Err(PeerError::Down(address.to_string()));
        }
        let expected = key.length();
        // The owner gets three quarters of the deadline for its own load,
        // so that a slow object store is answered 503 before the asker gives up.
        let query = block_query(key, catch_up, self.timeout * 3 / 4);
        let url = format!("http://{address}{BLOCK_PATH}?{query}");
        let signature = self
            .auth
            .as_ref()
            .map(|auth| hex(&auth.sign(query.as_bytes())));
        let failed = |reason: String| PeerError::Failed {
            address: address.to_string(),
            reason,
        };
        let exchange = async {
            let mut request = self.http.get(&url);
            if let Some(signature) = &signature {
                request = request.header(AUTH_HEADER, signature);
            }
            let mut response = request.send().await.map_err(|e| {
                // Not even an answer: the peer is down or unreachable.
                self.mark_down(address);
                failed(e.to_string())
            })?;
            match response.status() {
                status if status.is_success() => {}
                reqwest::StatusCode::CONFLICT => {
                    // Its blocks are cut another way (a rollout): none will do.
                    self.mark_down(address);
                    return Err(failed("cuts blocks another way".into()));
                }
                // An answer: the peer is up, it just could not serve this one.
                status => return Err(failed(format!("answered {status}"))),
            }
            let mut chunks: Vec<Bytes> = Vec::new();
            let mut got = 0;
            while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
                got += chunk.len();
                if got > expected {
                    return Err(failed(format!("sent more than the {expected} bytes asked")));
                }
                chunks.push(chunk);
            }
            if got != expected {
                return Err(failed(format!("sent {got} bytes of the {expected} asked")));
            }
            Ok(match chunks.len() {
                1 => chunks.pop().expect("one chunk"),
                _ => {
                    let mut body = BytesMut::with_capacity(expected);
                    chunks.iter().for_each(|c| body.extend_from_slice(c));
                    body.freeze()
                }
            })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => {
                self.mark_down(address);
                Err(failed(format!("no answer within {:?}", self.timeout)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_keys_of_record_objects_are_sent() {
        assert!(sendable("ingest/0a/0193f-abc_def.1"));
        assert!(sendable("segment/0a/x/1/5-y"));
        assert!(!sendable("probe/abc"));
        assert!(!sendable("ingest/a b"));
        assert!(!sendable("ingest/a&size=1"));
        assert!(!sendable(""));
        assert!(!sendable(&format!("ingest/{}", "a".repeat(2000))));
    }

    #[test]
    fn addresses_are_a_host_and_a_port_only() {
        for good in ["10.0.0.1:9644", "agent-1.zone-a.internal:80", "[::1]:9644"] {
            assert!(valid_address(good), "{good}");
        }
        for bad in [
            "10.0.0.1",
            "10.0.0.1:0",
            "10.0.0.1:70000",
            "169.254.169.254/latest/meta-data?x=:80",
            "user@host:80",
            ":80",
            "[not-v6]:80",
            "::1:80",
        ] {
            assert!(!valid_address(bad), "{bad}");
        }
    }

    #[test]
    fn queries_are_read_back_and_nothing_else_is() {
        let key = BlockKey {
            object: std::sync::Arc::from("merged/ab/x-1"),
            object_size: 123,
            block_bytes: 64,
            block: 1,
        };
        let within = Duration::from_millis(750);
        let query = block_query(&key, true, within);
        assert_eq!(parse_block_query(&query), Some((key, true, within)));
        let old = "object=ingest/a&size=1&block=0&block_bytes=4&catch_up=0";
        assert_eq!(parse_block_query(old).map(|q| q.2), Some(DEFAULT_WITHIN));
        for bad in [
            "",
            "object=ingest/a&size=1&block=0&block_bytes=4&within_ms=1",
            "object=ingest/a&size=1&block=0&block_bytes=4&catch_up=0&within_ms=1&size=2",
            "object=ingest/a&object=ingest/b&size=1&block=0&block_bytes=4&catch_up=0&within_ms=1",
            "object=ingest/a b&size=1&block=0&block_bytes=4&catch_up=0&within_ms=1",
            "object=probe/a&size=1&block=0&block_bytes=4&catch_up=0&within_ms=1",
            "object=ingest/a&size=-1&block=0&block_bytes=4&catch_up=0&within_ms=1",
            "object=ingest/a&size=1&block=0&block_bytes=4&catch_up=0&within_ms=1&x=1",
        ] {
            assert_eq!(parse_block_query(bad), None, "{bad}");
        }
    }
}
