"""Thin helpers over the real clients the tests drive."""

import subprocess

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def create_topic(bootstrap, name, partitions):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def kcat(*args, input=None, timeout=600):
    """Runs kcat; fails the test on a non-zero exit or a delivery failure."""
    done = subprocess.run(
        ["kcat", *args], input=input, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"kcat {args} failed: {done.stderr}"
    assert "Delivery failed" not in done.stderr, done.stderr
    return done.stdout


def kcat_consume(bootstrap, topic):
    """(partition, offset, value) of every record, read from the beginning to the end."""
    out = kcat("-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
               "-f", "%p %o %s\n")
    rows = []
    for line in out.splitlines():
        partition, offset, value = line.split(" ", 2)
        rows.append((int(partition), int(offset), value))
    return rows


def python_consume(bootstrap, topic, partitions):
    """Same as kcat_consume, with kafka-python assigned to every partition."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    end = consumer.end_offsets(tps)
    rows = []
    try:
        while any(consumer.position(tp) < end[tp] for tp in tps):
            for tp, records in consumer.poll(timeout_ms=2000).items():
                rows.extend((tp.partition, r.offset, r.value.decode()) for r in records)
    finally:
        consumer.close()
    return rows
