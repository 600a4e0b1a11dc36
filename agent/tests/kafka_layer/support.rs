//! Whole agents in this process, over an in-memory metastore and object
//! store, each serving Kafka on a loopback port of its own; and a raw
//! Kafka connection to talk to them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_agent::agent::Agent;
use floe_agent::config::Config;
use floe_metastore::{LocalMetastore, Metastore, NewTopic, TopicInfo};
use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
pub use floe_protocol::testing::requests::{delete_records, fetch, list_offsets, produce};
use floe_storage::ObjectStore;

/// An agent started in this process; dropping it stops it at once.
pub struct TestAgent {
    pub address: String,
    pub agent: Agent,
    _dir: tempfile::TempDir,
}

pub async fn metastore() -> Arc<dyn Metastore> {
    Arc::new(
        LocalMetastore::in_memory()
            .await
            .expect("in-memory metastore"),
    )
}

pub fn memory_store() -> Arc<dyn ObjectStore> {
    Arc::new(object_store::memory::InMemory::new())
}

/// An agent with test defaults: a 5 ms flush, no cache ring, no
/// compaction (the transaction timeout job runs, as in every agent).
pub async fn agent(meta: &Arc<dyn Metastore>, store: &Arc<dyn ObjectStore>) -> TestAgent {
    agent_with(meta, store, |_| {}).await
}

/// An agent with test defaults changed by `tweak`.
pub async fn agent_with(
    meta: &Arc<dyn Metastore>,
    store: &Arc<dyn ObjectStore>,
    tweak: impl FnOnce(&mut Config),
) -> TestAgent {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut config = Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        admin_listen: "127.0.0.1:0".parse().expect("an address"),
        data_dir: dir.path().to_path_buf(),
        flush_interval: Duration::from_millis(5),
        cache_ring: false,
        cache_bytes: bytesize::ByteSize::mib(64),
        compaction_interval: Duration::ZERO,
        ..Config::default()
    };
    tweak(&mut config);
    let metrics = Arc::new(floe_agent::metrics::Metrics::new());
    let agent = Agent::start(config, meta.clone(), store.clone(), metrics)
        .await
        .expect("an agent");
    let (_, address) = agent.kafka_addresses().next().expect("a Kafka listener");
    TestAgent {
        address: address.to_string(),
        agent,
        _dir: dir,
    }
}

impl TestAgent {
    pub async fn connect(&self) -> Connection {
        Connection::connect(&self.address, "floe-test")
            .await
            .expect("connected")
    }
}

pub async fn create_topic(meta: &Arc<dyn Metastore>, name: &str, partitions: i32) -> TopicInfo {
    meta.create_topic(NewTopic {
        name: name.into(),
        partitions,
        configs: Default::default(),
    })
    .await
    .expect("topic created")
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// One uncompressed batch of `values`.
pub fn batch(values: &[&str]) -> Bytes {
    let values: Vec<Vec<u8>> = values.iter().map(|v| v.as_bytes().to_vec()).collect();
    floe_protocol::testing::encode(
        &values,
        floe_protocol::kafka_protocol::records::Compression::None,
    )
}

/// The one partition's answer of a produce.
pub fn produced(response: &ProduceResponse) -> &produce_response::PartitionProduceResponse {
    &response.responses[0].partition_responses[0]
}

pub const FETCH_VERSION: i16 = 12;

/// The one partition's answer of a fetch.
pub fn fetched(response: &FetchResponse) -> &fetch_response::PartitionData {
    &response.responses[0].partitions[0]
}

/// The records' values of a fetched partition, with their offsets (control
/// batches left out, as clients leave them).
pub fn values(data: &fetch_response::PartitionData) -> Vec<(i64, String)> {
    let bytes = data.records.clone().unwrap_or_default();
    let mut batches = floe_protocol::batch::RecordBatch::parse_all_stored(&bytes).expect("batches");
    batches.retain(|b| !b.is_control());
    floe_protocol::records::decode_all(&batches)
        .expect("records")
        .into_iter()
        .map(|r| {
            let value = r.value.map(|v| String::from_utf8_lossy(&v).into_owned());
            (r.offset, value.unwrap_or_default())
        })
        .collect()
}

/// How many ingest files `store` holds.
pub async fn ingest_files(store: &Arc<dyn ObjectStore>) -> usize {
    use futures::TryStreamExt;
    let prefix =
        floe_storage::ObjectPath::from(floe_storage::keys::INGEST_PREFIX.trim_end_matches('/'));
    let listed: Vec<_> = store
        .list(Some(&prefix))
        .try_collect()
        .await
        .expect("listed");
    listed.len()
}

/// A store whose PUTs of records wait while it is held: an agent over it
/// uploads as slowly as a test wants. (Other PUTs pass: the cluster id an
/// agent writes as it starts.) A held PUT has reached the store; its
/// writer is not told until the gate opens.
pub struct Gate {
    held: std::sync::atomic::AtomicBool,
    waiting: std::sync::atomic::AtomicUsize,
    opened: tokio::sync::Notify,
}

impl Gate {
    pub fn held() -> Arc<Gate> {
        Arc::new(Gate {
            held: true.into(),
            waiting: 0.into(),
            opened: tokio::sync::Notify::new(),
        })
    }

    /// `inner`, with its PUTs through this gate.
    pub fn over(self: &Arc<Self>, inner: &Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(floe_storage::hooked::HookedStore::new(
            inner.clone(),
            GateHooks(self.clone()),
        ))
    }

    /// PUTs waiting at the gate.
    pub fn waiting(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn open(&self) {
        self.held.store(false, std::sync::atomic::Ordering::SeqCst);
        self.opened.notify_waiters();
    }

    /// Holds what passes from now on, as at the start.
    pub fn hold(&self) {
        self.held.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits while the gate is held.
    async fn pass(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.waiting.fetch_add(1, SeqCst);
        while self.held.load(SeqCst) {
            let opened = self.opened.notified();
            if !self.held.load(SeqCst) {
                break;
            }
            opened.await;
        }
        self.waiting.fetch_sub(1, SeqCst);
    }
}

struct GateHooks(Arc<Gate>);

#[async_trait::async_trait]
impl floe_storage::hooked::Hooks for GateHooks {
    async fn after_put(&self, location: &floe_storage::ObjectPath) -> object_store::Result<()> {
        if floe_storage::keys::holds_records(location.as_ref()) {
            self.0.pass().await;
        }
        Ok(())
    }
}

/// A view of a shared metastore whose operations of one type wait at a
/// gate: an agent over it reads as late as a test wants (a slow or frozen
/// metastore, as that agent sees it).
pub struct HeldOps {
    inner: Arc<LocalMetastore>,
    /// The end of the held operations' type name (`"::DescribeTxns"`).
    op: &'static str,
    gate: Arc<Gate>,
}

impl HeldOps {
    pub fn over(inner: &Arc<LocalMetastore>, op: &'static str, gate: &Arc<Gate>) -> Arc<HeldOps> {
        Arc::new(HeldOps {
            inner: inner.clone(),
            op,
            gate: gate.clone(),
        })
    }
}

impl floe_metastore::Transport for HeldOps {
    fn call<O: floe_metastore::Op>(
        &self,
        op: O,
    ) -> impl std::future::Future<Output = Result<O::Output, floe_metastore::MetaError>> + Send
    {
        let held = std::any::type_name::<O>().ends_with(self.op);
        async move {
            if held {
                self.gate.pass().await;
            }
            self.inner.call(op).await
        }
    }
}

/// Waits (a few seconds at most) until `done` holds.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not within 5 s: {what}");
}

/// One transactional batch of `values` from producer `(id, epoch)`,
/// sequence numbers from `sequence`.
pub fn txn_batch(producer: (i64, i16), sequence: i32, values: &[&str]) -> Bytes {
    use floe_protocol::kafka_protocol::records::*;
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: true,
            control: false,
            partition_leader_epoch: 0,
            producer_id: producer.0,
            producer_epoch: producer.1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: sequence + i as i32,
            timestamp: 1_000,
            delete_horizon: false,
            key: None,
            value: Some(Bytes::from(v.to_string())),
            headers: Default::default(),
        })
        .collect();
    let mut out = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encoded");
    out.freeze()
}

/// A metastore that counts the operations it is asked, by type name.
pub struct Counting {
    inner: LocalMetastore,
    calls: std::sync::Mutex<std::collections::BTreeMap<&'static str, usize>>,
}

impl Counting {
    pub async fn new() -> Arc<Counting> {
        Arc::new(Counting {
            inner: LocalMetastore::in_memory()
                .await
                .expect("in-memory metastore"),
            calls: Default::default(),
        })
    }

    /// How many operations of a type whose name ends with `op` were asked.
    pub fn count(&self, op: &str) -> usize {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(name, _)| name.ends_with(op))
            .map(|(_, n)| n)
            .sum()
    }
}

impl floe_metastore::Transport for Counting {
    fn call<O: floe_metastore::Op>(
        &self,
        op: O,
    ) -> impl std::future::Future<Output = Result<O::Output, floe_metastore::MetaError>> + Send
    {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(std::any::type_name::<O>())
            .or_default() += 1;
        self.inner.call(op)
    }
}

/// Produces `values` (acks=all) to partition 0 of `topic`, which must
/// take them.
pub async fn produce_values(conn: &mut Connection, topic: &str, values: &[&str]) {
    let sent: ProduceResponse = conn
        .call(ApiKey::Produce, 9, &produce(topic, 0, batch(values)))
        .await
        .unwrap();
    assert_eq!(produced(&sent).error_code, 0);
}
