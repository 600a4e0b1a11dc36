"""Several stateless agents in separate processes share one bucket (the local
S3 server) and one `floe metastore`, behind a real TCP load balancer (HAProxy)
that all agents advertise. An agent is killed with -9 mid-produce: clients
carry on, and every acknowledged record is read back exactly once."""

import shutil
import subprocess
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from check import check_partitions
from conftest import Agent, free_port
from clients import create_topic, kcat, kcat_consume

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
AGENTS = 3
PARTITIONS = 4

HAPROXY_CONFIG = """
global
    maxconn 1000
defaults
    mode tcp
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    retries 3
    option redispatch
frontend kafka
    bind 127.0.0.1:{lb_port}
    default_backend agents
backend agents
    balance roundrobin
{servers}
"""


@pytest.fixture
def cluster(tmp_path, s3_endpoint, metastore):
    haproxy = shutil.which("haproxy")
    assert haproxy, "haproxy is not installed (scripts/test.sh installs it)"
    lb_port = free_port()
    bucket = f"s3://floe-test/cluster-{time.time_ns()}?endpoint={s3_endpoint}&region=us-east-1&path_style=true"
    agents = []
    for n in range(AGENTS):
        workdir = tmp_path / f"agent{n}"
        workdir.mkdir()
        agents.append(Agent(workdir, "--object-store", bucket, "--metastore", metastore.address,
                            "--advertise", f"127.0.0.1:{lb_port}", "--discovery", "load-balancer",
                            "--flush-interval", "100ms",
                            env={**CREDENTIALS, "FLOE_LOG": "info,floe_agent::write::batcher=debug"}).start())
    servers = "\n".join(f"    server agent{n} {a.bootstrap} check inter 300ms fall 1 rise 2"
                        for n, a in enumerate(agents))
    config = tmp_path / "haproxy.cfg"
    config.write_text(HAPROXY_CONFIG.format(lb_port=lb_port, servers=servers))
    lb = subprocess.Popen([haproxy, "-f", str(config), "-db"],
                          stdout=open(tmp_path / "haproxy.log", "w"), stderr=subprocess.STDOUT)
    time.sleep(0.5)
    yield f"127.0.0.1:{lb_port}", agents
    lb.terminate()
    for a in agents:
        a.stop()
    lb.wait(timeout=10)


def test_agents_behind_a_load_balancer_survive_kill_9(cluster):
    bootstrap, agents = cluster
    create_topic(bootstrap, "through-lb", PARTITIONS)
    values = [f"lb-{i}" for i in range(30_000)]
    acked, failed = [], []

    def delivered(err, msg):
        (failed if err else acked).append(err or msg.value().decode())

    # librdkafka (confluent-kafka), idempotent: its retries through the balancer
    # reach another agent, and the metastore's sequence checks drop duplicates.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "message.timeout.ms": 120_000,
                         "reconnect.backoff.max.ms": 500})

    def produce():
        for start in range(0, len(values), 500):
            for i in range(start, start + 500):
                producer.produce("through-lb", key=f"k{i % 17}", value=values[i], on_delivery=delivered)
            producer.poll(0.05)
        assert producer.flush(150) == 0

    feeder = threading.Thread(target=produce)
    feeder.start()
    # Kill -9 the agent the producer is writing through, as soon as it has
    # committed something (the producer is then still mid-run: it paces itself).
    deadline = time.time() + 30
    serving = []
    while not serving and time.time() < deadline:
        time.sleep(0.1)
        serving = [a for a in agents if "ingest file committed" in a.log()]
    assert serving, "no agent committed anything"
    victim = serving[0]
    victim.kill()
    feeder.join()
    assert not failed, failed[:3]
    assert sorted(acked) == sorted(values)

    rows = kcat_consume(bootstrap, "through-lb")
    by_partition = check_partitions(rows, values)  # each acknowledged record exactly once
    assert len(by_partition) == PARTITIONS
    # The producer carried on through another agent.
    assert any("ingest file committed" in a.log() for a in agents if a is not victim)


def test_exactly_once_through_a_load_balancer_across_kill_9(cluster):
    """KIP-98's consume-transform-produce loop through the balancer, so its
    transaction, group and produce requests reach different agents; the
    agent that took its writes is killed with -9 in the middle of a
    transaction. The application does what Kafka's documentation says
    (abort and rewind to the committed offsets on an abortable error, a new
    producer on a fatal one): every input is in the output exactly once for
    read_committed consumers, and the group's offsets are the input's end."""
    bootstrap, agents = cluster
    create_topic(bootstrap, "eos-in", PARTITIONS)
    create_topic(bootstrap, "eos-out", PARTITIONS)
    inputs = [f"in-{i}" for i in range(3_000)]
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i, v in enumerate(inputs):
        plain.produce("eos-in", value=v, partition=i % PARTITIONS)
    assert plain.flush(60) == 0
    # Behind a balancer one address is every broker: without this, librdkafka
    # re-bootstraps when the victim's connections drop and can then hang in
    # send_offsets_to_transaction (librdkafka #5511; see docs/clients.md).
    retry = {"reconnect.backoff.max.ms": 500, "metadata.recovery.strategy": "none"}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest", **retry})
    consumer.subscribe(["eos-in"])

    def new_producer():
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-lb",
                      "linger.ms": 10, **retry})
        p.init_transactions(60)
        return p

    def retried(call):
        """Kafka's rule for a transactional call: a retriable error is retried."""
        while True:
            try:
                return call()
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise

    def rewind():
        """Back to the group's committed offsets: what the aborted transaction read is read again."""
        for tp in consumer.committed(consumer.assignment(), timeout=30):
            consumer.seek(TopicPartition(tp.topic, tp.partition,
                                         tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))

    producer = new_producer()
    rounds, aborts, new_producers, victim = 0, 0, 0, None
    deadline = time.time() + 240
    while time.time() < deadline:
        msgs = consumer.consume(num_messages=150, timeout=1.0)
        if not msgs:
            positions = consumer.position(consumer.assignment())
            if len(positions) == PARTITIONS and sum(tp.offset for tp in positions) == len(inputs):
                break
            continue
        try:
            producer.begin_transaction()
            for m in msgs:
                assert m.error() is None, m.error()
                producer.produce("eos-out", value=m.value(), partition=m.partition())
            if rounds == 4 and victim is None:
                # Mid-transaction: records produced, offsets and commit to come.
                producer.flush(10)
                victim = next(a for a in agents if "ingest file committed" in a.log())
                victim.kill()
            retried(lambda: producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 60))
            retried(lambda: producer.commit_transaction(60))
            rounds += 1
        except KafkaException as e:
            err = e.args[0]
            if err.txn_requires_abort():
                retried(lambda: producer.abort_transaction(60))
                aborts += 1
            else:
                # Fatal (fenced, or a state the producer cannot leave): a new
                # producer's InitProducerId aborts what the old one left open.
                producer = new_producer()
                new_producers += 1
            rewind()
    consumer.close()
    assert victim is not None and rounds > 4, (rounds, aborts, new_producers)

    out = kcat("-C", "-b", bootstrap, "-t", "eos-out", "-o", "beginning", "-e", "-q",
               "-X", "isolation.level=read_committed", "-f", "%s\n").splitlines()
    assert len(out) == len(set(out)), f"{len(out) - len(set(out))} outputs twice ({aborts} aborts, {new_producers} new producers)"
    assert sorted(out) == sorted(inputs)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos"})
    committed = c.committed([TopicPartition("eos-in", p) for p in range(PARTITIONS)], timeout=30)
    assert sum(tp.offset for tp in committed) == len(inputs)
    c.close()
    # Another agent carried on the transactions after the victim died.
    assert any("ingest file committed" in a.log() for a in agents if a is not victim)


def test_metastore_kill_9_mid_produce(tmp_path, metastore):
    """The shared metastore dies (kill -9) and comes back mid-run: agents retry
    their commits (idempotent by object key), the idempotent producer retries
    its requests, and every acknowledged record is stored exactly once."""
    workdir = tmp_path / "agent"
    workdir.mkdir()
    agent = Agent(workdir, "--metastore", metastore.address, "--flush-interval", "50ms").start()
    try:
        create_topic(agent.bootstrap, "meta-crash", PARTITIONS)
        values = [f"mc-{i}" for i in range(20_000)]
        acked, failed = [], []
        producer = Producer({"bootstrap.servers": agent.bootstrap, "enable.idempotence": True,
                             "linger.ms": 10, "message.timeout.ms": 120_000})

        def produce():
            for start in range(0, len(values), 500):
                for i in range(start, start + 500):
                    producer.produce("meta-crash", value=values[i], partition=i % PARTITIONS,
                                     on_delivery=lambda err, msg: (failed if err else acked).append(
                                         err or msg.value().decode()))
                producer.poll(0.05)
            assert producer.flush(150) == 0

        feeder = threading.Thread(target=produce)
        feeder.start()
        # Kill it once the producer is well under way (not after a fixed time:
        # a loaded machine may take a while to get the first batch acknowledged).
        deadline = time.time() + 30
        while len(acked) < 1000 and time.time() < deadline:
            time.sleep(0.05)
        metastore.kill()
        assert 0 < len(acked) < len(values), "the metastore must die mid-run"
        time.sleep(1.0)  # commits pile up and are retried meanwhile
        metastore.start()
        feeder.join()
        assert not failed, failed[:3]
        assert sorted(acked) == sorted(values)
        check_partitions(kcat_consume(agent.bootstrap, "meta-crash"), values)
    finally:
        agent.stop()
