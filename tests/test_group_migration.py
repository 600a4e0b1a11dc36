"""Groups moving between the classic and the consumer protocol while their
members run (Kafka 4's online migration, KIP-848), with librdkafka: a rolling
upgrade of a classic group to `group.protocol=consumer` and its rollback
process every record once, for cooperative-sticky and for eager (range)
members; `group.consumer.migration.policy=disabled` refuses the upgrade."""

import threading
import time

from confluent_kafka import Consumer
from kafka.admin import KafkaAdminClient

from test_consumer_protocol import FAST, consumer_settings
from test_cli import floe
from test_group_protocol import (Member, disjoint_cover, each_read_once, make_topic, produce,
                                 settings, wait_for)


def group_type(bootstrap, group):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        return listed.get(group, {}).get("group_type")
    finally:
        admin.close()


def upgrade_and_roll_back(agent, strategy, group):
    """Two classic members share a topic while records flow; a third joins
    with the consumer protocol (the group is upgraded and all three share),
    then leaves (the group is classic again and the two share). Every
    member commits what it processed in its revoke callback: no record is
    processed twice, and every one is processed."""
    topic = f"{group}-t"
    make_topic(agent.bootstrap, topic)
    classic = settings(agent.bootstrap, group, partition_assignment_strategy=strategy)
    values = [f"{group}{i}" for i in range(3_000)]
    producing = threading.Thread(
        target=lambda: [produce(agent.bootstrap, topic, values[i:i + 100]) or time.sleep(0.05)
                        for i in range(0, len(values), 100)])
    a = Member(classic, topic, commit_on_revoke=True)
    b = Member(classic, topic, commit_on_revoke=True)
    members = [a, b]
    try:
        wait_for(lambda: disjoint_cover(a, b), why="two classic members sharing")
        assert group_type(agent.bootstrap, group) == "classic"
        producing.start()
        time.sleep(0.5)
        c = Member(consumer_settings(agent.bootstrap, group), topic, commit_on_revoke=True)
        members.append(c)
        wait_for(lambda: disjoint_cover(a, b, c), why="the upgraded group's three members sharing")
        assert group_type(agent.bootstrap, group) == "consumer"
        time.sleep(1)
        c.close()
        wait_for(lambda: group_type(agent.bootstrap, group) == "classic",
                 why="the group classic again once its consumer member left")
        wait_for(lambda: disjoint_cover(a, b), why="the classic members sharing again")
        producing.join()
        each_read_once(members, values)
    finally:
        for m in members:
            m.close()


def test_a_cooperative_group_upgrades_and_rolls_back_processing_each_record_once(make_agent):
    upgrade_and_roll_back(make_agent(*FAST), "cooperative-sticky", "rolling")


def test_an_eager_group_upgrades_and_rolls_back_processing_each_record_once(make_agent):
    upgrade_and_roll_back(make_agent(*FAST), "range", "eager")


def test_a_disabled_migration_policy_refuses_the_upgrade(make_agent):
    agent = make_agent(*FAST)
    floe(agent, "configs", "alter", "--cluster",
         "--config", "group.consumer.migration.policy=disabled")
    make_topic(agent.bootstrap, "kept-classic", 4)
    a = Member(settings(agent.bootstrap, "stays"), "kept-classic")
    try:
        wait_for(lambda: len(a.held) == 4, why="the classic member's assignment")
        newcomer = Consumer(consumer_settings(agent.bootstrap, "stays"))
        newcomer.subscribe(["kept-classic"])
        error = None
        deadline = time.time() + 20
        while time.time() < deadline and error is None:
            msg = newcomer.poll(0.2)
            if msg is not None and msg.error():
                error = msg.error()
        newcomer.close()
        # GROUP_ID_NOT_FOUND, as Kafka answers: fatal to librdkafka's consumer.
        assert error is not None and "group id does not exist" in error.str(), error
        assert group_type(agent.bootstrap, "stays") == "classic"
        assert len(a.held) == 4 and not a.errors, a.errors
    finally:
        a.close()
