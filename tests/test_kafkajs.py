"""kafkajs: every codec, 100,000 records each; offsets seen through its admin
client (ListOffsets); records read back by kcat and kafka-python.

kafkajs has no consumer without consumer groups, which floe does not serve yet,
so its records are consumed here by the other two clients."""

import json
import pathlib
import subprocess

from check import check_partitions
from clients import CODECS, kcat_consume, python_consume

NODE_DIR = pathlib.Path(__file__).resolve().parent / "node"
RECORDS = 100_000
PARTITIONS = 3


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
        check_partitions(kcat_consume(agent.bootstrap, topic), values)
        if codec == "none":
            check_partitions(python_consume(agent.bootstrap, topic, PARTITIONS), values)
