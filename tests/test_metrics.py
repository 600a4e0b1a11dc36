"""The admin port: Prometheus metrics of object-store requests and bytes by
operation, Kafka requests and latencies by API, flush sizes; health checks."""

import re

from clients import kcat, kcat_consume


def metric(text, name, **labels):
    """The value of one sample, 0 if absent."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}(?:\{{{re.escape(want)}\}})? (\S+)$" if want else rf"^{re.escape(name)} (\S+)$"
    for line in text.splitlines():
        m = re.match(pattern, line)
        if m:
            return float(m.group(1))
    return 0.0


def metric_sum(text, name):
    """The sum of every sample of `name`, whatever its labels."""
    pattern = rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$"
    return sum(float(m.group(1)) for m in (re.match(pattern, line) for line in text.splitlines()) if m)


def test_metrics_count_what_happened(agent):
    assert agent.admin("/healthz") == (200, "ok\n")
    assert agent.admin("/readyz")[0] == 200
    status, before = agent.admin("/metrics")
    assert status == 200
    # At start: the cluster id, written once to a new store.
    assert metric(before, "floe_object_store_requests_total", op="put") == 1

    for n in range(3):  # three produce runs, three ingest files
        kcat("-P", "-b", agent.bootstrap, "-t", "metered", input="".join(f"m-{i}\n" for i in range(1000)))
    assert len(kcat_consume(agent.bootstrap, "metered")) == 3000

    _, text = agent.admin("/metrics")
    puts = metric(text, "floe_object_store_requests_total", op="put") - 1
    assert puts >= 3
    assert metric(text, "floe_object_store_bytes_total", op="put") > 3 * 1000 * 4
    assert metric(text, "floe_kafka_requests_total", api="Produce") >= 3
    assert metric(text, "floe_kafka_requests_total", api="Fetch") >= 1
    assert metric(text, "floe_kafka_request_duration_seconds_count", api="Produce") >= 3
    assert metric(text, "floe_ingest_flush_bytes_count") == puts
    assert "# TYPE floe_kafka_request_duration_seconds histogram" in text
    # Per topic, the store's latencies, and what is serving.
    assert metric(text, "floe_topic_produced_records_total", topic="metered") == 3000
    assert metric(text, "floe_topic_produced_bytes_total", topic="metered") > 3 * 1000 * 4
    assert metric(text, "floe_topic_fetched_bytes_total", topic="metered") > 3 * 1000 * 4
    assert metric(text, "floe_object_store_request_duration_seconds_count", op="put") == puts + 1
    assert re.search(r'^floe_build_info\{version="[0-9.]+",commit="\w+"\} 1$', text, re.M), text

    # After a restart the cache is cold: reads are ranged GETs, counted too.
    agent.restart()
    assert len(kcat_consume(agent.bootstrap, "metered")) == 3000
    _, text = agent.admin("/metrics")
    assert metric(text, "floe_object_store_requests_total", op="get") >= 1
    assert metric(text, "floe_object_store_bytes_total", op="get") > 0


def test_metastore_round_trips_are_timed(make_agent, metastore):
    """An agent on a remote metastore counts each request and times each
    answered one, by operation."""
    agent = make_agent("--metastore", metastore.address)
    kcat("-P", "-b", agent.bootstrap, "-t", "timed", input="a\nb\n")
    _, text = agent.admin("/metrics")
    sent = metric(text, "floe_metastore_requests_total", op="IngestCommit")
    timed = metric(text, "floe_metastore_request_duration_seconds_count", op="IngestCommit")
    assert sent >= 1 and timed == sent, (sent, timed)
    assert metric(text, "floe_metastore_request_duration_seconds_sum", op="IngestCommit") > 0


def test_group_lag_is_a_metric(make_agent):
    """`floe_group_lag`: the log end offset less the group's committed
    offset, by partition, read every group_lag_interval."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    agent = make_agent("--group-lag-interval", "200ms")
    kcat("-P", "-b", agent.bootstrap, "-t", "lagged", "-p", "0", input="".join(f"{i}\n" for i in range(5)))
    consumer = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "lagging",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("lagged", 0, 2)], asynchronous=False)
    consumer.close()
    lag = None
    deadline = time.time() + 15
    while time.time() < deadline and lag != 3:
        _, text = agent.admin("/metrics")
        lag = metric(text, "floe_group_lag", group="lagging", topic="lagged", partition="0")
        time.sleep(0.2)
    assert lag == 3, text
