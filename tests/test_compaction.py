"""The background compactor rewrites ingest files into segments and GC deletes
them, while consumers keep reading the same records at the same offsets."""

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
    assert len(object_files(agent, "ingest")) == 12

    # ...then restart with it on: one pass compacts each partition's 12 extents.
    agent.extra_args = ["--compaction-interval", "1s", "--compaction-min-extents", "4",
                        "--gc-grace", "0s", "--max-fetch-bytes", "1KiB"]
    agent.restart()
    deadline = time.time() + 60
    while time.time() < deadline and object_files(agent, "ingest"):
        time.sleep(0.5)
    assert not object_files(agent, "ingest"), "gc left ingest files behind"
    assert len(object_files(agent, "segment")) == 2, "expected one segment per partition"
    assert "compacted" in agent.log()
    assert "gc deleted unreferenced objects" in agent.log()

    assert sorted(kcat_consume(agent.bootstrap, "compacted")) == before
    agent.restart()
    assert sorted(kcat_consume(agent.bootstrap, "compacted")) == before
    # New data after compaction continues the offsets.
    kcat("-P", "-b", agent.bootstrap, "-t", "compacted", "-p", "0", input="after-1\n")
    rows = kcat_consume(agent.bootstrap, "compacted")
    last = max(o for p, o, _ in before if p == 0)
    assert (0, last + 1, "after-1") in rows
