"""Consumers waiting at the end of a partition cost the metastore one shared
poll per agent, not a read per partition per consumer per poll; and a record
produced through another agent still reaches them within that poll."""

import threading
import time

from confluent_kafka import Consumer, TopicPartition, OFFSET_END

from clients import create_topic, kcat
from test_metrics import metric

PARTITIONS = 4
CONSUMERS = 10
WINDOW = 3.0


def test_waiting_consumers_share_one_metastore_poll(peer_agents):
    # No heartbeats or compaction: every metastore request is the fetches'.
    agents = peer_agents(2, "--compaction-interval", "0s")
    reader, writer = agents
    create_topic(reader.bootstrap, "idle", PARTITIONS)

    received, stop = [], threading.Event()

    def consume():
        c = Consumer({"bootstrap.servers": reader.bootstrap, "group.id": "unused",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 2000})
        c.assign([TopicPartition("idle", p, OFFSET_END) for p in range(PARTITIONS)])
        while not stop.is_set():
            m = c.poll(0.2)
            if m is not None and not m.error():
                received.append((time.time(), m.value().decode()))
        c.close()

    threads = [threading.Thread(target=consume) for _ in range(CONSUMERS)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # every consumer is waiting at the end
    before = reader.admin("/metrics")[1]
    time.sleep(WINDOW)
    after = reader.admin("/metrics")[1]

    fetches = metric(after, "floe_kafka_requests_total", api="Fetch") - \
        metric(before, "floe_kafka_requests_total", api="Fetch")
    asked = metric(after, "floe_metastore_requests_total") - metric(before, "floe_metastore_requests_total")
    polls = WINDOW / 0.1
    # Each fetch reads its topic and partitions once when it arrives, then
    # waits; the agent polls once per 100ms for all of them. Re-reading per
    # waiting fetch would cost about (1 + PARTITIONS) * polls * CONSUMERS.
    assert fetches > 0
    assert asked <= fetches * (1 + PARTITIONS) + 2 * polls, (asked, fetches)

    # A record produced through the other agent reaches the waiting
    # consumers: the shared poll sees the partition grow.
    sent = time.time()
    kcat("-P", "-b", writer.bootstrap, "-t", "idle", "-p", "2", input="hello\n")
    deadline = time.time() + 20
    while len(received) < CONSUMERS and time.time() < deadline:
        time.sleep(0.05)
    assert len(received) == CONSUMERS, received
    assert all(v == "hello" for _, v in received)
    stop.set()
    for t in threads:
        t.join()
    # Within the producer's own flush and a few polls, not the 2s fetch wait.
    assert max(at for at, _ in received) - sent < 2.0, [at - sent for at, _ in received]
