"""ACLs, as Kafka's StandardAuthorizer applies them: with --acls on, a
principal without ACLs is refused on produce, consume and create with
Kafka's error codes and does not see topics in Metadata; an ACL added with
`floe acls` (or an admin client) lets it in; a DENY wins over an ALLOW;
super users may do everything; `floe acls list|remove` show and take them
away. Clients: confluent-kafka (producer, consumer, admin), kcat and
kafka-python, over SASL/PLAIN."""

import json
import os
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from conftest import FLOE

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def conf(agent, user):
    return {"bootstrap.servers": agent.bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}


@pytest.fixture
def secured(make_agent, tmp_path):
    users = tmp_path / "users"
    users.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    agent = make_agent("--sasl-plain-users", str(users), "--acls", "--super-users", "User:admin")
    admin = AdminClient(conf(agent, "admin"))
    for f in admin.create_topics([NewTopic("orders", 2), NewTopic("secret", 1)]).values():
        f.result(timeout=30)
    return agent, admin


def acls(agent, *args):
    """`floe acls ...` as admin; the completed process."""
    return subprocess.run([FLOE, "acls", *args, "--bootstrap-server", agent.bootstrap,
                           "--sasl-user", "admin"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "FLOE_SASL_PASSWORD": USERS["admin"]})


def produce(agent, user, topic, n=5):
    """Delivery errors of n records sent as `user` (empty: all delivered)."""
    p = Producer({**conf(agent, user), "message.timeout.ms": 10000})
    errors = []
    for i in range(n):
        p.produce(topic, f"{user}-{i}".encode(),
                  on_delivery=lambda err, msg: err and errors.append(err.code()))
    p.flush(30)
    return errors


def consume(agent, user, topic, group, want):
    """What `user` reads of `topic` in `group` (up to `want` records), and
    the errors it got."""
    c = Consumer({**conf(agent, user), "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    values, errors = [], []
    deadline = time.time() + 20
    while len(values) < want and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            errors.append(m.error().code())
            if len(errors) > 3:
                break
        else:
            values.append(m.value().decode())
    c.close()
    return values, errors


def test_a_principal_needs_acls_and_deny_wins(secured):
    agent, admin = secured
    assert produce(agent, "admin", "orders", 10) == [], "a super user needs no ACL"

    # alice, without ACLs: refused with Kafka's codes, and sees no topic.
    assert set(produce(agent, "alice", "orders")) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    values, errors = consume(agent, "alice", "orders", "alice-group", 1)
    assert values == [] and errors, errors
    assert set(errors) <= {KafkaError.GROUP_AUTHORIZATION_FAILED,
                           KafkaError.TOPIC_AUTHORIZATION_FAILED}, errors
    alice_admin = AdminClient(conf(agent, "alice"))
    created = alice_admin.create_topics([NewTopic("alices", 1)])
    with pytest.raises(KafkaException) as refused:
        created["alices"].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert alice_admin.list_topics(timeout=10).topics.keys().isdisjoint({"orders", "secret"})

    # Allowed to write and read orders, and to use her group.
    for args in (["--operation", "write", "--operation", "read", "--topic", "orders"],
                 ["--operation", "read", "--group", "alice-", "--prefixed"]):
        added = acls(agent, "add", "--principal", "User:alice", *args)
        assert added.returncode == 0, added.stderr
    assert produce(agent, "alice", "orders") == []
    values, errors = consume(agent, "alice", "orders", "alice-group", 15)
    assert len(values) == 15, (values, errors)
    assert set(alice_admin.list_topics(timeout=10).topics) & {"orders", "secret"} == {"orders"}, \
        "READ implies DESCRIBE; the other topic stays hidden"

    # Another group is not hers.
    values, errors = consume(agent, "alice", "orders", "bobs-group", 1)
    assert values == [] and KafkaError.GROUP_AUTHORIZATION_FAILED in errors, errors

    # A DENY wins over her ALLOW.
    denied = acls(agent, "add", "--principal", "User:alice", "--operation", "read",
                  "--topic", "orders", "--deny")
    assert denied.returncode == 0, denied.stderr
    values, errors = consume(agent, "alice", "orders", "alice-group2", 1)
    assert values == [] and KafkaError.TOPIC_AUTHORIZATION_FAILED in errors, errors

    listed = acls(agent, "list", "--principal", "User:alice", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {(r["resource"], r["name"], r["pattern"], r["operation"], r["permission"])
            for r in json.loads(listed.stdout)["acls"]}
    assert rows == {("topic", "orders", "literal", "write", "allow"),
                    ("topic", "orders", "literal", "read", "allow"),
                    ("topic", "orders", "literal", "read", "deny"),
                    ("group", "alice-", "prefixed", "read", "allow")}

    # Removed, she is out again.
    removed = acls(agent, "remove", "--principal", "User:alice", "--topic", "orders")
    assert removed.returncode == 0 and "removed 3" in removed.stderr, removed.stderr
    assert set(produce(agent, "alice", "orders")) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}

    # floe acls itself needs the cluster's ALTER: alice may not add ACLs.
    by_alice = subprocess.run(
        [FLOE, "acls", "add", "--principal", "User:alice", "--operation", "all", "--cluster",
         "--bootstrap-server", agent.bootstrap, "--sasl-user", "alice"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "FLOE_SASL_PASSWORD": USERS["alice"]})
    assert by_alice.returncode != 0 and "ClusterAuthorizationFailed" in by_alice.stderr, \
        by_alice.stderr
    assert agent.alive()


def test_an_admin_client_manages_acls_and_kafka_python_is_held_to_them(secured):
    agent, admin = secured
    bob_reads = AclBinding(ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, "User:bob",
                           "*", AclOperation.READ, AclPermissionType.ALLOW)
    bob_group = AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:bob",
                           "*", AclOperation.READ, AclPermissionType.ALLOW)
    for f in admin.create_acls([bob_reads, bob_group]).values():
        f.result(timeout=30)
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
        AclPermissionType.ANY)).result(timeout=30)
    assert set(found) == {bob_reads, bob_group}
    assert produce(agent, "admin", "orders", 4) == []

    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError as KafkaErrorPython
    from kafka.errors import TopicAuthorizationFailedError
    consumer = KafkaConsumer(
        "orders", bootstrap_servers=agent.bootstrap, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password=USERS["bob"],
        group_id="bobs", auto_offset_reset="earliest", consumer_timeout_ms=10000)
    assert sorted(m.value for m in consumer) == [f"admin-{i}".encode() for i in range(4)]
    consumer.close()
    as_bob = dict(bootstrap_servers=agent.bootstrap, security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="PLAIN", sasl_plain_username="bob",
                  sasl_plain_password=USERS["bob"], max_block_ms=10000)
    # Idempotent (kafka-python's default): WRITE on no topic, so no producer
    # id (CLUSTER_AUTHORIZATION_FAILED, KIP-679); plain: the topic refuses.
    producer = KafkaProducer(**as_bob)
    with pytest.raises(KafkaErrorPython, match="ClusterAuthorizationFailed"):
        producer.send("orders", b"nope").get(timeout=30)
    producer.close()
    producer = KafkaProducer(**as_bob, enable_idempotence=False)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("orders", b"nope").get(timeout=30)
    producer.close()

    deleted = admin.delete_acls([AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
        AclPermissionType.ANY)])
    for f in deleted.values():
        assert set(f.result(timeout=30)) == {bob_reads, bob_group}


def test_without_acls_the_acl_apis_say_security_is_disabled(make_agent):
    agent = make_agent()
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:x", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([binding])[binding].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_auto_creation_needs_create_and_hidden_offsets_stay_hidden(secured):
    """Producing to a missing topic creates it only with CREATE (WRITE is
    not enough), and a group's offsets listed in full (OffsetFetch v8, as the
    admin client asks) leave out topics the principal may not describe."""
    agent, admin = secured
    for args in (["--operation", "write", "--topic", "auto-", "--prefixed"],
                 ["--operation", "all", "--group", "audit"],
                 ["--operation", "describe", "--topic", "orders"]):
        added = acls(agent, "add", "--principal", "User:alice", *args)
        assert added.returncode == 0, added.stderr
    errors = produce(agent, "alice", "auto-made", 1)
    assert errors and set(errors) <= {KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                      KafkaError.UNKNOWN_TOPIC_OR_PART,
                                      KafkaError._MSG_TIMED_OUT}, errors
    assert "auto-made" not in admin.list_topics(timeout=10).topics, "WRITE alone creates nothing"
    added = acls(agent, "add", "--principal", "User:alice", "--operation", "create", "--topic",
                 "auto-", "--prefixed")
    assert added.returncode == 0, added.stderr
    assert produce(agent, "alice", "auto-made", 1) == []
    assert "auto-made" in admin.list_topics(timeout=10).topics

    # The admin commits the group's offsets on a topic alice may see and one
    # she may not; she lists them all and sees only hers.
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    done = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "audit", [TopicPartition("orders", 0, 3), TopicPartition("secret", 0, 0)])])
    for f in done.values():
        f.result(timeout=30)
    as_admin = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("audit")])
    assert {tp.topic for tp in as_admin["audit"].result(timeout=30).topic_partitions} == \
        {"orders", "secret"}
    alice_admin = AdminClient(conf(agent, "alice"))
    as_alice = alice_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("audit")])
    assert {tp.topic for tp in as_alice["audit"].result(timeout=30).topic_partitions} == \
        {"orders"}


def test_a_regex_subscription_gets_only_topics_its_principal_may_describe(secured):
    """KIP-848 regular expressions are resolved by the coordinator: as Kafka
    4, a match counts only if the member's principal may DESCRIBE the topic,
    so a member is never assigned (nor told the id of) a topic hidden from
    it. (It used to match every topic.)"""
    agent, admin = secured
    for f in admin.create_topics([NewTopic("visible-1", 2), NewTopic("hidden-1", 2)]).values():
        f.result(timeout=30)
    for args in (["--topic", "visible-1", "--operation", "read"],
                 ["--group", "regexed", "--operation", "read"]):
        done = acls(agent, "add", "--principal", "User:alice", *args)
        assert done.returncode == 0, done.stderr
    c = Consumer({**conf(agent, "alice"), "group.id": "regexed", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["^(visible|hidden)-.*"])
    assigned = set()
    deadline = time.time() + 30
    while time.time() < deadline and not assigned:
        c.poll(0.5)
        assigned = {(tp.topic, tp.partition) for tp in c.assignment()}
    # A little longer: a late assignment of the hidden topic would show.
    end = time.time() + 3
    while time.time() < end:
        c.poll(0.3)
        assigned |= {(tp.topic, tp.partition) for tp in c.assignment()}
    c.close()
    assert assigned == {("visible-1", 0), ("visible-1", 1)}, assigned
