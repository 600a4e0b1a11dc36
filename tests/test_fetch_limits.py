"""Fetch honours `max_bytes` and `partition_max_bytes` (KIP-74): only the
first batch of the first non-empty partition may exceed them.

Before, each partition contributed at least one whole extent: 8 partitions of
about 900 KB answered a 1 MiB fetch with 6.4 MB, librdkafka refused the
response ("Invalid response size") and retried the same fetch forever."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from clients import create_topic

PARTITIONS = 8
RECORDS = 30
VALUE = 30_000  # 30 records of 30 KB: about 900 KB per partition
MIB = 1024 * 1024


def produce(bootstrap, topic):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 64 * 1024})
    for partition in range(PARTITIONS):
        for n in range(RECORDS):
            p.produce(topic, value=bytes([n]) * VALUE, key=f"{partition}-{n}", partition=partition)
    assert p.flush(60) == 0


def test_a_fetch_never_answers_more_than_it_was_asked(agent):
    create_topic(agent.bootstrap, "big", PARTITIONS)
    produce(agent.bootstrap, "big")
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "limits",
                  "enable.auto.commit": False, "fetch.max.bytes": MIB,
                  "max.partition.fetch.bytes": 256 * 1024,
                  # librdkafka drops (and retries) a response larger than this.
                  "receive.message.max.bytes": MIB + 512})
    c.assign([TopicPartition("big", p, 0) for p in range(PARTITIONS)])
    got = {}
    deadline = time.time() + 90
    while len(got) < PARTITIONS * RECORDS and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert not m.error(), m.error()
        got[(m.partition(), m.offset())] = len(m.value())
    c.close()
    assert len(got) == PARTITIONS * RECORDS, f"consumer stuck at {len(got)} records"
    assert set(got.values()) == {VALUE}
    assert "Invalid response size" not in agent.log()


def test_a_batch_larger_than_the_limits_still_makes_progress(make_agent):
    """KIP-74: the first batch comes back even when it alone exceeds them."""
    agent = make_agent("--message-max-bytes", "4MiB")
    create_topic(agent.bootstrap, "huge", 1)
    p = Producer({"bootstrap.servers": agent.bootstrap, "message.max.bytes": 4 * MIB})
    for n in range(3):
        p.produce("huge", value=bytes([n]) * (2 * MIB), partition=0)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "huge",
                  "enable.auto.commit": False, "fetch.max.bytes": MIB,
                  "max.partition.fetch.bytes": MIB})
    c.assign([TopicPartition("huge", 0, 0)])
    offsets = []
    deadline = time.time() + 60
    while len(offsets) < 3 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            offsets.append(m.offset())
    c.close()
    assert offsets == [0, 1, 2]
