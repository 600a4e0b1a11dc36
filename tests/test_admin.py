"""Admin operations through kafka-python's admin client: topic configs
(DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), CreatePartitions,
ListGroups and DescribeGroups."""

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import InvalidPartitionsError


def topic_configs(admin, name):
    """{config: value} as DescribeConfigs reports them for a topic."""
    result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all")
    return {k: v["value"] for k, v in result["topic"][name].items()}


def test_topic_configs_and_partitions(agent):
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    admin.create_topics([NewTopic("conf", 2, 1, topic_configs={"retention.ms": "3600000"})])
    configs = topic_configs(admin, "conf")
    assert configs["retention.ms"] == "3600000"
    assert configs["cleanup.policy"] == "delete"
    assert configs["retention.bytes"] == "-1"

    # IncrementalAlterConfigs (kafka-python's choice when the broker has it): SET one key.
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "conf", configs={"retention.bytes": "1048576"})])
    configs = topic_configs(admin, "conf")
    assert (configs["retention.bytes"], configs["retention.ms"]) == ("1048576", "3600000")
    # AlterConfigs replaces the whole set; kafka-python sends the other modified
    # keys along (as it must with Kafka), so retention.ms survives.
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "conf", configs={"retention.bytes": "2048"})],
                        incremental=False)
    configs = topic_configs(admin, "conf")
    assert (configs["retention.bytes"], configs["retention.ms"]) == ("2048", "3600000")
    # Deleting a key brings its default back.
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "conf", configs={"retention.ms": ("DELETE", None)})])
    assert topic_configs(admin, "conf")["retention.ms"] == str(7 * 24 * 3600 * 1000)
    refused = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "conf", configs={"retention.ms": "x"})])
    error = refused["topic"]["conf"]
    assert "[Error 40] InvalidConfigurationError" in str(error)  # Kafka's INVALID_CONFIG
    assert topic_configs(admin, "conf")["retention.ms"] == str(7 * 24 * 3600 * 1000)

    admin.create_partitions({"conf": NewPartitions(5)})
    assert len(admin.describe_topics(["conf"])[0]["partitions"]) == 5
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"conf": NewPartitions(3)})
    # The new partitions take records.
    p = KafkaProducer(bootstrap_servers=agent.bootstrap)
    assert p.send("conf", value=b"x", partition=4).get(timeout=30).offset == 0
    p.close()
    admin.close()


def test_list_and_describe_groups(agent):
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    admin.create_topics([NewTopic("grouped", 2, 1)])
    c = KafkaConsumer("grouped", bootstrap_servers=agent.bootstrap, group_id="watched",
                      client_id="watcher", session_timeout_ms=10_000)
    for _ in range(20):
        c.poll(timeout_ms=200)
        if c.assignment():
            break
    assert c.assignment()
    assert {"group_id": "watched", "protocol_type": "consumer", "group_state": "Stable",
            "group_type": "classic"} in admin.list_groups()
    described = admin.describe_groups(["watched"])["watched"]
    assert described["group_state"] == "Stable"
    assert [m["client_id"] for m in described["members"]] == ["watcher"]
    c.close()
    admin.close()


def test_topic_configs_are_checked_as_kafka_checks_them(agent):
    """One CreateTopics with a valid, an unknown and an ill-typed config:
    each answered on its own, and only the valid topic created. List
    configs take APPEND and SUBTRACT."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType)
    from confluent_kafka.admin import NewTopic as ConfluentTopic
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    created = admin.create_topics([
        ConfluentTopic("valid-config", 1, 1, config={"retention.ms": "3600000", "segment.ms": "100"}),
        ConfluentTopic("unknown-config", 1, 1, config={"dummy.doesntexist": "1"}),
        ConfluentTopic("bad-value", 1, 1, config={"min.cleanable.dirty.ratio": "1.5"}),
    ])
    created["valid-config"].result(30)
    for name in ("unknown-config", "bad-value"):
        try:
            created[name].result(30)
            raise AssertionError(f"{name} was created")
        except Exception as e:  # noqa: BLE001
            assert "INVALID_CONFIG" in str(e), e
    assert set(admin.list_topics(timeout=30).topics) == {"valid-config"}

    def policy():
        resource = ConfigResource(ResourceType.TOPIC, "valid-config")
        return admin.describe_configs([resource])[resource].result(30)["cleanup.policy"].value

    def change(op, value):
        resource = ConfigResource(ResourceType.TOPIC, "valid-config", incremental_configs=[
            ConfigEntry("cleanup.policy", value, incremental_operation=op)])
        admin.incremental_alter_configs([resource])[resource].result(30)

    assert policy() == "delete"
    change(AlterConfigOpType.APPEND, "compact")
    assert policy() == "delete,compact"
    change(AlterConfigOpType.SUBTRACT, "delete")
    assert policy() == "compact"
    # APPEND is for lists only.
    resource = ConfigResource(ResourceType.TOPIC, "valid-config", incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)])
    try:
        admin.incremental_alter_configs([resource])[resource].result(30)
        raise AssertionError("APPEND to retention.ms was taken")
    except Exception as e:  # noqa: BLE001
        assert "INVALID_CONFIG" in str(e), e


def test_describe_cluster(agent):
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    cluster = admin.describe_cluster()
    admin.close()
    # The cluster's own id (as Kafka's: a UUID in URL-safe base64), the
    # one the object store holds.
    marker = (agent.workdir / "objects" / "cluster-id").read_text()
    assert cluster["cluster_id"] == marker and len(marker) == 22, (cluster, marker)
    assert [(b["host"], b["port"]) for b in cluster["brokers"]] == \
        [tuple(agent.bootstrap.rsplit(":", 1)[0:1]) + (int(agent.bootstrap.rsplit(":", 1)[1]),)]
    assert cluster["controller_id"] == cluster["brokers"][0]["broker_id"]
    assert "DESCRIBE" in cluster["authorized_operations"]


def test_described_topics_carry_the_operations_allowed(agent):
    """librdkafka's DescribeTopics asks Metadata for the operations the
    principal holds; with no authorizer, all of a topic's."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient
    from confluent_kafka.admin import NewTopic as ConfluentTopic
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    admin.create_topics([ConfluentTopic("described", 2, 1)])["described"].result(30)
    described = admin.describe_topics(TopicCollection(["described"]),
                                      include_authorized_operations=True)["described"].result(30)
    assert len(described.partitions) == 2
    assert AclOperation.READ in described.authorized_operations
    assert AclOperation.ALTER_CONFIGS in described.authorized_operations
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert AclOperation.DESCRIBE in cluster.authorized_operations
