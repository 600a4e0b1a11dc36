//! The in-process metastore: the state machine behind a lock, made durable by
//! the command log (or kept in memory only, for tests).

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use uuid::Uuid;

use crate::Metastore;
use crate::agents::AgentInfo;
use crate::groups::{Group, GroupCommand, GroupReply};
use crate::log::CommandLog;
use crate::state::{Command, Reply, State};
use crate::types::*;

/// Commands between snapshots of the durable log.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 10_000;

pub struct LocalMetastore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Held only for in-memory work, never across I/O, so reads never wait on a disk write.
    state: RwLock<State>,
    /// Serializes writers; held across the log append (blocking I/O, run off the async workers).
    log: Mutex<Option<CommandLog>>,
}

impl LocalMetastore {
    /// A metastore whose state lives only in memory.
    pub fn in_memory() -> Self {
        Self::from_parts(State::default(), None)
    }

    /// A metastore made durable in a redb file at `path`, restored from it if present.
    pub fn open(path: &Path) -> Result<Self, MetaError> {
        Self::open_with(path, DEFAULT_SNAPSHOT_EVERY)
    }

    pub fn open_with(path: &Path, snapshot_every: u64) -> Result<Self, MetaError> {
        let (log, state) = CommandLog::open(path, snapshot_every)?;
        Ok(Self::from_parts(state, Some(log)))
    }

    fn from_parts(state: State, log: Option<CommandLog>) -> Self {
        LocalMetastore {
            inner: Arc::new(Inner {
                state: RwLock::new(state),
                log: Mutex::new(log),
            }),
        }
    }

    async fn apply(&self, command: Command) -> Result<Reply, MetaError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.apply(command))
            .await
            .map_err(|e| MetaError::Storage(format!("metastore writer failed: {e}")))?
    }

    fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self
            .inner
            .state
            .read()
            .expect("metastore state lock poisoned"))
    }

    /// Commands in the durable log after the last snapshot (0 when in memory).
    pub fn log_len(&self) -> u64 {
        let log = self.inner.log.lock().expect("metastore log lock poisoned");
        log.as_ref().map_or(0, |l| l.log_len())
    }
}

impl Inner {
    fn apply(&self, command: Command) -> Result<Reply, MetaError> {
        let mut log = self.log.lock().expect("metastore log lock poisoned");
        if let Some(log) = log.as_mut() {
            log.append(&command)?;
        }
        let reply = self
            .state
            .write()
            .expect("metastore state lock poisoned")
            .apply(command);
        if let Some(log) = log.as_mut().filter(|l| l.wants_snapshot()) {
            let state = self.state.read().expect("metastore state lock poisoned");
            // A failed snapshot loses nothing: the log still holds every command.
            if let Err(e) = log.snapshot(&state) {
                tracing::warn!(error = %e, "metastore snapshot failed");
            }
        }
        Ok(reply)
    }
}

fn unexpected(reply: Reply) -> MetaError {
    MetaError::Storage(format!("unexpected reply {reply:?}"))
}

#[async_trait]
impl Metastore for LocalMetastore {
    async fn create_topic(&self, topic: NewTopic) -> Result<TopicInfo, MetaError> {
        let id = Uuid::new_v4();
        match self.apply(Command::CreateTopic { id, topic }).await? {
            Reply::Created(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn delete_topic(&self, name: &str) -> Result<(), MetaError> {
        match self
            .apply(Command::DeleteTopic {
                name: name.to_string(),
            })
            .await?
        {
            Reply::Deleted(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn topics(&self) -> Result<Vec<TopicInfo>, MetaError> {
        Ok(self.read(|s| s.topics()))
    }

    async fn topic(&self, name: &str) -> Result<Option<TopicInfo>, MetaError> {
        Ok(self.read(|s| s.topic(name)))
    }

    async fn topic_by_id(&self, id: TopicId) -> Result<Option<TopicInfo>, MetaError> {
        Ok(self.read(|s| s.topic_by_id(id)))
    }

    async fn commit(&self, commit: Commit) -> Result<Vec<Result<i64, MetaError>>, MetaError> {
        match self.apply(Command::Commit(commit)).await? {
            Reply::Committed(results) => Ok(results),
            other => Err(unexpected(other)),
        }
    }

    async fn offsets(&self, topic: TopicId, partition: i32) -> Result<PartitionOffsets, MetaError> {
        self.read(|s| s.offsets(topic, partition))
    }

    async fn read_plan(
        &self,
        topic: TopicId,
        partition: i32,
        from: i64,
        max_bytes: u64,
    ) -> Result<ReadPlan, MetaError> {
        self.read(|s| s.read_plan(topic, partition, from, max_bytes))
    }

    async fn list_offsets(
        &self,
        topic: TopicId,
        partition: i32,
        query: OffsetQuery,
    ) -> Result<OffsetAnswer, MetaError> {
        self.read(|s| s.list_offsets(topic, partition, query))
    }

    async fn init_producer(
        &self,
        existing: Option<ProducerIdentity>,
    ) -> Result<ProducerIdentity, MetaError> {
        match self.apply(Command::InitProducer { existing }).await? {
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
            .apply(Command::RegisterAgent {
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
            .apply(Command::AgentHeartbeat { node_id, now_ms })
            .await?
        {
            Reply::Alive(alive) => Ok(alive),
            other => Err(unexpected(other)),
        }
    }

    async fn agents(&self) -> Result<Vec<AgentInfo>, MetaError> {
        Ok(self.read(|s| s.agents()))
    }

    async fn group_command(&self, command: GroupCommand) -> Result<GroupReply, MetaError> {
        match self.apply(Command::Group(command)).await? {
            Reply::Group(reply) => Ok(reply),
            other => Err(unexpected(other)),
        }
    }

    async fn group(&self, name: &str) -> Result<Option<Group>, MetaError> {
        Ok(self.read(|s| s.group(name)))
    }

    async fn alter_topic_configs(
        &self,
        name: &str,
        set: std::collections::BTreeMap<String, String>,
        delete: Vec<String>,
    ) -> Result<(), MetaError> {
        let command = Command::AlterTopicConfigs {
            name: name.to_string(),
            set,
            delete,
        };
        match self.apply(command).await? {
            Reply::Altered(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn create_partitions(&self, name: &str, count: i32) -> Result<(), MetaError> {
        match self
            .apply(Command::CreatePartitions {
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
        Ok(self.read(|s| s.groups()))
    }

    async fn trim(&self, topic: TopicId, partition: i32, offset: i64) -> Result<i64, MetaError> {
        match self
            .apply(Command::Trim {
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
        match self.apply(Command::ReplaceExtents(replace)).await? {
            Reply::Replaced(result) => result,
            other => Err(unexpected(other)),
        }
    }

    async fn partitions(&self) -> Result<Vec<(TopicId, i32)>, MetaError> {
        Ok(self.read(|s| s.partitions()))
    }

    async fn garbage(&self) -> Result<Vec<String>, MetaError> {
        Ok(self.read(|s| s.garbage().to_vec()))
    }

    async fn record_orphans(&self, keys: Vec<String>) -> Result<(), MetaError> {
        match self.apply(Command::RecordOrphans { keys }).await? {
            Reply::Forgotten => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn unknown_objects(&self, keys: Vec<String>) -> Result<Vec<String>, MetaError> {
        Ok(self.read(|s| s.unknown_objects(&keys)))
    }

    async fn forget_garbage(&self, keys: Vec<String>) -> Result<(), MetaError> {
        match self.apply(Command::ForgetGarbage { keys }).await? {
            Reply::Forgotten => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}
