"""Agents remember the topics they produce to (so a produce request costs no
metastore read). A topic deleted and recreated through another agent must
still get every record into the new topic: the stale agent's first commit is
refused for the old topic id, the producer retries, and the agent looks again."""

from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient, NewTopic

from check import check_partitions
from clients import create_topic, kcat, kcat_consume


def test_a_topic_recreated_elsewhere_is_noticed(peer_agents):
    # Each agent tells clients only of itself, so the admin requests stay on
    # one agent and the produce requests on the other.
    agents = peer_agents(2, "--flush-interval", "20ms",
                         env={"FLOE_LOG": "info,floe_agent::handlers::produce=debug"})
    admin_side, stale = agents
    create_topic(admin_side.bootstrap, "recycled", 1)
    # The stale agent learns the topic (and caches it) by producing to it.
    kcat("-P", "-b", stale.bootstrap, "-t", "recycled", "-p", "0", input="old-0\nold-1\n")

    admin = KafkaAdminClient(bootstrap_servers=admin_side.bootstrap)
    try:
        admin.delete_topics(["recycled"])
        admin.create_topics([NewTopic("recycled", 3, 1)])
    finally:
        admin.close()

    values = [f"new-{i}" for i in range(300)]
    failed = []
    producer = Producer({"bootstrap.servers": stale.bootstrap, "retry.backoff.ms": 50,
                         "message.timeout.ms": 60_000})
    # Partition 0 alone first: the stale agent's cache claims to know it.
    for i, v in enumerate(values):
        producer.produce("recycled", value=v, partition=i % 3,
                         on_delivery=lambda err, msg: err and failed.append(err))
        if i == 0:
            assert producer.flush(60) == 0
    assert producer.flush(60) == 0
    assert not failed, failed[:3]
    assert "forgot topic recycled" in stale.log(), "the stale cache entry was never used"
    # Only the new records, in the new topic, from offset 0.
    check_partitions(kcat_consume(stale.bootstrap, "recycled"), values)
