//! Topics: create, delete, alter configs, add partitions, and how clients
//! see them.

use super::*;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Topic {
    pub(super) info: TopicInfo,
    pub(super) partitions: Vec<Partition>,
}

/// Kafka's rule for topic names: 1..=249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), Refusal> {
    let invalid = |why: &str| Err(Refusal::InvalidTopicName(name.to_string(), why.to_string()));
    if name.is_empty() {
        return invalid("it is empty");
    }
    if name == "." || name == ".." {
        return invalid("`.` and `..` are not allowed");
    }
    if name.len() > 249 {
        return invalid("it is longer than 249 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return invalid("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Most partitions one topic may have; bounds the memory a request can claim.
pub const MAX_PARTITIONS: i32 = 10_000;

impl State {
    pub(super) fn create_topic(
        &mut self,
        id: TopicId,
        topic: NewTopic,
    ) -> Result<TopicInfo, Refusal> {
        validate_topic_name(&topic.name)?;
        if topic.partitions < 1 || topic.partitions > MAX_PARTITIONS {
            return Err(Refusal::InvalidPartitions(topic.partitions));
        }
        if self.log.topics.contains_key(&topic.name) {
            return Err(Refusal::TopicExists(topic.name));
        }
        let info = TopicInfo {
            id,
            name: topic.name.clone(),
            partitions: topic.partitions,
            configs: topic.configs,
            inherited: BTreeMap::new(),
        };
        self.log.names_by_id.insert(id, topic.name.clone());
        self.log.topics.insert(
            topic.name,
            Topic {
                info: info.clone(),
                partitions: vec![Partition::default(); info.partitions as usize],
            },
        );
        Ok(info)
    }

    pub(super) fn delete_topic(&mut self, name: &str) -> Result<(), Refusal> {
        let topic = self
            .log
            .topics
            .remove(name)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        self.log.names_by_id.remove(&topic.info.id);
        self.groups.forget_topic(name);
        self.txns.forget_topic(topic.info.id, name, self.clock_ms);
        for (n, partition) in topic.partitions.into_iter().enumerate() {
            let tp = TopicPartition::new(topic.info.id, n as i32);
            self.log.changed.0.insert(tp);
            for extent in partition.extents.into_values() {
                self.release(extent.object, tp);
            }
        }
        Ok(())
    }

    pub(super) fn create_partitions(&mut self, name: &str, count: i32) -> Result<(), Refusal> {
        let topic = self
            .log
            .topics
            .get_mut(name)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        if count <= topic.info.partitions || count > MAX_PARTITIONS {
            return Err(Refusal::InvalidPartitions(count));
        }
        let (id, before) = (topic.info.id, topic.info.partitions);
        topic.info.partitions = count;
        topic
            .partitions
            .resize(count as usize, Partition::default());
        // A watcher of a partition that did not exist learns it does now.
        let added = (before..count).map(|n| TopicPartition::new(id, n));
        self.log.changed.0.extend(added);
        Ok(())
    }

    /// Every topic, as clients see it (with the cluster's topic defaults).
    pub fn topics(&self) -> Vec<TopicInfo> {
        let inherited = self.configs.topic_defaults();
        self.log
            .topics
            .values()
            .map(|t| self.answered(t, &inherited))
            .collect()
    }

    pub fn topic(&self, name: &str) -> Option<TopicInfo> {
        let inherited = self.configs.topic_defaults();
        self.log
            .topics
            .get(name)
            .map(|t| self.answered(t, &inherited))
    }

    /// A topic's description as an answer carries it.
    pub(super) fn answered(
        &self,
        topic: &Topic,
        inherited: &BTreeMap<String, String>,
    ) -> TopicInfo {
        TopicInfo {
            inherited: inherited.clone(),
            ..topic.info.clone()
        }
    }

    /// A topic from its id.
    pub fn topic_by_id(&self, id: TopicId) -> Option<TopicInfo> {
        self.log
            .names_by_id
            .get(&id)
            .and_then(|name| self.topic(name))
    }
}

impl Apply for CreateTopic {
    type Output = TopicInfo;
    fn apply(self, state: &mut State) -> Result<TopicInfo, Refusal> {
        let created = state.create_topic(self.id, self.topic)?;
        Ok(TopicInfo {
            inherited: state.configs.topic_defaults(),
            ..created
        })
    }
    /// A blind retry after another client deleted the topic would create it again.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for DeleteTopic {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.delete_topic(&self.name)
    }
}

impl Apply for AlterTopicConfigs {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        let topic = state
            .log
            .topics
            .get_mut(&self.name)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        for key in self.delete {
            topic.info.configs.remove(&key);
        }
        topic.info.configs.extend(self.set);
        Ok(())
    }
}

impl Apply for CreatePartitions {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.create_partitions(&self.name, self.count)
    }
}

impl Query for ListTopics {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.topics())
    }
}

impl Query for TopicNamed {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.topic(&self.name))
    }
}

impl Query for TopicById {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.topic_by_id(self.id))
    }
}
