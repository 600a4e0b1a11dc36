"""kafka-python: every codec, offsets by timestamp, long-polling fetches,
topic admin errors."""

import threading
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from check import check_partitions
from clients import CODECS, create_topic, kcat_consume, python_consume

RECORDS = 100_000
PARTITIONS = 3


def producer(bootstrap, **kw):
    # kafka-python 3 is idempotent by default: InitProducerId and sequence checks.
    return KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **kw)


def test_all_codecs_round_trip(agent):
    for codec in CODECS:
        topic = f"py-{codec}"
        create_topic(agent.bootstrap, topic, PARTITIONS)
        p = producer(agent.bootstrap, compression_type=None if codec == "none" else codec,
                     batch_size=256 * 1024)
        values = [f"{codec}-{i}" for i in range(RECORDS)]
        futures = [p.send(topic, value=v.encode(), partition=i % PARTITIONS) for i, v in enumerate(values)]
        p.flush()
        acked = [f.get(timeout=60) for f in futures]
        p.close()
        # Acknowledged offsets are exactly 0..n-1 per partition.
        for part in range(PARTITIONS):
            offsets = sorted(m.offset for m in acked if m.partition == part)
            assert offsets == list(range(len(offsets)))
        check_partitions(python_consume(agent.bootstrap, topic, PARTITIONS), values)
        # And librdkafka reads what kafka-python wrote.
        check_partitions(kcat_consume(agent.bootstrap, topic), values)


def test_non_idempotent_producer(agent):
    p = producer(agent.bootstrap, enable_idempotence=False, acks=1)
    metas = [p.send("plain", value=f"p-{i}".encode()).get(timeout=30) for i in range(3)]
    p.close()
    assert [m.offset for m in metas] == [0, 1, 2]


def test_offsets_for_times(agent):
    topic = "times"
    create_topic(agent.bootstrap, topic, 1)
    p = producer(agent.bootstrap)
    for i in range(10):
        # Two flushes, so the answer must come from the right one of several extents.
        p.send(topic, value=f"v-{i}".encode(), timestamp_ms=1_000 * (i + 1))
        if i == 4:
            p.flush()
    p.flush()
    p.close()
    c = KafkaConsumer(bootstrap_servers=agent.bootstrap)
    tp = TopicPartition(topic, 0)
    got = c.offsets_for_times({tp: 1_500})[tp]
    assert (got.offset, got.timestamp) == (1, 2_000)
    got = c.offsets_for_times({tp: 7_000})[tp]
    assert (got.offset, got.timestamp) == (6, 7_000)
    assert c.offsets_for_times({tp: 99_000})[tp] is None
    assert c.beginning_offsets([tp])[tp] == 0
    assert c.end_offsets([tp])[tp] == 10
    c.close()


def test_empty_fetch_is_woken_by_new_data(agent):
    topic = "tail"
    create_topic(agent.bootstrap, topic, 1)
    max_wait_ms = 20_000
    c = KafkaConsumer(bootstrap_servers=agent.bootstrap, fetch_max_wait_ms=max_wait_ms,
                      request_timeout_ms=max_wait_ms + 10_000)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    c.poll(timeout_ms=500)  # the first, empty fetch is now parked in the agent

    def produce_later():
        time.sleep(1)
        p = producer(agent.bootstrap)
        p.send(topic, value=b"wake-0").get(timeout=30)
        p.close()

    threading.Thread(target=produce_later).start()
    started = time.time()
    records = []
    while not records and time.time() - started < max_wait_ms / 1000 * 2:
        records = c.poll(timeout_ms=max_wait_ms).get(tp, [])
    waited = time.time() - started
    c.close()
    assert [r.value for r in records] == [b"wake-0"]
    # Woken by the commit, not by max_wait expiring.
    assert waited < max_wait_ms / 1000 / 2, f"took {waited:.1f}s"


def test_topic_admin(agent):
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    admin.create_topics([NewTopic("admin-t", 2, 1)])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("admin-t", 2, 1)])
    assert "admin-t" in admin.list_topics()
    admin.delete_topics(["admin-t"])
    assert "admin-t" not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["admin-t"])
    admin.close()
