"""Agents advertising themselves: each is a broker in Metadata; a client that
names its zone (`floe_az=<zone>` in client.id) sees only its zone's agents;
one agent leads every partition for a client; dead agents drop out."""

import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from check import check_partitions
from conftest import FLOE, Agent, free_port

ZONES = ["a", "a", "b"]


@pytest.fixture
def zoned_agents(tmp_path):
    meta_port = free_port()
    meta = subprocess.Popen(
        [FLOE, "metastore", "--listen", f"127.0.0.1:{meta_port}", "--path", str(tmp_path / "meta.redb")],
        stdout=open(tmp_path / "metastore.log", "w"), stderr=subprocess.STDOUT)
    agents = []
    for n, zone in enumerate(ZONES):
        workdir = tmp_path / f"agent{n}"
        workdir.mkdir()
        agents.append(Agent(workdir, "--metastore", f"127.0.0.1:{meta_port}", "--zone", zone,
                            "--agent-ttl", "4s", "--object-store", f"file://{tmp_path / 'shared-bucket'}").start())
    yield agents
    for a in agents:
        a.stop()
    meta.terminate()
    meta.wait(timeout=10)


def metadata(bootstrap, client_id, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": client_id})
    md = admin.list_topics(topic, timeout=10)
    brokers = sorted((b.host, b.port) for b in md.brokers.values())
    leaders = {p.leader for p in md.topics[topic].partitions.values()}
    ids = {b.id: (b.host, b.port) for b in md.brokers.values()}
    return brokers, {ids[leader] for leader in leaders}


def test_zones_leaders_and_liveness(zoned_agents):
    a1, a2, b1 = zoned_agents
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    admin.create_topics([NewTopic("zoned", 6, 1)])["zoned"].result(timeout=30)
    addr = lambda agent: ("127.0.0.1", agent.port)  # noqa: E731

    # Any agent answers the same: all three, or a zone's own.
    for entry in zoned_agents:
        brokers, _ = metadata(entry.bootstrap, "plain-client", "zoned")
        assert brokers == sorted(addr(a) for a in zoned_agents)
        brokers, leaders = metadata(entry.bootstrap, "app,floe_az=a", "zoned")
        assert brokers == sorted([addr(a1), addr(a2)])
        assert len(leaders) == 1 and leaders <= {addr(a1), addr(a2)}, "one leader for every partition"
        assert metadata(entry.bootstrap, "floe_az=b", "zoned") == ([addr(b1)], {addr(b1)})
    # An unknown zone falls back to every live agent.
    assert len(metadata(a1.bootstrap, "floe_az=mars", "zoned")[0]) == 3

    # Produce in zone b, consume in zone a: one bucket, one metastore.
    p = Producer({"bootstrap.servers": b1.bootstrap, "client.id": "writer,floe_az=b"})
    values = [f"z-{i}" for i in range(3_000)]
    for i, v in enumerate(values):
        p.produce("zoned", value=v, partition=i % 6)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": a1.bootstrap, "client.id": "reader,floe_az=a", "group.id": "zoned-readers",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["zoned"])  # FindCoordinator, groups: all through zone-a agents
    rows = []
    deadline = time.time() + 60
    while len(rows) < len(values) and time.time() < deadline:
        for m in c.consume(num_messages=1000, timeout=0.5):
            assert m.error() is None, m.error()
            rows.append((m.partition(), m.offset(), m.value().decode()))
    c.close()
    check_partitions(rows, values)

    # A dead agent leaves Metadata once its heartbeats stop for agent_ttl.
    a2.kill()
    deadline = time.time() + 20
    while time.time() < deadline and len(metadata(a1.bootstrap, "floe_az=a", "zoned")[0]) != 1:
        time.sleep(0.5)
    assert metadata(a1.bootstrap, "floe_az=a", "zoned") == ([addr(a1)], {addr(a1)})


def test_each_group_is_listed_once_by_its_coordinator(zoned_agents):
    """Admin clients ask every broker for its groups and concatenate: each
    agent lists only the groups it coordinates for the client, so each group
    appears once (every agent knowing every group listed each three times)."""
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    from test_cli import floe

    a1, a2, b1 = zoned_agents
    admin = AdminClient({"bootstrap.servers": a1.bootstrap})
    admin.create_topics([NewTopic("listed", 1, 1)])["listed"].result(timeout=30)
    names = sorted(f"listed-{n}" for n in range(12))
    for name in names:  # standalone commits: a group each, no members
        c = KafkaConsumer(bootstrap_servers=a1.bootstrap, group_id=name, enable_auto_commit=False)
        c.commit({KTopicPartition("listed", 0): OffsetAndMetadata(0, "", -1)})
        c.close()

    listed = admin.list_consumer_groups().result(30).valid
    assert sorted(g.group_id for g in listed) == names
    kadmin = KafkaAdminClient(bootstrap_servers=b1.bootstrap)
    assert sorted(g["group_id"] for g in kadmin.list_groups()) == names
    kadmin.close()
    # The agents split them, each group to its FindCoordinator answer.
    per_agent = []
    for agent in zoned_agents:
        kadmin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
        coordinator = {name: kadmin._manager.run(kadmin._find_coordinator_id, name) for name in names}
        [broker] = [b["broker_id"] for b in kadmin.describe_cluster()["brokers"]
                    if f"{b['host']}:{b['port']}" == agent.bootstrap]
        mine = sorted(g["group_id"] for g in kadmin.list_groups(broker_ids=[broker]))
        kadmin.close()
        assert mine == sorted(n for n, c in coordinator.items() if c == broker)
        per_agent.append(mine)
    assert sorted(sum(per_agent, [])) == names and all(per_agent), per_agent
    # A zone's client sees its zone's agents, which list every group between them.
    zoned = AdminClient({"bootstrap.servers": a1.bootstrap, "client.id": "ops,floe_az=a"})
    assert sorted(g.group_id for g in zoned.list_consumer_groups().result(30).valid) == names
    # floe groups list asks every broker too.
    shown = floe(a2, "groups", "list").stdout
    assert sorted(line.split()[0] for line in shown.splitlines()[1:]) == names

    # Transactional ids likewise: each listed once, by its coordinator.
    from test_transactions import txn_producer
    ids = sorted(f"txn-{n}" for n in range(8))
    producers = [txn_producer(a1.bootstrap, tid) for tid in ids]
    kadmin = KafkaAdminClient(bootstrap_servers=b1.bootstrap)
    by_broker = kadmin.list_transactions()
    kadmin.close()
    listed = [str(t.transactional_id) for listings in by_broker.values() for t in listings]
    assert sorted(listed) == ids, by_broker
    assert sum(1 for listings in by_broker.values() if listings) > 1, "one agent listed them all"
    assert len(producers) == len(ids)
