"""The rolling restart of docs/operate/upgrades.md, as written: every
metastore node in turn (followers first, the leader last, each caught up
before the next), then every agent in turn (SIGTERM, ready again before
the next), behind HAProxy with the compose file's health check, while an
idempotent producer keeps producing. Nothing acknowledged is lost or
stored twice, and the producer is never refused."""

import re
import shutil
import subprocess
import threading
import time

from confluent_kafka import Producer

from check import check_partitions
from clients import create_topic, kcat_consume
from conftest import ROOT, Agent, MetaNode, free_port
from test_metastore_raft import statuses, wait_for_leader, wait_until_caught_up

PARTITIONS = 4


def balancer(tmp_path, agents, port):
    """HAProxy with deploy/compose/haproxy.cfg's settings on `port`, over `agents`."""
    config = (ROOT / "deploy" / "compose" / "haproxy.cfg").read_text()
    config = re.sub(r"^\s*server .*\n", "", config, flags=re.M)
    config += "".join(f"    server agent-{n} {a.bootstrap} port {a.admin_port}\n"
                      for n, a in enumerate(agents))
    config = re.sub(r"^(\s*bind ):9092", rf"\g<1>127.0.0.1:{port}", config, flags=re.M)
    (tmp_path / "haproxy.cfg").write_text(config)
    proc = subprocess.Popen([shutil.which("haproxy"), "-f", str(tmp_path / "haproxy.cfg"), "-db"],
                            stdout=open(tmp_path / "haproxy.log", "w"), stderr=subprocess.STDOUT)
    return f"127.0.0.1:{port}", proc


def wait_ready(agent, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if agent.admin("/readyz")[0] == 200:
            return
        time.sleep(0.2)
    raise AssertionError(f"agent not ready within {timeout}s:\n{agent.log()[-3000:]}")


def test_a_rolling_restart_under_load_loses_nothing(tmp_path):
    ports = {n: free_port() for n in (1, 2, 3)}
    peers = ",".join(f"{n}=127.0.0.1:{p}" for n, p in ports.items())
    nodes = [MetaNode(tmp_path, n, p, "--peers", peers).start() for n, p in ports.items()]
    cluster = ",".join(n.address for n in nodes)
    agents, lb = [], None
    try:
        wait_for_leader(nodes)
        lb_port = free_port()
        for n in range(3):
            (tmp_path / f"agent{n}").mkdir()
            agents.append(Agent(tmp_path / f"agent{n}", "--metastore", cluster,
                                "--object-store", f"file://{tmp_path / 'objects'}",
                                "--discovery", "load-balancer", "--advertise", f"127.0.0.1:{lb_port}",
                                "--flush-interval", "50ms").start())
        for a in agents:
            wait_ready(a)
        bootstrap, lb = balancer(tmp_path, agents, lb_port)
        time.sleep(2.5)  # the balancer's checks: rise 2, every second
        create_topic(bootstrap, "rolling", PARTITIONS)

        acked, failed, values = [], [], []
        stop = threading.Event()

        def delivered(err, msg):
            (failed if err else acked).append(err or msg.value().decode())

        def produce():
            producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                 "linger.ms": 10, "message.timeout.ms": 120_000,
                                 "metadata.recovery.strategy": "none"})
            i = 0
            while not stop.is_set():
                for _ in range(50):
                    values.append(f"r-{i}")
                    producer.produce("rolling", key=f"k{i % 13}", value=f"r-{i}", on_delivery=delivered)
                    i += 1
                producer.poll(0.05)
            assert producer.flush(150) == 0

        feeder = threading.Thread(target=produce)
        feeder.start()
        time.sleep(2)

        # 1. Metastore nodes: followers first, the leader last.
        leader = wait_for_leader(nodes)
        for node in sorted(nodes, key=lambda n: n.id == leader):
            node.stop()
            node.start()
            wait_for_leader(nodes)
            wait_until_caught_up(nodes, node.id)
        # 2. Agents, one at a time, each ready before the next.
        for agent in agents:
            agent.stop()
            agent.start()
            wait_ready(agent)
            time.sleep(2.5)  # back in the balancer's pool
        time.sleep(2)
        stop.set()
        feeder.join()

        assert not failed, failed[:3]
        assert len(acked) == len(values) and len(values) > 1000, (len(acked), len(values))
        rows = kcat_consume(bootstrap, "rolling")
        check_partitions(rows, values)  # each acknowledged record exactly once
        assert len(statuses(nodes)) == 3
    finally:
        if lb:
            lb.terminate()
            lb.wait(timeout=10)
        for a in agents:
            a.stop()
        for n in nodes:
            n.stop()
