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


def two_listeners(workdir, certs, users, *extra, mutual=False):
    """An agent with INTERNAL (PLAINTEXT, at agent.port) and EXTERNAL
    (SASL_SSL, at agent.external), and with `mutual` a third, SECURE (SSL
    asking for client certificates, at agent.secure); not started."""
    workdir.mkdir(exist_ok=True)
    agent = Agent(workdir)
    agent.external = free_port()
    listeners = f"INTERNAL://127.0.0.1:{agent.port},EXTERNAL://127.0.0.1:{agent.external}"
    protocols = "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL"
    more = []
    if mutual:
        agent.secure = free_port()
        listeners += f",SECURE://127.0.0.1:{agent.secure}"
        protocols += ",SECURE:SSL"
        more = ["--tls-client-ca", str(certs / "ca.pem")]
    agent.extra_args = [
        "--listeners", listeners, "--listener-security-protocol-map", protocols,
        "--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
        "--sasl-plain-users", str(users), *more, *extra,
    ]
    return agent


def kcat_metadata(port, *args):
    """kcat -L against a port: (whether it got metadata, its stderr)."""
    done = subprocess.run(["kcat", "-L", "-b", f"127.0.0.1:{port}", "-m", "5", *args],
                          capture_output=True, text=True, timeout=60)
    return done.returncode == 0, done.stderr


def kcat_sasl_ssl(certs, password=PASSWORD):
    return ["-X", "security.protocol=sasl_ssl", "-X", f"ssl.ca.location={certs / 'ca.pem'}",
            "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice",
            "-X", f"sasl.password={password}"]


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
    agent = two_listeners(tmp_path / "a", certs, users, mutual=True).start()
    try:
        assert brokers(internal(agent)) == [("127.0.0.1", agent.port)]
        assert brokers(external(agent, certs)) == [("127.0.0.1", agent.external)]

        values = [f"v{i}" for i in range(50)]
        assert produce(internal(agent), "orders", values) == []
        assert consume(external(agent, certs), "orders", "outside", 50) == values

        # The SASL_SSL listener: alice with her password gets metadata
        # without a client certificate; a plaintext client, a TLS client
        # that does not authenticate, and a wrong password get nothing.
        assert kcat_metadata(agent.external, *kcat_sasl_ssl(certs))[0]
        assert not kcat_metadata(agent.external)[0]
        tls_only = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs / 'ca.pem'}"]
        assert not kcat_metadata(agent.external, *tls_only)[0]
        ok, stderr = kcat_metadata(agent.external, *kcat_sasl_ssl(certs, "nope"))
        assert not ok and "Authentication failed" in stderr, stderr
        # The PLAINTEXT listener serves no SASL.
        sasl_plaintext = ["-X", "security.protocol=sasl_plaintext", "-X", "sasl.mechanisms=PLAIN",
                          "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORD}"]
        assert not kcat_metadata(agent.port, *sasl_plaintext)[0]
        # The SSL listener asks for a client certificate (the SASL_SSL one
        # did not): refused without one, served with one.
        assert not kcat_metadata(agent.secure, *tls_only)[0]
        make_cert(certs, "client", "ca")
        with_cert = tls_only + ["-X", f"ssl.certificate.location={certs / 'client.pem'}",
                                "-X", f"ssl.key.location={certs / 'client.key'}"]
        assert kcat_metadata(agent.secure, *with_cert)[0]
        ssl_brokers = {"bootstrap.servers": f"127.0.0.1:{agent.secure}",
                       "security.protocol": "ssl", "ssl.ca.location": str(certs / "ca.pem"),
                       "ssl.certificate.location": str(certs / "client.pem"),
                       "ssl.key.location": str(certs / "client.key")}
        assert brokers(ssl_brokers) == [("127.0.0.1", agent.secure)]
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
        # Groups whose coordinators are either agent are named at their
        # external addresses to clients of the external listener.
        groups = [f"g{i}" for i in range(8)]
        for g in groups:
            assert consume(external(agents[0], certs), "spread", g, 1)
        outside = AdminClient(external(agents[0], certs))  # kept: its futures need it
        described = [d.result(timeout=30) for d in outside.describe_consumer_groups(groups).values()]
        coordinators = {(d.coordinator.host, d.coordinator.port) for d in described}
        assert coordinators == set(want_external), coordinators
    finally:
        for a in agents:
            a.stop()
