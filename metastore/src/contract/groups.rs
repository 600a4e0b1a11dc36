//! Consumer groups' messages: what a client asks of a group (classic
//! JoinGroup, SyncGroup, heartbeats, leaves, offset commits; the consumer
//! protocol's heartbeat of KIP-848), what it is answered, and the limits
//! both ends check. How a group decides is the node's (`crate::groups`).

/// Share groups' messages, with the other groups'.
pub use crate::contract::shares::*;
use serde::{Deserialize, Serialize};

use crate::contract::types::TopicId;

/// Why a group operation was refused; each is one Kafka error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum GroupError {
    #[error("unknown member id")]
    UnknownMemberId,
    #[error("illegal generation")]
    IllegalGeneration,
    #[error("rebalance in progress")]
    RebalanceInProgress,
    #[error("inconsistent group protocol")]
    InconsistentGroupProtocol,
    #[error("invalid session timeout")]
    InvalidSessionTimeout,
    #[error("a newer member holds this group.instance.id")]
    FencedInstanceId,
    #[error("the group is full")]
    GroupMaxSizeReached,
    #[error("the group has members")]
    NonEmptyGroup,
    #[error("no such group")]
    GroupIdNotFound,
    #[error("the group is subscribed to the topic")]
    GroupSubscribedToTopic,
    #[error("no such server-side assignor")]
    UnsupportedAssignor,
    #[error("another member holds this group.instance.id")]
    UnreleasedInstanceId,
    #[error("the member's epoch is not the group's")]
    FencedMemberEpoch,
    #[error("the commit's member epoch is not the member's")]
    StaleMemberEpoch,
    #[error("the subscription's regular expression does not compile")]
    InvalidRegularExpression,
    /// Retriable: the group cannot convert yet (its members' assignments
    /// are not known in a form it can take over; a rebalance was started).
    #[error("the group is not ready to convert; retry")]
    CoordinatorLoadInProgress,
}

/// Shortest and longest session timeout accepted by default (Kafka's
/// `group.min.session.timeout.ms` and `group.max.session.timeout.ms`
/// defaults; an agent's [`JoinRules`] may set others).
pub const MIN_SESSION_TIMEOUT_MS: i32 = 6_000;
pub const MAX_SESSION_TIMEOUT_MS: i32 = 1_800_000;
/// Kafka's `group.initial.rebalance.delay.ms` default.
pub const INITIAL_REBALANCE_DELAY_MS: i32 = 3_000;
/// Members (and ids handed out, KIP-394) one group may have: Kafka's
/// `group.max.size` is unbounded by default; every map here has a limit.
pub const MAX_GROUP_SIZE: usize = 10_000;
/// Groups the metastore holds at most (each is replicated and snapshotted):
/// a join or commit that would create one more is refused.
pub const MAX_GROUPS: usize = 100_000;
/// Kafka's `offset.metadata.max.bytes` default: longer commit metadata is
/// refused (OFFSET_METADATA_TOO_LARGE).
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;

/// JoinGroup: a member (re)joins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinGroup {
    pub group: String,
    /// Empty for a new member (or a static member that restarted).
    pub member_id: String,
    /// `group.instance.id`: a static member (KIP-345).
    pub instance_id: Option<String>,
    pub client_id: String,
    /// Where the member connects from (DescribeGroups shows it).
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    /// The topics a `consumer` member subscribes to, as the agent read them
    /// from its metadata (the metastore knows nothing of the Kafka wire);
    /// `None` when not known. OffsetDelete and offset expiry use them.
    pub subscribed_topics: Option<Vec<String>>,
    /// A new dynamic member is first given an id and asked to come back with
    /// it (KIP-394, JoinGroup v4+), so a lost answer leaves no ghost member.
    pub require_known_member_id: bool,
    /// The id a new member gets: drawn by the proposer, as the state
    /// machine draws nothing.
    pub fresh_id: String,
    pub now_ms: i64,
    /// The partitions a `consumer` member says it owns (its subscription's
    /// `ownedPartitions`, v1+), as the agent read them: a cooperative
    /// member joining a consumer-protocol group keeps them until it gives
    /// them up. `None` when not known (an eager member sends none).
    pub owned: Option<TopicPartitions>,
    /// The joining agent's group settings (format 11).
    pub rules: JoinRules,
}

/// The broker settings a classic join is judged by, as the agent it came
/// through has them (Kafka's are broker configs; so are floe's, and the
/// command carries them so that every replica decides alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinRules {
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of
    /// an empty group waits for more members (extended by this much while
    /// new ones come, up to the rebalance timeout).
    pub initial_rebalance_delay_ms: i32,
}

impl JoinRules {
    /// Kafka's defaults.
    pub const KAFKA: JoinRules = JoinRules {
        min_session_timeout_ms: MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: MAX_SESSION_TIMEOUT_MS,
        initial_rebalance_delay_ms: INITIAL_REBALANCE_DELAY_MS,
    };
    /// What joins logged before format 11 were judged by (no initial delay).
    pub const BEFORE_FORMAT_11: JoinRules = JoinRules {
        initial_rebalance_delay_ms: 0,
        ..JoinRules::KAFKA
    };
}

/// Partitions by topic name, as a `consumer` protocol's metadata names them.
pub type TopicPartitions = Vec<(String, Vec<i32>)>;

/// What a JoinGroup did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Joined {
    /// The member is in the rebalance (or the generation): its answer is
    /// due once the generation forms.
    Member(String),
    /// KIP-394: come back with this id.
    MemberIdRequired(String),
    /// A static member took its instance's place in a stable group with no
    /// rebalance: answered at once with the current generation, naming the
    /// leader as it was before (Kafka's answer to JoinGroup before v9).
    Replaced { member_id: String, leader: String },
    /// A classic member of a group that runs the consumer protocol
    /// (KIP-848's migration): answered at once, a follower with no leader,
    /// at its member epoch; its SyncGroup gets what the group assigned it.
    InConsumerGroup {
        member_id: String,
        generation: i32,
        protocol: String,
    },
}

/// A SyncGroup's answer from the state: `None` in a classic group (the
/// member waits for the leader's assignments, [`AwaitGroup`]); in a
/// consumer-protocol group, what it assigned the member.
pub type Synced = Option<ClassicAssignment>;

/// What a consumer-protocol group assigned one of its classic members, for
/// the agent to encode as a ConsumerProtocol assignment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassicAssignment {
    pub protocol: String,
    /// The member's metadata for `protocol` (the assignment is encoded at
    /// the version of its subscription, as Kafka does).
    pub subscription: Vec<u8>,
    pub partitions: TopicPartitions,
}

/// SyncGroup: the leader's assignments for the generation (none from a follower).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncGroup {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    /// SyncGroup v5 names them; a mismatch is INCONSISTENT_GROUP_PROTOCOL.
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignments: Vec<(String, Vec<u8>)>,
    pub now_ms: i64,
    /// The assignments of `assignments` that the agent could read as
    /// ConsumerProtocol assignments (user data dropped): what an
    /// upgrade to the consumer protocol takes each member to own.
    pub decoded: Vec<(String, TopicPartitions)>,
    /// The agent read the assignments (`decoded` is complete): false for a
    /// SyncGroup logged before format 9.
    pub decodes: bool,
}

/// Heartbeat: a member says it is alive, and learns of a rebalance. Not a
/// command of the log: the leader answers it (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupHeartbeat {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
}

/// A group member a heartbeat showed alive (see `Sequencer::read_heard`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    pub group: String,
    pub member: String,
}

/// One member leaving: by member id, or (empty member id) by instance id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaving {
    pub member_id: String,
    pub instance_id: Option<String>,
}

/// LeaveGroup of one or more members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaveGroup {
    pub group: String,
    pub members: Vec<Leaving>,
    pub now_ms: i64,
}

/// Ends a rebalance or sync whose deadline passed and forgets ids handed
/// out that never came back (proposed by the leader's timers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickGroup {
    pub group: String,
    pub now_ms: i64,
}

/// Removes members whose session ran out (proposed by the leader's timers):
/// each with the last time the leader heard its heartbeat, so that applying
/// it decides the same on every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpireMembers {
    pub group: String,
    pub members: Vec<(String, i64)>,
    pub now_ms: i64,
}

/// OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitOffsets {
    pub group: String,
    /// -1 with an empty member id: a commit from outside the group protocol.
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub offsets: Vec<OffsetToCommit>,
    pub now_ms: i64,
}

/// One partition's offset in a [`CommitOffsets`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetToCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The leader epoch the consumer saw (KIP-320), -1 when it sent none.
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// DeleteGroups: each group, if empty, with its offsets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteGroups {
    pub groups: Vec<String>,
}

/// OffsetDelete (KIP-496): committed offsets of topics the group does not
/// subscribe to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteOffsets {
    pub group: String,
    pub partitions: Vec<(String, i32)>,
}

/// Answers when `group` changes from version `seen` (or at once without
/// one), or after `wait_ms` (at most [`MAX_GROUP_WAIT_MS`]): what the member
/// sees of it. How a JoinGroup or SyncGroup waits for the rest of its group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwaitGroup {
    pub group: String,
    pub member_id: String,
    /// The member's `group.instance.id`, if static (to tell it it was fenced).
    pub instance_id: Option<String>,
    pub seen: Option<u64>,
    pub wait_ms: u32,
}

/// The longest one [`AwaitGroup`] waits (within a client's attempt timeout).
pub const MAX_GROUP_WAIT_MS: u32 = 1_000;

/// What a member waiting in JoinGroup or SyncGroup needs of its group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberView {
    /// Changes whenever the group's membership, phase or assignments do.
    pub version: u64,
    pub generation: i32,
    pub phase: Phase,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// `None`: not a member. `Some(joined)`: a member, which has (re)joined
    /// the rebalance in progress if `joined`.
    pub member: Option<bool>,
    /// Not a member because a newer member took its `group.instance.id`.
    pub fenced: bool,
    /// Every member's id, instance id and metadata for the chosen protocol,
    /// once a generation formed, and only for its leader.
    pub members: Vec<(String, Option<String>, Vec<u8>)>,
    /// The member's assignment and the generation it is of.
    pub assignment: Option<(i32, Vec<u8>)>,
    /// The group now runs the consumer protocol (it was upgraded while the
    /// member waited): a waiting JoinGroup or SyncGroup is answered
    /// REBALANCE_IN_PROGRESS, as Kafka completes them, and the member
    /// rejoins the consumer group.
    pub converted: bool,
}

/// DescribeGroups of one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeGroup {
    pub name: String,
}

/// One group as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDescription {
    pub state: String,
    pub protocol_type: String,
    /// The chosen protocol, while Stable (as Kafka).
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The member's metadata for the chosen protocol, while Stable.
    pub metadata: Vec<u8>,
    pub assignment: Vec<u8>,
}

/// Every group, as ListGroups shows it: name, state and protocol type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListGroups;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupListing {
    pub name: String,
    pub state: String,
    pub protocol_type: String,
    /// `classic` or `consumer` (ListGroups v5).
    pub group_type: String,
}

/// OffsetFetch: a group's committed offsets of `partitions` (all of them
/// when `None`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOffsets {
    pub group: String,
    pub partitions: Option<Vec<(String, i32)>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    /// The metastore's time of the commit.
    pub commit_ms: i64,
}

/// Member epochs with a meaning of their own.
pub const JOIN_EPOCH: i32 = 0;
pub const LEAVE_EPOCH: i32 = -1;
pub const STATIC_LEAVE_EPOCH: i32 = -2;
/// How often regular expressions are resolved again against the topics
/// (Kafka's minimum between refreshes).
pub const REGEX_REFRESH_MS: i64 = 10_000;
/// The longest regular expression accepted, and its compiled size.
pub const MAX_REGEX_LEN: usize = 1_024;
/// Distinct regular expressions one group's members may use (each is
/// matched against every topic at every resolution).
pub const MAX_REGEXES: usize = 100;

/// ConsumerGroupHeartbeat, as the agent hands it over (validated: member id
/// set, epochs and fields as Kafka requires). `None` fields are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerHeartbeat {
    pub group: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topics: Option<Vec<String>>,
    pub subscribed_regex: Option<String>,
    pub assignor: Option<String>,
    /// What the member owns now.
    pub owned: Option<Vec<(TopicId, Vec<i32>)>>,
    pub client_id: String,
    pub client_host: String,
    /// The agent's `group.consumer.session.timeout.ms` and heartbeat interval.
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub now_ms: i64,
    /// Whose DESCRIBE a regular expression's matches are filtered by (the
    /// member's principal, as its agent authorizes it); `None` with ACLs
    /// off, or for a super user (format 11).
    pub describer: Option<Describer>,
}

/// Who a group's regular expressions are resolved for: as Kafka 4 resolves
/// them, a topic matches only if this principal may DESCRIBE it (from the
/// member whose heartbeat brought the expression in; the ACLs are the
/// state's, so every replica filters alike).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Describer {
    pub principal: String,
    pub host: String,
    /// Kafka's `allow.everyone.if.no.acl.found`, as the agent has it.
    pub allow_if_no_acl: bool,
}

/// The answer to a [`ConsumerHeartbeat`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's whole assignment, when it changed (or was asked for).
    pub assignment: Option<Vec<(TopicId, Vec<i32>)>>,
}

/// ConsumerGroupDescribe of one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeConsumerGroup {
    pub name: String,
}

/// ConsumerGroupDescribe's answer for one group.
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

/// Where a classic group is in its rebalance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Empty,
    /// Kafka's PreparingRebalance: waiting for members to (re)join until the
    /// deadline.
    Joining {
        deadline_ms: i64,
    },
    /// Kafka's CompletingRebalance: the generation formed; waiting for the
    /// leader's assignments.
    Syncing,
    Stable,
}

/// Kafka's `group.consumer.migration.policy`: which conversions of groups
/// with members are allowed (empty groups always convert).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MigrationPolicy {
    #[default]
    Bidirectional,
    Upgrade,
    Downgrade,
    Disabled,
}

impl MigrationPolicy {
    /// Kafka's names, in any case.
    pub fn parse(value: &str) -> Option<MigrationPolicy> {
        match value.trim().to_ascii_lowercase().as_str() {
            "bidirectional" => Some(MigrationPolicy::Bidirectional),
            "upgrade" => Some(MigrationPolicy::Upgrade),
            "downgrade" => Some(MigrationPolicy::Downgrade),
            "disabled" => Some(MigrationPolicy::Disabled),
            _ => None,
        }
    }

    pub fn upgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Upgrade
        )
    }

    pub fn downgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Downgrade
        )
    }
}
