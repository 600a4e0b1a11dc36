"""Bad input: oversized, truncated and garbage frames close only that
connection; a corrupt batch gets CORRUPT_MESSAGE; the agent and its data stay intact."""

import socket
import struct
import time

from kafka.record.default_records import DefaultRecordBatchBuilder

from clients import create_topic, kcat, kcat_consume

CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUIRED_ACKS = 21
INVALID_RECORD = 87


def connect(agent):
    s = socket.create_connection(("127.0.0.1", agent.port), timeout=10)
    return s


def closed_by_peer(s, timeout=10):
    """True when the agent closes the connection (EOF or reset) within `timeout`."""
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def produce_v3(topic, partition, records, acks=-1, correlation_id=1, timeout_ms=30_000):
    """A Produce v3 request frame, encoded by hand so the batch can be anything."""
    body = struct.pack(">hhi", 0, 3, correlation_id) + string("raw-test")
    body += struct.pack(">h", -1)  # no transactional id
    body += struct.pack(">hi", acks, timeout_ms)
    body += struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">i", partition)
    body += struct.pack(">i", len(records)) + records
    return struct.pack(">i", len(body)) + body


def read_produce_v3_response(s):
    """-> (correlation id, partition error code, base offset)."""
    s.settimeout(30)
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    data = recv_exact(s, size)
    correlation_id = struct.unpack(">i", data[:4])[0]
    at = 4
    (topics,) = struct.unpack(">i", data[at:at + 4]); at += 4
    assert topics == 1
    (name_len,) = struct.unpack(">h", data[at:at + 2]); at += 2 + name_len
    (parts,) = struct.unpack(">i", data[at:at + 4]); at += 4
    assert parts == 1
    _partition, error, base_offset = struct.unpack(">ihq", data[at:at + 14])
    return correlation_id, error, base_offset


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "connection closed early"
        buf += chunk
    return buf


def batch(values, producer_id=-1, producer_epoch=-1, base_sequence=-1, codec=0):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=base_sequence, batch_size=1 << 20)
    for n, v in enumerate(values):
        builder.append(n, timestamp=1_000 + n, key=None, value=v, headers=[])
    return bytes(builder.build())


def init_producer_id_v0(s, correlation_id, producer=None):
    """InitProducerId v0 by hand -> (error code, producer id, epoch)."""
    body = struct.pack(">hhi", 22, 0, correlation_id) + string("raw-test")
    body += struct.pack(">hi", -1, 60_000)  # no transactional id, timeout
    s.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    data = recv_exact(s, size)
    corr, _throttle, error, producer_id, epoch = struct.unpack(">iihqh", data[:20])
    assert corr == correlation_id
    return error, producer_id, epoch


def agent_still_serves(agent, topic="still-alive"):
    kcat("-P", "-b", agent.bootstrap, "-t", topic, input="after-0\n")
    return [v for _, _, v in kcat_consume(agent.bootstrap, topic)] == ["after-0"]


def test_corrupt_batch_gets_corrupt_message(agent):
    create_topic(agent.bootstrap, "raw", 1)
    good = batch([b"one", b"two"])
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # inside the CRC-covered records
    s = connect(agent)
    s.sendall(produce_v3("raw", 0, bytes(bad), correlation_id=7))
    assert read_produce_v3_response(s) == (7, CORRUPT_MESSAGE, -1)
    truncated = good[:-3]
    s.sendall(produce_v3("raw", 0, truncated, correlation_id=8))
    assert read_produce_v3_response(s) == (8, CORRUPT_MESSAGE, -1)
    # The same connection still works, and only the good batch is stored.
    s.sendall(produce_v3("raw", 0, good, correlation_id=9))
    assert read_produce_v3_response(s) == (9, 0, 0)
    s.sendall(produce_v3("raw", 5, good, correlation_id=10))
    assert read_produce_v3_response(s) == (10, UNKNOWN_TOPIC_OR_PARTITION, -1)
    s.sendall(produce_v3("raw", 0, good, acks=2, correlation_id=11))
    assert read_produce_v3_response(s) == (11, INVALID_REQUIRED_ACKS, -1)
    s.close()
    assert [(o, v) for _, o, v in kcat_consume(agent.bootstrap, "raw")] == [(0, "one"), (1, "two")]


def lying_batch(good, count, codec=0):
    """`good` (one record) with a header claiming `count` records and a CRC to match."""
    from kafka.record.util import calc_crc32c
    b = bytearray(good)
    struct.pack_into(">h", b, 21, codec)
    struct.pack_into(">i", b, 23, count - 1)  # lastOffsetDelta
    struct.pack_into(">i", b, 57, count)  # recordCount
    struct.pack_into(">I", b, 17, calc_crc32c(bytes(b[21:])))
    return bytes(b)


def test_a_batch_claiming_more_records_than_it_holds_is_invalid(agent):
    """The review's 61-byte Produce: a header-only batch claiming 2^31-1 records
    was acknowledged, moved the high watermark by 2^31, and the next decode of
    it (ListOffsets by timestamp, key compaction) aborted the agent. Kafka
    answers INVALID_RECORD (its client does not retry it), compressed or not."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    create_topic(agent.bootstrap, "liar", 1)
    good = batch([b"honest"])
    header_only = lying_batch(good[:61], 2**31 - 1)
    assert len(header_only) == 61
    s = connect(agent)
    # The header-only one is shorter than its length says: corrupt, as
    # Kafka finds it; the others are whole but short of records.
    for n, (records, error) in enumerate([(header_only, CORRUPT_MESSAGE),
                                          (lying_batch(good, 2**31 - 1), INVALID_RECORD),
                                          (lying_batch(good, 2**31 - 1, codec=4), INVALID_RECORD),
                                          (lying_batch(good, 1_000), INVALID_RECORD)]):
        s.sendall(produce_v3("liar", 0, records, correlation_id=20 + n))
        assert read_produce_v3_response(s) == (20 + n, error, -1), n
    # Compressed garbage under a good CRC: a count its records do not
    # match, bytes that do not decompress. It used to be stored, moving the
    # high watermark by its count, and no consumer could read past it.
    for n, codec in enumerate([1, 2, 3, 4]):
        compressed = batch([b"honest"], codec=codec)
        garbage = bytearray(compressed)
        garbage[61:] = bytes(len(garbage) - 61)
        for k, records in enumerate([lying_batch(compressed, 3, codec), lying_batch(bytes(garbage), 1, codec)]):
            s.sendall(produce_v3("liar", 0, records, correlation_id=40 + 2 * n + k))
            assert read_produce_v3_response(s) == (40 + 2 * n + k, INVALID_RECORD, -1), (codec, k)
    s.sendall(produce_v3("liar", 0, good, correlation_id=30))
    assert read_produce_v3_response(s) == (30, 0, 0)
    s.close()
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    tp = TopicPartition("liar", 0)
    for spec, want in [(OffsetSpec.latest(), 1), (OffsetSpec.for_timestamp(0), 0),
                       (OffsetSpec.max_timestamp(), 0)]:
        got = admin.list_offsets({tp: spec})[tp].result(timeout=30)
        assert got.offset == want, (spec, got)
    assert agent.alive()
    assert [(o, v) for _, o, v in kcat_consume(agent.bootstrap, "liar")] == [(0, "honest")]


def test_oversized_frame_is_refused_before_allocation(make_agent):
    agent = make_agent("--max-frame-bytes", "1MiB")
    rss_before = agent.rss_kib()
    s = connect(agent)
    # Announce a 512 MiB frame and send nothing more: the agent must not wait
    # for (or allocate) the body; it closes at once.
    s.sendall(struct.pack(">i", 512 * 1024 * 1024))
    assert closed_by_peer(s)
    s.close()
    assert agent.alive()
    assert agent.rss_kib() - rss_before < 64 * 1024, "agent grew by the announced size"
    assert "bad frame" in agent.log()
    assert agent_still_serves(agent)


def test_garbage_and_truncated_frames_close_only_that_connection(agent):
    kcat("-P", "-b", agent.bootstrap, "-t", "kept", input="before-0\n")
    bystander = connect(agent)  # an idle connection that must survive the others

    garbage = connect(agent)
    garbage.sendall(struct.pack(">i", 16) + bytes(range(200, 216)))
    assert closed_by_peer(garbage)

    tiny = connect(agent)
    tiny.sendall(struct.pack(">i", 2) + b"\x00\x12")
    assert closed_by_peer(tiny)

    # A header announcing a huge array in a tiny body.
    huge_array = connect(agent)
    body = struct.pack(">hhi", 3, 1, 1) + struct.pack(">h", -1) + struct.pack(">i", 0x7FFFFFFF)
    huge_array.sendall(struct.pack(">i", len(body)) + body)
    assert closed_by_peer(huge_array)

    # A frame cut off mid-body, then the client goes away.
    truncated = connect(agent)
    truncated.sendall(struct.pack(">i", 100) + b"\x00" * 20)
    truncated.close()
    time.sleep(0.2)

    assert agent.alive()
    log = agent.log()
    assert "undecodable request" in log
    # The idle connection still gets answers: ApiVersions v0.
    request = struct.pack(">hhi", 18, 0, 42) + string("bystander")
    bystander.sendall(struct.pack(">i", len(request)) + request)
    size = struct.unpack(">i", recv_exact(bystander, 4))[0]
    correlation_id, error = struct.unpack(">ih", recv_exact(bystander, size)[:6])
    assert (correlation_id, error) == (42, 0)
    bystander.close()
    assert [v for _, _, v in kcat_consume(agent.bootstrap, "kept")] == ["before-0"]
    assert agent_still_serves(agent)


OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def test_idempotent_sequences_like_kafka(agent):
    create_topic(agent.bootstrap, "idem-raw", 1)
    s = connect(agent)
    error, pid, epoch = init_producer_id_v0(s, 1)
    assert error == 0 and pid >= 0 and epoch == 0

    first = batch([b"a", b"b"], pid, epoch, 0)
    s.sendall(produce_v3("idem-raw", 0, first, correlation_id=2))
    assert read_produce_v3_response(s) == (2, 0, 0)
    # The producer retries after a lost answer: same offset, nothing stored twice.
    s.sendall(produce_v3("idem-raw", 0, first, correlation_id=3))
    assert read_produce_v3_response(s) == (3, 0, 0)
    # A gap in the sequence is refused.
    s.sendall(produce_v3("idem-raw", 0, batch([b"x"], pid, epoch, 5), correlation_id=4))
    assert read_produce_v3_response(s) == (4, OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    s.sendall(produce_v3("idem-raw", 0, batch([b"c"], pid, epoch, 2), correlation_id=5))
    assert read_produce_v3_response(s) == (5, 0, 2)
    # A producer id the metastore keeps nothing of (ids come in blocks,
    # KIP-730): as Kafka, its first batch is taken at any sequence, and its
    # state starts there.
    stranger = batch([b"z"], pid + 100_000, 0, 7)
    s.sendall(produce_v3("idem-raw", 0, stranger, correlation_id=6))
    assert read_produce_v3_response(s) == (6, 0, 3)
    s.sendall(produce_v3("idem-raw", 0, stranger, correlation_id=7))
    assert read_produce_v3_response(s) == (7, 0, 3), "a retry"
    s.close()

    # Sequence state lives in the metastore: it survives a kill -9.
    agent.restart()
    s = connect(agent)
    s.sendall(produce_v3("idem-raw", 0, batch([b"c"], pid, epoch, 2), correlation_id=8))
    assert read_produce_v3_response(s) == (8, 0, 2)
    s.close()
    assert [(o, v) for _, o, v in kcat_consume(agent.bootstrap, "idem-raw")] == [
        (0, "a"), (1, "b"), (2, "c"), (3, "z")]


def test_sigterm_finishes_accepted_produce_requests(make_agent):
    # No early upload either: the produce must still wait when SIGTERM comes.
    agent = make_agent("--flush-interval", "2s", "--min-flush-interval", "2s")
    create_topic(agent.bootstrap, "drain", 1)
    s = connect(agent)
    s.sendall(produce_v3("drain", 0, batch([b"last-words"]), correlation_id=77))
    time.sleep(0.3)  # accepted, waiting for its flush
    agent.proc.terminate()  # SIGTERM
    assert read_produce_v3_response(s) == (77, 0, 0)
    agent.proc.wait(timeout=30)
    s.close()
    agent.start()
    assert [(o, v) for _, o, v in kcat_consume(agent.bootstrap, "drain")] == [(0, "last-words")]
