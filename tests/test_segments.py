"""A segment is one extent in the metastore however large it is (issue 12:
a partition's extents must not grow with its bytes). Fetches and ListOffsets
starting inside one land through the segment's offset index, so they read
about what they return, not the segment."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from clients import create_topic
from test_metrics import metric

RECORDS = 6000
VALUE = 1000  # bytes: about 6 MB, one segment
BASE_MS = 1_700_000_000_000


def object_files(agent, kind):
    return [p for p in (agent.workdir / "objects" / kind).rglob("*") if p.is_file()]


def value_of(i):
    # Incompressible enough that sizes are what they seem.
    return (f"{i:08d}" * (VALUE // 8)).encode()


def test_reads_inside_a_large_segment_land_through_its_index(make_agent):
    # Produce with compaction off, then compact everything into one segment.
    agent = make_agent("--compaction-interval", "0s")
    create_topic(agent.bootstrap, "big", 1)
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 20,
                  "compression.type": "none", "batch.size": 16384})
    for i in range(RECORDS):
        p.produce("big", value=value_of(i), partition=0, timestamp=BASE_MS + i * 1000)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0

    # Small cache blocks, so what a read costs shows in GET bytes.
    agent.extra_args = ["--compaction-interval", "500ms", "--compaction-min-extents", "1",
                        "--compaction-max-age", "1s", "--gc-grace", "0s",
                        "--segment-bytes", "32MiB", "--cache-block-bytes", "128KiB"]
    agent.restart()
    deadline = time.time() + 60
    while time.time() < deadline and (object_files(agent, "ingest") or object_files(agent, "merged")):
        time.sleep(0.5)
    segments = object_files(agent, "segment")
    assert len(segments) == 1, segments
    size = segments[0].stat().st_size
    assert size > RECORDS * VALUE

    # A restart empties the cache: each read below starts cold.
    agent.restart()
    read_before = metric(agent.admin("/metrics")[1], "floe_object_store_bytes_total", op="get")

    # A consumer starting in the middle gets the records from there on...
    start = 3_456
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "mid",
                  "enable.auto.commit": False, "fetch.max.bytes": 65536, "message.max.bytes": 65536,
                  "max.partition.fetch.bytes": 65536, "queued.max.messages.kbytes": 64,
                  "queued.min.messages": 1})
    c.assign([TopicPartition("big", 0, start)])
    got, deadline = [], time.time() + 30
    while len(got) < 40 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.offset(), m.value(), m.timestamp()[1]))
    c.close()
    assert [o for o, _, _ in got] == list(range(start, start + 40))
    assert all(v == value_of(o) and ts == BASE_MS + o * 1000 for o, v, ts in got)

    # ...and what was read from the bucket is a few blocks (the index at the
    # segment's end, the blocks of the records sent), not the segment.
    read = metric(agent.admin("/metrics")[1], "floe_object_store_bytes_total", op="get") - read_before
    assert 0 < read < size / 4, f"read {read} bytes of a {size}-byte segment"
    print(f"fetch of 40 records from the middle of a {size}-byte segment: {read:.0f} bytes read")

    # ListOffsets by timestamp lands through the index too, and is exact.
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "times"})
    asked = {BASE_MS + 4_321 * 1000: 4_321, BASE_MS + 4_321 * 1000 - 1: 4_321, BASE_MS: 0,
             BASE_MS + (RECORDS - 1) * 1000: RECORDS - 1, BASE_MS + RECORDS * 1000: -1}
    for ts, offset in asked.items():
        # (One partition once per request: Kafka refuses it named twice.)
        [found] = c.offsets_for_times([TopicPartition("big", 0, ts)], timeout=10)
        assert (found.offset, found.error) == (offset, None), ts
    c.close()

    page = agent.admin("/metrics")[1]
    assert "floe_segment_index_misses_total 0" in page
    read = metric(page, "floe_object_store_bytes_total", op="get") - read_before
    assert read < size / 2, f"read {read} bytes of a {size}-byte segment"
    print(f"with 5 ListOffsets by timestamp besides: {read:.0f} bytes read")
