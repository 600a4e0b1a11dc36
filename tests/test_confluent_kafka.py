"""confluent-kafka (a recent librdkafka, 2.16): it fetches with Fetch v16, which
names topics by id as Kafka 4 clients do. Every codec, 100,000 records each."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from check import check_partitions
from clients import CODECS

RECORDS = 100_000
PARTITIONS = 3


def consume_all(bootstrap, topic, partitions, expected):
    # Assigned partitions: no consumer-group coordination is involved.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    rows = []
    idle = 0
    while len(rows) < expected and idle < 20:
        batch = c.consume(num_messages=10_000, timeout=0.5)
        idle = 0 if batch else idle + 1
        for m in batch:
            assert m.error() is None, m.error()
            rows.append((m.partition(), m.offset(), m.value().decode()))
    c.close()
    return rows


def test_all_codecs_round_trip(agent):
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    topics = [f"ck-{codec}" for codec in CODECS]
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result(timeout=30)
    for codec, topic in zip(CODECS, topics):
        errors = []
        p = Producer({"bootstrap.servers": agent.bootstrap, "compression.codec": codec,
                      "linger.ms": 20, "acks": "all"})
        values = [f"{codec}-{i}" for i in range(RECORDS)]
        for i, v in enumerate(values):
            while True:
                try:
                    p.produce(topic, value=v.encode(), partition=i % PARTITIONS,
                              on_delivery=lambda err, _m: err and errors.append(err))
                    break
                except BufferError:
                    p.poll(0.1)
        assert p.flush(60) == 0
        assert not errors, errors[:3]
        check_partitions(consume_all(agent.bootstrap, topic, PARTITIONS, RECORDS), values)

    # Latest offsets through ListOffsets.
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "unused"})
    for topic in topics:
        marks = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(PARTITIONS)]
        assert {low for low, _ in marks} == {0}
        assert sum(high for _, high in marks) == RECORDS
    c.close()


def test_list_offsets_by_spec(agent):
    """AdminClient.list_offsets: earliest, latest, by timestamp and max
    timestamp (KIP-734), the last found inside a compressed batch."""
    import time
    from confluent_kafka.admin import OffsetSpec

    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    admin.create_topics([NewTopic("when", 1, 1)])["when"].result(timeout=30)
    now = int(time.time() * 1000)
    # Offsets 0..5; the largest timestamp is at offset 3, inside the second
    # (zstd) batch, and offset 5 has an equal one: the first wins.
    stamps = [now - 5000, now - 4000, now - 3000, now - 500, now - 2000, now - 500]
    for batch, codec in (((0, 3), "none"), ((3, 6), "zstd")):
        p = Producer({"bootstrap.servers": agent.bootstrap, "compression.codec": codec, "linger.ms": 50})
        for i in range(*batch):
            p.produce("when", value=f"w-{i}", partition=0, timestamp=stamps[i])
        assert p.flush(30) == 0

    tp = TopicPartition("when", 0)

    def ask(spec):
        result = admin.list_offsets({tp: spec})[tp].result(timeout=30)
        return result.offset, result.timestamp

    assert ask(OffsetSpec.earliest())[0] == 0
    assert ask(OffsetSpec.latest())[0] == 6
    assert ask(OffsetSpec.for_timestamp(now - 3500)) == (2, now - 3000)
    assert ask(OffsetSpec.max_timestamp()) == (3, now - 500)
    # An empty partition has no record with a largest timestamp.
    admin.create_topics([NewTopic("when-empty", 1, 1)])["when-empty"].result(timeout=30)
    empty = TopicPartition("when-empty", 0)
    assert admin.list_offsets({empty: OffsetSpec.max_timestamp()})[empty].result(timeout=30).offset == -1


def requests_of(agent, api):
    """How many requests of `api` the agent has served."""
    _, metrics = agent.admin("/metrics")
    for line in metrics.splitlines():
        if line.startswith(f'floe_kafka_requests_total{{api="{api}"}}'):
            return int(float(line.split()[-1]))
    return 0


def test_a_position_with_a_leader_epoch_is_validated(agent):
    """KIP-320: assigned a position with the leader epoch it was read at,
    librdkafka checks it with OffsetForLeaderEpoch before fetching; floe's
    partitions have one epoch, so the position stands and reading goes on."""
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    admin.create_topics([NewTopic("epochs", 1, 1)])["epochs"].result(30)
    p = Producer({"bootstrap.servers": agent.bootstrap})
    for i in range(10):
        p.produce("epochs", value=str(i).encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "epochs",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("epochs", 0, 5, leader_epoch=0)])
    got = []
    deadline = time.time() + 30
    while time.time() < deadline and len(got) < 5:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.offset())
    c.close()
    assert got == [5, 6, 7, 8, 9]
    assert requests_of(agent, "OffsetForLeaderEpoch") >= 1
