"""The block cache as docs/architecture.md describes it: the agents of a zone share
their caches (each block GET once per zone, whatever the number of agents
and consumers), an owner that dies is read around, and the disk tier holds
what memory cannot."""

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING

from clients import create_topic
from test_metrics import metric, metric_sum

PARTITIONS = 3
RECORDS = 4000
VALUE = 2000  # bytes: 8 MB in all


def produce(bootstrap, topic):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "none"})
    for i in range(RECORDS):
        # Incompressible enough that sizes are what they seem.
        value = (f"{i:08d}" * (VALUE // 8)).encode()
        p.produce(topic, value=value, partition=i % PARTITIONS)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    return RECORDS * VALUE


def consume_all(bootstrap, topic, group):
    """Every record of the topic through the agent at `bootstrap` (each consumer its own reader)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "fetch.max.bytes": 1 << 20})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen, deadline = 0, time.time() + 60
    while seen < RECORDS and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen += 1
    c.close()
    return seen


def wait_for_ring(agents, members):
    deadline = time.time() + 20
    while time.time() < deadline:
        if all(metric(a.admin("/metrics")[1], "floe_cache_ring_members") == members for a in agents):
            return
        time.sleep(0.2)
    raise AssertionError(f"the ring did not reach {members} members")


def gets(agents):
    pages = [a.admin("/metrics")[1] for a in agents]
    return (sum(metric(p, "floe_object_store_bytes_total", op="get") for p in pages),
            sum(metric(p, "floe_cache_blocks_total", op="peer_hit") for p in pages),
            sum(metric(p, "floe_cache_blocks_total", op=op) for p in pages for op in ("peer_fallback", "peer_skip")))


def six_consumers_over_three_agents(peer_agents, *flags):
    # No compaction: every GET is a consumer's.
    # A generous peer deadline: a loaded test machine must not fall back.
    agents = peer_agents(3, "--compaction-interval", "0s", "--cache-block-bytes", "256KiB",
                         "--flush-interval", "20ms", "--cache-peer-timeout", "5s", *flags)
    if "--cache-ring" not in flags:
        wait_for_ring(agents, 3)
    create_topic(agents[0].bootstrap, "shared", PARTITIONS)
    produced = produce(agents[0].bootstrap, "shared")
    counts = []
    threads = [threading.Thread(target=lambda a=a, n=n: counts.append(consume_all(a.bootstrap, "shared", f"g{n}")))
               for n in range(6) for a in [agents[n % 3]]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == [RECORDS] * 6, counts
    get_bytes, peer_hits, fallbacks = gets(agents)
    return get_bytes / produced, peer_hits, fallbacks


def test_a_zone_reads_each_block_once(peer_agents):
    ratio, peer_hits, fallbacks = six_consumers_over_three_agents(peer_agents)
    print(f"ring: {ratio:.2f} GET bytes per byte produced, {peer_hits:.0f} blocks from owners, "
          f"{fallbacks:.0f} read around")
    # The producing agent holds what it uploaded; each other block is GET once
    # by its owner and sent to the others (some agents' first reads race the
    # ring's refresh, hence the margin).
    assert ratio <= 1.1, ratio
    assert peer_hits > 0 and fallbacks == 0


def test_without_the_ring_each_agent_reads_for_itself(peer_agents):
    ratio, peer_hits, _ = six_consumers_over_three_agents(peer_agents, "--cache-ring", "false")
    print(f"no ring: {ratio:.2f} GET bytes per byte produced")
    # The two agents that did not upload each read everything.
    assert ratio >= 1.8, ratio
    assert peer_hits == 0


def test_an_owner_that_dies_is_read_around(peer_agents):
    agents = peer_agents(3, "--compaction-interval", "0s", "--cache-block-bytes", "256KiB",
                         "--flush-interval", "20ms", "--cache-peer-timeout", "500ms")
    wait_for_ring(agents, 3)
    create_topic(agents[0].bootstrap, "owned", PARTITIONS)
    produce(agents[0].bootstrap, "owned")
    agents[2].kill()
    # Readers on the producing agent need nothing; the other survivor reads
    # the dead owner's blocks from the object store, with no error reaching
    # the consumer.
    assert consume_all(agents[1].bootstrap, "owned", "after-kill") == RECORDS
    page = agents[1].admin("/metrics")[1]
    failed = metric(page, "floe_cache_blocks_total", op="peer_fallback") + \
        metric(page, "floe_cache_blocks_total", op="peer_skip")
    assert failed > 0


def test_the_disk_tier_serves_what_memory_cannot_hold(make_agent, tmp_path):
    disk = tmp_path / "cache"
    agent = make_agent("--cache-bytes", "1MiB", "--cache-block-bytes", "256KiB",
                       "--cache-disk-dir", str(disk), "--cache-disk-bytes", "64MiB",
                       "--compaction-interval", "0s", "--flush-interval", "20ms")
    create_topic(agent.bootstrap, "big", PARTITIONS)
    produced = produce(agent.bootstrap, "big")
    for n in range(2):
        assert consume_all(agent.bootstrap, "big", f"d{n}") == RECORDS
    page = agent.admin("/metrics")[1]
    read = metric(page, "floe_object_store_bytes_total", op="get")
    print(f"disk tier: {read / produced:.2f} GET bytes per byte produced over two full reads")
    # 8 MB read twice through 1 MiB of memory: without the disk both reads
    # would GET nearly everything.
    assert read < 0.5 * produced, read


def test_a_consumer_far_behind_reads_each_stored_byte_about_once(make_agent):
    # Sixteen partitions in every ingest file, each a chunk smaller than a
    # 256 KiB block; a main pool of 1 MiB keeps little of 8 MB. A consumer
    # reading from the start is far behind: each fetch GETs only its
    # partitions' own bytes of a block, not the whole block again for every
    # partition in it.
    partitions = 16
    agent = make_agent("--cache-bytes", "1MiB", "--cache-block-bytes", "256KiB",
                       "--cache-catch-up-bytes", "512KiB", "--cache-catch-up-lag", "64KiB",
                       "--compaction-interval", "0s", "--flush-interval", "100ms")
    create_topic(agent.bootstrap, "behind", partitions)
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 20, "compression.type": "none"})
    for i in range(RECORDS):
        p.produce("behind", value=(f"{i:08d}" * (VALUE // 8)).encode(), partition=i % partitions)
        if i % 500 == 499:
            # Eight ingest files of 1 MB: 62.5 KB of each partition in each.
            assert p.flush(30) == 0
            time.sleep(0.3)
    assert p.flush(30) == 0
    produced = RECORDS * VALUE
    c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "behind",
                  "enable.auto.commit": False, "fetch.max.bytes": 1 << 20})
    c.assign([TopicPartition("behind", n, OFFSET_BEGINNING) for n in range(partitions)])
    values, deadline = set(), time.time() + 60
    while len(values) < RECORDS and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            values.add(m.value()[:8])
    c.close()
    assert len(values) == RECORDS
    page = agent.admin("/metrics")[1]
    read = metric(page, "floe_object_store_bytes_total", op="get")
    parts = metric(page, "floe_cache_blocks_total", op="catch_up_part")
    print(f"far behind: {read / produced:.2f} GET bytes per byte produced, {parts:.0f} part GETs")
    assert parts > 0
    assert read < 1.3 * produced, read
