"""Topics with cleanup.policy=compact: the compactor keeps each key's latest
record (and drops tombstones delete.retention.ms after it first kept them,
KIP-534), offsets never move, real consumers read across the gaps compaction
leaves, and records without a key are refused (INVALID_RECORD)."""

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidConfigurationError

from clients import kcat, kcat_consume, python_consume


def keyed_segments(agent):
    return [p for p in (agent.workdir / "objects" / "segment").rglob("*") if p.is_file() and "keyed-" in p.name]


def confluent_consume(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compacted-reader",
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    rows = []
    try:
        while True:
            m = c.poll(10)
            assert m is not None, "no end of partition within 10s"
            if m.error():
                assert m.error().code() == -191, m.error()  # _PARTITION_EOF
                return rows
            rows.append((m.offset(), m.key().decode(), m.value() and m.value().decode()))
    finally:
        c.close()


def test_compacted_topic_keeps_the_latest_value_of_each_key(make_agent):
    agent = make_agent("--compaction-interval", "500ms", "--compaction-min-extents", "3",
                       "--gc-grace", "0s")
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    try:
        admin.create_topics([NewTopic("keyed", 1, 1, topic_configs={
            "cleanup.policy": "compact", "delete.retention.ms": "0",
            "max.compaction.lag.ms": "1000"})])
        with pytest.raises(InvalidConfigurationError):
            admin.create_topics([NewTopic("bad-policy", 1, 1, topic_configs={"cleanup.policy": "shred"})])
    finally:
        admin.close()

    # Three produce runs: three ingest files, cleaned as they come (the
    # first is all dirty; the others within max.compaction.lag.ms).
    kcat("-P", "-b", agent.bootstrap, "-t", "keyed", "-K", ":", "-z", "zstd",
         input="".join(f"k{i}:v1-{i}\n" for i in range(10)))
    kcat("-P", "-b", agent.bootstrap, "-t", "keyed", "-K", ":",
         input="".join(f"k{i}:v2-{i}\n" for i in range(5)))
    kcat("-P", "-b", agent.bootstrap, "-t", "keyed", "-K", ":", "-Z", "-z", "lz4",
         input="k9:\nk5:v3-5\n")  # -Z: the empty value of k9 is a null (tombstone)

    deadline = time.time() + 60
    while time.time() < deadline and not keyed_segments(agent):
        time.sleep(0.3)
    assert keyed_segments(agent), "no key compaction happened"

    # The first pass keeps k9's tombstone and stamps its delete horizon
    # (delete.retention.ms = 0: now); the pass after drops it.
    expected = {f"k{i}": f"v2-{i}" for i in range(5)}
    expected.update({"k5": "v3-5", "k6": "v1-6", "k7": "v1-7", "k8": "v1-8"})
    def read():
        return kcat("-C", "-b", agent.bootstrap, "-t", "keyed", "-o", "beginning", "-e", "-q",
                    "-f", "%o %k %s\n").splitlines()
    rows = read()
    while time.time() < deadline and len(rows) != len(expected):
        time.sleep(0.3)
        rows = read()
    seen = {}
    offsets = []
    for line in rows:
        offset, key, value = line.split(" ", 2)
        offsets.append(int(offset))
        seen[key] = value
    assert seen == expected
    assert len(rows) == len(expected), "one record per key"
    assert offsets == sorted(offsets) and offsets[-1] == 16, offsets  # offsets kept: gaps, same end

    # librdkafka and kafka-python read across the gaps to the end.
    by_confluent = confluent_consume(agent.bootstrap, "keyed")
    assert {k: v for _, k, v in by_confluent} == expected
    by_python = python_consume(agent.bootstrap, "keyed", 1)
    assert sorted(o for _, o, _ in by_python) == offsets

    # A record without a key is refused on a compacted topic, as by Kafka.
    from confluent_kafka import KafkaError, Producer
    outcome = {}
    p = Producer({"bootstrap.servers": agent.bootstrap, "message.send.max.retries": 0})
    p.produce("keyed", value=b"no key", on_delivery=lambda err, msg: outcome.update(err=err))
    p.flush(30)
    assert outcome["err"] is not None and outcome["err"].code() == KafkaError.INVALID_RECORD

    # New records continue after the high watermark, and survive a restart.
    kcat("-P", "-b", agent.bootstrap, "-t", "keyed", "-K", ":", input="k0:v4-0\n")
    agent.restart()
    rows = kcat_consume(agent.bootstrap, "keyed")
    assert rows[-1] == (0, 17, "v4-0")



def test_segment_ms_and_dirty_ratio_make_compaction_prompt(make_agent):
    """A client that sets segment.ms=100 and min.cleanable.dirty.ratio=0.01
    expects compaction within seconds, not at floe's own schedule (ingest
    files otherwise wait compaction_max_age, five minutes)."""
    agent = make_agent("--compaction-interval", "500ms", "--gc-grace", "0s")
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    try:
        admin.create_topics([NewTopic("prompt", 1, 1, topic_configs={
            "cleanup.policy": "compact", "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01"})])
    finally:
        admin.close()
    kcat("-P", "-b", agent.bootstrap, "-t", "prompt", "-K", ":",
         input="".join(f"k{i}:old-{i}\n" for i in range(10)))
    kcat("-P", "-b", agent.bootstrap, "-t", "prompt", "-K", ":",
         input="".join(f"k{i}:new-{i}\n" for i in range(10)))
    deadline = time.time() + 30
    rows = []
    while time.time() < deadline:
        rows = kcat("-C", "-b", agent.bootstrap, "-t", "prompt", "-o", "beginning", "-e", "-q",
                    "-f", "%k %s\n").splitlines()
        if len(rows) == 10:
            break
        time.sleep(0.5)
    assert sorted(rows) == sorted(f"k{i} new-{i}" for i in range(10)), rows
    assert keyed_segments(agent)


def test_idle_compacted_partitions_cost_a_request_per_pass(peer_agents):
    """Key compaction looks at every compacted partition in a few batched
    metastore requests per pass (PartitionLooksSince, 64 partitions each),
    not three requests for each partition; and an idle partition's look is
    the one kept from the last pass (the metastore sends no extents)."""
    from test_metrics import metric, metric_sum
    (agent,) = peer_agents(1, "--compaction-interval", "500ms")
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    admin.create_topics([NewTopic("wide", 300, 1, topic_configs={"cleanup.policy": "compact"})])
    admin.close()
    kcat("-P", "-b", agent.bootstrap, "-t", "wide", "-K:", input="".join(
        f"k{i}:v{i}\n" for i in range(600)))
    time.sleep(3)  # passes have seen the new topic
    before = agent.admin("/metrics")[1]
    time.sleep(5)
    after = agent.admin("/metrics")[1]

    def asked(op):
        return metric(after, "floe_metastore_requests_total", op=op) - \
            metric(before, "floe_metastore_requests_total", op=op)
    total = metric_sum(after, "floe_metastore_requests_total") - \
        metric_sum(before, "floe_metastore_requests_total")
    looks = asked("PartitionLooksSince")
    per_partition = asked("Offsets") + asked("PlanRead") + asked("FindOffset")

    def counted(name):
        return metric(after, name) - metric(before, name)
    kept = counted("floe_compaction_looks_kept_total")
    sent = counted("floe_compaction_looks_sent_total")
    print(f"5 s of passes over 300 idle compacted partitions: {total:.0f} metastore requests, "
          f"{looks:.0f} PartitionLooksSince, {per_partition:.0f} per-partition reads, "
          f"{kept:.0f} looks kept, {sent:.0f} sent")
    assert per_partition == 0
    assert asked("PartitionLooks") == 0
    # Every pass judged every partition; nothing changed, so from kept looks.
    assert kept >= 300 * 5
    assert sent == 0
    # About 10 passes, 5 looks each (300 partitions in chunks of 64).
    assert 15 <= looks <= 80
    assert total < 1000, "not a request per partition per pass"


def test_only_the_keyless_records_of_a_batch_fail(agent):
    """KIP-467: a batch refused for some of its records lists each of them
    (record_errors), so a client fails only those; librdkafka marks the rest
    of the batch as failed for another record's sake."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    admin.create_topics([NewTopic("kip467", 1, 1, config={"cleanup.policy": "compact"})])[
        "kip467"].result(timeout=30)
    outcome = {}
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 200,
                  "message.send.max.retries": 0})
    for i, key in enumerate([b"k0", None, b"k2", None]):
        p.produce("kip467", key=key, value=f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, _m, i=i: outcome.__setitem__(i, err))
    assert p.flush(30) == 0
    codes = [outcome[i].code() for i in range(4)]
    assert codes == [KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
                     KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD], codes
