//! [`Sequencer`]: what a metastore that applies [`Command`]s to a [`State`]
//! provides (a write, a read, a clock, fresh ids), and the one mapping of the
//! [`Metastore`] API onto it. The Raft node and the simulation's metastore
//! both implement it, so they answer every call the same way.

use std::collections::BTreeMap;
use std::future::Future;

use async_trait::async_trait;
use uuid::Uuid;

use crate::Metastore;
use crate::agents::AgentInfo;
use crate::groups::{Group, GroupCommand, GroupReply};
use crate::state::{Command, Reply, State};
use crate::types::*;

/// A metastore that sequences commands itself (not a client of one).
pub trait Sequencer: Send + Sync + 'static {
    /// Applies `command` through the log and returns the state machine's reply.
    fn write(&self, command: Command) -> impl Future<Output = Result<Reply, MetaError>> + Send;
    /// Runs `f` on an up-to-date (linearizable) state. (`Clone`, so that a
    /// client may run it again on another node.)
    fn read<T: Send, F: FnOnce(&State) -> T + Clone + Send>(
        &self,
        f: F,
    ) -> impl Future<Output = Result<T, MetaError>> + Send;
    /// The leader's time, for reads that report ages.
    fn now_ms(&self) -> i64;
    /// A fresh id (drawn outside the state machine, which must be deterministic).
    fn new_id(&self) -> Uuid;
}

fn unexpected(reply: Reply) -> MetaError {
    MetaError::Storage(format!("unexpected reply {reply:?}"))
}

#[async_trait]
impl<S: Sequencer> Metastore for S {
    async fn create_topic(&self, topic: NewTopic) -> Result<TopicInfo, MetaError> {
        // The id is drawn here, not in the state machine, which must be deterministic.
        let id = self.new_id();
        match self.write(Command::CreateTopic { id, topic }).await? {
            Reply::Created(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn delete_topic(&self, name: &str) -> Result<(), MetaError> {
        match self
            .write(Command::DeleteTopic {
                name: name.to_string(),
            })
            .await?
        {
            Reply::Deleted(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn topics(&self) -> Result<Vec<TopicInfo>, MetaError> {
        self.read(|s| s.topics()).await
    }

    async fn topic(&self, name: &str) -> Result<Option<TopicInfo>, MetaError> {
        self.read(|s| s.topic(name)).await
    }

    async fn topic_by_id(&self, id: TopicId) -> Result<Option<TopicInfo>, MetaError> {
        self.read(|s| s.topic_by_id(id)).await
    }

    async fn commit(&self, commit: Commit) -> Result<Vec<Result<i64, MetaError>>, MetaError> {
        match self.write(Command::Commit(commit)).await? {
            Reply::Committed(results) => Ok(results),
            other => Err(unexpected(other)),
        }
    }

    async fn offsets(&self, topic: TopicId, partition: i32) -> Result<PartitionOffsets, MetaError> {
        self.read(|s| s.offsets(topic, partition)).await?
    }

    async fn high_watermarks(
        &self,
        partitions: Vec<(TopicId, i32)>,
    ) -> Result<Vec<Option<i64>>, MetaError> {
        self.read(|s| s.high_watermarks(&partitions)).await
    }

    async fn read_plan(
        &self,
        topic: TopicId,
        partition: i32,
        from: i64,
        max_bytes: u64,
    ) -> Result<ReadPlan, MetaError> {
        self.read(|s| s.read_plan(topic, partition, from, max_bytes))
            .await?
    }

    async fn list_offsets(
        &self,
        topic: TopicId,
        partition: i32,
        query: OffsetQuery,
    ) -> Result<OffsetAnswer, MetaError> {
        self.read(|s| s.list_offsets(topic, partition, query))
            .await?
    }

    async fn init_producer(
        &self,
        existing: Option<ProducerIdentity>,
    ) -> Result<ProducerIdentity, MetaError> {
        match self.write(Command::InitProducer { existing }).await? {
            Reply::Producer(p) => Ok(p),
            other => Err(unexpected(other)),
        }
    }

    async fn register_agent(
        &self,
        host: String,
        port: i32,
        zone: Option<String>,
        now_ms: i64,
    ) -> Result<i32, MetaError> {
        match self
            .write(Command::RegisterAgent {
                host,
                port,
                zone,
                now_ms,
            })
            .await?
        {
            Reply::Registered(id) => Ok(id),
            other => Err(unexpected(other)),
        }
    }

    async fn agent_heartbeat(&self, node_id: i32, now_ms: i64) -> Result<bool, MetaError> {
        match self
            .write(Command::AgentHeartbeat { node_id, now_ms })
            .await?
        {
            Reply::Alive(alive) => Ok(alive),
            other => Err(unexpected(other)),
        }
    }

    async fn agents(&self) -> Result<Vec<AgentInfo>, MetaError> {
        let now = self.now_ms();
        self.read(move |s| s.agents(now)).await
    }

    async fn group_command(&self, command: GroupCommand) -> Result<GroupReply, MetaError> {
        match self.write(Command::Group(command)).await? {
            Reply::Group(reply) => Ok(reply),
            other => Err(unexpected(other)),
        }
    }

    async fn group(&self, name: &str) -> Result<Option<Group>, MetaError> {
        self.read(|s| s.group(name)).await
    }

    async fn alter_topic_configs(
        &self,
        name: &str,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    ) -> Result<(), MetaError> {
        let command = Command::AlterTopicConfigs {
            name: name.to_string(),
            set,
            delete,
        };
        match self.write(command).await? {
            Reply::Altered(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn create_partitions(&self, name: &str, count: i32) -> Result<(), MetaError> {
        match self
            .write(Command::CreatePartitions {
                name: name.to_string(),
                count,
            })
            .await?
        {
            Reply::Altered(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn groups(&self) -> Result<Vec<(String, Group)>, MetaError> {
        self.read(|s| s.groups()).await
    }

    async fn trim(&self, topic: TopicId, partition: i32, offset: i64) -> Result<i64, MetaError> {
        match self
            .write(Command::Trim {
                topic_id: topic,
                partition,
                offset,
            })
            .await?
        {
            Reply::Trimmed(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn replace_extents(&self, replace: ReplaceExtents) -> Result<(), MetaError> {
        match self.write(Command::ReplaceExtents(replace)).await? {
            Reply::Replaced(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn garbage(&self) -> Result<Vec<String>, MetaError> {
        self.read(|s| s.garbage().to_vec()).await
    }

    async fn record_orphans(&self, keys: Vec<String>) -> Result<(), MetaError> {
        match self.write(Command::RecordOrphans { keys }).await? {
            Reply::Forgotten => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn unknown_objects(&self, keys: Vec<String>) -> Result<Vec<String>, MetaError> {
        self.read(|s| s.unknown_objects(&keys)).await
    }

    async fn acquire_lease(
        &self,
        job: String,
        holder: String,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<bool, MetaError> {
        let command = Command::AcquireLease {
            job,
            holder,
            now_ms,
            ttl_ms,
        };
        match self.write(command).await? {
            Reply::Leased(granted) => Ok(granted),
            other => Err(unexpected(other)),
        }
    }

    /// A write, not a read: the state's clock moves only with proposals, so
    /// a quiet group's applied time could lag; a Tick brings it to now.
    async fn clock(&self) -> Result<i64, MetaError> {
        match self.write(Command::Tick).await? {
            Reply::Clock(ms) => Ok(ms),
            other => Err(unexpected(other)),
        }
    }

    async fn release_lease(&self, job: String, holder: String) -> Result<(), MetaError> {
        match self.write(Command::ReleaseLease { job, holder }).await? {
            Reply::Forgotten => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn forget_garbage(&self, keys: Vec<String>) -> Result<(), MetaError> {
        match self.write(Command::ForgetGarbage { keys }).await? {
            Reply::Forgotten => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}
