//! Topics the produce path has looked up recently, so a produce request does
//! not cost a metastore round trip per topic (with a replicated metastore,
//! that read would otherwise grow with every producer of every agent).
//!
//! An entry is trusted for `ttl`, and never for a partition beyond the count
//! it knows (the topic may have grown). A topic deleted (and perhaps
//! recreated) elsewhere is noticed when the metastore refuses a commit for the
//! old topic id: the producer gets a retriable UNKNOWN_TOPIC_OR_PARTITION and
//! the entry is dropped, so its retry looks the topic up again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use floe_metastore::TopicInfo;

pub struct TopicCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, (TopicInfo, Instant)>>,
}

/// Bounds the map; past it, stale entries are dropped first, then all.
const MAX_ENTRIES: usize = 100_000;

impl TopicCache {
    pub fn new(ttl: Duration) -> Self {
        TopicCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The topic, if known recently and known to have `partition`.
    pub fn get(&self, name: &str, partition: i32) -> Option<TopicInfo> {
        let entries = self.entries.lock().expect("topic cache lock poisoned");
        let (info, at) = entries.get(name)?;
        (at.elapsed() < self.ttl && partition < info.partitions).then(|| info.clone())
    }

    pub fn insert(&self, info: &TopicInfo) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().expect("topic cache lock poisoned");
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (_, at)| at.elapsed() < self.ttl);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(info.name.clone(), (info.clone(), Instant::now()));
    }

    pub fn invalidate(&self, name: &str) {
        self.entries
            .lock()
            .expect("topic cache lock poisoned")
            .remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, partitions: i32) -> TopicInfo {
        TopicInfo {
            name: name.into(),
            id: floe_metastore::random_id(),
            partitions,
            configs: Default::default(),
        }
    }

    #[test]
    fn entries_serve_known_partitions_until_they_expire_or_are_dropped() {
        let cache = TopicCache::new(Duration::from_millis(200));
        let t = topic("t", 2);
        cache.insert(&t);
        assert_eq!(cache.get("t", 1), Some(t.clone()));
        // A partition it does not know of: the topic may have grown.
        assert_eq!(cache.get("t", 2), None);
        assert_eq!(cache.get("other", 0), None);
        cache.invalidate("t");
        assert_eq!(cache.get("t", 0), None);
        cache.insert(&t);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(cache.get("t", 0), None, "expired");
    }

    #[test]
    fn a_zero_ttl_caches_nothing() {
        let cache = TopicCache::new(Duration::ZERO);
        cache.insert(&topic("t", 1));
        assert_eq!(cache.get("t", 0), None);
    }
}
