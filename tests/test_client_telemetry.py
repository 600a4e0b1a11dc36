"""Client telemetry (KIP-714) with librdkafka: a client metrics subscription
set with kafka-python's admin client (Kafka's CLIENT_METRICS config
resource) makes matching producers push their metrics, which the agent
shows on its admin port; clients it does not match push nothing; without
subscriptions the agent does not advertise the telemetry APIs at all. With
ACLs on, a principal that may only write still pushes (Kafka checks no ACL
on telemetry) and keeps its connection."""

import socket
import struct
import subprocess
import time

from confluent_kafka import Producer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from conftest import FLOE
from test_acls import acls, conf, secured  # noqa: F401 (a fixture)
from test_bad_input import recv_exact
from test_group_protocol import make_topic

# How long an agent may take to see a changed subscription (its refresh
# interval, 2 s, with room).
SEEN_WITHIN = 5


def client_metrics(agent, family="floe_client_metric"):
    status, body = agent.admin("/client-metrics")
    assert status == 200, body
    return [line for line in body.splitlines() if line.startswith(family + "{")]


def instance_id(line):
    return line.split('client_instance_id="')[1].split('"')[0]


def pushed_by(agent, client_id):
    """The series pushed by the client instances of `client_id`."""
    ids = {instance_id(line) for line in client_metrics(agent, "floe_client_info")
           if f'client_id="{client_id}"' in line}
    return [line for line in client_metrics(agent) if instance_id(line) in ids]


def subscribe(bootstrap, name, configs, **admin_conf):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **admin_conf)
    try:
        # Kafka describes only the keys a subscription sets: a new one has
        # none for kafka-python to check the names against.
        altered = admin.alter_configs(
            [ConfigResource(ConfigResourceType.CLIENT_METRICS, name, configs)],
            raise_on_unknown=False)
        assert altered == {"client_metrics": {name: "OK"}}, altered
        return admin.describe_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, name)])
    finally:
        admin.close()


def produce_until(producer, topic, done, within=30):
    deadline = time.time() + within
    while time.time() < deadline and not done():
        producer.produce(topic, value=b"v")
        producer.poll(0.2)
    return done()


def advertises_telemetry(agent):
    """Whether ApiVersions lists GetTelemetrySubscriptions (71) and
    PushTelemetry (72): an ApiVersions v0, encoded by hand."""
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        response = recv_exact(s, size)
    _, error, count = struct.unpack(">ihi", response[:10])
    assert error == 0
    keys = {struct.unpack(">h", response[10 + 6 * i:12 + 6 * i])[0] for i in range(count)}
    assert 0 in keys and 18 in keys, keys
    assert (71 in keys) == (72 in keys), keys
    return 71 in keys


def test_a_subscription_makes_matching_clients_push(make_agent):
    agent = make_agent()
    make_topic(agent.bootstrap, "pushed", 1)
    assert not advertises_telemetry(agent)

    described = subscribe(agent.bootstrap, "producers", {
        "metrics": "org.apache.kafka.producer.",
        "interval.ms": "1000",
        "match": "client_id=pusher-.*",
    })
    shown = str(described)
    assert "org.apache.kafka.producer." in shown and "client_id=pusher-.*" in shown, shown
    listed = subprocess.run([FLOE, "configs", "list-client-metrics", "--bootstrap-server",
                             agent.bootstrap], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "producers" in listed.stdout, listed
    time.sleep(SEEN_WITHIN)
    assert advertises_telemetry(agent)

    pusher = Producer({"bootstrap.servers": agent.bootstrap, "client.id": "pusher-1",
                       "linger.ms": 5})
    other = Producer({"bootstrap.servers": agent.bootstrap, "client.id": "other",
                      "linger.ms": 5})
    try:
        assert produce_until(pusher, "pushed", lambda: pushed_by(agent, "pusher-1")), \
            f"no metrics pushed within 30 s: {client_metrics(agent)[:5]}"
        # The other client runs for two intervals: asked for nothing, it
        # pushes nothing.
        for _ in range(10):
            other.produce("pushed", value=b"v")
            other.poll(0.2)
        lines = pushed_by(agent, "pusher-1")
        names = {line.split(',name="')[1].split('"')[0] for line in lines}
        assert names and all(n.startswith("org.apache.kafka.producer.") for n in names), names
        # confluent-kafka names itself in ApiVersions (KIP-511).
        info = [line for line in client_metrics(agent, "floe_client_info")
                if 'client_id="pusher-1"' in line]
        assert len(info) == 1 and 'client_software_name="confluent-kafka-python"' in info[0], info
        print(f"{len(names)} producer metrics pushed, e.g. {sorted(names)[:3]}")
        assert pushed_by(agent, "other") == [], "a client the subscription does not match"
    finally:
        pusher.flush(10)
        other.flush(10)

    # Without configs, the subscription is gone; the agents stop
    # advertising telemetry.
    subscribe(agent.bootstrap, "producers",
              {k: ("DELETE", None) for k in ("metrics", "interval.ms", "match")})
    time.sleep(SEEN_WITHIN)
    assert not advertises_telemetry(agent)


def test_bad_subscriptions_are_refused_as_kafka_refuses_them(make_agent):
    agent = make_agent()
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    try:
        for configs, code in [({"interval.ms": "50"}, "InvalidRequestError"),
                              ({"no.such": "1"}, "InvalidRequestError"),
                              ({"match": "user=alice"}, "InvalidConfigurationError")]:
            res = admin.alter_configs(
                [ConfigResource(ConfigResourceType.CLIENT_METRICS, "bad", configs)],
                raise_on_unknown=False)
            result = res["client_metrics"]["bad"]
            assert code in result, (configs, result)
            print(configs, result)
    finally:
        admin.close()


def test_with_acls_a_writer_pushes_and_keeps_its_connection(secured):  # noqa: F811
    agent, _ = secured
    added = acls(agent, "add", "--principal", "User:alice", "--operation", "write",
                 "--topic", "orders")
    assert added.returncode == 0, added.stderr
    subscribe(agent.bootstrap, "everyone", {"metrics": "*", "interval.ms": "1000"},
              security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
              sasl_plain_username="admin", sasl_plain_password="admin-secret")
    time.sleep(SEEN_WITHIN)
    errors = []
    p = Producer({**conf(agent, "alice"), "client.id": "alice-app", "linger.ms": 5})
    try:
        def done():
            return pushed_by(agent, "alice-app")
        deadline = time.time() + 30
        while time.time() < deadline and not done():
            p.produce("orders", value=b"v", on_delivery=lambda e, m: e and errors.append(e))
            p.poll(0.2)
        assert done(), "no metrics pushed within 30 s"
    finally:
        p.flush(10)
    assert errors == []
    assert "closing: a request of an API without ACL rules" not in agent.log()
