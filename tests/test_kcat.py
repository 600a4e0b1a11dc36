"""kcat (librdkafka): every codec, 100,000 records each, across partitions,
consumed back in order and again after the agent is killed and restarted."""

from check import check_partitions
from clients import CODECS, create_topic, kcat, kcat_consume

RECORDS = 100_000
PARTITIONS = 4


def test_all_codecs_round_trip_and_survive_kill(agent):
    produced = {}
    for codec in CODECS:
        topic = f"kcat-{codec}"
        create_topic(agent.bootstrap, topic, PARTITIONS)
        values = [f"{codec}-{i}" for i in range(RECORDS)]
        # Keyed, so librdkafka spreads records over all partitions by key hash.
        lines = "".join(f"k{i % 101}:{v}\n" for i, v in enumerate(values))
        kcat("-P", "-b", agent.bootstrap, "-t", topic, "-K", ":", "-z", codec, input=lines)
        produced[topic] = values

    before = {}
    for topic, values in produced.items():
        rows = kcat_consume(agent.bootstrap, topic)
        by_partition = check_partitions(rows, values)
        assert len(by_partition) == PARTITIONS, f"{topic}: only {sorted(by_partition)} got records"
        before[topic] = sorted(rows)

    agent.kill()
    agent.start()
    for topic, rows in before.items():
        assert sorted(kcat_consume(agent.bootstrap, topic)) == rows, f"{topic} changed across a kill -9"


def test_metadata_lists_topics_and_this_agent(agent):
    create_topic(agent.bootstrap, "listed", 3)
    out = kcat("-L", "-b", agent.bootstrap, "-t", "listed")
    assert f"broker 0 at 127.0.0.1:{agent.port}" in out
    assert 'topic "listed" with 3 partitions' in out


def test_idempotent_producer(agent):
    create_topic(agent.bootstrap, "idem", 2)
    values = [f"idem-{i}" for i in range(20_000)]
    kcat("-P", "-b", agent.bootstrap, "-t", "idem", "-K", ":", "-X", "enable.idempotence=true",
         "-X", "max.in.flight=5", input="".join(f"k{i % 13}:{v}\n" for i, v in enumerate(values)))
    check_partitions(kcat_consume(agent.bootstrap, "idem"), values)
