"""Broker and group configs as Kafka's admin clients see and change them:
the broker resource described under Kafka's names (read-only where the
agent reads them at start-up), the cluster's dynamic defaults (the default
entity, `kafka-configs --entity-default`) kept in the metastore and applied
to every topic that does not set its own, on every agent, and KIP-848 group
configs that change a consumer group's session timeout."""

import time

import pytest
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewTopic, ResourceType)
from kafka import KafkaProducer
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic

from test_cli import floe, floe_json
from test_consumer_protocol import consumer_settings
from test_group_protocol import Killable, Member, make_topic, produce, wait_for
from test_retention import earliest


def broker_id(admin):
    [node] = admin.list_topics(timeout=30).brokers
    return str(node)


def describe(admin, kind, name):
    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource])[resource].result(30)


def alter(admin, kind, name, *entries):
    resource = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in entries])
    return admin.incremental_alter_configs([resource])[resource]


def refused(future):
    try:
        future.result(30)
    except Exception as e:  # noqa: BLE001
        return str(e)
    raise AssertionError("the change was taken")


SET = AlterConfigOpType.SET


def test_the_broker_resource_describes_the_agent_under_kafka_s_names(make_agent):
    agent = make_agent("--max-connections", "1000")
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    me = broker_id(admin)
    configs = describe(admin, ResourceType.BROKER, me)
    listeners = configs["listeners"]
    assert listeners.value == f"PLAINTEXT://{agent.bootstrap}"
    assert listeners.is_read_only
    assert configs["node.id"].value == me
    # Set on the command line: a static broker config; left alone: a default.
    assert (configs["max.connections"].value, configs["max.connections"].source) == \
        ("1000", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert configs["connections.max.idle.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # The cluster's dynamic defaults are there too, and alterable.
    retention = configs["log.retention.ms"]
    assert (retention.value, retention.is_read_only) == ("604800000", False)
    assert configs["offsets.retention.minutes"].value == "10080"

    # kafka-python asks with synonyms: each names where its value comes from.
    kadmin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    described = kadmin.describe_configs([KConfigResource(ConfigResourceType.BROKER, me)],
                                        include_synonyms=True, config_filter="all")
    kadmin.close()
    entry = described["broker"][me]["max.connections"]
    assert (entry["value"], entry["read_only"], entry["config_source"], entry["config_type"]) == \
        ("1000", True, "STATIC_BROKER_CONFIG", "INT")
    assert [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]] == \
        [("max.connections", "1000", "STATIC_BROKER_CONFIG")]


def test_cluster_defaults_reach_every_topic_on_every_agent(peer_agents):
    """librdkafka, kafka-python and kafkajs cannot name the default entity
    (a broker resource without an id); `floe configs --cluster` does, as
    `kafka-configs --entity-default` does with Java's admin client."""
    a, b = peer_agents(2)
    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    admin_b = AdminClient({"bootstrap.servers": b.bootstrap})
    for name, config in (("plain", {}), ("own", {"retention.ms": "1000"})):
        admin_a.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(30)

    def cluster_alter(agent, *args):
        return floe(agent, "configs", "alter", "--cluster", *args, expect_ok=False)

    def cluster_configs(agent):
        listed = floe_json(agent, "configs", "describe", "--cluster")["configs"]
        return {c["config"]: (c["value"], c["source"]) for c in listed}

    # Set through one agent on the default entity (an empty broker name)...
    assert cluster_alter(a, "--config", "log.retention.ms=3600000",
                         "--config", "log.cleanup.policy=delete,compact").returncode == 0
    # ...and seen through the other: only what the cluster sets.
    assert cluster_configs(b) == {
        "log.retention.ms": ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        "log.cleanup.policy": ("delete,compact", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
    }
    plain = describe(admin_b, ResourceType.TOPIC, "plain")
    assert (plain["retention.ms"].value, plain["retention.ms"].source) == \
        ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert plain["cleanup.policy"].value == "delete,compact"
    # Its synonyms, most specific first (kafka-python lists them all;
    # librdkafka keys them by name).
    kadmin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    described = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "plain")],
                                        include_synonyms=True, config_filter="all")
    kadmin.close()
    assert [(s["name"], s["value"], s["source"])
            for s in described["topic"]["plain"]["retention.ms"]["synonyms"]] == [
        ("log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("log.retention.ms", "604800000", "DEFAULT_CONFIG")]
    # A topic's own setting wins over the cluster's.
    own = describe(admin_b, ResourceType.TOPIC, "own")
    assert (own["retention.ms"].value, own["retention.ms"].source) == \
        ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    # Refusals, each with Kafka's code: an unknown key or a bad value
    # (INVALID_CONFIG), a key the agents read at start-up (INVALID_REQUEST).
    # One agent's own entity holds nothing apart from the cluster's: a key
    # the cluster sets is refused there (INVALID_CONFIG, naming the default
    # entity), a start-up key as Kafka refuses it, an unknown key as
    # unknown. None of them changes anything.
    for change, code in (("dummy.doesntexist=1", "InvalidConfig"),
                         ("log.retention.ms=soon", "InvalidConfig"),
                         ("max.connections=5", "InvalidRequest"),
                         ("log.retention.hours=5", "InvalidRequest")):
        done = cluster_alter(a, "--config", change)
        assert done.returncode != 0 and code in done.stderr, (change, done.stderr)
    me = broker_id(admin_a)
    on_me = refused(alter(admin_a, ResourceType.BROKER, me, ("log.retention.ms", "5", SET)))
    assert "INVALID_CONFIG" in on_me and "default broker entity" in on_me, on_me
    assert "INVALID_REQUEST" in refused(alter(admin_a, ResourceType.BROKER, me,
                                              ("max.connections", "5", SET)))
    assert "INVALID_CONFIG" in refused(alter(admin_a, ResourceType.BROKER, me,
                                             ("dummy.doesntexist", "1", SET)))
    assert cluster_configs(a)["log.retention.ms"] == ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")

    # Deleting the default brings Kafka's back.
    assert cluster_alter(b, "--delete-config", "log.retention.ms",
                         "--delete-config", "log.cleanup.policy").returncode == 0
    assert describe(admin_a, ResourceType.TOPIC, "plain")["retention.ms"].value == "604800000"
    assert cluster_configs(a) == {}


def test_a_cluster_retention_default_expires_old_data(make_agent):
    """The retention job honours the cluster's `log.retention.ms` for a
    topic that sets none, and a topic's own `retention.ms=-1` over it."""
    agent = make_agent("--compaction-interval", "500ms", "--gc-grace", "0s")
    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    admin.create_topics([KNewTopic("inherits", 1, 1),
                         KNewTopic("forever", 1, 1, topic_configs={"retention.ms": "-1"})])
    admin.close()
    floe(agent, "configs", "alter", "--cluster", "--config", "log.retention.ms=4000")
    p = KafkaProducer(bootstrap_servers=agent.bootstrap, linger_ms=5)
    hour_ago = int(time.time() * 1000) - 3_600_000
    for topic in ("inherits", "forever"):
        for i in range(20):
            p.send(topic, value=f"old-{i}".encode(), timestamp_ms=hour_ago)
    p.flush()
    p.close()
    wait_for(lambda: earliest(agent.bootstrap, "inherits") == (20, 20), seconds=30,
             why="the cluster's retention to move the log start")
    assert earliest(agent.bootstrap, "forever") == (0, 20)


def test_a_group_config_sets_its_consumers_session_timeout(make_agent):
    """KIP-848 group configs: with the agents' 45 s session, a group set to
    6 s hands a killed member's partitions over within its own session."""
    agent = make_agent("--consumer-heartbeat-interval", "500ms")
    kadmin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    group = KConfigResource(ConfigResourceType.GROUP, "short-sessions",
                            configs={"consumer.session.timeout.ms": "6000"})
    changed = kadmin.alter_configs([group])
    assert str(changed["group"]["short-sessions"]) == "OK", changed
    # The group need not exist yet; bad values and unknown keys are refused.
    # (A share group's lock of 5 s is below the cluster's minimum, 15 s.)
    for key, value in (("consumer.session.timeout.ms", "10"), ("share.record.lock.duration.ms", "5000"),
                       ("no.such.group.config", "1")):
        bad = kadmin.alter_configs([KConfigResource(ConfigResourceType.GROUP, "short-sessions",
                                                    configs={key: value})], raise_on_unknown=False)
        assert "InvalidConfigurationError" in str(bad["group"]["short-sessions"]), bad
    described = kadmin.describe_configs([KConfigResource(ConfigResourceType.GROUP, "short-sessions")],
                                        config_filter="all")
    assert {k: (v["value"], v["config_source"]) for k, v in described["group"]["short-sessions"].items()} == {
        "consumer.session.timeout.ms": ("6000", "DYNAMIC_GROUP_CONFIG"),  # source 8
        "consumer.heartbeat.interval.ms": ("500", "DEFAULT_CONFIG"),
        # Every group config is described, as Kafka does, share groups' too.
        "share.auto.offset.reset": ("latest", "DEFAULT_CONFIG"),
        "share.heartbeat.interval.ms": ("5000", "DEFAULT_CONFIG"),
        "share.isolation.level": ("read_uncommitted", "DEFAULT_CONFIG"),
        "share.record.lock.duration.ms": ("30000", "DEFAULT_CONFIG"),
        "share.session.timeout.ms": ("45000", "DEFAULT_CONFIG")}
    kadmin.close()

    make_topic(agent.bootstrap, "sessions", 4)
    produce(agent.bootstrap, "sessions", [f"r{i}" for i in range(8)], partitions=4)
    stays = Member(consumer_settings(agent.bootstrap, "short-sessions"), "sessions")
    goes = Killable(consumer_settings(agent.bootstrap, "short-sessions"), "sessions")
    try:
        wait_for(lambda: stays.held and goes.held and len(stays.held | goes.held) == 4,
                 why="both members holding partitions")
        goes.kill()  # SIGKILL: it never says goodbye
        silent_at = time.time()
        wait_for(lambda: len(stays.held) == 4, seconds=30,
                 why="the killed member's partitions, well before the agents' 45 s session")
        assert time.time() - silent_at >= 5, "moved before the group's session ran out"
    finally:
        stays.close()
        goes.kill()
