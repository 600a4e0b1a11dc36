"""The per-topic checks Kafka makes on produced batches: max.message.bytes
(and the broker's message.max.bytes), message.timestamp.type=LogAppendTime,
and the timestamp window (message.timestamp.difference/before/after.max.ms)."""

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME


def create(bootstrap, name, **configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=1, replication_factor=1,
                     config={k.replace("_", "."): str(v) for k, v in configs.items()})
    admin.create_topics([topic])[name].result(timeout=30)
    return admin


def produce_one(bootstrap, topic, value, timestamp=0):
    """-> the delivery error code (None when delivered) and the message."""
    outcome = {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.max.bytes": 10_000_000,
                  "message.send.max.retries": 0, "message.timeout.ms": 10_000})
    p.produce(topic, value=value, timestamp=timestamp,
              on_delivery=lambda err, msg: outcome.update(err=err, msg=msg))
    p.flush(30)
    err = outcome["err"]
    return (err.code() if err else None), outcome["msg"]


def test_batches_larger_than_the_limits_are_refused(agent):
    create(agent.bootstrap, "small-messages", max_message_bytes=2000)
    assert produce_one(agent.bootstrap, "small-messages", b"x" * 100)[0] is None
    assert produce_one(agent.bootstrap, "small-messages", b"x" * 5000)[0] == KafkaError.MSG_SIZE_TOO_LARGE
    # The broker's message.max.bytes (1 MiB by default) bounds other topics.
    create(agent.bootstrap, "default-limit")
    assert produce_one(agent.bootstrap, "default-limit", b"y" * 2_000_000)[0] == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce_one(agent.bootstrap, "default-limit", b"y" * 500_000)[0] is None
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    described = admin.describe_configs([ConfigResource("topic", "default-limit")])
    configs = list(described.values())[0].result(timeout=30)
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["message.timestamp.type"].value == "CreateTime"


def test_log_append_time_topics_carry_the_brokers_time(agent):
    create(agent.bootstrap, "appended", message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    err, msg = produce_one(agent.bootstrap, "appended", b"stamped", timestamp=1_000)
    after = int(time.time() * 1000)
    assert err is None
    # The produce response's log_append_time_ms reaches librdkafka's report.
    kind, ts = msg.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before - 1000 <= ts <= after + 1000, (kind, ts)
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "appended", "enable.auto.commit": False})
    c.assign([TopicPartition("appended", 0, 0)])
    deadline = time.time() + 30
    got = None
    while got is None and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got = m
    c.close()
    assert got is not None and got.value() == b"stamped"
    kind, ts = got.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before - 1000 <= ts <= after + 1000, (kind, ts)


def test_timestamps_outside_the_window_are_invalid(agent):
    create(agent.bootstrap, "recent-only", message_timestamp_difference_max_ms=60_000)
    now = int(time.time() * 1000)
    assert produce_one(agent.bootstrap, "recent-only", b"ok", timestamp=now)[0] is None
    assert produce_one(agent.bootstrap, "recent-only", b"old", timestamp=1_000)[0] == KafkaError.INVALID_TIMESTAMP
    assert produce_one(agent.bootstrap, "recent-only", b"future",
                       timestamp=now + 3_600_000)[0] == KafkaError.INVALID_TIMESTAMP
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    with pytest.raises(Exception):
        create(agent.bootstrap, "bad-type", message_timestamp_type="WallClock")
