"""Several listeners (Kafka's listeners, advertised.listeners and
listener.security.protocol.map): an agent with PLAINTEXT inside and
SASL_SSL outside tells each client only the addresses of the listener it
came in on, refuses plaintext clients on the SASL_SSL listener, and applies
ACLs to the principal whichever listener it used. Two agents sharing a
metastore send each client to the other agent within its own listener.
Clients: confluent-kafka (admin, producer, consumer with a group) and kcat.
Certificates are made by the test."""

import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from conftest import Agent, free_port
from test_tls import make_ca, make_cert

PASSWORD = "alice-secret"


@pytest.fixture
def setup(tmp_path):
    """Certificates for 127.0.0.1 and a users file with alice."""
    d = tmp_path / "certs"
    d.mkdir()
    make_ca(d, "ca")
    make_cert(d, "server", "ca")
    users = tmp_path / "users"
    users.write_text(f"alice:{PASSWORD}\n")
    return d, users


def two_listeners(workdir, certs, users, *extra):
    """An agent with INTERNAL (PLAINTEXT, at agent.port) and EXTERNAL
    (SASL_SSL, at agent.external); not started."""
    workdir.mkdir(exist_ok=True)
    agent = Agent(workdir)
    agent.external = free_port()
    agent.extra_args = [
        "--listeners", f"INTERNAL://127.0.0.1:{agent.port},EXTERNAL://127.0.0.1:{agent.external}",
        "--listener-security-protocol-map", "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
        "--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
        "--sasl-plain-users", str(users), *extra,
    ]
    return agent


def internal(agent):
    return {"bootstrap.servers": f"127.0.0.1:{agent.port}"}


def external(agent, certs, password=PASSWORD):
    return {"bootstrap.servers": f"127.0.0.1:{agent.external}", "security.protocol": "sasl_ssl",
            "ssl.ca.location": str(certs / "ca.pem"), "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice", "sasl.password": password}


def brokers(conf):
    """The (host, port) of every broker Metadata names."""
    md = AdminClient(conf).list_topics(timeout=20)
    return sorted((b.host, b.port) for b in md.brokers.values())


def produce(conf, topic, values):
    errors = []
    p = Producer({**conf, "message.timeout.ms": 15000})
    for v in values:
        p.produce(topic, v.encode(), on_delivery=lambda err, _: err and errors.append(err.code()))
    p.flush(30)
    return errors


def consume(conf, topic, group, want):
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.time() + 45
    while len(got) < want and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                c.close()
                return "denied"
            continue
        got.append(m.value().decode())
    c.close()
    return got


def test_each_listener_is_told_its_own_addresses(tmp_path, setup):
    certs, users = setup
    agent = two_listeners(tmp_path / "a", certs, users).start()
    try:
        assert brokers(internal(agent)) == [("127.0.0.1", agent.port)]
        assert brokers(external(agent, certs)) == [("127.0.0.1", agent.external)]

        values = [f"v{i}" for i in range(50)]
        assert produce(internal(agent), "orders", values) == []
        assert consume(external(agent, certs), "orders", "outside", 50) == values

        # A plaintext client gets nothing from the SASL_SSL listener; a
        # wrong password is refused there.
        plain = subprocess.run(["kcat", "-L", "-b", f"127.0.0.1:{agent.external}", "-m", "5"],
                               capture_output=True, text=True, timeout=60)
        assert plain.returncode != 0
        assert brokers(internal(agent)) == [("127.0.0.1", agent.port)]
        wrong = Producer({**external(agent, certs, "nope"), "message.timeout.ms": 5000})
        errors = []
        wrong.produce("orders", b"x", on_delivery=lambda err, _: errors.append(err and err.code()))
        wrong.flush(15)
        assert errors and errors[0] is not None
    finally:
        agent.stop()


def test_acls_apply_to_the_principal_on_every_listener(tmp_path, setup):
    certs, users = setup
    # Inside, clients are ANONYMOUS, made a super user here (as Kafka
    # deployments do for a trusted internal listener).
    agent = two_listeners(tmp_path / "a", certs, users, "--acls",
                          "--super-users", "User:ANONYMOUS").start()
    try:
        admin = AdminClient(internal(agent))
        for f in admin.create_topics([NewTopic("orders", 1)]).values():
            f.result(timeout=30)
        assert produce(external(agent, certs), "orders", ["denied"]) == [
            KafkaError.TOPIC_AUTHORIZATION_FAILED]
        binding = lambda rt, name, op: AclBinding(rt, name, ResourcePatternType.LITERAL,  # noqa: E731
                                                  "User:alice", "*", op, AclPermissionType.ALLOW)
        created = admin.create_acls([binding(ResourceType.TOPIC, "orders", AclOperation.WRITE),
                                     binding(ResourceType.TOPIC, "orders", AclOperation.READ),
                                     binding(ResourceType.GROUP, "g", AclOperation.READ)])
        for f in created.values():
            f.result(timeout=30)
        deadline = time.time() + 20
        while produce(external(agent, certs), "orders", ["allowed"]) and time.time() < deadline:
            time.sleep(0.5)
        assert consume(external(agent, certs), "orders", "g", 1) == ["allowed"]
    finally:
        agent.stop()


def test_two_agents_send_clients_within_their_listener(tmp_path, setup, metastore):
    certs, users = setup
    agents = [two_listeners(tmp_path / f"a{i}", certs, users, "--metastore", metastore.address,
                            "--object-store", f"file://{tmp_path / 'objects'}",
                            "--agent-ttl", "30s").start() for i in range(2)]
    try:
        want_internal = sorted(("127.0.0.1", a.port) for a in agents)
        want_external = sorted(("127.0.0.1", a.external) for a in agents)
        deadline = time.time() + 20
        while brokers(internal(agents[0])) != want_internal and time.time() < deadline:
            time.sleep(0.3)
        for a in agents:
            assert brokers(internal(a)) == want_internal
            assert brokers(external(a, certs)) == want_external

        values = [f"r{i}" for i in range(40)]
        admin = AdminClient(internal(agents[0]))
        for f in admin.create_topics([NewTopic("spread", 4)]).values():
            f.result(timeout=30)
        assert produce(internal(agents[1]), "spread", values) == []
        # Over SASL_SSL, through the first agent: the group's coordinator and
        # the partitions' leader are given at external addresses only (an
        # internal one would refuse the SASL_SSL client).
        got = consume(external(agents[0], certs), "spread", "outside", 40)
        assert sorted(got) == sorted(values)
    finally:
        for a in agents:
            a.stop()
