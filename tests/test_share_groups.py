"""Share groups (KIP-932, queues for Kafka) judged by librdkafka's share
consumer (confluent-kafka's `ShareConsumer`): members of one group share a
topic and each record goes to one member at a time; acknowledgements
accept, release (redelivered) and reject records; a lock that runs out
hands its records to another member; the delivery limit archives a record;
a read_committed group never sees an aborted transaction; a kill -9 of the
agent a member fetches through loses nothing and hands nothing to two
members at once; one group works across agents behind a load balancer; and
`floe groups` shows, resets and deletes a share group's offsets."""

import json
import shutil
import subprocess
import threading
import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from conftest import FLOE, Agent, free_port
from test_group_protocol import make_topic, produce, wait_for


def set_configs(bootstrap, resource_type, name, **configs):
    """IncrementalAlterConfigs SET of `configs` (dots as underscores)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    resource = ConfigResource(resource_type, name, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)


def earliest(bootstrap, group, **extra):
    """A share group that reads from the earliest record (its default is the latest)."""
    set_configs(bootstrap, "GROUP", group, share_auto_offset_reset="earliest", **extra)


def set_cluster(bootstrap, **configs):
    """Sets the cluster's configs (Kafka's default broker entity), with `floe configs`."""
    args = [a for k, v in configs.items() for a in ("--config", f"{k.replace('_', '.')}={v}")]
    out = subprocess.run([FLOE, "configs", "alter", "--cluster", *args, "--bootstrap-server",
                          bootstrap], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def short_locks(bootstrap, lock_ms):
    """Locks shorter than Kafka's minimum (15 s), for tests that wait for one to end."""
    set_cluster(bootstrap, group_share_min_record_lock_duration_ms=1000,
                group_share_record_lock_duration_ms=lock_ms)


class Member:
    """A ShareConsumer polling on its own thread (it is not thread-safe),
    recording each delivery as (value, partition, offset, delivery count,
    time). In explicit mode, `decide(message)` names the acknowledge type
    of each record (None: leave it unacknowledged, and stop polling: the
    client refuses the next poll while records are unacknowledged)."""

    def __init__(self, bootstrap, group, topics, decide=None, **extra):
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group,
                     "share.acknowledgement.mode": "explicit" if decide else "implicit",
                     "fetch.wait.max.ms": 200, **{k.replace("_", "."): v for k, v in extra.items()}}
        self.topics, self.decide = topics, decide
        self.deliveries, self.errors = [], []
        self.stopped = threading.Event()
        self.holding = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def values(self):
        return [d[0] for d in self.deliveries]

    def run(self):
        consumer = ShareConsumer(self.conf)
        consumer.subscribe(self.topics)
        try:
            while not self.stopped.is_set():
                if self.holding.is_set():
                    time.sleep(0.05)
                    continue
                batch = consumer.poll(0.2)
                for m in (batch or []):
                    if m.error():
                        self.errors.append(m.error())
                        continue
                    self.deliveries.append((m.value().decode(), m.partition(), m.offset(),
                                            m.delivery_count(), time.time()))
                    if self.decide:
                        kind = self.decide(m)
                        if kind is None:
                            self.holding.set()
                        else:
                            consumer.acknowledge(m, kind)
                if self.decide and not self.holding.is_set():
                    consumer.commit_sync(30)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)
        finally:
            if self.closing_cleanly:
                consumer.close()

    closing_cleanly = True

    def close(self, cleanly=True):
        self.closing_cleanly = cleanly
        self.stopped.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the share consumer did not close"


def floe_json(bootstrap, *args, may_fail=False):
    """The JSON a `floe` command prints; with `may_fail`, None when it fails
    (a group its members have not made yet)."""
    out = subprocess.run([FLOE, *args, "--bootstrap-server", bootstrap, "--output", "json"],
                         capture_output=True, text=True, timeout=60)
    if may_fail and out.returncode != 0:
        return None
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_members_share_a_topic_and_each_record_goes_to_one(agent):
    b = agent.bootstrap
    make_topic(b, "shared", 4)
    earliest(b, "workers")
    values = [f"job-{i}" for i in range(400)]
    members = [Member(b, "workers", ["shared"]) for _ in range(3)]

    def assigned():
        described = floe_json(b, "groups", "describe", "workers", may_fail=True)
        shown = described["members"] if described else []
        return len(shown) == 3 and all(m["assignment"] for m in shown)

    try:
        wait_for(assigned, why="three members, each with partitions")
        produce(b, "shared", values, 4)
        wait_for(lambda: sum(len(m.deliveries) for m in members) >= len(values), why="every job")
        time.sleep(1)  # nothing more comes: each was accepted on the next poll
        got = [v for m in members for v in m.values()]
        assert sorted(got) == sorted(values), "each record delivered once"
        assert all(d[3] == 1 for m in members for d in m.deliveries)
        assert sum(1 for m in members if m.deliveries) >= 2, "members share the work"
        assert not [e for m in members for e in m.errors]
    finally:
        for m in members:
            m.close()
    # The group's start offsets are past every record: a new member gets none.
    late = Member(b, "workers", ["shared"])
    time.sleep(3)
    late.close()
    assert late.deliveries == []
    listed = floe_json(b, "groups", "list")["groups"]
    assert {"group": "workers", "type": "share", "state": "Empty", "protocol_type": "share"} in listed


def test_acknowledgements_accept_release_and_reject(agent):
    b = agent.bootstrap
    make_topic(b, "acked", 1)
    earliest(b, "ackers")
    produce(b, "acked", [f"r{i}" for i in range(9)], 1)

    def decide(m):
        n = int(m.value().decode()[1:])
        if n < 3:
            return AcknowledgeType.ACCEPT
        if n < 6:
            # Released once: the second delivery is accepted.
            return AcknowledgeType.RELEASE if m.delivery_count() == 1 else AcknowledgeType.ACCEPT
        return AcknowledgeType.REJECT

    m = Member(b, "ackers", ["acked"], decide=decide)
    try:
        wait_for(lambda: len(m.deliveries) >= 12, why="the released records again")
        time.sleep(2)
        counts = sorted((d[0], d[3]) for d in m.deliveries)
        assert counts == sorted([(f"r{i}", 1) for i in range(9)] + [(f"r{i}", 2) for i in range(3, 6)])
        assert not m.errors, m.errors
    finally:
        m.close()
    offsets = floe_json(b, "groups", "describe", "ackers")
    assert [(p["topic"], p["partition"], p["start_offset"], p["lag"]) for p in offsets["offsets"]] == [
        ("acked", 0, 9, 0)]


def test_a_lock_that_runs_out_hands_the_records_to_another_member(agent):
    b = agent.bootstrap
    make_topic(b, "locked", 1)
    short_locks(b, 2000)
    earliest(b, "lockers")
    produce(b, "locked", [f"l{i}" for i in range(5)], 1)
    # The first member takes records and never acknowledges them.
    holder = Member(b, "lockers", ["locked"], decide=lambda m: None)
    wait_for(lambda: holder.holding.is_set(), why="the first member to hold records")
    taker = Member(b, "lockers", ["locked"])
    try:
        wait_for(lambda: sorted(set(taker.values())) == [f"l{i}" for i in range(5)], why="every record")
        held = {d[0]: d for d in holder.deliveries}
        for value, _, _, count, at in taker.deliveries:
            if value in held:
                assert count == held[value][3] + 1, "a delivery is counted"
                # Not before the holder's lock ran out (it began before the
                # holder received the records).
                assert at - held[value][4] >= 1.5, (value, at - held[value][4])
    finally:
        taker.close()
        holder.close()
    assert not taker.errors, taker.errors


def test_the_delivery_limit_archives_a_record(agent):
    b = agent.bootstrap
    make_topic(b, "poison", 1)
    set_cluster(b, group_share_delivery_count_limit=2)
    earliest(b, "limited")
    produce(b, "poison", ["bad", "good"], 1)
    decide = lambda m: AcknowledgeType.RELEASE if m.value() == b"bad" else AcknowledgeType.ACCEPT
    m = Member(b, "limited", ["poison"], decide=decide)
    try:
        wait_for(lambda: m.values().count("bad") >= 2, why="two deliveries of the poison record")
        time.sleep(3)
        assert m.values().count("bad") == 2, "archived after its second delivery"
        assert m.values().count("good") == 1
    finally:
        m.close()


def test_a_read_committed_group_never_sees_an_aborted_transaction(agent):
    b = agent.bootstrap
    make_topic(b, "txns", 1)
    earliest(b, "committed-only", share_isolation_level="read_committed")
    p = Producer({"bootstrap.servers": b, "transactional.id": "share-txn"})
    p.init_transactions(30)
    for n, commit in enumerate([True, False, True, False, True]):
        p.begin_transaction()
        for i in range(4):
            p.produce("txns", value=f"{'c' if commit else 'a'}{n}-{i}".encode(), partition=0)
        p.commit_transaction(30) if commit else p.abort_transaction(30)
    m = Member(b, "committed-only", ["txns"])
    try:
        wait_for(lambda: len(m.deliveries) >= 12, why="the committed records")
        time.sleep(2)
        assert sorted(m.values()) == sorted(f"c{n}-{i}" for n in (0, 2, 4) for i in range(4))
        assert not m.errors, m.errors
    finally:
        m.close()


def test_floe_groups_shows_resets_and_deletes_share_offsets(agent):
    b = agent.bootstrap
    make_topic(b, "admin-shared", 2)
    earliest(b, "admins")
    produce(b, "admin-shared", [f"a{i}" for i in range(10)], 2)
    m = Member(b, "admins", ["admin-shared"])
    wait_for(lambda: len(m.deliveries) == 10, why="every record")
    described = floe_json(b, "groups", "describe", "admins")
    assert described["group"][0]["type"] == "share" and len(described["members"]) == 1
    assert described["members"][0]["assignment"] == "admin-shared:0,admin-shared:1"
    m.close()
    offsets = {(p["partition"], p["start_offset"], p["lag"]) for p in
               floe_json(b, "groups", "describe", "admins")["offsets"]}
    assert offsets == {(0, 5, 0), (1, 5, 0)}
    # Back to the beginning: the group reads everything again.
    out = subprocess.run([FLOE, "groups", "reset-offsets", "admins", "--topic", "admin-shared",
                          "--to-earliest", "--execute", "--bootstrap-server", b],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    again = Member(b, "admins", ["admin-shared"])
    try:
        wait_for(lambda: len(again.deliveries) == 10, why="every record again")
    finally:
        again.close()
    out = subprocess.run([FLOE, "groups", "delete-offsets", "admins", "--topic", "admin-shared",
                          "--bootstrap-server", b], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert floe_json(b, "groups", "describe", "admins")["offsets"] == []


def test_kill_9_of_the_agent_a_member_fetches_through_loses_nothing(peer_agents):
    first, second = peer_agents(2, "--flush-interval", "20ms")
    make_topic(first.bootstrap, "survive", 1)
    short_locks(first.bootstrap, 3000)
    earliest(first.bootstrap, "survivors")
    values = [f"s{i}" for i in range(200)]
    produce(first.bootstrap, "survive", values, 1)
    # One partition, two members: both are assigned it and share its records.
    doomed = Member(first.bootstrap, "survivors", ["survive"], decide=lambda m: None)
    wait_for(lambda: doomed.holding.is_set(), why="records held through the first agent")
    first.kill()
    held = {d[0]: d for d in doomed.deliveries}
    other = Member(second.bootstrap, "survivors", ["survive"])
    try:
        wait_for(lambda: set(other.values()) == set(values), seconds=90, why="every record")
        for value, _, _, count, at in other.deliveries:
            if value in held:
                assert count >= 2
                assert at - held[value][4] >= 2.5, "not while the first member's lock lasted"
        assert len(other.values()) == len(set(other.values())), "each once to the survivor"
    finally:
        other.close()
        doomed.close(cleanly=False)


HAPROXY = """global
    maxconn 1000
defaults
    mode tcp
    timeout connect 2s
    timeout client 60s
    timeout server 60s
frontend kafka
    bind 127.0.0.1:{port}
    default_backend agents
backend agents
    balance roundrobin
{servers}
"""


def test_one_share_group_across_agents_behind_a_load_balancer(tmp_path, metastore):
    haproxy = shutil.which("haproxy")
    assert haproxy, "haproxy is not installed (scripts/test.sh installs it)"
    port = free_port()
    agents = []
    for n in range(2):
        workdir = tmp_path / f"agent{n}"
        workdir.mkdir()
        agents.append(Agent(workdir, "--metastore", metastore.address,
                            "--object-store", f"file://{tmp_path / 'objects'}",
                            "--advertise", f"127.0.0.1:{port}", "--discovery", "load-balancer",
                            "--flush-interval", "20ms").start())
    servers = "\n".join(f"    server agent{n} {a.bootstrap}" for n, a in enumerate(agents))
    config = tmp_path / "haproxy.cfg"
    config.write_text(HAPROXY.format(port=port, servers=servers))
    lb = subprocess.Popen([haproxy, "-f", str(config), "-db"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.STDOUT)
    members = []
    try:
        time.sleep(0.5)
        b = f"127.0.0.1:{port}"
        make_topic(b, "balanced", 3)
        earliest(b, "balanced-workers")
        values = [f"b{i}" for i in range(600)]
        members = [Member(b, "balanced-workers", ["balanced"]) for _ in range(4)]
        produce(b, "balanced", values, 3)
        wait_for(lambda: sum(len(m.deliveries) for m in members) >= len(values), why="every record")
        time.sleep(1)
        got = [v for m in members for v in m.values()]
        assert sorted(got) == sorted(values)
        assert not [e for m in members for e in m.errors]
    finally:
        for m in members:
            m.close()
        lb.terminate()
        lb.wait(10)
        for a in agents:
            a.stop()
