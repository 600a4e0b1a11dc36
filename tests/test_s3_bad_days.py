"""S3's bad days, injected beneath object_store's S3 client (so its retries
and backoff meet them as they would meet S3's): 503 SlowDown answers,
connections reset before and after the server handled a request, and a
long-tailed latency. Acknowledgements and fetches slow down; nothing is
lost, nothing duplicated, and no error reaches a client."""

import time

from confluent_kafka import Producer

from clients import create_topic, kcat_consume
from conftest import S3_KEYS
from test_metrics import metric

PARTITIONS = 3
RECORDS = 3000


def s3_url(endpoint):
    # Retries enough that a request failing two attempts in three is still
    # retried to success (0.64^41 is about 1e-8), with short waits.
    return (f"s3://floe-test/bad-days-{time.time_ns()}?endpoint={endpoint}&region=us-east-1"
            "&path_style=true&max_retries=40&backoff_max=100ms&retry_timeout=120s")


def produce(bootstrap, topic):
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 120000})
    for i in range(RECORDS):
        p.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: err and errors.append(err))
        if i % 100 == 99:
            # Acknowledged before the next hundred: many ingest files, many PUTs.
            assert p.flush(120) == 0
    assert p.flush(120) == 0
    assert errors == []


def check_exactly_once(bootstrap, topic):
    rows = kcat_consume(bootstrap, topic)
    values = [value for _, _, value in rows]
    assert sorted(values) == sorted(f"v{i}" for i in range(RECORDS)), "lost or duplicated records"


def test_slowdowns_and_resets_on_puts_lose_and_duplicate_nothing(make_agent, s3_endpoint):
    agent = make_agent("--object-store", s3_url(s3_endpoint), "--compaction-interval", "0s",
                       "--flush-interval", "10ms", "--inject-faults",
                       "put_slowdown_rate=0.4,reset_rate=0.4,latency_p50=2ms,latency_p99=40ms",
                       env=S3_KEYS)
    create_topic(agent.bootstrap, "slow-puts", PARTITIONS)
    # The cluster-id marker is created at start with a conditional PUT, which
    # object_store does not retry (it is not idempotent): floe retries it
    # itself, and those attempts may show as errors. Count from here.
    errors_at_start = metric(agent.admin("/metrics")[1], "floe_object_store_errors_total", op="put")
    produce(agent.bootstrap, "slow-puts")
    check_exactly_once(agent.bootstrap, "slow-puts")
    page = agent.admin("/metrics")[1]
    puts = metric(page, "floe_object_store_requests_total", op="put")
    injected = {op: metric(page, "floe_object_store_injected_faults_total", op=op)
                for op in ("slowdown", "reset_before", "reset_after_put")}
    print(f"{puts:.0f} PUTs met {injected}")
    # About 80 attempts for 30 PUTs: some 33 SlowDowns, 10 resets before and
    # 10 after the server stored the object (each about 5e-5 to miss).
    assert injected["slowdown"] >= 5 and injected["reset_before"] >= 1, page
    assert injected["reset_after_put"] >= 1, "a PUT stored and then retried"
    # object_store retried every one of them: none reached floe as an error.
    assert metric(page, "floe_object_store_errors_total", op="put") == errors_at_start


def test_slowdowns_and_resets_on_gets_do_not_reach_consumers(make_agent, s3_endpoint):
    url = s3_url(s3_endpoint)
    keys = S3_KEYS
    agent = make_agent("--object-store", url, "--compaction-interval", "0s",
                       "--flush-interval", "10ms", env=keys)
    create_topic(agent.bootstrap, "slow-gets", PARTITIONS)
    produce(agent.bootstrap, "slow-gets")
    # Restarted with a cold cache and a misbehaving S3: every read is a GET.
    agent.extra_args += ["--inject-faults", "get_slowdown_rate=0.5,reset_rate=0.2,"
                         "latency_p50=2ms,latency_p99=40ms", "--cache-block-bytes", "64KiB"]
    agent.restart()
    check_exactly_once(agent.bootstrap, "slow-gets")
    page = agent.admin("/metrics")[1]
    gets = metric(page, "floe_object_store_requests_total", op="get")
    slowdowns = metric(page, "floe_object_store_injected_faults_total", op="slowdown")
    print(f"{gets:.0f} GETs met {slowdowns:.0f} SlowDowns")
    assert gets > 0 and slowdowns > 0, page
    assert metric(page, "floe_object_store_errors_total", op="get") == 0
