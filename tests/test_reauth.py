"""SASL re-authentication (KIP-368, Kafka's connections.max.reauth.ms): the
agent tells clients how long their session lasts; librdkafka
re-authenticates on its connection before then and goes on producing; a
client that does not is disconnected at its next request; and a
re-authentication may not change the principal."""

import socket
import struct
import time

from confluent_kafka import Producer

from test_bad_input import recv_exact, string

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
LIFETIME_S = 6


def sasl_agent(make_agent, tmp_path, lifetime_s=LIFETIME_S):
    users = tmp_path / "users"
    users.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    return make_agent("--sasl-plain-users", str(users),
                      "--connections-max-reauth", f"{lifetime_s}s")


def call(s, api, version, correlation_id, body):
    """One request (header v1) and its response's body after the
    correlation id (header v0)."""
    frame = struct.pack(">hhi", api, version, correlation_id) + string("raw") + body
    s.sendall(struct.pack(">i", len(frame)) + frame)
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    response = recv_exact(s, size)
    assert struct.unpack(">i", response[:4])[0] == correlation_id
    return response[4:]


def plain(s, user, correlation_id):
    """SaslHandshake v1 and SaslAuthenticate v1 with PLAIN: (error code,
    session lifetime ms)."""
    handshake = call(s, 17, 1, correlation_id, string("PLAIN"))
    assert struct.unpack(">h", handshake[:2])[0] == 0
    token = f"\0{user}\0{USERS[user]}".encode()
    answer = call(s, 36, 1, correlation_id + 1, struct.pack(">i", len(token)) + token)
    error = struct.unpack(">h", answer[:2])[0]
    message_len = struct.unpack(">h", answer[2:4])[0]
    rest = answer[4 + max(message_len, 0):]
    auth_len = struct.unpack(">i", rest[:4])[0]
    lifetime = struct.unpack(">q", rest[4 + max(auth_len, 0):12 + max(auth_len, 0)])[0]
    return error, lifetime


def metadata_works(s, correlation_id):
    """A Metadata v1 request for no topics gets an answer."""
    call(s, 3, 1, correlation_id, struct.pack(">i", 0))
    return True


def closed_at_request(s, correlation_id):
    """A Metadata request makes the agent close the connection at once
    (not a wait that runs out)."""
    frame = struct.pack(">hhi", 3, 1, correlation_id) + string("raw") + struct.pack(">i", 0)
    try:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        s.settimeout(3)
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_librdkafka_reauthenticates_and_keeps_producing(make_agent, tmp_path):
    # librdkafka renews at 90% of the lifetime: sessions long enough that a
    # loaded machine's delays fit in that tenth.
    lifetime_s = 8
    agent = sasl_agent(make_agent, tmp_path, lifetime_s)
    errors, delivered = [], []
    p = Producer({"bootstrap.servers": agent.bootstrap, "security.protocol": "sasl_plaintext",
                  "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
                  "sasl.password": USERS["alice"], "linger.ms": 5})
    started = time.time()
    while time.time() - started < 2 * lifetime_s + 2:
        p.produce("reauth", b"v", on_delivery=lambda e, m: (errors if e else delivered).append(e))
        p.poll(0.2)
    p.flush(30)
    assert errors == [] and len(delivered) > 10
    status, metrics = agent.admin("/metrics")
    renewed = [line for line in metrics.splitlines()
               if line.startswith("floe_sasl_reauthentications_total ")]
    assert renewed and float(renewed[0].split()[1]) >= 2, renewed
    assert "SASL session expired" not in agent.log()


def test_a_client_that_does_not_reauthenticate_is_disconnected(make_agent, tmp_path):
    agent = sasl_agent(make_agent, tmp_path)
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        error, lifetime = plain(s, "alice", 1)
        assert (error, lifetime) == (0, LIFETIME_S * 1000)
        assert metadata_works(s, 3)
        # Re-authenticated in time: the session starts again.
        time.sleep(LIFETIME_S - 2)
        assert plain(s, "alice", 4) == (0, LIFETIME_S * 1000)
        time.sleep(LIFETIME_S / 2)
        assert metadata_works(s, 6), "within the new session"
        time.sleep(LIFETIME_S / 2 + 1.5)
        assert closed_at_request(s, 7), "the session ended"
    assert "SASL session expired" in agent.log()

    # Another principal on the same connection is refused, and closes it.
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        assert plain(s, "alice", 1)[0] == 0
        time.sleep(1.1)  # Kafka takes no re-authentication within a second
        assert plain(s, "bob", 3)[0] == 58  # SASL_AUTHENTICATION_FAILED
        assert closed_at_request(s, 5)


def test_only_sasl_authenticate_follows_a_handshake(make_agent, tmp_path):
    """Kafka's AUTHENTICATE state: after a SaslHandshake, an ApiVersions (or
    anything but SaslAuthenticate) closes the connection; before it,
    ApiVersions is answered."""
    agent = sasl_agent(make_agent, tmp_path)
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        call(s, 18, 0, 1, b"")  # ApiVersions v0 first: answered
        handshake = call(s, 17, 1, 2, string("PLAIN"))
        assert struct.unpack(">h", handshake[:2])[0] == 0
        frame = struct.pack(">hhi", 18, 0, 3) + string("raw")
        s.sendall(struct.pack(">i", len(frame)) + frame)
        s.settimeout(3)
        try:
            closed = s.recv(1) == b""
        except ConnectionResetError:
            closed = True
        assert closed, "an ApiVersions between handshake and authentication closes"
