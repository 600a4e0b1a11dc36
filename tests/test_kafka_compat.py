"""What Kafka's own answers are that client suites and tools check: the
replica APIs answered as a cluster with nothing to move, null messages on
success, and configs Kafka 4.2 accepts."""

import pytest

import kafka.errors as Errors
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic


def admin(agent):
    return KafkaAdminClient(bootstrap_servers=agent.bootstrap)


def test_leader_elections_reassignments_and_log_dirs_have_nothing_to_move(agent):
    a = admin(agent)
    a.create_topics([NewTopic("moved", 2, 1)])
    # kafka-leader-election.sh: nothing to elect.
    answer = a.elect_leaders(0, {"moved": [0, 1]}, raise_errors=False)
    codes = [p.error_code for r in answer.replica_election_results for p in r.partition_result]
    assert codes == [Errors.ElectionNotNeededError.errno] * 2, answer
    unknown = a.elect_leaders(0, {"missing": [0]}, raise_errors=False)
    assert unknown.replica_election_results[0].partition_result[0].error_code == \
        Errors.UnknownTopicOrPartitionError.errno
    # Every partition (kafka-python names them all itself).
    every = a.elect_leaders(0, None, raise_errors=False)
    assert {r.topic for r in every.replica_election_results} >= {"moved"}
    assert {p.error_code for r in every.replica_election_results for p in r.partition_result} == \
        {Errors.ElectionNotNeededError.errno}

    # kafka-reassign-partitions.sh: an assignment of a known agent is
    # already satisfied; an unknown broker or a duplicate is refused as
    # Kafka's controller refuses it; nothing is ever in progress.
    agent_id = a.describe_cluster()["brokers"][0]["broker_id"]
    results = a.alter_partition_reassignments({
        TopicPartition("moved", 0): [agent_id],
        TopicPartition("moved", 1): [agent_id + 100],
    })
    assert results[TopicPartition("moved", 0)] is None, results
    assert results[TopicPartition("moved", 1)] is Errors.InvalidReplicationAssignmentError, results
    cancelled = a.alter_partition_reassignments({TopicPartition("moved", 0): None})
    assert cancelled[TopicPartition("moved", 0)] is Errors.NoReassignmentInProgressError
    assert a.list_partition_reassignments() == {}

    # kafka-log-dirs.sh / kafka-reassign-partitions.sh --reassignment-json-file
    # with log_dirs: the object store is the one log dir.
    moved = a.alter_replica_log_dirs({("moved", 0, agent_id): "/var/lib/kafka/other"})
    assert list(moved.values()) == [Errors.LogDirNotFoundError], moved
    a.close()


def test_successful_results_carry_a_null_message(agent):
    """Kafka sends a null error_message with a success; clients compare it
    with null (an empty string reads as a message)."""
    a = admin(agent)
    response = a.create_topics([NewTopic("quiet", 1, 1)], raise_errors=False)
    assert [t["error_message"] for t in response["topics"]] == [None], response
    a.close()


def test_subtracting_the_last_cleanup_policy_keeps_everything(agent):
    """KIP-1161 (Kafka 4.2): an empty cleanup.policy is accepted, and means
    neither deletion nor compaction."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, NewTopic as CNewTopic)
    c = AdminClient({"bootstrap.servers": agent.bootstrap})
    c.create_topics([CNewTopic("kept", 1, 1, config={"cleanup.policy": "delete"})])["kept"].result(30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "kept", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    for future in c.incremental_alter_configs([resource]).values():
        future.result(30)
    described = c.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "kept")])
    configs = list(described.values())[0].result(30)
    assert configs["cleanup.policy"].value == "", configs["cleanup.policy"]


def test_broker_configs_and_partition_assignments_as_kafka_answers(agent):
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions
    a = admin(agent)
    agent_id = a.describe_cluster()["brokers"][0]["broker_id"]
    described = a.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(agent_id))],
                                   config_filter="all")
    factor = described["broker"][str(agent_id)]["default.replication.factor"]
    assert (factor["value"], factor["read_only"]) == ("1", True), factor

    # CreatePartitions with assignments: checked as Kafka's controller does.
    a.create_topics([NewTopic("grown", 1, 1)])
    refused = a.create_partitions({"grown": NewPartitions(2, [[agent_id + 100]])}, raise_errors=False)
    result = refused.results[0]
    assert result.error_code == Errors.InvalidReplicationAssignmentError.errno, result
    assert "no such broker is registered" in result.error_message, result
    grown = a.create_partitions({"grown": NewPartitions(2, [[agent_id]])}, raise_errors=False)
    assert grown.results[0].error_code == 0, grown
    a.close()


def test_clients_take_floe_for_kafka_4_1_and_list_transactions_by_pattern(agent):
    """kafka-python infers a broker's version from the highest versions it
    serves; floe serves Kafka 4.1's. ListTransactions v2 filters by a
    pattern (KIP-1152)."""
    from confluent_kafka import Producer
    a = admin(agent)
    assert a.get_broker_version_data(0).broker_version == (4, 1)
    for txn in ["orders-1", "orders-2", "audit-1"]:
        p = Producer({"bootstrap.servers": agent.bootstrap, "transactional.id": txn})
        p.init_transactions(30)
    listed = a.list_transactions(transactional_id_pattern="orders-.*")
    assert sorted(t.transactional_id for ts in listed.values() for t in ts) == ["orders-1", "orders-2"]
    everything = a.list_transactions()
    assert len([t for ts in everything.values() for t in ts]) == 3
    a.close()


def test_config_resources_are_listed_by_type(agent):
    """ListConfigResources v1 (KIP-1142, kafka-python's list_config_resources):
    every type when none is named, in Kafka 4.1's order; only groups that
    set configs; an unsupported type refuses the whole request."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
    admin.create_topics([NewTopic("listed-a", 1, 1), NewTopic("listed-b", 1, 1)])
    admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, "configured",
                                        configs={"consumer.session.timeout.ms": "50000"})])
    everything = admin.list_config_resources()
    assert everything == {"group": ["configured"], "broker": ["0"],
                          "topic": ["listed-a", "listed-b"]}, everything
    assert admin.list_config_resources(["GROUP", "TOPIC"]) == \
        {"group": ["configured"], "topic": ["listed-a", "listed-b"]}
    assert admin.list_config_resources(["BROKER_LOGGER"]) == {}
    with pytest.raises(Errors.UnsupportedVersionError):
        admin.list_config_resources(["UNKNOWN"])
    admin.close()
