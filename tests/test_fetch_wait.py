"""Consumers waiting at the end of a partition cost the metastore one shared
poll per agent, not a read per fetch, per partition or per consumer (the
agent plans fetches from its extent cache); and a record produced through
another agent still reaches them within that poll."""

import threading
import time

from confluent_kafka import Consumer, TopicPartition, OFFSET_END

from clients import create_topic, kcat
from test_metrics import metric, metric_sum

PARTITIONS = 4
CONSUMERS = 10
WINDOW = 3.0


def test_waiting_consumers_share_one_metastore_poll(peer_agents):
    # No heartbeats or compaction: the metastore requests are the fetches'
    # and the agents' timers.
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

    # Daemons: a failed assertion below must not leave the run waiting on
    # them at exit.
    threads = [threading.Thread(target=consume, daemon=True) for _ in range(CONSUMERS)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # every consumer is waiting at the end
    before = reader.admin("/metrics")[1]
    time.sleep(WINDOW)
    after = reader.admin("/metrics")[1]

    fetches = metric(after, "floe_kafka_requests_total", api="Fetch") - \
        metric(before, "floe_kafka_requests_total", api="Fetch")
    asked = metric_sum(after, "floe_metastore_requests_total") - \
        metric_sum(before, "floe_metastore_requests_total")
    def asked_for(op):
        return metric(after, "floe_metastore_requests_total", op=op) - \
            metric(before, "floe_metastore_requests_total", op=op)
    polls = WINDOW / 0.1
    # Each fetch is planned from the agent's cache (topics and extents,
    # "nothing new" at the end of a partition), then waits; the agent polls
    # once per 100ms for all of them. Before the cache, each fetch read its
    # topic and each partition's plan: (1 + PARTITIONS) per fetch.
    print(f"waiting: {fetches:.0f} fetches, {asked:.0f} metastore requests "
          f"({asked_for('PlanReads'):.0f} PlanReads) in {WINDOW}s")
    assert fetches > 0
    assert asked_for("TopicNamed") + asked_for("PlanRead") == 0, after
    # The agents' own timers (leases and passes of the transaction timeout
    # job, clock ticks, cache peers, subscription and quota refreshes) are
    # not the fetches'.
    background = sum(asked_for(op) for op in (
        "AcquireLease", "ExpiredTxns", "Tick", "CachePeers", "ClientMetricsIfChanged",
        "ClientQuotasIfChanged", "AclsIfChanged", "AgentHeartbeat", "ListAgentsOn"))
    assert asked - background <= 2 * polls, (asked, background, fetches)

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
