"""`floe topics` and `floe groups` against a running agent: tables and JSON
a script can read, a non-zero exit and one clear line on error, offsets
reset with a dry run first."""

import json
import subprocess
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, Producer

from clients import kcat
from conftest import FLOE


def floe(agent, *args, expect_ok=True):
    done = subprocess.run([FLOE, *args, "--bootstrap-server", agent.bootstrap],
                          capture_output=True, text=True, timeout=60)
    if expect_ok:
        assert done.returncode == 0, done.stderr
    return done


def floe_json(agent, *args):
    return json.loads(floe(agent, *args[:1], "--output", "json", *args[1:]).stdout)


def test_topics_are_created_listed_described_altered_and_deleted(agent):
    floe(agent, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=3600000")
    listed = floe_json(agent, "topics", "list")["topics"]
    assert [(t["topic"], t["partitions"]) for t in listed] == [("orders", 3)]
    assert "orders" in floe(agent, "topics", "list").stdout

    # A replication factor, as Kafka's tools pass it: taken, and ignored
    # with a note (the object store keeps the copies).
    replicated = floe(agent, "topics", "create", "payments", "--replication-factor", "3")
    assert "replication factor 3 ignored" in replicated.stderr, replicated.stderr
    floe(agent, "topics", "delete", "payments")

    # ACLs on an agent without them: Kafka's error, and how to turn them on.
    no_acls = floe(agent, "acls", "list", expect_ok=False)
    assert no_acls.returncode != 0 and "--acls" in no_acls.stderr, no_acls.stderr

    # Already there: one line naming Kafka's error, and a failed exit.
    again = floe(agent, "topics", "create", "orders", expect_ok=False)
    assert again.returncode != 0 and "TopicAlreadyExists" in again.stderr, again.stderr
    assert len(again.stderr.strip().splitlines()) == 1, again.stderr

    p = Producer({"bootstrap.servers": agent.bootstrap})
    for i in range(10):
        p.produce("orders", value=b"x", partition=i % 3)
    assert p.flush(30) == 0
    described = floe_json(agent, "topics", "describe", "orders")
    ends = {row["partition"]: row["log_end"] for row in described["partitions"]}
    assert ends == {0: 4, 1: 3, 2: 3}, described
    assert {"topic": "orders", "config": "retention.ms", "value": "3600000"} in described["configs"]

    floe(agent, "topics", "alter", "orders", "--partitions", "5", "--config", "cleanup.policy=delete",
         "--delete-config", "retention.ms")
    described = floe_json(agent, "topics", "describe", "orders")
    assert len(described["partitions"]) == 5
    assert [c["config"] for c in described["configs"]] == ["cleanup.policy"]

    missing = floe(agent, "topics", "describe", "nothing", expect_ok=False)
    assert missing.returncode != 0 and "UnknownTopicOrPartition" in missing.stderr
    floe(agent, "topics", "delete", "orders")
    assert floe_json(agent, "topics", "list")["topics"] == []


def test_groups_are_described_with_lag_reset_and_deleted(agent):
    floe(agent, "topics", "create", "events", "--partitions", "2")
    p = Producer({"bootstrap.servers": agent.bootstrap})
    for i in range(20):
        p.produce("events", value=b"e", partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "readers",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "client.id": "reader-1"})
    c.subscribe(["events"])
    read = 0
    deadline = time.time() + 30
    while read < 15 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            read += 1
            if read <= 12:
                c.commit(message=m, asynchronous=False)
    described = floe_json(agent, "groups", "describe", "readers")
    rows = {r["partition"]: r for r in described["offsets"]}
    assert sum(r["lag"] for r in rows.values()) == 20 - 12, described
    assert {r["client_id"] for r in rows.values()} == {"reader-1"}
    assert described["members"][0]["state"] == "Stable"
    assert {"group": "readers", "type": "classic", "state": "Stable", "protocol_type": "consumer"} in \
        floe_json(agent, "groups", "list")["groups"]

    # A group with members: its offsets cannot be reset, nor itself deleted.
    busy = floe(agent, "groups", "reset-offsets", "readers", "--topic", "events", "--to-earliest",
                expect_ok=False)
    assert busy.returncode != 0 and "Stable" in busy.stderr, busy.stderr
    busy = floe(agent, "groups", "delete", "readers", expect_ok=False)
    assert busy.returncode != 0 and "NonEmptyGroup" in busy.stderr, busy.stderr
    c.close()

    # A dry run by default: the plan, nothing committed.
    plan = floe_json(agent, "groups", "reset-offsets", "readers", "--topic", "events:0",
                     "--shift-by", "-2")["plan"]
    before = {r["partition"]: r["current_offset"] for r in plan}
    assert [r["new_offset"] for r in plan] == [before[0] - 2]
    after = floe_json(agent, "groups", "describe", "readers")["offsets"]
    assert {r["partition"]: r["current_offset"] for r in after}[0] == before[0]
    floe(agent, "groups", "reset-offsets", "readers", "--topic", "events", "--to-earliest", "--execute")
    after = floe_json(agent, "groups", "describe", "readers")["offsets"]
    assert {r["current_offset"] for r in after} == {0}
    assert {r["lag"] for r in after} == {10}
    floe(agent, "groups", "reset-offsets", "readers", "--topic", "events", "--to-datetime",
         "2000-01-01T00:00:00Z", "--execute")
    floe(agent, "groups", "reset-offsets", "readers", "--topic", "events", "--to-latest", "--execute")
    after = floe_json(agent, "groups", "describe", "readers")["offsets"]
    assert {r["lag"] for r in after} == {0}

    floe(agent, "groups", "delete", "readers")
    gone = floe(agent, "groups", "describe", "readers", expect_ok=False)
    assert gone.returncode != 0 and "does not exist" in gone.stderr


def test_the_tools_work_against_a_cluster(peer_agents):
    first, second = peer_agents(2, "--flush-interval", "20ms")
    floe(first, "topics", "create", "shared", "--partitions", "2")
    assert [t["topic"] for t in floe_json(second, "topics", "list")["topics"]] == ["shared"]
    c = Consumer({"bootstrap.servers": first.bootstrap, "group.id": "across",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    p = Producer({"bootstrap.servers": second.bootstrap})
    for i in range(4):
        p.produce("shared", value=b"x", partition=i % 2)
    assert p.flush(30) == 0
    c.subscribe(["shared"])
    deadline = time.time() + 30
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            c.commit(message=m, asynchronous=False)
            break
    # The group, joined through one agent, described through the other.
    rows = floe_json(second, "groups", "describe", "across")["offsets"]
    assert sum(r["current_offset"] is not None for r in rows) == 1, rows
    assert {r["log_end_offset"] for r in rows} == {2}
    c.close()
    floe(second, "groups", "delete", "across")
    floe(first, "topics", "delete", "shared")


def test_an_agent_says_when_its_metastore_does_not_answer(tmp_path):
    """An agent whose metastore does not answer says so at once, in one line
    naming the address, instead of serving nothing in silence; its health
    endpoints answer at once meanwhile (live, not ready, and why), and it
    serves once the metastore comes. An address that is neither host:port nor
    a PostgreSQL URL is refused before anything; a PostgreSQL server that
    does not answer is said in one line naming it."""
    from conftest import MetaNode, free_port

    admin = f"127.0.0.1:{free_port()}"
    common = ["--listen", f"127.0.0.1:{free_port()}", "--admin-listen", admin,
              "--data-dir", str(tmp_path), "--object-store", f"file://{tmp_path / 'objects'}"]
    refused = subprocess.run([FLOE, "agent", "--metastore", "mysql://db/floe", *common],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and "is neither host:port" in refused.stderr, refused.stderr
    closed = f"127.0.0.1:{free_port()}"
    refused = subprocess.run([FLOE, "agent", "--metastore", f"postgres://floe:pw@{closed}/floe", *common],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and f"PostgreSQL at postgres://{closed}/floe" in refused.stderr, \
        refused.stderr
    assert "pw" not in refused.stderr, refused.stderr

    port = free_port()
    nobody = f"127.0.0.1:{port}"
    log = tmp_path / "agent.log"
    agent = subprocess.Popen([FLOE, "agent", "--metastore", nobody, *common],
                             stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True)
    node = None
    try:
        deadline = time.time() + 10
        while time.time() < deadline and "does not answer" not in log.read_text():
            time.sleep(0.1)
        said = log.read_text()
        assert "the metastore does not answer" in said and nobody in said, said

        def probe(path):
            try:
                with urllib.request.urlopen(f"http://{admin}{path}", timeout=0.5) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()
        live, why = probe("/healthz")
        assert live == 200 and "starting" in why, why
        ready, why = probe("/readyz")
        assert ready == 503 and "metastore" in why, why
        counted, metrics = probe("/metrics")
        assert counted == 200 and "floe_build_info" in metrics, metrics

        node = MetaNode(tmp_path, 1, port).start()
        deadline = time.time() + 30
        while time.time() < deadline and probe("/readyz")[0] != 200:
            time.sleep(0.2)
        assert probe("/readyz") == (200, "ready\n"), log.read_text()
        while time.time() < deadline and "the metastore answers" not in log.read_text():
            time.sleep(0.2)
        assert "the metastore answers" in log.read_text()
    finally:
        agent.kill()
        agent.wait()
        if node:
            node.stop()


def test_the_version_names_the_commit():
    """`floe --version`: the crate's version and the commit built from."""
    import re
    shown = subprocess.run([FLOE, "--version"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    assert re.fullmatch(r"floe \d+\.\d+\.\d+ \(([0-9a-f]{12}|unknown commit)\)\n", shown.stdout), shown.stdout


def test_logs_as_json_lines_and_without_colour_off_a_terminal(tmp_path):
    """`--log-format json` writes one JSON object per line (for a log
    pipeline); text logs written to a file carry no ANSI colour codes."""
    from conftest import free_port

    for extra, check in ((["--log-format", "json"], json.loads), ([], None)):
        log = tmp_path / f"agent{len(extra)}.log"
        agent = subprocess.Popen(
            [FLOE, *extra, "agent", "--listen", f"127.0.0.1:{free_port()}",
             "--admin-listen", f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / f"d{len(extra)}")],
            stdout=open(log, "w"), stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 20
            while time.time() < deadline and "floe agent ready" not in log.read_text():
                time.sleep(0.1)
        finally:
            agent.kill()
            agent.wait()
        lines = log.read_text().splitlines()
        assert any("floe agent ready" in line for line in lines), lines
        assert not any("\x1b[" in line for line in lines), lines
        if check:
            ready = [check(line) for line in lines if "floe agent ready" in line][0]
            assert ready["level"] == "INFO" and ready["message"] == "floe agent ready", ready


def test_status_shows_the_cluster_and_says_what_is_wrong(make_agent, metastore, tmp_path):
    """`floe status`: the cluster's id and agents, the metastore group, each
    agent's health and the store; non-zero, naming it, when something is
    wrong."""
    from conftest import free_port

    objects = tmp_path / "objects"
    agent = make_agent("--metastore", metastore.address, "--object-store", f"file://{objects}")
    kcat("-P", "-b", agent.bootstrap, "-t", "seen", input="a\n")
    admin = f"127.0.0.1:{agent.admin_port}"
    args = ["status", "--metastore", metastore.address, "--object-store", f"file://{objects}"]
    status = floe_json(agent, *args, "--admin", admin)
    cluster = status["cluster"][0]
    assert cluster["cluster_id"] == (objects / "cluster-id").read_text() and cluster["agents"] == 1, status
    assert [n["role"] for n in status["metastore"]] == ["Leader"] and status["metastore"][0]["behind"] == 0
    health = status["health"][0]
    assert health["ready"] == "ready" and "commit=" in health["version"], health
    assert status["object_store"][0]["result"].startswith("ok"), status

    nobody = f"127.0.0.1:{free_port()}"
    failing = floe(agent, *args, "--admin", f"{admin},{nobody}", expect_ok=False)
    assert failing.returncode != 0, failing.stdout
    assert f"agent {nobody} does not answer" in failing.stderr and "unreachable" in failing.stdout, failing.stderr
