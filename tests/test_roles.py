"""Roles: an agent with only the kafka role serves clients and runs no
background work; one with only the jobs role (`--roles jobs`, as `floe
compactor` runs) compacts and collects garbage for it, with no Kafka listener."""

import socket
import time

import pytest

from check import check_partitions
from clients import create_topic, kcat, kcat_consume


def test_a_jobs_agent_does_the_background_work_of_a_kafka_agent(tmp_path, peer_agents):
    common = ["--compaction-interval", "300ms", "--compaction-min-extents", "2", "--gc-grace", "0s"]
    (kafka,) = peer_agents(1, *common, "--roles", "kafka")
    (jobs,) = peer_agents(1, *common, "--roles", "jobs")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", jobs.port), timeout=1).close()

    create_topic(kafka.bootstrap, "roles", 2)
    values = []
    for flush in range(4):  # one ingest file per kcat run
        batch = [f"r-{flush * 50 + i}" for i in range(50)]
        kcat("-P", "-b", kafka.bootstrap, "-t", "roles", "-K", ":",
             input="".join(f"k{i}:{v}\n" for i, v in enumerate(batch)))
        values.extend(batch)

    ingest = tmp_path / "objects" / "ingest"
    deadline = time.time() + 60
    while time.time() < deadline and (any(p.is_file() for p in ingest.rglob("*"))
                                      or "gc deleted unreferenced objects" not in jobs.log()):
        time.sleep(0.3)
    assert not any(p.is_file() for p in ingest.rglob("*")), "ingest files left behind"
    assert "compacted ingest files" in jobs.log()
    assert "compacted" not in kafka.log() and "gc deleted" not in kafka.log()
    assert [p for p in (tmp_path / "objects" / "merged").rglob("*") if p.is_file()]

    rows = kcat_consume(kafka.bootstrap, "roles")
    check_partitions(rows, values)
