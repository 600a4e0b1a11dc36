"""The background compactor merges ingest files (each read once) into merged
files, then a partition's small chunks of those into segments, and GC deletes
what they replaced, while consumers keep reading the same records at the same
offsets."""

import time

from check import check_partitions
from clients import create_topic, kcat, kcat_consume


def object_files(agent, kind):
    return [p for p in (agent.workdir / "objects" / kind).rglob("*") if p.is_file()]


def test_compaction_and_gc_keep_every_record(make_agent):
    # Produce with the compactor off, so every ingest file is still there...
    # A tiny fetch cap makes consumers page through many small responses, each
    # still holding at least one whole extent (KIP-74).
    agent = make_agent("--compaction-interval", "0s", "--max-fetch-bytes", "1KiB")
    create_topic(agent.bootstrap, "compacted", 2)
    values = []
    for flush in range(12):  # one kcat run per ingest file
        batch = [f"c-{flush * 100 + i}" for i in range(100)]
        kcat("-P", "-b", agent.bootstrap, "-t", "compacted", "-K", ":", "-z", "zstd",
             input="".join(f"k{i % 7}:{v}\n" for i, v in enumerate(batch)))
        values.extend(batch)
    before = sorted(kcat_consume(agent.bootstrap, "compacted"))
    check_partitions(before, values)
    # (A run whose produce straddles a flush, on a loaded machine, makes two.)
    assert len(object_files(agent, "ingest")) >= 12

    # ...then restart with it on: one job reads the 12 ingest files into one
    # merged file holding both partitions' runs.
    compacting = ["--compaction-interval", "1s", "--compaction-min-extents", "4",
                  "--gc-grace", "0s", "--max-fetch-bytes", "1KiB"]
    agent.extra_args = compacting + ["--compaction-max-age", "1h"]
    agent.restart()
    deadline = time.time() + 60
    # (GC logs after it deleted, and after the metastore heard of it.)
    while time.time() < deadline and (object_files(agent, "ingest")
                                      or "gc deleted unreferenced objects" not in agent.log()):
        time.sleep(0.5)
    assert not object_files(agent, "ingest"), "gc left ingest files behind"
    assert len(object_files(agent, "merged")) == 1, "expected one merged file"
    assert not object_files(agent, "segment")
    assert "compacted ingest files" in agent.log()
    assert "gc deleted unreferenced objects" in agent.log()
    assert sorted(kcat_consume(agent.bootstrap, "compacted")) == before

    # Two more files are too few for a job, and young...
    for flush in range(12, 14):
        batch = [f"c-{flush * 100 + i}" for i in range(100)]
        kcat("-P", "-b", agent.bootstrap, "-t", "compacted", "-K", ":",
             input="".join(f"k{i % 7}:{v}\n" for i, v in enumerate(batch)))
        values.extend(batch)
    time.sleep(3)
    assert 2 <= len(object_files(agent, "ingest")) < 4, "fewer than compaction_min_extents"
    # ...until they are old: a job takes them, and each partition's two small
    # chunks (old too) are merged into a segment of its own, which frees
    # both merged files.
    agent.extra_args = compacting + ["--compaction-max-age", "1s"]
    agent.restart()
    deadline = time.time() + 60
    while time.time() < deadline and (object_files(agent, "ingest")
                                      or object_files(agent, "merged")):
        time.sleep(0.5)
    assert not object_files(agent, "ingest") and not object_files(agent, "merged")
    assert len(object_files(agent, "segment")) == 2, "expected one segment per partition"
    before = sorted(kcat_consume(agent.bootstrap, "compacted"))
    check_partitions(before, values)

    agent.restart()
    assert sorted(kcat_consume(agent.bootstrap, "compacted")) == before
    # New data after compaction continues the offsets.
    kcat("-P", "-b", agent.bootstrap, "-t", "compacted", "-p", "0", input="after-1\n")
    rows = kcat_consume(agent.bootstrap, "compacted")
    last = max(o for p, o, _ in before if p == 0)
    assert (0, last + 1, "after-1") in rows


def test_agents_share_compaction_through_leases(tmp_path, peer_agents):
    """Three agents on one bucket and metastore, all compacting every 300ms:
    one of them at a time holds the jobs over ingest files, so each file is
    read by one agent into one merged file (no agent uploads a file in
    vain), one agent at a time collects garbage, and every record is still
    read back once."""
    agents = peer_agents(3, "--compaction-min-extents", "2", "--gc-grace", "0s",
                         "--compaction-interval", "0s")
    create_topic(agents[0].bootstrap, "shared", 6)
    values = []
    for flush in range(8):  # one ingest file per kcat run, spread over the agents
        batch = [f"s-{flush * 60 + i}" for i in range(60)]
        kcat("-P", "-b", agents[flush % 3].bootstrap, "-t", "shared", "-K", ":",
             input="".join(f"k{i}:{v}\n" for i, v in enumerate(batch)))
        values.extend(batch)
    before = sorted(kcat_consume(agents[0].bootstrap, "shared"))
    check_partitions(before, values)

    # All three compact every 300ms; slow object-store requests (100ms
    # each) make their passes overlap.
    for a in agents:
        a.extra_args += ["--compaction-interval", "300ms", "--inject-faults", "latency=100ms"]
        a.restart()
    ingest = tmp_path / "objects" / "ingest"
    deadline = time.time() + 60
    def collected():
        return any("gc deleted unreferenced objects" in a.log() for a in agents)
    while time.time() < deadline and (any(p.is_file() for p in ingest.rglob("*"))
                                      or not collected()):
        time.sleep(0.3)
    assert not any(p.is_file() for p in ingest.rglob("*")), "ingest files left behind"

    logs = [a.log() for a in agents]
    jobs = [n for n, log in enumerate(logs) if "compacted ingest files" in log]
    assert len(jobs) == 1, jobs
    merged = [p for p in (tmp_path / "objects" / "merged").rglob("*") if p.is_file()]
    assert len(merged) == 1, len(merged)
    changed = sum(log.count("some runs changed while being compacted") for log in logs)
    assert changed == 0, f"{changed} jobs raced another compactor"
    collectors = [n for n, log in enumerate(logs) if "gc deleted unreferenced objects" in log]
    assert len(collectors) == 1, collectors
    assert sorted(kcat_consume(agents[1].bootstrap, "shared")) == before
