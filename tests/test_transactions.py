"""Transactions (KIP-98) with real clients: confluent-kafka's transactional
producer and read_committed consumers, and kafka-python's."""

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

FAST = ("--flush-interval", "20ms")


def create(bootstrap, *topics, partitions=3):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(timeout=30)


def txn_producer(bootstrap, tid, **extra):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                  "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def read(bootstrap, topics, isolation, idle_polls=6, partitions=3):
    """Every record of `topics` from offset 0 (assigned, no group), as
    (topic, partition, value), in each partition's order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(t, p, 0) for t in topics for p in range(partitions)])
    rows, idle = [], 0
    while idle < idle_polls:
        batch = c.consume(num_messages=1000, timeout=0.5)
        idle = 0 if batch else idle + 1
        for m in batch:
            assert m.error() is None, m.error()
            rows.append((m.topic(), m.partition(), m.value().decode()))
    c.close()
    return rows


def send(p, topic, values, partitions=3):
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % partitions)
    assert p.flush(30) == 0


def test_committed_transactions_are_read_and_aborted_ones_are_not(make_agent):
    agent = make_agent(*FAST)
    create(agent.bootstrap, "tx-a", "tx-b")
    p = txn_producer(agent.bootstrap, "t1")
    batches = {}
    for name, commit in [("A", True), ("B", False), ("C", True)]:
        p.begin_transaction()
        values = [f"{name}-{i}" for i in range(60)]
        send(p, "tx-a", values[:30])
        send(p, "tx-b", values[30:])
        batches[name] = values
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    committed = read(agent.bootstrap, ["tx-a", "tx-b"], "read_committed")
    everything = read(agent.bootstrap, ["tx-a", "tx-b"], "read_uncommitted")
    assert sorted(v for _, _, v in committed) == sorted(batches["A"] + batches["C"])
    assert sorted(v for _, _, v in everything) == sorted(batches["A"] + batches["B"] + batches["C"])
    # Per partition, in the order produced.
    for part in range(3):
        seen = [v for t, pt, v in committed if (t, pt) == ("tx-a", part)]
        assert seen == [v for v in batches["A"][:30] + batches["C"][:30]
                        if int(v.split("-")[1]) % 3 == part]
    # Every partition holds one marker per transaction: the high watermark
    # counts them, and both isolation levels agree on it once all ended.
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "unused",
                  "isolation.level": "read_committed"})
    highs = [c.get_watermark_offsets(TopicPartition("tx-a", part), timeout=10)[1] for part in range(3)]
    assert sum(highs) == 90 + 3 * 3
    c.close()


def test_an_open_transaction_holds_read_committed_consumers_at_the_lso(make_agent):
    agent = make_agent(*FAST)
    create(agent.bootstrap, "open", partitions=1)
    plain = Producer({"bootstrap.servers": agent.bootstrap})
    send(plain, "open", ["before"], partitions=1)
    p = txn_producer(agent.bootstrap, "t-open")
    p.begin_transaction()
    send(p, "open", [f"t-{i}" for i in range(10)], partitions=1)
    send(plain, "open", ["after"], partitions=1)

    assert [v for _, _, v in read(agent.bootstrap, ["open"], "read_committed", partitions=1)] == ["before"]
    assert len(read(agent.bootstrap, ["open"], "read_uncommitted", partitions=1)) == 12
    # ListOffsets with read_committed answers the last stable offset.
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "unused",
                  "isolation.level": "read_committed"})
    assert c.get_watermark_offsets(TopicPartition("open", 0), timeout=10)[1] == 1
    u = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "unused",
                  "isolation.level": "read_uncommitted"})
    assert u.get_watermark_offsets(TopicPartition("open", 0), timeout=10)[1] == 12

    # A consumer waiting at the LSO wakes when the transaction commits.
    waiting = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "unused",
                        "isolation.level": "read_committed", "fetch.wait.max.ms": 500})
    waiting.assign([TopicPartition("open", 0, 1)])
    assert waiting.consume(num_messages=100, timeout=1.0) == []
    p.commit_transaction(30)
    got, deadline = [], time.time() + 15
    while len(got) < 11 and time.time() < deadline:
        got += [m.value().decode() for m in waiting.consume(num_messages=100, timeout=0.5)]
    assert got == [f"t-{i}" for i in range(10)] + ["after"]
    assert c.get_watermark_offsets(TopicPartition("open", 0), timeout=10)[1] == 13
    for consumer in (c, u, waiting):
        consumer.close()


def test_a_zombie_producer_is_fenced(make_agent):
    agent = make_agent(*FAST)
    create(agent.bootstrap, "zombie", partitions=1)
    old = txn_producer(agent.bootstrap, "t-zombie")
    old.begin_transaction()
    send(old, "zombie", ["old-1"], partitions=1)
    # A new instance with the same transactional id: the open transaction
    # is aborted and the old instance fenced.
    new = txn_producer(agent.bootstrap, "t-zombie")
    new.begin_transaction()
    send(new, "zombie", ["new-1"], partitions=1)
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as fenced:
        old.produce("zombie", value=b"old-2", partition=0)
        old.flush(10)
        old.commit_transaction(10)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower(), fenced.value
    assert [v for _, _, v in read(agent.bootstrap, ["zombie"], "read_committed", partitions=1)] == ["new-1"]


def test_a_stalled_transaction_is_aborted_by_its_timeout(make_agent):
    agent = make_agent(*FAST)
    create(agent.bootstrap, "stall", partitions=1)
    p = txn_producer(agent.bootstrap, "t-stall", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    send(p, "stall", ["lost-1", "lost-2"], partitions=1)
    plain = Producer({"bootstrap.servers": agent.bootstrap})
    send(plain, "stall", ["later"], partitions=1)
    # It times out at the coordinator's next look after its 2 s (every
    # 10 s, Kafka's default), and the timeout job aborts it within a
    # second; the records behind it become readable, its own never do.
    deadline, rows = time.time() + 20, []
    while time.time() < deadline:
        rows = read(agent.bootstrap, ["stall"], "read_committed", idle_polls=2, partitions=1)
        if rows:
            break
    assert [v for _, _, v in rows] == ["later"]
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_a_transaction_times_out_at_the_coordinator_s_next_look(tmp_path):
    """Kafka's coordinator looks for timed-out transactions every
    transaction.abort.timed.out.transaction.cleanup.interval.ms: a producer
    with a short timeout may commit until that look finds it. With looks an
    hour apart, a commit 3 s into a 1 s timeout is taken; with looks at
    once (0s), it is fenced."""
    from conftest import Agent

    for interval, commits in (("1h", True), ("0s", False)):
        workdir = tmp_path / interval
        workdir.mkdir()
        agent = Agent(workdir, *FAST, "--transaction-abort-check-interval", interval).start()
        topic = f"late-{interval}"
        create(agent.bootstrap, topic, partitions=1)
        p = txn_producer(agent.bootstrap, f"t-late-{interval}", **{"transaction.timeout.ms": 1000})
        p.begin_transaction()
        send(p, topic, ["late"], partitions=1)
        time.sleep(3)
        if commits:
            p.commit_transaction(10)
            assert [v for _, _, v in read(agent.bootstrap, [topic], "read_committed",
                                          partitions=1)] == ["late"]
        else:
            with pytest.raises(KafkaException):
                p.commit_transaction(10)
        agent.stop()


def test_consume_transform_produce_processes_each_record_once(make_agent):
    """KIP-98's loop: read committed input, write output and the input's
    offsets in one transaction. An aborted round leaves neither its output
    nor its offsets, so the next consumer of the group reads its input
    again: the output is the input, each record once."""
    agent = make_agent(*FAST)
    create(agent.bootstrap, "ctp-in", "ctp-out")
    inputs = [f"r-{i}" for i in range(300)]
    send(Producer({"bootstrap.servers": agent.bootstrap}), "ctp-in", inputs)
    p = txn_producer(agent.bootstrap, "t-ctp")

    def run(rounds, abort_round=None):
        c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "ctp",
                      "enable.auto.commit": False, "isolation.level": "read_committed",
                      "auto.offset.reset": "earliest"})
        c.subscribe(["ctp-in"])
        done, idle = 0, 0
        while done < rounds and idle < 10:
            msgs = c.consume(num_messages=40, timeout=1.0)
            if not msgs:
                idle += 1
                continue
            p.begin_transaction()
            for m in msgs:
                assert m.error() is None, m.error()
                p.produce("ctp-out", value=m.value(), partition=m.partition())
            p.send_offsets_to_transaction(c.position(c.assignment()),
                                          c.consumer_group_metadata(), 30)
            if done == abort_round:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
            done += 1
        c.close()
        return done

    # One committed round, one aborted: this consumer stops there (its
    # position is past what it aborted), as an application restarts.
    assert run(2, abort_round=1) == 2
    run(1_000)
    out = read(agent.bootstrap, ["ctp-out"], "read_committed")
    assert sorted(v for _, _, v in out) == sorted(inputs)
    # The group's committed offsets are the input's end.
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "ctp"})
    committed = c.committed([TopicPartition("ctp-in", part) for part in range(3)], timeout=10)
    assert sum(tp.offset for tp in committed) == len(inputs)
    c.close()


def test_kafka_python_commits_and_aborts(make_agent):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTopicPartition

    agent = make_agent(*FAST)
    create(agent.bootstrap, "kp-tx", partitions=1)
    p = KafkaProducer(bootstrap_servers=agent.bootstrap, transactional_id="kp-t1")
    p.init_transactions()
    for name, commit in [("A", True), ("B", False), ("C", True)]:
        p.begin_transaction()
        for i in range(5):
            p.send("kp-tx", value=f"{name}-{i}".encode(), partition=0)
        p.flush()
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()
    p.close()
    c = KafkaConsumer(bootstrap_servers=agent.bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False, consumer_timeout_ms=3000)
    c.assign([KTopicPartition("kp-tx", 0)])
    c.seek_to_beginning()
    values = [m.value.decode() for m in c]
    c.close()
    assert values == [f"A-{i}" for i in range(5)] + [f"C-{i}" for i in range(5)]


def test_transactions_are_described_and_listed(make_agent):
    from kafka.admin import KafkaAdminClient

    agent = make_agent(*FAST)
    create(agent.bootstrap, "desc", partitions=2)
    p = txn_producer(agent.bootstrap, "t-desc")
    p.begin_transaction()
    p.produce("desc", value=b"x", partition=1)
    assert p.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    described = admin.describe_transactions(["t-desc"])["t-desc"]
    text = str(described)
    assert "Ongoing" in text and "desc" in text, text
    listed = admin.list_transactions(state_filters=["Ongoing"])
    assert "t-desc" in str(listed), listed
    p.commit_transaction(30)
    listed = admin.list_transactions(state_filters=["Ongoing"])
    assert "t-desc" not in str(listed), listed
    assert "t-desc" in str(admin.list_transactions(state_filters=["CompleteCommit"]))
    admin.close()


def test_a_transaction_survives_its_agent_across_agents(peer_agents):
    """The coordinator's state is in the metastore: a transaction begun
    through agent A, whose agent is then killed, is fenced and aborted by a
    new producer through agent B, and read_committed consumers of B never
    see its records; B's own transaction commits what A's produced before."""
    a, b = peer_agents(2, *FAST)
    create(a.bootstrap, "across", partitions=2)
    first = txn_producer(a.bootstrap, "t-across")
    first.begin_transaction()
    send(first, "across", ["committed-a"], partitions=2)
    first.commit_transaction(30)
    first.begin_transaction()
    send(first, "across", ["open-a-1", "open-a-2"], partitions=2)
    a.kill()
    second = txn_producer(b.bootstrap, "t-across")
    second.begin_transaction()
    send(second, "across", ["committed-b"], partitions=2)
    second.commit_transaction(30)
    rows = read(b.bootstrap, ["across"], "read_committed", partitions=2)
    assert sorted(v for _, _, v in rows) == ["committed-a", "committed-b"]
    everything = read(b.bootstrap, ["across"], "read_uncommitted", partitions=2)
    assert sorted(v for _, _, v in everything) == ["committed-a", "committed-b", "open-a-1", "open-a-2"]


def test_kafkajs_commits_aborts_and_sends_offsets(make_agent):
    import json
    import pathlib
    import subprocess

    agent = make_agent(*FAST)
    script = pathlib.Path(__file__).resolve().parent / "node" / "transactions.js"
    done = subprocess.run(["node", str(script), agent.bootstrap, "js-tx"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(seen["read"]) == sorted([f"A-{i}" for i in range(4)] + [f"C-{i}" for i in range(4)])
    assert sorted((o["partition"], o["offset"]) for o in seen["offsets"]) == [(0, "7"), (1, "9")]
    # librdkafka agrees: B's records are in the log, and aborted.
    assert len(read(agent.bootstrap, ["js-tx"], "read_uncommitted", partitions=2)) == 12
    assert sorted(v for _, _, v in read(agent.bootstrap, ["js-tx"], "read_committed", partitions=2)) \
        == sorted(seen["read"])
