"""Consumer groups with kafka-python and kcat: partitions are shared out, a
member leaving hands its partitions over, committed offsets are resumed."""

import threading
import time

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient

from check import check_partitions
from clients import create_topic, kcat

PARTITIONS = 4


def group_consumer(bootstrap, group):
    return KafkaConsumer(
        "shared", bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=10_000, heartbeat_interval_ms=500,
    )


def wait_for(condition, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_two_members_share_partitions_and_hand_over_on_leave(agent):
    create_topic(agent.bootstrap, "shared", PARTITIONS)
    a = group_consumer(agent.bootstrap, "sharers")
    b = group_consumer(agent.bootstrap, "sharers")
    stop = threading.Event()

    def keep_polling(consumer, sink):
        while not stop.is_set():
            for tp, records in consumer.poll(timeout_ms=200).items():
                sink.extend((tp.partition, r.offset, r.value.decode()) for r in records)
            consumer.commit()

    got_a, got_b = [], []
    threads = [threading.Thread(target=keep_polling, args=(a, got_a)),
               threading.Thread(target=keep_polling, args=(b, got_b))]
    for t in threads:
        t.start()
    try:
        # Both members get a share: the group formed a generation with both.
        assert wait_for(lambda: a.assignment() and b.assignment()), "group never balanced"
        parts_a = {tp.partition for tp in a.assignment()}
        parts_b = {tp.partition for tp in b.assignment()}
        assert parts_a.isdisjoint(parts_b) and parts_a | parts_b == set(range(PARTITIONS))

        p = KafkaProducer(bootstrap_servers=agent.bootstrap, linger_ms=5)
        values = [f"s-{i}" for i in range(4_000)]
        for i, v in enumerate(values):
            p.send("shared", value=v.encode(), partition=i % PARTITIONS)
        p.flush()
        assert wait_for(lambda: len(got_a) + len(got_b) >= len(values))
        check_partitions(got_a + got_b, values)
        assert got_a and got_b, "one member consumed nothing"
    finally:
        stop.set()
        for t in threads:
            t.join()

    # b leaves; a takes over every partition and reads only what is new.
    b.close()
    more = [f"s-{i}" for i in range(4_000, 4_400)]
    p = KafkaProducer(bootstrap_servers=agent.bootstrap, linger_ms=5)
    for i, v in enumerate(more):
        p.send("shared", value=v.encode(), partition=i % PARTITIONS)
    p.flush()
    late = []
    assert wait_for(lambda: late.extend(
        (tp.partition, r.offset, r.value.decode())
        for tp, rs in a.poll(timeout_ms=200).items() for r in rs) or len(late) >= len(more))
    assert sorted(v for _, _, v in late) == sorted(more)
    assert {tp.partition for tp in a.assignment()} == set(range(PARTITIONS))
    a.commit()
    a.close()

    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    offsets = admin.list_group_offsets("sharers")["sharers"]  # OffsetFetch v8, the batched form
    admin.close()
    # Committed offsets (OffsetFetch through the admin client) cover every record.
    assert sum(o.offset for o in offsets.values()) == len(values) + len(more)
    assert {tp.partition for tp in offsets} == set(range(PARTITIONS))


def test_kcat_balanced_consumer_resumes_from_committed_offsets(agent):
    kcat("-P", "-b", agent.bootstrap, "-t", "kg", input="".join(f"kg-{i}\n" for i in range(500)))
    first = kcat("-b", agent.bootstrap, "-G", "kcat-group", "kg", "-e", "-q",
                 "-X", "auto.offset.reset=earliest", "-f", "%s\n").split()
    assert first == [f"kg-{i}" for i in range(500)]
    kcat("-P", "-b", agent.bootstrap, "-t", "kg", input="kg-500\n")
    second = kcat("-b", agent.bootstrap, "-G", "kcat-group", "kg", "-e", "-q",
                  "-X", "auto.offset.reset=earliest", "-f", "%s\n").split()
    assert second == ["kg-500"]


def test_commit_metadata_over_the_limit_is_refused(agent):
    """Kafka's offset.metadata.max.bytes (4096): longer commit metadata is
    answered OFFSET_METADATA_TOO_LARGE and not stored; the rest commits."""
    from kafka import TopicPartition
    from kafka.errors import OffsetMetadataTooLargeError
    from kafka.structs import OffsetAndMetadata

    create_topic(agent.bootstrap, "annotated", 1)
    consumer = KafkaConsumer(bootstrap_servers=agent.bootstrap, group_id="annotators",
                             enable_auto_commit=False)
    tp = TopicPartition("annotated", 0)
    try:
        consumer.commit({tp: OffsetAndMetadata(5, "m" * 4096, -1)})
        assert consumer.committed(tp, metadata=True).metadata == "m" * 4096
        try:
            consumer.commit({tp: OffsetAndMetadata(9, "m" * 4097, -1)})
            raise AssertionError("metadata over the limit was accepted")
        except OffsetMetadataTooLargeError:
            pass
        assert consumer.committed(tp) == 5, "the refused commit changed nothing"
    finally:
        consumer.close()
