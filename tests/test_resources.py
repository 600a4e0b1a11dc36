"""What hostile connections can make an agent hold is bounded.

Thousands of idle connections, clients trickling half frames (slowloris),
and clients that pipeline Fetch requests and never read the answers, all at
once, while a real producer and consumer keep working. The agent's peak RSS
stays under what the memory paragraph of docs/kafka-compatibility.md says it needs.

Before: 64 pipelined fetches per connection each held their whole response
(up to 55 MiB) until the client read it, the frame codec reserved whatever
size a frame announced, and there was no connection limit or idle timeout."""

import resource
import socket
import struct
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from clients import create_topic
from test_metrics import metric

MIB = 1024 * 1024


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def fetch_v4(topic, correlation_id, max_bytes):
    """Fetch v4 by hand: partition 0 from offset 0, no wait."""
    body = struct.pack(">hhi", 1, 4, correlation_id) + string("hostile")
    body += struct.pack(">iiiib", -1, 0, 1, max_bytes, 0)
    body += struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, max_bytes)
    return struct.pack(">i", len(body)) + body


def connect(agent):
    s = socket.create_connection(("127.0.0.1", agent.port), timeout=10)
    # A small receive buffer, so unread responses pile up in the agent.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return s


def closed_within(s, seconds):
    s.settimeout(seconds)
    try:
        while True:
            if s.recv(65536) == b"":
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_connection_limits_and_idle_timeout(make_agent):
    agent = make_agent("--max-connections-per-ip", "5", "--connections-max-idle", "2s")
    held = [connect(agent) for _ in range(5)]
    time.sleep(0.2)
    extra = connect(agent)
    assert closed_within(extra, 5), "a sixth connection from one address must be closed"
    assert metric(agent.admin("/metrics")[1], "floe_connections_refused_total") >= 1
    # Half a frame, then silence: closed once idle, like a quiet connection.
    held[0].sendall(struct.pack(">i", 1000) + b"abc")
    started = time.time()
    assert closed_within(held[0], 10) and closed_within(held[1], 10)
    assert time.time() - started < 8
    # Their slots are free again.
    time.sleep(0.3)
    again = connect(agent)
    again.sendall(fetch_v4("nothing", 1, 1024))
    again.settimeout(10)
    assert len(again.recv(4)) == 4, "a new connection is served"
    for s in held + [again, extra]:
        s.close()


def test_hostile_connections_hold_bounded_memory(make_agent):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    budgets = {"--cache-bytes": 64, "--max-buffered-bytes": 64, "--max-response-bytes": 64,
               "--queued-max-request-bytes": 101, "--max-fetch-bytes": 8, "--flush-bytes": 8}
    args = [a for k, v in budgets.items() for a in (k, f"{v}MiB")]
    agent = make_agent(*args, "--connections-max-idle", "5s", "--stalled-client-timeout", "3s",
                       "--compaction-interval", "0s")
    create_topic(agent.bootstrap, "big", 1)
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 20})
    for n in range(96):
        p.produce("big", value=bytes([n % 256]) * (256 * 1024), partition=0)
    assert p.flush(60) == 0
    baseline = agent.rss_kib()

    peak = [baseline]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], agent.rss_kib())
            time.sleep(0.05)

    live_sent, live_got = [], []

    def live():
        producer = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 5})
        consumer = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "live",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("live", 0, 0)])
        n = 0
        while not stop.is_set():
            producer.produce("live", value=f"v{n}", partition=0)
            live_sent.append(f"v{n}")
            n += 1
            producer.poll(0)
            m = consumer.poll(0.05)
            if m is not None and not m.error():
                live_got.append(m.value().decode())
        assert producer.flush(60) == 0
        deadline = time.time() + 60
        while len(live_got) < len(live_sent) and time.time() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                live_got.append(m.value().decode())
        consumer.close()

    create_topic(agent.bootstrap, "live", 1)
    threads = [threading.Thread(target=sample), threading.Thread(target=live)]
    for t in threads:
        t.start()

    idle = [socket.create_connection(("127.0.0.1", agent.port)) for _ in range(2000)]
    slow = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", agent.port))
        s.sendall(struct.pack(">i", 90 * MIB) + b"\x00\x01")  # announce 90 MiB, send 2 bytes
        slow.append(s)
    # Forty more send 4 MiB of their 90 MiB and stop: 160 MiB, of which the
    # request budget lets about 100 MiB in until they stall out.
    half = MIB * 4 * b"h"
    for _ in range(40):
        s = socket.create_connection(("127.0.0.1", agent.port))
        s.setblocking(False)
        try:
            s.send(struct.pack(">i", 90 * MIB))
            sent = 0
            while sent < len(half):
                sent += s.send(half[sent:])
        except BlockingIOError:
            pass  # the agent stopped reading it: the budget is spent
        slow.append(s)
    greedy = []
    for c in range(20):
        s = connect(agent)
        s.setblocking(False)
        frames = b"".join(fetch_v4("big", n, 8 * MIB) for n in range(64))
        try:
            s.sendall(frames)
        except BlockingIOError:
            pass  # the agent stopped reading this connection: as intended
        greedy.append(s)
    time.sleep(8)  # past the idle timeout: unread responses are dropped
    stop.set()
    for t in threads:
        t.join(timeout=120)
    for s in idle + slow + greedy:
        s.close()

    grown_mib = (peak[0] - baseline) / 1024
    limit_mib = sum(budgets[k] for k in ("--cache-bytes", "--max-buffered-bytes",
                                         "--max-response-bytes", "--queued-max-request-bytes"))
    # Transient copies while encoding (one fetch per worker thread) and the
    # connections' own buffers and tasks.
    overhead_mib = 2 * 2 * budgets["--max-fetch-bytes"] + 64
    print(f"peak RSS {peak[0] / 1024:.0f} MiB (baseline {baseline / 1024:.0f} MiB, "
          f"grew {grown_mib:.0f} MiB; budgets {limit_mib} MiB + overhead {overhead_mib} MiB); "
          f"live client sent {len(live_sent)} got {len(live_got)}")
    assert agent.alive()
    assert grown_mib < limit_mib + overhead_mib
    assert live_sent and sorted(live_got) == sorted(live_sent)


def test_a_client_that_never_reads_holds_one_response_until_its_stall_timeout(make_agent):
    """A connection that pipelines fetches and reads none of them held
    whatever responses it had completed until connections_max_idle (10
    minutes by default), and as many as raced ahead of the first write. Now
    it holds one response's budget at a time (the agent's metric shows it),
    another consumer keeps being served meanwhile, and the connection is
    closed once it has read nothing for stalled_client_timeout."""
    # Extents of about 1 MiB (the flush size): every fetch here plans about
    # 9 MiB (8 MiB and the extent that crosses it), so the budget holds two.
    agent = make_agent("--max-response-bytes", "20MiB", "--max-fetch-bytes", "8MiB",
                       "--flush-bytes", "1MiB",
                       "--stalled-client-timeout", "15s", "--connections-max-idle", "120s",
                       "--compaction-interval", "0s")
    create_topic(agent.bootstrap, "big", 1)
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 20})
    for n in range(40):
        p.produce("big", value=bytes([n]) * (256 * 1024), partition=0)
    assert p.flush(60) == 0

    attacker = connect(agent)
    attacker.setblocking(False)
    try:
        attacker.sendall(b"".join(fetch_v4("big", n, 8 * MIB) for n in range(64)))
    except BlockingIOError:
        pass  # the agent stopped reading it: as intended
    attacked_at = time.time()
    time.sleep(1)  # its fetches take their budget
    free = metric(agent.admin("/metrics")[1], "floe_response_budget_free_bytes")
    print(f"response budget free during the attack: {free / MIB:.1f} MiB of 20")
    assert free >= 10 * MIB, "the attacker holds more than one response"

    consumer = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "victim",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 8 * MIB})
    consumer.assign([TopicPartition("big", 0, 0)])
    first = None
    while first is None and time.time() - attacked_at < 60:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            first = time.time() - attacked_at
    consumer.close()
    print(f"the other consumer's first record came {first}s into the attack")
    assert first is not None and first < 10, \
        f"starved: first record {first}s into the attack (the attacker's hold ends at 15s)"
    # The attacker read nothing: its connection is closed once stalled.
    attacker.setblocking(True)
    assert closed_within(attacker, 30), "a client reading nothing keeps its connection"
    assert time.time() - attacked_at < 45
    attacker.close()
