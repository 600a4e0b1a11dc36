"""Record-count bombs: a compressed batch of a hundred kilobytes that holds
millions of records. Every path that reads records walks them one at a time
without a copy per record, off the runtime's threads, at most two batches at
once: memory stays within a few times the batch's decompressed bound, and
clients that send none of it are not held up. (Before: 98 KB in, 1.7 GB of
memory, every other client stalled 4.4 s.)"""

import socket
import struct
import threading
import time
import zlib

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.record.util import calc_crc32c

from test_bad_input import produce_v3, read_produce_v3_response

INVALID_RECORD = 87
MESSAGE_TOO_LARGE = 10
# A walk holds a batch's records (at most 64 MiB decompressed) and what it
# builds; two at once, plus the agent's own caches.
PEAK_BOUND_MIB = 320
KEYED_MARK = "keyed-"


def varint(v):
    v = (v << 1) ^ (v >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def record(delta, key=None):
    key_field = varint(-1) if key is None else varint(len(key)) + key
    body = b"\x00" + varint(0) + varint(delta) + key_field + varint(-1) + varint(0)
    return varint(len(body)) + body


def batch_of(section, count, codec):
    if codec == 1:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        payload = c.compress(section) + c.flush()
    else:
        payload = section
    now = int(time.time() * 1000)
    header = struct.pack(">hiqqqhii", codec, count - 1, now, now, -1, -1, -1, count)
    body = struct.pack(">ibI", -1, 2, calc_crc32c(header + payload)) + header + payload
    return struct.pack(">qi", 0, len(body)) + body


def bomb(count=9_500_000):
    """`count` empty keyless records, every one saying offset delta 0 (so
    Kafka would rebuild the batch): 66 MB of records in 97 KB of gzip."""
    return batch_of(record(0) * count, count, codec=1)


def numbered(count, key=None):
    """`count` empty records numbered as a client numbers them, gzip."""
    return batch_of(b"".join(record(i, key) for i in range(count)), count, codec=1)


class Watch:
    """Samples the agent's RSS, and a bystander's produce latency."""

    def __init__(self, agent):
        self.agent, self.stop = agent, threading.Event()
        self.peak = self.base = agent.rss_kib() // 1024
        self.slowest = 0.0
        self.producer = KafkaProducer(bootstrap_servers=agent.bootstrap, acks="all")
        self.threads = [threading.Thread(target=self.sample, daemon=True),
                        threading.Thread(target=self.bystander, daemon=True)]
        for t in self.threads:
            t.start()

    def sample(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, self.agent.rss_kib() // 1024)
            time.sleep(0.02)

    def bystander(self):
        while not self.stop.is_set():
            started = time.time()
            self.producer.send("bystander", b"small").get(timeout=60)
            self.slowest = max(self.slowest, time.time() - started)
            time.sleep(0.05)

    def phase(self, name):
        print(f"{name}: peak RSS {self.peak} MiB (from {self.base}), bystander's slowest produce {self.slowest:.2f}s")
        assert self.peak - self.base < PEAK_BOUND_MIB, name
        self.peak = self.agent.rss_kib() // 1024

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        self.producer.close()


def send(agent, topic, batch, correlation_id):
    s = socket.create_connection(("127.0.0.1", agent.port), timeout=120)
    s.sendall(produce_v3(topic, 0, batch, correlation_id=correlation_id, timeout_ms=120_000))
    answer = read_produce_v3_response(s)
    s.close()
    return answer


def list_by_timestamp(agent, topic, timestamp):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.for_timestamp(timestamp)})[tp].result(timeout=120)


def test_record_count_bombs_cost_bounded_memory_on_every_path(make_agent):
    agent = make_agent("--compaction-interval", "1s", "--compaction-min-extents", "1",
                       "--compaction-max-age", "1s")
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    big = {"max.message.bytes": str(8 << 20)}
    admin.create_topics([
        NewTopic("bystander", 1, 1),
        NewTopic("bomb-compact", 1, 1, topic_configs={"cleanup.policy": "compact"}),
        NewTopic("bomb-delete", 1, 1),
        NewTopic("stored", 1, 1, topic_configs=big),
        NewTopic("stored-compact", 1, 1, topic_configs={"cleanup.policy": "compact", **big}),
    ])
    admin.close()
    the_bomb = bomb()
    assert len(the_bomb) < 100_000
    watch = Watch(agent)
    try:
        time.sleep(0.5)
        # Produce to a compacted topic: every record is keyless.
        assert send(agent, "bomb-compact", the_bomb, 1)[1] == INVALID_RECORD
        watch.phase("produce, compacted topic")
        # Produce to a delete topic: rebuilt numbered, it cannot fit.
        assert send(agent, "bomb-delete", the_bomb, 2)[1] == MESSAGE_TOO_LARGE
        watch.phase("produce, delete topic")
        # Four at once.
        answers = []
        senders = [threading.Thread(target=lambda n=n: answers.append(
            send(agent, ["bomb-compact", "bomb-delete"][n % 2], the_bomb, 10 + n)[1]))
            for n in range(4)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        assert sorted(answers) == [MESSAGE_TOO_LARGE] * 2 + [INVALID_RECORD] * 2, answers
        watch.phase("four produces at once")
        # Stored: a million records honestly numbered (2 MB of gzip), then
        # two ListOffsets by timestamp at once from a read-only client.
        before = int(time.time() * 1000) - 60_000
        assert send(agent, "stored", numbered(1_000_000), 20)[1:] == (0, 0)
        found = []
        listers = [threading.Thread(target=lambda: found.append(list_by_timestamp(agent, "stored", before)))
                   for _ in range(2)]
        for t in listers:
            t.start()
        for t in listers:
            t.join()
        assert [f.offset for f in found] == [0, 0]
        watch.phase("ListOffsets by timestamp")
        # Key compaction of a million records of one key: one is left.
        assert send(agent, "stored-compact", numbered(1_000_000, key=b"k"), 21)[1:] == (0, 0)
        deadline = time.time() + 60
        while time.time() < deadline and not keyed_segments(agent):
            time.sleep(0.5)
        assert keyed_segments(agent), "key compaction did not run"
        watch.phase("key compaction")
        assert watch.slowest < 2.0, f"a bystander's produce took {watch.slowest:.2f}s"
    finally:
        watch.close()
    assert agent.alive()


def keyed_segments(agent):
    """The key-compacted segments in the agent's object store."""
    return [p for p in (agent.workdir / "objects" / "segment").rglob("*") if KEYED_MARK in p.name]
