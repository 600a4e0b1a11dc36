"""The metastore in PostgreSQL (`--metastore postgres://...` on agents,
`floe metastore --store postgres://...` nodes), under real faults: the agent
whose node leads killed with -9 under load, PostgreSQL itself restarted under
load, and a leading node frozen (SIGSTOP) until another took over, then
resumed: it must never write again. Nothing acknowledged may be lost."""

import signal
import threading
import time

from confluent_kafka import Producer

from check import check_partitions
from clients import create_topic, kcat_consume
from conftest import Agent, MetaNode, Postgres, free_port
from test_metastore_raft import floe_metastore, statuses


def agent_on(tmp_path, name, url, *extra):
    workdir = tmp_path / name
    workdir.mkdir()
    listen = f"127.0.0.1:{free_port()}"
    agent = Agent(workdir, "--metastore", url, "--metastore-listen", listen,
                  "--object-store", f"file://{tmp_path / 'objects'}", "--flush-interval", "50ms", *extra)
    agent.metastore_address = listen
    return agent.start()


def leader_among(addresses, timeout=30):
    """The address of the node that leads, once one does."""
    deadline = time.time() + timeout
    seen = {}
    while time.time() < deadline:
        out = floe_metastore("status", "--cluster", ",".join(addresses), check=False).stdout
        seen = {}
        for line in out.splitlines():
            words = line.split()
            if len(words) > 1 and "=" in words[1]:
                seen[words[0].rstrip(":")] = dict(w.split("=", 1) for w in words[1:])
        leaders = [a for a, s in seen.items() if s.get("role") == "Leader"]
        if leaders:
            return leaders[0], seen
        time.sleep(0.2)
    raise AssertionError(f"no metastore node leads within {timeout}s: {seen}")


class Load:
    """An idempotent producer sending `count` values to `bootstrap` in a thread."""

    def __init__(self, bootstrap, topic, name, count):
        self.values = [f"{name}-{i}" for i in range(count)]
        self.acked, self.failed = [], []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, args=(bootstrap, topic))

    def delivered(self, err, msg):
        with self.lock:
            (self.failed if err else self.acked).append(err or msg.value().decode())

    def run(self, bootstrap, topic):
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                             "linger.ms": 10, "message.timeout.ms": 120_000})
        for start in range(0, len(self.values), 200):
            for v in self.values[start:start + 200]:
                producer.produce(topic, value=v, on_delivery=self.delivered)
            producer.poll(0.05)
        assert producer.flush(150) == 0

    def start(self):
        self.thread.start()
        return self

    def wait_for(self, acked, timeout=60):
        deadline = time.time() + timeout
        while len(self.acked) < acked and time.time() < deadline:
            time.sleep(0.05)
        assert len(self.acked) >= acked, f"only {len(self.acked)} acknowledged"

    def join(self):
        self.thread.join()
        assert not self.failed, self.failed[:3]
        assert sorted(self.acked) == sorted(self.values)


def test_agents_share_a_metastore_in_postgres_with_one_flag(tmp_path, postgres, postgres_server):
    """Two agents given the same URL serve one cluster: a topic made on one
    is produced to on one and read on the other; one node leads, the other
    stands by and its agent's calls reach the leader; the log is in the
    database, bounded by snapshots."""
    a = agent_on(tmp_path, "a", postgres)
    first, _ = leader_among([a.metastore_address])
    assert first == a.metastore_address
    b = agent_on(tmp_path, "b", postgres)
    try:
        create_topic(b.bootstrap, "shared", 3)
        load = Load(b.bootstrap, "shared", "b", 3000).start()
        load.join()
        check_partitions(kcat_consume(a.bootstrap, "shared"), load.values)
        leader, seen = leader_among([a.metastore_address, b.metastore_address])
        assert leader == a.metastore_address
        assert seen[b.metastore_address]["role"] == "Standby", seen
        assert seen[leader]["backend"].startswith("postgres://127.0.0.1:"), seen
        # The standby follows the log: no entry it has not applied, shortly.
        deadline = time.time() + 10
        while seen[b.metastore_address]["lag"] != "0" and time.time() < deadline:
            time.sleep(0.2)
            _, seen = leader_among([a.metastore_address, b.metastore_address])
        assert seen[b.metastore_address]["lag"] == "0", seen
        [[entries]] = postgres_server.sql(postgres, "SELECT count(*) FROM floe_log")
        assert int(entries) > 0
        # The leading agent's node counts its appends and their round trips.
        status, metrics = a.admin("/metrics")
        assert status == 200
        appends = [line for line in metrics.splitlines()
                   if line.startswith('floe_metastore_database_call_duration_seconds_count{op="append"}')]
        assert appends and float(appends[0].split()[-1]) > 0, appends
    finally:
        a.stop()
        b.stop()


def test_the_leading_agent_killed_under_load_loses_nothing(tmp_path, postgres):
    """kill -9 of the agent whose node leads, while another agent takes
    produce load: that agent's node takes the lease when it lapses, and
    every record the producer was told was written is read back once."""
    a = agent_on(tmp_path, "a", postgres)
    leader_among([a.metastore_address])
    b = agent_on(tmp_path, "b", postgres)
    try:
        create_topic(b.bootstrap, "kill-load", 4)
        load = Load(b.bootstrap, "kill-load", "b", 12_000).start()
        load.wait_for(2_000)
        a.kill()
        killed_at = len(load.acked)
        leader, _ = leader_among([b.metastore_address])
        assert leader == b.metastore_address
        load.join()
        assert killed_at < len(load.values), "the leader must die mid-run"
        check_partitions(kcat_consume(b.bootstrap, "kill-load"), load.values)
    finally:
        a.stop()
        b.stop()


def test_postgres_restarted_under_load_loses_nothing(tmp_path):
    """The database stops (fast shutdown: connections cut) for a few seconds
    under produce load: the agent waits for it, and nothing acknowledged
    is lost or written twice."""
    server = Postgres().start()
    url = server.database("restarted")
    agent = agent_on(tmp_path, "a", url)
    try:
        create_topic(agent.bootstrap, "pg-restart", 2)
        load = Load(agent.bootstrap, "pg-restart", "p", 10_000).start()
        load.wait_for(2_000)
        server.stop()
        stopped_at = len(load.acked)
        time.sleep(3)
        server.start()
        load.join()
        assert stopped_at < len(load.values), "the database must stop mid-run"
        check_partitions(kcat_consume(agent.bootstrap, "pg-restart"), load.values)
    finally:
        agent.stop()
        server.stop()


def test_a_frozen_leader_resumed_never_writes_again(tmp_path, postgres, postgres_server):
    """Two `floe metastore --store` nodes: the leader is frozen (SIGSTOP)
    until the other has taken the lease and writes, then resumed. Its term
    is fenced: no entry of its term follows the new leader's first, it
    stands by, and the records produced throughout are all there once."""
    nodes = [MetaNode(tmp_path, n, free_port(), "--store", postgres, "--lease", "2s")
             for n in (1, 2)]
    # Node 1 first, so that it leads.
    first, _ = leader_among([nodes[0].start().address])
    assert first == nodes[0].address
    nodes[1].start()
    cluster = ",".join(n.address for n in nodes)
    agent = agent_on(tmp_path, "a", cluster)
    try:
        create_topic(agent.bootstrap, "frozen", 2)
        load = Load(agent.bootstrap, "frozen", "p", 10_000).start()
        load.wait_for(1_000)
        [[old_term]] = postgres_server.sql(postgres, "SELECT term FROM floe_lease")
        nodes[0].proc.send_signal(signal.SIGSTOP)
        leader, _ = leader_among([nodes[1].address])
        assert leader == nodes[1].address
        acked = len(load.acked)
        load.wait_for(acked + 1_000)  # the new leader writes
        nodes[0].proc.send_signal(signal.SIGCONT)
        load.join()
        _, seen = leader_among([n.address for n in nodes])
        assert seen[nodes[0].address]["role"] == "Standby", seen
        [[new_term]] = postgres_server.sql(postgres, "SELECT term FROM floe_lease")
        assert int(new_term) > int(old_term)
        [[stale]] = postgres_server.sql(postgres, f"""
            SELECT count(*) FROM floe_log WHERE term <= {old_term} AND log_index >
              (SELECT coalesce(min(log_index), 0) FROM floe_log WHERE term > {old_term})""")
        assert stale == "0", f"{stale} entries of the frozen leader's term after its successor's"
        check_partitions(kcat_consume(agent.bootstrap, "frozen"), load.values)
    finally:
        agent.stop()
        for n in nodes:
            n.stop()
