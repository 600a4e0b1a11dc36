"""Client quotas (Kafka's client-quotas): set and described with
kafka-python's AlterClientQuotas/DescribeClientQuotas requests and with
`floe quotas`, refused as Kafka refuses bad ones; a producer and a consumer
over their byte-rate quotas are throttled (librdkafka reports the throttle
times the agent sends) and move data at about the quota; a client over its
request-time quota is throttled too."""

import subprocess
import time

from confluent_kafka import Consumer, Producer
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import (AlterClientQuotasRequest, CreateTopicsRequest,
                                  DescribeClientQuotasRequest)

from conftest import FLOE, Agent
from test_group_protocol import make_topic
from test_metrics import metric

INVALID_REQUEST = 42
THROTTLING_QUOTA_EXCEEDED = 89
INVALID_PARTITIONS = 37
# How long an agent may take to see changed quotas (it reads them every 2 s).
SEEN_WITHIN = 5


def alter(admin, entity, ops, validate_only=False):
    """AlterClientQuotas with kafka-python's request: entity as
    [(type, name or None)], ops as [(key, value or None to remove)];
    each entry's (error code, message)."""
    E = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(
        entries=[E(entity=[E.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                   ops=[E.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops])],
        validate_only=validate_only)
    response = admin._manager.run(admin._manager.send, request)
    return [(e.error_code, e.error_message) for e in response.entries]


def describe(admin, components=(), strict=False):
    """DescribeClientQuotas: {((type, name), ...): {key: value}}."""
    C = DescribeClientQuotasRequest.ComponentData
    request = DescribeClientQuotasRequest(
        components=[C(entity_type=t, match_type=m, match=n) for t, m, n in components],
        strict=strict)
    response = admin._manager.run(admin._manager.send, request)
    assert response.error_code == 0, response
    return {tuple((p.entity_type, p.entity_name) for p in e.entity):
            {v.key: v.value for v in e.values} for e in response.entries}


def floe_quotas(agent, *args):
    done = subprocess.run([FLOE, "quotas", *args, "--bootstrap-server", agent.bootstrap],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quotas_are_set_described_and_refused_as_kafka_does(agent):
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    try:
        assert alter(admin, [("client-id", None)], [("producer_byte_rate", 1048576.0)]) \
            == [(0, None)]
        assert alter(admin, [("user", "alice"), ("client-id", "app")],
                     [("consumer_byte_rate", 2048.0), ("request_percentage", 12.5)]) == [(0, None)]
        # validate_only changes nothing.
        assert alter(admin, [("user", "bob")], [("producer_byte_rate", 10.0)],
                     validate_only=True) == [(0, None)]
        for entity, ops in [
            ([("client-id", None)], [("producer_byte_rate", 0.0)]),
            ([("client-id", None)], [("producer_byte_rate", 10.5)]),
            ([("client-id", None)], [("no_such_quota", 1.0)]),
            ([("client-id", None)], [("controller_mutation_rate", 0.0)]),
            ([("ip", "10.0.0.1")], [("connection_creation_rate", 1.0)]),
            ([("user", "")], [("producer_byte_rate", 1.0)]),
            ([], [("producer_byte_rate", 1.0)]),
        ]:
            [(code, message)] = alter(admin, entity, ops)
            assert code == INVALID_REQUEST, (entity, ops, code, message)

        everything = describe(admin)
        assert everything == {
            (("client-id", None),): {"producer_byte_rate": 1048576.0},
            (("user", "alice"), ("client-id", "app")):
                {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
        }, everything
        # Match types: exact (0), default (1), specified (2); strict.
        assert list(describe(admin, [("user", 0, "alice")])) == \
            [(("user", "alice"), ("client-id", "app"))]
        assert describe(admin, [("user", 0, "alice")], strict=True) == {}
        assert list(describe(admin, [("client-id", 1, None)])) == [(("client-id", None),)]
        assert len(describe(admin, [("client-id", 2, None)])) == 2

        shown = floe_quotas(agent, "describe")
        assert "producer_byte_rate" in shown and "alice" in shown and "<default>" in shown, shown
        floe_quotas(agent, "alter", "--user", "alice", "--client-id", "app",
                    "--delete-quota", "consumer_byte_rate", "--delete-quota", "request_percentage")
        floe_quotas(agent, "alter", "--user-default", "--quota", "producer_byte_rate=5000")
        assert describe(admin) == {
            (("client-id", None),): {"producer_byte_rate": 1048576.0},
            (("user", None),): {"producer_byte_rate": 5000.0},
        }
    finally:
        admin.close()


def produce_for(producer, topic, seconds, value, at_most=None):
    """Sends `value` as fast as the producer takes it for `seconds` (or
    until it sent `at_most` bytes); the bytes delivered and the time taken
    to deliver them."""
    delivered = []
    started = time.time()
    sent = 0
    while time.time() - started < seconds and (at_most is None or sent < at_most):
        try:
            producer.produce(topic, value=value,
                             on_delivery=lambda e, m: e is None and delivered.append(len(m.value())))
            sent += len(value)
            producer.poll(0)
        except BufferError:
            producer.poll(0.05)
    producer.flush(60)
    return sum(delivered), time.time() - started


# What a producer below holds unsent (queue.buffering.max.kbytes).
PRODUCER_QUEUE = 1024 * 1024


def within_quota(moved, took, quota, in_flight=0):
    """Kafka's quota is an average over an 11 s window (a first burst may
    use ten seconds' worth at once): what moved in `took` seconds is at
    most the quota over `took` plus that window, and not far below it.

    A throttle is known only once a request over the quota is answered, as
    in Kafka: what the client had already sent by then (`in_flight`, up to
    its whole queue: an agent reads up to 64 pipelined requests of a
    connection while its produces wait for their flush) is taken on top."""
    assert moved <= quota * (took + 11) * 1.1 + in_flight, (moved, took)
    assert moved >= quota * took * 0.6, (moved, took)


def test_producers_and_consumers_are_held_to_their_byte_rates(agent):
    quota = 200_000
    floe_quotas(agent, "alter", "--client-id", "slow", "--quota", f"producer_byte_rate={quota}",
                "--quota", f"consumer_byte_rate={quota}")
    make_topic(agent.bootstrap, "metered", 1)
    time.sleep(SEEN_WITHIN)

    throttles = []
    conf = {"bootstrap.servers": agent.bootstrap, "linger.ms": 5,
            "queue.buffering.max.kbytes": PRODUCER_QUEUE // 1024,
            "throttle_cb": lambda e: throttles.append(e)}
    slow = Producer({**conf, "client.id": "slow"})
    sent, took = produce_for(slow, "metered", 15, b"x" * 10_000)
    rate = sent / took
    print(f"producer: {sent} bytes in {took:.1f} s = {rate:.0f} B/s against {quota}; "
          f"{len(throttles)} throttles reported")
    assert throttles and max(t.throttle_time for t in throttles) > 0
    within_quota(sent, took, quota, in_flight=PRODUCER_QUEUE)

    # Another client id has no quota: it is not held back.
    fast_throttles = []
    make_topic(agent.bootstrap, "unmetered", 1)
    fast = Producer({**conf, "client.id": "fast", "throttle_cb": fast_throttles.append})
    fast_sent, fast_took = produce_for(fast, "unmetered", 60, b"y" * 10_000, at_most=3_000_000)
    print(f"unthrottled producer: {fast_sent / fast_took:.0f} B/s")
    assert fast_throttles == [] and fast_sent == 3_000_000

    # Fetches of 100 KB (Kafka's fetch size granularity matters: a throttled
    # fetch is answered empty and asked again).
    consumer_throttles = []
    c = Consumer({"bootstrap.servers": agent.bootstrap, "client.id": "slow", "group.id": "g",
                  "auto.offset.reset": "earliest", "fetch.max.bytes": 100_000,
                  "max.partition.fetch.bytes": 100_000, "message.max.bytes": 50_000,
                  "throttle_cb": consumer_throttles.append})
    c.subscribe(["unmetered"])
    got, started = 0, None
    deadline = time.time() + 120
    while got < fast_sent and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            started = started or time.time()
            got += len(m.value())
    took = time.time() - started
    c.close()
    print(f"consumer: {got} bytes in {took:.1f} s = {got / took:.0f} B/s against {quota}; "
          f"{len(consumer_throttles)} throttles reported")
    assert got == fast_sent
    assert consumer_throttles
    within_quota(got, took, quota)


def test_a_client_is_held_to_its_quota_across_agents(tmp_path, metastore):
    """Two agents (each telling clients of both): a client's partitions all
    have one leader for it, so its produce goes through one agent and its
    quota holds across the cluster (README "Client quotas")."""
    agents = []
    for i in range(2):
        (tmp_path / f"a{i}").mkdir()
        agents.append(Agent(tmp_path / f"a{i}", "--metastore", metastore.address,
                            "--object-store", f"file://{tmp_path / 'objects'}").start())
    try:
        quota = 200_000
        floe_quotas(agents[0], "alter", "--client-id", "spread", "--quota",
                    f"producer_byte_rate={quota}")
        make_topic(agents[0].bootstrap, "across", 6)
        time.sleep(SEEN_WITHIN)
        p = Producer({"bootstrap.servers": ",".join(a.bootstrap for a in agents),
                      "client.id": "spread", "linger.ms": 5,
                      "queue.buffering.max.kbytes": PRODUCER_QUEUE // 1024})
        sent, took = produce_for(p, "across", 15, b"s" * 10_000)
        produced = [metric(a.admin("/metrics")[1], "floe_produced_bytes_total") for a in agents]
        print(f"across two agents: {sent} bytes in {took:.1f} s = {sent / took:.0f} B/s "
              f"against {quota}; produced through each agent: {produced}")
        assert sorted(produced)[0] == 0 and sorted(produced)[1] > 0, produced
        within_quota(sent, took, quota, in_flight=PRODUCER_QUEUE)
    finally:
        for a in agents:
            a.stop()


def test_a_client_over_its_request_time_quota_is_throttled(agent):
    # 0.001 % of a thread: 0.1 ms of handling per 10 s.
    floe_quotas(agent, "alter", "--client-id", "busy", "--quota", "request_percentage=0.001")
    make_topic(agent.bootstrap, "busy", 1)
    time.sleep(SEEN_WITHIN)
    throttles = []
    p = Producer({"bootstrap.servers": agent.bootstrap, "client.id": "busy",
                  "throttle_cb": throttles.append})
    deadline = time.time() + 30
    while len(throttles) < 3 and time.time() < deadline:
        p.produce("busy", value=b"v")
        p.flush(10)
    assert throttles, "no throttle reported"
    assert all(t.throttle_time <= 1000 for t in throttles), "capped at one window, as Kafka"


def test_topic_mutations_are_held_to_their_controller_mutation_rate(agent):
    """controller_mutation_rate (KIP-599): partitions created, added or
    deleted per second, with 11 seconds' worth at once. kafka-python sends
    CreateTopics v7, DeleteTopics v6 and CreatePartitions v3: a topic asked
    for while the client's bucket is empty is refused with
    THROTTLING_QUOTA_EXCEEDED and the time to wait; another client id is
    not held back."""
    floe_quotas(agent, "alter", "--client-id", "mutator", "--quota", "controller_mutation_rate=2")
    described = floe_quotas(agent, "describe", "--client-id", "mutator")
    assert "controller_mutation_rate" in described, described
    time.sleep(SEEN_WITHIN)
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap, client_id="mutator")
    other = KafkaAdminClient(bootstrap_servers=agent.bootstrap, client_id="other")
    try:
        def create(client, *topics):
            """Each topic's error code, and the throttle_time_ms, of a
            CreateTopics request of (name, partitions) (kafka-python's
            create_topics drops the throttle time)."""
            request = CreateTopicsRequest(topics=[
                CreateTopicsRequest.CreatableTopic(name=name, num_partitions=n, replication_factor=-1,
                                                   assignments=[], configs=[])
                for name, n in topics], timeout_ms=30000, validate_only=False)
            response = client._manager.run(client._send_request_to_controller, request,
                                           lambda r: (), False)
            return [t.error_code for t in response.topics], response.throttle_time_ms

        def created(client, name, partitions):
            ([code], throttle) = create(client, (name, partitions))
            return code, throttle

        # Topics that mutate nothing take nothing: a partition count out of
        # range, a name given twice (both refused, neither created).
        assert create(admin, ("huge", 2**31 - 1))[0] == [INVALID_PARTITIONS]
        assert create(admin, ("twice", 5), ("twice", 5))[0] == [INVALID_REQUEST, INVALID_REQUEST]
        assert "twice" not in admin.list_topics()

        # The bucket holds 22 (11 s at 2/s): 30 partitions are taken,
        # leaving it 8 below zero, about 4 s to wait.
        assert created(admin, "burst", 30) == (0, 0)
        code, throttle = created(admin, "refused", 1)
        assert code == THROTTLING_QUOTA_EXCEEDED and 2000 <= throttle <= 4500, (code, throttle)
        assert created(other, "unheld", 30) == (0, 0)
        # kafka-python waits out a throttle on its connection; a second
        # client with the same id shares the quota. Deleting takes the
        # topic's partitions too, and is refused alike.
        again = KafkaAdminClient(bootstrap_servers=agent.bootstrap, client_id="mutator")
        deleted = again.delete_topics(["burst"], raise_errors=False)
        (result,) = deleted["topics"]
        assert result["error_code"] == THROTTLING_QUOTA_EXCEEDED, deleted
        again.close()
        # Once the bucket refilled past zero, the client is let in again.
        time.sleep(throttle / 1000 + 0.5)
        later = KafkaAdminClient(bootstrap_servers=agent.bootstrap, client_id="mutator")
        assert created(later, "later", 1) == (0, 0)
        later.close()
    finally:
        admin.close()
        other.close()
