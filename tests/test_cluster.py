"""Several stateless agents in separate processes share one bucket (the local
S3 server) and one `floe metastore`, behind a real TCP load balancer (HAProxy)
that all agents advertise. An agent is killed with -9 mid-produce: clients
carry on, and every acknowledged record is read back exactly once."""

import shutil
import subprocess
import threading
import time

import pytest
from confluent_kafka import Producer

from check import check_partitions
from conftest import Agent, free_port
from clients import create_topic, kcat_consume

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
                            env={**CREDENTIALS, "FLOE_LOG": "info,floe_agent::batcher=debug"}).start())
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
