"""Metastore backup and restore, as docs/operate/backup.md has them: a
backup taken from a running group, the records it covers deleted and
garbage-collected in the running cluster, the group destroyed, the backup
restored into a new group, and every record acknowledged before the backup
read back at its offset. The backup's hold on GC is what keeps the objects:
with a hold that has expired, GC deletes them."""

import shutil
import subprocess
import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from clients import create_topic, kcat, kcat_consume
from conftest import FLOE, Agent, MetaNode, free_port

PARTITIONS = 3
# Compaction never merges (too few files, never old enough): every object
# written before the backup is live when it is taken. GC runs every pass.
NO_MERGES = ("--compaction-interval", "300ms", "--compaction-min-extents", "100000",
             "--compaction-max-age", "1h", "--gc-grace", "0s", "--flush-interval", "20ms")


def floe(*args):
    done = subprocess.run([FLOE, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def produce(bootstrap, topic, prefix, runs):
    for run in range(runs):  # a file per run
        kcat("-P", "-b", bootstrap, "-t", topic, "-K", ":",
             input="".join(f"k{i}:{prefix}-{run}-{i}\n" for i in range(100)))


def objects_in(folder):
    return {p.relative_to(folder) for p in folder.rglob("*") if p.is_file()
            and p.parts[len(folder.parts)] in ("ingest", "merged", "segment")}


def delete_everything(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [TopicPartition(topic, p, -1) for p in range(PARTITIONS)]  # -1: the high watermark
    for future in admin.delete_records(wanted).values():
        future.result(timeout=30)


@pytest.mark.parametrize("hold", ["1h", "1s"])
def test_a_restored_metastore_reads_what_was_acknowledged_before_its_backup(tmp_path, hold):
    objects = tmp_path / "objects"
    node = MetaNode(tmp_path, 1, free_port()).start()
    (tmp_path / "agent").mkdir()
    agent = Agent(tmp_path / "agent", "--metastore", node.address,
                  "--object-store", f"file://{objects}", *NO_MERGES)
    try:
        agent.start()
        create_topic(agent.bootstrap, "kept", PARTITIONS)
        produce(agent.bootstrap, "kept", "before", 3)
        before = kcat_consume(agent.bootstrap, "kept")
        assert len(before) == 300
        backup = tmp_path / "metastore.backup"
        said = floe("metastore", "backup", "--cluster", node.address, "--to", str(backup),
                    "--hold", hold)
        assert "backup of cluster" in said and backup.exists(), said
        at_backup = objects_in(objects)
        assert at_backup, "the records are in objects"

        # The running cluster frees every object the backup refers to, and
        # writes on; GC runs every 300 ms with no grace.
        time.sleep(1.5)  # a 1s hold has expired
        delete_everything(agent.bootstrap, "kept")
        produce(agent.bootstrap, "kept", "after", 1)
        time.sleep(3)
        if hold == "1s":
            assert at_backup - objects_in(objects), "without a hold in force, GC deletes them"
            return
        assert at_backup <= objects_in(objects), "GC deleted an object the backup refers to"

        # The metastore is lost; the backup is restored into a new group.
        agent.stop()
        node.kill()
        shutil.rmtree(tmp_path / "node1")
        restored_dir = tmp_path / "restored"
        port = free_port()
        said = floe("metastore", "restore", "--from", str(backup),
                    "--path", str(restored_dir / "node1" / "meta.redb"),
                    "--id", "1", "--address", f"127.0.0.1:{port}")
        assert "restored cluster" in said, said
        node = MetaNode(restored_dir, 1, port).start()
        agent = Agent(tmp_path / "agent", "--metastore", node.address,
                      "--object-store", f"file://{objects}", *NO_MERGES)
        agent.start()
        assert kcat_consume(agent.bootstrap, "kept") == before
        # And it goes on from there.
        produce(agent.bootstrap, "kept", "restored", 1)
        rows = kcat_consume(agent.bootstrap, "kept")
        assert len(rows) == 400 and set(before) <= set(rows)
    finally:
        agent.stop()
        node.stop()


def test_an_embedded_metastore_is_backed_up_from_its_file(tmp_path):
    """The embedded metastore's file, its agent stopped."""
    (tmp_path / "a").mkdir()
    agent = Agent(tmp_path / "a").start()
    try:
        create_topic(agent.bootstrap, "kept", PARTITIONS)
        produce(agent.bootstrap, "kept", "before", 1)
        before = kcat_consume(agent.bootstrap, "kept")
    finally:
        agent.stop()
    backup = tmp_path / "embedded.backup"
    floe("metastore", "backup", "--path", str(tmp_path / "a" / "data" / "metastore.redb"),
         "--to", str(backup))
    # A damaged backup is refused, and nothing is written.
    damaged = bytearray(backup.read_bytes())
    damaged[len(damaged) // 2] ^= 1
    (tmp_path / "damaged.backup").write_bytes(bytes(damaged))
    refused = subprocess.run([FLOE, "metastore", "restore", "--from", str(tmp_path / "damaged.backup"),
                              "--path", str(tmp_path / "nothing.redb")], capture_output=True, text=True)
    assert refused.returncode != 0 and "damaged" in refused.stderr, refused.stderr
    assert not (tmp_path / "nothing.redb").exists()

    restored = tmp_path / "restored.redb"
    floe("metastore", "restore", "--from", str(backup), "--path", str(restored),
         "--address", "in-process")
    agent = Agent(tmp_path / "a", "--metastore-path", str(restored)).start()
    try:
        assert kcat_consume(agent.bootstrap, "kept") == before
    finally:
        agent.stop()
