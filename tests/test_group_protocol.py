"""Consumer groups as Kafka runs them (the classic protocol), judged by
librdkafka (confluent-kafka) and kafka-python's admin client: members share a
topic and hand partitions over when one leaves or is killed, offsets outlive
an agent restart, cooperative-sticky members rebalance incrementally, static
members restart without a rebalance, a commit in the revoke callback is
never lost, one group spans agents, and groups and offsets are deleted as
Kafka deletes them."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, MemberToRemove

PARTITIONS = 12


def make_topic(bootstrap, name, partitions=PARTITIONS):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap, topic, values, partitions=PARTITIONS):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % partitions)
    assert p.flush(30) == 0


def wait_for(condition, seconds=60, why="condition"):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {why}")


def settings(bootstrap, group, **extra):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return conf


class Member:
    """A consumer polling in its own thread: what it holds, what it read,
    how many times it was assigned or revoked."""

    def __init__(self, conf, topic, commit_on_revoke=False):
        self.consumer = Consumer(conf)
        self.topic = topic
        self.commit_on_revoke = commit_on_revoke
        self.held = set()
        self.read = []
        self.assigns = 0
        self.revokes = 0
        self.errors = []
        self.events = []  # (time, what, [(partition, offset)]) for a failure's story
        self.stop = threading.Event()
        self.closed = threading.Event()
        self.leave = True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def on_assign(self, consumer, partitions):
        self.assigns += 1
        self.events.append((time.time(), "assign", [(tp.partition, tp.offset) for tp in partitions]))

    def on_revoke(self, consumer, partitions):
        self.revokes += 1
        if self.commit_on_revoke and partitions:
            # The last commit of the old generation: what was processed.
            try:
                # A partition revoked before anything was fetched from it
                # has no position: nothing processed, nothing to commit.
                positions = [tp for tp in consumer.position(partitions) if tp.offset >= 0]
                self.events.append((time.time(), "revoke, committing",
                                    [(tp.partition, tp.offset) for tp in positions]))
                if positions:
                    consumer.commit(offsets=positions, asynchronous=False)
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.errors.append(f"commit in revoke: {e}")

    def run(self):
        self.consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        while not self.stop.is_set():
            msg = self.consumer.poll(0.1)
            self.held = {tp.partition for tp in self.consumer.assignment()}
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
                continue
            self.read.append((msg.partition(), msg.offset(), msg.value().decode()))
            self.consumer.commit(message=msg, asynchronous=True)
        if self.leave:
            self.consumer.close()
        self.closed.set()

    def close(self):
        self.stop.set()
        self.closed.wait(30)


def disjoint_cover(*members, of=PARTITIONS):
    held = [m.held for m in members]
    union = set().union(*held)
    return union == set(range(of)) and sum(len(h) for h in held) == of and all(held)


# A member in another process, to be killed with SIGKILL.
KILLABLE = textwrap.dedent("""
    import json, sys
    from confluent_kafka import Consumer
    c = Consumer(json.loads(sys.argv[1]))
    c.subscribe([sys.argv[2]])
    held = None
    while True:
        c.poll(0.1)
        now = sorted(tp.partition for tp in c.assignment())
        if now != held:
            held = now
            print(json.dumps(held), flush=True)
""")


class Killable:
    def __init__(self, conf, topic):
        self.proc = subprocess.Popen([sys.executable, "-c", KILLABLE, json.dumps(conf), topic],
                                     stdout=subprocess.PIPE, text=True)
        self.held = set()
        threading.Thread(target=self.follow, daemon=True).start()

    def follow(self):
        for line in self.proc.stdout:
            self.held = set(json.loads(line))

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def test_members_share_and_hand_over_on_leave_and_on_kill(agent):
    share_and_hand_over(agent, settings(agent.bootstrap, "sharers"), "shared12")


def share_and_hand_over(agent, conf, topic):
    """Three members share 12 partitions; one leaves, one is killed with
    SIGKILL: the last takes everything and reads every record."""
    make_topic(agent.bootstrap, topic)
    a, b = Member(conf, topic), Member(conf, topic)
    c = Killable(conf, topic)
    try:
        # Shared evenly once the rebalance settles (the consumer protocol
        # moves partitions one owner at a time: uneven shares on the way).
        wait_for(lambda: disjoint_cover(a, b, c) and {len(m.held) for m in (a, b, c)} == {4},
                 why="three members sharing 12 partitions, four each")
        a.close()
        wait_for(lambda: disjoint_cover(b, c), why="a's partitions to move on leave")
        c.kill()
        # Killed: nothing said goodbye; its partitions move after its session.
        killed = time.time()
        wait_for(lambda: b.held == set(range(PARTITIONS)), why="c's partitions after its session")
        assert time.time() - killed >= 3, "moved before the session could have ended"
        values = [f"v{i}" for i in range(600)]
        produce(agent.bootstrap, topic, values)
        wait_for(lambda: {v for _, _, v in a.read + b.read} >= set(values), why="every record read")
        assert not b.errors, b.errors
    finally:
        for m in (a, b):
            m.close()
        c.kill()


def test_committed_offsets_survive_an_agent_restart(agent):
    offsets_survive_a_restart(agent, lambda: settings(agent.bootstrap, "keepers"), "kept")


def offsets_survive_a_restart(agent, conf, topic):
    """A member reads and commits 300 records; after an agent restart the
    group resumes exactly after them."""
    make_topic(agent.bootstrap, topic, 3)
    produce(agent.bootstrap, topic, [f"k{i}" for i in range(300)], partitions=3)
    m = Member(conf(), topic)
    wait_for(lambda: len(m.read) >= 300, why="the first 300 records")
    time.sleep(1)
    m.close()
    assert not m.errors, m.errors
    agent.restart()
    produce(agent.bootstrap, topic, [f"k{i}" for i in range(300, 330)], partitions=3)
    again = Member(conf(), topic)
    try:
        wait_for(lambda: len(again.read) >= 30, why="the records after the restart")
        time.sleep(1)
        assert sorted(v for _, _, v in again.read) == sorted(f"k{i}" for i in range(300, 330))
    finally:
        again.close()


def test_cooperative_sticky_members_rebalance_incrementally(agent):
    make_topic(agent.bootstrap, "sticky12")
    conf = settings(agent.bootstrap, "stickers", partition_assignment_strategy="cooperative-sticky")
    a = Member(conf, "sticky12")
    members = [a]
    try:
        wait_for(lambda: a.held == set(range(PARTITIONS)), why="a alone holding everything")
        b = Member(conf, "sticky12")
        members.append(b)
        wait_for(lambda: disjoint_cover(a, b), why="a and b sharing")
        # Incremental: a kept what it was not asked to give up.
        kept_by_a = set(a.held)
        c = Member(conf, "sticky12")
        members.append(c)
        wait_for(lambda: disjoint_cover(a, b, c), why="three sharing")
        assert len(a.held & kept_by_a) >= 4, (a.held, kept_by_a)
        b.close()
        members.remove(b)
        wait_for(lambda: disjoint_cover(a, c), why="b's partitions moving to a and c")
        assert not a.errors and not c.errors, a.errors + c.errors
    finally:
        for m in members:
            m.close()


def test_a_static_member_restarts_without_a_rebalance(agent):
    make_topic(agent.bootstrap, "static12")

    def static(instance):
        return Member(settings(agent.bootstrap, "statics", group_instance_id=instance,
                               session_timeout_ms=15000), "static12")

    s1, s2 = static("s1"), static("s2")
    try:
        wait_for(lambda: disjoint_cover(s1, s2), why="two static members sharing")
        held_by_s1 = set(s1.held)
        assigns_of_s2, revokes_of_s2 = s2.assigns, s2.revokes
        # A static member's close sends no LeaveGroup (KIP-345): it stays in
        # the group for its session, and its return is no rebalance.
        s1.close()
        s1 = static("s1")
        wait_for(lambda: s1.held == held_by_s1, seconds=30, why="s1 getting its partitions back")
        time.sleep(2)
        assert (s2.assigns, s2.revokes) == (assigns_of_s2, revokes_of_s2), "s2 saw a rebalance"
        # Removed by instance id (kafka-python's admin: LeaveGroup v3+), the
        # group rebalances at once and s2 takes everything... until s1's
        # next heartbeat finds it fenced and it joins again.
        admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
        admin.remove_group_members("statics", [MemberToRemove(group_instance_id="s1")])
        wait_for(lambda: s2.assigns > assigns_of_s2, why="a rebalance after the removal")
        wait_for(lambda: disjoint_cover(s1, s2), why="s1 back in the group")
        admin.close()
    finally:
        for m in (s1, s2):
            m.close()


def test_a_commit_in_the_revoke_callback_is_never_lost(agent):
    commits_in_revoke_are_never_lost(agent, settings(agent.bootstrap, "handers"))


def commits_in_revoke_are_never_lost(agent, conf):
    """Members that commit what they processed in their revoke callback,
    joined while records flow: no record is processed twice."""
    make_topic(agent.bootstrap, "handover", 4)
    values = [f"h{i}" for i in range(4_000)]
    producing = threading.Thread(
        target=lambda: [produce(agent.bootstrap, "handover", values[i:i + 200], partitions=4)
                        or time.sleep(0.05) for i in range(0, len(values), 200)])
    a = Member(conf, "handover", commit_on_revoke=True)
    members = [a]
    try:
        wait_for(lambda: a.held == {0, 1, 2, 3}, why="a holding everything")
        producing.start()
        time.sleep(0.5)
        # Two newcomers force two rebalances while records flow; every
        # member commits what it processed in its revoke callback.
        for _ in range(2):
            members.append(Member(conf, "handover", commit_on_revoke=True))
            time.sleep(3)
        producing.join()
        each_read_once(members, values)
    finally:
        for m in members:
            m.close()


def test_commits_in_a_row_are_written_together_and_answered_one_by_one(peer_agents):
    """A consumer committing after every record (asynchronously, as
    librdkafka's commit(message, asynchronous=True)) is not held to one
    metastore write per commit: commits queued on its connection are written
    together. Each is still answered on its own (one naming a partition that
    does not exist is refused alone), and the offsets stored are the last
    ones committed, as one after another."""
    from test_metrics import metric

    (agent,) = peer_agents(1, "--compaction-interval", "0s")
    make_topic(agent.bootstrap, "every", 2)
    answers = []
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "every-record",
                  "enable.auto.commit": False,
                  "on_commit": lambda err, parts: answers.append(
                      (err, [(p.partition, p.error) for p in parts]))})
    # The group exists and the connection is up before counting.
    c.commit(offsets=[TopicPartition("every", 0, 0)], asynchronous=False)
    answers.clear()
    before = agent.admin("/metrics")[1]
    count = 1_000
    for i in range(count):
        c.commit(offsets=[TopicPartition("every", i % 2, i)], asynchronous=True)
        if i == count // 2:
            c.commit(offsets=[TopicPartition("every", 7, 1)], asynchronous=True)
    deadline = time.time() + 60
    while len(answers) < count + 1 and time.time() < deadline:
        c.poll(0.1)
    after = agent.admin("/metrics")[1]
    assert len(answers) == count + 1
    refused = [a for a in answers if a[0] is not None or any(e is not None for _, e in a[1])]
    assert len(refused) == 1 and refused[0][1][0][0] == 7, refused[:3]
    committed = c.committed([TopicPartition("every", 0), TopicPartition("every", 1)], timeout=10)
    assert [tp.offset for tp in committed] == [count - 2, count - 1]
    writes = metric(after, "floe_metastore_requests_total", op="CommitOffsets") - \
        metric(before, "floe_metastore_requests_total", op="CommitOffsets")
    print(f"{count + 1} commits, {writes:.0f} metastore writes")
    assert 0 < writes <= count / 4, after
    c.close()


def each_read_once(members, values):
    """Every value is read, none by two members or twice, and no member
    saw an error (with the story of the reads and rebalances if not)."""
    wait_for(lambda: len({v for m in members for _, _, v in m.read}) >= len(values),
             why="every record read")
    time.sleep(1)
    read = [v for m in members for _, _, v in m.read]
    twice = {v for v in read if read.count(v) > 1}
    assert not twice, (f"{len(twice)} records processed twice, e.g. {sorted(twice)[:5]}; "
                       f"errors: {[m.errors for m in members]}; " + story(members, twice))
    assert not any(m.errors for m in members), [m.errors for m in members]


def story(members, twice):
    """Who read the records read twice (first and last offsets), and every
    member's assignments and revocations, in time order."""
    lines = []
    for n, m in enumerate(members):
        rows = [(p, o) for p, o, v in m.read if v in twice]
        if rows:
            lines.append(f"member {n} read them at {rows[0]}..{rows[-1]} ({len(rows)})")
    events = sorted((t, n, what, parts) for n, m in enumerate(members) for t, what, parts in m.events)
    start = events[0][0] if events else 0
    lines += [f"{t - start:7.3f} member {n} {what} {parts}" for t, n, what, parts in events]
    return "\n".join(lines)


def test_one_group_spans_agents(peer_agents):
    first, second = peer_agents(2, "--flush-interval", "20ms")
    one_group_across_agents(first, second, lambda agent: settings(agent.bootstrap, "spread"))


def one_group_across_agents(first, second, conf):
    """Members connected to two agents (sharing a metastore) form one group."""
    make_topic(first.bootstrap, "spread12")
    a = Member(conf(first), "spread12")
    b = Member(conf(second), "spread12")
    try:
        wait_for(lambda: disjoint_cover(a, b) and {len(a.held), len(b.held)} == {6},
                 why="members on two agents sharing, six each")
    finally:
        for m in (a, b):
            m.close()


def test_groups_and_their_offsets_are_deleted_as_kafka_deletes_them(agent):
    make_topic(agent.bootstrap, "deleting", 2)
    make_topic(agent.bootstrap, "other", 2)
    produce(agent.bootstrap, "deleting", [f"d{i}" for i in range(20)], partitions=2)
    # Offsets of a topic its members will not subscribe to, committed while
    # it has none (a commit from outside a group with members is refused).
    c = Consumer(settings(agent.bootstrap, "deleters"))
    c.commit(offsets=[TopicPartition("other", 0, 5)], asynchronous=False)
    c.close()
    m = Member(settings(agent.bootstrap, "deleters"), "deleting")
    wait_for(lambda: len(m.read) >= 20, why="records")
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    deleted = admin.delete_group_offsets(
        "deleters", [KafkaTopicPartition("deleting", 0), KafkaTopicPartition("other", 0)])
    errors = {(tp.topic, tp.partition): str(err) for tp, err in deleted.items()}
    assert "GroupSubscribedToTopic" in errors[("deleting", 0)], errors
    assert "NoError" in errors[("other", 0)], errors
    confluent = AdminClient({"bootstrap.servers": agent.bootstrap})
    refused = confluent.delete_consumer_groups(["deleters"])["deleters"]
    try:
        refused.result(30)
        raise AssertionError("a group with members was deleted")
    except Exception as e:  # noqa: BLE001
        assert "NON_EMPTY_GROUP" in str(e), e
    m.close()
    wait_for(lambda: admin.describe_groups(["deleters"])["deleters"]["group_state"] == "Empty",
             why="the group to empty")
    confluent.delete_consumer_groups(["deleters"])["deleters"].result(30)
    assert "deleters" not in {g["group_id"] for g in admin.list_groups()}
    admin.close()


# librdkafka's admin client aborted once right after a ListConsumerGroups or
# DescribeConsumerGroups answer: run them in a process of their own and
# check it exits cleanly with the answers expected.
ADMIN_CALLS = textwrap.dedent("""
    import sys
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": sys.argv[1]})
    listed = admin.list_consumer_groups().result(30)
    names = sorted(g.group_id for g in listed.valid)
    described = admin.describe_consumer_groups(names)
    for name, future in described.items():
        g = future.result(30)
        print(name, g.state, len(g.members), sorted(m.client_id for m in g.members), flush=True)
""")


def test_librdkafka_admin_lists_and_describes_groups_cleanly(agent):
    make_topic(agent.bootstrap, "described", 2)
    m = Member(settings(agent.bootstrap, "described-group", client_id="describer"), "described")
    try:
        wait_for(lambda: m.held == {0, 1}, why="a member")
        done = subprocess.run([sys.executable, "-c", ADMIN_CALLS, agent.bootstrap],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "described-group ConsumerGroupState.STABLE 1 ['describer']" in done.stdout, done.stdout
    finally:
        m.close()


def exchange(bootstrap, request, response_class, version):
    """One request as kafka-python's protocol classes encode it, on a
    connection of its own; its decoded response."""
    import socket
    import struct

    request.with_header(correlation_id=7, client_id="kip-814")
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request.encode(version=version, header=True, framed=True))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        body = b""
        while len(body) < size:
            chunk = sock.recv(size - len(body))
            assert chunk, "the broker closed the connection"
            body += chunk
    return response_class.decode(body, version=version, header=True)


def join_group_v9(bootstrap, group, instance, member_id=""):
    """One JoinGroup v9 (KIP-814): no client library sends it but Java's."""
    from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse

    request = JoinGroupRequest(
        group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
        member_id=member_id, group_instance_id=instance, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
        reason=None, version=9)
    return exchange(bootstrap, request, JoinGroupResponse, 9)


def test_a_returning_static_leader_is_told_to_skip_the_assignment(agent):
    """KIP-814: a static leader that restarts into a stable group gets the
    members and SkipAssignment (the group keeps its assignment); a static
    follower that restarts gets neither."""
    group = "kip-814"
    leader = join_group_v9(agent.bootstrap, group, "a")
    assert leader.error_code == 0 and leader.leader == leader.member_id
    assert not leader.skip_assignment
    # A second static member joins: a rebalance both must rejoin.
    import threading
    answers = {}
    second = threading.Thread(target=lambda: answers.update(b=join_group_v9(agent.bootstrap, group, "b")))
    second.start()
    # b's join has begun the rebalance before a rejoins it (a rejoin first
    # would be answered with the generation a already has).
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    wait_for(lambda: admin.describe_groups([group])[group]["group_state"] == "PreparingRebalance",
             why="b's join to begin a rebalance")
    admin.close()
    again = join_group_v9(agent.bootstrap, group, "a", member_id=leader.member_id)
    second.join()
    follower = answers["b"]
    assert again.error_code == 0 and follower.error_code == 0, (again, follower)
    assert again.leader == again.member_id and follower.leader == again.member_id
    # The leader syncs an assignment: the group is stable.
    sync_group(agent.bootstrap, group, again)
    # The leader restarts (same instance, no member id): no rebalance; it is
    # told the members and to skip the assignment.
    back = join_group_v9(agent.bootstrap, group, "a")
    assert back.error_code == 0, back
    assert back.member_id != again.member_id and back.leader == back.member_id
    assert back.skip_assignment
    assert sorted(m.group_instance_id for m in back.members) == ["a", "b"]
    assert back.generation_id == again.generation_id, "no rebalance"
    # The follower restarts: the leader named, no members, nothing to skip.
    rejoined = join_group_v9(agent.bootstrap, group, "b")
    assert rejoined.error_code == 0 and rejoined.leader == back.member_id
    assert not rejoined.skip_assignment and not rejoined.members


def sync_group(bootstrap, group, joined):
    """The leader's SyncGroup v5 with an empty assignment for every member."""
    from kafka.protocol.consumer.group import SyncGroupRequest, SyncGroupResponse

    request = SyncGroupRequest(
        group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id="a", protocol_type="consumer", protocol_name="range",
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m.member_id, assignment=b"")
                     for m in joined.members],
        version=5)
    response = exchange(bootstrap, request, SyncGroupResponse, 5)
    assert response.error_code == 0, response
