"""Admin APIs that describe partitions, through kafka-python's admin client:
DescribeTopicPartitions (KIP-966) page by page, DescribeLogDirs (the bytes
each partition holds in the object store), DescribeProducers (idempotent
producers' state); and `compression.type`, which makes the agent store a
producer's batches in the topic's codec (seen in the bytes held)."""

import time

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import NotLeaderForPartitionError, UnknownTopicOrPartitionError

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUEST = 42


def admin_for(agent):
    return KafkaAdminClient(bootstrap_servers=agent.bootstrap, request_timeout_ms=30000)


def test_topic_partitions_come_a_page_at_a_time(agent):
    admin = admin_for(agent)
    admin.create_topics([NewTopic("b-topic", 2, 1), NewTopic("a-topic", 3, 1)])

    first = admin.describe_topic_partitions(["b-topic", "a-topic"], response_partition_limit=4)
    pages = [[(t["name"], [p["partition_index"] for p in t["partitions"]])
              for t in first["topics"]]]
    # In name order, four partitions, and where the next page starts.
    assert pages[0] == [("a-topic", [0, 1, 2]), ("b-topic", [0])]
    assert first["next_cursor"] == {"topic_name": "b-topic", "partition_index": 1}
    second = admin.describe_topic_partitions(["a-topic", "b-topic"], response_partition_limit=4,
                                             cursor=first["next_cursor"])
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in second["topics"]] == [("b-topic", [1])]
    assert second["next_cursor"] is None

    a = first["topics"][0]
    assert a["error_code"] == 0 and a["topic_authorized_operations"] > 0
    leader = a["partitions"][0]["leader_id"]
    assert a["partitions"][0]["replica_nodes"] == [leader] == a["partitions"][0]["isr_nodes"]

    # A page ending exactly at a topic's end points at the next topic.
    exact = admin.describe_topic_partitions(["a-topic", "b-topic"], response_partition_limit=3)
    assert [t["name"] for t in exact["topics"]] == ["a-topic"]
    assert exact["next_cursor"] == {"topic_name": "b-topic", "partition_index": 0}

    # A limit of 0 still answers a partition (a client paging on moves on);
    # a name asked twice is answered once.
    one = admin.describe_topic_partitions(["a-topic", "a-topic"], response_partition_limit=0)
    assert [(t["name"], len(t["partitions"])) for t in one["topics"]] == [("a-topic", 1)]
    assert one["next_cursor"] == {"topic_name": "a-topic", "partition_index": 1}
    # A cursor past a topic's partitions: nothing of it, on to the next.
    past = admin.describe_topic_partitions(
        ["a-topic", "b-topic"], cursor={"topic_name": "a-topic", "partition_index": 9})
    assert [(t["name"], len(t["partitions"])) for t in past["topics"]] == [
        ("a-topic", 0), ("b-topic", 2)]
    # No names: every topic, in name order.
    every = admin.describe_topic_partitions([])
    assert [t["name"] for t in every["topics"]] == ["a-topic", "b-topic"]
    # Listing all from a cursor whose topic is gone (deleted between pages):
    # on from the next name, from its first partition.
    gone = admin.describe_topic_partitions(
        [], cursor={"topic_name": "aa-gone", "partition_index": 1})
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in gone["topics"]] == [("b-topic", [0, 1])]

    missing = admin.describe_topic_partitions(["nowhere", "bad/name"])
    assert sorted((t["name"], t["error_code"]) for t in missing["topics"]) == [
        ("bad/name", INVALID_TOPIC_EXCEPTION), ("nowhere", UNKNOWN_TOPIC_OR_PARTITION)]
    # The cursor's topic must be one of those asked for, as Kafka requires.
    wrong = admin.describe_topic_partitions(
        ["a-topic"], cursor={"topic_name": "b-topic", "partition_index": 0})
    assert [t["error_code"] for t in wrong["topics"]] == [INVALID_REQUEST]
    admin.close()


def produce(agent, topic, values, **config):
    p = Producer({"bootstrap.servers": agent.bootstrap, **config})
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0


def test_log_dirs_show_bytes_held_and_the_topics_codec_applies(agent):
    admin = admin_for(agent)
    admin.create_topics([
        NewTopic("as-sent", 1, 1),
        NewTopic("squeezed", 1, 1, topic_configs={"compression.type": "zstd"}),
    ])
    values = [bytes([65 + i % 26]) * 1000 for i in range(200)]
    for topic in ("as-sent", "squeezed"):
        produce(agent, topic, values, **{"compression.type": "none", "linger.ms": 50})

    sizes = {}
    (broker,) = admin.describe_log_dirs()
    (log_dir,) = broker["log_dirs"]
    assert log_dir["log_dir"].startswith("file://") and "?" not in log_dir["log_dir"]
    assert log_dir["total_bytes"] == -1 and log_dir["usable_bytes"] == -1
    for topic in log_dir["topics"]:
        for p in topic["partitions"]:
            sizes[(topic["name"], p["partition_index"])] = p["partition_size"]
    # Sent uncompressed: at least the values. Stored as zstd: a fraction.
    assert sizes[("as-sent", 0)] >= 200 * 1000, sizes
    assert sizes[("squeezed", 0)] < sizes[("as-sent", 0)] / 5, sizes

    # Asked for one topic: only it.
    (only,) = admin.describe_log_dirs(topic_partitions={"squeezed": [0, 7]})
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in only["log_dirs"][0]["topics"]] == [("squeezed", [0])]

    # Recompressed, the records are what was sent.
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "reader",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["squeezed"])
    got = []
    deadline = time.time() + 30
    while len(got) < len(values) and time.time() < deadline:
        m = c.poll(1)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == values
    admin.close()


def test_compression_levels_apply_when_the_agent_recompresses(agent):
    """KIP-390: a topic's `compression.<codec>.level` is the level batches
    get when the agent recompresses them to the topic's codec."""
    admin = admin_for(agent)
    levels = {"zstd": (1, 19), "gzip": (1, 9), "lz4": (1, 12)}
    admin.create_topics([
        NewTopic(f"{codec}-{level}", 1, 1, topic_configs={
            "compression.type": codec, f"compression.{codec}.level": str(level)})
        for codec, pair in levels.items() for level in pair
    ])
    # Text-like values, compressible but not trivially.
    values = [(" ".join(f"w{(i * 7919 + j * 104729) % 3001}" for j in range(120))).encode()
              for i in range(300)]
    for codec, pair in levels.items():
        for level in pair:
            produce(agent, f"{codec}-{level}", values, **{"compression.type": "none", "linger.ms": 50})
    (broker,) = admin.describe_log_dirs()
    sizes = {t["name"]: t["partitions"][0]["partition_size"] for t in broker["log_dirs"][0]["topics"]}
    print(sizes)
    for codec, (fast, best) in levels.items():
        assert sizes[f"{codec}-{best}"] < sizes[f"{codec}-{fast}"], sizes
    for codec, pair in levels.items():
        for level in pair:
            c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "levels",
                          "auto.offset.reset": "earliest"})
            c.subscribe([f"{codec}-{level}"])
            got, deadline = [], time.time() + 30
            while len(got) < len(values) and time.time() < deadline:
                m = c.poll(1)
                if m is not None and m.error() is None:
                    got.append(m.value())
            c.close()
            assert got == values, (codec, level)
    admin.close()


def test_producers_are_described_per_partition(agent):
    admin = admin_for(agent)
    admin.create_topics([NewTopic("tracked", 2, 1)])
    produce(agent, "tracked", [b"x"] * 5, **{"enable.idempotence": True})
    produce(agent, "tracked", [b"y"] * 3)  # not idempotent: no state kept

    states = admin.describe_producers([TopicPartition("tracked", 0), TopicPartition("tracked", 1)])
    (producer,) = states[TopicPartition("tracked", 0)].active_producers
    assert producer.producer_id >= 0 and producer.producer_epoch == 0
    assert producer.last_sequence == 4, producer
    assert abs(producer.last_timestamp - time.time() * 1000) < 60_000, producer
    assert producer.coordinator_epoch == -1 and producer.current_transaction_start_offset == -1
    assert states[TopicPartition("tracked", 1)].active_producers == []
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_producers([TopicPartition("tracked", 5)])
    admin.close()


def test_each_partition_is_in_one_brokers_log_dir(tmp_path, metastore):
    """Every agent can read every partition, but a client is told one agent
    leads them: asked of every broker, as tools do, each partition's bytes
    are reported once."""
    from conftest import Agent
    agents = []
    for n in range(2):
        workdir = tmp_path / f"agent{n}"
        workdir.mkdir()
        agents.append(Agent(workdir, "--metastore", metastore.address,
                            "--object-store", f"file://{tmp_path / 'objects'}").start())
    try:
        admin = admin_for(agents[0])
        admin.create_topics([NewTopic("shared", 3, 1)])
        produce(agents[0], "shared", [b"v" * 100] * 30)
        deadline = time.time() + 30
        while True:
            brokers = admin.describe_log_dirs()
            if len(brokers) == 2 or time.time() > deadline:
                break
            time.sleep(0.5)
        assert len(brokers) == 2, brokers
        reporting = [b["broker"] for b in brokers if b["log_dirs"][0]["topics"]]
        (topic,) = admin.describe_topic_partitions(["shared"])["topics"]
        leader = topic["partitions"][0]["leader_id"]
        assert reporting == [leader], (brokers, leader)
        # DescribeProducers asked of the other agent: not its partitions.
        other = next(b["broker"] for b in brokers if b["broker"] != leader)
        with pytest.raises(NotLeaderForPartitionError):
            admin.describe_producers([TopicPartition("shared", 0)], broker_id=other)
        admin.close()
    finally:
        for a in agents:
            a.stop()
