"""Object-store failures: with injected PUT failures (and lost PUT replies)
producers get retriable errors and retry; nothing acknowledged is lost and
nothing is duplicated. With injected GET failures consumers retry and read
everything. Orphaned uploads are collected."""

import time

from kafka import KafkaProducer

from check import check_partitions
from clients import create_topic, kcat, kcat_consume, python_consume
import test_bad_input as raw

PARTITIONS = 3


def test_put_failures_lose_and_duplicate_nothing(make_agent):
    agent = make_agent("--inject-faults", "put_error_rate=0.3,put_lost_reply_rate=0.1",
                       "--flush-interval", "50ms", "--compaction-interval", "1s",
                       "--gc-grace", "0s")
    create_topic(agent.bootstrap, "faulty", PARTITIONS)

    # Idempotent kafka-python producer.
    p = KafkaProducer(bootstrap_servers=agent.bootstrap, linger_ms=5, retries=1000,
                      retry_backoff_ms=20, request_timeout_ms=30_000)
    py_values = [f"py-{i}" for i in range(3_000)]
    futures = [p.send("faulty", value=v.encode(), partition=i % PARTITIONS)
               for i, v in enumerate(py_values)]
    p.flush()
    for f in futures:
        f.get(timeout=60)
    p.close()

    # Plain librdkafka producer (not idempotent): a failed PUT sequenced nothing,
    # so its retries cannot duplicate either.
    kc_values = [f"kc-{i}" for i in range(3_000)]
    kcat("-P", "-b", agent.bootstrap, "-t", "faulty", "-K", ":", "-X", "retry.backoff.ms=20",
         input="".join(f"k{i % 7}:{v}\n" for i, v in enumerate(kc_values)))

    rows = python_consume(agent.bootstrap, "faulty", PARTITIONS)
    # Offsets are contiguous over both producers; each value appears exactly once.
    check_partitions(rows, py_values + kc_values)
    log = agent.log()
    assert "ingest upload failed" in log, "no fault was injected"
    # Lost-reply uploads were recorded and collected.
    deadline = time.time() + 30
    while time.time() < deadline and "gc deleted unreferenced objects" not in agent.log():
        time.sleep(0.5)
    assert "gc deleted unreferenced objects" in agent.log()


def test_get_failures_are_retried_by_consumers(make_agent):
    agent = make_agent()
    values = [f"g-{i}" for i in range(5_000)]
    for chunk in range(5):  # several ingest objects
        kcat("-P", "-b", agent.bootstrap, "-t", "flaky-reads",
             input="".join(f"{v}\n" for v in values[chunk * 1000:(chunk + 1) * 1000]))
    # Restart with a cold cache and failing GETs.
    agent.extra_args = ["--inject-faults", "get_error_rate=0.3"]
    agent.restart()
    check_partitions(kcat_consume(agent.bootstrap, "flaky-reads"), values)
    check_partitions(python_consume(agent.bootstrap, "flaky-reads", 1), values)
    assert "reading objects failed" in agent.log()


def test_objects_the_metastore_never_heard_of_are_swept(make_agent):
    agent = make_agent("--compaction-interval", "500ms", "--gc-grace", "0s", "--orphan-age", "1s")
    kcat("-P", "-b", agent.bootstrap, "-t", "swept", input="".join(f"s-{i}\n" for i in range(100)))
    # An upload whose commit never happened (the agent died in between).
    stray = agent.workdir / "objects" / "ingest" / "ff" / "stray-upload"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"never committed")
    deadline = time.time() + 30
    while time.time() < deadline and stray.exists():
        time.sleep(0.3)
    assert not stray.exists()
    assert "found orphaned objects" in agent.log()
    check_partitions(kcat_consume(agent.bootstrap, "swept"), [f"s-{i}" for i in range(100)])


REQUEST_TIMED_OUT = 7


def test_a_produce_slower_than_its_timeout_gets_request_timed_out(make_agent):
    """Every PUT takes 8 s: a produce that asked for a 100 ms timeout is
    answered REQUEST_TIMED_OUT after floe's 5 s floor, as Kafka answers a
    produce whose replication outlived its timeout, instead of holding the
    connection. The batch was already on its way, so it is still stored."""
    agent = make_agent("--inject-faults", "latency=8s", "--flush-interval", "20ms")
    create_topic(agent.bootstrap, "slow-store", 1)
    s = raw.connect(agent)
    started = time.time()
    s.sendall(raw.produce_v3("slow-store", 0, raw.batch([b"late"]), timeout_ms=100))
    _, error, _ = raw.read_produce_v3_response(s)
    waited = time.time() - started
    assert error == REQUEST_TIMED_OUT, f"error code {error}"
    assert 4 < waited < 8, f"answered after {waited:.1f}s"
    deadline = time.time() + 30
    values = []
    while time.time() < deadline and not values:
        time.sleep(1)
        values = [v for _, _, v in kcat_consume(agent.bootstrap, "slow-store")]
    assert values == ["late"]
