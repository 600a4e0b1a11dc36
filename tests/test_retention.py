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


def test_list_offsets_by_timestamp_never_answers_below_the_log_start(agent):
    """DeleteRecords can move the log start into the middle of a stored
    extent; ListOffsets by timestamp used to answer the cut-off records."""
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition as Tp
    from confluent_kafka.admin import AdminClient, OffsetSpec
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 100})
    # One batch, one extent: timestamps 1000..1009, the largest at offset 2.
    for n in range(10):
        p.produce("cut", value=str(n).encode(), partition=0,
                  timestamp=5_000 if n == 2 else 1_000 + n)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    tp = Tp("cut", 0)
    admin.delete_records([Tp("cut", 0, 4)])[tp].result(timeout=30)
    answers = {}
    for name, spec in [("ts0", OffsetSpec.for_timestamp(0)), ("ts1002", OffsetSpec.for_timestamp(1_002)),
                       ("ts1007", OffsetSpec.for_timestamp(1_007)), ("max", OffsetSpec.max_timestamp()),
                       ("late", OffsetSpec.for_timestamp(6_000))]:
        answers[name] = admin.list_offsets({tp: spec})[tp].result(timeout=30).offset
    # Offset 2 carries timestamp 5000 but lies below the log start (4): the
    # first record still readable reaching 1002 is offset 4; the largest
    # timestamp still readable is 1009 at offset 9.
    assert answers == {"ts0": 4, "ts1002": 4, "ts1007": 7, "max": 9, "late": -1}, answers
