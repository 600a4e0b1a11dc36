"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 over TLS (Kafka's SASL_SSL): an admin
(PLAIN) sets users' credentials with confluent-kafka's admin client and with
`floe users`; kcat, confluent-kafka and kafka-python then authenticate with
them, and a wrong password, an unknown user or a deleted credential gets
SASL_AUTHENTICATION_FAILED. The credentials live in the metastore, so they
outlive the agent."""

import os
import subprocess

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from conftest import FLOE
from test_tls import certs, kcat  # noqa: F401 (the certificates fixture)

MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def client_config(agent, certs, mechanism, user, password):
    return {"bootstrap.servers": agent.bootstrap, "security.protocol": "sasl_ssl",
            "ssl.ca.location": str(certs / "ca.pem"), "sasl.mechanisms": mechanism,
            "sasl.username": user, "sasl.password": password}


def kcat_args(certs, mechanism, user, password):
    return ["-X", "security.protocol=sasl_ssl", "-X", f"ssl.ca.location={certs / 'ca.pem'}",
            "-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={user}",
            "-X", f"sasl.password={password}"]


def can_list(agent, certs, mechanism, user, password):
    """Whether kcat gets metadata as this user, and what it said."""
    got = kcat("-L", "-b", agent.bootstrap, "-m", "5", *kcat_args(certs, mechanism, user, password))
    return got.returncode == 0, got.stderr


@pytest.fixture
def secured(make_agent, certs, tmp_path):
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\n")
    agent = make_agent("--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                       "--sasl-plain-users", str(users), "--sasl-mechanisms", MECHANISMS)
    admin = AdminClient(client_config(agent, certs, "PLAIN", "admin", "admin-secret"))
    return agent, admin


def test_scram_users_set_by_an_admin_authenticate_with_three_clients(secured, certs):
    agent, admin = secured
    upserts = [
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                     b"alice-secret"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                     b"bob-secret"),
    ]
    for user, future in admin.alter_user_scram_credentials(upserts).items():
        future.result(timeout=30)

    described = admin.describe_user_scram_credentials().result(timeout=30)
    got = {user: [(i.mechanism, i.iterations) for i in d.scram_credential_infos]
           for user, d in described.items()}
    assert got == {"alice": [(ScramMechanism.SCRAM_SHA_256, 8192)],
                   "bob": [(ScramMechanism.SCRAM_SHA_512, 4096)]}

    # Kafka's refusals: too few iterations, deleting what is not there.
    weak = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"x")])
    with pytest.raises(KafkaException, match="UNACCEPTABLE_CREDENTIAL|Too few iterations"):
        weak["carol"].result(timeout=30)
    missing = admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        "alice", ScramMechanism.SCRAM_SHA_512)])
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND|does not exist"):
        missing["alice"].result(timeout=30)

    # kcat produces as alice (SHA-256) ...
    sent = kcat("-P", "-b", agent.bootstrap, "-t", "scrammed",
                *kcat_args(certs, "SCRAM-SHA-256", "alice", "alice-secret"),
                input="".join(f"v{i}\n" for i in range(50)))
    assert sent.returncode == 0 and "Delivery failed" not in sent.stderr, sent.stderr

    # ... confluent-kafka consumes as bob (SHA-512) ...
    c = Consumer({**client_config(agent, certs, "SCRAM-SHA-512", "bob", "bob-secret"),
                  "group.id": "scram", "auto.offset.reset": "earliest"})
    c.subscribe(["scrammed"])
    values = []
    for _ in range(60):
        for m in c.consume(50, timeout=1):
            if not m.error():
                values.append(m.value().decode())
        if len(values) >= 50:
            break
    c.close()
    assert values == [f"v{i}" for i in range(50)]

    # ... and kafka-python as alice.
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(
        "scrammed", bootstrap_servers=agent.bootstrap, security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
        sasl_plain_password="alice-secret", ssl_cafile=str(certs / "ca.pem"),
        auto_offset_reset="earliest", consumer_timeout_ms=10000)
    assert [m.value.decode() for m in consumer] == [f"v{i}" for i in range(50)]
    consumer.close()

    # Wrong passwords, the wrong mechanism and unknown users are refused alike.
    for mechanism, user, password in [("SCRAM-SHA-256", "alice", "alice-secrets"),
                                      ("SCRAM-SHA-512", "alice", "alice-secret"),
                                      ("SCRAM-SHA-256", "mallory", "alice-secret")]:
        ok, said = can_list(agent, certs, mechanism, user, password)
        assert not ok and "Invalid user credentials" in said, (user, said)
    assert agent.alive()

    # Deleted, bob is out.
    gone = admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        "bob", ScramMechanism.SCRAM_SHA_512)])
    gone["bob"].result(timeout=30)
    ok, said = can_list(agent, certs, "SCRAM-SHA-512", "bob", "bob-secret")
    assert not ok and "Invalid user credentials" in said, said
    assert can_list(agent, certs, "SCRAM-SHA-256", "alice", "alice-secret")[0]


def test_floe_users_sets_lists_and_deletes_credentials_that_outlive_the_agent(secured, certs):
    agent, _ = secured
    tool = [FLOE, "users", "--bootstrap-server", agent.bootstrap, "--tls-ca",
            str(certs / "ca.pem"), "--sasl-user", "admin"]
    env = {**os.environ, "FLOE_SASL_PASSWORD": "admin-secret"}

    def run(*args, password=None):
        e = {**env, "FLOE_USER_PASSWORD": password} if password else env
        return subprocess.run([*tool[:2], *args, *tool[2:]], capture_output=True, text=True,
                              timeout=60, env=e)

    set_ = run("set", "carol", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
               password="carol's secret")
    assert set_.returncode == 0, set_.stderr
    listed = run("list", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    import json
    assert json.loads(listed.stdout)["users"] == [
        {"user": "carol", "mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    assert can_list(agent, certs, "SCRAM-SHA-512", "carol", "carol's secret")[0]

    # Too few iterations: the broker's refusal, and a non-zero exit.
    weak = run("set", "dave", "--iterations", "100", password="x")
    assert weak.returncode != 0 and "Too few iterations" in weak.stderr, weak.stderr

    # A restarted agent reads carol's credential from its metastore.
    agent.stop()
    agent.start()
    assert can_list(agent, certs, "SCRAM-SHA-512", "carol", "carol's secret")[0]

    deleted = run("delete", "carol", "--mechanism", "SCRAM-SHA-512")
    assert deleted.returncode == 0, deleted.stderr
    ok, said = can_list(agent, certs, "SCRAM-SHA-512", "carol", "carol's secret")
    assert not ok and "Invalid user credentials" in said, said
    again = run("delete", "carol", "--mechanism", "SCRAM-SHA-512")
    assert again.returncode != 0 and "does not exist" in again.stderr, again.stderr
