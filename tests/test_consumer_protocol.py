"""The consumer group protocol of Kafka 4 (KIP-848, `group.protocol=consumer`)
with librdkafka: the broker assigns, members share a topic and hand
partitions over on leave and on kill -9, offsets (committed with member
epochs, OffsetCommit v9) outlive an agent restart, regular-expression
subscriptions pick up new topics, and admin clients see the group."""

import time

from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient

from test_group_protocol import (Member, commits_in_revoke_are_never_lost, make_topic,
                                 offsets_survive_a_restart, one_group_across_agents, produce,
                                 settings, share_and_hand_over, wait_for)

# Short sessions so a killed member's partitions move within the test.
FAST = ("--consumer-session-timeout", "6s", "--consumer-heartbeat-interval", "500ms")


def consumer_settings(bootstrap, group, **extra):
    conf = settings(bootstrap, group, **extra)
    # The classic protocol's settings are refused with group.protocol=consumer.
    for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
        conf.pop(key, None)
    conf["group.protocol"] = "consumer"
    return conf


def test_members_share_and_hand_over_on_leave_and_on_kill(make_agent):
    agent = make_agent(*FAST)
    share_and_hand_over(agent, consumer_settings(agent.bootstrap, "new-protocol"), "kip848")


def test_committed_offsets_survive_an_agent_restart(make_agent):
    agent = make_agent(*FAST)
    offsets_survive_a_restart(agent, lambda: consumer_settings(agent.bootstrap, "keepers848"),
                              "kept848")


def test_a_regular_expression_subscription_picks_up_new_topics(make_agent):
    agent = make_agent(*FAST)
    make_topic(agent.bootstrap, "metrics-a", 2)
    m = Member(consumer_settings(agent.bootstrap, "by-regex"), "^metrics-.*")
    try:
        wait_for(lambda: len(m.held) == 2, why="metrics-a's partitions")
        # Resolved again at least every 10 s: a new matching topic joins.
        make_topic(agent.bootstrap, "metrics-b", 2)
        make_topic(agent.bootstrap, "other", 2)
        produce(agent.bootstrap, "metrics-b", ["late"], partitions=2)
        wait_for(lambda: "late" in [v for _, _, v in m.read], seconds=60,
                 why="a record of the topic created after the subscription")
        assert not m.errors, m.errors
    finally:
        m.close()


def test_admin_clients_see_a_consumer_group(make_agent):
    agent = make_agent(*FAST)
    make_topic(agent.bootstrap, "seen848", 4)
    m = Member(consumer_settings(agent.bootstrap, "seen", client_id="watcher848"), "seen848")
    try:
        wait_for(lambda: len(m.held) == 4, why="an assignment")
        kafka_admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
        listed = {g["group_id"]: g for g in kafka_admin.list_groups()}
        assert listed["seen"]["group_type"] == "consumer", listed
        assert listed["seen"]["group_state"] == "Stable", listed
        kafka_admin.close()
        admin = AdminClient({"bootstrap.servers": agent.bootstrap})
        described = admin.describe_consumer_groups(["seen"])["seen"].result(30)
        assert [mm.client_id for mm in described.members] == ["watcher848"]
        assigned = described.members[0].assignment.topic_partitions
        assert sorted(tp.partition for tp in assigned) == [0, 1, 2, 3]
        # A consumer of the classic protocol joins it as a classic member
        # (Kafka 4): the group stays a consumer group, and they share.
        classic = Member(settings(agent.bootstrap, "seen"), "seen848")
        try:
            wait_for(lambda: len(m.held) == 2 and len(classic.held) == 2,
                     why="the classic member's share")
            kafka_admin = KafkaAdminClient(bootstrap_servers=agent.bootstrap)
            listed = {g["group_id"]: g for g in kafka_admin.list_groups()}
            assert listed["seen"]["group_type"] == "consumer", listed
            kafka_admin.close()
            assert not classic.errors, classic.errors
        finally:
            classic.close()
    finally:
        m.close()


def test_a_commit_in_the_revoke_callback_is_never_lost(make_agent):
    agent = make_agent(*FAST)
    commits_in_revoke_are_never_lost(agent, consumer_settings(agent.bootstrap, "handers848"))


def test_one_group_spans_agents(peer_agents):
    first, second = peer_agents(2, "--flush-interval", "20ms", *FAST)
    one_group_across_agents(first, second,
                            lambda agent: consumer_settings(agent.bootstrap, "spread848"))
