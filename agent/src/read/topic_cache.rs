//! Topics the produce and fetch paths have looked up recently, so a request
//! does not cost a metastore round trip per topic (with a replicated
//! metastore, that read would otherwise grow with every client of every agent).
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
    /// Topic ids to names; an id whose name now names another topic misses.
    names: Mutex<HashMap<uuid::Uuid, String>>,
}

/// Bounds the map; past it, stale entries are dropped first, then all.
const MAX_ENTRIES: usize = 100_000;

impl TopicCache {
    pub fn new(ttl: Duration) -> Self {
        TopicCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
        }
    }

    /// The topic, if known recently and known to have `partition`.
    pub fn get(&self, name: &str, partition: i32) -> Option<TopicInfo> {
        let entries = self.entries.lock().expect("topic cache lock poisoned");
        let (info, at) = entries.get(name)?;
        (at.elapsed() < self.ttl && partition < info.partitions).then(|| info.clone())
    }

    /// The topic of this id, if known recently and known to have `partition`
    /// (fetches name topics by id from version 13).
    pub fn get_by_id(&self, id: uuid::Uuid, partition: i32) -> Option<TopicInfo> {
        let entries = self.entries.lock().expect("topic cache lock poisoned");
        let name = self
            .names
            .lock()
            .expect("topic cache lock poisoned")
            .get(&id)
            .cloned()?;
        let (info, at) = entries.get(&name)?;
        (info.id == id && at.elapsed() < self.ttl && partition < info.partitions)
            .then(|| info.clone())
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
        let mut names = self.names.lock().expect("topic cache lock poisoned");
        if names.len() >= MAX_ENTRIES {
            names.clear();
        }
        names.insert(info.id, info.name.clone());
    }

    /// Forgets the topic of this id (a fetch found it gone).
    pub fn invalidate_id(&self, id: uuid::Uuid) {
        let name = self
            .names
            .lock()
            .expect("topic cache lock poisoned")
            .remove(&id);
        if let Some(name) = name {
            let mut entries = self.entries.lock().expect("topic cache lock poisoned");
            if entries.get(&name).is_some_and(|(info, _)| info.id == id) {
                entries.remove(&name);
            }
        }
    }

    pub fn invalidate(&self, name: &str) {
        self.entries
            .lock()
            .expect("topic cache lock poisoned")
            .remove(name);
    }

    /// Forgets every topic (the configs they inherit changed).
    pub fn clear(&self) {
        self.entries
            .lock()
            .expect("topic cache lock poisoned")
            .clear();
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
            inherited: Default::default(),
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
        assert_eq!(cache.get_by_id(t.id, 1), Some(t.clone()));
        assert_eq!(cache.get_by_id(t.id, 2), None);
        assert_eq!(cache.get_by_id(uuid::Uuid::nil(), 0), None);
        cache.invalidate("t");
        assert_eq!(cache.get("t", 0), None);
        assert_eq!(cache.get_by_id(t.id, 0), None);
        // A topic re-created under the same name: its old id misses.
        let again = topic("t", 2);
        cache.insert(&again);
        assert_eq!(cache.get_by_id(t.id, 0), None);
        assert_eq!(cache.get_by_id(again.id, 0), Some(again.clone()));
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
