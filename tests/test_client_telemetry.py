"""Client telemetry (KIP-714) with librdkafka: an agent asked for the
producer's metrics gets them pushed and shows each client's latest values
on its admin port; with no subscription, clients push nothing."""

import time

from confluent_kafka import Producer

from test_group_protocol import make_topic


def client_metrics(agent):
    status, body = agent.admin("/client-metrics")
    assert status == 200, body
    return [line for line in body.splitlines() if line.startswith("floe_client_metric{")]


def test_a_producer_pushes_its_metrics_and_the_agent_shows_them(make_agent):
    agent = make_agent("--client-metrics", "org.apache.kafka.producer.",
                       "--client-metrics-interval", "1s")
    make_topic(agent.bootstrap, "pushed", 1)
    p = Producer({"bootstrap.servers": agent.bootstrap, "client.id": "pusher", "linger.ms": 5})
    try:
        def pushed():
            return [line for line in client_metrics(agent) if 'client_id="pusher"' in line]

        deadline = time.time() + 30
        while time.time() < deadline and not pushed():
            p.produce("pushed", value=b"v")
            p.poll(0.2)
        shown = pushed()
        assert shown, f"no metrics pushed within 30 s: {client_metrics(agent)}"
        names = {line.split('name="')[1].split('"')[0] for line in shown}
        assert names and all(n.startswith("org.apache.kafka.producer.") for n in names), names
        print(f"{len(names)} producer metrics pushed, e.g. {sorted(names)[:3]}")
    finally:
        p.flush(10)


def test_without_a_subscription_clients_push_nothing(make_agent):
    agent = make_agent()
    make_topic(agent.bootstrap, "quiet", 1)
    p = Producer({"bootstrap.servers": agent.bootstrap, "client.id": "quiet"})
    for _ in range(20):
        p.produce("quiet", value=b"v")
        p.poll(0.1)
    p.flush(10)
    time.sleep(1)
    assert client_metrics(agent) == []
