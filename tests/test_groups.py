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


def test_consumers_started_together_share_the_first_generation(agent):
    """Kafka's group.initial.rebalance.delay.ms (3 s by default): the first
    rebalance of an empty group waits for more members, so two consumers
    started a moment apart are each assigned once, in one generation (no
    member is first handed everything and then made to give half up)."""
    from kafka import ConsumerRebalanceListener

    create_topic(agent.bootstrap, "together", PARTITIONS)

    class Assignments(ConsumerRebalanceListener):
        def __init__(self):
            self.seen = []

        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, assigned):
            self.seen.append({tp.partition for tp in assigned})

    members = []
    for _ in range(2):
        listener = Assignments()
        consumer = KafkaConsumer(bootstrap_servers=agent.bootstrap, group_id="together",
                                 session_timeout_ms=10_000, heartbeat_interval_ms=500)
        consumer.subscribe(["together"], listener=listener)
        members.append((consumer, listener))
    stop = threading.Event()

    def keep_polling(consumer):
        while not stop.is_set():
            consumer.poll(timeout_ms=100)

    threads = [threading.Thread(target=keep_polling, args=(c,)) for c, _ in members]
    for t in threads:
        t.start()
    try:
        assert wait_for(lambda: all(listener.seen for _, listener in members), 30)
        time.sleep(1)  # a second rebalance, had there been one, shows by now
    finally:
        stop.set()
        for t in threads:
            t.join()
    (a, seen_a), (b, seen_b) = [(c, listener.seen) for c, listener in members]
    # A member may sync again and be handed the same partitions (kafka-python's
    # leader rejoins when its metadata snapshot changes after it assigned, and
    # an unchanged follower keeps its generation): what must never happen is
    # an assignment that changes.
    assert all(s == seen_a[0] for s in seen_a) and all(s == seen_b[0] for s in seen_b), (seen_a, seen_b)
    assert seen_a[0].isdisjoint(seen_b[0]) and seen_a[0] | seen_b[0] == set(range(PARTITIONS))
    for c, _ in members:
        c.close()


def test_session_bounds_are_the_agent_s_and_a_closed_static_member_expires(make_agent):
    """group.min/max.session.timeout.ms are broker settings (here 1 s and
    10 s): a session outside them is refused INVALID_SESSION_TIMEOUT, one
    inside is served; a static member that closes (it sends no LeaveGroup)
    is expired at its session timeout, and the group can then be deleted."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import InvalidSessionTimeoutError

    agent = make_agent("--group-min-session-timeout", "1s", "--group-max-session-timeout", "10s",
                       "--group-initial-rebalance-delay", "0s")
    create_topic(agent.bootstrap, "bounded", 2)
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")],
                                       config_filter="all")["broker"]["0"]
    assert {k: described[k]["value"] for k in (
        "group.min.session.timeout.ms", "group.max.session.timeout.ms",
        "group.initial.rebalance.delay.ms")} == {
        "group.min.session.timeout.ms": "1000", "group.max.session.timeout.ms": "10000",
        "group.initial.rebalance.delay.ms": "0"}

    too_long = KafkaConsumer("bounded", bootstrap_servers=agent.bootstrap, group_id="long",
                             session_timeout_ms=11_000, heartbeat_interval_ms=1_000)
    try:
        raised = None
        try:
            for _ in range(40):
                too_long.poll(timeout_ms=200)
        except InvalidSessionTimeoutError as e:
            raised = e
        assert raised is not None, "an 11 s session was accepted"
    finally:
        too_long.close()

    static = KafkaConsumer("bounded", bootstrap_servers=agent.bootstrap, group_id="statics",
                           group_instance_id="only", session_timeout_ms=2_000,
                           heartbeat_interval_ms=300)
    assert wait_for(lambda: static.poll(timeout_ms=100) is not None and static.assignment(), 30)
    static.close()
    closed_at = time.time()
    answers = []
    while time.time() - closed_at < 15:
        answer = admin.delete_groups(["statics"])["statics"]
        answers.append((time.time() - closed_at, answer))
        if answer == "OK":
            break
        time.sleep(0.25)
    admin.close()
    assert answers[0][1] == "NonEmptyGroupError", answers
    deleted_after = answers[-1][0]
    assert answers[-1][1] == "OK", answers
    # Expired at its 2 s session, not before, and not seconds after.
    assert 1.5 <= deleted_after <= 4.5, answers
