//! Asking the agent that owns a block for it, over its admin HTTP port.
//!
//! A peer that is down or slow must never hold a fetch up for long: each
//! request has a deadline, its body is bounded by the block's known length,
//! and a peer that failed is skipped (its blocks read from the object store)
//! for [`DOWN_FOR`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use crate::key::BlockKey;

/// How long a peer that failed is not asked again.
pub const DOWN_FOR: Duration = Duration::from_secs(5);

/// The path blocks are served on, under an agent's admin address.
pub const BLOCK_PATH: &str = "/cache/v1/block";

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("peer {0} was failing; not asked")]
    Down(String),
    #[error("object key {0:?} cannot be sent to a peer")]
    Unsendable(String),
    #[error("peer {address}: {reason}")]
    Failed { address: String, reason: String },
}

/// Whether `object` can be a query value as it is. floe's keys always can;
/// anything else is read from the object store rather than escaped.
fn sendable(object: &str) -> bool {
    !object.is_empty()
        && object.len() <= crate::key::MAX_OBJECT_KEY_BYTES
        && object
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.'))
}

/// The query naming a block, as [`BLOCK_PATH`] takes it.
pub fn block_query(key: &BlockKey, block_bytes: u64, catch_up: bool) -> String {
    format!(
        "object={}&size={}&block={}&block_bytes={}&catch_up={}",
        key.object,
        key.object_size,
        key.block,
        block_bytes,
        u8::from(catch_up)
    )
}

/// What [`block_query`] wrote, if `query` is one: the block, the block
/// size the asker uses, and whether it is a catch-up read. Anything else
/// (a missing or repeated field, an unsendable key) is `None`.
pub fn parse_block_query(query: &str) -> Option<(BlockKey, u64, bool)> {
    let (mut object, mut size, mut block, mut block_bytes, mut catch_up) =
        (None, None, None, None, None);
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=')?;
        let slot = match name {
            "object" => {
                if object.replace(value).is_some() {
                    return None;
                }
                continue;
            }
            "size" => &mut size,
            "block" => &mut block,
            "block_bytes" => &mut block_bytes,
            "catch_up" => &mut catch_up,
            _ => return None,
        };
        if slot.replace(value.parse::<u64>().ok()?).is_some() {
            return None;
        }
    }
    let object = object.filter(|o| sendable(o))?;
    let key = BlockKey {
        object: std::sync::Arc::from(object),
        object_size: size?,
        block: block?,
    };
    Some((key, block_bytes?, catch_up? != 0))
}

pub struct PeerClient {
    http: reqwest::Client,
    timeout: Duration,
    /// Peers that failed lately, until when they are skipped. Bounded: only
    /// members of the ring are asked, and [`PeerClient::forget_others`]
    /// drops the rest when the ring changes.
    down: Mutex<HashMap<String, Instant>>,
}

impl PeerClient {
    pub fn new(timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .pool_max_idle_per_host(8)
            .build()
            .expect("an HTTP client with no TLS always builds");
        PeerClient {
            http,
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
        block_bytes: u64,
        catch_up: bool,
    ) -> Result<Bytes, PeerError> {
        if !sendable(&key.object) {
            return Err(PeerError::Unsendable(key.object.to_string()));
        }
        if self.is_down(address) {
            return Err(PeerError::Down(address.to_string()));
        }
        let expected = key.range(block_bytes);
        let expected = (expected.end - expected.start) as usize;
        let url = format!(
            "http://{address}{BLOCK_PATH}?{}",
            block_query(key, block_bytes, catch_up)
        );
        let failed = |reason: String| PeerError::Failed {
            address: address.to_string(),
            reason,
        };
        // The whole exchange, body included, within the deadline.
        let exchange = async {
            let mut response = self.http.get(&url).send().await.map_err(|e| {
                self.mark_down(address);
                failed(e.to_string())
            })?;
            if !response.status().is_success() {
                // An answer: the peer is up, it just could not serve this.
                return Err(failed(format!("answered {}", response.status())));
            }
            let mut body = BytesMut::with_capacity(expected);
            while let Some(chunk) = response.chunk().await.map_err(|e| {
                self.mark_down(address);
                failed(e.to_string())
            })? {
                if body.len() + chunk.len() > expected {
                    return Err(failed(format!("sent more than the {expected} bytes asked")));
                }
                body.extend_from_slice(&chunk);
            }
            if body.len() != expected {
                return Err(failed(format!(
                    "sent {} bytes of the {expected} asked",
                    body.len()
                )));
            }
            Ok(body.freeze())
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
    fn only_plain_keys_are_sent() {
        assert!(sendable("ingest/0a/0193f-abc_def.1"));
        assert!(!sendable("a b"));
        assert!(!sendable("a&size=1"));
        assert!(!sendable(""));
        assert!(!sendable(&"a".repeat(2000)));
    }

    #[test]
    fn queries_are_read_back_and_nothing_else_is() {
        let key = BlockKey {
            object: std::sync::Arc::from("merged/ab/x-1"),
            object_size: 123,
            block: 4,
        };
        let query = block_query(&key, 64, true);
        assert_eq!(parse_block_query(&query), Some((key, 64, true)));
        for bad in [
            "",
            "object=a&size=1&block=0&block_bytes=4",
            "object=a&size=1&block=0&block_bytes=4&catch_up=0&size=2",
            "object=a&object=b&size=1&block=0&block_bytes=4&catch_up=0",
            "object=a b&size=1&block=0&block_bytes=4&catch_up=0",
            "object=a&size=-1&block=0&block_bytes=4&catch_up=0",
            "object=a&size=1&block=0&block_bytes=4&catch_up=0&x=1",
        ] {
            assert_eq!(parse_block_query(bad), None, "{bad}");
        }
    }
}
