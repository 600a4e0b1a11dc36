//! How a consumer group is described (ConsumerGroupDescribe).

use super::*;

/// ConsumerGroupDescribe of one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeConsumerGroup {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupDescription {
    pub state: String,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<ConsumerMemberDescription>,
}

/// Partitions of one topic: id, name, partitions.
pub type NamedPartitions = (TopicId, String, Vec<i32>);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerMemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topics: Vec<String>,
    pub subscribed_regex: Option<String>,
    pub assignment: Vec<NamedPartitions>,
    pub target: Vec<NamedPartitions>,
    /// A member speaking the classic protocol (KIP-1099's member type 0).
    pub classic: bool,
}
