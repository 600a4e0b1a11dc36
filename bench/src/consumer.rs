//! One consumer of a subscription: a connection fetching its share of the
//! partitions from where they ended when the run began, measuring each
//! record's end-to-end latency from the send time its value starts with.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Buf, Bytes};
use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use floe_protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use floe_protocol::kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, TopicName,
};
use floe_protocol::kafka_protocol::records::RecordBatchDecoder;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::client;
use crate::stats::{HAND_IN_EVERY, Sample, Stats};

const FETCH_VERSION: i16 = 11;
const LIST_OFFSETS_VERSION: i16 = 2;
/// Kafka's retriable "not yet" answers while a new topic settles.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

pub struct Consumer {
    pub bootstrap: String,
    pub subscription: usize,
    pub partitions: Vec<(TopicName, i32)>,
    pub stats: Arc<Stats>,
    pub stop: Arc<AtomicBool>,
    /// Fetch's `max_wait_ms`: how long the broker may hold a fetch that
    /// finds nothing new.
    pub max_wait: Duration,
}

/// Fetch errors a client retries: leadership moving, a topic settling.
fn retriable(code: i16) -> bool {
    matches!(
        code,
        UNKNOWN_TOPIC_OR_PARTITION | LEADER_NOT_AVAILABLE | NOT_LEADER_OR_FOLLOWER
    )
}

impl Consumer {
    /// Finds where its partitions end, says it is `ready`, then tails them
    /// until told to stop.
    pub async fn run(self, ready: oneshot::Sender<()>) -> anyhow::Result<()> {
        let mut conn = Connection::connect(&self.bootstrap, "floe-bench").await?;
        let mut offsets = self.log_ends(&mut conn).await?;
        let index: HashMap<(&str, i32), usize> = self
            .partitions
            .iter()
            .enumerate()
            .map(|(i, (t, p))| ((t.as_str(), *p), i))
            .collect();
        let _ = ready.send(());
        let mut counted = Sample::default();
        let mut handed_in = Instant::now();
        // Kafka lets only the first batch of a response exceed the limits
        // (KIP-74): starting each fetch at the next partition in turn keeps
        // one large batch from starving the partitions after it.
        let mut first = 0;
        while !self.stop.load(Ordering::Relaxed) {
            let request = self.fetch_request(&offsets, first);
            first = (first + 1) % self.partitions.len();
            let response: FetchResponse = conn.call(ApiKey::Fetch, FETCH_VERSION, &request).await?;
            let mut received = 0;
            let mut settling = false;
            for t in &response.responses {
                for p in &t.partitions {
                    let Some(&i) = index.get(&(t.topic.as_str(), p.partition_index)) else {
                        continue;
                    };
                    if retriable(p.error_code) {
                        settling = true;
                        continue;
                    }
                    if p.error_code != 0 {
                        bail!(
                            "fetch error {} on {}-{}",
                            p.error_code,
                            t.topic.as_str(),
                            p.partition_index
                        );
                    }
                    if let Some(records) = &p.records {
                        received += self.read(records, &mut offsets[i], &mut counted)?;
                    }
                }
            }
            self.stats.received(self.subscription, received);
            if handed_in.elapsed() >= HAND_IN_EVERY {
                self.stats.hand_in(&mut counted);
                handed_in = Instant::now();
            }
            if settling {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.stats.hand_in(&mut counted);
        Ok(())
    }

    /// Each partition's log end offset, waiting out a new topic's settling.
    async fn log_ends(&self, conn: &mut Connection) -> anyhow::Result<Vec<i64>> {
        let mut topics: Vec<ListOffsetsTopic> = Vec::new();
        for (topic, partition) in &self.partitions {
            let p = ListOffsetsPartition::default()
                .with_partition_index(*partition)
                .with_timestamp(-1);
            match topics.iter_mut().find(|t| &t.name == topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(
                    ListOffsetsTopic::default()
                        .with_name(topic.clone())
                        .with_partitions(vec![p]),
                ),
            }
        }
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(topics);
        for _ in 0..50 {
            let response: ListOffsetsResponse = conn
                .call(ApiKey::ListOffsets, LIST_OFFSETS_VERSION, &request)
                .await?;
            let mut offsets = vec![None; self.partitions.len()];
            let mut settling = false;
            for t in &response.topics {
                for p in &t.partitions {
                    match p.error_code {
                        0 => {}
                        code if retriable(code) => settling = true,
                        code => bail!("list offsets error {code} on {}", t.name.as_str()),
                    }
                    if let Some(index) = self
                        .partitions
                        .iter()
                        .position(|(name, i)| name == &t.name && *i == p.partition_index)
                    {
                        offsets[index] = Some(p.offset);
                    }
                }
            }
            if !settling {
                return offsets
                    .into_iter()
                    .collect::<Option<Vec<i64>>>()
                    .context("the broker left partitions out of ListOffsets");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the topics were not ready in 5 s")
    }

    /// A fetch of every partition from its offset, starting at `first`.
    fn fetch_request(&self, offsets: &[i64], first: usize) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        let n = self.partitions.len();
        for i in (first..n).chain(0..first) {
            let ((topic, partition), offset) = (&self.partitions[i], offsets[i]);
            let p = FetchPartition::default()
                .with_partition(*partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(4 * 1024 * 1024);
            // Partitions of a topic in one entry, in turn; a topic met again
            // after the wrap-around gets an entry of its own, as Kafka allows.
            match topics.last_mut().filter(|t| &t.topic == topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(
                    FetchTopic::default()
                        .with_topic(topic.clone())
                        .with_partitions(vec![p]),
                ),
            }
        }
        FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(self.max_wait.as_millis().min(i32::MAX as u128) as i32)
            .with_min_bytes(1)
            .with_max_bytes(32 * 1024 * 1024)
            .with_topics(topics)
    }

    /// Counts the whole batches in `records` from `offset` on and moves it
    /// past them; a batch cut short at the end is fetched again next time.
    /// Returns the records counted.
    fn read(&self, records: &Bytes, offset: &mut i64, sample: &mut Sample) -> anyhow::Result<u64> {
        let mut counted = 0;
        let now = self.stats.now_micros();
        for batch in client::whole_batches(records) {
            let mut buf = batch.clone();
            let set = RecordBatchDecoder::decode(&mut buf)
                .map_err(|e| anyhow::anyhow!("a batch the client cannot read: {e}"))?;
            for record in &set.records {
                if record.offset < *offset {
                    continue; // Kafka may return a batch from before the fetch offset.
                }
                sample.consumed_records += 1;
                counted += 1;
                if let Some(mut value) = record.value.clone()
                    && value.len() >= 8
                {
                    let sent = value.get_u64();
                    sample
                        .end_to_end_latency
                        .saturating_record(now.saturating_sub(sent));
                }
            }
            sample.consumed_bytes += batch.len() as u64;
            *offset = (*offset).max(client::batch_next_offset(&batch));
        }
        Ok(counted)
    }
}
