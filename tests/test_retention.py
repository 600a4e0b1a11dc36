"""Retention (retention.ms, retention.bytes) and DeleteRecords move a
partition's log start the way Kafka does; consumers see the new earliest."""

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidConfigurationError

from clients import kcat_consume


def earliest(bootstrap, topic):
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, 0)
    offsets = c.beginning_offsets([tp])[tp], c.end_offsets([tp])[tp]
    c.close()
    return offsets


def wait_for(condition, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline and not condition():
        time.sleep(0.3)
    return condition()


def test_retention_by_time_and_delete_records(make_agent):
    agent = make_agent("--compaction-interval", "500ms", "--gc-grace", "0s")
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    admin.create_topics([NewTopic("short", 1, 1, topic_configs={"retention.ms": "8000"}),
                         NewTopic("manual", 1, 1)])
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics([NewTopic("bad", 1, 1, topic_configs={"retention.ms": "soon"})])

    p = KafkaProducer(bootstrap_servers=agent.bootstrap, linger_ms=5)
    hour_ago = int(time.time() * 1000) - 3_600_000
    for i in range(100):  # timestamped an hour ago: past retention.ms...
        p.send("short", value=f"old-{i}".encode(), timestamp_ms=hour_ago)
    for i in range(10):
        p.send("manual", value=f"m-{i}".encode())
    p.flush()
    # ...but, as Kafka keeps the segment it still appends to, data appended
    # less than retention.ms ago stays whatever its timestamps.
    time.sleep(1.5)
    assert earliest(agent.bootstrap, "short") == (0, 100)
    assert wait_for(lambda: earliest(agent.bootstrap, "short") == (100, 100)), earliest(agent.bootstrap, "short")
    for i in range(10):
        p.send("short", value=f"new-{i}".encode())
    p.flush()
    p.close()
    assert earliest(agent.bootstrap, "short") == (100, 110)
    assert [v for _, _, v in kcat_consume(agent.bootstrap, "short")] == [f"new-{i}" for i in range(10)]
    assert "retention moved the log start" in agent.log()

    # DeleteRecords through the admin client.
    result = admin.delete_records({TopicPartition("manual", 0): 4})
    assert [m["low_watermark"] for m in result.values()] == [4]
    assert earliest(agent.bootstrap, "manual") == (4, 10)
    assert [v for _, _, v in kcat_consume(agent.bootstrap, "manual")] == [f"m-{i}" for i in range(4, 10)]
    admin.close()
