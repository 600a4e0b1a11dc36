"""kafkajs: every codec, 100,000 records each; offsets seen through its admin
client (ListOffsets); records read back by a kafkajs group consumer (kafkajs
has no other kind), by kcat and by kafka-python."""

import json
import pathlib
import subprocess

from check import check_partitions
from clients import CODECS, kcat, kcat_consume, python_consume

NODE_DIR = pathlib.Path(__file__).resolve().parent / "node"
RECORDS = 100_000
PARTITIONS = 3


def kafkajs_consume(bootstrap, topic, group, count):
    done = subprocess.run(
        ["node", str(NODE_DIR / "consume.js"), bootstrap, topic, group, str(count)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = []
    for line in done.stdout.splitlines():
        if line:
            partition, offset, value = line.split(" ", 2)
            rows.append((int(partition), int(offset), value))
    return rows


def test_all_codecs(agent):
    for codec in CODECS:
        topic = f"js-{codec}"
        done = subprocess.run(
            ["node", str(NODE_DIR / "produce.js"), agent.bootstrap, topic, str(PARTITIONS),
             str(RECORDS), codec],
            capture_output=True, text=True, timeout=600,
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        # Each acknowledged batch starts where the partition's previous one ended.
        next_offset = {p: 0 for p in range(PARTITIONS)}
        for partition, base, count in seen["acked"]:
            assert base == next_offset[partition]
            next_offset[partition] += count
        highs = {o["partition"]: int(o["high"]) for o in seen["offsets"]}
        lows = {o["partition"]: int(o["low"]) for o in seen["offsets"]}
        assert highs == next_offset
        assert set(lows.values()) == {0}
        assert {int(o["offset"]) for o in seen["byTime"]} == {0}

        values = [f"{codec}-{i}" for i in range(RECORDS)]
        check_partitions(kafkajs_consume(agent.bootstrap, topic, f"group-{codec}", RECORDS), values)
        check_partitions(kcat_consume(agent.bootstrap, topic), values)
        if codec == "none":
            check_partitions(python_consume(agent.bootstrap, topic, PARTITIONS), values)


def test_group_offsets_are_committed(agent):
    """A second consumer of the same group starts where the first one committed."""
    subprocess.run(["node", str(NODE_DIR / "produce.js"), agent.bootstrap, "resume", "2", "1000", "none"],
                   check=True, capture_output=True, timeout=120)
    first = kafkajs_consume(agent.bootstrap, "resume", "resumers", 1000)
    check_partitions(first, [f"none-{i}" for i in range(1000)])
    # Produce 10 more into "resume" with kcat, then the group reads only those.
    kcat("-P", "-b", agent.bootstrap, "-t", "resume", "-p", "0",
         input="".join(f"later-{i}\n" for i in range(10)))
    second = kafkajs_consume(agent.bootstrap, "resume", "resumers", 10)
    assert [v for _, _, v in second] == [f"later-{i}" for i in range(10)]
