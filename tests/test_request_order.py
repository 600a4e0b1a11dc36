"""A connection's requests take effect in the order they were sent, as a
Kafka broker's do: real clients pipeline requests and rely on it."""

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec


def test_admin_list_offsets_sees_the_delete_records_sent_before_it(agent):
    """confluent-kafka's AdminClient sends DeleteRecords and then
    ListOffsets(earliest) on one connection without waiting: the listing
    must see the deletion (it answered 0 while the deletion answered 2)."""
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    admin.create_topics([NewTopic("ordered", 1, 1)])["ordered"].result(timeout=30)
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 5})
    for i in range(40):
        p.produce("ordered", value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    tp = TopicPartition("ordered", 0)
    for before in range(2, 40, 2):
        deleting = admin.delete_records([TopicPartition("ordered", 0, before)])
        listing = admin.list_offsets({tp: OffsetSpec.earliest()})
        deleted = list(deleting.values())[0].result(timeout=30)
        assert deleted.low_watermark == before
        earliest = list(listing.values())[0].result(timeout=30)
        assert earliest.offset == before, f"ListOffsets answered {earliest.offset} after DeleteRecords to {before}"
